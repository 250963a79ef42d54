//! `ichnos replay`: each call as `uftrace replay` prints it — the
//! duration, the thread, and the function indented by its depth; a call
//! that makes no traced calls on one line (`leaf();`), others opened with
//! `{` and closed with `} /* name */` and their duration
//! (`docs/function-trace.md` specifies the text).

use std::io::{self, Write};

use rustc_hash::FxHashMap;

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
    let (v, unit) = if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, " s")
    };
    format!("{v:7.3} {unit}")
}

/// A function's name as a call: `name()`, or a C++ name as it is (its
/// parameters are in it already).
fn call(name: &str) -> std::borrow::Cow<'_, str> {
    if name.ends_with(')') {
        name.into()
    } else {
        format!("{name}()").into()
    }
}

/// Calls shorter than the threshold, by thread and entry number.
#[derive(Default)]
struct Short {
    min_ticks: f64,
    hidden: FxHashMap<(u32, u32), Vec<u64>>,
}

impl Short {
    fn is_hidden(&self, pid: u32, tid: u32, index: u64) -> bool {
        self.hidden.get(&(pid, tid)).is_some_and(|bits| {
            bits.get((index / 64) as usize)
                .is_some_and(|w| w & (1 << (index % 64)) != 0)
        })
    }
}

impl Visitor for Short {
    fn enter(&mut self, _: u32, _: u32, _: u64, _: u64, _: usize, _: u64) {}
    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        if ((call.exit - call.enter) as f64) < self.min_ticks {
            let bits = self.hidden.entry((pid, tid)).or_default();
            let word = (call.index / 64) as usize;
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << (call.index % 64);
        }
    }
}

struct Printer<'a, W: Write> {
    trace: &'a Trace,
    out: W,
    options: &'a ReplayOptions,
    short: Option<Short>,
    /// Per thread: an entry not printed yet, waiting to see whether its
    /// exit comes next (then it prints as `leaf();`).
    pending: FxHashMap<(u32, u32), (u64, usize)>,
    error: Option<io::Error>,
}

impl<W: Write> Printer<'_, W> {
    fn shown(&self, tid: u32) -> bool {
        self.options.tids.is_empty() || self.options.tids.contains(&tid)
    }

    fn line(&mut self, duration: &str, tid: u32, depth: usize, text: &str) {
        if self.error.is_some() {
            return;
        }
        let indent = depth * 2;
        if let Err(e) = writeln!(self.out, "{duration:>10} [{tid:>6}] | {:indent$}{text}", "") {
            self.error = Some(e);
        }
    }

    /// Prints a thread's pending entry as an opened call.
    fn open_pending(&mut self, pid: u32, tid: u32) {
        if let Some((function, depth)) = self.pending.remove(&(pid, tid)) {
            let text = format!("{} {{", call(self.trace.name(function)));
            self.line("", tid, depth, &text);
        }
    }
}

impl<W: Write> Visitor for Printer<'_, W> {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, _: u64, depth: usize, index: u64) {
        if !self.shown(tid) {
            return;
        }
        if self
            .short
            .as_ref()
            .is_some_and(|s| s.is_hidden(pid, tid, index))
        {
            // A hidden call does not open its caller: a caller whose
            // calls are all hidden prints as one line.
            return;
        }
        self.open_pending(pid, tid);
        self.pending.insert((pid, tid), (function, depth));
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        if !self.shown(tid) {
            return;
        }
        if self
            .short
            .as_ref()
            .is_some_and(|s| s.is_hidden(pid, tid, call.index))
        {
            return;
        }
        let took = duration(self.trace.ns(call.exit - call.enter));
        let name = self.trace.name(call.function).to_owned();
        if self.pending.get(&(pid, tid)) == Some(&(call.function, call.depth)) {
            self.pending.remove(&(pid, tid));
            self.line(&took, tid, call.depth, &format!("{};", self::call(&name)));
        } else {
            self.open_pending(pid, tid);
            self.line(&took, tid, call.depth, &format!("}} /* {name} */"));
        }
    }

    fn probe(&mut self, pid: u32, tid: u32, _: u64, id: u64, value: u64) {
        if self.shown(tid) {
            self.open_pending(pid, tid);
            self.line("", tid, 0, &format!("/* probe {id} = {value} */"));
        }
    }

    fn lost(&mut self, pid: u32, tid: u32, _: u64, count: u64) {
        if self.shown(tid) {
            self.open_pending(pid, tid);
            self.line("", tid, 0, &format!("/* LOST {count} records!! */"));
        }
    }
}

/// Prints `trace`'s calls to `out`.
pub fn replay(trace: &Trace, options: &ReplayOptions, out: impl Write) -> Result<(), ReplayError> {
    let short = match options.min_ns {
        Some(min) if min > 0.0 => {
            let mut short = Short {
                min_ticks: min / trace.ns(1).max(f64::MIN_POSITIVE),
                ..Short::default()
            };
            trace.walk(&mut short)?;
            Some(short)
        }
        _ => None,
    };
    let mut printer = Printer {
        trace,
        out,
        options,
        short,
        pending: FxHashMap::default(),
        error: None,
    };
    if let Err(e) = writeln!(printer.out, "# DURATION     TID     FUNCTION") {
        return Err(ReplayError::Write(e));
    }
    trace.walk(&mut printer)?;
    // Entries whose exits never came: opened, never closed.
    let pending: Vec<(u32, u32)> = printer.pending.keys().copied().collect();
    for (pid, tid) in pending {
        printer.open_pending(pid, tid);
    }
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
