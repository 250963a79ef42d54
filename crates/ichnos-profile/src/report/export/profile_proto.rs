//! The messages of pprof's `profile.proto` (package `perftools.profiles`),
//! written out as prost would generate them, so that building needs no
//! `protoc`. Field numbers are those of google/pprof's
//! `proto/profile.proto`; docs/export-formats.md lists them. Fields added
//! upstream after the ones here (breakdowns, label sets) are left out:
//! readers skip what a file does not hold.

/// The whole profile.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each of a sample's values measures.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The objects mapped.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Code locations the samples name.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions the locations name.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, referred to by index; the first is `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regex of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regex of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the collection started, nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it lasted.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The kind of events between samples.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between samples.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indexes).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The value type shown first (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A value's type and unit (string indexes).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct ValueType {
    /// What is measured: "samples", "cpu".
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// In what: "count", "nanoseconds".
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Locations, the leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Thread and process of the samples.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A key with a text or numeric value.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Label {
    /// The key (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// A text value (string index).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// The numeric value's unit (string index).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// An object and where it was mapped.
// The message's own fields.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Mapping {
    /// Its number, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Where it starts in memory.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Where it ends.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// The file offset mapped at `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The file's path (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Its build id in hex (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations in it are named.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// And have source files.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// And lines.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// And inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A place in the code: one frame of a stack with the functions inlined
/// at it.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Location {
    /// Its number, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its object (0: none).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Its address, where known (0: not given).
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The functions at it, the innermost inlined one first and the
    /// function they were inlined into last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several symbols share the address.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A function and line of a location.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Line {
    /// The function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The source line (0: not known).
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// A function.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Function {
    /// Its number, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name as people read it (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the linker knows it (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// The line it starts at (0: not known).
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
