//! The recorder's reading of what a traced process sends (its runtime's
//! frames, out of shared memory the process can write at will): any
//! frames give records a reader reads back, or a refusal, never a panic
//! or unbounded memory.

use std::fs::File;

use ichnos_data::wire::{self, event, FrameHeader};
use ichnos_data::{CallEvent, Reader};
use proptest::prelude::*;
use rustc_hash::FxHashMap;

use super::frames::CutFrame;
use super::{frames, open_output, Conn, TraceOptions};

/// A frame as a process could send it: its header's thread, flags and
/// losses, and its events (ticks, kind, address), or raw bytes.
#[derive(Clone, Debug)]
enum Sent {
    Frame {
        tid: u32,
        flags: u32,
        lost: u64,
        events: Vec<(u64, u8, u64)>,
    },
    Raw(Vec<u8>),
}

fn sent() -> impl Strategy<Value = Sent> {
    // A few addresses, so that entries, exits, live frames and catches
    // name the same functions; every kind, known or not.
    let address = prop_oneof![Just(0u64), 0x1000u64..0x1004, any::<u64>()];
    let events = proptest::collection::vec((any::<u64>(), 0u8..16, address), 0..40);
    prop_oneof![
        8 => (1u32..4, 0u32..128, prop_oneof![Just(0u64), any::<u64>()], events)
            .prop_map(|(tid, flags, lost, events)| Sent::Frame { tid, flags, lost, events }),
        1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(Sent::Raw),
    ]
}

fn bytes_of(sent: &[Sent]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in sent {
        match s {
            Sent::Frame {
                tid,
                flags,
                lost,
                events,
            } => {
                let header = FrameHeader {
                    tid: *tid,
                    flags: *flags,
                    lost: *lost,
                    len: (events.len() * wire::EVENT_BYTES) as u64,
                    ticks: 0,
                };
                out.extend_from_slice(&header.encode());
                for &(ticks, kind, address) in events {
                    out.extend_from_slice(&wire::encode_event(ticks, kind, address));
                }
            }
            Sent::Raw(bytes) => out.extend_from_slice(bytes),
        }
    }
    out
}

/// A recording's options for these tests.
fn options(path: &std::path::Path) -> TraceOptions {
    TraceOptions::offline(path)
}

/// A connection of a process that is not there (its names and maps are
/// not read) whose runtime sent `carry`, its code at `exec`.
fn conn(carry: Vec<u8>, exec: Vec<(u64, u64)>) -> Conn {
    Conn {
        carry,
        ..Conn::offline(exec).unwrap()
    }
}

/// The recording at `path`: its one-frame stacks (number to address)
/// and its events.
fn read_back(path: &std::path::Path) -> (FxHashMap<u64, u64>, Vec<CallEvent>) {
    let mut reader = Reader::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
    let mut stacks = FxHashMap::default();
    let mut events = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                ichnos_data::Record::Stack(s) => {
                    stacks.insert(s.id, s.frames.iter().next().unwrap_or(0));
                }
                ichnos_data::Record::Calls(calls) => events.extend(calls.events.iter()),
                _ => {}
            }
        }
    }
    (stacks, events)
}

/// The entries, exits and probes of the recording at `path` that a reader
/// shows: each once, where a flight recorder's ring saved again repeats
/// them (the format's rule, `ring_repeats.rs`, which the reader's tests
/// hold to replays).
fn shown_events(path: &std::path::Path) -> u64 {
    let mut reader = Reader::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
    let mut rings: FxHashMap<u64, crate::ring_repeats::RingSeen> = FxHashMap::default();
    let mut shown = 0;
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            let ichnos_data::Record::Calls(calls) = record.unwrap() else {
                continue;
            };
            let seen = rings.entry(calls.tid).or_default();
            let mut read = (calls.flags & ichnos_data::CALLS_RING != 0)
                .then(|| seen.begin(calls.flags & ichnos_data::CALLS_CONTINUED != 0));
            for event in calls.events.iter() {
                let new = read.as_mut().is_none_or(|r| seen.take(r, event.ticks()));
                let counted = matches!(
                    event,
                    CallEvent::Enter { .. } | CallEvent::Exit { .. } | CallEvent::Probe { .. }
                );
                shown += u64::from(new && counted);
            }
            match read {
                Some(read) => seen.end(read),
                None => seen.not_a_ring(),
            }
        }
    }
    shown
}

