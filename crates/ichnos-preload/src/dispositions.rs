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

use crate::handlers;

/// The C library's `sigaction`, `signal` and the other functions that
/// set a handler (0: not looked up yet).
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_BSD_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SSIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SYSV_SIGNAL: AtomicUsize = AtomicUsize::new(0);

type Sigaction = extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type Signal = extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// Looks them up, at the start (before the runtime installs a handler).
pub(crate) fn resolve() {
    let _ = real(&REAL_SIGACTION, &[c"sigaction", c"__sigaction"]);
    let _ = real(&REAL_SIGNAL, &[c"signal", c"bsd_signal"]);
    let _ = real(&REAL_BSD_SIGNAL, &[c"bsd_signal", c"signal"]);
    let _ = real(&REAL_SSIGNAL, &[c"ssignal", c"signal"]);
    let _ = real(&REAL_SYSV_SIGNAL, &[c"sysv_signal", c"__sysv_signal"]);
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
    // Looked up before the lock (`handlers::installing`).
    let _ = real(&REAL_SIGACTION, &[c"sigaction", c"__sigaction"]);
    // SAFETY: the caller's arguments, passed on.
    handlers::installing(|| unsafe { set_action(sig, act, old) })
}

/// [`sigaction`], [`handlers::installing`].
///
/// # Safety
/// As `sigaction(2)`.
unsafe fn set_action(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let (kept, kept_flags) = handlers::program(sig);
    // SAFETY: `act` is null or the caller's valid action.
    let asked = unsafe { act.as_ref() }.copied();
    let handler = asked.map(|a| a.sa_sigaction);
    let wrap = handler.is_some_and(|h| handlers::to_wrap(sig, h));
    let act_given = act;
    let mut instead = None;
    if let Some(mut asked) = asked {
        if wrap {
            // The program's handler, run through the runtime's entry
            // point (with the program's flags and mask).
            handlers::keep(sig, asked.sa_sigaction, asked.sa_flags);
            asked.sa_sigaction = handlers::entry_address();
            instead = Some(asked);
        } else if asked.sa_sigaction == libc::SIG_DFL {
            // The default set where the runtime stands in for it: the
            // runtime's.
            instead = crate::crash::standing_in_for(sig);
        }
    }
    let act = instead.as_ref().map_or(act_given, std::ptr::from_ref);
    // SAFETY: the caller's arguments (or the action in their place),
    // passed on.
    let result = unsafe { real_sigaction(sig, act, old) };
    if result != 0 && wrap {
        handlers::keep(sig, kept, kept_flags);
    } else if result == 0 && !wrap && handler.is_some_and(|h| h != handlers::entry_address()) {
        handlers::keep(sig, 0, 0);
    }
    if result == 0 && !old.is_null() {
        // SAFETY: filled in by the call above.
        let previous = unsafe { &mut *old };
        previous.sa_sigaction = handlers::as_seen(previous.sa_sigaction, kept);
        if crate::crash::stands_in_for_default(sig, previous.sa_sigaction) {
            previous.sa_sigaction = libc::SIG_DFL;
            previous.sa_flags = 0;
            // SAFETY: a sigset_t of the caller's to empty.
            unsafe { libc::sigemptyset(&raw mut previous.sa_mask) };
        }
    }
    result
}

/// The previous handler as the program sees it: its own where the
/// runtime's entry point ran it (`kept`: the handler kept before the
/// call), the default where it was the runtime's stand-in for it.
fn reported(
    sig: c_int,
    previous: libc::sighandler_t,
    kept: libc::sighandler_t,
) -> libc::sighandler_t {
    let previous = handlers::as_seen(previous, kept);
    if crate::crash::stands_in_for_default(sig, previous) {
        libc::SIG_DFL
    } else {
        previous
    }
}

/// The default set where the runtime stands in for it: the runtime's
/// handler put (back) in its place, as `sigaction` puts it; the previous
/// handler, as reported, or `SIG_ERR`. `None` where the runtime does not
/// stand in for `sig`'s default. [`handlers::installing`].
fn default_kept_ours(sig: c_int) -> Option<libc::sighandler_t> {
    let ours = crate::crash::standing_in_for(sig)?;
    let (kept, _) = handlers::program(sig);
    // SAFETY: sigaction is plain data, all-zero valid.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a valid action of the runtime's; a struct of ours for the
    // previous one.
    if unsafe { real_sigaction(sig, &raw const ours, &raw mut old) } != 0 {
        return Some(libc::SIG_ERR);
    }
    handlers::keep(sig, 0, 0);
    Some(reported(sig, old.sa_sigaction, kept))
}

