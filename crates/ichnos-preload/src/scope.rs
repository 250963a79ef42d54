//! Which calls are traced: the depth limit (`-D`) and the function
//! filters (`-F` traces only the calls inside the functions named, `-N`
//! leaves out the functions named and the calls they make), kept per
//! thread as counters, and put back at a `longjmp` (whose skipped exits
//! would leave them counting calls that are gone) and at a C++ catch
//! (whose unwound calls never exit under clang: the functions of the
//! innermost open calls are kept to find the catching one by).
//!
//! Without a limit, a filter or the time filter the hooks pay one relaxed
//! load each; the counters are kept only when there is one (the time
//! filter too needs the open calls at a catch).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

use ichnos_data::wire::event;

/// Nothing decides per call (no limit, no filter, no time filter): the
/// hooks write at once, after this one load.
static PLAIN: AtomicBool = AtomicBool::new(true);

/// Whether every call is written as it comes.
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
pub(crate) fn plain() -> bool {
    PLAIN.load(Ordering::Relaxed)
}

/// Something decides per call (a limit, a filter, the time filter).
pub(crate) fn not_plain() {
    PLAIN.store(false, Ordering::Relaxed);
}

/// Calls deeper than this are not traced (`-D`); `u32::MAX`: no limit.
/// The depth counts from a thread's first traced call, or, inside a `-F`
/// function, from the innermost open call of one (as uftrace counts it:
/// a `-F` function called again beneath itself shows as many levels
/// beneath it as the outermost).
static MAX_DEPTH: AtomicU32 = AtomicU32::new(u32::MAX);
/// Function filters are set.
static FILTERED: AtomicBool = AtomicBool::new(false);
/// The run-time addresses of the `-F` and `-N` functions, sorted.
static ONLY: OnceLock<Box<[u64]>> = OnceLock::new();
static NOT: OnceLock<Box<[u64]>> = OnceLock::new();

/// A thread's place in the scope: its traced depth, the `-F` functions
/// it is inside, the `-N` functions it is inside, its open calls (traced
/// or not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Place {
    depth: u32,
    inside: u32,
    hidden: u32,
    calls: u32,
}

/// A place with nothing open.
const OUTSIDE: Place = Place {
    depth: 0,
    inside: 0,
    hidden: 0,
    calls: 0,
};

/// Open calls whose function and place a thread keeps, the outermost
/// (a catch deeper than this leaves the counters as they are).
const KEPT_CALLS: usize = 256;

/// An open call a thread keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kept {
    /// The function.
    function: u64,
    /// The place inside the call.
    place: Place,
    /// Whether its entry was written.
    written: bool,
    /// The function's stack pointer when it called the entry hook (0:
    /// not known). The calls an exception unwound are those whose stack
    /// pointer lies below the catching frame's: the stack grows down.
    sp: u64,
}

impl Kept {
    const NONE: Kept = Kept {
        function: 0,
        place: OUTSIDE,
        written: false,
        sp: 0,
    };
}

/// `setjmp` places a thread remembers its scope at (those still live,
/// the outermost kept when there are more): a `longjmp` to one forgotten
/// leaves the counters as they are.
const JUMP_PLACES: usize = 16;

thread_local! {
    static PLACE: Cell<Place> = const { Cell::new(OUTSIDE) };
    /// By `jmp_buf` address (0: a free slot), with the time filter's open
    /// calls there, and whether the `setjmp` ran inside the time filter's
    /// bookkeeping (a signal handler's, interrupting it).
    static JUMPS: Cell<[(u64, Place, usize, bool); JUMP_PLACES]> =
        const { Cell::new([(0, OUTSIDE, 0, false); JUMP_PLACES]) };
    /// The outermost open calls.
    static CALLS: [Cell<Kept>; KEPT_CALLS] = const { [const { Cell::new(Kept::NONE) }; KEPT_CALLS] };
    /// For the open `-F` calls, outermost first: the traced depth before
    /// each was entered, which the depth limit counts from inside it.
    static BASES: [Cell<u32>; F_BASES] = const { [const { Cell::new(0) }; F_BASES] };
}