/// The recording's `Calls` blocks: (thread, lost, flags, events).
fn blocks_of(path: &std::path::Path) -> Vec<(u64, u64, u64, usize)> {
    let mut reader = Reader::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
    let mut blocks = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            if let ichnos_data::Record::Calls(c) = record.unwrap() {
                blocks.push((c.tid, c.lost, c.flags, c.events.len()));
            }
        }
    }
    blocks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_frames_give_a_recording_that_reads_back(sent in proptest::collection::vec(sent(), 0..12)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.data");
        let mut out = open_output(&path, &options(&path), false).unwrap();
        let mut conn = conn(bytes_of(&sent), Vec::new());
        let carried = conn.carry.len();
        frames::frames(&mut conn, &mut out).unwrap();
        // What is left is at most one frame's worth not yet whole.
        prop_assert!(conn.carry.len() <= carried);
        frames::end_of_connection(&mut conn, &mut out).unwrap();
        prop_assert!(conn.walks.len() <= 3, "one per thread at most");
        let kept = out.kept;
        out.writer.finish().unwrap();
        // Counted: what a reader shows (not the jumps and catches that
        // keep its depths right, nor what a ring saved again repeats).
        prop_assert_eq!(shown_events(&path), kept, "every entry, exit and probe shown is counted once");
    }

    /// The shared buffer's bytes read a piece at a time (cut anywhere,
    /// as reads and the buffer's regions cut them), frames read where
    /// they lie and completed through the carry, give the recording of
    /// the same bytes read whole: the same frames refused as larger than
    /// the buffer, wherever they were cut. A piece whose cut-short frame
    /// is left in the buffer (as the recorder leaves the end of its last
    /// piece) is read on from where that frame begins.
    #[test]
    fn frames_read_in_pieces_are_the_frames_read_whole(
        sent in proptest::collection::vec(sent(), 0..12),
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
        leave in proptest::collection::vec(any::<bool>(), 8),
        splits in proptest::collection::vec(any::<proptest::sample::Index>(), 8),
        capacity in prop_oneof![Just(u64::MAX), 24u64..800],
    ) {
        let bytes = bytes_of(&sent);
        let exec = vec![(0x1000, 0x1004)];
        let dir = tempfile::tempdir().unwrap();
        let (whole_path, pieces_path) = (dir.path().join("whole.data"), dir.path().join("pieces.data"));

        let mut whole = open_output(&whole_path, &options(&whole_path), false).unwrap();
        let mut conn_whole = conn(Vec::new(), exec.clone());
        prop_assert_eq!(frames::frames_read(&mut conn_whole, &mut whole, &bytes, capacity, CutFrame::Carry).unwrap(), 0);

        // The pieces' recording compressed on the writer's thread: the
        // same recording.
        let threaded = TraceOptions {
            compress_on_a_thread: Some(true),
            ..options(&pieces_path)
        };
        let mut pieces = open_output(&pieces_path, &threaded, false).unwrap();
        let mut conn_pieces = conn(Vec::new(), exec);
        let mut ends: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        ends.sort_unstable();
        ends.push(bytes.len());
        let mut start = 0;
        for (i, &end) in ends.iter().enumerate() {
            if end <= start {
                // Behind where reading resumed.
                continue;
            }
            let left = if leave[i % 8] {
                // A read of two pieces (as a region's end cuts one), the
                // first carried, the last leaving its cut frame.
                let split = start + splits[i % 8].index(end - start);
                if split > start {
                    frames::frames_read(&mut conn_pieces, &mut pieces, &bytes[start..split], capacity, CutFrame::Carry).unwrap();
                }
                let cut = CutFrame::Leave { earlier_pieces: split > start };
                frames::frames_read(&mut conn_pieces, &mut pieces, &bytes[split..end], capacity, cut).unwrap()
            } else {
                frames::frames_read(&mut conn_pieces, &mut pieces, &bytes[start..end], capacity, CutFrame::Carry).unwrap()
            };
            prop_assert!(left == 0 || leave[i % 8], "a frame left only where asked");
            prop_assert!(left < end - start, "every read takes something");
            start = end - left;
        }
        if start < bytes.len() {
            frames::frames_read(&mut conn_pieces, &mut pieces, &bytes[start..], capacity, CutFrame::Carry).unwrap();
        }
        prop_assert_eq!(conn_whole.closed, conn_pieces.closed);
        prop_assert_eq!(&conn_whole.carry, &conn_pieces.carry);
        prop_assert_eq!(&whole.refused, &pieces.refused);
        prop_assert_eq!(whole.kept, pieces.kept);
        whole.writer.finish().unwrap();
        pieces.writer.finish().unwrap();
        prop_assert_eq!(read_back(&whole_path), read_back(&pieces_path));
        prop_assert_eq!(blocks_of(&whole_path), blocks_of(&pieces_path));
    }
}

