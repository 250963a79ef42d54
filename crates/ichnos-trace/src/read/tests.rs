//! The reader's walk of a thread's blocks, on blocks made here: rings read
//! twice, jumps, catches and the frames a catch leaves.

use super::*;

/// The calls a walk closes, as (function, enter, exit).
#[derive(Default)]
struct Closed(Vec<(u64, u64, u64)>);

impl Visitor for Closed {
    fn enter(&mut self, _: u32, _: u32, _: u64, _: u64, _: usize, _: u64) {}
    fn exit(&mut self, _: u32, _: u32, call: &Call) {
        self.0.push((call.function, call.enter, call.exit));
    }
}

fn enter(ticks: u64, function: u64) -> CallEvent {
    CallEvent::Enter { ticks, function }
}

fn exit(ticks: u64, function: u64) -> CallEvent {
    CallEvent::Exit { ticks, function }
}

const RING: u64 = ichnos_data::CALLS_RING;

fn head(flags: u64) -> BlockHead {
    BlockHead {
        flags,
        lost: 0,
        first: 0,
    }
}

#[test]
fn a_ring_saved_again_adds_only_its_new_events_even_at_the_same_time() {
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    // A coarse clock: the snapshot ends with an entry at time 5, and
    // the exit's ring holds it again and a second entry at time 5.
    let first = [enter(1, 10), enter(5, 20)];
    let second = [
        enter(5, 20),
        enter(5, 30),
        exit(6, 30),
        exit(7, 20),
        exit(8, 10),
    ];
    read_block(
        &mut thread,
        1,
        1,
        head(RING),
        first.into_iter(),
        &mut closed,
    );
    read_block(
        &mut thread,
        1,
        1,
        head(RING),
        second.into_iter(),
        &mut closed,
    );
    assert_eq!(closed.0, [(30, 5, 6), (20, 5, 7), (10, 1, 8)]);
}

/// A ring of more events than one block holds, saved twice: the second
/// save's blocks repeat the first's, its continued blocks too, and only
/// the events after the first save are read from it. (Its continued
/// blocks were read whole: every call in them twice.)
#[test]
fn a_large_ring_saved_again_repeats_nothing_from_its_continued_blocks() {
    const CONTINUED: u64 = ichnos_data::CALLS_CONTINUED;
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    // Calls of function 1 at 10, 20, ..., one enter and exit each.
    let calls = |from: u64, to: u64| -> Vec<CallEvent> {
        (from..to)
            .flat_map(|i| [enter(10 * i, 1), exit(10 * i + 5, 1)])
            .collect()
    };
    // The snapshot: calls 0..6 in two blocks; the exit's save: calls
    // 2..9 in three, the first two wholly repeated.
    let saves = [
        vec![(RING, calls(0, 3)), (RING | CONTINUED, calls(3, 6))],
        vec![
            (RING, calls(2, 4)),
            (RING | CONTINUED, calls(4, 6)),
            (RING | CONTINUED, calls(6, 9)),
        ],
    ];
    for (flags, events) in saves.into_iter().flatten() {
        read_block(
            &mut thread,
            1,
            1,
            head(flags),
            events.into_iter(),
            &mut closed,
        );
    }
    let expected: Vec<(u64, u64, u64)> = (0..9).map(|i| (1, 10 * i, 10 * i + 5)).collect();
    assert_eq!(closed.0, expected);
}

#[test]
fn a_ring_that_goes_on_from_the_block_before_skips_and_drops_nothing() {
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    let first = [enter(1, 10), enter(2, 20)];
    let rest = [exit(3, 20), exit(4, 10)];
    read_block(
        &mut thread,
        1,
        1,
        head(RING),
        first.into_iter(),
        &mut closed,
    );
    let continued = RING | ichnos_data::CALLS_CONTINUED;
    read_block(
        &mut thread,
        1,
        1,
        head(continued),
        rest.into_iter(),
        &mut closed,
    );
    assert_eq!(closed.0, [(20, 2, 3), (10, 1, 4)]);
}

#[test]
fn at_a_gap_the_calls_open_before_it_end_at_the_last_event_seen() {
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    read_block(
        &mut thread,
        1,
        1,
        head(RING),
        [enter(1, 10), enter(2, 20)].into_iter(),
        &mut closed,
    );
    // A later ring whose oldest event is after everything read: the
    // events between were overwritten.
    read_block(
        &mut thread,
        1,
        1,
        head(RING),
        [enter(9, 30), exit(10, 30)].into_iter(),
        &mut closed,
    );
    assert_eq!(closed.0, [(20, 2, 2), (10, 1, 2), (30, 9, 10)]);
}

fn live(ticks: u64, function: u64) -> CallEvent {
    CallEvent::Live { ticks, function }
}

fn catch(ticks: u64, function: Option<u64>) -> CallEvent {
    CallEvent::Catch { ticks, function }
}

