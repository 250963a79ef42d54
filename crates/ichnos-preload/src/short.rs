//! Short calls left out as the program runs (`ichnos trace -t MIN`, as
//! uftrace's record-time time filter does): each entry is held back in a
//! per-thread stack until its call is known to matter, that is, until it
//! returns after at least MIN or a call inside it is written. Then the
//! entries held below it are written first, with the times they
//! happened, so the events still come in time order. A call shorter than
//! MIN, with everything it called, leaves nothing.
//!
//! An explicit event (a probe, a `setjmp`, a `longjmp`, a snapshot)
//! writes the entries held first: it is kept, and so is where it
//! happened. Calls deeper than the stack holds are written as they come.
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
}

/// Runs `f` as the thread's only user of the stack; nothing if a call
/// interrupted by a signal handler is in it already.
fn exclusively(f: impl FnOnce()) {
    if BUSY.with(|b| b.replace(true)) {
        return;
    }
    f();
    BUSY.with(|b| b.set(false));
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
        for held in &stack[from..upto] {
            let (function, ticks) = held.get();
            crate::record_at(ticks, event::ENTER, function);
        }
    });
    WRITTEN.with(|w| w.set(upto));
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
/// above it will never return (their entries were written by the
/// `longjmp`'s own event; the reader closes them there).
pub(crate) fn back_to(open: usize) {
    exclusively(|| {
        if OPEN.with(Cell::get) > open {
            OPEN.with(|o| o.set(open));
            WRITTEN.with(|w| w.set(w.get().min(open)));
        }
    });
}
