//! The producer of a region-table buffer: records written into the
//! regions, all or nothing, at the head; what happens when the consumer
//! has not freed space is the buffer's [`Mode`].

use super::futex::{bump_and_wake, futex_wait};
use super::markers::{plan_markers, Granularity, MarkerError, MarkerPlan};
use super::memory::{AllocError, Header, Mapped};
use super::ring::{stats, Mode, Stats};
use super::table::Cursor;
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a record was not written.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordError {
    /// No room before unread data (counted as lost).
    #[error("no room for {len} bytes: {free} free before unread data (counted as lost)")]
    NoRoom {
        /// The record's size.
        len: usize,
        /// The room there was.
        free: u64,
    },
    /// Block-on-full: the consumer did not free room in time (counted).
    #[error("timed out waiting for room for {len} bytes (counted as lost)")]
    TimedOut {
        /// The record's size.
        len: usize,
    },
    /// The consumer is gone; nothing will free room again (counted).
    #[error("the consumer is gone (counted as lost)")]
    ConsumerGone,
    /// Larger than the whole buffer.
    #[error("record of {len} bytes is larger than the {capacity}-byte buffer")]
    TooLarge {
        /// The record's size.
        len: usize,
        /// The buffer's capacity.
        capacity: u64,
    },
}

/// The outcome of a raw (stream) write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Everything was written.
    Written(usize),
    /// The stream was cut at the stop marker, as the hardware cuts a
    /// packet at a STOP region end; `lost` bytes were dropped (counted).
    Stopped {
        /// Bytes that made it.
        written: usize,
        /// Bytes that did not.
        lost: usize,
    },
}

/// Producer status, as the driver reads `RTIT_STATUS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The producer is stopped at its stop marker (data is being lost).
    pub stopped: bool,
    /// Writes were lost since the last [`Producer::handle_status`].
    pub truncated: bool,
}

/// The writing end. One per buffer; `Send`, not `Sync`.
pub struct Producer {
    mapped: Arc<Mapped>,
    capacity: u64,
    mode: Mode,
    stop_granularity: Granularity,
    notify_granularity: Granularity,
    watermark: u64,
    pad_byte: u8,
    head: u64,
    plan: MarkerPlan,
    /// Position of the next notification target (perf's `aux_wakeup +
    /// aux_watermark`).
    wakeup: u64,
    /// The current region: its index, absolute start and end, address.
    region: usize,
    region_start: u64,
    region_end: u64,
    region_ptr: *mut u8,
    /// min(stop, notify, region end): one compare on the fast path.
    fast_limit: u64,
    stopped: bool,
    truncated: bool,
    /// The consumer was told of the current stop (one notification per
    /// stop, however many writes it refuses).
    stop_notified: bool,
    /// Run with the futex's wake at each notification an armed consumer
    /// waits for ([`Producer::set_wakeup_hook`]).
    wakeup_hook: Option<fn()>,
}

