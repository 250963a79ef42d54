//! `ichnos replay`: each call as `uftrace replay` prints it — the
//! duration, the thread, and the function indented by its depth; a call
//! that makes no traced calls on one line (`leaf();`), others opened with
//! `{` and closed with `} /* name */` and their duration
//! (`docs/function-trace.md` specifies the text).

use std::io::{self, Write};

use rustc_hash::FxHashMap;

use crate::filter::has_parameters;
use crate::read::{Call, Trace, TraceReadError, Visitor};

/// What to print.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Only these threads (empty: all).
    pub tids: Vec<u32>,
    /// Hide calls shorter than this many nanoseconds (and so the calls
    /// they made).
    pub min_ns: Option<f64>,
}

/// A duration as uftrace prints it: three decimals of the largest unit
/// that keeps the number below 1000, right-aligned in 10 columns.
#[must_use]
pub fn duration(ns: f64) -> String {
    let (v, unit) = scaled(ns);
    format!("{v:7.3} {unit}")
}

/// Nanoseconds in the largest unit that keeps them below 1000.
fn scaled(ns: f64) -> (f64, &'static str) {
    if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, " s")
    }
}

/// Per thread and entry number, bit sets of the calls: those shorter
/// than the threshold (hidden, with the calls they made), and those
/// that print on one line (`leaf();`: they returned, and no line was
/// printed inside them). Read in a first walk, so that the replay prints
/// each line when it happens. One bit per call each.
#[derive(Default)]
struct Shape {
    min_ticks: Option<f64>,
    hidden: FxHashMap<(u32, u32), Vec<u64>>,
    leaves: FxHashMap<(u32, u32), Vec<u64>>,
    /// Per thread, by depth: whether the open call there has a line
    /// printed inside it.
    inside: FxHashMap<(u32, u32), Vec<bool>>,
}

fn set(bits: &mut Vec<u64>, index: u64) {
    let word = (index / 64) as usize;
    if bits.len() <= word {
        bits.resize(word + 1, 0);
    }
    bits[word] |= 1 << (index % 64);
}

fn is_set(bits: Option<&Vec<u64>>, index: u64) -> bool {
    bits.is_some_and(|bits| {
        bits.get((index / 64) as usize)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    })
}

impl Shape {
    fn is_hidden(&self, pid: u32, tid: u32, index: u64) -> bool {
        is_set(self.hidden.get(&(pid, tid)), index)
    }

    fn is_leaf(&self, pid: u32, tid: u32, index: u64) -> bool {
        is_set(self.leaves.get(&(pid, tid)), index)
    }

    /// A line is printed in the thread's innermost open call.
    fn line_inside(&mut self, pid: u32, tid: u32) {
        if let Some(open) = self.inside.get_mut(&(pid, tid)).and_then(|v| v.last_mut()) {
            *open = true;
        }
    }
}

impl Visitor for Shape {
    fn enter(&mut self, pid: u32, tid: u32, _: u64, _: u64, depth: usize, _: u64) {
        let open = self.inside.entry((pid, tid)).or_default();
        open.truncate(depth);
        open.push(false);
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        let open = self.inside.entry((pid, tid)).or_default();
        let had_lines = open.get(call.depth).copied().unwrap_or(true);
        open.truncate(call.depth);
        // A probe or a loss inside a short call keeps it, as the
        // record-time filter keeps the calls an explicit event happened in.
        let short = self
            .min_ticks
            .is_some_and(|min| ((call.exit - call.enter) as f64) < min);
        if short && !had_lines {
            set(self.hidden.entry((pid, tid)).or_default(), call.index);
            return;
        }
        if !had_lines {
            set(self.leaves.entry((pid, tid)).or_default(), call.index);
        }
        // The caller has a line inside it: this call's.
        self.line_inside(pid, tid);
    }

    fn probe(&mut self, pid: u32, tid: u32, _: u64, _: u64, _: u64) {
        self.line_inside(pid, tid);
    }

    fn lost(&mut self, pid: u32, tid: u32, _: u64, _: u64) {
        self.line_inside(pid, tid);
    }

    fn abandon(&mut self, pid: u32, tid: u32, _: usize, _: u64) {
        self.inside.remove(&(pid, tid));
    }
}

struct Printer<'a, W: Write> {
    trace: &'a Trace,
    out: W,
    options: &'a ReplayOptions,
    shape: Shape,
    /// Per thread, the depth of the line an event inside its innermost
    /// open call prints at (a probe, a loss: indented as uftrace indents
    /// its event lines).
    depth: FxHashMap<(u32, u32), usize>,
    error: Option<io::Error>,
}