/// A live frame of a function entered before is kept, one of a function
/// never entered is left out, and the catch names the innermost kept;
/// with live frames of no traced function the catch leaves no call open.
/// Where events were lost amid the frames, or another event came between
/// them and the catch, the catch is named by its own function.
#[test]
fn live_frames_are_kept_for_functions_entered_and_name_the_catch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let frame = |events: &[(u64, u8, u64)]| Sent::Frame {
        tid: 7,
        flags: 0,
        lost: 0,
        events: events.to_vec(),
    };
    let sent = [
        frame(&[
            (1, event::ENTER, 0x1000),
            (2, event::ENTER, 0x2000),
            (3, event::ENTER, 0x3000),
            (4, event::LIVE, 0x1000),
            (4, event::LIVE, 0x9000),
        ]),
        // The buffer filled amid the frames: the run goes on in the next.
        frame(&[
            (4, event::LIVE, 0x2000),
            (4, event::LIVE, 0x9000),
            (4, event::CATCH, 0x9000),
            (5, event::LIVE, 0x9000),
            (5, event::CATCH, 0x9000),
            (6, event::LIVE, 0x1000),
        ]),
        // Events lost amid a run: the catch goes by its own function.
        Sent::Frame {
            tid: 7,
            flags: 0,
            lost: 2,
            events: vec![(7, event::LIVE, 0x2000), (7, event::CATCH, 0x3000)],
        },
        // A run that another event interrupts is of no catch.
        frame(&[
            (8, event::LIVE, 0x1000),
            (8, event::ENTER, 0x2000),
            (8, event::CATCH, 0x3000),
        ]),
    ];
    let mut conn = conn(bytes_of(&sent), vec![(0x1000, 0x10000)]);
    frames::frames(&mut conn, &mut out).unwrap();
    out.writer.finish().unwrap();
    let (stacks, events) = read_back(&path);
    let named: Vec<(char, u64)> = events
        .iter()
        .map(|e| match *e {
            CallEvent::Enter { function, .. } => ('E', stacks[&function]),
            CallEvent::Live { function, .. } => ('L', stacks[&function]),
            CallEvent::Catch { function, .. } => ('C', function.map_or(0, |f| stacks[&f])),
            _ => ('?', 0),
        })
        .collect();
    assert_eq!(
        named,
        [
            ('E', 0x1000),
            ('E', 0x2000),
            ('E', 0x3000),
            ('L', 0x1000),
            ('L', 0x2000),
            ('C', 0x2000),
            ('C', 0),
            ('L', 0x1000),
            ('L', 0x2000),
            ('C', 0x3000),
            ('L', 0x1000),
            ('E', 0x2000),
            ('C', 0x3000),
        ]
    );
}

/// A frame of more events than a block holds is written as several
/// blocks: the loss with the first, `CALLS_CONTINUED` on the others, the
/// thread's end with the last; each function's stack is written before
/// the first block that names it, and every event reads back in order.
#[test]
fn a_large_frame_is_written_as_blocks_that_read_back_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let n = 2 * frames::EVENTS_PER_RECORD + 5;
    // Functions new all along the frame, so that some are first named
    // in its second and third blocks.
    let sent: Vec<(u64, u8, u64)> = (0..n as u64)
        .map(|i| {
            let kind = if i % 2 == 0 {
                event::ENTER
            } else {
                event::EXIT
            };
            (1000 + i, kind, 0x1000 + (i / 2) % 70_000 * 16)
        })
        .collect();
    let frame = Sent::Frame {
        tid: 7,
        flags: wire::FRAME_LAST,
        lost: 3,
        events: sent.clone(),
    };
    let mut conn = conn(bytes_of(&[frame]), vec![(0x1000, 0x1000 + 70_000 * 16)]);
    frames::frames(&mut conn, &mut out).unwrap();
    out.writer.finish().unwrap();

    let mut reader = Reader::new(std::io::BufReader::new(File::open(&path).unwrap())).unwrap();
    let mut stacks = FxHashMap::default();
    let mut blocks = Vec::new();
    let mut read = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                ichnos_data::Record::Stack(s) => {
                    stacks.insert(s.id, s.frames.iter().next().unwrap());
                }
                ichnos_data::Record::Calls(calls) => {
                    blocks.push((calls.lost, calls.flags, calls.events.len()));
                    for e in calls.events.iter() {
                        let (ticks, kind, function) = match e {
                            CallEvent::Enter { ticks, function } => (ticks, event::ENTER, function),
                            CallEvent::Exit { ticks, function } => (ticks, event::EXIT, function),
                            other => panic!("{other:?}"),
                        };
                        // Named by a stack written before this block.
                        read.push((ticks, kind, stacks[&function]));
                    }
                }
                _ => {}
            }
        }
    }
    let (last, continued) = (ichnos_data::CALLS_LAST, ichnos_data::CALLS_CONTINUED);
    assert_eq!(
        blocks,
        [
            (3, 0, frames::EVENTS_PER_RECORD),
            (0, continued, frames::EVENTS_PER_RECORD),
            (0, continued, 5),
            // The thread's end: an empty last block at the frame's time.
            (0, continued | last, 0),
        ]
    );
    assert_eq!(read, sent);
}