// SAFETY: the raw region pointer is into the shared mapping the producer
// keeps alive through `mapped`; the producer may move between threads.
unsafe impl Send for Producer {}

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("head", &self.head)
            .field("plan", &self.plan)
            .field("region", &self.region)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl Producer {
    pub(super) fn new(mapped: Arc<Mapped>) -> Result<Producer, AllocError> {
        let h = mapped.header();
        let capacity = mapped.table().capacity();
        let mode = match h.mode {
            1 => Mode::Snapshot,
            2 => Mode::BlockOnFull {
                timeout: Duration::from_nanos(h.block_timeout_ns),
            },
            _ => Mode::StopOnFull,
        };
        let granularity = |bit: u32| {
            if h.granularity & bit != 0 {
                Granularity::Region
            } else {
                Granularity::Byte
            }
        };
        let head = h.producer.0.head.load(Ordering::Acquire);
        let tail = h.tail.0.load(Ordering::Acquire);
        // Positions another process left in shared memory are checked
        // before any arithmetic relies on them.
        let consistent = head < super::table::MAX_POSITION / 2
            && (mode == Mode::Snapshot || (tail <= head && head - tail <= capacity));
        if !consistent {
            return Err(AllocError::BadHeader(format!(
                "head {head} and tail {tail} are inconsistent with capacity {capacity}"
            )));
        }
        let mut p = Producer {
            capacity,
            mode,
            stop_granularity: granularity(1),
            notify_granularity: granularity(2),
            watermark: h.watermark.max(1),
            pad_byte: h.region_pad,
            head,
            plan: MarkerPlan {
                stop_at: head,
                notify_at: head,
            },
            wakeup: head + h.watermark.max(1),
            region: 0,
            region_start: 0,
            region_end: 0,
            region_ptr: std::ptr::null_mut(),
            fast_limit: head,
            stopped: false,
            truncated: false,
            stop_notified: false,
            wakeup_hook: None,
            mapped,
        };
        p.reset_offsets();
        let _ = p.reset_markers();
        Ok(p)
    }

    fn header(&self) -> &Header {
        self.mapped.header()
    }

    /// The producer position: bytes written so far.
    #[must_use]
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The current region's index (the driver's `cur_idx`).
    #[must_use]
    pub fn region(&self) -> usize {
        self.region
    }

    /// The current region's size (`pt_buffer_region_size`).
    #[must_use]
    pub fn region_size(&self) -> u64 {
        self.region_end - self.region_start
    }

    /// Where the head is, as (region, offset) (`pt_read_offset`).
    #[must_use]
    pub fn read_offset(&self) -> Cursor {
        Cursor {
            region: self.region,
            offset: self.head - self.region_start,
        }
    }

    /// The current markers.
    #[must_use]
    pub fn markers(&self) -> MarkerPlan {
        self.plan
    }

    /// Points the region cache at the region holding the head
    /// (`pt_buffer_reset_offsets`).
    pub fn reset_offsets(&mut self) {
        let table = self.mapped.table();
        let cursor = table.locate(self.head);
        let region = table.region(cursor.region);
        self.region = cursor.region;
        self.region_start = self.head - cursor.offset;
        self.region_end = self.region_start + region.len;
        self.region_ptr = self.mapped.region_ptr(cursor.region);
        self.update_fast_limit();
    }

    /// Moves to the next region (`pt_buffer_advance`); the head must be at
    /// the current region's end.
    fn advance(&mut self) {
        debug_assert_eq!(self.head, self.region_end);
        let table = self.mapped.table();
        self.region = if self.region + 1 == table.len() {
            0
        } else {
            self.region + 1
        };
        self.region_start = self.region_end;
        self.region_end = self.region_start + table.region(self.region).len;
        self.region_ptr = self.mapped.region_ptr(self.region);
        self.update_fast_limit();
    }

    /// Plans the stop and notify markers from the consumer's current
    /// tail (`pt_buffer_reset_markers`). In snapshot mode there is no
    /// stop marker. An error (and the stopped status) when not even the
    /// current region can be finished (region granularity) or the buffer
    /// is full.
    pub fn reset_markers(&mut self) -> Result<MarkerPlan, MarkerError> {
        let tail = match self.mode {
            Mode::Snapshot => self.head,
            _ => self.header().tail.0.load(Ordering::Acquire),
        };
        if self.wakeup <= self.head {
            // Never more than one watermark's worth behind: a stalled
            // consumer is woken once, not once per missed watermark.
            self.wakeup = self.head + self.watermark;
        }
        let result = plan_markers(
            self.mapped.table(),
            self.head,
            tail,
            self.wakeup,
            self.stop_granularity,
            self.notify_granularity,
        );
        if let Ok(mut plan) = result {
            if self.mode == Mode::Snapshot {
                plan.stop_at = u64::MAX;
            }
            self.plan = plan;
            self.stopped = false;
            self.stop_notified = false;
        } else {
            self.plan = MarkerPlan {
                stop_at: self.head,
                notify_at: self.head,
            };
            self.stopped = true;
        }
        self.update_fast_limit();
        result
    }

    /// Bytes that may be written before the stop marker.
    fn room(&self) -> u64 {
        self.plan.stop_at.saturating_sub(self.head)
    }

    fn update_fast_limit(&mut self) {
        self.fast_limit = self
            .plan
            .stop_at
            .min(self.plan.notify_at)
            .min(self.region_end);
    }

    /// Reads and clears the status (`pt_handle_status`): whether the
    /// producer is stopped and whether data was lost since the last call.
    pub fn handle_status(&mut self) -> Status {
        let status = Status {
            stopped: self.stopped,
            truncated: self.truncated,
        };
        self.truncated = false;
        status
    }

    /// Counters (shared with the consumer).
    #[must_use]
    pub fn stats(&self) -> Stats {
        stats(self.header(), self.head)
    }

    /// Also wakes a consumer that sleeps in `poll` or `epoll` (among other
    /// descriptors, as a recorder of many processes does) rather than in
    /// [`Consumer::wait`](super::Consumer::wait): at each notification
    /// (the wakeup watermark crossed, no room left, the producer gone)
    /// that finds a consumer armed ([`Consumer::arm`](super::Consumer::arm)),
    /// `hook` runs, to make a descriptor the consumer polls readable, as
    /// perf's ring buffer descriptor becomes (a byte sent on a socket, an
    /// eventfd's count). It runs on the producer's thread, inside whatever
    /// the producer's caller holds, possibly in a signal handler: it must
    /// be async-signal-safe and never block. Costs nothing while no
    /// consumer is armed.
    pub fn set_wakeup_hook(&mut self, hook: fn()) {
        self.wakeup_hook = Some(hook);
    }

    /// Whether a consumer is in [`Consumer::wait`](super::Consumer::wait), announced as asleep
    /// (or about to sleep) until notified.
    #[must_use]
    pub fn consumer_waiting(&self) -> bool {
        self.header().consumer_waiting.load(Ordering::SeqCst) > 0
    }

    /// Writes a record all or nothing. Returns the record's position.
    #[inline]
    pub fn write_record(&mut self, record: &[u8]) -> Result<u64, RecordError> {
        let len = record.len() as u64;
        let start = self.head;
        // head <= fast_limit always; compared by difference, so no sum of
        // positions can wrap.
        if len <= self.fast_limit - start {
            if self.mode == Mode::Snapshot {
                self.announce(start + len);
            }
            // SAFETY: [head, head + len) lies in the current region (below
            // region_end) and below stop_at, so the consumer does not read
            // it and no one else writes it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    record.as_ptr(),
                    self.region_ptr.add((start - self.region_start) as usize),
                    record.len(),
                );
            }
            self.head = start + len;
            self.publish(len);
            return Ok(start);
        }
        self.write_record_slow(record)
    }

    #[cold]
    fn write_record_slow(&mut self, record: &[u8]) -> Result<u64, RecordError> {
        let len = record.len() as u64;
        if len > self.capacity {
            return Err(RecordError::TooLarge {
                len: record.len(),
                capacity: self.capacity,
            });
        }
        if let Err(e) = self.make_room(len) {
            self.count_loss(record.len());
            return Err(e);
        }
        let start = self.head;
        if self.mode == Mode::Snapshot {
            self.announce(start + len);
        }
        self.copy_in(record);
        self.publish(len);
        self.after_notify_point();
        Ok(start)
    }

    /// Writes one record given in parts (a header and the payload it
    /// describes, say), all or nothing, without joining them first: the
    /// consumer reads the parts back to back, or none of them.
    pub fn write_record_parts(&mut self, parts: &[&[u8]]) -> Result<u64, RecordError> {
        let total = parts
            .iter()
            .map(|p| p.len())
            .fold(0usize, usize::saturating_add);
        let len = total as u64;
        if len > self.capacity {
            return Err(RecordError::TooLarge {
                len: total,
                capacity: self.capacity,
            });
        }
        if let Err(e) = self.make_room(len) {
            self.count_loss(total);
            return Err(e);
        }
        let start = self.head;
        if self.mode == Mode::Snapshot {
            self.announce(start + len);
        }
        for part in parts {
            self.copy_in(part);
        }
        self.publish(len);
        self.after_notify_point();
        Ok(start)
    }

    /// Writes a raw stream: as much as fits before the stop marker (all,
    /// in snapshot mode; in block-on-full mode, waiting for room as it
    /// goes), the rest lost and counted once.
    pub fn write(&mut self, bytes: &[u8]) -> WriteOutcome {
        let mut written = 0usize;
        while written < bytes.len() {
            let left = (bytes.len() - written) as u64;
            let room = if self.mode == Mode::Snapshot {
                left
            } else {
                if self.room() < left {
                    let _ = self.reset_markers();
                }
                let mut room = self.room();
                if room == 0
                    && matches!(self.mode, Mode::BlockOnFull { .. })
                    && self.make_room(1).is_ok()
                {
                    room = self.room();
                }
                room.min(left)
            };
            if room == 0 {
                break;
            }
            let chunk = &bytes[written..written + room as usize];
            if self.mode == Mode::Snapshot {
                self.announce(self.head + room);
            }
            self.copy_in(chunk);
            self.publish(room);
            self.after_notify_point();
            written += chunk.len();
        }
        if written == bytes.len() {
            WriteOutcome::Written(written)
        } else {
            self.count_loss(bytes.len() - written);
            WriteOutcome::Stopped {
                written,
                lost: bytes.len() - written,
            }
        }
    }

    /// Snapshot mode: announces that bytes up to `end` are about to be
    /// written, before they are, so that a snapshot taken meanwhile leaves
    /// out what they overwrite even if this producer stops half way.
    #[inline]
    fn announce(&self, end: u64) {
        self.header().producer.0.ahead.store(end, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Abandons the rest of the current region, filling it with the pad
    /// byte (the driver's `TOPA_PMI_MARGIN` handling: zero decodes as PT
    /// PAD), so the next write starts a region. Returns the bytes padded;
    /// 0 if the head is at a region start or the pad would pass the stop
    /// marker.
    pub fn pad_region(&mut self) -> u64 {
        let n = self.region_end - self.head;
        if n == self.region_end - self.region_start
            || (self.mode != Mode::Snapshot && self.head + n > self.plan.stop_at)
        {
            return 0;
        }
        if self.mode == Mode::Snapshot {
            self.announce(self.head + n);
        }
        // SAFETY: the rest of the current region, below stop_at.
        unsafe {
            std::ptr::write_bytes(
                self.region_ptr
                    .add((self.head - self.region_start) as usize),
                self.pad_byte,
                n as usize,
            );
        }
        self.head += n;
        self.header()
            .counters
            .0
            .padded_bytes
            .fetch_add(n, Ordering::Relaxed);
        self.publish(n);
        self.after_notify_point();
        n
    }

    /// Copies `bytes` at the head, across regions; the caller has checked
    /// the room.
    fn copy_in(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.head == self.region_end {
                self.advance();
            }
            let n = ((self.region_end - self.head) as usize).min(bytes.len());
            // SAFETY: [head, head + n) is inside the current region and,
            // as the caller checked, below the stop marker.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.region_ptr
                        .add((self.head - self.region_start) as usize),
                    n,
                );
            }
            self.head += n as u64;
            bytes = &bytes[n..];
        }
        if self.head == self.region_end {
            self.advance();
        }
    }

    /// Publishes the head (Release) after `len` more bytes.
    #[inline]
    fn publish(&mut self, len: u64) {
        let h = self.mapped.header();
        h.producer.0.head.store(self.head, Ordering::Release);
        let written = &h.counters.0.written;
        written.store(written.load(Ordering::Relaxed) + len, Ordering::Relaxed);
        if self.head >= self.fast_limit {
            self.after_notify_point();
        }
    }

    /// Region crossings, notification and re-arming: what the driver does
    /// in its PMI handler.
    #[cold]
    fn after_notify_point(&mut self) {
        if self.head == self.region_end {
            self.advance();
        }
        if self.head >= self.plan.notify_at && !self.stopped {
            self.notify();
            self.wakeup = self.head + self.watermark;
            let _ = self.reset_markers();
        } else if self.head >= self.plan.stop_at && self.mode != Mode::Snapshot {
            let _ = self.reset_markers();
        }
        self.update_fast_limit();
    }

    fn notify(&self) {
        let h = self.header();
        h.counters.0.notifications.fetch_add(1, Ordering::Relaxed);
        self.wake_consumer();
    }

    /// Wakes a consumer that waits, in [`Consumer::wait`](super::Consumer::wait)
    /// or armed ([`Producer::set_wakeup_hook`]).
    fn wake_consumer(&self) {
        let h = self.header();
        if bump_and_wake(&h.data_futex.0, &h.consumer_waiting) {
            if let Some(hook) = self.wakeup_hook {
                hook();
            }
        }
    }

    fn count_loss(&mut self, bytes: usize) {
        let c = &self.header().counters.0;
        c.lost_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        c.lost_writes.fetch_add(1, Ordering::Relaxed);
        if !self.stop_notified {
            // Running -> stopped: counted, and the consumer is told, as a
            // STOP region raises its INT.
            c.truncations.fetch_add(1, Ordering::Relaxed);
            self.notify();
            self.stop_notified = true;
        }
        self.truncated = true;
    }

    /// Makes room for `len` bytes: re-plans the markers from the current
    /// tail and, in block-on-full mode, waits for the consumer. The caller
    /// counts the loss on an error.
    fn make_room(&mut self, len: u64) -> Result<(), RecordError> {
        if self.mode == Mode::Snapshot || len <= self.room() {
            return Ok(());
        }
        let _ = self.reset_markers();
        if len <= self.room() {
            return Ok(());
        }
        let Mode::BlockOnFull { timeout } = self.mode else {
            return Err(RecordError::NoRoom {
                len: len as usize,
                free: self.room(),
            });
        };
        let deadline = Instant::now() + timeout;
        let mapped = self.mapped.clone();
        let h = mapped.header();
        loop {
            if h.consumer_gone.load(Ordering::Acquire) != 0 {
                return Err(RecordError::ConsumerGone);
            }
            let seen = h.space_futex.0.load(Ordering::SeqCst);
            let _ = self.reset_markers();
            if len <= self.room() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RecordError::TimedOut { len: len as usize });
            }
            // Let a sleeping consumer drain what is there.
            self.notify();
            // A consumer on another core usually frees room within
            // microseconds: spin a little before paying for a futex sleep
            // and wake-up.
            if self.spin_for_room(h, len) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RecordError::TimedOut { len: len as usize });
            }
            h.producer_waiting.fetch_add(1, Ordering::SeqCst);
            futex_wait(&h.space_futex.0, seen, Some(deadline - now));
            h.producer_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Producer {
    /// Spins briefly while the consumer frees room; true once `len` bytes
    /// fit.
    fn spin_for_room(&mut self, h: &Header, len: u64) -> bool {
        // Plan from a tail at least as new as the one watched below, so a
        // change before the spin is not missed.
        let mut seen = h.tail.0.load(Ordering::Acquire);
        let _ = self.reset_markers();
        if len <= self.room() {
            return true;
        }
        for _ in 0..SPINS {
            std::hint::spin_loop();
            let tail = h.tail.0.load(Ordering::Acquire);
            if tail != seen {
                seen = tail;
                let _ = self.reset_markers();
                if len <= self.room() {
                    return true;
                }
            }
        }
        false
    }
}

/// How many times a blocked producer polls before it sleeps: some tens of
/// microseconds (a pause instruction takes up to ~140 cycles).
const SPINS: u32 = 256;

impl Drop for Producer {
    fn drop(&mut self) {
        let h = self.header();
        h.producer_gone.store(1, Ordering::SeqCst);
        self.wake_consumer();
        h.producer_claimed.store(0, Ordering::Release);
    }
}
