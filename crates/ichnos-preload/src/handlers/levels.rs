//! Which of the program's handlers run on a thread, and the writes they
//! interrupted ([`ichnos_buf::fill::Interrupted`]), for a `longjmp` out
//! of them to close (x86-64, where `jump.rs` follows `setjmp` and
//! `longjmp`).
//!
//! A `setjmp` made inside handlers notes how many were running. A
//! `longjmp` to a place noted so leaves the handlers above it; to a place
//! not noted, which was made outside every handler, all of them. Places
//! are kept for the handlers running only, up to [`PLACES`]; once one was
//! given up for lack of room, a place not found may be that one, and a
//! `longjmp` to it closes nothing (closing the write of a handler still
//! running would count it finished twice, which stops the buffer as
//! surely): the thread's trace may then stop, as before this was
//! followed.

use std::cell::Cell;

use ichnos_buf::fill::{with_signals_blocked, Interrupted};
use ichnos_data::wire::{self, event, EVENT_BYTES};

/// `setjmp` places made inside handlers a thread keeps.
const PLACES: usize = 16;

/// `setjmp` places made while handlers ran: the `jmp_buf`'s address (0:
/// a free slot) and how many handlers ran; whether one was given up.
#[derive(Clone, Copy, Debug)]
struct Places {
    at: [(u64, u32); PLACES],
    given_up: bool,
}

impl Places {
    const NONE: Places = Places {
        at: [(0, 0); PLACES],
        given_up: false,
    };

    /// Forgets the places of handlers deeper than `levels`, which ended.
    fn above(&mut self, levels: u32) {
        for place in &mut self.at {
            if place.1 > levels {
                *place = (0, 0);
            }
        }
        if levels == 0 {
            self.given_up = false;
        }
    }
}

thread_local! {
    /// The handlers running on this thread, and the writes they
    /// interrupted.
    static RUNNING: Cell<Interrupted> = const { Cell::new(Interrupted::new(EVENT_BYTES)) };
    static INSIDE: Cell<Places> = const { Cell::new(Places::NONE) };
}

/// A handler of the program's begins: the write it interrupted noted.
/// Whether it is followed (not in a child of `vfork`, which runs on its
/// parent's thread's memory).
pub(super) fn enter() -> bool {
    let Some(buffer) = crate::BUFFER.get() else {
        return false;
    };
    if !crate::ending::owning_process() {
        return false;
    }
    RUNNING.with(|r| {
        let mut running = r.get();
        running.enter(buffer);
        r.set(running);
    });
    true
}

/// The handler [`enter`] began returns.
pub(super) fn leave(followed: bool) {
    let Some(buffer) = crate::BUFFER.get().filter(|_| followed) else {
        return;
    };
    RUNNING.with(|r| {
        let mut running = r.get();
        running.leave(buffer);
        r.set(running);
        INSIDE.with(|p| {
            let mut places = p.get();
            places.above(running.levels());
            p.set(places);
        });
    });
}

/// How many of the program's handlers run on this thread.
pub(super) fn levels() -> u32 {
    RUNNING.with(|r| r.get().levels())
}

/// A `setjmp` filled `buffer`: inside handlers, how many is noted.
pub(crate) fn note_setjmp(buffer: u64) {
    let levels = RUNNING.with(|r| r.get().levels());
    let mut places = INSIDE.with(Cell::get);
    let known = places.at.iter().position(|place| place.0 == buffer);
    if levels == 0 {
        // Outside every handler: a buffer filled again here is no longer
        // a place inside one.
        if let Some(at) = known {
            places.at[at] = (0, 0);
            INSIDE.with(|p| p.set(places));
        }
        return;
    }
    let at = known
        .or_else(|| places.at.iter().position(|place| place.0 == 0))
        .unwrap_or_else(|| {
            places.given_up = true;
            (0..PLACES).max_by_key(|&i| places.at[i].1).unwrap_or(0)
        });
    places.at[at] = (buffer, levels);
    INSIDE.with(|p| p.set(places));
}

/// A `longjmp` goes back to `buffer`: the handlers running above the
/// place it was filled at are left, and the writes they interrupted
/// closed. Returns how many were.
pub(crate) fn before_longjmp(buffer: u64) -> usize {
    if RUNNING.with(|r| r.get().levels()) == 0 {
        return 0;
    }
    // Alone on the thread: a handler arriving amid the notes' closing
    // would close them again.
    with_signals_blocked(|| leave_to_place(buffer))
}

fn leave_to_place(buffer: u64) -> usize {
    if !crate::ending::owning_process() {
        return 0;
    }
    let places = INSIDE.with(Cell::get);
    let target = match places.at.iter().find(|place| place.0 == buffer) {
        Some(place) => place.1,
        None if places.given_up => return 0,
        None => 0,
    };
    leave_to(target)
}

/// Leaves the handlers above `target`, closing what they interrupted.
fn leave_to(target: u32) -> usize {
    let mut running = RUNNING.with(Cell::get);
    if target >= running.levels() {
        return 0;
    }
    let Some(fill) = crate::BUFFER.get() else {
        return 0;
    };
    let closed = running.leave_to(fill, target, |record| {
        wire::store_event(record, 0, wire::event_word(event::ABANDONED, 0));
    });
    RUNNING.with(|r| r.set(running));
    super::abandon_install(target);
    INSIDE.with(|p| {
        let mut places = p.get();
        places.above(target);
        p.set(places);
    });
    closed
}

/// The process ends from inside handlers (`_exit` or `exit` in a
/// timeout's handler): they never return, and the writes they interrupted
/// are closed, so that the thread's last buffer is handed over. (Not
/// before an exec, which may fail and return.)
pub(crate) fn leave_all() {
    if RUNNING.with(|r| r.get().levels()) == 0 || !crate::ending::owning_process() {
        return;
    }
    with_signals_blocked(|| leave_to(0));
}

/// In the child of a fork: its buffers start afresh, and the writes its
/// parent's handlers interrupted are not in them. Handlers it is inside
/// are not followed further.
pub(crate) fn after_fork_child() {
    RUNNING.with(|r| r.set(Interrupted::new(EVENT_BYTES)));
    INSIDE.with(|p| p.set(Places::NONE));
}
