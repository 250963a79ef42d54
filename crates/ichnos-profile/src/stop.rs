//! Ctrl-C and `kill`: SIGINT and SIGTERM set a flag that a recording
//! polls, so that it stops cleanly (the target stopped, the recording
//! closed) instead of dying with its last chunk unwritten.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the handler.
static STOP: AtomicBool = AtomicBool::new(false);

/// SIGINT and SIGTERM were ignored when ichnos started (a shell's `&`
/// ignores SIGINT): a command it runs is started with them ignored, as
/// it would be run alone.
static INT_IGNORED: AtomicBool = AtomicBool::new(false);
static TERM_IGNORED: AtomicBool = AtomicBool::new(false);

/// Whether `sig` (SIGINT or SIGTERM) was ignored before
/// [`catch_stop_signals`] caught it. Async-signal-safe.
pub(crate) fn ignored_at_start(sig: libc::c_int) -> bool {
    match sig {
        libc::SIGINT => INT_IGNORED.load(Ordering::Relaxed),
        libc::SIGTERM => TERM_IGNORED.load(Ordering::Relaxed),
        _ => false,
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the handler for SIGINT and SIGTERM, and returns the flag it
/// sets: pass it to [`crate::record()`] as its `stop`.
#[must_use = "the flag to pass to record()"]
pub fn catch_stop_signals() -> &'static AtomicBool {
    // SAFETY: sigaction with a handler that only stores to an atomic
    // (async-signal-safe); `action` is fully initialised.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&raw mut action.sa_mask);
        for (sig, ignored) in [(libc::SIGINT, &INT_IGNORED), (libc::SIGTERM, &TERM_IGNORED)] {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &raw const action, &raw mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                // Still caught by ichnos (`kill -INT` stops a recording
                // made in the background; the terminal's Ctrl-C does not
                // reach a background job), but not by its command.
                ignored.store(true, Ordering::Relaxed);
            }
        }
    }
    &STOP
}
