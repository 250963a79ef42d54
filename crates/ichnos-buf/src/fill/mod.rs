//! Per-thread fill buffers in the manner of DynamoRIO's drx_buf.
//!
//! A [`FillBuffer`] is a handle; every thread that writes through it gets
//! its own memory, set up on the thread's first write. Instrumented code
//! fills it with a tiny fast path — reserve `n` bytes with one add on a
//! thread-local cursor, store the fields, commit with one more add — and
//! never takes a lock. Two kinds exist, as in drx_buf:
//!
//! - **circular** ([`FillBuffer::circular`]): fixed-size records in a
//!   power-of-two ring that wraps by masking; the position counts wraps,
//!   so the ring can be read newest first at any time, from any thread.
//! - **trace** ([`FillBuffer::trace`]): when a record does not fit, the
//!   flush function receives every committed byte and the record goes to
//!   the start of the emptied buffer; at thread exit, at process exit and
//!   on [`FillBuffer::flush`] it receives what is left.
//!
//! Records are never torn and never split across a flush: a flush hands
//! out only committed bytes, and only at a moment when no write is half
//! done. A signal handler may write while the thread it interrupted is in
//! the middle of a write; both records stay whole (in a circular buffer,
//! unless the handler writes a whole ring's worth meanwhile and so wraps
//! onto the open record, as any ring would). The one case that
//! cannot be served — a handler's record that would need a flush while the
//! interrupted write is still open — drops the handler's record and counts
//! it ([`Stats::lost_records`], and in the next [`Flush`]).
//! A handler that never returns (a `siglongjmp` out of it) abandons the
//! write it interrupted; a runtime that follows its program's handlers
//! closes it through [`Interrupted`], else the buffer is never flushed
//! again. A flush by the owning thread runs with its asynchronous
//! signals blocked, by default, so that no handler is left inside one
//! ([`FillBuffer::set_flush_blocks_signals`]).
//!
//! ```
//! use ichnos_buf::fill::FillBuffer;
//! use std::sync::{Arc, Mutex};
//!
//! let out = Arc::new(Mutex::new(Vec::new()));
//! let sink = out.clone();
//! let buf = FillBuffer::trace(64, move |flush| sink.lock().unwrap().extend_from_slice(flush.data))?;
//! for i in 0u64..20 {
//!     // One record of two fields, one reservation and one commit.
//!     buf.write_with(16, |rec| {
//!         rec[..8].copy_from_slice(&i.to_le_bytes());
//!         rec[8..].copy_from_slice(&(i * i).to_le_bytes());
//!     })?;
//! }
//! buf.flush();
//! assert_eq!(out.lock().unwrap().len(), 20 * 16);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The write path is a handful of instructions that must be inlined into
// the instrumented code; `inline(always)` is deliberate there.
#![allow(clippy::inline_always)]

mod block_writer;
mod blocked;
mod fast_tls;
#[cfg(target_arch = "x86_64")]
mod guard;
mod interrupted;
mod mem;
mod process_hooks;
mod rings;
mod sigatomic;
mod slot;
mod thread;
mod write_path;

pub use block_writer::{RingWriter, TraceWriter};
pub use blocked::with_signals_blocked;
pub use fast_tls::{provide_thread_block, ProvideError, THREAD_BLOCK_ALIGN, THREAD_BLOCK_SIZE};
pub use interrupted::{Interrupted, MAX_HANDLER_LEVELS};
pub use process_hooks::{at_process_exit, at_process_fork, bind_hooks_to_the_process};
pub use rings::RingRecords;
pub use thread::MAX_BUFFERS;

/// The calling thread is about to call `exit`: keep its buffers through
/// its TLS destructors, which `exit` runs before the `atexit` hooks and
/// static destructors, so that the records those write on this thread
/// reach the `atexit` hook's last flush, as the main thread's do
/// (otherwise a thread other than the main one hands its buffers over
/// and unmaps them as if it were ending, and what the hooks write is
/// dropped). For a runtime that wraps `exit`; a thread that goes on
/// instead keeps its buffers mapped until the process ends.
pub fn before_exit() {
    thread::before_exit();
}

