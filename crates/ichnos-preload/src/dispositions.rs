//! `sigaction` and `signal` (and `bsd_signal`, `ssignal`, `sysv_signal`
//! and `sigset`, the C library's other ways to set a handler), wrapped,
//! so that the program sees the
//! default action where the runtime's handler of a signal that ends the
//! program stands in for it (`crash.rs`, `ENDINGS`): a program that
//! decides by the action it finds at its start (`CPython` installs its
//! `KeyboardInterrupt` handler for SIGINT only over the default; a
//! handler found there is taken for one the embedding program installed)
//! behaves as it does untraced. Setting an action is passed through: a
//! handler the program installs replaces the runtime's, as before; but
//! the default set again (a program that saved the action it found and
//! puts it back, as readline does around its own handlers) puts the
//! runtime's back, reported as the default. The runtime's own calls use
//! the C library's functions directly ([`real_sigaction`]).

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The C library's `sigaction`, `signal` and the other functions that
/// set a handler (0: not looked up yet).
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_BSD_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SSIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SYSV_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGSET: AtomicUsize = AtomicUsize::new(0);

type Sigaction = extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type Signal = extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// Looks them up, at the start (before the runtime installs a handler).
pub(crate) fn resolve() {
    let _ = real(&REAL_SIGACTION, &[c"sigaction", c"__sigaction"]);
    let _ = real(&REAL_SIGNAL, &[c"signal", c"bsd_signal"]);
    let _ = real(&REAL_BSD_SIGNAL, &[c"bsd_signal", c"signal"]);
    let _ = real(&REAL_SSIGNAL, &[c"ssignal", c"signal"]);
    let _ = real(&REAL_SYSV_SIGNAL, &[c"sysv_signal", c"__sysv_signal"]);
    let _ = real(&REAL_SIGSET, &[c"sigset"]);
}

/// The next definition of the first of `names` there is, kept in `slot`.
fn real(slot: &AtomicUsize, names: &[&std::ffi::CStr]) -> usize {
    let known = slot.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    for name in names {
        // SAFETY: dlsym with a NUL-terminated name.
        let address = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if address != 0 {
            slot.store(address, Ordering::Relaxed);
            return address;
        }
    }
    0
}

/// The C library's `sigaction`, not the program's view of it.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` null or valid.
pub(crate) unsafe fn real_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    match real(&REAL_SIGACTION, &[c"sigaction", c"__sigaction"]) {
        0 => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
        address => {
            // SAFETY: dlsym's address of the C library's `sigaction`,
            // which has this signature; the arguments are the caller's.
            let real = unsafe { std::mem::transmute::<usize, Sigaction>(address) };
            real(sig, act, old)
        }
    }
}

/// The C library's `sigaction`, whose previous action is reported as the
/// default where it was the runtime's stand-in for it.
///
/// # Safety
/// As `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // The default set where the runtime stands in for it: the runtime's.
    // SAFETY: `act` is null or the caller's valid action.
    let ours = (!act.is_null() && unsafe { (*act).sa_sigaction } == libc::SIG_DFL)
        .then(|| crate::crash::standing_in_for(sig))
        .flatten();
    let act = ours.as_ref().map_or(act, std::ptr::from_ref);
    // SAFETY: the caller's arguments (or the runtime's action), passed on.
    let result = unsafe { real_sigaction(sig, act, old) };
    if result == 0 && !old.is_null() {
        // SAFETY: filled in by the call above.
        let previous = unsafe { &mut *old };
        if crate::crash::stands_in_for_default(sig, previous.sa_sigaction) {
            previous.sa_sigaction = libc::SIG_DFL;
            previous.sa_flags = 0;
            // SAFETY: a sigset_t of the caller's to empty.
            unsafe { libc::sigemptyset(&raw mut previous.sa_mask) };
        }
    }
    result
}

/// The previous handler as the program sees it: the default where it was
/// the runtime's stand-in for it.
fn reported(sig: c_int, previous: libc::sighandler_t) -> libc::sighandler_t {
    if crate::crash::stands_in_for_default(sig, previous) {
        libc::SIG_DFL
    } else {
        previous
    }
}

