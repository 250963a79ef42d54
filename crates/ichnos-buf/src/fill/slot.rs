//! One thread's state for one fill buffer, and the write protocol on it.
//!
//! The protocol (issue 2618 of DynamoRIO asks for exactly this): a writer
//! *reserves* its bytes with one signal-atomic add on `reserved`, writes
//! them, then *commits* with one signal-atomic add on `committed`. A
//! signal handler that writes a record while the thread is between those
//! two steps reserves the bytes after it, so both records stay whole and
//! are ordered by reservation. Data is handed out only when `committed ==
//! reserved`, i.e. when no write is half done, so a flush never contains a
//! torn record. When a handler would have to flush while the write it
//! interrupted is still open, it drops its own record and counts it.

use super::sigatomic;
use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};

/// A thread's view of one buffer. Lives in that thread's TLS; other
/// threads read it (through the registry) only to snapshot or to flush at
/// process exit, and claim `busy` before they do.
///
/// `repr(C)`: the guarded write routine (guard.rs) addresses fields by
/// offset.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Slot {
    /// Id of the buffer handle this slot serves; 0 when unused. Writers
    /// check it first, so a slot left by a freed handle is set up afresh.
    pub(crate) owner: AtomicU64,
    /// Start of this thread's buffer memory.
    pub(crate) base: AtomicPtr<u8>,
    /// Trace buffers: capacity (0 blocks every reservation while a flush
    /// runs). Circular buffers: capacity - 1, the wrap mask.
    pub(crate) limit: AtomicUsize,
    /// Trace: offset of the next reservation. Circular: monotonic
    /// position of the next record (position / capacity = wrap count).
    pub(crate) reserved: AtomicUsize,
    /// Bytes whose writes are complete (trace: since the last flush).
    pub(crate) committed: AtomicUsize,
    /// Held by whoever runs a slow path, flushes or snapshots this slot.
    pub(crate) busy: AtomicBool,
    pub(crate) lost_records: AtomicU64,
    pub(crate) lost_bytes: AtomicU64,
    /// Flushes made so far: the sequence number of the next one.
    pub(crate) flushes: AtomicU64,
    /// Guard-page mode: the inaccessible page right after the buffer.
    pub(crate) guard: AtomicPtr<u8>,
    /// Guard-page mode: the handle (`*const Shared`) the slot serves, for
    /// the fault handler, which can reach it only through the slot.
    pub(crate) handle: AtomicPtr<()>,
}

/// How many 50 µs steps a flush of another thread's buffer waits for a
/// write that thread has open.
const OPEN_WRITE_PATIENCE_STEPS: u32 = 100;