/// A frame larger than the shared buffer is refused as soon as its
/// header is whole, also when the header came in two reads: its length
/// is not gathered in memory.
#[test]
fn a_frame_larger_than_the_buffer_is_refused_when_its_header_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let header = FrameHeader {
        tid: 1,
        flags: 0,
        lost: 0,
        len: 1 << 30,
        ticks: 0,
    }
    .encode();
    let mut bytes = header.to_vec();
    bytes.extend(std::iter::repeat_n(0u8, 4096));
    let mut conn = conn(Vec::new(), Vec::new());
    frames::frames_read(&mut conn, &mut out, &bytes[..10], 65536, CutFrame::Carry).unwrap();
    assert!(!conn.closed);
    frames::frames_read(&mut conn, &mut out, &bytes[10..], 65536, CutFrame::Carry).unwrap();
    assert!(conn.closed);
    assert!(
        conn.carry.len() < 4096,
        "{} bytes gathered",
        conn.carry.len()
    );
    assert!(
        out.refused
            .iter()
            .any(|r| r.contains("larger than its shared buffer")),
        "{:?}",
        out.refused
    );
}

/// What a process wrote before it was found gone is all read in one
/// turn, across as many pieces as it takes; while it runs, one piece a
/// turn, whole frames only.
#[test]
fn a_gone_process_is_read_to_its_end_a_running_one_a_piece_a_turn() {
    use ichnos_buf::topa::{AllocFlags, Config, TopaBuffer};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let (mut producer, mut consumer) =
        TopaBuffer::with_regions(&[1 << 20; 2], AllocFlags::default(), Config::default())
            .unwrap()
            .split()
            .unwrap();
    // 1 MiB of frames of 1,000 events: four pieces of 256 KiB and more.
    let frame = bytes_of(&[Sent::Frame {
        tid: 1,
        flags: 0,
        lost: 0,
        events: (0..1000).map(|i| (i, event::ENTER, 0x1000)).collect(),
    }]);
    let frames = (1 << 20) / frame.len() + 1;
    for _ in 0..frames {
        producer.write_record(&frame).unwrap();
    }
    let mut conn = conn(Vec::new(), vec![(0x1000, 0x2000)]);
    assert!(super::conn::read_frames(&mut conn, &mut out, &mut consumer, false).unwrap());
    assert!(consumer.available() > 0);
    let one_turn = out.kept;
    assert!(one_turn < 1000 * frames as u64 / 3, "{one_turn}");
    // The frame the piece's end cut short is left in the buffer, not
    // copied aside: the tail is where it begins.
    assert!(conn.carry.is_empty(), "{} bytes copied", conn.carry.len());
    assert_eq!(consumer.tail(), one_turn / 1000 * frame.len() as u64);
    assert!(super::conn::read_frames(&mut conn, &mut out, &mut consumer, true).unwrap());
    assert_eq!(consumer.available(), 0);
    assert!(conn.carry.is_empty());
    assert_eq!(out.kept, 1000 * frames as u64);
}

