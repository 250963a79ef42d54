//! The consumer of a region-table buffer: what the producer wrote, read
//! in place from the tail, and the tail moved past it to free the space.

use super::futex::{bump_and_wake, futex_wait};
use super::memory::Mapped;
use super::ring::{stats, Stats};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`Consumer::wait`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// There is data to read, or a notification arrived.
    Ready,
    /// The timeout passed.
    TimedOut,
    /// The producer is gone and everything it wrote has been read.
    ProducerGone,
}

/// Why [`Consumer::advance`] refused a tail.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum TailError {
    /// The tail may only move forward.
    #[error("tail {new} is behind the current tail {current}")]
    Backwards {
        /// The current tail.
        current: u64,
        /// The tail asked for.
        new: u64,
    },
    /// Beyond what was written.
    #[error("tail {new} is beyond the head {head}")]
    BeyondHead {
        /// The head.
        head: u64,
        /// The tail asked for.
        new: u64,
    },
}

/// What a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Absolute positions of the bytes returned.
    pub range: Range<u64>,
    /// The producer had wrapped (more than a capacity was ever written).
    pub wrapped: bool,
    /// Bytes that were copied but overwritten while copying (left out).
    pub overwritten_during_copy: u64,
}

/// The reading end. One per buffer.
pub struct Consumer {
    mapped: Arc<Mapped>,
    tail: u64,
    /// The buffer is in snapshot mode, as its header said when the
    /// consumer opened it (read once: the header is shared with another
    /// process, which may change it under us).
    snapshot: bool,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    pub(super) fn new(mapped: Arc<Mapped>) -> Consumer {
        let h = mapped.header();
        let tail = h.tail.0.load(Ordering::Acquire);
        // SAFETY: a u32 of the mapped header, read once; volatile, since
        // another process may write it (a value it tears is a mode too).
        let mode = unsafe { std::ptr::read_volatile(&raw const h.mode) };
        Consumer {
            mapped,
            tail,
            snapshot: mode == 1,
        }
    }

    /// The producer position (Acquire: bytes below it are written). A
    /// value that cannot be true — behind the tail, more than a capacity
    /// ahead of it outside snapshot mode, or near 2^63 — is read as the
    /// tail (nothing readable): the header is shared with another process,
    /// which may be broken or hostile.
    #[must_use]
    pub fn head(&self) -> u64 {
        let h = self.mapped.header();
        let head = h.producer.0.head.load(Ordering::Acquire);
        let sane = head < super::table::MAX_POSITION / 2
            && (self.snapshot
                || (head >= self.tail && head - self.tail <= self.mapped.table().capacity()));
        if sane {
            head
        } else {
            self.tail
        }
    }

