//! Recordings written and read back: every record kind, many chunks,
//! every truncation point, and damage a reader must name.

use ichnos_data::{
    CallEvent, CallEventsEncoder, Calls, CallsOut, ChunkProblem, ClockSource, JitSource, LostCause,
    Meta, OffCpuState, ReadError, Reader, Record, StackOut, StackStop, Target, Writer,
};
use proptest::prelude::*;

/// An owned record, so that generated ones outlive their encoding.
#[derive(Clone, Debug)]
enum Owned {
    Meta(Vec<u8>, Vec<Vec<u8>>, u64, u64),
    Process(u64, u64, u64, u64, Vec<u8>),
    Thread(u64, u64, u64, Vec<u8>),
    Exit(u64, u64, u64, u64),
    Mapping(u64, u64, u64, u64, u64, Vec<u8>, Vec<u8>, u64),
    Stack(u64, u64, StackStop, Vec<u64>),
    Sample(u64, u64, u64, u64, u64, u64),
    OffCpu([u64; 6], OffCpuState),
    Jit(u64, u64, u64, JitSource, Vec<u8>),
    KernelSymbol(u64, u64, Vec<u8>, Vec<u8>),
    Lost(u64, u64, u64, LostCause),
    Throttle(u64, u64, bool),
    End(u64, u64, u64),
    Clock(u64, u64, ClockSource),
    /// pid, tid, lost, flags, first, events (times in order, as a
    /// tracer's are).
    Calls([u64; 5], Vec<CallEvent>),
}

impl Owned {
    // One short arm per record kind, as the encoder has.
    #[allow(clippy::too_many_lines)]
    fn record(&self) -> Record<'_> {
        match self {
            Self::Meta(host, command, freq, start) => Record::Meta(Meta {
                host,
                kernel: b"6.1.0",
                command: command.iter().map(Vec::as_slice).collect(),
                event: b"cpu-clock",
                frequency: *freq,
                stack_size: 16384,
                start_monotonic_ns: *start,
                start_realtime_ns: start.wrapping_mul(3),
                recorder: b"ichnos test",
                target: Target::Processes,
                off_cpu_event: if freq % 2 == 0 {
                    b""
                } else {
                    b"sched:sched_switch"
                },
            }),
            Self::Process(asid, pid, parent, time, name) => Record::Process {
                asid: *asid,
                pid: *pid,
                parent: *parent,
                time: *time,
                name,
            },
            Self::Thread(pid, tid, time, name) => Record::Thread {
                pid: *pid,
                tid: *tid,
                time: *time,
                name,
            },
            Self::Exit(pid, tid, time, flags) => Record::Exit {
                pid: *pid,
                tid: *tid,
                time: *time,
                flags: *flags,
            },
            Self::Mapping(asid, start, len, pgoff, time, path, build_id, flags) => {
                Record::Mapping {
                    asid: *asid,
                    start: *start,
                    len: *len,
                    pgoff: *pgoff,
                    time: *time,
                    path,
                    build_id,
                    flags: *flags,
                }
            }
            Self::Stack(id, asid, stop, frames) => Record::StackOut(StackOut {
                id: *id,
                asid: *asid,
                stop: *stop,
                frames,
            }),
            Self::Sample(time, pid, tid, cpu, stack, weight) => Record::Sample {
                time: *time,
                pid: *pid,
                tid: *tid,
                cpu: *cpu,
                stack: *stack,
                weight: *weight,
            },
            Self::OffCpu([time, pid, tid, cpu, stack, duration], state) => Record::OffCpu {
                time: *time,
                pid: *pid,
                tid: *tid,
                cpu: *cpu,
                stack: *stack,
                duration: *duration,
                state: *state,
            },
            Self::Jit(asid, start, end, source, name) => Record::JitCode {
                asid: *asid,
                start: *start,
                end: *end,
                source: *source,
                name,
            },
            Self::KernelSymbol(start, end, module, name) => Record::KernelSymbol {
                start: *start,
                end: *end,
                module,
                name,
            },
            Self::Lost(time, cpu, count, cause) => Record::Lost {
                time: *time,
                cpu: *cpu,
                count: *count,
                cause: *cause,
            },
            Self::Throttle(time, cpu, on) => Record::Throttle {
                time: *time,
                cpu: *cpu,
                throttled: *on,
            },
            Self::End(time, samples, lost) => Record::End {
                time: *time,
                samples: *samples,
                lost: *lost,
            },
            Self::Clock(ticks, time, source) => Record::Clock {
                ticks: *ticks,
                time: *time,
                source: *source,
            },
            Self::Calls([pid, tid, lost, flags, first], events) => Record::CallsOut(CallsOut {
                pid: *pid,
                tid: *tid,
                lost: *lost,
                flags: *flags,
                first: *first,
                events,
            }),
        }
    }
}

