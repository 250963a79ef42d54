//! The producer and consumer of a region-table buffer.
//!
//! Positions are monotonic `u64` byte counts (like perf's `aux_head` and
//! `aux_tail`); a position's region and offset are derived on demand, so
//! "empty" (`head == tail`) and "full" (`head == tail + capacity`) can
//! never be confused — the Linux driver reported 0-byte TRUNCATED records
//! for exactly that until 2024.
//!
//! Memory ordering is perf's: the producer loads `tail` with Acquire,
//! writes bytes, stores `head` with Release; the consumer loads `head` with
//! Acquire, reads bytes, stores `tail` with Release. Sleeping and waking go
//! through futex words in the shared header, bumped *before* the waiter
//! flag is read (`SeqCst` on both sides), so a wakeup is never lost — the
//! race libbpf fixed in 2023.

use super::markers::{plan_markers, Granularity, MarkerError, MarkerPlan};
use super::memory::{AllocError, AllocFlags, Header, Mapped};
use super::table::{Cursor, RegionTable};
use std::fmt;
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the producer does when the consumer has not freed space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Stop before unread data and count what is lost (perf's full-trace
    /// mode, with exact counts where the kernel has only a flag).
    StopOnFull,
    /// Overwrite the oldest data: a flight recorder read with
    /// [`Consumer::snapshot`] (perf's AUX overwrite mode).
    Snapshot,
    /// Wait up to `timeout` for the consumer to free space, then count
    /// the loss (as the `WindowsIntelPT` driver suspends the traced process).
    BlockOnFull {
        /// How long one write may wait.
        timeout: Duration,
    },
}

/// How a buffer behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// When full.
    pub mode: Mode,
    /// Where the producer may stop: at region ends (as the hardware's
    /// STOP bit) or at any byte.
    pub stop: Granularity,
    /// Where notifications fall: region ends (as INT) or any byte.
    pub notify: Granularity,
    /// Notify the consumer each time this many bytes were written since
    /// the last notification (perf's `aux_watermark`); 0 means half the
    /// capacity.
    pub wakeup_watermark: u64,
    /// The byte that fills a region's abandoned tail ([`Producer::pad_region`]);
    /// 0 decodes as PT PAD packets.
    pub pad_byte: u8,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::StopOnFull,
            stop: Granularity::Byte,
            notify: Granularity::Byte,
            wakeup_watermark: 0,
            pad_byte: 0,
        }
    }
}

/// A region-table buffer before it is split into its two ends.
#[derive(Debug)]
pub struct TopaBuffer {
    mapped: Arc<Mapped>,
}

/// Counters, exact (the kernel keeps only TRUNCATED flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes written into the buffer.
    pub written: u64,
    /// Bytes that were not written for lack of space.
    pub lost_bytes: u64,
    /// Writes (records or raw writes) that lost bytes.
    pub lost_writes: u64,
    /// Times the producer went from running to stopped.
    pub truncations: u64,
    /// Notifications sent.
    pub notifications: u64,
    /// Bytes of pad written over abandoned region tails.
    pub padded_bytes: u64,
    /// Snapshot mode: bytes overwritten before anyone could read them.
    pub overwritten_bytes: u64,
}

impl TopaBuffer {
    /// Allocates `nr_pages` pages for `cpu` as `pt_buffer_init_topa`
    /// does: regions of descending power-of-two sizes (at most 128 MiB,
    /// and in stop-on-full mode at least two regions), placed on `cpu`'s
    /// NUMA node where the machine has more than one.
    pub fn init(
        cpu: usize,
        nr_pages: usize,
        flags: AllocFlags,
        config: Config,
    ) -> Result<TopaBuffer, AllocError> {
        if nr_pages == 0 {
            return Err(AllocError::Invalid("nr_pages must be at least 1".into()));
        }
        let node = cpu_node(cpu)?;
        let page = if flags.huge_pages {
            2 << 20
        } else {
            crate::page_size() as u64
        };
        let lens = split_pages(nr_pages as u64, config.mode != Mode::Snapshot, page);
        let buffer = TopaBuffer::with_regions(&lens, flags, config)?;
        if let Some(node) = node {
            buffer.prefer_node(node);
        }
        Ok(buffer)
    }

