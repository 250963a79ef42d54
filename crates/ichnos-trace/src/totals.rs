//! `ichnos report --trace`: per function, the time spent in its calls
//! (total), in it alone (self), how often it was called, and the average
//! and longest call, as `uftrace report` sums them: a call made while
//! another call of the same function is open in its thread (recursion,
//! direct or through other functions) adds to the calls, the self time
//! and the longest, not to the total, which its outermost call already
//! holds. So no function's total exceeds the time its thread ran.

use std::io::{self, Write};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::read::{Call, Trace, TraceReadError, Visitor};
use crate::replay::duration;

/// One function's figures, in nanoseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionTotals {
    /// The function's name.
    pub name: String,
    /// Its object.
    pub object: String,
    /// Calls that returned, and those still open when their thread
    /// ended (counted to its end).
    pub calls: u64,
    /// Time in its calls.
    pub total_ns: f64,
    /// Time in it, less the calls it made.
    pub self_ns: f64,
    /// The longest call.
    pub max_ns: f64,
}

/// How to order the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TotalsSort {
    /// By total time, longest first.
    #[default]
    Total,
    /// By self time.
    SelfTime,
    /// By calls.
    Calls,
    /// By average call.
    Average,
    /// By longest call.
    Max,
}

/// The table, and what the trace's header says of the calls it sums.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    /// One row per function, in the order asked for.
    pub rows: Vec<FunctionTotals>,
    /// Calls summed (every row's calls).
    pub calls: u64,
    /// Events the runtime counted as lost in the threads summed.
    pub lost: u64,
    /// Threads with a call summed, by (process, thread).
    pub threads: usize,
    /// Processes with a call summed.
    pub processes: usize,
    /// From the first call summed to the last return, in nanoseconds.
    pub span_ns: f64,
}

#[derive(Default)]
struct Sums {
    by_function: FxHashMap<u64, (u64, u64, u64, u64)>,
    tids: Vec<u32>,
    /// Per thread, the calls of each function open in it.
    open: FxHashMap<(u32, u32), FxHashMap<u64, u32>>,
    lost: u64,
    /// Threads with a call summed.
    threads: FxHashSet<(u32, u32)>,
    /// The first entry and last return summed (ticks).
    span: Option<(u64, u64)>,
}

impl Sums {
    fn kept(&self, tid: u32) -> bool {
        self.tids.is_empty() || self.tids.contains(&tid)
    }

    /// An entry or return of a kept thread at `ticks`.
    fn seen(&mut self, pid: u32, tid: u32, ticks: u64) {
        self.threads.insert((pid, tid));
        self.span = Some(self.span.map_or((ticks, ticks), |(first, last)| {
            (first.min(ticks), last.max(ticks))
        }));
    }
}

impl Visitor for Sums {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, ticks: u64, _: usize, _: u64) {
        if self.kept(tid) {
            self.seen(pid, tid, ticks);
            *self
                .open
                .entry((pid, tid))
                .or_default()
                .entry(function)
                .or_default() += 1;
        }
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        self.count(pid, tid, call);
    }

    fn unfinished(&mut self, pid: u32, tid: u32, call: &Call) {
        self.count(pid, tid, call);
    }

    fn lost(&mut self, _: u32, tid: u32, _: u64, count: u64) {
        // Counted, not seen: a thread whose only events are losses made
        // none of the calls summed.
        if self.kept(tid) {
            self.lost = self.lost.saturating_add(count);
        }
    }

    fn abandon(&mut self, pid: u32, tid: u32, _: usize, _: u64) {
        // Its open calls never return (counted to its last event as they
        // came to `unfinished`), and it starts afresh.
        self.open.remove(&(pid, tid));
    }
}

impl Sums {
    /// Counts a call that returned (or is taken as returned at its
    /// thread's last event).
    fn count(&mut self, pid: u32, tid: u32, call: &Call) {
        if !self.kept(tid) {
            return;
        }
        // Whether another call of the function is still open below this
        // one: then its time is already in that call's total.
        let nested = self
            .open
            .get_mut(&(pid, tid))
            .and_then(|open| open.get_mut(&call.function))
            .is_some_and(|n| {
                *n = n.saturating_sub(1);
                *n > 0
            });
        self.seen(pid, tid, call.exit);
        let took = call.exit - call.enter;
        let e = self.by_function.entry(call.function).or_default();
        e.0 += 1;
        if !nested {
            e.1 = e.1.saturating_add(took);
        }
        e.2 = e.2.saturating_add(took.saturating_sub(call.children));
        e.3 = e.3.max(took);
    }
}

/// Sums `trace` per function (only threads `tids`, unless empty); the
/// same name in the same object is one function, wherever it was mapped.
pub fn totals(trace: &Trace, tids: &[u32], sort: TotalsSort) -> Result<Totals, TraceReadError> {
    let mut sums = Sums {
        tids: tids.to_vec(),
        ..Sums::default()
    };
    trace.walk(&mut sums)?;
    let mut merged: FxHashMap<(String, String), FunctionTotals> = FxHashMap::default();
    for (function, (calls, total, own, max)) in sums.by_function {
        let (name, object) = trace.function(function).map_or_else(
            || ("[unknown]".to_owned(), String::new()),
            |f| (f.name.to_string(), f.object.to_string()),
        );
        let row = merged
            .entry((name.clone(), object.clone()))
            .or_insert(FunctionTotals {
                name,
                object,
                calls: 0,
                total_ns: 0.0,
                self_ns: 0.0,
                max_ns: 0.0,
            });
        row.calls += calls;
        row.total_ns += trace.ns(total);
        row.self_ns += trace.ns(own);
        row.max_ns = row.max_ns.max(trace.ns(max));
    }
    let mut rows: Vec<FunctionTotals> = merged.into_values().collect();
    let key = |r: &FunctionTotals| match sort {
        TotalsSort::Total => r.total_ns,
        TotalsSort::SelfTime => r.self_ns,
        TotalsSort::Calls => r.calls as f64,
        TotalsSort::Average => r.total_ns / r.calls.max(1) as f64,
        TotalsSort::Max => r.max_ns,
    };
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    let processes: FxHashSet<u32> = sums.threads.iter().map(|&(pid, _)| pid).collect();
    Ok(Totals {
        calls: rows.iter().map(|r| r.calls).sum(),
        rows,
        lost: sums.lost,
        threads: sums.threads.len(),
        processes: processes.len(),
        span_ns: sums
            .span
            .map_or(0.0, |(first, last)| trace.ns(last - first)),
    })
}

/// Prints the table.
pub fn write_totals(
    rows: &[FunctionTotals],
    limit: Option<usize>,
    mut out: impl Write,
) -> io::Result<()> {
    writeln!(
        out,
        "  Total time   Self time       Calls    Avg time    Max time  Function"
    )?;
    writeln!(
        out,
        "  ==========  ==========  ==========  ==========  ==========  ===================="
    )?;
    for r in rows.iter().take(limit.unwrap_or(usize::MAX)) {
        writeln!(
            out,
            "  {}  {}  {:>10}  {}  {}  {}",
            duration(r.total_ns),
            duration(r.self_ns),
            r.calls,
            duration(r.total_ns / r.calls.max(1) as f64),
            duration(r.max_ns),
            r.name
        )?;
    }
    // Said, as the profile's table says it: a table cut short reads as
    // whole otherwise.
    let more = rows.len().saturating_sub(limit.unwrap_or(usize::MAX));
    if more > 0 {
        let s = if more == 1 { "" } else { "s" };
        writeln!(out, "# {more} more function{s} (--limit 0 shows all)")?;
    }
    out.flush()
}