    /// The consumer position.
    #[must_use]
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// The buffer's capacity: the sum of its regions, from the consumer's
    /// own copy of the table. No whole record is larger.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.mapped.table().capacity()
    }

    /// Bytes written and not yet consumed. Never ambiguous: a buffer that
    /// went from empty to exactly full reads as `capacity`, not 0.
    #[must_use]
    pub fn available(&self) -> u64 {
        self.head() - self.tail
    }

    /// The bytes of `range` (absolute, within what is readable), one slice
    /// per region touched: a record that crosses regions comes back as
    /// two slices. Nothing is allocated: the slices are found as the
    /// iterator is walked. In snapshot mode, where the producer overwrites
    /// what the consumer has not read, there are none: copy with
    /// [`Consumer::snapshot`].
    ///
    /// # Panics
    ///
    /// If `range` is not within `tail..head`.
    #[must_use]
    pub fn segments(&self, range: Range<u64>) -> Segments<'_> {
        let head = self.head();
        assert!(
            self.tail <= range.start && range.start <= range.end && range.end <= head,
            "range {range:?} outside the readable {}..{head}",
            self.tail
        );
        Segments {
            mapped: &self.mapped,
            range: if self.snapshot {
                range.start..range.start
            } else {
                range
            },
        }
    }

    /// Appends everything readable to `out`, advances past it, and
    /// returns how many bytes that was (none in snapshot mode: see
    /// [`Consumer::segments`]).
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> u64 {
        self.read_into_at_most(out, u64::MAX)
    }

    /// As [`Consumer::read_into`], at most `max` bytes: for a consumer
    /// that works through what it read before it reads more (the bytes
    /// stay in its cache, and the producer has room again sooner, a piece
    /// at a time).
    pub fn read_into_at_most(&mut self, out: &mut Vec<u8>, max: u64) -> u64 {
        let segments = self.next_segments(max);
        let end = segments.end();
        for segment in segments {
            out.extend_from_slice(segment);
        }
        let n = end - self.tail;
        self.set_tail(end);
        n
    }

    /// The next bytes readable, at most `max` of them, as
    /// [`Consumer::segments`] gives a range (none in snapshot mode), for a
    /// consumer that reads them where they lie and then
    /// [`Consumer::consume`]s them. The head is read once: a producer that
    /// moves it meanwhile, even backwards or out of bounds, changes
    /// nothing here. A producer that is not trusted may still write the
    /// bytes while they are read: read each value once, and copy what is
    /// checked before it is used (text, lengths and what they measure).
    #[must_use]
    pub fn next_segments(&self, max: u64) -> Segments<'_> {
        let end = if self.snapshot {
            self.tail
        } else {
            self.tail + (self.head() - self.tail).min(max)
        };
        Segments {
            mapped: &self.mapped,
            range: self.tail..end,
        }
    }

    /// Moves the tail past bytes given by [`Consumer::next_segments`]
    /// (whose [`Segments::end`] is `end`), freeing them for the producer.
    /// Unlike [`Consumer::advance`], not checked against the head again:
    /// they were below it when they were given.
    ///
    /// # Errors
    /// `end` behind the tail, or beyond what was readable (the capacity
    /// past the tail).
    pub fn consume(&mut self, end: u64) -> Result<(), TailError> {
        if end < self.tail {
            return Err(TailError::Backwards {
                current: self.tail,
                new: end,
            });
        }
        if end - self.tail > self.capacity() {
            return Err(TailError::BeyondHead {
                head: self.tail + self.capacity(),
                new: end,
            });
        }
        self.set_tail(end);
        Ok(())
    }

    /// Moves the tail to `new_tail`, freeing the bytes before it for the
    /// producer. Checked in absolute positions before any wrapping.
    pub fn advance(&mut self, new_tail: u64) -> Result<(), TailError> {
        if new_tail < self.tail {
            return Err(TailError::Backwards {
                current: self.tail,
                new: new_tail,
            });
        }
        let head = self.head();
        if new_tail > head {
            return Err(TailError::BeyondHead {
                head,
                new: new_tail,
            });
        }
        self.set_tail(new_tail);
        Ok(())
    }

    fn set_tail(&mut self, tail: u64) {
        self.tail = tail;
        let h = self.mapped.header();
        h.tail.0.store(tail, Ordering::Release);
        bump_and_wake(&h.space_futex.0, &h.producer_waiting);
    }

    /// Returns at once if there is something to read; otherwise sleeps
    /// until the producer notifies (at the wakeup watermark, or when it
    /// stops for lack of room), the producer is gone, or `timeout` passes
    /// (`None`: forever). Like perf's `poll`, a sleeper is not woken for
    /// data below the watermark.
    #[allow(clippy::must_use_candidate)] // waiting is the point
    pub fn wait(&self, timeout: Option<Duration>) -> WaitOutcome {
        let h = self.mapped.header();
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let seen = h.data_futex.0.load(Ordering::SeqCst);
            if self.available() > 0 {
                return WaitOutcome::Ready;
            }
            if h.producer_gone.load(Ordering::SeqCst) != 0 {
                return WaitOutcome::ProducerGone;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return WaitOutcome::TimedOut,
                },
                None => None,
            };
            h.consumer_waiting.fetch_add(1, Ordering::SeqCst);
            // Re-check after announcing ourselves: a notification between
            // the check above and here changed `data_futex`, so the wait
            // below returns at once.
            futex_wait(&h.data_futex.0, seen, left);
            h.consumer_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Announces this consumer as about to sleep, for a consumer that
    /// sleeps in `poll` or `epoll` among other descriptors rather than in
    /// [`Consumer::wait`]: until the result is dropped, the producer's
    /// notifications (the wakeup watermark crossed, no room left, its
    /// end) run its wakeup hook
    /// ([`Producer::set_wakeup_hook`](super::Producer::set_wakeup_hook)),
    /// which makes a descriptor the consumer polls readable. `None` when
    /// there is something to read ([`Consumer::next_segments`]): no need
    /// to sleep. Arm after reading everything, poll, then drop; as with
    /// `wait`, data below the watermark does not wake a sleeper (poll with
    /// a timeout for it). A gone producer, or a header in snapshot mode,
    /// is no reason not to sleep: whatever a shared header says, this
    /// never says "do not sleep" while nothing can be read.
    #[must_use]
    pub fn arm(&self) -> Option<Armed<'_>> {
        let h = self.mapped.header();
        h.consumer_waiting.fetch_add(1, Ordering::SeqCst);
        // Store-load ordering (Dekker), as in `bump_and_wake`: either
        // this sees what the producer published before its notification,
        // or the producer sees this consumer waiting and signals. The loom
        // model (tests/loom_models.rs) loses the wake-up without it.
        fence(Ordering::SeqCst);
        let armed = Armed { header: h };
        if !self.snapshot && self.available() > 0 {
            return None;
        }
        Some(armed)
    }

    /// Snapshot mode: copies the newest `min(written, capacity)` bytes into
    /// `out` while the producer keeps writing, leaving out whatever it
    /// overwrote during the copy. Copied region by region straight into
    /// `out` (which keeps its allocation from call to call).
    pub fn snapshot(&self, out: &mut Vec<u8>) -> SnapshotInfo {
        let table = self.mapped.table();
        let capacity = table.capacity();
        let newest = self.head();
        let oldest = newest.saturating_sub(capacity);
        out.clear();
        out.reserve((newest - oldest) as usize);
        let mut pos = oldest;
        while pos < newest {
            let cursor = table.locate(pos);
            let n = (table.region(cursor.region).len - cursor.offset).min(newest - pos);
            let src = self
                .mapped
                .region_ptr(cursor.region)
                .wrapping_add(cursor.offset as usize);
            // SAFETY: [src, src + n) lies inside region `cursor.region`,
            // mapped while `self.mapped` lives. The producer may be
            // overwriting it: such bytes are dropped below.
            unsafe { copy_racing(src, n as usize, out) };
            pos += n;
        }
        fence(Ordering::Acquire);
        // What the producer may have overwritten while we copied: up to
        // its announced write-ahead position, which it raises *before*
        // writing (a producer stopped half way through a record still
        // counts as having overwritten it).
        let ahead = self
            .mapped
            .header()
            .producer
            .0
            .ahead
            .load(Ordering::Acquire)
            .max(self.head());
        let first_valid = oldest.max(ahead.saturating_sub(capacity)).min(newest);
        out.drain(..(first_valid - oldest) as usize);
        SnapshotInfo {
            range: first_valid..newest,
            wrapped: newest > capacity,
            overwritten_during_copy: first_valid - oldest,
        }
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        stats(self.mapped.header(), self.head())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let h = self.mapped.header();
        h.consumer_gone.store(1, Ordering::SeqCst);
        bump_and_wake(&h.space_futex.0, &h.producer_waiting);
        h.consumer_claimed.store(0, Ordering::Release);
    }
}