    /// A buffer made of regions of exactly `lens` bytes (whole pages), in
    /// that order.
    pub fn with_regions(
        lens: &[u64],
        flags: AllocFlags,
        config: Config,
    ) -> Result<TopaBuffer, AllocError> {
        let capacity: u64 = lens.iter().sum();
        let mapped = Mapped::create(lens, flags, |h| {
            h.mode = match config.mode {
                Mode::StopOnFull => 0,
                Mode::Snapshot => 1,
                Mode::BlockOnFull { .. } => 2,
            };
            h.granularity = u32::from(config.stop == Granularity::Region)
                | (u32::from(config.notify == Granularity::Region) << 1);
            h.watermark = if config.wakeup_watermark == 0 {
                (capacity / 2).max(1)
            } else {
                config.wakeup_watermark
            };
            h.block_timeout_ns = match config.mode {
                Mode::BlockOnFull { timeout } => {
                    u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)
                }
                _ => 0,
            };
            h.region_pad = config.pad_byte;
        })?;
        Ok(TopaBuffer {
            mapped: Arc::new(mapped),
        })
    }

    /// Opens a buffer that another process created, from its memfd.
    pub fn open(fd: OwnedFd) -> Result<TopaBuffer, AllocError> {
        Ok(TopaBuffer {
            mapped: Arc::new(Mapped::open(fd)?),
        })
    }

    /// The region table.
    #[must_use]
    pub fn table(&self) -> &RegionTable {
        self.mapped.table()
    }

    /// Total bytes.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.mapped.table().capacity()
    }

    /// The memfd behind the buffer, for another process to [`TopaBuffer::open`].
    #[must_use]
    pub fn fd(&self) -> &OwnedFd {
        self.mapped.fd()
    }

    /// The producing end. One may exist at a time (in any process):
    /// `Taken` while another does; `BadHeader` if the shared positions are
    /// inconsistent (a peer wrote nonsense).
    pub fn producer(&self) -> Result<Producer, AllocError> {
        let h = self.mapped.header();
        if h.producer_claimed.swap(1, Ordering::AcqRel) != 0 {
            return Err(AllocError::Taken("producer"));
        }
        h.producer_gone.store(0, Ordering::SeqCst);
        Producer::new(self.mapped.clone())
            .inspect_err(|_| h.producer_claimed.store(0, Ordering::Release))
    }

    /// The consuming end. One may exist at a time (in any process).
    pub fn consumer(&self) -> Result<Consumer, AllocError> {
        let h = self.mapped.header();
        if h.consumer_claimed.swap(1, Ordering::AcqRel) != 0 {
            return Err(AllocError::Taken("consumer"));
        }
        h.consumer_gone.store(0, Ordering::SeqCst);
        Ok(Consumer::new(self.mapped.clone()))
    }

    /// Both ends.
    pub fn split(self) -> Result<(Producer, Consumer), AllocError> {
        Ok((self.producer()?, self.consumer()?))
    }

    /// A readable dump of the region table in the manner of the kernel's
    /// `pt_topa_dump`: one line per region with its logical range,
    /// address, size, and `S`/`I` where the current stop and notify
    /// markers fall.
    pub fn dump(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        dump(&self.mapped, out)
    }

    fn prefer_node(&self, node: u32) {
        const MPOL_PREFERRED: libc::c_long = 1;
        let mask: libc::c_ulong = 1 << node;
        for (i, region) in self.mapped.table().regions().enumerate() {
            // SAFETY: mbind only sets a policy on our own mapping; a failure
            // (no NUMA support) leaves the default policy, which is fine.
            unsafe {
                libc::syscall(
                    libc::SYS_mbind,
                    self.mapped.region_ptr(i),
                    region.len as libc::c_ulong,
                    MPOL_PREFERRED,
                    &raw const mask,
                    libc::c_ulong::from(u64::BITS),
                    0 as libc::c_uint,
                );
            }
        }
    }
}

/// Descending power-of-two regions covering `nr_pages` pages, at most 128
/// MiB each (the ToPA maximum), at least two when `two` and possible.
fn split_pages(nr_pages: u64, two: bool, page: u64) -> Vec<u64> {
    let max_region_pages = ((128 << 20) / page).max(1);
    let mut max_order = nr_pages.ilog2();
    if two && max_order > 0 {
        max_order -= 1;
    }
    let mut lens = Vec::new();
    let mut left = nr_pages;
    while left > 0 {
        let pages = (1u64 << left.ilog2().min(max_order)).min(max_region_pages);
        lens.push(pages * page);
        left -= pages;
    }
    lens
}

/// `cpu`'s NUMA node, when the machine has more than one node.
fn cpu_node(cpu: usize) -> Result<Option<u32>, AllocError> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| AllocError::Invalid(format!("cpu {cpu}: {dir}: {e}")))?;
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    if online.trim() == "0" || online.trim().is_empty() {
        return Ok(None);
    }
    Ok(entries
        .filter_map(Result::ok)
        .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok()))
}

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
    fn new(mapped: Arc<Mapped>) -> Result<Producer, AllocError> {
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

    /// Whether a consumer is in [`Consumer::wait`], announced as asleep
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
        bump_and_wake(&h.data_futex.0, &h.consumer_waiting);
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
        bump_and_wake(&h.data_futex.0, &h.consumer_waiting);
        h.producer_claimed.store(0, Ordering::Release);
    }
}

