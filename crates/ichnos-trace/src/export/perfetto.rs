//! Perfetto's protobuf trace: a `Trace` message written packet by packet
//! (each `Trace.packet` field on its own, which is what a whole `Trace`
//! is on the wire). One clock snapshot names `CLOCK_MONOTONIC` the
//! trace's clock, so times line up with ichnos profiles and with
//! Perfetto's own traces of the same machine. Each process and thread
//! gets a track; each thread's events are one packet sequence whose
//! defaults name its track and clock, and whose function names are
//! interned the first time the sequence uses them: a call costs two
//! packets of about 20 bytes.

use std::io::{self, Write};

use rustc_hash::{FxHashMap, FxHashSet};

use super::perfetto_proto::{
    Clock, ClockSnapshot, DebugAnnotation, EventName, InternedData, ProcessDescriptor,
    ThreadDescriptor, TracePacket, TracePacketDefaults, TrackDescriptor, TrackEvent,
    TrackEventDefaults, BUILTIN_CLOCK_MONOTONIC, SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};
use super::{export, ExportError, ExportSummary, ThreadInfo, Timeline};
use crate::read::Trace;

/// A thread's packet sequence.
struct Sequence {
    id: u32,
    /// Functions whose names the sequence has interned (function number
    /// + 1 is the name's iid).
    interned: FxHashSet<u64>,
}

struct Perfetto<'a> {
    out: &'a mut dyn Write,
    buf: Vec<u8>,
    sequences: FxHashMap<(u32, u32), Sequence>,
    clock_written: bool,
}

/// The track of process `pid`.
fn process_uuid(pid: u32) -> u64 {
    u64::from(pid) << 32
}

/// The track of thread `tid` (never 0: no thread's id is).
fn thread_uuid(pid: u32, tid: u32) -> u64 {
    process_uuid(pid) | u64::from(tid)
}

impl Perfetto<'_> {
    /// Writes `packet` as one `Trace.packet` field.
    fn packet(&mut self, packet: &TracePacket) -> io::Result<()> {
        self.buf.clear();
        prost::encoding::message::encode(1, packet, &mut self.buf);
        self.out.write_all(&self.buf)
    }

    /// The packet of an event on thread `tid`'s sequence.
    fn event(
        &mut self,
        pid: u32,
        tid: u32,
        ns: u64,
        event: TrackEvent,
        names: Option<InternedData>,
    ) -> io::Result<()> {
        let id = self.sequences.get(&(pid, tid)).map(|s| s.id);
        self.packet(&TracePacket {
            timestamp: Some(ns),
            trusted_packet_sequence_id: id,
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            track_event: Some(event),
            interned_data: names,
            ..TracePacket::default()
        })
    }
}

