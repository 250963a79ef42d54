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
    /// calls there.
    static JUMPS: Cell<[(u64, Place, usize); JUMP_PLACES]> =
        const { Cell::new([(0, OUTSIDE, 0); JUMP_PLACES]) };
    /// The outermost open calls.
    static CALLS: [Cell<Kept>; KEPT_CALLS] = const { [const { Cell::new(Kept::NONE) }; KEPT_CALLS] };
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
        if filtered {
            p.hidden = p.hidden.saturating_add(u32::from(has(&NOT, function)));
            p.inside = p.inside.saturating_add(u32::from(has(&ONLY, function)));
        }
        let traced = !filtered || shown(p);
        if traced {
            p.depth = p.depth.saturating_add(1);
        }
        cell.set(p);
        let written = traced && p.depth <= max;
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
        depth <= max && depth > 0
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
    places[slot] = (buffer, now, open);
    JUMPS.with(|p| p.set(places));
}

/// A C++ exception was caught in `function` (if its unwind entry was
/// found), whose landing pad runs with the stack pointer `sp` (0: not
/// known). The calls whose stack pointer lies below `sp` were unwound;
/// without a stack pointer, those inside the catching function's
/// innermost open call. Either way only the calls kept are known: a catch
/// deeper than those changes nothing.
///
/// The unwound calls whose entries were written get their exits now,
/// innermost first, as gcc's instrumentation gives them while the
/// exception unwinds (clang's does not), and the thread's place becomes
/// the one inside the innermost call left. Without a limit or a filter
/// nothing is kept, and the catch is recorded for a reader to close the
/// calls above the catching function's.
pub(crate) fn caught(function: Option<u64>, sp: u64) {
    if plain() {
        if let Some(function) = function {
            crate::record_marker(event::CATCH, function);
        }
        return;
    }
    let now = PLACE.with(Cell::get);
    let open = (now.calls as usize).min(KEPT_CALLS);
    let left = if sp != 0 {
        // The calls kept whose stack pointer lies below the catching
        // frame's: the stack grows down.
        CALLS.with(|calls| {
            let mut left = open;
            while left > 0 {
                let call = calls[left - 1].get();
                if call.sp == 0 || call.sp >= sp {
                    break;
                }
                left -= 1;
            }
            left
        })
    } else {
        let Some(function) = function else { return };
        let Some(at) = CALLS.with(|calls| {
            calls[..open]
                .iter()
                .rposition(|c| c.get().function == function)
        }) else {
            return;
        };
        at + 1
    };
    if left == open {
        return;
    }
    let place = if left == 0 {
        OUTSIDE
    } else {
        CALLS.with(|calls| calls[left - 1].get().place)
    };
    PLACE.with(|p| p.set(place));
    for at in (left..open).rev() {
        let call = CALLS.with(|calls| calls[at].get());
        if call.written {
            crate::write_exit(call.function);
        }
    }
    // Calls deeper than those kept, whose entries the time filter holds.
    crate::short::back_to(place.depth.min(MAX_DEPTH.load(Ordering::Relaxed)) as usize);
}

/// A `longjmp` goes back to `buffer`: the calls since its `setjmp` will
/// never exit, so the thread's place is what it was then (if known).
pub(crate) fn back_to_jump(buffer: u64) {
    if plain() || buffer == 0 {
        return;
    }
    let places = JUMPS.with(Cell::get);
    if let Some(&(_, place, open)) = places.iter().find(|p| p.0 == buffer) {
        PLACE.with(|p| p.set(place));
        crate::short::back_to(open);
    }
}
