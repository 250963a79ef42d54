//! A buffer's flushes run with the thread's asynchronous signals
//! blocked.
//!
//! A flush holds the slot's `busy` claim and resets its counters when the
//! flush function returns. A signal handler that ran inside it could not
//! write (its record would be dropped and counted), and one that never
//! returned (a `siglongjmp` out of it, as programs that bound a
//! computation by a timer do) would leave the claim held and the counters
//! as they were for good: the thread's buffer would never be flushed
//! again. Blocked, the signal waits until the flush is done, and its
//! handler writes after it. The two `pthread_sigmask` calls per flush
//! cost a trace runtime that hands 128 KiB buffers over 0.1 to 0.15 ns
//! per 16-byte record (BENCHMARKS.md), so a buffer can be told not to
//! block them (`FillBuffer::set_flush_blocks_signals`) where no handler
//! of the program's can run inside a flush. Faults stay deliverable: a
//! guarded buffer's guard page (`guard.rs`) is found by one.

/// Runs `f` with every asynchronous signal blocked on this thread, so that
/// no handler runs while the thread flushes and resets a buffer (or, for
/// a runtime, while it does what a handler must not interrupt). (A
/// guarded write, besides, has no bounds check that a flush could close,
/// unlike the checked path.) Faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
/// SIGTRAP) and SIGSYS stay deliverable. The mask is put back as it was,
/// `errno` as `pthread_sigmask` leaves it (untouched on success).
/// Async-signal-safe.
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigset manipulation on local values and pthread_sigmask on
    // the calling thread, restored below.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut block);
        for sync in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            // A seccomp filter's trap: blocked, the kernel would end the
            // process instead of running the sandbox's handler.
            libc::SIGSYS,
        ] {
            libc::sigdelset(&raw mut block, sync);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const block, &raw mut previous);
        let result = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const previous, std::ptr::null_mut());
        result
    }
}