/// A frame cut short at the end of the recorder's last piece, after a
/// whole one, is left in the shared buffer (not copied aside) and its
/// length said; read again from where it begins, it is taken whole. One
/// cut short with no whole frame before it is copied aside, as before:
/// a read that left it would take nothing.
#[test]
fn a_frame_cut_short_after_a_whole_one_is_left_where_it_lies() {
    let frame = |tid, n: u64| Sent::Frame {
        tid,
        flags: 0,
        lost: 0,
        events: (0..n)
            .map(|i| {
                (
                    i,
                    if i % 2 == 0 {
                        event::ENTER
                    } else {
                        event::EXIT
                    },
                    0x1000,
                )
            })
            .collect(),
    };
    let bytes = bytes_of(&[frame(1, 4), frame(2, 6)]);
    let first = wire::FRAME_HEADER_BYTES + 4 * wire::EVENT_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let mut conn = conn(Vec::new(), vec![(0x1000, 0x1004)]);

    let leave = CutFrame::Leave {
        earlier_pieces: false,
    };
    let left =
        frames::frames_read(&mut conn, &mut out, &bytes[..first + 40], 65536, leave).unwrap();
    assert_eq!(left, 40);
    assert!(conn.carry.is_empty(), "{} bytes copied", conn.carry.len());
    assert_eq!(out.kept, 4);
    let left = frames::frames_read(&mut conn, &mut out, &bytes[first..], 65536, leave).unwrap();
    assert_eq!(left, 0);
    assert_eq!(out.kept, 10);

    // A read of two pieces, the first ending where the first frame does
    // (as a region's end may): the second's cut frame is left, though
    // that piece took nothing before it.
    let mut conn2 = self::conn(Vec::new(), vec![(0x1000, 0x1004)]);
    frames::frames_read(
        &mut conn2,
        &mut out,
        &bytes[..first],
        65536,
        CutFrame::Carry,
    )
    .unwrap();
    let after = CutFrame::Leave {
        earlier_pieces: true,
    };
    let left = frames::frames_read(
        &mut conn2,
        &mut out,
        &bytes[first..first + 40],
        65536,
        after,
    )
    .unwrap();
    assert_eq!((left, conn2.carry.len()), (40, 0));

    // One cut short with nothing taken before it in its read is carried.
    let left = frames::frames_read(&mut conn, &mut out, &bytes[..40], 65536, leave).unwrap();
    assert_eq!((left, conn.carry.len()), (0, 40));
}

/// A thread whose last frame never came (lost), and a new thread given
/// its id: the new thread's first frame (`FRAME_FIRST`) ends the old
/// one's program at its latest frame, so that the new thread's calls are
/// not nested under the old one's still open, which run to that frame.
/// A runtime that does not say so (no flag) gets what it always got.
#[test]
fn a_first_frame_ends_a_thread_of_its_id_whose_last_frame_was_lost() {
    use crate::read::{Call, Visitor};

    /// Entries (time, depth) and calls still open at an end (enter, end).
    #[derive(Default)]
    struct Seen {
        entries: Vec<(u64, usize)>,
        unfinished: Vec<(u64, u64)>,
    }
    impl Visitor for Seen {
        fn enter(&mut self, _: u32, _: u32, _: u64, ticks: u64, depth: usize, _: u64) {
            self.entries.push((ticks, depth));
        }
        fn exit(&mut self, _: u32, _: u32, _: &Call) {}
        fn unfinished(&mut self, _: u32, _: u32, call: &Call) {
            self.unfinished.push((call.enter, call.exit));
        }
    }

    let frame = |flags: u32, ticks: u64, events: &[(u64, u8, u64)]| {
        let header = FrameHeader {
            tid: 7,
            flags,
            lost: 0,
            len: (events.len() * wire::EVENT_BYTES) as u64,
            ticks,
        };
        let mut bytes = header.encode().to_vec();
        for &(ticks, kind, address) in events {
            bytes.extend_from_slice(&wire::encode_event(ticks, kind, address));
        }
        bytes
    };
    for said in [wire::FRAME_FIRST, 0] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.data");
        let mut out = open_output(&path, &options(&path), false).unwrap();
        // The old thread enters a function and never returns; its frame
        // of the time 20 is its latest. The new one calls another.
        let bytes = [
            frame(wire::FRAME_FIRST, 20, &[(10, event::ENTER, 0x1000)]),
            frame(
                said | wire::FRAME_LAST,
                50,
                &[(30, event::ENTER, 0x1010), (40, event::EXIT, 0x1010)],
            ),
        ]
        .concat();
        let mut conn = conn(bytes, vec![(0x1000, 0x2000)]);
        frames::frames(&mut conn, &mut out).unwrap();
        out.writer.finish().unwrap();

        let symbols = ichnos_profile::report::SymbolOptions {
            inlines: false,
            index_dir: None,
            debug_dirs: Vec::new(),
            addresses: true,
        };
        let trace = crate::Trace::open(&path, &symbols, &mut |_, _| {}).unwrap();
        let mut seen = Seen::default();
        trace.walk(&mut seen).unwrap();
        if said == 0 {
            assert_eq!(seen.entries, [(10, 0), (30, 1)]);
            assert_eq!(seen.unfinished, [(10, 50)]);
        } else {
            assert_eq!(seen.entries, [(10, 0), (30, 0)]);
            assert_eq!(seen.unfinished, [(10, 20)]);
        }
    }
}

