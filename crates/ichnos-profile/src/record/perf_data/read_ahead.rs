//! A second thread that reads the data section ahead of the walk.
//!
//! The walk reads each record where it lies in the mapped file, and each
//! record of a `--call-graph dwarf` recording starts a page or more after
//! the one before: every one was a page fault and a miss all the way to
//! memory, on the walk's own thread, one after the other (the next
//! record's place is known only once this one's header is read). This
//! thread follows the same chain of record sizes a little ahead, reading
//! each record's header, so that the faults are taken (the kernel maps the
//! pages around each) and the headers fetched here, beside the walk, not
//! in its way (BENCHMARKS.md: the report of a 219 MiB perf.data file, 39
//! ms instead of 53). Reading each record's last byte too made the report
//! slower: the pages in between are mapped with the header's, and the
//! extra faults contend with the walk's.
//!
//! It frames records as the walk does (`records::framed`, an aux trace's
//! data skipped); where the walk will refuse one, it waits for the walk
//! there. It stays at most [`WINDOW`] bytes past the part of the section
//! the walk has finished with, and hands that part back to the kernel
//! (`MADV_DONTNEED`) in steps: resident memory stays bounded, a window's
//! worth more. Doing that here rather than on the walk's thread took the
//! unmapping, and the flushes of the other threads' TLBs it asks for, out
//! of the walk's way (34.9 ms against 31.8 ms on the 236 MiB file).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How far past the walk's place the records are read.
pub(super) const WINDOW: usize = 4 << 20;

/// The walk's place, and how far this thread has read.
pub(super) struct Place {
    walk: AtomicUsize,
    reached: AtomicUsize,
}

impl Place {
    pub(super) fn new() -> Self {
        Place {
            walk: AtomicUsize::new(0),
            reached: AtomicUsize::new(0),
        }
    }

    /// The walk is done with the records before byte `at` (a record's
    /// start) of the section.
    pub(super) fn done_below(&self, at: usize) {
        self.walk.store(at, Ordering::Relaxed);
    }

    /// The walk has ended: the reader stops.
    pub(super) fn ended(&self) {
        self.walk.store(usize::MAX, Ordering::Relaxed);
    }

    /// How far the reader has read.
    #[cfg(test)]
    fn reached(&self) -> usize {
        self.reached.load(Ordering::Relaxed)
    }
}