/// Open `-F` calls whose depth a thread keeps, the outermost: a call
/// nested deeper in them counts its depth from the last one kept.
const F_BASES: usize = 64;

/// The traced depth the depth limit counts from where `inside` `-F`
/// calls are open (0: none is).
fn base(inside: u32) -> u32 {
    match (inside as usize).min(F_BASES) {
        0 => 0,
        n => BASES.with(|b| b[n - 1].get()),
    }
}

/// Sets the depth limit and the filters (run-time addresses), once, at
/// the start.
pub(crate) fn configure(depth: Option<u32>, mut only: Vec<u64>, mut not: Vec<u64>) {
    if let Some(depth) = depth {
        MAX_DEPTH.store(depth.min(u32::MAX - 1), Ordering::Relaxed);
        not_plain();
    }
    if only.is_empty() && not.is_empty() {
        return;
    }
    only.sort_unstable();
    not.sort_unstable();
    let _ = ONLY.set(only.into_boxed_slice());
    let _ = NOT.set(not.into_boxed_slice());
    FILTERED.store(true, Ordering::Relaxed);
    not_plain();
}

fn has(set: &OnceLock<Box<[u64]>>, function: u64) -> bool {
    set.get()
        .is_some_and(|s| !s.is_empty() && s.binary_search(&function).is_ok())
}

/// Whether the place is traced: inside no `-N` function and, where there
/// are `-F` functions, inside one.
fn shown(p: Place) -> bool {
    p.hidden == 0 && (p.inside > 0 || ONLY.get().is_none_or(|s| s.is_empty()))
}

/// The depth limit (`u32::MAX`: none) and whether filters are set.
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
fn limits() -> (u32, bool) {
    (
        MAX_DEPTH.load(Ordering::Relaxed),
        FILTERED.load(Ordering::Relaxed),
    )
}

/// The entry of `function`, whose stack pointer is `sp` (0: not known):
/// whether it is traced.
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
pub(crate) fn enter(function: u64, sp: u64) -> bool {
    let (max, filtered) = limits();
    PLACE.with(|cell| {
        let mut p = cell.get();
        p.calls = p.calls.saturating_add(1);
        let mut only = false;
        if filtered {
            only = has(&ONLY, function);
            p.hidden = p.hidden.saturating_add(u32::from(has(&NOT, function)));
            p.inside = p.inside.saturating_add(u32::from(only));
        }
        let traced = !filtered || shown(p);
        if traced {
            p.depth = p.depth.saturating_add(1);
            if only && (1..=F_BASES).contains(&(p.inside as usize)) {
                // Its own depth is 1.
                BASES.with(|b| b[p.inside as usize - 1].set(p.depth - 1));
            }
        }
        cell.set(p);
        let written = traced && p.depth.saturating_sub(base(p.inside)) <= max;
        if let Some(kept) = (p.calls as usize)
            .checked_sub(1)
            .filter(|&at| at < KEPT_CALLS)
        {
            CALLS.with(|calls| {
                calls[kept].set(Kept {
                    function,
                    place: p,
                    written,
                    sp,
                });
            });
        }
        written
    })
}

/// The exit of `function`: whether it is traced (its entry was).
///
/// (The stack pointer at an exit says nothing: gcc jumps to the exit
/// hook after its epilogue, where it is the caller's.)
#[inline(always)]
#[allow(clippy::inline_always)]
pub(crate) fn exit(function: u64) -> bool {
    let (max, filtered) = limits();
    PLACE.with(|cell| {
        let mut p = cell.get();
        let traced = !filtered || shown(p);
        // Counted from the innermost `-F` call open, this one if it is
        // one, as at its entry.
        let from = if filtered { base(p.inside) } else { 0 };
        p.calls = p.calls.saturating_sub(1);
        if filtered {
            p.hidden = p.hidden.saturating_sub(u32::from(has(&NOT, function)));
            p.inside = p.inside.saturating_sub(u32::from(has(&ONLY, function)));
        }
        if !traced {
            cell.set(p);
            return false;
        }
        let depth = p.depth;
        p.depth = depth.saturating_sub(1);
        cell.set(p);
        depth.saturating_sub(from) <= max && depth > 0
    })
}

