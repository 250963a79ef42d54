//! Trace buffers: where instrumented code and trace hardware put their
//! bytes before a recorder takes them.
//!
//! [`fill`] has per-thread *fill buffers* in the manner of DynamoRIO's
//! drx_buf: each thread writes records into its own memory with a few
//! instructions — reserve, store, commit — and the buffer either wraps
//! (circular, a flight recorder) or hands its bytes to a flush function
//! when full (trace). [`topa`] has *region-table buffers* in the manner of
//! the Linux Intel PT driver's ToPA output: one byte stream laid over many
//! regions of different sizes, written by a producer and drained by a
//! consumer that can live in another process, with stop and notify
//! markers, exact loss counts and a snapshot (flight-recorder) mode.

pub mod fill;
pub mod topa;

/// The system page size (asked once: write paths check against it).
pub(crate) fn page_size() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let cached = PAGE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096);
    PAGE.store(size, Ordering::Relaxed);
    size
}
