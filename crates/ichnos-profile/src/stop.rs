//! Ctrl-C and `kill`: SIGINT and SIGTERM set a flag that a recording
//! polls, so that it stops cleanly (the target stopped, the recording
//! closed) instead of dying with its last chunk unwritten.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the handler.
static STOP: AtomicBool = AtomicBool::new(false);

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
        libc::sigaction(libc::SIGINT, &raw const action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &raw const action, std::ptr::null_mut());
    }
    &STOP
}
