//! Short calls left out as the program runs (`ichnos trace -t MIN`, as
//! uftrace's record-time time filter does): each entry is held back in a
//! per-thread stack until its call is known to matter, that is, until it
//! returns after at least MIN or a call inside it is written. Then the
//! entries held below it are written first, with the times they
//! happened, so the events still come in time order. A call shorter than
//! MIN, with everything it called, leaves nothing.
//!
//! An explicit event (a probe, a snapshot, a catch) writes the entries
//! held first: it is kept, and so is where it happened. Calls deeper than
//! the stack holds are written as they come.
//!
//! A `setjmp` is not kept for its own sake: its marker only tells a
//! reader which calls a later `longjmp` leaves. So it is held back too,
//! at its place among the entries (after the calls open then, before any
//! entered since), and written with them when they are; one whose caller
//! returns first leaves nothing. A `longjmp` ends the calls entered since
//! its `setjmp`: those that lasted MIN until it are written (and the
//! reader closes them at its marker), the others leave nothing, and where
//! none of them, nor the `setjmp`, was written, the `longjmp` leaves
//! nothing either. (Written at once, a `setjmp` in a short function, as
//! Lua's every protected call makes, kept that call and its callers.)
//! Entries still held when a thread ends (calls that never returned) are
//! not written, nor the calls of a signal handler that interrupts this
//! module's few instructions of bookkeeping for a call.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use ichnos_data::wire::event;

/// Calls shorter than this many ticks are left out; 0: no time filter.
static MIN_TICKS: AtomicU64 = AtomicU64::new(0);

/// Entries a thread holds back at most (the deepest open calls beyond
/// are written as they come).
const HELD: usize = 256;

thread_local! {
    /// The open calls' entries, bottom first: function and ticks.
    static STACK: [Cell<(u64, u64)>; HELD] = const { [const { Cell::new((0, 0)) }; HELD] };
    /// Open calls (may pass HELD).
    static OPEN: Cell<usize> = const { Cell::new(0) };
    /// The bottom open calls whose entries are written.
    static WRITTEN: Cell<usize> = const { Cell::new(0) };
    /// The thread is inside this module's bookkeeping: a signal handler
    /// that runs traced code in between would find the stack half
    /// changed, so its calls are left out (the window is a few
    /// instructions of each call).
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// `setjmp` markers held back: `jmp_buf`, open calls then, ticks
    /// (`jmp_buf` 0: a free slot).
    static JUMPS: [Cell<(u64, usize, u64)>; HELD_JUMPS] =
        const { [const { Cell::new((0, 0, 0)) }; HELD_JUMPS] };
    /// How many of `JUMPS` are taken (most exits look no further).
    static HELD_JUMP_COUNT: Cell<usize> = const { Cell::new(0) };
}

/// `setjmp` markers a thread holds back at most (past them, one is
/// written at once, with the entries held below it).
const HELD_JUMPS: usize = 8;

/// Runs `f` as the thread's only user of the stack; nothing if a call
/// interrupted by a signal handler is in it already.
fn exclusively(f: impl FnOnce()) {
    let _ = try_exclusively(f);
}

/// Whether the thread is inside the bookkeeping (a signal handler that
/// interrupted it is running).
pub(crate) fn busy() -> bool {
    BUSY.with(Cell::get)
}

/// A `longjmp` out of a signal handler that interrupted the bookkeeping
/// (to a `setjmp` made outside it) leaves it unfinished for good: the
/// thread's stack is made whole again (the count of held `setjmp`s from
/// their slots, no more entries written than are open) and usable.
pub(crate) fn leave_interrupted() {
    if !BUSY.with(Cell::get) {
        return;
    }
    let held = JUMPS.with(|jumps| jumps.iter().filter(|j| j.get().0 != 0).count());
    HELD_JUMP_COUNT.with(|n| n.set(held));
    let open = OPEN.with(Cell::get);
    WRITTEN.with(|w| w.set(w.get().min(open)));
    BUSY.with(|b| b.set(false));
}

/// The open calls a held-back `setjmp` into `buffer` had (its place,
/// where the thread's table of places has lost it).
pub(crate) fn held_jump_level(buffer: u64) -> Option<usize> {
    if HELD_JUMP_COUNT.with(Cell::get) == 0 {
        return None;
    }
    JUMPS.with(|jumps| {
        jumps
            .iter()
            .map(Cell::get)
            .find(|j| j.0 == buffer)
            .map(|j| j.1)
    })
}

/// [`exclusively`], with `f`'s result if it ran.
fn try_exclusively<R>(f: impl FnOnce() -> R) -> Option<R> {
    if BUSY.with(|b| b.replace(true)) {
        return None;
    }
    let result = f();
    BUSY.with(|b| b.set(false));
    Some(result)
}