/// A loss the runtime sends on its socket (its shared buffer's lock held
/// for good) is told from anything else the socket carries, and written
/// as the same empty frame from the buffer would be: a block of the
/// thread with the loss and no events.
#[test]
fn a_loss_sent_on_the_socket_is_written_as_the_threads_loss() {
    let header = |flags: u32, lost: u64, len: u64| {
        FrameHeader {
            tid: 9,
            flags,
            lost,
            len,
            ticks: 5000,
        }
        .encode()
    };
    let loss = header(0, 42, 0);
    assert!(frames::is_loss_frame(&loss));
    assert!(!frames::is_loss_frame(wire::WAKE));
    assert!(!frames::is_loss_frame(&loss[..31]), "cut short");
    assert!(!frames::is_loss_frame(&header(0, 0, 0)), "no loss");
    assert!(
        !frames::is_loss_frame(&header(wire::FRAME_LAST, 42, 0)),
        "flags"
    );
    assert!(!frames::is_loss_frame(&header(0, 42, 16)), "events");
    let mut bad = loss;
    bad[0] ^= 1;
    assert!(!frames::is_loss_frame(&bad), "magic");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let mut conn = conn(Vec::new(), vec![(0x1000, 0x2000)]);
    frames::loss_on_socket(&mut conn, &mut out, &loss).unwrap();
    out.writer.finish().unwrap();
    assert_eq!(blocks_of(&path), [(9, 42, 0, 0)]);
}

/// A program built without instrumentation still sends the `setjmp` and
/// `longjmp` events its C library's calls make (a shell's, gdb's): they
/// are written, for the depths of calls that may come, but not counted
/// among the events recorded, which are what a reader shows.
#[test]
fn jumps_are_written_but_not_counted_as_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.data");
    let mut out = open_output(&path, &options(&path), false).unwrap();
    let frame = bytes_of(&[Sent::Frame {
        tid: 1,
        flags: 0,
        lost: 0,
        events: vec![
            (1, event::SETJMP, 0x7000),
            (2, event::LONGJMP, 0x7000),
            (3, event::ENTER, 0x1000),
            (4, event::EXIT, 0x1000),
        ],
    }]);
    let mut conn = conn(frame, vec![(0x1000, 0x1004)]);
    frames::frames(&mut conn, &mut out).unwrap();
    assert_eq!(out.kept, 2);
    out.writer.finish().unwrap();
    let events = read_back(&path).1;
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(
        matches!(events[1], CallEvent::Jump { long: true, .. }),
        "{events:?}"
    );
}

/// The last word in the shared buffer (where the program closed the
/// socket) ends the connection as the one on the socket does, whatever
/// came before it; a frame with that flag and anything else (events, a
/// loss, another flag) is not it.
#[test]
fn the_last_word_in_the_buffer_is_taken_and_nothing_else_for_it() {
    let end = |flags: u32, lost: u64, events: Vec<(u64, u8, u64)>| Sent::Frame {
        tid: 1,
        flags,
        lost,
        events,
    };
    let calls = end(0, 0, vec![(10, 0, 0x1000), (20, 1, 0x1000)]);
    let cases = [
        (vec![calls.clone(), end(wire::FRAME_END, 0, vec![])], true),
        (vec![end(wire::FRAME_END, 3, vec![])], false),
        (
            vec![end(wire::FRAME_END | wire::FRAME_LAST, 0, vec![])],
            false,
        ),
        (vec![end(wire::FRAME_END, 0, vec![(30, 0, 0x1000)])], false),
        (vec![calls], false),
    ];
    for (sent, ended) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.data");
        let mut out = open_output(&path, &options(&path), false).unwrap();
        let mut conn = conn(bytes_of(&sent), vec![(0x1000, 0x2000)]);
        frames::frames(&mut conn, &mut out).unwrap();
        assert_eq!(conn.ended, ended, "{sent:?}");
    }
}