/// The frames a catch leaves decide which open calls end, where the
/// catching function alone cannot: recursion (the catch is in the
/// outer of two open calls of 20), and a catcher not traced (99,
/// whose frame matches no call).
#[test]
fn a_catch_with_its_live_frames_ends_the_calls_they_do_not_hold() {
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    let events = [
        enter(1, 10),
        enter(2, 20),
        enter(3, 20),
        enter(4, 30),
        // Caught in the outer 20: the catching function alone (20)
        // would close only 30.
        live(5, 10),
        live(5, 20),
        catch(5, Some(20)),
        enter(6, 40),
        enter(7, 50),
        // Caught in 99, not traced, called by 40: 99's frame matches
        // nothing, and the old rule (function 99 not open) would
        // close nothing.
        live(8, 10),
        live(8, 20),
        live(8, 99),
        live(8, 40),
        live(8, 99),
        catch(8, Some(99)),
        exit(9, 40),
        exit(10, 20),
        exit(11, 10),
    ];
    read_block(&mut thread, 1, 1, head(0), events.into_iter(), &mut closed);
    assert_eq!(
        closed.0,
        [
            (30, 4, 5),
            (20, 3, 5),
            (50, 7, 8),
            (40, 6, 9),
            (20, 2, 10),
            (10, 1, 11)
        ]
    );
    assert!(thread.live.is_empty());
}

/// Without live frames, or with more than a reader keeps, a catch
/// goes by its function; live frames serve one catch only.
#[test]
fn a_catch_without_live_frames_goes_by_its_function() {
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    let mut events = vec![enter(1, 10), enter(2, 20), enter(3, 30)];
    events.extend((0..=MAX_LIVE as u64).map(|_| live(4, 10)));
    events.extend([
        // Past MAX_LIVE: by the function, 20 (the live frames would
        // have closed all but 10).
        catch(4, Some(20)),
        enter(5, 30),
        live(6, 10),
        catch(6, Some(10)),
        enter(7, 20),
        // No live frames: by the function again.
        catch(8, Some(20)),
    ]);
    read_block(&mut thread, 1, 1, head(0), events.into_iter(), &mut closed);
    assert_eq!(closed.0, [(30, 3, 4), (30, 5, 6), (20, 2, 6)]);
    assert_eq!(thread.stack.len(), 2);
}

fn open(function: u64) -> Open {
    Open {
        function,
        enter: 0,
        children: 0,
        index: 0,
    }
}

/// Open calls without a frame of their own are passed over, not
/// taken as unwound: a call inlined into its caller (25, inlined into
/// 20, called the catcher 30), and the calls outside a walk that
/// stopped early (a fiber's stack, where only 20 and 30 are seen).
#[test]
fn open_calls_without_frames_are_passed_over() {
    let stack = [10, 20, 25, 30, 40].map(open);
    assert_eq!(calls_left(&stack, &[10, 20, 30]), 4, "inlined 25 is left");
    assert_eq!(calls_left(&stack, &[20, 30]), 4, "the fiber's outer calls");
    assert_eq!(calls_left(&stack, &[10, 99, 20]), 2, "99 not traced");
    assert_eq!(calls_left(&stack, &[99]), 0, "no traced frame left");
    let recursive = [10, 20, 20, 30].map(open);
    assert_eq!(calls_left(&recursive, &[10, 20]), 2, "the outer 20 only");
    assert_eq!(calls_left(&recursive, &[10, 20, 20]), 3);
    // An inlined call of 30 before the out-of-line one that catches:
    // the frame of 30 is the catcher's, not the inlined call's.
    let inlined_twice = [10, 20, 30, 40, 30, 50].map(open);
    assert_eq!(calls_left(&inlined_twice, &[10, 20, 40, 30]), 5);
}

/// Events lost in the middle of a catch's frames may have taken the
/// innermost ones: that catch goes by its function. Frames that
/// something else interrupted are of no catch.
#[test]
fn catch_frames_cut_by_a_loss_or_other_events_are_not_used() {
    let mut thread = Thread::default();
    let mut closed = Closed::default();
    let first = [enter(1, 10), enter(2, 20), enter(3, 20), live(4, 10)];
    read_block(&mut thread, 1, 1, head(0), first.into_iter(), &mut closed);
    let lossy = BlockHead {
        flags: 0,
        lost: 3,
        first: 4,
    };
    // By the function: above the innermost 20, nothing (the frame
    // 10 alone would have closed both 20s).
    let second = [catch(5, Some(20))];
    read_block(&mut thread, 1, 1, lossy, second.into_iter(), &mut closed);
    assert!(closed.0.is_empty(), "{:?}", closed.0);
    // Frames, then an entry (a signal handler's call), then a catch
    // without frames of its own: by its function.
    let third = [live(6, 10), enter(6, 30), catch(7, Some(20))];
    read_block(&mut thread, 1, 1, head(0), third.into_iter(), &mut closed);
    assert_eq!(closed.0, [(30, 6, 7)]);
}