/// What a read record says, in the same terms as what was written.
fn same(written: &Record<'_>, read: &Record<'_>) -> bool {
    match (written, read) {
        (Record::CallsOut(w), Record::Calls(r)) => {
            (w.pid, w.tid, w.lost, w.flags, w.first) == (r.pid, r.tid, r.lost, r.flags, r.first)
                && r.events.iter().collect::<Vec<_>>() == w.events
                // Read a little at a time from bytes of its own, the same.
                && r.events.to_owned_iter().collect::<Vec<_>>() == w.events
                && r.events.to_owned_iter().size_hint() == (w.events.len(), Some(w.events.len()))
        }
        (Record::StackOut(w), Record::Stack(r)) => {
            w.id == r.id
                && w.asid == r.asid
                && w.stop == r.stop
                && r.frames.iter().collect::<Vec<_>>() == w.frames
        }
        _ => written == read,
    }
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..40)
}

// One strategy per record kind.
#[allow(clippy::too_many_lines)]
fn owned() -> impl Strategy<Value = Owned> {
    let stop = prop_oneof![
        Just(StackStop::Complete),
        Just(StackStop::StackEnd),
        Just(StackStop::NoUnwindInfo),
        Just(StackStop::Loop),
        Just(StackStop::DepthLimit),
        Just(StackStop::BadAddress),
        Just(StackStop::SampleLost),
        Just(StackStop::Unknown(77)),
    ];
    let source = prop_oneof![
        Just(JitSource::Registry),
        Just(JitSource::PerfMap),
        Just(JitSource::JitDump),
        Just(JitSource::Span),
        Just(JitSource::Debugger),
        Just(JitSource::Unknown(1000))
    ];
    let cause = prop_oneof![
        Just(LostCause::KernelRing),
        Just(LostCause::KernelSamples),
        Just(LostCause::Recorder),
        Just(LostCause::NoUserRegisters),
        Just(LostCause::Unreadable),
        Just(LostCause::Unknown(9))
    ];
    prop_oneof![
        (
            bytes(),
            proptest::collection::vec(bytes(), 0..4),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(a, b, c, d)| Owned::Meta(a, b, c, d)),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            bytes()
        )
            .prop_map(|(a, b, c, d, e)| Owned::Process(a, b, c, d, e)),
        (any::<u64>(), any::<u64>(), any::<u64>(), bytes())
            .prop_map(|(a, b, c, d)| Owned::Thread(a, b, c, d)),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(a, b, c, d)| Owned::Exit(a, b, c, d)),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            bytes(),
            bytes(),
            any::<u64>()
        )
            .prop_map(|(a, b, c, d, e, f, g, h)| Owned::Mapping(a, b, c, d, e, f, g, h)),
        (
            any::<u64>(),
            any::<u64>(),
            stop,
            proptest::collection::vec(any::<u64>(), 0..70)
        )
            .prop_map(|(a, b, c, d)| Owned::Stack(a, b, c, d)),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(a, b, c, d, e, f)| Owned::Sample(a, b, c, d, e, f)),
        (any::<u64>(), any::<u64>(), any::<u64>(), source, bytes())
            .prop_map(|(a, b, c, d, e)| Owned::Jit(a, b, c, d, e)),
        (any::<u64>(), any::<u64>(), bytes(), bytes())
            .prop_map(|(a, b, c, d)| Owned::KernelSymbol(a, b, c, d)),
        (
            any::<[u64; 6]>(),
            prop_oneof![
                Just(OffCpuState::Waiting),
                Just(OffCpuState::Preempted),
                Just(OffCpuState::Unknown(3))
            ]
        )
            .prop_map(|(a, b)| Owned::OffCpu(a, b)),
        (any::<u64>(), any::<u64>(), any::<u64>(), cause)
            .prop_map(|(a, b, c, d)| Owned::Lost(a, b, c, d)),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(a, b, c)| Owned::Throttle(a, b, c)),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(a, b, c)| Owned::End(a, b, c)),
        (
            any::<u64>(),
            any::<u64>(),
            prop_oneof![
                Just(ClockSource::Tsc),
                Just(ClockSource::Monotonic),
                Just(ClockSource::Unknown(5))
            ]
        )
            .prop_map(|(a, b, c)| Owned::Clock(a, b, c)),
        (any::<[u64; 4]>(), 0u64..1 << 40, call_events()).prop_map(|(a, first, steps)| {
            let events = events_from(first, steps);
            Owned::Calls([a[0], a[1], a[2], a[3], first], events)
        }),
    ]
}

