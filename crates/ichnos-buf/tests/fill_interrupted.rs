//! Writes abandoned by a handler left through a `longjmp`, closed by
//! `Interrupted`. Each test plays the sequence a signal makes on one
//! thread, step by step: the interrupted write is a `reserve_raw` whose
//! `commit_raw` never comes (its bytes stale, as a reused buffer's are),
//! the handler's records are written between `enter` and its end.

use ichnos_buf::fill::{FillBuffer, Flush, Interrupted};
use std::sync::{Arc, Mutex};

/// A trace buffer of `capacity` bytes whose flushes are collected.
fn traced(capacity: usize) -> (FillBuffer, Arc<Mutex<Vec<u8>>>) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let buf = FillBuffer::trace(capacity, move |f: &Flush<'_>| {
        sink.lock().unwrap().extend_from_slice(f.data);
    })
    .unwrap();
    (buf, out)
}

fn record(byte: u8) -> [u8; 16] {
    [byte; 16]
}

fn write(buf: &FillBuffer, byte: u8) {
    buf.write(&record(byte)).unwrap();
}

/// A write reserved and never committed, its bytes left as `stale` (what
/// a buffer reused after a flush holds there).
fn open_write(buf: &FillBuffer, stale: u8) {
    let at = buf.reserve_raw(16).unwrap();
    // SAFETY: 16 bytes just reserved for this writer.
    unsafe { std::ptr::write_bytes(at, stale, 16) };
}

/// The records of `bytes`, each by its first byte.
fn records(bytes: &[u8]) -> Vec<u8> {
    bytes.chunks(16).map(|r| r[0]).collect()
}

const MARK: u8 = 0xEE;

/// The sequence most tests start from: in a buffer of 1 KiB, record 1
/// written, then the write of a record left open (its bytes 0xAA) as a
/// handler interrupts it, and the handler's record 2 written.
fn inside_a_handler() -> (FillBuffer, Arc<Mutex<Vec<u8>>>, Interrupted) {
    let (buf, out) = traced(1024);
    let mut handlers = Interrupted::new(16);
    write(&buf, 1);
    open_write(&buf, 0xAA);
    handlers.enter(&buf);
    write(&buf, 2);
    (buf, out, handlers)
}

#[test]
fn a_write_a_longjmp_abandoned_is_marked_and_the_buffer_flushes_again() {
    let (buf, out, mut handlers) = inside_a_handler();
    write(&buf, 3);
    // What the bug was: the open write keeps every flush from happening.
    assert!(!buf.flush(), "flushed with a write open");
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 1);
    assert_eq!(handlers.levels(), 0);
    write(&buf, 4);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, MARK, 2, 3, 4]);
}

#[test]
fn a_handler_that_returned_inside_the_same_write_tells_where_it_is() {
    let (buf, out) = traced(1024);
    let mut handlers = Interrupted::new(16);
    write(&buf, 1);
    open_write(&buf, 0xAA);
    // A first handler writes inside the open write and returns ...
    handlers.enter(&buf);
    write(&buf, 2);
    handlers.leave(&buf);
    // ... a second one comes before the write commits: the open bytes
    // are not the last reserved (the first handler's record), but where
    // the first handler found them.
    handlers.enter(&buf);
    write(&buf, 3);
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 1);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, MARK, 2, 3]);
}

#[test]
fn a_write_committed_after_a_handler_returned_is_not_taken_for_the_next() {
    let (buf, out) = traced(1024);
    let mut handlers = Interrupted::new(16);
    open_write(&buf, 0xAA);
    handlers.enter(&buf);
    write(&buf, 2);
    handlers.leave(&buf);
    // The interrupted write finishes, and the next one opens.
    buf.commit_raw(16);
    open_write(&buf, 0xBB);
    handlers.enter(&buf);
    write(&buf, 3);
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 1);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [0xAA, 2, MARK, 3]);
}

#[test]
fn a_longjmp_inside_a_handler_closes_only_the_writes_above_its_place() {
    let (buf, out, mut handlers) = inside_a_handler();
    // The handler's own write, interrupted by a second handler ...
    open_write(&buf, 0xBB);
    handlers.enter(&buf);
    write(&buf, 3);
    // ... which jumps back into the first handler: only its write closes.
    assert_eq!(handlers.leave_to(&buf, 1, |r| r.fill(MARK)), 1);
    assert_eq!(handlers.levels(), 1);
    assert!(!buf.flush(), "the outer write is still open");
    write(&buf, 4);
    // Then the first handler jumps out as well.
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK - 1)), 1);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, MARK - 1, 2, MARK, 3, 4]);
}

