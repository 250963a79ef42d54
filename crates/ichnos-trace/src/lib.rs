//! Function tracing: every entry and exit of a program built with
//! `-finstrument-functions`, recorded through per-thread fill buffers,
//! and read back as call trees and per-function times.
//!
//! [`trace()`] runs the command with the runtime (`libichnos_preload.so`,
//! the `ichnos-preload` crate) preloaded. Each thread writes 16-byte
//! events into its own fill buffer (`ichnos-buf`, DynamoRIO drx_buf's
//! design); full buffers go as frames into the process's shared buffer (a
//! region-table buffer in a memfd), and this recorder turns frames into
//! `Calls` records of the recording (`ichnos-data`), functions interned
//! as one-frame stacks so that the profiler's offline symbolization
//! names them. [`Trace`] reads a recording back: [`replay`] prints each
//! thread's call tree with durations as `uftrace replay` does, and
//! [`totals`] the time, self time and calls of each function, and
//! [`export`] writes it for Perfetto, Chrome's trace viewers and flame
//! graphs.

mod clock;
pub mod export;
mod filter;
mod read;
mod recorder;
pub mod replay;
mod ring_repeats;
mod scoped;
mod socket;
mod sys;
pub mod totals;

pub use clock::tsc_is_invariant;
pub use filter::FilterError;
pub use read::{Call, Function, Trace, TraceReadError};
pub use recorder::{trace, TraceError, TraceOptions, TraceStatus, TraceSummary};
pub use scoped::{CallFilters, ScopeError};

/// For the fuzz targets (`fuzz/`): the recorder's reading of a traced
/// process's shared buffer, from bytes alone. Not an API to build on.
#[doc(hidden)]
pub use recorder::fuzzing;