impl Slot {
    pub(crate) const fn new() -> Slot {
        Slot {
            owner: AtomicU64::new(0),
            base: AtomicPtr::new(std::ptr::null_mut()),
            limit: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            committed: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            lost_records: AtomicU64::new(0),
            lost_bytes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            guard: AtomicPtr::new(std::ptr::null_mut()),
            handle: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Points the slot at fresh memory for buffer `owner`. Called by the
    /// owning thread with `busy` held.
    pub(crate) fn install(&self, owner: u64, base: *mut u8, limit: usize) {
        self.limit.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.base.store(base, Ordering::Relaxed);
        self.reserved.store(0, Ordering::Relaxed);
        self.committed.store(0, Ordering::Relaxed);
        // Lost counts survive: records dropped before the memory existed
        // (a failed first write) are reported with the first flush.
        self.flushes.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.limit.store(limit, Ordering::Relaxed);
        self.owner.store(owner, Ordering::Release);
    }

    /// Detaches the slot from its memory so that every later write takes
    /// the slow path. Called with `busy` held.
    pub(crate) fn retire(&self) {
        self.owner.store(0, Ordering::Relaxed);
        self.limit.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.base.store(std::ptr::null_mut(), Ordering::Relaxed);
    }

    pub(crate) fn try_claim(&self) -> bool {
        !self.busy.swap(true, Ordering::Acquire)
    }

    pub(crate) fn release(&self) {
        self.busy.store(false, Ordering::Release);
    }

    pub(crate) fn count_lost(&self, bytes: usize) {
        self.lost_records.fetch_add(1, Ordering::Relaxed);
        self.lost_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Trace buffers: reserves `len` bytes. `Ok(ptr)` on the fast path;
    /// `Err(old)` when they do not fit, with the reservation still held
    /// (the caller goes to [`Slot::trace_overflow`]).
    #[inline(always)]
    pub(crate) fn trace_reserve(&self, len: usize) -> Result<*mut u8, usize> {
        self.trace_place(sigatomic::fetch_add(&self.reserved, len), len)
    }

    /// Where a trace buffer's reservation of `len` bytes at `old` lies, if
    /// it fits; else `Err(old)`.
    #[inline(always)]
    fn trace_place(&self, old: usize, len: usize) -> Result<*mut u8, usize> {
        let end = old.wrapping_add(len);
        if end <= self.limit.load(Ordering::Relaxed) && end >= old {
            sigatomic::after_reserve();
            // SAFETY (for the caller): end <= limit = capacity of the
            // memory at base, so [old, end) is inside it.
            Ok(self.base.load(Ordering::Relaxed).wrapping_add(old))
        } else {
            Err(old)
        }
    }

    /// Marks `len` reserved bytes as written.
    #[inline(always)]
    pub(crate) fn commit(&self, len: usize) {
        compiler_fence(Ordering::SeqCst);
        sigatomic::add(&self.committed, len);
    }

    /// Gives back a reservation of `len` bytes at `old` if nothing was
    /// reserved after it; otherwise the bytes stay and are committed as
    /// zero padding. Returns whether the bytes were given back.
    pub(crate) fn trace_abort(&self, old: usize, len: usize, ptr: *mut u8) -> bool {
        if sigatomic::compare_exchange(&self.reserved, old + len, old) {
            return true;
        }
        // SAFETY: `ptr` is the reservation's start and `len` its length,
        // inside this thread's buffer, reserved for this writer only.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        self.commit(len);
        false
    }

    /// Trace buffers, slow path: the reservation `[old, old + len)` did
    /// not fit. Hands the committed bytes to `flush`, starts the buffer
    /// afresh and returns the new place of the record, or drops the record
    /// (counted) when that cannot be done safely: another slow path or a
    /// half-done write below this one is open (we are in a signal handler
    /// that interrupted it), or the record is larger than the buffer.
    pub(crate) fn trace_overflow(
        &self,
        old: usize,
        len: usize,
        capacity: usize,
        flush: &mut dyn FnMut(&Slot, &[u8]),
    ) -> Option<*mut u8> {
        let undo = || sigatomic::add(&self.reserved, len.wrapping_neg());
        if len > capacity || !self.try_claim() {
            undo();
            self.count_lost(len);
            return None;
        }
        if old > capacity || self.committed.load(Ordering::Relaxed) != old {
            undo();
            self.release();
            self.count_lost(len);
            return None;
        }
        let base = self.base.load(Ordering::Relaxed);
        if old > 0 {
            // SAFETY: [base, base + old) was reserved and committed by
            // writers of this thread, and every write is complete
            // (committed == old); nothing writes there until we reset.
            let data = unsafe { std::slice::from_raw_parts(base, old) };
            flush(self, data);
        }
        // Handlers that ran since our reservation saw reserved > capacity
        // and undid theirs, so reserved == old + len here.
        self.committed.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.reserved.store(len, Ordering::Relaxed);
        self.release();
        Some(base)
    }

    /// Trace buffers: hands the committed bytes to `flush` now and starts
    /// afresh. Returns false (and does nothing) when a write or a slow
    /// path of this thread is open.
    pub(crate) fn trace_flush(&self, capacity: usize, flush: &mut dyn FnMut(&Slot, &[u8])) -> bool {
        if !self.try_claim() {
            return false;
        }
        let flushed = self.trace_flush_claimed(capacity, true, flush);
        self.release();
        flushed
    }

    /// [`Slot::trace_flush`] for a caller that already holds `busy`.
    /// Another thread's buffer with a write open is waited for, at most
    /// 100 steps of 50 µs (5 ms), before it is left out.
    ///
    /// With `reset` false (another thread's buffer, at process exit) the
    /// counters are left alone — only their owner may write them — and the
    /// buffer stays closed: later records of that thread are dropped.
    pub(crate) fn trace_flush_claimed(
        &self,
        capacity: usize,
        reset: bool,
        flush: &mut dyn FnMut(&Slot, &[u8]),
    ) -> bool {
        // Close the fast path first: a handler arriving from here on
        // fails its limit check and, finding `busy`, drops its record.
        self.limit.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // Committed first, as in `ring_snapshot`.
        let mut committed = self.committed.load(Ordering::Acquire);
        let mut reserved = self.reserved.load(Ordering::Relaxed);
        if !reset {
            // Another thread's buffer, which may be in the middle of a
            // write (its fast path was open until just now): that write
            // commits in moments, and no other can begin; the buffer is
            // handed over once it has (a thread that runs calls without
            // pause is inside one a good share of the time, and its whole
            // buffer was left out). One stopped inside its write for good
            // (in a signal handler waiting for this save, or by a
            // debugger) is waited for at most OPEN_WRITE_PATIENCE_STEPS steps.
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000,
            };
            for _ in 0..OPEN_WRITE_PATIENCE_STEPS {
                if reserved == committed {
                    break;
                }
                // SAFETY: a valid timespec; the remainder is not wanted.
                unsafe { libc::nanosleep(&raw const pause, std::ptr::null_mut()) };
                committed = self.committed.load(Ordering::Acquire);
                reserved = self.reserved.load(Ordering::Relaxed);
            }
        }
        if reserved != committed || reserved > capacity {
            if reset {
                self.limit.store(capacity, Ordering::Relaxed);
            }
            return false;
        }
        let base = self.base.load(Ordering::Relaxed);
        if committed > 0 && !base.is_null() {
            // SAFETY: as in `trace_overflow`: [base, base + committed) is
            // complete and no writer can reserve while limit is 0.
            let data = unsafe { std::slice::from_raw_parts(base, committed) };
            flush(self, data);
        }
        if reset {
            self.reserved.store(0, Ordering::Relaxed);
            self.committed.store(0, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            self.limit.store(capacity, Ordering::Relaxed);
        }
        true
    }

    /// [`Slot::ring_reserve`] of `LEN` bytes, with the stride known when
    /// compiled: the reservation is one `xadd` addressed from the slot.
    #[inline(always)]
    pub(crate) fn ring_reserve_of<const LEN: usize>(&self) -> *mut u8 {
        self.ring_place(self.reserve_of::<LEN>())
    }

    /// [`Slot::trace_reserve`] of `LEN` bytes, known when compiled.
    #[inline(always)]
    pub(crate) fn trace_reserve_of<const LEN: usize>(&self) -> Result<*mut u8, usize> {
        self.trace_place(self.reserve_of::<LEN>(), LEN)
    }

    /// [`Slot::commit`] of `LEN` bytes, known when compiled: one `add` of
    /// a constant addressed from the slot (no address nor constant made
    /// in a register first: a traced call's write path is counted in
    /// micro-operations next to `rdtsc`'s).
    #[inline(always)]
    pub(crate) fn commit_of<const LEN: usize>(&self) {
        // The `add` takes a sign-extended 32-bit immediate.
        const {
            assert!(
                LEN <= i32::MAX as usize,
                "a record longer than an immediate"
            );
        }
        compiler_fence(Ordering::SeqCst);
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: `committed` lies `offset_of!` bytes into this slot, an
        // aligned word; one `add` on memory is signal-atomic, as in
        // `sigatomic::add`, whose contract this follows.
        unsafe {
            std::arch::asm!(
                "add qword ptr [{slot} + {offset}], {len}",
                slot = in(reg) std::ptr::from_ref(self),
                offset = const std::mem::offset_of!(Slot, committed),
                len = const LEN,
                options(nostack),
            );
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        sigatomic::add(&self.committed, LEN);
    }

    /// `sigatomic::fetch_add` of `LEN` on `reserved`, addressed from the
    /// slot.
    #[inline(always)]
    fn reserve_of<const LEN: usize>(&self) -> usize {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            let mut value = LEN;
            // SAFETY: `reserved` lies `offset_of!` bytes into this slot, an
            // aligned word; as in `sigatomic::fetch_add`, whose contract
            // this follows.
            unsafe {
                std::arch::asm!(
                    "xadd qword ptr [{slot} + {offset}], {value}",
                    slot = in(reg) std::ptr::from_ref(self),
                    offset = const std::mem::offset_of!(Slot, reserved),
                    value = inout(reg) value,
                    options(nostack),
                );
            }
            value
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        sigatomic::fetch_add(&self.reserved, LEN)
    }

    /// Circular buffers: reserves the next `stride` bytes, overwriting the
    /// oldest record once the ring is full.
    #[inline(always)]
    pub(crate) fn ring_reserve(&self, stride: usize) -> *mut u8 {
        self.ring_place(sigatomic::fetch_add(&self.reserved, stride))
    }

    /// Where a ring's reservation at position `old` lies.
    #[inline(always)]
    fn ring_place(&self, old: usize) -> *mut u8 {
        sigatomic::after_reserve();
        let mask = self.limit.load(Ordering::Relaxed);
        self.base.load(Ordering::Relaxed).wrapping_add(old & mask)
    }

    /// Circular buffers: copies the records still in the ring, newest
    /// first, into `out` (each `stride` bytes) and returns the position
    /// after the newest one (position / capacity = times wrapped). Safe
    /// to call from any thread while the owner keeps writing: records that
    /// the owner overwrote during the copy are left out, and so is a
    /// record that was still being written.
    ///
    /// `by` says who reads. The owner itself (a signal handler that
    /// interrupted one of its writes) finds the counters apart for as
    /// long as it runs: `None` at once. Another thread waits a while for
    /// them to meet; an owner stopped for good inside a write (it crashed
    /// there, and this is the crash's save) never lets them, and then the
    /// records below `committed` are taken, which leaves the open one out
    /// when nothing was written inside it. Where a signal handler did
    /// write inside the open write before the crash, that bound takes the
    /// open record (stale or half written) and leaves the handler's out:
    /// telling them apart would need the open reservation's place kept
    /// on every write.
    pub(crate) fn ring_snapshot(
        &self,
        capacity: usize,
        stride: usize,
        out: &mut Vec<u8>,
        by: SnapshotBy,
    ) -> Option<u64> {
        let base = self.base.load(Ordering::Acquire);
        if base.is_null() {
            return Some(0);
        }
        let tries = match by {
            SnapshotBy::Owner => 1,
            SnapshotBy::OtherThread => 10_000,
        };
        // Room made before the newest record is chosen: from then on the
        // owner overwrites the oldest ones.
        out.clear();
        out.reserve(capacity);
        let mut newest = None;
        for _ in 0..tries {
            // Committed first: committed <= reserved at every instant and
            // the ring's reserved only grows, so equal values read in this
            // order mean that no write was open when `committed` was read.
            // Unequal, the records below `committed` are whole: a write
            // commits before the next one reserves.
            let committed = self.committed.load(Ordering::Acquire);
            let reserved = self.reserved.load(Ordering::Acquire);
            if reserved == committed {
                newest = Some(committed);
                break;
            }
            if by == SnapshotBy::OtherThread {
                newest = Some(committed);
            }
            std::hint::spin_loop();
        }
        let newest = newest?;
        let oldest = newest.saturating_sub(capacity);
        // Newest first, in batches, while the owner goes on overwriting
        // the oldest: the two meet, and what the copy reached first is
        // kept, so the share kept is the copy's speed against the
        // owner's. A record is kept if the owner had not reserved its
        // place again when the batch that holds it was copied; the copy
        // stops at the first that it had. Looked at a batch at a time:
        // the counter is on a line the owner writes on every record.
        // Each batch's room is made at once (growing the copy a record at
        // a time made it slower than a busy owner's writing, and it kept
        // 70% of the ring, where it keeps 80 to 90% now: BENCHMARKS.md).
        // Oldest first keeps more from an owner the copy outruns (93%),
        // but a copy that loses the CPU for a while is overtaken and
        // keeps only what it copies after, where newest first keeps what
        // it had copied before (25% against 85% of a 1 MiB ring with two
        // writers on two CPUs).
        let words = stride.is_multiple_of(8) && base.align_offset(8) == 0;
        let batch = (SNAPSHOT_BATCH_BYTES / stride).max(1) * stride;
        let mut top = newest;
        while top > oldest {
            let bottom = top.saturating_sub(batch).max(oldest);
            let batch_at = out.len();
            out.resize(batch_at + (top - bottom), 0);
            for (k, record) in out[batch_at..].chunks_exact_mut(stride).enumerate() {
                let pos = top - (k + 1) * stride;
                let src = base.wrapping_add(pos & (capacity - 1));
                if words {
                    for (j, word) in record.chunks_exact_mut(8).enumerate() {
                        // Aligned: base is, and stride is a multiple of 8.
                        #[allow(clippy::cast_ptr_alignment)]
                        let at = src.wrapping_add(8 * j).cast::<u64>();
                        // SAFETY: `at` lies inside the ring (pos is a
                        // record start, stride divides capacity) and is
                        // aligned. Volatile: the owner may be writing it;
                        // a torn copy is left out below.
                        let w = unsafe { std::ptr::read_volatile(at) };
                        word.copy_from_slice(&w.to_ne_bytes());
                    }
                } else {
                    for (j, byte) in record.iter_mut().enumerate() {
                        // SAFETY: as above, a byte at a time.
                        *byte = unsafe { std::ptr::read_volatile(src.wrapping_add(j)) };
                    }
                }
            }
            // The batch's reads before the look at `reserved`.
            fence(Ordering::Acquire);
            // Position p is overwritten by the writer that reserves p +
            // capacity: keep those above the last one that may have.
            let first_valid = self
                .reserved
                .load(Ordering::Acquire)
                .saturating_sub(capacity);
            if bottom < first_valid {
                let kept = top.saturating_sub(first_valid) / stride;
                out.truncate(batch_at + kept * stride);
                break;
            }
            top = bottom;
        }
        Some(newest as u64)
    }
}

/// Bytes of records a ring snapshot copies between two looks at the
/// owner's counter (from 128 to 1024 bytes the share kept was the same,
/// and smaller at 4 KiB and more, which lose more at the meeting point).
const SNAPSHOT_BATCH_BYTES: usize = 512;

/// Who reads a ring ([`Slot::ring_snapshot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotBy {
    /// The thread whose ring it is.
    Owner,
    /// Another thread, while the owner goes on (or has stopped for good).
    OtherThread,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring of `RECORDS` 8-byte records over `memory`.
    const RECORDS: usize = 4;
    const STRIDE: usize = 8;
    const CAPACITY: usize = RECORDS * STRIDE;

    fn ring(memory: &mut [u64; RECORDS]) -> Slot {
        let slot = Slot::new();
        slot.install(1, memory.as_mut_ptr().cast(), CAPACITY - 1);
        slot
    }

    fn write(slot: &Slot, value: u64) {
        let at = slot.ring_reserve(STRIDE);
        // SAFETY: a reservation of STRIDE bytes in the ring's memory.
        unsafe { at.copy_from_nonoverlapping(value.to_le_bytes().as_ptr(), STRIDE) };
        slot.commit(STRIDE);
    }

    fn values(bytes: &[u8]) -> Vec<u64> {
        bytes
            .chunks(STRIDE)
            .map(|r| u64::from_le_bytes(r.try_into().unwrap()))
            .collect()
    }

    /// Another thread's trace buffer flushed at the process's end while
    /// that thread has a write open: the flush waits for the write's
    /// commit (it comes in moments from a running thread) and hands over
    /// every record, the open one too; a write that never commits (its
    /// thread stopped inside it) is waited for a bounded while and the
    /// buffer is left out, as before.
    #[test]
    fn another_threads_open_write_is_waited_for_before_its_buffer_is_flushed() {
        const CAPACITY: usize = 64;
        let mut memory = [0u8; CAPACITY];
        let slot = Slot::new();
        slot.install(1, memory.as_mut_ptr(), CAPACITY);
        let at = slot.trace_reserve(16).unwrap();
        // SAFETY: 16 bytes reserved at `at`.
        unsafe { at.write_bytes(7, 16) };
        slot.commit(16);
        // The next write reserved, its commit to come.
        let open = slot.trace_reserve(16).unwrap() as usize;
        let flushed = std::thread::scope(|scope| {
            scope.spawn(|| {
                // Once the flush has closed the fast path (and so is
                // waiting for this write), not before.
                while slot.limit.load(Ordering::Relaxed) != 0 {
                    std::hint::spin_loop();
                }
                // SAFETY: the second reservation's 16 bytes.
                unsafe { (open as *mut u8).write_bytes(9, 16) };
                slot.commit(16);
            });
            let mut flushed = Vec::new();
            let done = slot.trace_flush_claimed(CAPACITY, false, &mut |_, data| {
                flushed.extend_from_slice(data);
            });
            assert!(done);
            flushed
        });
        assert_eq!(flushed, [[7u8; 16], [9u8; 16]].concat());

        // Never committed: left out after the wait.
        let slot = Slot::new();
        slot.install(1, memory.as_mut_ptr(), CAPACITY);
        let _ = slot.trace_reserve(16).unwrap();
        let started = std::time::Instant::now();
        let mut called = false;
        assert!(!slot.trace_flush_claimed(CAPACITY, false, &mut |_, _| called = true));
        assert!(!called);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    /// The reservations and commit with the size known when compiled
    /// move the counters as the others do, and point where they do.
    #[test]
    fn reservations_of_a_known_size_move_the_counters_as_the_others() {
        let mut memory = [0u64; RECORDS];
        let slot = ring(&mut memory);
        let base = memory.as_ptr() as usize;
        for i in 0..6 {
            let at = slot.ring_reserve_of::<STRIDE>();
            assert_eq!(at as usize, base + (i * STRIDE) % CAPACITY);
            assert_eq!(slot.reserved.load(Ordering::Relaxed), (i + 1) * STRIDE);
            assert_eq!(slot.committed.load(Ordering::Relaxed), i * STRIDE);
            slot.commit_of::<STRIDE>();
            assert_eq!(slot.committed.load(Ordering::Relaxed), (i + 1) * STRIDE);
        }

        let mut memory = [0u64; RECORDS];
        let slot = Slot::new();
        slot.install(1, memory.as_mut_ptr().cast(), CAPACITY);
        let base = memory.as_ptr() as usize;
        for i in 0..RECORDS {
            assert_eq!(
                slot.trace_reserve_of::<STRIDE>(),
                Ok((base + i * STRIDE) as *mut u8)
            );
            slot.commit_of::<STRIDE>();
        }
        // Full: the reservation is held, at its old place.
        assert_eq!(slot.trace_reserve_of::<STRIDE>(), Err(CAPACITY));
        assert_eq!(slot.reserved.load(Ordering::Relaxed), CAPACITY + STRIDE);
        assert_eq!(slot.committed.load(Ordering::Relaxed), CAPACITY);
    }

    #[test]
    fn a_snapshot_takes_the_newest_records_of_a_wrapped_ring() {
        let mut memory = [0u64; RECORDS];
        let slot = ring(&mut memory);
        for v in 1..=6 {
            write(&slot, v);
        }
        let mut out = Vec::new();
        assert_eq!(
            slot.ring_snapshot(CAPACITY, STRIDE, &mut out, SnapshotBy::Owner),
            Some(48)
        );
        assert_eq!(values(&out), [6, 5, 4, 3]);
    }

    /// A ring of several snapshot batches, wrapped partway through one:
    /// every batch copied whole, in order, newest first.
    #[test]
    fn a_snapshot_of_many_batches_takes_every_record_in_order() {
        const MANY: usize = 4 * SNAPSHOT_BATCH_BYTES / STRIDE;
        let mut memory = vec![0u64; MANY];
        let slot = Slot::new();
        slot.install(1, memory.as_mut_ptr().cast(), MANY * STRIDE - 1);
        let written = (MANY + MANY / 3) as u64;
        for v in 1..=written {
            write(&slot, v);
        }
        let mut out = Vec::new();
        assert_eq!(
            slot.ring_snapshot(MANY * STRIDE, STRIDE, &mut out, SnapshotBy::OtherThread),
            Some(written * STRIDE as u64)
        );
        let want: Vec<u64> = (1..=written).rev().take(MANY).collect();
        assert_eq!(values(&out), want);
    }

    /// The owner stopped inside a write for good (a crash there): the
    /// records below the open one, not nothing.
    #[test]
    fn a_write_left_open_for_good_leaves_it_out_of_the_snapshot() {
        let mut memory = [0u64; RECORDS];
        let slot = ring(&mut memory);
        for v in 1..=5 {
            write(&slot, v);
        }
        // Reserved and half written, never committed.
        let open = slot.ring_reserve(STRIDE);
        // SAFETY: as in `write`.
        unsafe { open.copy_from_nonoverlapping([0xde, 0xad].as_ptr(), 2) };
        let mut out = Vec::new();
        assert_eq!(
            slot.ring_snapshot(CAPACITY, STRIDE, &mut out, SnapshotBy::OtherThread),
            Some(40)
        );
        // Record 2 shares the open record's place and is overwritten by
        // it: the newest three whole records.
        assert_eq!(values(&out), [5, 4, 3]);
        // The owner itself, in a handler that interrupted the write: no
        // snapshot (the counters cannot meet while it runs), at once.
        assert_eq!(
            slot.ring_snapshot(CAPACITY, STRIDE, &mut out, SnapshotBy::Owner),
            None
        );
    }
}