impl<W: Write> Printer<'_, W> {
    fn shown(&self, tid: u32) -> bool {
        self.options.tids.is_empty() || self.options.tids.contains(&tid)
    }

    /// One line: `text` at `depth`, after the duration (`None`: blank).
    fn line(&mut self, took: Option<f64>, tid: u32, depth: usize, text: std::fmt::Arguments<'_>) {
        if self.error.is_some() {
            return;
        }
        let indent = depth * 2;
        let written = match took {
            // A space first, as uftrace prints its lines.
            Some(ns) => {
                let (v, unit) = scaled(ns);
                writeln!(
                    self.out,
                    " {v:7.3} {unit} [{tid:>6}] | {:indent$}{text}",
                    ""
                )
            }
            None => writeln!(self.out, " {:>10} [{tid:>6}] | {:indent$}{text}", "", ""),
        };
        if let Err(e) = written {
            self.error = Some(e);
        }
    }
}

impl<W: Write> Visitor for Printer<'_, W> {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, _: u64, depth: usize, index: u64) {
        self.depth.insert((pid, tid), depth + 1);
        // A hidden call prints nothing (and so does not open its caller:
        // a caller whose calls are all hidden prints as one line); a
        // leaf prints when it returns, with its duration.
        if !self.shown(tid)
            || self.shape.is_hidden(pid, tid, index)
            || self.shape.is_leaf(pid, tid, index)
        {
            return;
        }
        let name = self.trace.name(function);
        // C++ names keep their parameters: `thrower(int)`, `area(int) const`.
        let parens = if has_parameters(name) { "" } else { "()" };
        self.line(None, tid, depth, format_args!("{name}{parens} {{"));
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        self.depth.insert((pid, tid), call.depth);
        if !self.shown(tid) || self.shape.is_hidden(pid, tid, call.index) {
            return;
        }
        let took = Some(self.trace.ns(call.exit - call.enter));
        let name = self.trace.name(call.function);
        if self.shape.is_leaf(pid, tid, call.index) {
            let parens = if has_parameters(name) { "" } else { "()" };
            self.line(took, tid, call.depth, format_args!("{name}{parens};"));
        } else {
            self.line(took, tid, call.depth, format_args!("}} /* {name} */"));
        }
    }

    fn probe(&mut self, pid: u32, tid: u32, _: u64, id: u64, value: u64) {
        if self.shown(tid) {
            let depth = self.depth.get(&(pid, tid)).copied().unwrap_or(0);
            self.line(None, tid, depth, format_args!("/* probe {id} = {value} */"));
        }
    }

    fn lost(&mut self, pid: u32, tid: u32, _: u64, count: u64) {
        if self.shown(tid) {
            let depth = self.depth.get(&(pid, tid)).copied().unwrap_or(0);
            self.line(
                None,
                tid,
                depth,
                format_args!("/* LOST {count} records!! */"),
            );
        }
    }

    fn abandon(&mut self, pid: u32, tid: u32, _: usize, _: u64) {
        // The thread's next events start afresh.
        self.depth.remove(&(pid, tid));
    }
}

/// Prints `trace`'s calls to `out`, every thread's lines in the order
/// they happened: those the trace's filters keep, if it was restricted
/// ([`Trace::restrict`]: `-F`, `-N`, `-D`), as a trace recorded with them
/// would print.
pub fn replay(trace: &Trace, options: &ReplayOptions, out: impl Write) -> Result<(), ReplayError> {
    let mut shape = Shape {
        min_ticks: options
            .min_ns
            .filter(|&min| min > 0.0)
            .map(|min| min / trace.ns(1).max(f64::MIN_POSITIVE)),
        ..Shape::default()
    };
    let blocks = trace.walk_finding_blocks(&mut shape)?;
    shape.inside = FxHashMap::default();
    let mut printer = Printer {
        trace,
        out,
        options,
        shape,
        depth: FxHashMap::default(),
        error: None,
    };
    if let Err(e) = writeln!(printer.out, "# DURATION     TID     FUNCTION") {
        return Err(ReplayError::Write(e));
    }
    trace.walk_by_time(blocks, &mut printer)?;
    match printer.error.take() {
        Some(e) => Err(ReplayError::Write(e)),
        None => printer.out.flush().map_err(ReplayError::Write),
    }
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The trace could not be read.
    #[error(transparent)]
    Read(#[from] TraceReadError),
    /// The output could not be written.
    #[error("cannot write the replay: {0}")]
    Write(io::Error),
}