/// A `setjmp` filled `buffer`: the thread's place is noted, so that a
/// `longjmp` back to it can put it back.
pub(crate) fn note_jump(buffer: u64) {
    if plain() || buffer == 0 {
        return;
    }
    let now = PLACE.with(Cell::get);
    let open = crate::short::open();
    let mut places = JUMPS.with(Cell::get);
    // Places deeper than this one are of calls that have returned: their
    // buffers are dead, and their slots free.
    for place in &mut places {
        if place.0 != 0 && (place.1.depth > now.depth || place.2 > open) {
            place.0 = 0;
        }
    }
    // This buffer's slot, else a free one, else the deepest place's (the
    // outer ones are the ones a longjmp from deep inside goes back to).
    let slot = places
        .iter()
        .position(|p| p.0 == buffer)
        .or_else(|| places.iter().position(|p| p.0 == 0))
        .unwrap_or_else(|| {
            (0..JUMP_PLACES)
                .max_by_key(|&i| (places[i].1.depth, places[i].2))
                .unwrap_or(0)
        });
    places[slot] = (buffer, now, open, crate::short::busy());
    JUMPS.with(|p| p.set(places));
}

/// A C++ exception was caught in `function` (if its unwind entry was
/// found), whose landing pad runs with the stack pointer `sp` (x86-64,
/// where the catch is followed at all).
///
/// Without a limit or a filter nothing is kept: the catch is recorded
/// for a reader to close the calls above the catching function's, after
/// the frames it leaves where catches walk the stack (`landing` is the
/// landing pad's address).
/// Otherwise the calls kept whose stack pointer lies below `sp` were
/// unwound, and the thread's place becomes the one inside the innermost
/// call left. Their exits are written (those whose entries were, innermost
/// first), as gcc's instrumentation gives them while the exception
/// unwinds and clang's does not. Where more calls are open than are kept,
/// the ones past them are unwound too, unknown: then, as before stack
/// pointers were kept, no exits are written and the catch is recorded
/// with the innermost written call left, for a reader to close the calls
/// above it. A catch deeper than the calls kept changes nothing.
pub(crate) fn caught(function: Option<u64>, sp: u64, landing: usize) {
    if plain() {
        let walked = record_live_frames(landing);
        if let Some(function) = function.or(walked.then_some(0)) {
            crate::record_marker(event::CATCH, function);
        }
        return;
    }
    if sp == 0 {
        return;
    }
    let now = PLACE.with(Cell::get);
    let open = (now.calls as usize).min(KEPT_CALLS);
    let left = CALLS.with(|calls| unwound_from(calls, open, sp));
    if left == open {
        return;
    }
    let place = if left == 0 {
        OUTSIDE
    } else {
        CALLS.with(|calls| calls[left - 1].get().place)
    };
    if now.calls as usize > KEPT_CALLS {
        record_live_frames(landing);
        record_catch(left);
    } else {
        for at in (left..open).rev() {
            let call = CALLS.with(|calls| calls[at].get());
            if call.written {
                crate::write_exit(call.function);
            }
        }
    }
    PLACE.with(|p| p.set(place));
    // Entries of unwound calls the time filter still holds (and, past the
    // calls kept, those not closed above): it keeps those of the calls
    // left whose entries were written. (Not as many as the depth limit:
    // under -F it counts from the innermost -F call, and more calls than
    // the limit may be written and open.)
    let written = CALLS.with(|calls| calls[..left].iter().filter(|c| c.get().written).count());
    crate::short::back_to(written);
}

/// The first of the `open` calls kept that a catch in the frame whose
/// stack pointer is `sp` unwound (`open`: none). Those are the innermost
/// calls whose stack pointers lie below `sp` (the stack grows down), each
/// above the one inside it: where an outer call's lies lower, the thread
/// changed stacks between them (a signal's alternate stack, a fiber), and
/// nothing outside that is compared.
fn unwound_from(calls: &[Cell<Kept>], open: usize, sp: u64) -> usize {
    let mut left = open;
    let mut inner = None;
    while left > 0 {
        let call = calls[left - 1].get();
        if call.sp == 0 || call.sp >= sp || inner.is_some_and(|inner| call.sp <= inner) {
            break;
        }
        inner = Some(call.sp);
        left -= 1;
    }
    left
}