/// Flushes every registered thread's trace buffers for the last time, as
/// the exit hook does (reason [`FlushReason::ProcessExit`]): for a
/// process that ends without running its hooks (`_exit`). Records
/// written after it are dropped.
pub fn flush_at_exit() {
    thread::flush_for_the_last_time();
}

use slot::Slot;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What a buffer does when it is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Overwrite the oldest record. `capacity` is a power of two and a
    /// multiple of `stride`, the size of every record.
    Circular {
        /// Bytes per thread.
        capacity: usize,
        /// Bytes per record.
        stride: usize,
    },
    /// Hand the filled bytes to the flush function.
    Trace {
        /// Bytes per thread.
        capacity: usize,
    },
}

/// Why a flush function was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushReason {
    /// The next record did not fit.
    Full,
    /// [`FillBuffer::flush`] asked for it.
    Explicit,
    /// The thread is exiting.
    ThreadExit,
    /// The process is exiting (`exit`, or a return from `main`).
    ProcessExit,
}

/// What a flush function receives.
#[derive(Debug)]
pub struct Flush<'a> {
    /// The committed records, in the order they were reserved.
    pub data: &'a [u8],
    /// The thread that wrote them.
    pub tid: i32,
    /// 0 for this thread's first flush of this buffer, then 1, 2, ...
    pub seq: u64,
    /// Why now.
    pub reason: FlushReason,
    /// Records dropped on this thread since the previous flush (see the
    /// module documentation for when that happens).
    pub lost_records: u64,
    /// Bytes of those records.
    pub lost_bytes: u64,
}

/// Why a buffer could not be created.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FillError {
    /// A circular buffer's capacity must be a power of two.
    #[error("circular buffer capacity {0} is not a power of two")]
    CapacityNotPowerOfTwo(usize),
    /// A circular buffer's stride must divide its capacity, so that no
    /// record straddles the wrap.
    #[error("stride {stride} does not divide capacity {capacity}")]
    StrideDoesNotDivide {
        /// The capacity asked for.
        capacity: usize,
        /// The stride asked for.
        stride: usize,
    },
    /// Capacity or stride of 0.
    #[error("capacity and stride must not be 0")]
    Zero,
    /// Guard-page mode exists on x86-64 only.
    #[error("guard-page mode is not available on this architecture")]
    Unsupported,
    /// Every one of the [`MAX_BUFFERS`] handles exists already.
    #[error("all {MAX_BUFFERS} fill buffer handles are in use")]
    TooManyBuffers,
    /// A thread's buffer of this size cannot be allocated (the kernel
    /// refused the mapping: more than the machine's memory, or than the
    /// address space).
    #[error("cannot allocate a buffer of {capacity} bytes per thread: {}", std::io::Error::from_raw_os_error(*errno))]
    Alloc {
        /// The capacity asked for.
        capacity: usize,
        /// The kernel's error number (`ENOMEM`).
        errno: i32,
    },
}

/// Why a record was not written.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    /// A trace buffer's record larger than its capacity, or a circular
    /// buffer's record of another size than its stride.
    #[error(
        "record of {len} bytes does not fit this buffer (capacity {capacity}, stride {stride})"
    )]
    Size {
        /// The record's size.
        len: usize,
        /// The buffer's capacity.
        capacity: usize,
        /// The circular buffer's stride (0 for trace buffers).
        stride: usize,
    },
    /// The record was dropped and counted: see the module documentation.
    #[error("record dropped (counted as lost)")]
    Dropped,
}

/// A thread's counters for one buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records dropped since the last flush.
    pub lost_records: u64,
    /// Bytes of those records.
    pub lost_bytes: u64,
    /// Flushes so far.
    pub flushes: u64,
    /// Circular: records written so far (the ring holds the newest
    /// `capacity / stride` of them). Trace: bytes reserved since the last flush.
    pub position: u64,
}