impl Timeline for Perfetto<'_> {
    fn thread(&mut self, t: &ThreadInfo<'_>) -> io::Result<()> {
        if !self.clock_written {
            // Before any time: the trace's clock is the recording's.
            self.clock_written = true;
            self.packet(&TracePacket {
                clock_snapshot: Some(ClockSnapshot {
                    clocks: vec![Clock {
                        clock_id: Some(BUILTIN_CLOCK_MONOTONIC),
                        timestamp: Some(0),
                    }],
                    primary_trace_clock: Some(BUILTIN_CLOCK_MONOTONIC.cast_signed()),
                }),
                ..TracePacket::default()
            })?;
        }
        // Ids above i32::MAX cannot be; they would read as negative.
        let (pid, tid) = (t.pid.cast_signed(), t.tid.cast_signed());
        if t.first_of_process {
            self.packet(&TracePacket {
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(process_uuid(t.pid)),
                    process: Some(ProcessDescriptor {
                        pid: Some(pid),
                        process_name: Some(t.process.to_owned()),
                    }),
                    ..TrackDescriptor::default()
                }),
                ..TracePacket::default()
            })?;
        }
        let uuid = thread_uuid(t.pid, t.tid);
        self.packet(&TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(process_uuid(t.pid)),
                thread: Some(ThreadDescriptor {
                    pid: Some(pid),
                    tid: Some(tid),
                    thread_name: Some(t.thread.to_owned()),
                }),
                ..TrackDescriptor::default()
            }),
            ..TracePacket::default()
        })?;
        // Sequence 0 is no sequence; ids count from 1.
        let id = u32::try_from(self.sequences.len() + 1).unwrap_or(u32::MAX);
        self.sequences.insert(
            (t.pid, t.tid),
            Sequence {
                id,
                interned: FxHashSet::default(),
            },
        );
        self.packet(&TracePacket {
            trusted_packet_sequence_id: Some(id),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(BUILTIN_CLOCK_MONOTONIC),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(uuid),
                }),
            }),
            ..TracePacket::default()
        })
    }

    fn begin(&mut self, pid: u32, tid: u32, function: u64, name: &str, ns: u64) -> io::Result<()> {
        let iid = function.saturating_add(1);
        let names = self
            .sequences
            .get_mut(&(pid, tid))
            .is_some_and(|s| s.interned.insert(function))
            .then(|| InternedData {
                event_names: vec![EventName {
                    iid: Some(iid),
                    name: Some(name.to_owned()),
                }],
            });
        let event = TrackEvent {
            r#type: Some(TYPE_SLICE_BEGIN),
            name_iid: Some(iid),
            ..TrackEvent::default()
        };
        self.event(pid, tid, ns, event, names)
    }

    fn end(&mut self, pid: u32, tid: u32, ns: u64) -> io::Result<()> {
        let event = TrackEvent {
            r#type: Some(TYPE_SLICE_END),
            ..TrackEvent::default()
        };
        self.event(pid, tid, ns, event, None)
    }

    fn instant(&mut self, pid: u32, tid: u32, ns: u64, name: &str, value: u64) -> io::Result<()> {
        let event = TrackEvent {
            r#type: Some(TYPE_INSTANT),
            name: Some(name.to_owned()),
            debug_annotations: vec![DebugAnnotation {
                name: Some("value".to_owned()),
                uint_value: Some(value),
            }],
            ..TrackEvent::default()
        };
        self.event(pid, tid, ns, event, None)
    }
}

/// Writes `trace` (only threads `tids`, unless empty) to `out` as a
/// Perfetto protobuf trace (docs/function-trace.md). Calls still open
/// when the trace ends are left open: Perfetto shows them as slices that
/// did not end.
pub fn write_perfetto(
    trace: &Trace,
    tids: &[u32],
    out: &mut dyn Write,
) -> Result<ExportSummary, ExportError> {
    let timeline = Perfetto {
        out,
        buf: Vec::with_capacity(64),
        sequences: FxHashMap::default(),
        clock_written: false,
    };
    let (timeline, summary) = export(trace, tids, timeline)?;
    timeline.out.flush().map_err(ExportError::Write)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a slice's end, checked by hand against the protobuf
    /// encoding: Trace.packet (1, LEN), then `timestamp` (8, varint),
    /// `trusted_packet_sequence_id` (10), `track_event` (11, LEN) holding type
    /// (9) = 2, `sequence_flags` (13) = 2. prost writes fields in tag order.
    #[test]
    fn a_slice_end_is_encoded_as_the_protos_say() {
        let mut out = Vec::new();
        let mut p = Perfetto {
            out: &mut out,
            buf: Vec::new(),
            sequences: FxHashMap::default(),
            clock_written: true,
        };
        p.sequences.insert(
            (7, 9),
            Sequence {
                id: 5,
                interned: FxHashSet::default(),
            },
        );
        p.end(7, 9, 300).unwrap();
        let expected = [
            0x0a, 11, // Trace.packet, 11 bytes
            0x40, 0xac, 0x02, // timestamp 300
            0x50, 5, // sequence 5
            0x5a, 2, 0x48, 2, // track_event { type: SLICE_END }
            0x68, 2, // sequence_flags: NEEDS_INCREMENTAL_STATE
        ];
        assert_eq!(out, expected);
    }
}