/// A consumer announced as about to sleep ([`Consumer::arm`]); dropped,
/// the announcement is withdrawn.
#[derive(Debug)]
pub struct Armed<'a> {
    header: &'a super::memory::Header,
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.header.consumer_waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The slices of a range of a buffer, one per region it touches (see
/// [`Consumer::segments`]).
#[derive(Debug)]
pub struct Segments<'a> {
    mapped: &'a Mapped,
    /// What is left to hand out.
    range: Range<u64>,
}

impl Segments<'_> {
    /// The end of the range the slices cover (as made: it does not move
    /// as they are handed out).
    #[must_use]
    pub fn end(&self) -> u64 {
        self.range.end
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.range.start >= self.range.end {
            return None;
        }
        let table = self.mapped.table();
        let cursor = table.locate(self.range.start);
        let region = table.region(cursor.region);
        let n = (region.len - cursor.offset).min(self.range.end - self.range.start);
        self.range.start += n;
        // SAFETY: the range was checked to lie below the head (read with
        // Acquire) and at or above the consumer's tail when the iterator
        // was made, inside the mapped regions, and the consumer, borrowed
        // for as long as the slices live, cannot advance meanwhile: an
        // honest producer has written these bytes and will not write them
        // again (non-snapshot modes; in snapshot mode use `snapshot`). A
        // producer in another process that breaks the protocol can still
        // write them while they are read. The memory stays mapped and
        // valid, so no read leaves it; that a shared slice's bytes change
        // under it is a data race in Rust's model, accepted here as
        // copying does (`read_into` reads the same slices): the reader
        // gets bytes the producer wrote at some moment, and `segments`
        // and `next_segments` tell their callers to check what they copy,
        // not what they read twice.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.mapped
                    .region_ptr(cursor.region)
                    .add(cursor.offset as usize),
                n as usize,
            )
        })
    }
}

/// Appends the `n` bytes at `src` to `out`, a word at a time where they
/// are aligned. Volatile: another process may be writing them (what it
/// wrote meanwhile is recognised and dropped by the caller).
///
/// # Safety
///
/// `[src, src + n)` must be readable memory for the whole call.
unsafe fn copy_racing(src: *const u8, n: usize, out: &mut Vec<u8>) {
    let mut i = 0;
    // Bytes up to the first word boundary, then words, then the rest.
    while i < n && !(src as usize + i).is_multiple_of(8) {
        // SAFETY: i < n, inside the range.
        out.push(unsafe { std::ptr::read_volatile(src.add(i)) });
        i += 1;
    }
    while i + 8 <= n {
        #[allow(clippy::cast_ptr_alignment)] // aligned by the loop above
        let at = src.wrapping_add(i).cast::<u64>();
        // SAFETY: a word inside the range, aligned by the loop above.
        let word = unsafe { std::ptr::read_volatile(at) };
        out.extend_from_slice(&word.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, inside the range.
        out.push(unsafe { std::ptr::read_volatile(src.add(i)) });
        i += 1;
    }
}