fn stats(h: &Header, head: u64) -> Stats {
    let c = &h.counters.0;
    Stats {
        written: c.written.load(Ordering::Relaxed),
        lost_bytes: c.lost_bytes.load(Ordering::Relaxed),
        lost_writes: c.lost_writes.load(Ordering::Relaxed),
        truncations: c.truncations.load(Ordering::Relaxed),
        notifications: c.notifications.load(Ordering::Relaxed),
        padded_bytes: c.padded_bytes.load(Ordering::Relaxed),
        overwritten_bytes: if h.mode == 1 {
            head.saturating_sub(h.capacity)
        } else {
            0
        },
    }
}

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
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    fn new(mapped: Arc<Mapped>) -> Consumer {
        let tail = mapped.header().tail.0.load(Ordering::Acquire);
        Consumer { mapped, tail }
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
        let snapshot = h.mode == 1;
        let sane = head < super::table::MAX_POSITION / 2
            && (snapshot
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

    /// Bytes written and not yet consumed. Never ambiguous: a buffer that
    /// went from empty to exactly full reads as `capacity`, not 0.
    #[must_use]
    pub fn available(&self) -> u64 {
        self.head() - self.tail
    }

    /// The bytes of `range` (absolute, within what is readable), one slice
    /// per region touched: a record that crosses regions comes back as
    /// two slices.
    ///
    /// # Panics
    ///
    /// If `range` is not within `tail..head`.
    #[must_use]
    pub fn segments(&self, range: Range<u64>) -> Vec<&[u8]> {
        let head = self.head();
        assert!(
            self.tail <= range.start && range.start <= range.end && range.end <= head,
            "range {range:?} outside the readable {}..{head}",
            self.tail
        );
        let table = self.mapped.table();
        let mut out = Vec::new();
        let mut pos = range.start;
        while pos < range.end {
            let cursor = table.locate(pos);
            let region = table.region(cursor.region);
            let n = (region.len - cursor.offset).min(range.end - pos);
            // SAFETY: [pos, pos + n) is below the head (Acquire above) and
            // not below our tail, so the producer has written it and will
            // not write it again until we advance past it (non-snapshot
            // modes; in snapshot mode use `snapshot`).
            out.push(unsafe {
                std::slice::from_raw_parts(
                    self.mapped
                        .region_ptr(cursor.region)
                        .add(cursor.offset as usize),
                    n as usize,
                )
            });
            pos += n;
        }
        out
    }

    /// Appends everything readable to `out`, advances past it, and
    /// returns how many bytes that was.
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> u64 {
        let head = self.head();
        let n = head - self.tail;
        for segment in self.segments(self.tail..head) {
            out.extend_from_slice(segment);
        }
        self.set_tail(head);
        n
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

    /// Snapshot mode: copies the newest `min(written, capacity)` bytes into
    /// `out` while the producer keeps writing, leaving out whatever it
    /// overwrote during the copy.
    pub fn snapshot(&self, out: &mut Vec<u8>) -> SnapshotInfo {
        let table = self.mapped.table();
        let capacity = table.capacity();
        let newest = self.head();
        let oldest = newest.saturating_sub(capacity);
        let mut copy = Vec::with_capacity((newest - oldest) as usize);
        let mut pos = oldest;
        while pos < newest {
            let cursor = table.locate(pos);
            let n = (table.region(cursor.region).len - cursor.offset).min(newest - pos);
            let src = self
                .mapped
                .region_ptr(cursor.region)
                .wrapping_add(cursor.offset as usize);
            for i in 0..n as usize {
                // SAFETY: inside region `cursor.region`. Volatile because
                // the producer may be overwriting it; such bytes are
                // discarded below.
                copy.push(unsafe { std::ptr::read_volatile(src.wrapping_add(i)) });
            }
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
        out.clear();
        out.extend_from_slice(&copy[(first_valid - oldest) as usize..]);
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

fn dump(mapped: &Mapped, out: &mut dyn fmt::Write) -> fmt::Result {
    let h = mapped.header();
    let table = mapped.table();
    let head = h.producer.0.head.load(Ordering::Acquire);
    let tail = h.tail.0.load(Ordering::Acquire);
    writeln!(
        out,
        "region table: {} regions, {} bytes, head {head}, tail {tail}",
        table.len(),
        table.capacity()
    )?;
    for (i, region) in table.regions().enumerate() {
        writeln!(
            out,
            "  {i:4}: {:#014x}..{:#014x} at {:p} size {:#x}",
            region.start,
            region.end(),
            mapped.region_ptr(i),
            region.len
        )?;
    }
    Ok(())
}

/// Bumps a futex word and wakes its waiters if any announced themselves.
fn bump_and_wake(word: &AtomicU32, waiting: &AtomicU32) {
    word.fetch_add(1, Ordering::SeqCst);
    // Store-load ordering (Dekker): either the waiter sees the new word
    // and does not sleep, or we see its `waiting` and wake it. The waiter's
    // side is the kernel's full barrier in futex_wait. The loom model
    // (tests/loom_models.rs) deadlocks without this pair of barriers.
    fence(Ordering::SeqCst);
    if waiting.load(Ordering::SeqCst) != 0 {
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
    }
}

/// Sleeps while `word == expected`, at most `timeout`.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
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
