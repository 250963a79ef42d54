//! `daemon(3)`, made here as the C library makes it.
//!
//! The C library's `daemon` forks and ends the parent with its own
//! `_exit`, past the runtime's wrapper (`ending.rs`): the parent's last
//! buffers, a daemon's whole start-up, were lost, and the process read as
//! cut short. The runtime's `daemon` does what glibc's does (2.36,
//! `misc/daemon.c`), step by step, with the calls going through the
//! runtime: `fork` (whose handlers give the child its own channel), the
//! parent's `_exit` (which hands the trace over first), then, in the
//! child, `setsid`, `chdir("/")` unless `nochdir`, and, unless `noclose`,
//! standard input, output and error made `/dev/null` (which must be that
//! character device, else `ENODEV`).

use std::ffi::c_int;

/// `/dev/null`'s device numbers on Linux.
const DEV_NULL: (u32, u32) = (1, 3);

/// Detaches the process from its terminal and runs it on in the
/// background, as the C library's `daemon` does; the trace of the parent
/// is handed over before it ends.
#[no_mangle]
pub extern "C" fn daemon(nochdir: c_int, noclose: c_int) -> c_int {
    // SAFETY: fork, as the C library's daemon calls it; the child runs on
    // with this thread only, as there.
    match unsafe { libc::fork() } {
        -1 => return -1,
        0 => {}
        _ => crate::ending::exit_without_hooks(0),
    }
    // SAFETY: setsid and chdir with a NUL-terminated path have no other
    // preconditions.
    unsafe {
        if libc::setsid() == -1 {
            return -1;
        }
        if nochdir == 0 {
            libc::chdir(c"/".as_ptr());
        }
    }
    if noclose == 0 {
        return null_standard_streams();
    }
    0
}

/// Makes standard input, output and error `/dev/null`: 0, or -1 with
/// `errno` set (`ENODEV` where `/dev/null` is not that device). The open
/// and the closes of a failure are system calls, as the C library's are
/// (no cancellation point, no other library's wrapper); the last close
/// is the C library's `close`, as there.
fn null_standard_streams() -> c_int {
    // SAFETY: openat of a NUL-terminated path; fstat into a stat of ours;
    // dup2 and close of the descriptor opened here.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/dev/null".as_ptr(),
            libc::O_RDWR,
        ) as c_int;
        if fd == -1 {
            return -1;
        }
        let close_quietly = |fd: c_int| {
            let _errno = ichnos_buf::fill::ErrnoGuard::save();
            libc::syscall(libc::SYS_close, fd);
        };
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &raw mut st) != 0 {
            close_quietly(fd);
            return -1;
        }
        let device = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
        if st.st_mode & libc::S_IFMT != libc::S_IFCHR || device != DEV_NULL {
            close_quietly(fd);
            *libc::__errno_location() = libc::ENODEV;
            return -1;
        }
        for standard in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            libc::dup2(fd, standard);
        }
        if fd > 2 {
            libc::close(fd);
        }
    }
    0
}