/// The events of `steps` (see [`call_events`]) from `first` on.
fn events_from(first: u64, steps: Vec<(u64, u8, u64, u64)>) -> Vec<CallEvent> {
    let mut ticks = first;
    steps
        .into_iter()
        .map(|(delta, kind, x, y)| {
            ticks += delta;
            match kind {
                0 => CallEvent::Enter { ticks, function: x },
                1 => CallEvent::Exit { ticks, function: x },
                // jmp_bufs are aligned: an even buffer.
                3 => CallEvent::Jump {
                    ticks,
                    buffer: (x >> 1) & !1,
                    long: y & 1 != 0,
                },
                4 => CallEvent::Catch {
                    ticks,
                    function: (y & 1 != 0).then_some(x >> 3),
                },
                5 => CallEvent::Live {
                    ticks,
                    function: x >> 2,
                },
                _ => CallEvent::Probe {
                    ticks,
                    id: x,
                    value: y,
                },
            }
        })
        .collect()
}

/// Steps of a thread's trace: (ticks since the last, kind, function or
/// probe id, probe value).
fn call_events() -> impl Strategy<Value = Vec<(u64, u8, u64, u64)>> {
    proptest::collection::vec(
        (
            prop_oneof![0u64..300, 0u64..1 << 40],
            0u8..6,
            any::<u64>(),
            any::<u64>(),
        ),
        0..50,
    )
}

fn write(records: &[Owned], chunk_target: usize) -> Vec<u8> {
    let mut w = Writer::with_chunk_target(Vec::new(), chunk_target).unwrap();
    for r in records {
        w.push(&r.record()).unwrap();
    }
    w.finish().unwrap()
}

/// The chunks read (offset, records), and the error that ended the
/// reading.
type ReadBack = (Vec<(u64, usize)>, Option<ReadError>);

