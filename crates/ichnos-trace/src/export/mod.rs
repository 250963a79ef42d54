//! A function trace where people look at timelines and flame graphs:
//! Perfetto's protobuf trace (track events, one track per thread, names
//! interned: it stays small where JSON breaks at about 1 GB), Chrome's
//! trace event JSON (for small traces and the tools that read only JSON),
//! and folded stacks weighted by time (a flame graph's input).
//!
//! The timelines stream: each call's beginning and end are written as
//! the walk of the trace meets them, and only the threads seen and the
//! names each thread's sequence has interned are held. The folded stacks
//! hold one count per distinct call path.

mod chrome;
mod folded;
mod perfetto;
pub mod perfetto_proto;

use std::io;

use rustc_hash::FxHashSet;

use crate::read::{Call, Trace, TraceReadError, Visitor};

pub use chrome::write_chrome;
pub use folded::folded;
pub use perfetto::write_perfetto;

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The trace could not be read.
    #[error(transparent)]
    Read(#[from] TraceReadError),
    /// The output could not be written.
    #[error("cannot write the export: {0}")]
    Write(#[source] io::Error),
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Threads (tracks).
    pub threads: u64,
    /// Calls begun.
    pub begun: u64,
    /// Calls ended (the rest were still open when the trace ends).
    pub ended: u64,
    /// Instants: probes and losses.
    pub instants: u64,
}

/// A thread as a timeline names it.
pub(crate) struct ThreadInfo<'a> {
    pub pid: u32,
    pub tid: u32,
    /// The process's name (`process PID` where the recording has none).
    pub process: &'a str,
    /// The thread's name (`thread TID` where the recording has none).
    pub thread: &'a str,
    /// Whether this is the first thread of its process to be seen.
    pub first_of_process: bool,
}

/// What a timeline export writes, in the trace's order per thread; times
/// in nanoseconds on the recording's clock (`CLOCK_MONOTONIC`).
pub(crate) trait Timeline {
    /// A thread is seen for the first time (before any of its events).
    fn thread(&mut self, thread: &ThreadInfo<'_>) -> io::Result<()>;
    /// A call of `function`, named `name`, begins.
    fn begin(&mut self, pid: u32, tid: u32, function: u64, name: &str, ns: u64) -> io::Result<()>;
    /// The thread's innermost open call ends.
    fn end(&mut self, pid: u32, tid: u32, ns: u64) -> io::Result<()>;
    /// Something happened at one moment (a probe, a loss).
    fn instant(&mut self, pid: u32, tid: u32, ns: u64, name: &str, value: u64) -> io::Result<()>;
}

/// Nanoseconds rounded to whole ones; none below 0 (times before the
/// clock's zero cannot happen), and `u64::MAX` at most.
pub(crate) fn whole_ns(ns: f64) -> u64 {
    let ns = ns.round();
    if ns.is_nan() || ns <= 0.0 {
        0
    } else {
        // In range and not negative: checked above (`as` saturates).
        #[allow(clippy::cast_sign_loss)]
        let ns = ns as u64;
        ns
    }
}

/// The walk of a trace turned into timeline events.
struct Events<'a, T> {
    trace: &'a Trace,
    tids: &'a [u32],
    timeline: T,
    seen: FxHashSet<(u32, u32)>,
    processes: FxHashSet<u32>,
    summary: ExportSummary,
    error: Option<io::Error>,
}

/// The name of thread `tid`, or of its process, where the recording has
/// one.
pub(crate) fn names(trace: &Trace, pid: u32, tid: u32) -> (String, String) {
    let named =
        |n: Option<&std::sync::Arc<str>>| n.filter(|n| !n.is_empty()).map(ToString::to_string);
    let (thread, process) = trace.profile.thread_name(pid, tid);
    (
        named(process).unwrap_or_else(|| format!("process {pid}")),
        named(thread).unwrap_or_else(|| format!("thread {tid}")),
    )
}

impl<T: Timeline> Events<'_, T> {
    /// Whether thread `tid`'s events are written; announces the thread
    /// the first time.
    fn shown(&mut self, pid: u32, tid: u32) -> bool {
        if self.error.is_some() || !(self.tids.is_empty() || self.tids.contains(&tid)) {
            return false;
        }
        if self.seen.insert((pid, tid)) {
            let first_of_process = self.processes.insert(pid);
            let (process, thread) = names(self.trace, pid, tid);
            self.summary.threads += 1;
            let info = ThreadInfo {
                pid,
                tid,
                process: &process,
                thread: &thread,
                first_of_process,
            };
            if let Err(e) = self.timeline.thread(&info) {
                self.error = Some(e);
                return false;
            }
        }
        true
    }

    /// The `CLOCK_MONOTONIC` time of `ticks`, as the system's other
    /// traces (perf's, Perfetto's own) are timed, so that they line up.
    fn ns(&self, ticks: u64) -> u64 {
        // Rounding keeps the order of ticks (the conversion is linear and
        // rising). The start is added in whole nanoseconds: a double holds
        // a day's nanoseconds exactly, not a long uptime's.
        whole_ns(self.trace.time_ns(ticks))
            .saturating_add(self.trace.profile.description.start_monotonic_ns)
    }

    fn done(&mut self, result: io::Result<()>) {
        if let Err(e) = result {
            self.error = Some(e);
        }
    }
}

impl<T: Timeline> Visitor for Events<'_, T> {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, ticks: u64, _: usize, _: u64) {
        if self.shown(pid, tid) {
            let ns = self.ns(ticks);
            let r = self
                .timeline
                .begin(pid, tid, function, self.trace.name(function), ns);
            self.summary.begun += 1;
            self.done(r);
        }
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        if self.shown(pid, tid) {
            let ns = self.ns(call.exit);
            let r = self.timeline.end(pid, tid, ns);
            self.summary.ended += 1;
            self.done(r);
        }
    }

    fn probe(&mut self, pid: u32, tid: u32, ticks: u64, id: u64, value: u64) {
        if self.shown(pid, tid) {
            let ns = self.ns(ticks);
            let r = self
                .timeline
                .instant(pid, tid, ns, &format!("probe {id}"), value);
            self.summary.instants += 1;
            self.done(r);
        }
    }

    fn lost(&mut self, pid: u32, tid: u32, ticks: u64, count: u64) {
        if self.shown(pid, tid) {
            let ns = self.ns(ticks);
            let r = self.timeline.instant(pid, tid, ns, "LOST records", count);
            self.summary.instants += 1;
            self.done(r);
        }
    }

    fn abandon(&mut self, pid: u32, tid: u32, open: usize, ticks: u64) {
        // The slices of calls that will never return end at the thread's
        // end, so that what comes after does not nest under them.
        if self.shown(pid, tid) {
            let ns = self.ns(ticks);
            for _ in 0..open {
                let r = self.timeline.end(pid, tid, ns);
                self.summary.ended += 1;
                self.done(r);
            }
        }
    }
}

/// Walks `trace` (only threads `tids`, unless empty) into `timeline`.
fn export<T: Timeline>(
    trace: &Trace,
    tids: &[u32],
    timeline: T,
) -> Result<(T, ExportSummary), ExportError> {
    let mut events = Events {
        trace,
        tids,
        timeline,
        seen: FxHashSet::default(),
        processes: FxHashSet::default(),
        summary: ExportSummary::default(),
        error: None,
    };
    trace.walk(&mut events)?;
    if let Some(e) = events.error {
        return Err(ExportError::Write(e));
    }
    Ok((events.timeline, events.summary))
}