/// Sets the time filter (ticks; 0 for none), once, at the start.
pub(crate) fn configure(min_ticks: u64) {
    MIN_TICKS.store(min_ticks, Ordering::Relaxed);
    if min_ticks != 0 {
        crate::scope::not_plain();
    }
}

/// Whether entries are held back.
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
pub(crate) fn holding() -> bool {
    MIN_TICKS.load(Ordering::Relaxed) != 0
}

/// Writes the held entries of the open calls below `upto`.
fn write_held(upto: usize) {
    let from = WRITTEN.with(Cell::get);
    let upto = upto.min(HELD);
    if from >= upto {
        return;
    }
    STACK.with(|stack| {
        for (at, held) in stack.iter().enumerate().take(upto).skip(from) {
            write_jumps_at(at);
            let (function, ticks) = held.get();
            crate::record_at(ticks, event::ENTER, function);
            // Kept as it goes: bookkeeping a signal handler leaves for good
            // (by a longjmp) writes no entry twice.
            WRITTEN.with(|w| w.set(at + 1));
        }
    });
    write_jumps_at(upto);
    WRITTEN.with(|w| w.set(upto));
}

/// Writes the `setjmp` markers held back with `open` calls open then, in
/// the order they came.
fn write_jumps_at(open: usize) {
    if HELD_JUMP_COUNT.with(Cell::get) == 0 {
        return;
    }
    JUMPS.with(|jumps| loop {
        let first = jumps
            .iter()
            .filter(|j| j.get().0 != 0 && j.get().1 == open)
            .min_by_key(|j| j.get().2);
        let Some(jump) = first else { break };
        let (buffer, _, ticks) = jump.replace((0, 0, 0));
        HELD_JUMP_COUNT.with(|n| n.set(n.get().saturating_sub(1)));
        crate::record_at(ticks, event::SETJMP, buffer);
    });
}

/// Forgets the `setjmp` markers held back with more than `open` calls
/// open then: their callers have returned (or been left by a `longjmp`),
/// and their `jmp_buf`s are dead.
fn forget_jumps_above(open: usize) {
    if HELD_JUMP_COUNT.with(Cell::get) == 0 {
        return;
    }
    JUMPS.with(|jumps| {
        for jump in jumps {
            if jump.get().0 != 0 && jump.get().1 > open {
                jump.set((0, 0, 0));
                HELD_JUMP_COUNT.with(|n| n.set(n.get().saturating_sub(1)));
            }
        }
    });
}

/// Whether the marker of a `setjmp` into `buffer` is held back.
pub(crate) fn jump_held(buffer: u64) -> bool {
    HELD_JUMP_COUNT.with(Cell::get) != 0
        && JUMPS.with(|jumps| jumps.iter().any(|j| j.get().0 == buffer))
}

/// A `setjmp` filled `buffer` (tracing on, entries held): its marker is
/// written now if every entry below it is, else held back with them.
pub(crate) fn setjmp(buffer: u64) {
    let ticks = crate::clock::ticks();
    let written = try_exclusively(|| {
        let open = OPEN.with(Cell::get);
        // The same jmp_buf filled again: its place is the new one.
        JUMPS.with(|jumps| {
            for jump in jumps {
                if jump.get().0 == buffer {
                    jump.set((0, 0, 0));
                    HELD_JUMP_COUNT.with(|n| n.set(n.get().saturating_sub(1)));
                }
            }
        });
        if open <= WRITTEN.with(Cell::get) {
            return false;
        }
        let free = JUMPS.with(|jumps| {
            let free = jumps.iter().find(|j| j.get().0 == 0)?;
            free.set((buffer, open, ticks));
            Some(())
        });
        if free.is_some() {
            HELD_JUMP_COUNT.with(|n| n.set(n.get() + 1));
            true
        } else {
            // No room: the entries below it go now, and it after them.
            write_held(open);
            false
        }
    });
    if written != Some(true) {
        crate::record_at(ticks, event::SETJMP, buffer);
    }
}

/// A `longjmp` goes back to `buffer`, whose `setjmp` had `target` calls
/// open: the calls above them end here. Those that lasted the minimum
/// until now are written (with the entries below them), the others are
/// not. Whether the `longjmp`'s marker is to be written: not where its
/// `setjmp`'s is still held back (then no call it ends was written).
pub(crate) fn longjmp(buffer: u64, target: usize) -> bool {
    let now = crate::clock::ticks();
    try_exclusively(|| {
        let open = OPEN.with(Cell::get);
        let held = open.min(HELD);
        let min = MIN_TICKS.load(Ordering::Relaxed);
        // The calls it ends entered one after another: the longest first.
        let mut kept = target.min(open);
        STACK.with(|stack| {
            while kept < held && now.wrapping_sub(stack[kept].get().1) >= min {
                kept += 1;
            }
        });
        if kept > target {
            write_held(kept);
        }
        !jump_held(buffer)
    })
    .unwrap_or(true)
}