fn read_all(bytes: &[u8]) -> ReadBack {
    let mut reader = match Reader::new(bytes) {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut chunks = Vec::new();
    loop {
        match reader.next_chunk() {
            Ok(Some(chunk)) => {
                // Every record of a chunk that was handed out decodes.
                assert!(chunk.records().all(|r| r.is_ok()));
                chunks.push((chunk.offset(), chunk.len()));
            }
            Ok(None) => return (chunks, None),
            Err(e) => return (chunks, Some(e)),
        }
    }
}

proptest! {
    /// A block encoded event by event (as the function tracer's recorder
    /// writes it) is byte for byte the block of the same events written
    /// whole.
    #[test]
    fn a_block_encoded_event_by_event_is_the_block_written_whole(
        head in any::<[u64; 4]>(),
        start in 0u64..1 << 40,
        steps in call_events(),
        more in call_events(),
        backwards in any::<bool>(),
    ) {
        let mut events = events_from(start, steps);
        if backwards {
            // Times that go back: each stored at the one before's.
            events.reverse();
        }
        let mut encoder = CallEventsEncoder::new();
        // Used before: starting again leaves nothing of the last block.
        encoder.start(7);
        for e in events_from(3, more) {
            encoder.push(&e);
        }
        encoder.start(start);
        for e in &events {
            encoder.push(e);
        }
        prop_assert_eq!(encoder.len(), events.len());
        let whole = Record::CallsOut(CallsOut {
            pid: head[0],
            tid: head[1],
            lost: head[2],
            flags: head[3],
            first: events.first().map_or(start, CallEvent::ticks),
            events: &events,
        });
        let by_event = Record::Calls(Calls {
            pid: head[0],
            tid: head[1],
            lost: head[2],
            flags: head[3],
            first: encoder.first(),
            events: encoder.events(),
        });
        let (mut a, mut b, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        whole.encode(&mut a, &mut scratch);
        by_event.encode(&mut b, &mut scratch);
        prop_assert_eq!(a, b);
        if !backwards {
            prop_assert_eq!(encoder.events().iter().collect::<Vec<_>>(), events);
        }
    }

    /// Entries and exits encoded on the encoder's path for calls are the
    /// bytes of the same events pushed as events, at every varint length
    /// of the time and the function (one and two bytes, where the path's
    /// own encoding is used, and longer), and with times that go back.
    #[test]
    fn calls_pushed_on_their_own_path_are_the_events_pushed(
        start in 0u64..1 << 40,
        calls in proptest::collection::vec(
            (
                // Deltas whose head (delta << 2 | kind) is one byte, two
                // bytes or longer, at the edges, and past the largest
                // delta a block stores.
                prop_oneof![
                    0u64..40, 0u64..5000, Just(0x1f), Just(0x20), Just(0xfff), Just(0x1000),
                    0u64..1 << 40, Just(u64::MAX)
                ],
                prop_oneof![
                    0u64..0x90, 0x3f00u64..0x4100, Just(0x7f), Just(0x80), Just(0x3fff),
                    Just(0x4000), any::<u64>()
                ],
                any::<bool>(),
                any::<bool>(),
            ),
            0..200,
        ),
    ) {
        let mut events = Vec::new();
        let mut ticks = start;
        for &(delta, function, exit, back) in &calls {
            ticks = if back { ticks.saturating_sub(delta) } else { ticks.saturating_add(delta) };
            events.push(if exit {
                CallEvent::Exit { ticks, function }
            } else {
                CallEvent::Enter { ticks, function }
            });
        }
        let (mut by_event, mut by_call) = (CallEventsEncoder::new(), CallEventsEncoder::new());
        by_event.start(start);
        by_call.start(start);
        for e in &events {
            by_event.push(e);
            match *e {
                CallEvent::Enter { ticks, function } => by_call.push_call(ticks, function, false),
                CallEvent::Exit { ticks, function } => by_call.push_call(ticks, function, true),
                _ => unreachable!("only calls here"),
            }
        }
        prop_assert_eq!(by_call.len(), events.len());
        prop_assert_eq!(by_call.first(), by_event.first());
        prop_assert_eq!(by_call.events(), by_event.events());
    }

    #[test]
    fn every_record_kind_round_trips_through_many_chunks(
        records in proptest::collection::vec(owned(), 0..60),
        chunk_target in 1usize..400,
    ) {
        let bytes = write(&records, chunk_target);
        let mut reader = Reader::new(&bytes[..]).unwrap();
        let mut i = 0;
        while let Some(chunk) = reader.next_chunk().unwrap() {
            for r in chunk.records() {
                let r = r.unwrap();
                prop_assert!(same(&records[i].record(), &r), "{:?} read as {:?}", records[i], r);
                i += 1;
            }
        }
        prop_assert_eq!(i, records.len());
    }

    #[test]
    fn damaged_bytes_give_errors_never_panics(
        records in proptest::collection::vec(owned(), 1..20),
        at in any::<usize>(),
        xor in 1u8..=255,
    ) {
        let mut bytes = write(&records, 64);
        let at = at % bytes.len();
        bytes[at] ^= xor;
        let (_, error) = read_all(&bytes);
        // Anything in a chunk is covered by its checksum; only the file
        // header's reserved bytes may change unnoticed.
        if !(16..32).contains(&at) {
            prop_assert!(error.is_some(), "a flipped byte at {} went unnoticed", at);
        }
    }
}

fn sample_records(n: u64) -> Vec<Owned> {
    (0..n)
        .map(|i| Owned::Sample(i * 1000, 1, 1, 0, i % 7, 1_000_000))
        .collect()
}

#[test]
fn a_file_cut_anywhere_reads_back_to_its_last_whole_chunk() {
    let records = sample_records(40);
    let bytes = write(&records, 50);
    let (chunks, error) = read_all(&bytes);
    assert!(error.is_none());
    assert!(chunks.len() > 5, "{} chunks", chunks.len());
    // Where each chunk ends.
    let ends: Vec<u64> = chunks
        .iter()
        .skip(1)
        .map(|c| c.0)
        .chain([bytes.len() as u64])
        .collect();
    for cut in 32..bytes.len() {
        let (got, error) = read_all(&bytes[..cut]);
        let whole = ends.iter().filter(|&&e| e <= cut as u64).count();
        assert_eq!(got.len(), whole, "cut at {cut}");
        assert_eq!(got[..], chunks[..whole]);
        if cut == 32 || ends.contains(&(cut as u64)) {
            assert!(error.is_none(), "cut at a chunk boundary {cut}: {error:?}");
        } else {
            match error {
                Some(ReadError::Truncated { offset, .. }) => {
                    assert_eq!(offset, chunks[whole].0, "cut at {cut}");
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_seek_to_a_chunk_reads_it_and_what_follows_and_a_wrong_offset_is_named() {
    let records = sample_records(40);
    let bytes = write(&records, 50);
    let (chunks, _) = read_all(&bytes);
    assert!(chunks.len() > 5, "{} chunks", chunks.len());
    // Records before each chunk, from the reading start to end.
    let mut before = Vec::new();
    let mut n = 0;
    for c in &chunks {
        before.push(n);
        n += c.1;
    }
    let mut reader = Reader::new(std::io::Cursor::new(&bytes)).unwrap();
    // Backwards, so each seek goes where a plain reading would not.
    for (i, &(offset, len)) in chunks.iter().enumerate().rev() {
        reader.seek_chunk(offset).unwrap();
        let chunk = reader.next_chunk().unwrap().unwrap();
        assert_eq!((chunk.offset(), chunk.len()), (offset, len));
        for (k, r) in chunk.records().enumerate() {
            assert!(same(&records[before[i] + k].record(), &r.unwrap()));
        }
        // The one after it follows.
        let next = reader.next_chunk().unwrap().map(|c| c.offset());
        assert_eq!(next, chunks.get(i + 1).map(|c| c.0));
    }
    let inside = chunks[2].0 + 3;
    reader.seek_chunk(inside).unwrap();
    match reader.next_chunk() {
        Err(ReadError::BadChunk { offset, .. }) => assert_eq!(offset, inside),
        other => panic!("a seek into a chunk read as {other:?}"),
    }
    // A seek names a chunk: none at the end of the file, or past it, is
    // an error, not the end of the reading.
    let end = bytes.len() as u64;
    for offset in [end, end + 100] {
        reader.seek_chunk(offset).unwrap();
        match reader.next_chunk() {
            Err(ReadError::Truncated { offset: at, .. }) => assert_eq!(at, offset),
            other => panic!("a seek to {offset} of {end} bytes read as {other:?}"),
        }
        assert!(reader.next_chunk().unwrap().is_none(), "once, then the end");
    }
    // A plain reading to the end still ends without an error.
    reader.seek_chunk(chunks.last().unwrap().0).unwrap();
    assert!(reader.next_chunk().unwrap().is_some());
    assert!(reader.next_chunk().unwrap().is_none());
}

/// The file header has no checksum. A `header_len` damaged so that it
/// lands on a later chunk's start would skip the chunks before it without
/// a word; a header that a later version lengthened is still read.
#[test]
fn a_header_len_that_would_skip_chunks_is_refused_and_a_longer_header_is_read() {
    let records = sample_records(40);
    let bytes = write(&records, 50);
    let (chunks, error) = read_all(&bytes);
    assert!(error.is_none());
    for &(offset, _) in &chunks[1..] {
        let mut damaged = bytes.clone();
        damaged[12..16].copy_from_slice(&(offset as u32).to_le_bytes());
        match Reader::new(&damaged[..]) {
            Err(ReadError::HeaderSkipsChunks { header_len }) => {
                assert_eq!(u64::from(header_len), offset);
            }
            other => panic!("header_len {offset}: {other:?}"),
        }
    }
    // Sixteen bytes a later version might add, which do not begin as a
    // chunk does: skipped, and every chunk read.
    let mut longer = bytes[..32].to_vec();
    longer[12..16].copy_from_slice(&48u32.to_le_bytes());
    longer.extend_from_slice(b"later header....");
    longer.extend_from_slice(&bytes[32..]);
    let (got, error) = read_all(&longer);
    assert!(error.is_none(), "{error:?}");
    let moved: Vec<_> = chunks.iter().map(|&(o, n)| (o + 16, n)).collect();
    assert_eq!(got, moved);
}

#[test]
fn damage_is_named_with_its_offset() {
    let bytes = write(&sample_records(30), 60);
    let (chunks, _) = read_all(&bytes);
    let second = chunks[1].0 as usize;

    let mut payload = bytes.clone();
    payload[second + 30] ^= 1;
    let (_, error) = read_all(&payload);
    assert!(
        matches!(
            error,
            Some(ReadError::BadChunk { offset, problem: ChunkProblem::Checksum { .. } })
                if offset == second as u64
        ),
        "{error:?}"
    );
    let text = error.unwrap().to_string();
    assert!(text.contains(&format!("byte {second}")), "{text}");

    let mut magic = bytes.clone();
    magic[second] = b'X';
    assert!(matches!(
        read_all(&magic).1,
        Some(ReadError::BadChunk { offset, problem: ChunkProblem::Magic }) if offset == second as u64
    ));

    let mut foreign = bytes.clone();
    foreign[..8].copy_from_slice(b"PERFILE2");
    assert!(matches!(
        read_all(&foreign).1,
        Some(ReadError::NotARecording { .. })
    ));

    let mut version = bytes;
    version[8] = 2;
    let error = read_all(&version).1.unwrap();
    assert!(matches!(
        error,
        ReadError::UnsupportedVersion { version: 2 }
    ));
    assert!(error.to_string().contains("version 2"), "{error}");

    assert!(matches!(
        read_all(b"ICHN").1,
        Some(ReadError::NotARecording { .. })
    ));
    // Nothing at all: said so, not as a foreign file starting with [].
    let empty = read_all(b"").1.unwrap();
    assert!(matches!(empty, ReadError::EmptyFile), "{empty:?}");
    assert!(empty.to_string().contains("the file is empty"), "{empty}");

    // Cut inside the header, after the magic: a recording cut short, not
    // a foreign file.
    let mut whole = Vec::new();
    Writer::new(&mut whole).unwrap().finish().unwrap();
    for cut in 8..32 {
        let error = read_all(&whole[..cut]).1.unwrap();
        assert!(
            matches!(error, ReadError::TruncatedHeader { needed: 32, found } if found == cut as u64),
            "{cut}: {error:?}"
        );
        assert!(
            error.to_string().contains("inside its 32-byte header"),
            "{error}"
        );
    }
}

/// A chunk of `payload` stored as is, with a checksum computed here.
fn raw_chunk(payload: &[u8], records: u32) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(b"CHNK");
    header.extend_from_slice(&[0, 0, 0, 0]);
    header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    header.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    header.extend_from_slice(&records.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header);
    crc.update(payload);
    header.extend_from_slice(&crc.finalize().to_le_bytes());
    header.extend_from_slice(payload);
    header
}

fn file_with(chunk: &[u8]) -> Vec<u8> {
    let mut file = b"ICHNOSRC".to_vec();
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&32u32.to_le_bytes());
    file.extend_from_slice(&[0; 16]);
    file.extend_from_slice(chunk);
    file
}

#[test]
fn record_damage_inside_a_sound_chunk_is_named() {
    // A Sample (kind 7) whose body stops after its time.
    let short = [7u8, 1, 5];
    let error = read_all(&file_with(&raw_chunk(&short, 1))).1.unwrap();
    match &error {
        ReadError::BadRecord {
            chunk,
            offset,
            kind,
            ..
        } => assert_eq!((*chunk, *offset, *kind), (32, 0, 7)),
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("pid"), "{error}");

    // A length running past the payload.
    let long = [3u8, 100, 1, 2];
    assert!(matches!(
        read_all(&file_with(&raw_chunk(&long, 1))).1,
        Some(ReadError::BadRecord { .. })
    ));

    // A record count that lies.
    let exit = [4u8, 3, 1, 2, 3];
    assert!(matches!(
        read_all(&file_with(&raw_chunk(&exit, 2))).1,
        Some(ReadError::BadChunk {
            problem: ChunkProblem::RecordCount {
                expected: 2,
                got: 1
            },
            ..
        })
    ));

    // A stack that claims more frames than its body holds.
    let stack = [6u8, 5, 0, 1, 0, 0xff, 0x01];
    assert!(matches!(
        read_all(&file_with(&raw_chunk(&stack, 1))).1,
        Some(ReadError::BadRecord { kind: 6, .. })
    ));
}

#[test]
fn values_a_later_version_may_add_are_kept_as_unknown() {
    // A Lost record (kind 9) whose cause is 42, and a Stack (kind 6) whose
    // stop is 9: both read, neither refused.
    let payload = [9u8, 4, 1, 0, 5, 42, 6, 6, 0, 1, 9, 1, 0x90, 0x01];
    let file = file_with(&raw_chunk(&payload, 2));
    let mut reader = Reader::new(&file[..]).unwrap();
    let chunk = reader.next_chunk().unwrap().unwrap();
    let records: Vec<Record<'_>> = chunk.records().map(Result::unwrap).collect();
    assert_eq!(
        records[0],
        Record::Lost {
            time: 1,
            cpu: 0,
            count: 5,
            cause: LostCause::Unknown(42)
        }
    );
    let Record::Stack(s) = &records[1] else {
        panic!("{:?}", records[1])
    };
    assert_eq!(s.stop, StackStop::Unknown(9));
    assert_eq!(s.frames.iter().collect::<Vec<_>>(), [0x90]);
}

#[test]
fn an_off_cpu_record_reads_field_by_field_as_the_format_page_lays_it_out() {
    // Kind 12: time 5, pid 7, tid 8, cpu 1, stack 3, duration 300 (two
    // varint bytes), state 2 (preempted).
    let payload = [12u8, 8, 5, 7, 8, 1, 3, 0xac, 0x02, 2];
    let file = file_with(&raw_chunk(&payload, 1));
    let mut reader = Reader::new(&file[..]).unwrap();
    let chunk = reader.next_chunk().unwrap().unwrap();
    let records: Vec<Record<'_>> = chunk.records().map(Result::unwrap).collect();
    assert_eq!(
        records[0],
        Record::OffCpu {
            time: 5,
            pid: 7,
            tid: 8,
            cpu: 1,
            stack: 3,
            duration: 300,
            state: OffCpuState::Preempted,
        }
    );
}

#[test]
fn a_meta_record_of_the_first_recordings_has_no_off_cpu_event() {
    // Written before `off_cpu_event` was added: the body ends at `target`.
    let mut body = vec![1, b'h', 0, 0, 1, 7];
    body.extend_from_slice(&[100, 0, 1, 2, 0, 0]);
    let mut payload = vec![1u8, u8::try_from(body.len()).unwrap()];
    payload.extend_from_slice(&body);
    let file = file_with(&raw_chunk(&payload, 1));
    let mut reader = Reader::new(&file[..]).unwrap();
    let chunk = reader.next_chunk().unwrap().unwrap();
    let records: Vec<Record<'_>> = chunk.records().map(Result::unwrap).collect();
    let Record::Meta(m) = &records[0] else {
        panic!("{:?}", records[0])
    };
    assert_eq!((m.host, m.event, m.frequency), (&b"h"[..], &[7u8][..], 100));
    assert_eq!(m.target, Target::Command);
    assert!(m.off_cpu_event.is_empty());
}

#[test]
fn unknown_kinds_and_longer_bodies_are_skipped() {
    // Kind 200 (unknown), then an Exit whose body has two bytes more than
    // its fields (flags 1, then 0xaa 0xbb).
    let payload = [200u8, 2, 9, 9, 4, 6, 1, 2, 3, 1, 0xaa, 0xbb];
    let file = file_with(&raw_chunk(&payload, 2));
    let mut reader = Reader::new(&file[..]).unwrap();
    let chunk = reader.next_chunk().unwrap().unwrap();
    let records: Vec<Record<'_>> = chunk.records().map(Result::unwrap).collect();
    assert_eq!(records[0], Record::Unknown { kind: 200 });
    assert_eq!(
        records[1],
        Record::Exit {
            pid: 1,
            tid: 2,
            time: 3,
            flags: 1
        }
    );
}

#[test]
fn an_exit_record_of_the_first_recordings_has_no_flags() {
    // Written before `flags` was added: the body ends at `time`.
    let payload = [4u8, 3, 1, 2, 3];
    let file = file_with(&raw_chunk(&payload, 1));
    let mut reader = Reader::new(&file[..]).unwrap();
    let chunk = reader.next_chunk().unwrap().unwrap();
    let records: Vec<Record<'_>> = chunk.records().map(Result::unwrap).collect();
    assert_eq!(
        records,
        [Record::Exit {
            pid: 1,
            tid: 2,
            time: 3,
            flags: 0
        }]
    );
}

#[test]
fn samples_compress_to_a_few_bytes_each() {
    let records = sample_records(10_000);
    let bytes = write(&records, 1 << 20);
    let per_sample = bytes.len() as f64 / 10_000.0;
    assert!(per_sample < 4.0, "{per_sample} bytes a sample");
}

/// A description of a command line of any length, kept by
/// `bounded_command`, is written and read back: the first arguments,
/// each whole or cut at 4 KiB, 64 KiB at most in all. (100,000 arguments
/// were written whole, and the reader, which takes 65,536 at most,
/// refused the recording's first record.)
#[test]
fn a_bounded_command_line_is_written_and_read_back() {
    let long = vec![b'x'; 10_000];
    let args: Vec<&[u8]> = std::iter::once(&long[..])
        .chain(std::iter::repeat_n(&b"arg"[..], 100_000))
        .collect();
    let command = ichnos_data::bounded_command(args.iter().copied());
    assert_eq!(command[0].len(), ichnos_data::record::MAX_ARGUMENT_BYTES);
    let total: usize = command.iter().map(|a| a.len()).sum();
    assert!(total <= ichnos_data::record::MAX_COMMAND_BYTES, "{total}");
    assert!(command[1..].iter().all(|a| *a == b"arg"));
    let meta = Record::Meta(Meta {
        host: b"h",
        kernel: b"k",
        command: command.clone(),
        event: b"cpu-clock",
        frequency: 1000,
        stack_size: 0,
        start_monotonic_ns: 0,
        start_realtime_ns: 0,
        recorder: b"t",
        target: Target::Command,
        off_cpu_event: b"",
    });
    let mut bytes = Vec::new();
    let mut writer = Writer::new(&mut bytes).unwrap();
    writer.push(&meta).unwrap();
    writer.finish().unwrap();
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let chunk = reader.next_chunk().unwrap().expect("a chunk");
    let read: Vec<_> = chunk.records().collect();
    assert_eq!(read.len(), 1);
    match read[0].as_ref().unwrap() {
        Record::Meta(m) => assert_eq!(m.command, command),
        other => panic!("{other:?}"),
    }
}