/// Sets `sig`'s handler through the C library's function of that
/// signature found first under `names` (kept in `slot`), which installs
/// it with `flags` (of which only `SA_RESETHAND` is looked at): a handler
/// of the program's run through the runtime's entry point
/// (`handlers.rs`), the runtime's handler standing in for the default
/// where it does.
fn set_handler(
    sig: c_int,
    handler: libc::sighandler_t,
    flags: c_int,
    slot: &AtomicUsize,
    names: &[&std::ffi::CStr],
) -> libc::sighandler_t {
    // Looked up before the lock (`handlers::installing`).
    let _ = real(&REAL_SIGACTION, &[c"sigaction", c"__sigaction"]);
    let address = real(slot, names);
    handlers::installing(|| set_handler_alone(sig, handler, flags, address))
}

/// [`set_handler`], [`handlers::installing`], with the C library's
/// function at `address` (0: none found).
fn set_handler_alone(
    sig: c_int,
    handler: libc::sighandler_t,
    flags: c_int,
    address: usize,
) -> libc::sighandler_t {
    if handler == libc::SIG_DFL {
        if let Some(previous) = default_kept_ours(sig) {
            return previous;
        }
    }
    if address == 0 {
        return libc::SIG_ERR;
    }
    let (kept, kept_flags) = handlers::program(sig);
    let wrap = handlers::to_wrap(sig, handler);
    if wrap {
        handlers::keep(sig, handler, flags);
    }
    // SAFETY: dlsym's address of a C library function of this signature
    // (`signal`, `bsd_signal`, `ssignal`, `sysv_signal`).
    let real = unsafe { std::mem::transmute::<usize, Signal>(address) };
    let previous = real(
        sig,
        if wrap {
            handlers::entry_address()
        } else {
            handler
        },
    );
    if previous == libc::SIG_ERR {
        if wrap {
            handlers::keep(sig, kept, kept_flags);
        }
        return previous;
    }
    if !wrap && handler != handlers::entry_address() {
        handlers::keep(sig, 0, 0);
    }
    reported(sig, previous, kept)
}

/// The C library's `signal`, whose previous handler is reported as the
/// default where it was the runtime's stand-in for it.
#[no_mangle]
pub extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(
        sig,
        handler,
        libc::SA_RESTART,
        &REAL_SIGNAL,
        &[c"signal", c"bsd_signal"],
    )
}

/// `bsd_signal`, glibc's other name of `signal`, as [`signal`].
#[no_mangle]
pub extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(
        sig,
        handler,
        libc::SA_RESTART,
        &REAL_BSD_SIGNAL,
        &[c"bsd_signal", c"signal"],
    )
}

/// `ssignal`, which glibc makes a third name of `signal`, as [`signal`].
#[no_mangle]
pub extern "C" fn ssignal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(
        sig,
        handler,
        libc::SA_RESTART,
        &REAL_SSIGNAL,
        &[c"ssignal", c"signal"],
    )
}

/// `sysv_signal` (a handler reset to the default when it runs), as
/// [`signal`].
#[no_mangle]
pub extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    set_handler(
        sig,
        handler,
        libc::SA_RESETHAND | libc::SA_NODEFER,
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

/// System V's `sigset`, made of [`sigaction`] and the thread's signal
/// mask as the C library makes it (its own calls `sigaction` inside, where
/// it cannot be followed, and changes the mask, which the lock that
/// [`sigaction`] takes, held with signals blocked, must not see): a
/// disposition is installed with no flags and an empty mask and takes
/// `sig` out of the thread's mask; `SIG_HOLD` adds it to the mask and
/// changes no action. The previous disposition is `SIG_HOLD` where `sig`
/// was blocked, else the previous handler as the program sees it.
#[no_mangle]
pub extern "C" fn sigset(sig: c_int, disposition: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: sigset_t is plain data, all-zero valid; filled below.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut was: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a set of ours; sigaddset refuses a bad number.
    if unsafe { libc::sigemptyset(&raw mut set) != 0 || libc::sigaddset(&raw mut set, sig) != 0 } {
        return libc::SIG_ERR;
    }
    // SAFETY: sigaction is plain data, all-zero valid.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    if disposition == SIG_HOLD {
        // SAFETY: sets of ours, on the calling thread.
        if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, &raw mut was) } != 0 {
            return libc::SIG_ERR;
        }
        // SAFETY: a set pthread_sigmask filled.
        if unsafe { libc::sigismember(&raw const was, sig) } == 1 {
            return SIG_HOLD;
        }
        // SAFETY: a struct of ours for the action.
        if unsafe { sigaction(sig, std::ptr::null(), &raw mut previous) } != 0 {
            return libc::SIG_ERR;
        }
        return previous.sa_sigaction;
    }
    // SAFETY: as above; the action is filled below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = disposition;
    // SAFETY: the action's set, and a struct of ours for the previous.
    unsafe {
        libc::sigemptyset(&raw mut action.sa_mask);
        if sigaction(sig, &raw const action, &raw mut previous) != 0 {
            return libc::SIG_ERR;
        }
        if libc::pthread_sigmask(libc::SIG_UNBLOCK, &raw const set, &raw mut was) != 0 {
            return libc::SIG_ERR;
        }
        if libc::sigismember(&raw const was, sig) == 1 {
            return SIG_HOLD;
        }
    }
    previous.sa_sigaction
}
