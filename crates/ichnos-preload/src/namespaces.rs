//! `unshare` and `setns`, wrapped: the kernel refuses some namespace
//! changes to a process with more than one thread, and the runtime's
//! saver thread (`crash.rs`) would make every traced program one. The
//! saver ends for such a call and starts again after it.
//!
//! `unshare` of a user namespace (`CLONE_NEWUSER`) and the flags that
//! stop sharing what threads share (`CLONE_VM`, `CLONE_SIGHAND`,
//! `CLONE_THREAD`) need a single thread; `setns` into a user namespace
//! does, and into a mount namespace needs the caller's filesystem
//! information not to be shared, which every thread shares. A `setns`
//! that does not say which kind (`nstype` 0) is asked its descriptor's
//! (`NS_GET_NSTYPE`); one that cannot say pauses the saver too. A crash
//! or SIGUSR2 in that moment saves nothing. A program that makes the
//! system call itself (`syscall(SYS_unshare, ...)`) is not followed.

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

/// `setns` kinds that need one thread (a user namespace) or a filesystem
/// information of the caller's own (a mount namespace).
const ONE_THREAD_KINDS: c_int = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;

/// `NS_GET_NSTYPE` (`_IO(0xb7, 3)`): the kind of namespace a descriptor
/// of `/proc/PID/ns` refers to.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Whether `setns(fd, nstype)` needs the saver paused.
fn setns_needs_one_thread(fd: c_int, nstype: c_int) -> bool {
    if nstype != 0 {
        // A kind, or a pidfd's set of kinds.
        return nstype & ONE_THREAD_KINDS != 0;
    }
    // SAFETY: an ioctl that only reads what the descriptor refers to; it
    // fails on a descriptor of anything else.
    let kind = unsafe { libc::ioctl(fd, NS_GET_NSTYPE) };
    kind < 0 || kind & ONE_THREAD_KINDS != 0
}

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

/// The C library's `setns`, after the saver paused where the namespace
/// needs a single thread.
#[no_mangle]
pub extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    let pause = {
        let _errno = ErrnoGuard::save();
        setns_needs_one_thread(fd, nstype)
    };
    without_saver(pause, || match REAL_SETNS.load(Ordering::Relaxed) {
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