#[test]
fn a_handler_that_returns_closes_nothing() {
    let (buf, out, mut handlers) = inside_a_handler();
    handlers.leave(&buf);
    buf.commit_raw(16);
    // A later longjmp with no handler running has nothing to close.
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 0);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, 0xAA, 2]);
}

#[test]
fn a_write_no_longer_open_as_noted_is_left_alone() {
    let (buf, out, mut handlers) = inside_a_handler();
    // The handler is left without a trace (as `setcontext` would): the
    // write commits, the buffer flushes and fills again.
    buf.commit_raw(16);
    assert!(buf.flush());
    write(&buf, 3);
    write(&buf, 4);
    // A longjmp out of the level still counted must not mark record 4 (at
    // the old place) nor commit bytes nobody reserved.
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 0);
    write(&buf, 5);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, 0xAA, 2, 3, 4, 5]);
}

#[test]
fn a_handler_on_a_thread_that_never_wrote_notes_nothing() {
    let (buf, out) = traced(1024);
    let mut handlers = Interrupted::new(16);
    handlers.enter(&buf);
    write(&buf, 1);
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 0);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1]);
}

#[test]
fn a_rings_abandoned_record_is_marked_unless_the_ring_wrapped_over_it() {
    let buf = FillBuffer::circular(64, 16).unwrap();
    let mut handlers = Interrupted::new(16);
    write(&buf, 1);
    open_write(&buf, 0xAA);
    handlers.enter(&buf);
    write(&buf, 2);
    assert!(buf.newest_first().is_none(), "read with a write open");
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 1);
    let newest: Vec<u8> = buf.newest_first().unwrap().iter().map(|r| r[0]).collect();
    assert_eq!(newest, [2, MARK, 1]);

    // A handler that writes a whole ring's worth overwrites the open
    // record with its own: those stay.
    open_write(&buf, 0xBB);
    handlers.enter(&buf);
    for byte in 10..15 {
        write(&buf, byte);
    }
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 1);
    let newest: Vec<u8> = buf.newest_first().unwrap().iter().map(|r| r[0]).collect();
    assert_eq!(newest, [14, 13, 12, 11]);
}

#[test]
fn handlers_nested_deeper_than_kept_are_counted_and_leave_the_rest_working() {
    let (buf, out) = traced(4096);
    let mut handlers = Interrupted::new(16);
    open_write(&buf, 0xAA);
    let deep = ichnos_buf::fill::MAX_HANDLER_LEVELS + 3;
    for _ in 0..deep {
        handlers.enter(&buf);
    }
    assert_eq!(handlers.levels() as usize, deep);
    write(&buf, 1);
    for _ in 0..deep - 1 {
        handlers.leave(&buf);
    }
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 1);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [MARK, 1]);
}

#[test]
fn more_bytes_open_than_one_write_are_left_alone() {
    let (buf, out) = traced(1024);
    let mut handlers = Interrupted::new(16);
    write(&buf, 1);
    // A write abandoned before, by a handler that was not followed ...
    open_write(&buf, 0xAA);
    write(&buf, 2);
    // ... and one open now: which of the 32 open bytes this handler
    // interrupted cannot be told, and nothing is touched.
    open_write(&buf, 0xBB);
    handlers.enter(&buf);
    write(&buf, 3);
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 0);
    assert!(!buf.flush());
    // Finished by hand, the records are all as they were written.
    buf.commit_raw(32);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, 0xAA, 2, 0xBB, 3]);
}

#[test]
fn a_write_finished_after_its_handler_was_left_unseen_is_left_alone() {
    let (buf, out, mut handlers) = inside_a_handler();
    // Left unseen (`setcontext` back to the interrupted code), which
    // finishes its write and goes on, no flush between.
    buf.commit_raw(16);
    write(&buf, 3);
    assert_eq!(handlers.leave_to(&buf, 0, |r| r.fill(MARK)), 0);
    assert!(buf.flush());
    assert_eq!(records(&out.lock().unwrap()), [1, 0xAA, 2, 3]);
}