/// The default set where the runtime stands in for it: the runtime's
/// handler put (back) in its place, as `sigaction` puts it; the previous
/// handler, as reported, or `SIG_ERR`. `None` where the runtime does not
/// stand in for `sig`'s default.
fn default_kept_ours(sig: c_int) -> Option<libc::sighandler_t> {
    let ours = crate::crash::standing_in_for(sig)?;
    // SAFETY: sigaction is plain data, all-zero valid.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a valid action of the runtime's; a struct of ours for the
    // previous one.
    if unsafe { real_sigaction(sig, &raw const ours, &raw mut old) } != 0 {
        return Some(libc::SIG_ERR);
    }
    Some(reported(sig, old.sa_sigaction))
}

/// Sets `sig`'s handler through the C library's function of that
/// signature found first under `names` (kept in `slot`), with the
/// runtime's handler standing in for the default where it does.
fn set_handler(
    sig: c_int,
    handler: libc::sighandler_t,
    slot: &AtomicUsize,
    names: &[&std::ffi::CStr],
) -> libc::sighandler_t {
    if handler == libc::SIG_DFL {
        if let Some(previous) = default_kept_ours(sig) {
            return previous;
        }
    }
    match real(slot, names) {
        0 => libc::SIG_ERR,
        address => {
            // SAFETY: dlsym's address of a C library function of this
            // signature (`signal`, `bsd_signal`, `sysv_signal`, `sigset`).
            let real = unsafe { std::mem::transmute::<usize, Signal>(address) };
            let previous = real(sig, handler);
            if previous == libc::SIG_ERR {
                previous
            } else {
                reported(sig, previous)
            }
        }
    }
}

/// The C library's `signal`, whose previous handler is reported as the
/// default where it was the runtime's stand-in for it.
#[no_mangle]
pub extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(sig, handler, &REAL_SIGNAL, &[c"signal", c"bsd_signal"])
}

/// `bsd_signal`, glibc's other name of `signal`, as [`signal`].
#[no_mangle]
pub extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(sig, handler, &REAL_BSD_SIGNAL, &[c"bsd_signal", c"signal"])
}

/// `ssignal`, which glibc makes a third name of `signal`, as [`signal`].
#[no_mangle]
pub extern "C" fn ssignal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(sig, handler, &REAL_SSIGNAL, &[c"ssignal", c"signal"])
}

/// `sysv_signal` (a handler reset to the default when it runs), as
/// [`signal`].
#[no_mangle]
pub extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(
        sig,
        handler,
        &REAL_SYSV_SIGNAL,
        &[c"sysv_signal", c"__sysv_signal"],
    )
}

/// `__sysv_signal`, the name glibc's headers give `sysv_signal` calls.
#[no_mangle]
pub extern "C" fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    sysv_signal(sig, handler)
}

/// glibc's `SIG_HOLD`: `sigset`'s disposition that blocks the signal.
const SIG_HOLD: libc::sighandler_t = 2;

/// System V's `sigset`, as [`signal`]; `SIG_HOLD` is passed through.
/// Like the C library's, a disposition other than `SIG_HOLD` takes `sig`
/// out of the thread's signal mask, and a signal that was blocked reports
/// `SIG_HOLD` as the previous disposition.
#[no_mangle]
pub extern "C" fn sigset(sig: c_int, disposition: libc::sighandler_t) -> libc::sighandler_t {
    if disposition == libc::SIG_DFL && crate::crash::standing_in_for(sig).is_some() {
        let Some(previous) = default_kept_ours(sig) else {
            return libc::SIG_ERR;
        };
        if previous == libc::SIG_ERR {
            return previous;
        }
        // SAFETY: sigset_t is plain data, all-zero valid; filled below.
        let mut unblock: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut was: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: sets of ours; `sig` was accepted by sigaction above.
        let blocked = unsafe {
            libc::sigemptyset(&raw mut unblock);
            libc::sigaddset(&raw mut unblock, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &raw const unblock, &raw mut was) == 0
                && libc::sigismember(&raw const was, sig) == 1
        };
        return if blocked { SIG_HOLD } else { previous };
    }
    set_handler(sig, disposition, &REAL_SIGSET, &[c"sigset"])
}
