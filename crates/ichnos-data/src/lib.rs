//! The ichnos recording: what `ichnos record` saw, as a file.
//!
//! A recording is a stream of [`Record`]s — the recording's description,
//! address spaces of processes and their mappings, thread names, interned
//! stacks of return addresses, samples that name them, JIT code names,
//! loss counts, and for a function trace each thread's entries and exits
//! — gathered into chunks that are compressed (Zstandard) and
//! checksummed (CRC-32) one by one. A recording cut short is sound up to
//! its last whole chunk. The format is specified in
//! `docs/recording-format.md` so that others can read it; [`Writer`] and
//! [`Reader`] are this crate's implementation.
//!
//! ```
//! use ichnos_data::{Reader, Record, Writer};
//! let mut writer = Writer::new(Vec::new()).unwrap();
//! writer.push(&Record::Thread { pid: 7, tid: 7, time: 0, name: b"demo" }).unwrap();
//! let bytes = writer.finish().unwrap();
//!
//! let mut reader = Reader::new(&bytes[..]).unwrap();
//! let chunk = reader.next_chunk().unwrap().unwrap();
//! let record = chunk.records().next().unwrap().unwrap();
//! assert_eq!(record, Record::Thread { pid: 7, tid: 7, time: 0, name: b"demo" });
//! assert!(reader.next_chunk().unwrap().is_none());
//! ```

#![forbid(unsafe_code)]

mod error;
pub mod format;
mod reader;
pub mod record;
pub mod varint;
pub mod wire;
mod writer;

pub use error::{ChunkProblem, ReadError};
pub use reader::{Chunk, Reader};
pub use record::{
    bounded_command, BodyError, CallEvent, CallEvents, CallEventsEncoder, Calls, CallsOut,
    ClockSource, Frames, JitSource, LostCause, Meta, OffCpuState, OwnedCallEvents, Record, Stack,
    StackOut, StackStop, Target, CALLS_CONTINUED, CALLS_EXEC, CALLS_LAST, CALLS_RESUMED,
    CALLS_RING, EXIT_CUT_SHORT, MAPPING_EXECUTABLE,
};
pub use writer::{encoded_len, Writer, CHUNK_TARGET};
