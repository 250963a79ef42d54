//! Writers bound to one buffer and one record size, for a program that
//! provided the thread block ([`provide_thread_block`]): the write path
//! of a trace runtime's hooks, with no decision left in it that was made
//! once when the writer was.
//!
//! [`FillBuffer::write_with_provided`] serves any buffer, any record size
//! and either kind, so on every record it checks that a block was
//! provided, finds which of the thread's slots is the buffer's, and
//! checks the kind and the size. A writer makes those checks once: it
//! exists only for buffer 0 (whose slot is in the block itself), one kind
//! and records of `LEN` bytes, so that its write is the thread pointer
//! plus a fixed offset, the owner check (a thread's first write, which
//! sets its buffer up, still takes the slow path), the reservation, the
//! stores and the commit. On a traced call that is a load and a branch
//! fewer per check, each a few micro-operations next to `rdtsc`'s
//! microcode (BENCHMARKS.md, issue 16).
//!
//! [`provide_thread_block`]: super::provide_thread_block

use super::slot::Slot;
use super::{fast_tls, FillBuffer, Kind, OpenRecord};
use std::sync::atomic::Ordering;

/// What both writers hold: the buffer (for the slow paths), its owner id
/// and the provided block's offset from the thread pointer (never 0).
#[derive(Clone, Copy, Debug)]
struct BlockSlot<'a> {
    buffer: &'a FillBuffer,
    id: u64,
    offset: isize,
}

impl<'a> BlockSlot<'a> {
    /// The writer's parts, if `buffer` holds index 0 (whose slot is in the
    /// block), a block was provided before it was made, and it is not in
    /// guard-page mode (whose writes go through the guard's own routine).
    fn of(buffer: &'a FillBuffer) -> Option<BlockSlot<'a>> {
        let key = &buffer.key;
        (key.index == 0 && key.block_offset != 0 && !key.guarded).then_some(BlockSlot {
            buffer,
            id: key.id,
            offset: key.block_offset,
        })
    }

    /// A write before the thread's slot serves the buffer (its first), out
    /// of line. Its result is a bool, not a `Result` (whose error is
    /// returned through memory), so that the write path inlined into a
    /// hook keeps no stack frame for it and jumps here.
    #[cold]
    #[inline(never)]
    fn first_write<const LEN: usize>(&self, fill: impl FnOnce(&mut [u8; LEN])) -> bool {
        self.buffer
            .write_with_slow(LEN, |d| fill_array(d, fill))
            .is_ok()
    }

    /// A trace buffer's write that found it full (its reservation at `old`
    /// is held), out of line as [`BlockSlot::first_write`] is.
    #[cold]
    #[inline(never)]
    fn after_full<const LEN: usize>(&self, old: usize, fill: impl FnOnce(&mut [u8; LEN])) -> bool {
        self.buffer
            .write_after_full(old, LEN, |d| fill_array(d, fill))
            .is_ok()
    }

    /// The calling thread's slot of buffer 0, if it serves this buffer
    /// (not before the thread's first write).
    #[inline(always)]
    fn mine(&self) -> Option<*const Slot> {
        let block = fast_tls::provided_at_known(self.offset);
        // SAFETY: the provided block of this thread, which lives as long
        // as the thread (`provide_thread_block`'s contract).
        let slot = unsafe { &raw const (*block).first };
        // SAFETY: as above.
        (unsafe { &*slot }.owner.load(Ordering::Relaxed) == self.id).then_some(slot)
    }
}

/// Writes records of `LEN` bytes into a circular buffer whose stride is
/// `LEN` ([`FillBuffer::ring_writer`]).
#[derive(Clone, Copy, Debug)]
pub struct RingWriter<'a, const LEN: usize>(BlockSlot<'a>);

/// Writes records of `LEN` bytes into a trace buffer
/// ([`FillBuffer::trace_writer`]).
#[derive(Clone, Copy, Debug)]
pub struct TraceWriter<'a, const LEN: usize>(BlockSlot<'a>);

