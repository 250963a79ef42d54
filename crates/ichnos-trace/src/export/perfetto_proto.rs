//! The few messages of Perfetto's trace protos (package
//! `perfetto.protos`) that a track-event trace of function calls needs,
//! written out as prost would generate them, so that building needs no
//! `protoc` and no copy of Perfetto's tree. Field numbers are those of
//! `protos/perfetto/trace/trace_packet.proto` and
//! `protos/perfetto/trace/track_event/*.proto`; docs/function-trace.md
//! lists them. Readers skip the fields a file does not hold, so the
//! hundreds of other fields of `TracePacket` are simply absent.

/// One packet of the trace (`Trace.packet`, field 1, repeated): the
/// export writes each as it goes instead of building the whole `Trace`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    /// When, on the clock `timestamp_clock_id` (or the sequence's
    /// default) names.
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// A snapshot of clocks; the export's names the trace's clock.
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    /// The sequence the packet belongs to (one per thread here): interned
    /// names and defaults are per sequence.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// A slice begins or ends, or an instant.
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// Names first used by this packet, numbered for the rest of the
    /// sequence.
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    /// `SEQ_INCREMENTAL_STATE_CLEARED` (1) starts a sequence's interning;
    /// `SEQ_NEEDS_INCREMENTAL_STATE` (2) marks packets that use it.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// The sequence's defaults: its clock and its events' track.
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    /// A track: a process's or a thread's.
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `SEQ_INCREMENTAL_STATE_CLEARED`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// `SEQ_NEEDS_INCREMENTAL_STATE`.
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
/// `BUILTIN_CLOCK_MONOTONIC`: the clock ichnos recordings keep.
pub const BUILTIN_CLOCK_MONOTONIC: u32 = 3;

/// Clock readings taken at one moment.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    /// The readings.
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// The clock the trace's times are on (`BuiltinClock`; default
    /// boot time).
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// One clock's reading.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    /// Which clock (`BuiltinClock`).
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    /// Its reading, in nanoseconds.
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

/// Defaults for the packets of a sequence.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacketDefaults {
    /// The clock of packets that name none.
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// Defaults of track events.
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
}

/// Defaults of a sequence's track events.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEventDefaults {
    /// The track of events that name none.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
}

/// A track: where slices are drawn.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    /// Its number, unique in the trace.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// The process's track, for a thread's.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// A process, for a process's track.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// A thread, for a thread's track.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
}

/// A process.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    /// Its id.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// Its name.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// A thread.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadDescriptor {
    /// Its process's id.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// Its id.
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    /// Its name.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// A slice's beginning or end, or an instant.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    /// `TYPE_SLICE_BEGIN` (1), `TYPE_SLICE_END` (2), `TYPE_INSTANT` (3).
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// The name, interned in the sequence.
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    /// The name, given whole (rare events).
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// Values shown with the event.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
}

/// `TYPE_SLICE_BEGIN`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
/// `TYPE_SLICE_END`.
pub const TYPE_SLICE_END: i32 = 2;
/// `TYPE_INSTANT`.
pub const TYPE_INSTANT: i32 = 3;

/// A named value of an event.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    /// Its name.
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    /// An unsigned value.
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
}

/// Names numbered for the rest of a sequence.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InternedData {
    /// Event names.
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<EventName>,
}

/// An event name and its number.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EventName {
    /// Its number (above 0).
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    /// The name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}
