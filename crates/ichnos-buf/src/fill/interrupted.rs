//! The writes a thread's signal handlers interrupted, kept so that a
//! handler left by a `longjmp` can close them.
//!
//! A write is a reservation, the stores and a commit. A signal handler
//! that runs between the reservation and the commit may write records of
//! its own (they stay whole, after the open one: see the protocol in
//! `slot.rs`), and when it returns the interrupted write commits. But a
//! handler may also never return: `siglongjmp` out of it goes back to a
//! place outside it, and the write it interrupted is abandoned, its bytes
//! reserved and never committed. The buffer then never again finds its
//! counters equal, so it can never be flushed: a trace runtime whose
//! program jumps out of a timer's handler loses the thread's whole trace
//! from there on. Every read of the time-stamp counter in such a runtime
//! lies between a reservation and its commit, so a timer's signal lands
//! inside an open write often.
//!
//! [`Interrupted`] is kept per thread by a runtime that runs the
//! program's handlers through its own entry point: [`Interrupted::enter`]
//! when a handler begins, [`Interrupted::leave`] when it returns, and
//! [`Interrupted::leave_to`] when a `longjmp` leaves handlers. The last
//! marks the abandoned records with bytes of the caller's choosing (a
//! record its readers pass over) and commits them.
//!
//! Which bytes a handler interrupted is worked out at its entry from the
//! counters, which hold sums, not places: the open bytes are `reserved -
//! committed`, less what the handlers it runs inside already noted as
//! open beneath them; they are the last reserved, unless an earlier
//! handler at the same level wrote inside the same open write and
//! returned, which the record of the last handler to return tells.

use super::slot::Slot;
use super::{fast_tls, sigatomic, thread, FillBuffer, Kind};
use std::sync::atomic::Ordering;

/// Handlers running at once on a thread whose interrupted writes are
/// kept; those nested deeper are counted, and what they interrupted is
/// not closed.
pub const MAX_HANDLER_LEVELS: usize = 8;

/// A write a handler interrupted: `len` bytes at position `at` (trace
/// buffers: since the buffer's last flush, the `flushes`-th; circular
/// buffers: counted from the thread's first record), and the counters
/// when it was found open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenWrite {
    at: usize,
    len: usize,
    flushes: u64,
    found: Counters,
}

/// A slot's counters as a handler found them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counters {
    reserved: usize,
    committed: usize,
    flushes: u64,
}

impl Counters {
    fn of(slot: &Slot) -> Counters {
        // Committed first, as everywhere a reader compares them.
        let committed = slot.committed.load(Ordering::Acquire);
        Counters {
            reserved: slot.reserved.load(Ordering::Acquire),
            committed,
            flushes: slot.flushes.load(Ordering::Relaxed),
        }
    }
}

/// The last handler to return: its level, the write it had found open
/// (still open then), and the counters as it left them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Returned {
    level: u32,
    write: OpenWrite,
    counters: Counters,
}

/// One thread's running signal handlers and the write of one buffer each
/// interrupted. Plain data, kept by the caller per thread (in a
/// thread-local cell: every method is async-signal-safe, and allocates
/// nothing).
#[derive(Clone, Copy, Debug)]
pub struct Interrupted {
    /// The longest write the buffer's writers make: more bytes open than
    /// this are more than one write (one abandoned before, unseen), and
    /// which is which cannot be told.
    largest_write: usize,
    /// Handlers running.
    levels: u32,
    /// The write each of the outermost [`MAX_HANDLER_LEVELS`] found open.
    open: [Option<OpenWrite>; MAX_HANDLER_LEVELS],
    returned: Option<Returned>,
}

impl Interrupted {
    /// No handler running, for a buffer whose writes are at most
    /// `largest_write` bytes each (a trace runtime's: its event's size).
    #[must_use]
    pub const fn new(largest_write: usize) -> Interrupted {
        Interrupted {
            largest_write,
            levels: 0,
            open: [None; MAX_HANDLER_LEVELS],
            returned: None,
        }
    }

    /// Handlers running now.
    #[must_use]
    pub fn levels(&self) -> u32 {
        self.levels
    }

    /// A signal handler begins on this thread: the write of `buffer` it
    /// interrupted, if one is open, is noted.
    pub fn enter(&mut self, buffer: &FillBuffer) {
        let level = self.levels;
        self.levels = level.saturating_add(1);
        let Some(here) = self.open.get_mut(level as usize) else {
            return;
        };
        *here = None;
        let Some(slot) = buffer.own_slot() else {
            return;
        };
        let now = Counters::of(slot);
        let beneath: usize = self.open[..level as usize]
            .iter()
            .flatten()
            .map(|w| w.len)
            .sum();
        let open = now.reserved.wrapping_sub(now.committed);
        if open == 0 || open <= beneath || open > now.reserved {
            return;
        }
        let len = open - beneath;
        if len > self.largest_write {
            return;
        }
        let write = match self.returned {
            // A handler at this level wrote inside the same open write
            // and returned, and nothing moved since: the write is where
            // that handler found it, not the last reserved.
            Some(r) if r.level == level + 1 && r.counters == now && r.write.len == len => r.write,
            _ => OpenWrite {
                at: now.reserved - len,
                len,
                flushes: now.flushes,
                found: now,
            },
        };
        self.open[level as usize] = Some(write);
    }