impl FillBuffer {
    /// A writer of this circular buffer's records, if the program
    /// provided the thread block before the buffer was made, the buffer
    /// holds index 0 (the first made while no other does), and its stride
    /// is `LEN`.
    #[must_use]
    pub fn ring_writer<const LEN: usize>(&self) -> Option<RingWriter<'_, LEN>> {
        match self.key.kind {
            Kind::Circular { stride, .. } if stride == LEN => BlockSlot::of(self).map(RingWriter),
            _ => None,
        }
    }

    /// A writer of records of `LEN` bytes into this trace buffer, if the
    /// program provided the thread block before the buffer was made, the
    /// buffer holds index 0 (the first made while no other does), is not
    /// in guard-page mode, and holds at least one such record.
    #[must_use]
    pub fn trace_writer<const LEN: usize>(&self) -> Option<TraceWriter<'_, LEN>> {
        match self.key.kind {
            Kind::Trace { capacity } if (1..=capacity).contains(&LEN) => {
                BlockSlot::of(self).map(TraceWriter)
            }
            _ => None,
        }
    }
}

impl<const LEN: usize> RingWriter<'_, LEN> {
    /// Reserves the ring's next record, lets `fill` store it (it sees the
    /// oldest record's bytes, or zeros: it should write them all) and
    /// commits it: [`FillBuffer::write_with`] for this buffer. False if
    /// the record was dropped (counted: see the module documentation of
    /// [`super`]).
    #[inline(always)]
    pub fn write(&self, fill: impl FnOnce(&mut [u8; LEN])) -> bool {
        let Some(slot) = self.0.mine() else {
            return self.0.first_write(fill);
        };
        // SAFETY: this thread's slot, which lives as long as the thread.
        let ptr = unsafe { &*slot }.ring_reserve_of::<LEN>();
        // SAFETY: `ptr` holds LEN bytes of this thread's ring (the stride
        // divides the capacity), just reserved in `slot`.
        unsafe { fill_reserved(slot, ptr, fill) };
        true
    }
}

impl<const LEN: usize> TraceWriter<'_, LEN> {
    /// Reserves `LEN` bytes, lets `fill` store the record and commits it;
    /// a full buffer is flushed first: [`FillBuffer::write_with`] for
    /// this buffer. False if the record was dropped (counted: see the
    /// module documentation of [`super`]).
    #[inline(always)]
    pub fn write(&self, fill: impl FnOnce(&mut [u8; LEN])) -> bool {
        let Some(slot) = self.0.mine() else {
            return self.0.first_write(fill);
        };
        // SAFETY: this thread's slot, which lives as long as the thread.
        match unsafe { &*slot }.trace_reserve_of::<LEN>() {
            Ok(ptr) => {
                // SAFETY: `ptr` holds LEN bytes inside this thread's
                // buffer, just reserved in `slot`.
                unsafe { fill_reserved(slot, ptr, fill) };
                true
            }
            Err(old) => self.0.after_full(old, fill),
        }
    }
}

/// Lets `fill` store the record reserved at `ptr` in `slot`, and commits
/// it (as zeros, if `fill` unwinds).
///
/// # Safety
/// `ptr` holds `LEN` bytes of the calling thread's buffer, reserved in
/// `slot` (the thread's own) for this writer, not yet committed.
#[inline(always)]
unsafe fn fill_reserved<const LEN: usize>(
    slot: *const Slot,
    ptr: *mut u8,
    fill: impl FnOnce(&mut [u8; LEN]),
) {
    let open = OpenRecord {
        slot,
        ptr,
        len: LEN,
    };
    // SAFETY: the caller's reservation of LEN bytes, this writer's until
    // committed; [u8; LEN] has alignment 1.
    fill(unsafe { &mut *ptr.cast::<[u8; LEN]>() });
    open.commit_of::<LEN>();
}

/// `fill` on a slow path's reservation, which is `LEN` bytes.
#[inline(always)]
fn fill_array<const LEN: usize>(bytes: &mut [u8], fill: impl FnOnce(&mut [u8; LEN])) {
    if let Ok(record) = <&mut [u8; LEN]>::try_from(bytes) {
        fill(record);
    }
}
