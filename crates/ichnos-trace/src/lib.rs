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

/// What a trace says of `total` processes that ended before the tracing
/// runtime handed their threads' last buffers over (recorded with
/// [`ichnos_data::EXIT_CUT_SHORT`]), the first ten of `pids` named: one
/// sentence, the same when `ichnos trace` ends and when a reader reads
/// the trace.
#[must_use]
pub fn cut_short_note(pids: &[u64], total: u64) -> String {
    const NAMED: usize = 10;
    let mut named: Vec<String> = pids.iter().take(NAMED).map(u64::to_string).collect();
    let unnamed = total.saturating_sub(named.len() as u64);
    if unnamed > 0 {
        named.push(format!("and {unnamed} more"));
    }
    let one = total == 1;
    format!(
        "{} {} ended before the tracing runtime handed over {} threads' last buffers (killed \
         by SIGKILL, or ended in a way the runtime does not see): their last events, up to a \
         buffer's worth a thread, are not in the trace",
        if one { "process" } else { "processes" },
        named.join(", "),
        if one { "its" } else { "their" },
    )
}

#[cfg(test)]
mod tests {
    /// One process is named as one; of many, ten are named and the rest
    /// counted (a reader's list holds sixteen at most, the recorder's
    /// all).
    #[test]
    fn a_cut_short_note_names_ten_processes_and_counts_the_rest() {
        assert!(super::cut_short_note(&[42], 1)
            .starts_with("process 42 ended before the tracing runtime handed over its threads'"));
        let many: Vec<u64> = (1..=16).collect();
        assert!(super::cut_short_note(&many, 25).starts_with(
            "processes 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, and 15 more ended before the tracing \
             runtime handed over their threads'"
        ));
    }
}
