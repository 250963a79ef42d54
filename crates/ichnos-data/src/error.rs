//! Why a recording could not be read.

use crate::record::BodyError;

/// What is wrong with a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkProblem {
    /// It does not start with `CHNK`.
    #[error("no chunk header (the bytes are not CHNK)")]
    Magic,
    /// Its checksum does not match.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// In the header.
        stored: u32,
        /// Of the bytes.
        computed: u32,
    },
    /// Larger than a chunk may be.
    #[error("a payload of {raw_len} bytes is larger than a chunk may be")]
    TooLarge {
        /// The length claimed.
        raw_len: u32,
    },
    /// An unknown compression.
    #[error("unknown compression {0}")]
    Compression(u8),
    /// The payload does not decompress.
    #[error("the payload does not decompress ({0})")]
    Decompress(std::io::ErrorKind),
    /// The payload's length differs from the header's.
    #[error("the payload is {got} bytes, the header says {expected}")]
    Length {
        /// From the header.
        expected: u32,
        /// Found.
        got: usize,
    },
    /// The number of records differs from the header's.
    #[error("the chunk holds {got} records, its header says {expected}")]
    RecordCount {
        /// From the header.
        expected: u32,
        /// Found.
        got: u64,
    },
    /// Read again, the chunk does not hold the record an earlier reading
    /// found in it: the file changed while it was read.
    #[error("record {record} is not what an earlier reading found there (the file changed while it was read)")]
    Changed {
        /// The record's number in the chunk.
        record: u32,
    },
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file is not an ichnos recording.
    #[error("not an ichnos recording (it starts with \"{}\", not \"ICHNOSRC\")", found.escape_ascii())]
    NotARecording {
        /// The first bytes.
        found: Vec<u8>,
    },
    /// The file has no byte at all: a recorder killed before it wrote
    /// anything leaves one.
    #[error("the file is empty (a recorder stopped before it wrote its header leaves one)")]
    EmptyFile,
    /// Another version of the format.
    #[error("recording format version {version}; this ichnos reads version 1")]
    UnsupportedVersion {
        /// The file's version.
        version: u32,
    },
    /// A header field has an impossible value.
    #[error("the file header's {field} is {value}")]
    BadHeader {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// `header_len` says the header is longer than 32 bytes, but a chunk
    /// starts at byte 32: the field is damaged, and following it would
    /// skip chunks without a word.
    #[error(
        "the file header's header_len is {header_len}, but a chunk starts at byte 32: the header is damaged"
    )]
    HeaderSkipsChunks {
        /// The damaged field's value.
        header_len: u32,
    },
    /// The file is cut inside its header (it starts as a recording
    /// does): nothing in it can be read.
    #[error("truncated: the file ends after {found} bytes, inside its {needed}-byte header")]
    TruncatedHeader {
        /// The header's length.
        needed: u64,
        /// The bytes there are.
        found: u64,
    },
    /// The file holds its header and nothing after it: its recorder
    /// stopped before it wrote a chunk (every recording's first holds
    /// its `Meta`).
    #[error("the recording ends after its header: it holds nothing (its recorder stopped before writing anything)")]
    Empty,
    /// The file ends inside a chunk: everything before `offset` is sound.
    #[error("truncated: the chunk at byte {offset} needs {needed} bytes and the file ends first")]
    Truncated {
        /// Where the incomplete chunk starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
    },
    /// A chunk is damaged.
    #[error("corrupt chunk at byte {offset}: {problem}")]
    BadChunk {
        /// The chunk's offset.
        offset: u64,
        /// What is wrong.
        problem: ChunkProblem,
    },
    /// A record in a chunk is damaged.
    #[error(
        "corrupt record at byte {offset} of the chunk at byte {chunk} (kind {kind}): {problem}"
    )]
    BadRecord {
        /// The chunk's offset in the file.
        chunk: u64,
        /// The record's offset in the chunk's decompressed payload.
        offset: usize,
        /// The record's kind.
        kind: u8,
        /// What is wrong.
        problem: BodyError,
    },
    /// Reading failed.
    #[error("reading failed: {source}")]
    Io {
        /// The error.
        source: std::io::Error,
    },
}

impl ReadError {
    /// Whether the error only says the recording ends early (a recorder
    /// that was killed): everything read before it is sound.
    #[must_use]
    pub fn is_truncation(&self) -> bool {
        matches!(self, Self::Truncated { .. })
    }
}