/// Where the catch at `landing` walks the stack (`catch.rs`), records the
/// functions of the frames it leaves, outermost first, ahead of its catch
/// event: whether it did.
#[cfg(target_arch = "x86_64")]
fn record_live_frames(landing: usize) -> bool {
    thread_local! {
        /// The frames of a walk, kept from catch to catch (a walk's
        /// frames are not kept on the stack of a catch, which may be a
        /// small one).
        static FRAMES: std::cell::RefCell<Vec<u64>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    if !crate::tracing() || !crate::catch::walks(landing) {
        return false;
    }
    FRAMES
        .try_with(|frames| {
            // A catch in a signal handler that interrupted a walk: no walk.
            let Ok(mut frames) = frames.try_borrow_mut() else {
                return false;
            };
            // Room for every frame kept, so that the walk allocates
            // nothing inside the unwinder's callback.
            frames.reserve_exact(crate::catch::MAX_LIVE);
            if !crate::catch::live_frames(landing, &mut frames) {
                return false;
            }
            crate::short::before_marker();
            for &function in frames.iter().rev() {
                crate::record(event::LIVE, function);
            }
            true
        })
        .unwrap_or(false)
}

#[cfg(not(target_arch = "x86_64"))]
fn record_live_frames(_landing: usize) -> bool {
    false
}

/// Records a catch with the innermost written call among the first
/// `open` calls kept (0: none).
fn record_catch(open: usize) {
    let left = CALLS.with(|calls| {
        calls[..open]
            .iter()
            .rev()
            .map(Cell::get)
            .find(|c| c.written)
            .map_or(0, |c| c.function)
    });
    crate::record_marker(event::CATCH, left);
}

/// The calls the time filter's stack had open at the `setjmp` into
/// `buffer`, and whether it ran inside the filter's bookkeeping, if its
/// place is known.
pub(crate) fn jump_target(buffer: u64) -> Option<(usize, bool)> {
    if plain() || buffer == 0 {
        return None;
    }
    let places = JUMPS.with(Cell::get);
    places.iter().find(|p| p.0 == buffer).map(|p| (p.2, p.3))
}

/// A `longjmp` goes back to `buffer`: the calls since its `setjmp` will
/// never exit, so the thread's place is what it was then (if known).
pub(crate) fn back_to_jump(buffer: u64) {
    if plain() || buffer == 0 {
        return;
    }
    let places = JUMPS.with(Cell::get);
    if let Some(&(_, place, open, _)) = places.iter().find(|p| p.0 == buffer) {
        PLACE.with(|p| p.set(place));
        crate::short::back_to(open);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(sps: &[u64]) -> Vec<Cell<Kept>> {
        sps.iter()
            .map(|&sp| Cell::new(Kept { sp, ..Kept::NONE }))
            .collect()
    }

    #[test]
    fn a_catch_unwinds_the_calls_below_its_frame_on_its_stack() {
        // One stack, growing down: the outermost call highest.
        let one = calls(&[1000, 900, 800, 700]);
        assert_eq!(unwound_from(&one, 4, 850), 2);
        assert_eq!(unwound_from(&one, 4, 2000), 0);
        assert_eq!(
            unwound_from(&one, 4, 600),
            4,
            "a catch deeper than every call"
        );
        // Only the calls open count.
        assert_eq!(unwound_from(&one, 3, 850), 2);
        // A call whose stack pointer is not known stops the walk.
        let unknown = calls(&[1000, 0, 800, 700]);
        assert_eq!(unwound_from(&unknown, 4, 2000), 2);
    }

    #[test]
    fn a_change_of_stack_between_two_calls_stops_the_walk() {
        // The two inner calls run on another stack (a fiber's, or a
        // signal's alternate one) above the thread's: a catch there must
        // not reach the outer calls, whose stack pointers also lie below
        // the catching frame's.
        let switched = calls(&[500, 400, 2000, 1900]);
        assert_eq!(unwound_from(&switched, 4, 1950), 3);
        assert_eq!(unwound_from(&switched, 4, 2500), 2);
    }
}