    /// The handler that began last returns.
    pub fn leave(&mut self, buffer: &FillBuffer) {
        let Some(level) = self.levels.checked_sub(1) else {
            return;
        };
        self.levels = level;
        let Some(here) = self.open.get_mut(level as usize) else {
            return;
        };
        self.returned = here.take().and_then(|write| {
            buffer.own_slot().map(|slot| Returned {
                level: level + 1,
                write,
                counters: Counters::of(slot),
            })
        });
    }

    /// A `longjmp` leaves every handler running above `level` (0: all of
    /// them): the writes of `buffer` they interrupted will never be
    /// finished. Each is handed to `mark`, which should make it a record
    /// the buffer's readers pass over (its bytes are stale or half
    /// written), and committed, so that the buffer is flushed again. A
    /// record a ring has since overwritten is committed unmarked; a
    /// reservation that did not fit a trace buffer (its writer was about
    /// to hand the buffer over) is given back. A write
    /// that is not open any more as noted (a handler left another way,
    /// not seen) is left alone. Returns how many writes were closed.
    pub fn leave_to(
        &mut self,
        buffer: &FillBuffer,
        level: u32,
        mut mark: impl FnMut(&mut [u8]),
    ) -> usize {
        let mut closed = 0;
        while self.levels > level {
            self.levels -= 1;
            let Some(here) = self.open.get_mut(self.levels as usize) else {
                continue;
            };
            let Some(write) = here.take() else {
                continue;
            };
            if let Some(slot) = buffer.own_slot() {
                if close(buffer.kind(), slot, write, &mut mark) {
                    closed += 1;
                }
            }
        }
        self.returned = None;
        closed
    }
}

/// Marks and commits `write` in `slot`, if it is still open as noted.
fn close(kind: Kind, slot: &Slot, write: OpenWrite, mark: &mut dyn FnMut(&mut [u8])) -> bool {
    let now = Counters::of(slot);
    let open = now.reserved.wrapping_sub(now.committed);
    let Some(end) = write.at.checked_add(write.len) else {
        return false;
    };
    if open < write.len || open > now.reserved || end > now.reserved {
        return false;
    }
    // Every byte reserved since the write was found open is committed
    // (the handlers' writes, and those of deeper handlers just closed),
    // and the write itself is not: else it is not open as noted (its
    // handler was left unseen and it finished).
    if now.reserved.wrapping_sub(write.found.reserved)
        != now.committed.wrapping_sub(write.found.committed)
    {
        return false;
    }
    let base = slot.base.load(Ordering::Relaxed);
    if base.is_null() {
        return false;
    }
    match kind {
        Kind::Trace { capacity } => {
            if now.flushes != write.flushes {
                return false;
            }
            if end > capacity {
                // A reservation that did not fit, interrupted before its
                // writer went to hand the buffer over: no bytes are its,
                // and later reservations (each given back by its writer,
                // or open beneath it) are counted past it. Given back.
                sigatomic::add(&slot.reserved, write.len.wrapping_neg());
                return true;
            }
            // SAFETY: [at, end) lies in this thread's buffer (end <=
            // capacity), reserved and never committed: no writer will
            // touch it again, and no flush hands it out before the commit
            // below.
            mark(unsafe { std::slice::from_raw_parts_mut(base.add(write.at), write.len) });
        }
        Kind::Circular { capacity, .. } => {
            // Overwritten since by records the handlers wrote: those are
            // kept as they are.
            if now.reserved - write.at <= capacity {
                let wrap = slot.limit.load(Ordering::Relaxed);
                let start = write.at & wrap;
                if start + write.len <= capacity {
                    // SAFETY: as above, inside the ring's memory.
                    mark(unsafe { std::slice::from_raw_parts_mut(base.add(start), write.len) });
                }
            }
        }
    }
    slot.commit(write.len);
    true
}

impl FillBuffer {
    /// The calling thread's slot of this buffer, if it serves it (not
    /// before the thread's first write). Async-signal-safe.
    pub(crate) fn own_slot(&self) -> Option<&Slot> {
        let block = match fast_tls::provided_at(self.key.block_offset) {
            Some(block) => block,
            None => fast_tls::block(),
        };
        let slot_ptr = thread::slot_in_block(block, self.key.index);
        if slot_ptr.is_null() {
            return None;
        }
        // SAFETY: this thread's slot, which lives as long as the thread
        // (the reference is not `Send`: it stays on this thread).
        let slot = unsafe { &*slot_ptr };
        (slot.owner.load(Ordering::Relaxed) == self.key.id).then_some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A hook's reservation past a full buffer's end, interrupted before
    /// it hands the buffer over (here the counters are moved as its
    /// reservation moves them): a longjmp out of the handler gives it
    /// back, and the next write flushes the buffer as usual.
    #[test]
    fn a_reservation_that_did_not_fit_is_given_back() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let buf = FillBuffer::trace(64, move |f: &super::super::Flush<'_>| {
            sink.lock().unwrap().extend_from_slice(f.data);
        })
        .unwrap();
        for byte in 1..=4 {
            buf.write(&[byte; 16]).unwrap();
        }
        let slot = buf.own_slot().unwrap();
        assert_eq!(slot.trace_reserve(16), Err(64));
        let mut handlers = Interrupted::new(16);
        handlers.enter(&buf);
        // The handler's own record cannot be placed: dropped.
        assert!(buf.write(&[5; 16]).is_err());
        assert!(!buf.flush());
        assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(0xEE)), 1);
        buf.write(&[6; 16]).unwrap();
        assert!(buf.flush());
        let records: Vec<u8> = out.lock().unwrap().chunks(16).map(|r| r[0]).collect();
        assert_eq!(records, [1, 2, 3, 4, 6]);
    }
}
