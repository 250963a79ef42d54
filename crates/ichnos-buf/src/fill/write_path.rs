//! The write path of a fill buffer's threads: reserving in a thread's
//! slot, filling and flushing a full buffer, and handing it to the flush
//! function. Kept apart from the buffer's setup, its public entry points
//! and reading (`mod.rs`) because it runs in signal handlers and on every
//! record.

use super::blocked::with_signals_blocked;
#[cfg(target_arch = "x86_64")]
use super::guard;
use super::slot::{Slot, SnapshotBy};
use super::{sigatomic, thread, ErrnoGuard};
use super::{Flush, FlushReason, Kind, Shared, WriteError, WriteKey};
use std::sync::atomic::Ordering;

impl Shared {
    /// The write path proper: reserve `len` bytes in this thread's `slot`.
    /// `key` is this buffer's, from its handle.
    #[inline(always)]
    pub(super) fn reserve_in(
        &self,
        key: &WriteKey,
        slot: &Slot,
        len: usize,
    ) -> Result<*mut u8, WriteError> {
        if slot.owner.load(Ordering::Relaxed) == key.id {
            match key.kind {
                Kind::Trace { capacity } => match slot.trace_reserve(len) {
                    Ok(ptr) => return Ok(ptr),
                    Err(old) => return self.overflow(slot, old, len, capacity),
                },
                Kind::Circular { stride, .. } if len == stride => {
                    return Ok(slot.ring_reserve(stride))
                }
                Kind::Circular { .. } => return Err(self.size_error(len)),
            }
        }
        self.first_write(slot, len)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(super) fn write_guarded(&self, record: &[u8]) -> Result<(), WriteError> {
        let capacity = self.capacity();
        // Shorter than a page: a record that starts at or below the end of
        // the buffer then always faults inside the guard page, never past it.
        if record.len() > capacity || record.len() >= crate::page_size() {
            return Err(self.size_error(record.len()));
        }
        thread::with_slot(self.index, |slot| {
            if slot.owner.load(Ordering::Relaxed) != self.id {
                self.attach(slot, record.len())?;
            }
            guard::write(slot, record)
                .map(|_| ())
                .ok_or(WriteError::Dropped)
        })
    }

    /// Bytes per thread.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn capacity(&self) -> usize {
        match self.kind {
            Kind::Circular { capacity, .. } | Kind::Trace { capacity } => capacity,
        }
    }

    pub(super) fn size_error(&self, len: usize) -> WriteError {
        let (capacity, stride) = match self.kind {
            Kind::Circular { capacity, stride } => (capacity, stride),
            Kind::Trace { capacity } => (capacity, 0),
        };
        WriteError::Size {
            len,
            capacity,
            stride,
        }
    }

    /// The thread's first write (or the first since the slot served a
    /// handle that is gone): map memory, then write.
    #[cold]
    pub(super) fn first_write(&self, slot: &Slot, len: usize) -> Result<*mut u8, WriteError> {
        let fits = match self.kind {
            Kind::Trace { capacity } => len <= capacity,
            Kind::Circular { stride, .. } => len == stride,
        };
        if !fits {
            return Err(self.size_error(len));
        }
        self.attach(slot, len)?;
        // The slot is ours now: reserve as the fast path does.
        match self.kind {
            Kind::Trace { capacity } => match slot.trace_reserve(len) {
                Ok(ptr) => Ok(ptr),
                Err(old) => self.overflow(slot, old, len, capacity),
            },
            Kind::Circular { stride, .. } => Ok(slot.ring_reserve(stride)),
        }
    }

    /// Maps this thread's memory for the slot; a record of `len` bytes is
    /// counted lost if that cannot be done here and now. With the slot
    /// claimed meanwhile, as a flush claims it: signals blocked alike.
    #[cold]
    pub(super) fn attach(&self, slot: &Slot, len: usize) -> Result<(), WriteError> {
        self.with_signals_blocked(|| self.attach_blocked(slot, len))
    }

    fn attach_blocked(&self, slot: &Slot, len: usize) -> Result<(), WriteError> {
        let _errno = ErrnoGuard::save();
        let (bytes, limit) = match self.kind {
            Kind::Trace { capacity } => (capacity, capacity),
            Kind::Circular { capacity, .. } => (capacity, capacity - 1),
        };
        if thread::EXITING.load(Ordering::Acquire) || !slot.try_claim() {
            if len > 0 {
                slot.count_lost(len);
            }
            return Err(WriteError::Dropped);
        }
        let handle = self.guarded.then(|| std::ptr::from_ref(self).cast::<()>());
        let attached = thread::attach(slot, self.index, self.id, bytes, limit, handle);
        slot.release();
        if !attached {
            if len > 0 {
                slot.count_lost(len);
            }
            return Err(WriteError::Dropped);
        }
        Ok(())
    }

