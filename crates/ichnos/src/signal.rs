//! Ctrl-C and `kill`: SIGINT and SIGTERM set a flag the long-running
//! commands poll, so that a recording stops cleanly instead of dying.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the handler.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn catch_stop_signals() {
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
}