/// `function` is entered (a traced call).
pub(crate) fn enter(function: u64) {
    exclusively(|| held_enter(function));
}

fn held_enter(function: u64) {
    let open = OPEN.with(Cell::get);
    let ticks = crate::clock::ticks();
    if open < HELD {
        STACK.with(|s| s[open].set((function, ticks)));
    } else {
        write_held(HELD);
        crate::record_at(ticks, event::ENTER, function);
        WRITTEN.with(|w| w.set(open + 1));
    }
    OPEN.with(|o| o.set(open + 1));
}

/// `function` returns (a traced call).
pub(crate) fn exit(function: u64) {
    exclusively(|| held_exit(function));
}

fn held_exit(function: u64) {
    let open = OPEN.with(Cell::get);
    let ticks = crate::clock::ticks();
    if open == 0 {
        // An exit of a call entered before tracing began: as it is.
        crate::record_at(ticks, event::EXIT, function);
        return;
    }
    let at = open - 1;
    OPEN.with(|o| o.set(at));
    forget_jumps_above(at);
    let written = WRITTEN.with(Cell::get);
    if at < written {
        crate::record_at(ticks, event::EXIT, function);
        WRITTEN.with(|w| w.set(at));
        return;
    }
    let entered = STACK.with(|s| s[at].get().1);
    if ticks.wrapping_sub(entered) >= MIN_TICKS.load(Ordering::Relaxed) {
        write_held(at + 1);
        crate::record_at(ticks, event::EXIT, function);
        WRITTEN.with(|w| w.set(at));
    }
}

/// An explicit event is about to be written: the entries held go first.
pub(crate) fn before_marker() {
    if holding() {
        exclusively(|| write_held(OPEN.with(Cell::get)));
    }
}

/// The open calls now (for a `setjmp` place).
pub(crate) fn open() -> usize {
    OPEN.with(Cell::get)
}

/// A `longjmp` went back to a place with `open` calls open: the calls
/// above it will never return (those whose entries were written, the
/// reader closes at the `longjmp`'s marker).
pub(crate) fn back_to(open: usize) {
    exclusively(|| {
        if OPEN.with(Cell::get) > open {
            OPEN.with(|o| o.set(open));
            WRITTEN.with(|w| w.set(w.get().min(open)));
            forget_jumps_above(open);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's stack: open calls, entries written, held `setjmp`s.
    fn state() -> (usize, usize, usize, bool) {
        (
            OPEN.with(Cell::get),
            WRITTEN.with(Cell::get),
            HELD_JUMP_COUNT.with(Cell::get),
            BUSY.with(Cell::get),
        )
    }

    /// A `setjmp` made above entries not written is held back at its
    /// place, found by its `jmp_buf` (the longjmp's fallback where the
    /// table of places lost it); one made with every entry written is not.
    #[test]
    fn a_setjmp_above_held_entries_is_held_at_its_place() {
        OPEN.with(|o| o.set(2));
        WRITTEN.with(|w| w.set(0));
        setjmp(0x1000);
        assert_eq!(held_jump_level(0x1000), Some(2));
        assert_eq!(state(), (2, 0, 1, false));
        // Filled again deeper: its place is the new one, held once.
        OPEN.with(|o| o.set(3));
        setjmp(0x1000);
        assert_eq!(held_jump_level(0x1000), Some(3));
        assert_eq!(state().2, 1);
        // Its caller returns: forgotten.
        forget_jumps_above(2);
        assert_eq!(held_jump_level(0x1000), None);
        assert_eq!(state().2, 0);
        // Every entry written: written at once, not held.
        WRITTEN.with(|w| w.set(3));
        setjmp(0x2000);
        assert_eq!(held_jump_level(0x2000), None);
    }

    /// Bookkeeping a signal handler interrupted, then left for good by a
    /// `siglongjmp`, is made whole: not busy (it was, for good, and every
    /// later call went untraced), no more entries written than are open,
    /// and the held `setjmp`s counted from their slots.
    #[test]
    fn bookkeeping_left_by_a_longjmp_is_made_whole() {
        OPEN.with(|o| o.set(4));
        WRITTEN.with(|w| w.set(0));
        setjmp(0x3000);
        OPEN.with(|o| o.set(5));
        setjmp(0x4000);
        // Interrupted between a slot's filling and its count, with an
        // exit half done (fewer open than written).
        HELD_JUMP_COUNT.with(|n| n.set(1));
        OPEN.with(|o| o.set(2));
        WRITTEN.with(|w| w.set(3));
        BUSY.with(|b| b.set(true));
        leave_interrupted();
        assert_eq!(state(), (2, 2, 2, false));
        // Not busy: nothing to make whole.
        HELD_JUMP_COUNT.with(|n| n.set(7));
        leave_interrupted();
        assert_eq!(state().2, 7);
    }
}
