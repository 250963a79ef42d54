//! Sleeping and waking through futex words in the shared header: a
//! waiter announces itself before it sleeps, a waker bumps the word
//! before it looks for waiters (both `SeqCst`), so that no wakeup is lost.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

/// Bumps a futex word and wakes its waiters if any announced themselves;
/// whether any had.
pub(super) fn bump_and_wake(word: &AtomicU32, waiting: &AtomicU32) -> bool {
    word.fetch_add(1, Ordering::SeqCst);
    // Store-load ordering (Dekker): either the waiter sees the new word
    // and does not sleep, or we see its `waiting` and wake it. The waiter's
    // side is the kernel's full barrier in futex_wait. The loom model
    // (tests/loom_models.rs) deadlocks without this pair of barriers.
    fence(Ordering::SeqCst);
    if waiting.load(Ordering::SeqCst) == 0 {
        return false;
    }
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 in shared memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
        );
    }
    true
}

/// Sleeps while `word == expected`, at most `timeout`.
pub(super) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos().cast_signed()),
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: FUTEX_WAIT (shared, since the word may be in memory shared
    // with another process) on a valid, aligned u32; the timespec outlives
    // the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
        );
    }
}