type FlushFn = dyn Fn(&Flush<'_>) + Send + Sync;

/// A fill buffer handle: cheap to clone, usable from every thread.
#[derive(Clone)]
pub struct FillBuffer {
    shared: Arc<Shared>,
    /// What the write path needs of `shared`, copied into the handle.
    key: WriteKey,
}

/// What the write path reads of a buffer, kept in the handle rather than
/// behind its pointer: each of these is then a load the processor issues
/// at once, not one that waits for the pointer's, and the record's stores
/// wait for the slot's address made from them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteKey {
    /// `Shared::index`: which of a thread's slots is the buffer's.
    pub(crate) index: usize,
    /// `Shared::id`: the owner a slot of this buffer names.
    pub(crate) id: u64,
    /// `Shared::kind`.
    pub(crate) kind: Kind,
    /// `Shared::guarded`.
    pub(crate) guarded: bool,
    /// The offset of the thread block a program provided when the buffer
    /// was made (0: none), read here with the rest, not through a global.
    pub(crate) block_offset: isize,
}

impl fmt::Debug for FillBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FillBuffer")
            .field("kind", &self.shared.kind)
            .field("slot", &self.shared.index)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    pub(crate) id: u64,
    index: usize,
    kind: Kind,
    /// Guard-page mode (trace buffers on x86-64).
    guarded: bool,
    /// Whether an owner's flush blocks the thread's asynchronous signals
    /// (`blocked.rs`; always in guard-page mode).
    flush_blocks_signals: AtomicBool,
    flush: Option<Box<FlushFn>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        thread::release_index(self.index, std::ptr::from_ref(self));
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl FillBuffer {
    /// A circular buffer of `capacity` bytes per thread holding records of
    /// `stride` bytes (drx_buf's fast circular buffer is 65536 bytes).
    pub fn circular(capacity: usize, stride: usize) -> Result<FillBuffer, FillError> {
        check_circular(capacity, stride)?;
        FillBuffer::create(Kind::Circular { capacity, stride }, false, None)
    }

    /// A circular buffer whose ring is handed to `flush` when its thread
    /// exits — its records oldest first, with [`FlushReason::ThreadExit`]
    /// — so that a flight recorder keeps the newest records of threads
    /// that are gone. (A process's main thread does not: its ring stays
    /// through `exit`'s thread-local destructors, and is there for
    /// [`FillBuffer::snapshot_threads`] in the `atexit` hooks, with the
    /// records the hooks before them and static destructors wrote.)
    pub fn circular_with_exit_flush<F>(
        capacity: usize,
        stride: usize,
        flush: F,
    ) -> Result<FillBuffer, FillError>
    where
        F: Fn(&Flush<'_>) + Send + Sync + 'static,
    {
        check_circular(capacity, stride)?;
        FillBuffer::create(
            Kind::Circular { capacity, stride },
            false,
            Some(Box::new(flush)),
        )
    }

    /// A trace buffer of `capacity` bytes per thread; `flush` receives the
    /// filled bytes. `flush` runs on the writing thread (or, at process
    /// exit, on the exiting thread), possibly inside a signal handler if
    /// handlers write records; it may write to *other* buffers. A panic in
    /// it aborts the process, as it cannot unwind through those places.
    pub fn trace<F>(capacity: usize, flush: F) -> Result<FillBuffer, FillError>
    where
        F: Fn(&Flush<'_>) + Send + Sync + 'static,
    {
        if capacity == 0 {
            return Err(FillError::Zero);
        }
        FillBuffer::create(Kind::Trace { capacity }, false, Some(Box::new(flush)))
    }

    /// A trace buffer in guard-page mode (x86-64): each thread's buffer
    /// ends at an inaccessible page, and [`FillBuffer::write`] has no
    /// bounds check at all — running into the page is the full check. A
    /// SIGSEGV handler (installed on first use, chained to the one before
    /// it) recognises faults of our own copy routine in our own guard
    /// pages, flushes and restarts the copy in the emptied buffer; every
    /// other fault goes to the previous handler or the default action.
    /// Records must be shorter than a page. The flush function may run in
    /// that signal handler: it must be async-signal-safe.
    pub fn trace_guarded<F>(capacity: usize, flush: F) -> Result<FillBuffer, FillError>
    where
        F: Fn(&Flush<'_>) + Send + Sync + 'static,
    {
        if capacity == 0 {
            return Err(FillError::Zero);
        }
        #[cfg(target_arch = "x86_64")]
        {
            guard::install_handler();
            FillBuffer::create(Kind::Trace { capacity }, true, Some(Box::new(flush)))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            drop(flush);
            Err(FillError::Unsupported)
        }
    }

    fn create(
        kind: Kind,
        guarded: bool,
        flush: Option<Box<FlushFn>>,
    ) -> Result<FillBuffer, FillError> {
        // Threads map their buffers on first write, where a failure can
        // only drop records: a size the kernel will not map is refused
        // here, by mapping one (untouched, so it costs no memory).
        let capacity = match kind {
            Kind::Circular { capacity, .. } | Kind::Trace { capacity } => capacity,
        };
        let probe = if guarded {
            mem::Mapping::guarded(capacity).map(|(m, _, _)| m)
        } else {
            mem::Mapping::anonymous(capacity)
        };
        if let Err(e) = probe {
            return Err(FillError::Alloc {
                capacity,
                errno: e.raw_os_error().unwrap_or(libc::ENOMEM),
            });
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut index = None;
        let shared = Arc::new_cyclic(|weak| {
            index = thread::claim_index(weak);
            Shared {
                id,
                index: index.unwrap_or(usize::MAX),
                kind,
                guarded,
                flush_blocks_signals: AtomicBool::new(true),
                flush,
            }
        });
        if index.is_none() {
            // Do not let Drop release a slot we never had.
            std::mem::forget(shared);
            return Err(FillError::TooManyBuffers);
        }
        let key = WriteKey {
            index: shared.index,
            id: shared.id,
            kind: shared.kind,
            guarded: shared.guarded,
            block_offset: fast_tls::decide(),
        };
        Ok(FillBuffer { shared, key })
    }

    /// Whether a thread's own flushes of this buffer (a full buffer's,
    /// an explicit one, its exit's) run with its asynchronous signals
    /// blocked: on by default. Blocked, no signal handler runs inside a
    /// flush, so none is left inside one for good by a `longjmp` (which
    /// would keep the buffer from being flushed again) and none has its
    /// records dropped for one; the cost is two `pthread_sigmask` calls
    /// per flush (in a trace runtime handing 128 KiB buffers over, 0.1
    /// to 0.15 ns per 16-byte record: BENCHMARKS.md). A program that
    /// knows no handler of
    /// its own writes to the buffer or leaves by a `longjmp` may turn it
    /// off, and on again when one is installed. Guard-page mode always
    /// blocks them.
    pub fn set_flush_blocks_signals(&self, on: bool) {
        self.shared
            .flush_blocks_signals
            .store(on, Ordering::Relaxed);
    }

    /// The buffer's kind and sizes.
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.shared.kind
    }

    /// Writes one record. In guard-page mode this is the path without a
    /// bounds check.
    #[inline(always)]
    pub fn write(&self, record: &[u8]) -> Result<(), WriteError> {
        #[cfg(target_arch = "x86_64")]
        if self.key.guarded {
            return self.shared.write_guarded(record);
        }
        self.write_with(record.len(), |dst| dst.copy_from_slice(record))
    }

    /// Reserves `len` bytes, lets `fill` store the record's fields in any
    /// order, and commits them at once. `fill` sees the bytes as they were
    /// (a circular buffer's oldest record, or zeros): it should write them all.
    #[inline(always)]
    pub fn write_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), WriteError> {
        self.write_from::<false>(len, fill)
    }

    /// [`FillBuffer::write_with`] for a program that provided the thread
    /// block ([`provide_thread_block`]) before making the buffer: its fast
    /// path starts from that block alone and calls nothing at all, not
    /// even for TLS. Without a provided block every write takes the slow
    /// path (use `write_with` then).
    #[inline(always)]
    pub fn write_with_provided(
        &self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WriteError> {
        self.write_from::<true>(len, fill)
    }

    /// [`FillBuffer::write_with`] and [`FillBuffer::write_with_provided`]:
    /// the fast path ([`FillBuffer::reserve_fast`]), fill, commit; what it
    /// leaves, out of line.
    #[inline(always)]
    fn write_from<const PROVIDED_ONLY: bool>(
        &self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WriteError> {
        match self.reserve_fast::<PROVIDED_ONLY>(len) {
            FastReservation::Open(open) => {
                // SAFETY: `open` holds `len` bytes of this thread's buffer,
                // reserved for this writer alone until it is committed.
                fill(unsafe { std::slice::from_raw_parts_mut(open.ptr, len) });
                open.commit();
                Ok(())
            }
            FastReservation::Full { old } => self.write_after_full(old, len, fill),
            FastReservation::Slow => self.write_with_slow(len, fill),
        }
    }

    /// The fast path of a reservation: no call on it but the TLS access
    /// of a thread block not provided (none at all with `PROVIDED_ONLY`),
    /// so that the code it is inlined into saves no registers for one.
    /// What it cannot finish it leaves to [`FillBuffer::write_after_full`]
    /// or [`FillBuffer::write_with_slow`], out of line.
    #[inline(always)]
    fn reserve_fast<const PROVIDED_ONLY: bool>(&self, len: usize) -> FastReservation {
        let block = match fast_tls::provided_at(self.key.block_offset) {
            Some(block) => block,
            None if PROVIDED_ONLY => return FastReservation::Slow,
            None => fast_tls::block(),
        };
        let slot_ptr = thread::slot_in_block(block, self.key.index);
        if slot_ptr.is_null() {
            return FastReservation::Slow;
        }
        // SAFETY: this thread's slot, which lives as long as the thread.
        let slot = unsafe { &*slot_ptr };
        if slot.owner.load(Ordering::Relaxed) != self.key.id {
            return FastReservation::Slow;
        }
        let ptr = match self.key.kind {
            Kind::Circular { stride, .. } if len == stride => slot.ring_reserve(stride),
            Kind::Trace { .. } => match slot.trace_reserve(len) {
                Ok(ptr) => ptr,
                Err(old) => return FastReservation::Full { old },
            },
            Kind::Circular { .. } => return FastReservation::Slow,
        };
        FastReservation::Open(OpenRecord {
            slot: slot_ptr,
            ptr,
            len,
        })
    }

    /// [`FillBuffer::write_with`] when the record did not fit in this
    /// thread's trace buffer: its reservation at `old` is still held.
    #[cold]
    #[inline(never)]
    fn write_after_full(
        &self,
        old: usize,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WriteError> {
        let Kind::Trace { capacity } = self.key.kind else {
            unreachable!("only a trace buffer is full");
        };
        let slot_ptr = thread::Table::mine().slot(self.key.index);
        // SAFETY: this thread's slot, which lives as long as the thread.
        let ptr = self
            .shared
            .overflow(unsafe { &*slot_ptr }, old, len, capacity)?;
        let open = OpenRecord {
            slot: slot_ptr,
            ptr,
            len,
        };
        // SAFETY: as in `write_from`.
        fill(unsafe { std::slice::from_raw_parts_mut(open.ptr, len) });
        open.commit();
        Ok(())
    }

    /// [`FillBuffer::write_with`] before this thread's slot serves the
    /// buffer (its first write), or with a record of the wrong size.
    #[cold]
    #[inline(never)]
    fn write_with_slow(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), WriteError> {
        let open = self.reserve(len)?;
        // SAFETY: as in `write_from`.
        fill(unsafe { std::slice::from_raw_parts_mut(open.ptr, len) });
        open.commit();
        Ok(())
    }

    /// Reserves `len` bytes as an [`OpenRecord`], which commits them as
    /// zeros if the code filling them unwinds: an open reservation would
    /// otherwise keep every later flush from happening.
    #[inline(always)]
    fn reserve(&self, len: usize) -> Result<OpenRecord, WriteError> {
        let slot = thread::Table::mine().slot(self.key.index);
        // SAFETY: this thread's slot, which lives as long as the thread.
        let ptr = self.shared.reserve_in(&self.key, unsafe { &*slot }, len)?;
        Ok(OpenRecord { slot, ptr, len })
    }

    /// Writes `count` records of `N` bytes with one reservation and one
    /// commit: `fill` stores them through an array view, which the compiler
    /// can vectorise like a plain store loop ("several entries, one pointer
    /// adjust"). Trace buffers; a circular buffer takes exactly one
    /// stride's worth (`count * N == stride`).
    #[inline(always)]
    pub fn write_records<const N: usize>(
        &self,
        count: usize,
        fill: impl FnOnce(&mut [[u8; N]]),
    ) -> Result<(), WriteError> {
        let len = count
            .checked_mul(N)
            .ok_or_else(|| self.shared.size_error(usize::MAX))?;
        let open = self.reserve(len)?;
        // SAFETY: `len` = count * N reserved bytes for this writer alone;
        // [u8; N] has alignment 1, so any address is a valid start.
        fill(unsafe { std::slice::from_raw_parts_mut(open.ptr.cast::<[u8; N]>(), count) });
        open.commit();
        Ok(())
    }

    /// Whether this thread has a record of this buffer reserved and not
    /// yet committed: true in a signal handler that interrupted one of
    /// its writes. Async-signal-safe (it reads the thread's slot where its
    /// block holds it, allocating nothing; a thread that never wrote has
    /// none open).
    #[must_use]
    pub fn writing_here(&self) -> bool {
        self.own_slot().is_some_and(|slot| {
            slot.committed.load(Ordering::Acquire) != slot.reserved.load(Ordering::Acquire)
        })
    }

    /// Sets up this thread's buffer now, without writing. A thread whose
    /// first write may happen inside a signal handler should call this at
    /// its start: setting up maps memory and registers the thread, which
    /// allocates (drx_buf does the same work in its thread-init event).
    pub fn attach_thread(&self) -> Result<(), WriteError> {
        let shared = &*self.shared;
        thread::with_slot(shared.index, |slot| {
            if slot.owner.load(Ordering::Relaxed) == shared.id {
                return Ok(());
            }
            shared.attach(slot, 0)
        })
    }

    /// Like [`FillBuffer::write_with`], but `fill` may give up by
    /// returning false: the record is then never seen by a flush or a
    /// reader (if a signal handler wrote a record after it meanwhile, its
    /// bytes are zeroed instead and still take their place).
    pub fn try_write_with(
        &self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<bool, WriteError> {
        let open = self.reserve(len)?;
        // SAFETY: as in `write_from`.
        if fill(unsafe { std::slice::from_raw_parts_mut(open.ptr, len) }) {
            open.commit();
            return Ok(true);
        }
        let ptr = open.ptr;
        std::mem::forget(open);
        let shared = &*self.shared;
        thread::with_slot(shared.index, |slot| match shared.kind {
            Kind::Trace { .. } => {
                let old = (ptr as usize).wrapping_sub(slot.base.load(Ordering::Relaxed) as usize);
                slot.trace_abort(old, len, ptr);
            }
            Kind::Circular { .. } => {
                // A ring slot cannot be given back once later records may
                // follow it; zero it so readers see an empty record.
                // SAFETY: as in `write_from`.
                unsafe { std::ptr::write_bytes(ptr, 0, len) };
                slot.commit(len);
            }
        });
        Ok(false)
    }

    /// Reserves `len` bytes in this thread's buffer and returns where to
    /// write them; [`FillBuffer::commit_raw`] with the same length must
    /// follow on this thread before the next reservation of the same
    /// record's code path (the C ABI's `ichnos_buf_reserve`).
    #[inline(always)]
    pub fn reserve_raw(&self, len: usize) -> Result<*mut u8, WriteError> {
        let shared = &*self.shared;
        thread::with_slot(self.key.index, |slot| {
            shared.reserve_in(&self.key, slot, len)
        })
    }

    /// Commits `len` bytes reserved by [`FillBuffer::reserve_raw`].
    #[inline(always)]
    pub fn commit_raw(&self, len: usize) {
        thread::with_slot(self.key.index, |slot| slot.commit(len));
    }

    /// Hands this thread's committed records to the flush function now
    /// (trace buffers). Returns false if there was nothing to do or it
    /// could not be done here (inside a signal handler that interrupted a
    /// write or a flush of this buffer).
    #[allow(clippy::must_use_candidate)] // flushing is the point; the result is advisory
    pub fn flush(&self) -> bool {
        let shared = &*self.shared;
        let tid = thread::current_tid();
        thread::with_slot(shared.index, |slot| {
            slot.owner.load(Ordering::Relaxed) == shared.id
                && shared.flush_slot(slot, FlushReason::Explicit, tid)
        })
    }

    /// This thread's counters for this buffer.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let shared = &*self.shared;
        thread::with_slot(shared.index, |slot| {
            if slot.owner.load(Ordering::Relaxed) != shared.id {
                return Stats::default();
            }
            Stats {
                lost_records: slot.lost_records.load(Ordering::Relaxed),
                lost_bytes: slot.lost_bytes.load(Ordering::Relaxed),
                flushes: slot.flushes.load(Ordering::Relaxed),
                position: match shared.kind {
                    Kind::Circular { stride, .. } => {
                        (slot.committed.load(Ordering::Relaxed) / stride) as u64
                    }
                    Kind::Trace { .. } => slot.reserved.load(Ordering::Relaxed) as u64,
                },
            }
        })
    }
}

/// A ring's sizes: a power-of-two capacity that the stride divides.
fn check_circular(capacity: usize, stride: usize) -> Result<(), FillError> {
    if capacity == 0 || stride == 0 {
        return Err(FillError::Zero);
    }
    if !capacity.is_power_of_two() {
        return Err(FillError::CapacityNotPowerOfTwo(capacity));
    }
    if !capacity.is_multiple_of(stride) {
        return Err(FillError::StrideDoesNotDivide { capacity, stride });
    }
    Ok(())
}

/// The thread's `errno`, put back when dropped: code that runs inside a
/// signal handler (a buffer's write path, a flight recorder's save) must
/// leave the interrupted code's `errno` as it found it.
#[derive(Debug)]
pub struct ErrnoGuard(i32);

impl ErrnoGuard {
    /// Keeps the thread's `errno` until the guard is dropped.
    #[must_use]
    pub fn save() -> ErrnoGuard {
        // SAFETY: __errno_location returns this thread's errno slot.
        ErrnoGuard(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// A reservation being filled. Committed by [`OpenRecord::commit`]; if it
/// is dropped instead (the code filling it unwound), its bytes are
/// committed as zeros.
///
/// It keeps the slot the bytes were reserved in, so that the commit does
/// not look the slot up again; its raw pointers keep it on the thread
/// (the slot is that thread's).
struct OpenRecord {
    slot: *const Slot,
    ptr: *mut u8,
    len: usize,
}

impl OpenRecord {
    #[inline(always)]
    fn commit(self) {
        // SAFETY: this thread's slot (an `OpenRecord` is not `Send`),
        // which lives as long as the thread.
        unsafe { &*self.slot }.commit(self.len);
        std::mem::forget(self);
    }
}

impl OpenRecord {
    /// [`OpenRecord::commit`] of a record of `LEN` bytes (its `len`),
    /// known when compiled.
    #[inline(always)]
    fn commit_of<const LEN: usize>(self) {
        debug_assert_eq!(self.len, LEN);
        // SAFETY: as in `commit`.
        unsafe { &*self.slot }.commit_of::<LEN>();
        std::mem::forget(self);
    }
}

impl Drop for OpenRecord {
    fn drop(&mut self) {
        // SAFETY: the reservation this record was made for.
        unsafe { std::ptr::write_bytes(self.ptr, 0, self.len) };
        // SAFETY: as in `commit`.
        unsafe { &*self.slot }.commit(self.len);
    }
}

/// What the fast path of a reservation came to.
enum FastReservation {
    /// The bytes are reserved.
    Open(OpenRecord),
    /// A trace buffer is full; the reservation at `old` is held.
    Full { old: usize },
    /// The slot does not serve this buffer yet, or the size is wrong;
    /// nothing is reserved.
    Slow,
}
