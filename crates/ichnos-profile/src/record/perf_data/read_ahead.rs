//! A second thread that reads the data section ahead of the walk.
//!
//! The walk reads each record where it lies in the mapped file, and each
//! record of a `--call-graph dwarf` recording starts a page or more after
//! the one before: every one was a page fault and a miss all the way to
//! memory, on the walk's own thread, one after the other (the next
//! record's place is known only once this one's header is read). This
//! thread follows the same chain of record sizes a little ahead, reading
//! each record's first and last bytes, so that the faults are taken and
//! the lines fetched here, beside the walk, not in its way: the report of
//! a 240 MB perf.data file took 39 ms instead of 49 (BENCHMARKS.md).
//!
//! It reads nothing the walk does not read, checks nothing (a wrong size
//! only sends it astray, never out of the section), and stays at most
//! [`WINDOW`] bytes past the part of the section the walk has finished
//! with, which the walk hands back to the kernel: resident memory stays
//! bounded as before, a window's worth more.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How far past the walk's place the records are read.
pub(super) const WINDOW: usize = 4 << 20;

/// The walk's place: every record before it is done with.
pub(super) struct Place(AtomicUsize);

impl Place {
    pub(super) fn new() -> Self {
        Place(AtomicUsize::new(0))
    }

    /// The walk is done with the records before byte `at` (a record's
    /// start) of the section.
    pub(super) fn done_below(&self, at: usize) {
        self.0.store(at, Ordering::Relaxed);
    }

    /// The walk has ended.
    pub(super) fn ended(&self) {
        self.0.store(usize::MAX, Ordering::Relaxed);
    }
}

/// Follows the records' sizes from the start of `data` (the data
/// section), reading each record's first and last bytes, at most
/// [`WINDOW`] bytes past the walk's `place`, until the walk ends or the
/// records do. Returns the offset it reached.
pub(super) fn run(data: &[u8], place: &Place) -> usize {
    let mut at = 0usize;
    loop {
        let walk = place.0.load(Ordering::Relaxed);
        if walk == usize::MAX || at >= data.len() {
            return at;
        }
        // Behind the walk (which has handed back what it read), go on
        // from its place: a record's start.
        at = at.max(walk);
        let limit = walk.saturating_add(WINDOW).min(data.len());
        if at >= limit {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        while at < limit {
            let Some(header) = data.get(at..at + 8) else {
                return at;
            };
            let len = usize::from(u16::from_le_bytes([header[6], header[7]]));
            if len < 8 {
                // Not a record: the walk will say so.
                return at;
            }
            std::hint::black_box(data.get(at + len - 1));
            at += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` records of `len` bytes each.
    fn records(count: usize, len: u16) -> Vec<u8> {
        let mut data = vec![0u8; count * usize::from(len)];
        for r in data.chunks_exact_mut(usize::from(len)) {
            r[6..8].copy_from_slice(&len.to_le_bytes());
        }
        data
    }

    #[test]
    fn it_stays_within_the_window_past_the_walk_and_ends_with_it() {
        let len = 8200;
        let data = records(2000, len);
        assert!(data.len() > 3 * WINDOW);
        let place = Place::new();
        let reached = std::thread::scope(|s| {
            let reader = s.spawn(|| run(&data, &place));
            // The walk stays at the start a while: the reader waits at
            // the window's end.
            std::thread::sleep(Duration::from_millis(50));
            place.ended();
            reader.join().unwrap()
        });
        assert!(reached >= WINDOW, "{reached}");
        assert!(reached < WINDOW + usize::from(len), "{reached}");
    }

    #[test]
    fn it_reads_to_the_end_behind_a_walk_that_moves_on_and_stops_at_a_bad_size() {
        let data = records(100, 4096);
        let place = Place::new();
        place.done_below(4096 * 50);
        assert_eq!(run(&data, &place), data.len());
        // A size below a header's: it stops there.
        let mut bad = records(10, 64);
        bad[64 * 3 + 6..64 * 3 + 8].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(run(&bad, &Place::new()), 64 * 3);
        // A size past the end: it stops at the end.
        let mut past = records(4, 64);
        past[64 * 3 + 6..64 * 3 + 8].copy_from_slice(&1000u16.to_le_bytes());
        assert_eq!(run(&past, &Place::new()), 64 * 3 + 1000);
    }
}