/// Ends the walk when dropped: a walk that panics must not leave the
/// reader waiting for it (the scope it runs in waits for the reader).
pub(super) struct EndOnDrop<'a>(pub &'a Place);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// Follows the records' sizes from the start of `data` (the data
/// section), reading each record's header, at most
/// [`WINDOW`] bytes past the walk's `place`, until the walk ends. Each
/// time the walk has finished with `release_every` bytes more, hands them
/// to `release` (offsets in `data`): the walk's thread is then spared
/// the unmapping, and the other threads' TLB flushes it asks for.
pub(super) fn run(
    data: &[u8],
    place: &Place,
    release_every: usize,
    release: &dyn Fn(std::ops::Range<usize>),
) {
    let mut at = 0usize;
    let mut released = 0usize;
    loop {
        let walk = place.walk.load(Ordering::Relaxed);
        if walk == usize::MAX {
            return;
        }
        if walk >= released.saturating_add(release_every) {
            release(released..walk);
            released = walk;
        }
        // Behind the walk (which has handed back what it read), or lost
        // on a size the walk will refuse: go on from its place, a
        // record's start.
        at = at.max(walk);
        let limit = walk.saturating_add(WINDOW).min(data.len());
        let from = at;
        while at < limit {
            // Not a record: wait here for the walk to pass (or end).
            let Some(next) = next(data, at) else { break };
            at = next;
        }
        place.reached.store(at, Ordering::Relaxed);
        if at == from {
            // Nothing to read until the walk moves on.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Reads the header of the record at `at`: the offset of the next one;
/// `None` where the walk will refuse it.
fn next(data: &[u8], at: usize) -> Option<usize> {
    super::records::framed(data, at, 0).ok().map(|f| f.next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` records of `len` bytes each.
    fn records(count: usize, len: u16) -> Vec<u8> {
        let mut data = vec![0u8; count * usize::from(len)];
        for r in data.chunks_exact_mut(usize::from(len)) {
            r[..4].copy_from_slice(&9u32.to_le_bytes());
            r[6..8].copy_from_slice(&len.to_le_bytes());
        }
        data
    }

    /// Waits (10 s at most) until the reader has read at least `at`.
    fn wait_for(place: &Place, at: usize) {
        let started = std::time::Instant::now();
        while place.reached() < at && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn it_stays_within_the_window_past_the_walk_and_follows_it() {
        let len = 8200;
        let data = records(2000, len);
        assert!(data.len() > 3 * WINDOW);
        let place = Place::new();
        std::thread::scope(|s| {
            let reader = s.spawn(|| run(&data, &place, usize::MAX, &|_| {}));
            // The walk stays at the start: the reader waits at the
            // window's end.
            wait_for(&place, WINDOW);
            std::thread::sleep(Duration::from_millis(20));
            let reached = place.reached();
            assert!(reached >= WINDOW, "{reached}");
            assert!(reached < WINDOW + usize::from(len), "{reached}");
            // The walk moves on (to a record's start): so does the reader.
            let walk = usize::from(len) * 1000;
            place.done_below(walk);
            wait_for(&place, walk + WINDOW);
            assert!(place.reached() >= walk + WINDOW);
            {
                // Ends with the walk, even one that ends by panicking.
                let _end = EndOnDrop(&place);
            }
            reader.join().unwrap();
        });
    }

    #[test]
    fn what_the_walk_is_done_with_is_handed_back_in_steps_and_nothing_else() {
        let len = 4096u16;
        let data = records(1000, len);
        let place = Place::new();
        let released = std::sync::Mutex::new(Vec::new());
        let release = |r: std::ops::Range<usize>| released.lock().unwrap().push(r);
        let step = 64 << 10;
        std::thread::scope(|s| {
            let reader = s.spawn(|| run(&data, &place, step, &release));
            // Less than a step done: nothing handed back.
            place.done_below(step - usize::from(len));
            wait_for(
                &place,
                step - usize::from(len) + WINDOW.min(data.len() - step),
            );
            std::thread::sleep(Duration::from_millis(20));
            assert!(released.lock().unwrap().is_empty());
            // Three steps and a bit: handed back, from the start up to
            // the walk's place, in one range or more, none past it.
            let walk = 3 * step + 2 * usize::from(len);
            place.done_below(walk);
            let started = std::time::Instant::now();
            while released.lock().unwrap().last().map(|r| r.end) != Some(walk)
                && started.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            place.ended();
            reader.join().unwrap();
        });
        let released = released.into_inner().unwrap();
        assert_eq!(released.first().map(|r| r.start), Some(0), "{released:?}");
        assert!(
            released.windows(2).all(|w| w[0].end == w[1].start),
            "{released:?}"
        );
        assert_eq!(
            released.last().map(|r| r.end),
            Some(3 * step + 2 * usize::from(len))
        );
    }

    #[test]
    fn a_bad_size_sends_it_to_the_walks_place_and_aux_data_is_skipped() {
        // A size below a header's at the fourth record: it stops there
        // until the walk moves past it.
        let mut bad = records(10, 64);
        bad[64 * 3 + 6..64 * 3 + 8].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(next(&bad, 64 * 2), Some(64 * 3));
        assert_eq!(next(&bad, 64 * 3), None);
        // An aux trace record's data follows it, outside its size.
        let mut aux = records(4, 64);
        aux[..4].copy_from_slice(&super::super::checks::RECORD_AUXTRACE.to_le_bytes());
        aux[8..16].copy_from_slice(&128u64.to_le_bytes());
        assert_eq!(next(&aux, 0), Some(64 + 128));
        // A size past the end: no next record there. The reader waits
        // before it until the walk has passed it.
        let mut past = records(8, 64);
        past[64 * 3 + 6..64 * 3 + 8].copy_from_slice(&1000u16.to_le_bytes());
        assert_eq!(next(&past, 64 * 3), None);
        let place = Place::new();
        std::thread::scope(|s| {
            let reader = s.spawn(|| run(&past, &place, usize::MAX, &|_| {}));
            wait_for(&place, 64 * 3);
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(place.reached(), 64 * 3);
            place.done_below(64 * 4);
            wait_for(&place, past.len());
            assert_eq!(place.reached(), past.len());
            place.ended();
            reader.join().unwrap();
        });
    }
}
