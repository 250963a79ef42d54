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
    /// The outermost open calls: the function, the place inside it, and
    /// whether its entry was written.
    static CALLS: [Cell<(u64, Place, bool)>; KEPT_CALLS] =
        const { [const { Cell::new((0, OUTSIDE, false)) }; KEPT_CALLS] };
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

/// The entry of `function`: whether it is traced.
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
pub(crate) fn enter(function: u64) -> bool {
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
            CALLS.with(|calls| calls[kept].set((function, p, written)));
        }
        written
    })
}

/// The exit of `function`: whether it is traced (its entry was).
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

/// A C++ exception was caught in `function`: the calls above its
/// innermost open call were unwound, so the thread's place is the one
/// inside that call, if it is among the calls kept (else nothing is
/// known and nothing changes). The catch is recorded with the innermost
/// call still open that was written (the catching one, or under a limit
/// or a filter one around it; address 0: none is), so that a reader
/// closes the written calls above it.
pub(crate) fn caught(function: u64) {
    if plain() {
        crate::record_marker(event::CATCH, function);
        return;
    }
    let now = PLACE.with(Cell::get);
    let open = (now.calls as usize).min(KEPT_CALLS);
    let Some(at) = CALLS.with(|calls| calls[..open].iter().rposition(|c| c.get().0 == function))
    else {
        return;
    };
    let (place, left) = CALLS.with(|calls| {
        let left = calls[..=at]
            .iter()
            .rev()
            .map(Cell::get)
            .find(|c| c.2)
            .map_or(0, |c| c.0);
        (calls[at].get().1, left)
    });
    crate::record_marker(event::CATCH, left);
    PLACE.with(|p| p.set(place));
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
