//! `unshare` and `setns`, wrapped: the kernel refuses some namespace
//! changes to a process with more than one thread, and the runtime's
//! saver thread (`crash.rs`) would make every traced program one. The
//! saver ends for the call and starts again after it.
//!
//! `unshare` of a user namespace (`CLONE_NEWUSER`) and the flags that
//! stop sharing what threads share (`CLONE_VM`, `CLONE_SIGHAND`,
//! `CLONE_THREAD`) need a single thread; `setns` into a user namespace
//! does, and into a mount namespace needs the caller's filesystem
//! information not to be shared, which every thread shares. So `setns`
//! always pauses the saver (its `nstype` may be 0, any kind). A crash or
//! SIGUSR2 in that moment saves nothing. A program that makes the system
//! call itself (`syscall(SYS_unshare, ...)`) is not followed.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use ichnos_buf::fill::ErrnoGuard;

/// The C library's `unshare` and `setns` (0: not there).
static REAL_UNSHARE: AtomicUsize = AtomicUsize::new(0);
static REAL_SETNS: AtomicUsize = AtomicUsize::new(0);

/// Looks both up, at the start.
pub(crate) fn resolve() {
    // SAFETY: dlsym with NUL-terminated names.
    unsafe {
        REAL_UNSHARE.store(
            libc::dlsym(libc::RTLD_NEXT, c"unshare".as_ptr()) as usize,
            Ordering::Relaxed,
        );
        REAL_SETNS.store(
            libc::dlsym(libc::RTLD_NEXT, c"setns".as_ptr()) as usize,
            Ordering::Relaxed,
        );
    }
}

/// `unshare` flags that the kernel grants a process of one thread only.
const ONE_THREAD_FLAGS: c_int =
    libc::CLONE_NEWUSER | libc::CLONE_VM | libc::CLONE_SIGHAND | libc::CLONE_THREAD;

/// Runs `call` with the saver paused if `pause`, keeping the call's
/// `errno`.
fn without_saver(pause: bool, call: impl FnOnce() -> c_int) -> c_int {
    let paused = pause && crate::crash::pause_saver();
    let result = call();
    if paused {
        let _errno = ErrnoGuard::save();
        crate::crash::resume_saver();
    }
    result
}

type OneArg = extern "C" fn(c_int) -> c_int;
type TwoArgs = extern "C" fn(c_int, c_int) -> c_int;

/// The C library's `unshare`, after the saver paused where `flags` need
/// a single thread.
#[no_mangle]
pub extern "C" fn unshare(flags: c_int) -> c_int {
    without_saver(flags & ONE_THREAD_FLAGS != 0, || {
        match REAL_UNSHARE.load(Ordering::Relaxed) {
            // SAFETY: the system call with its one argument.
            0 => unsafe { libc::syscall(libc::SYS_unshare, flags) as c_int },
            real => {
                // SAFETY: dlsym's address of the C library's `unshare`,
                // which has this signature.
                let real = unsafe { std::mem::transmute::<usize, OneArg>(real) };
                real(flags)
            }
        }
    })
}

/// The C library's `setns`, after the saver paused.
#[no_mangle]
pub extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    without_saver(true, || match REAL_SETNS.load(Ordering::Relaxed) {
        // SAFETY: the system call with its two arguments.
        0 => unsafe { libc::syscall(libc::SYS_setns, fd, nstype) as c_int },
        real => {
            // SAFETY: dlsym's address of the C library's `setns`, which
            // has this signature.
            let real = unsafe { std::mem::transmute::<usize, TwoArgs>(real) };
            real(fd, nstype)
        }
    })
}