    /// A trace buffer's write that did not fit (its reservation at `old`
    /// is held): the buffer handed over and the record placed at the start
    /// of the emptied one. Signals are blocked first, before anything else
    /// is done: until then a handler that never returns leaves the
    /// reservation past the end (which `Interrupted` gives back).
    #[cold]
    #[inline(never)]
    pub(crate) fn overflow(
        &self,
        slot: &Slot,
        old: usize,
        len: usize,
        capacity: usize,
    ) -> Result<*mut u8, WriteError> {
        self.with_signals_blocked(|| self.overflow_blocked(slot, old, len, capacity))
    }

    /// Runs `f` (a flush by the owning thread) with the thread's signals
    /// blocked where the buffer asks for it (`blocked.rs`).
    pub(crate) fn with_signals_blocked<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.guarded || self.flush_blocks_signals.load(Ordering::Relaxed) {
            with_signals_blocked(f)
        } else {
            f()
        }
    }

    fn overflow_blocked(
        &self,
        slot: &Slot,
        old: usize,
        len: usize,
        capacity: usize,
    ) -> Result<*mut u8, WriteError> {
        let _errno = ErrnoGuard::save();
        if len > capacity {
            sigatomic::add(&slot.reserved, len.wrapping_neg());
            return Err(self.size_error(len));
        }
        if thread::EXITING.load(Ordering::Acquire) {
            sigatomic::add(&slot.reserved, len.wrapping_neg());
            slot.count_lost(len);
            return Err(WriteError::Dropped);
        }
        let tid = thread::current_tid();
        slot.trace_overflow(old, len, capacity, &mut |slot, data| {
            self.deliver(slot, data, FlushReason::Full, tid);
        })
        .ok_or(WriteError::Dropped)
    }

    /// Flushes `slot` (trace buffers); false for circular ones.
    pub(crate) fn flush_slot(&self, slot: &Slot, reason: FlushReason, tid: i32) -> bool {
        let capacity = match self.kind {
            Kind::Trace { capacity } => capacity,
            Kind::Circular { capacity, stride } => {
                return reason == FlushReason::ThreadExit
                    && self.flush.is_some()
                    && self
                        .with_signals_blocked(|| self.deliver_ring(slot, capacity, stride, tid));
            }
        };
        if thread::EXITING.load(Ordering::Acquire) {
            // The exit hook flushed this buffer without resetting it;
            // flushing again would deliver the same bytes twice.
            return false;
        }
        self.with_signals_blocked(|| {
            slot.trace_flush(capacity, &mut |slot, data| {
                self.deliver(slot, data, reason, tid);
            })
        })
    }

    /// [`Shared::flush_slot`] with `busy` already held by the caller.
    pub(crate) fn flush_claimed(
        &self,
        slot: &Slot,
        reason: FlushReason,
        tid: i32,
        own_thread: bool,
    ) -> bool {
        match self.kind {
            Kind::Trace { capacity } => {
                slot.trace_flush_claimed(capacity, own_thread, &mut |slot, data| {
                    self.deliver(slot, data, reason, tid);
                })
            }
            Kind::Circular { .. } => false,
        }
    }

    /// A circular buffer's ring, oldest record first, to the flush
    /// function (at its thread's exit).
    fn deliver_ring(&self, slot: &Slot, capacity: usize, stride: usize, tid: i32) -> bool {
        let mut newest_first = Vec::new();
        if slot
            .ring_snapshot(capacity, stride, &mut newest_first, SnapshotBy::Owner)
            .is_none()
        {
            return false;
        }
        let mut oldest_first = Vec::with_capacity(newest_first.len());
        for record in newest_first.chunks(stride).rev() {
            oldest_first.extend_from_slice(record);
        }
        self.deliver(slot, &oldest_first, FlushReason::ThreadExit, tid);
        true
    }

    pub(super) fn deliver(&self, slot: &Slot, data: &[u8], reason: FlushReason, tid: i32) {
        let Some(flush) = &self.flush else { return };
        let info = Flush {
            data,
            tid,
            seq: slot.flushes.fetch_add(1, Ordering::Relaxed),
            reason,
            lost_records: slot.lost_records.swap(0, Ordering::Relaxed),
            lost_bytes: slot.lost_bytes.swap(0, Ordering::Relaxed),
        };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| flush(&info))).is_err() {
            eprintln!("ichnos-buf: a fill buffer's flush function panicked; aborting");
            std::process::abort();
        }
    }
}
