//! A region-table buffer: its configuration, its memory, and the
//! producer and consumer it splits into (`producer.rs`, `consumer.rs`;
//! sleeping and waking in `futex.rs`).
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

use super::consumer::Consumer;
use super::markers::Granularity;
use super::memory::{AllocError, AllocFlags, Header, Mapped};
use super::producer::Producer;
use super::table::RegionTable;
use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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

/// The counters of the buffer whose header is `h`, its producer at `head`.
pub(super) fn stats(h: &Header, head: u64) -> Stats {
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

/// Writes a description of the buffer: its table, positions and regions.
pub(super) fn dump(mapped: &Mapped, out: &mut dyn fmt::Write) -> fmt::Result {
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
