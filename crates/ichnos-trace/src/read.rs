//! A function trace read back: its functions named (offline, per object,
//! by the profiler's symbolization), its clock turned into nanoseconds,
//! and its events walked as calls — each thread's entries matched to
//! their exits on a shadow stack.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ichnos_data::{CallEvent, Calls, ClockSource, ReadError, Reader, Record};
use ichnos_profile::report::{symbolize, Profile, SymbolOptions};
use rustc_hash::FxHashMap;

/// A traced function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// Its name (or `object+offset`).
    pub name: Arc<str>,
    /// Its object's file name.
    pub object: Arc<str>,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceReadError {
    /// The file could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The recording is damaged.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: ReadError,
    },
    /// A recording, but of samples, not of function calls.
    #[error("{} is a sampling profile, not a function trace (made by `ichnos record`; read it with `ichnos report`)", path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
    },
}

/// A function trace, read.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    /// The recording's description, address spaces and functions.
    pub profile: Profile,
    /// Functions by number.
    functions: Vec<Option<Function>>,
    /// Nanoseconds per tick.
    ns_per_tick: f64,
    /// The first clock reading: (ticks, time).
    origin: (u64, u64),
    /// Warnings for people (objects gone, a clock that could not be
    /// calibrated).
    pub warnings: Vec<String>,
}

/// One call, closed by its exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// The function's number.
    pub function: u64,
    /// Entered at (ticks).
    pub enter: u64,
    /// Returned at (ticks).
    pub exit: u64,
    /// Its depth (0: outermost seen).
    pub depth: usize,
    /// Ticks spent in calls it made.
    pub children: u64,
    /// Its number among the thread's entries.
    pub index: u64,
}

/// What a walk of the events sees, in order.
pub trait Visitor {
    /// Thread `tid` of process `pid` entered `function` at `depth`; the
    /// thread's `index`-th entry.
    fn enter(&mut self, pid: u32, tid: u32, function: u64, ticks: u64, depth: usize, index: u64);
    /// A call returned.
    fn exit(&mut self, pid: u32, tid: u32, call: &Call);
    /// A probe fired.
    fn probe(&mut self, _pid: u32, _tid: u32, _ticks: u64, _id: u64, _value: u64) {}
    /// Events of the thread were lost just before `ticks`.
    fn lost(&mut self, _pid: u32, _tid: u32, _ticks: u64, _count: u64) {}
}

struct Open {
    function: u64,
    enter: u64,
    children: u64,
    index: u64,
}

#[derive(Default)]
struct Thread {
    stack: Vec<Open>,
    entries: u64,
    /// The newest event of the thread's flight-recorder rings read so
    /// far: a later ring of the same thread (a snapshot, then the exit)
    /// holds these events again.
    ring_newest: Option<u64>,
    /// `setjmp` places: the depth (open calls) at each, by `jmp_buf`
    /// address.
    jumps: FxHashMap<u64, usize>,
}

impl Trace {
    /// Reads the trace at `path` and names its functions.
    pub fn open(
        path: &Path,
        options: &SymbolOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Trace, TraceReadError> {
        let file = File::open(path).map_err(|source| TraceReadError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let profile =
            Profile::read(BufReader::new(file)).map_err(|source| TraceReadError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        if !profile.description.event.starts_with("function-trace") {
            return Err(TraceReadError::NotATrace {
                path: path.to_path_buf(),
            });
        }
        let symbolized = symbolize(&profile, options, progress);
        let functions = symbolized
            .stacks
            .iter()
            .map(|frames| {
                // The function's own frame is the last at its address
                // (the ones before it are inlined into it... at its first
                // instruction, which only happens for odd code).
                let frame = frames.as_ref()?.last()?;
                Some(Function {
                    name: Arc::clone(&frame.function),
                    object: Arc::clone(&frame.object),
                })
            })
            .collect();
        let mut warnings = symbolized.warnings;
        let (ns_per_tick, origin) = match profile.trace_clock {
            Some(c) if c.source == ClockSource::Monotonic => (1.0, c.first),
            Some(c) if c.last.0 > c.first.0 && c.last.1 > c.first.1 => (
                (c.last.1 - c.first.1) as f64 / (c.last.0 - c.first.0) as f64,
                c.first,
            ),
            other => {
                warnings.push(
                    "the recording has no two readings of its clock (it was cut short): times are in ticks"
                        .to_owned(),
                );
                (1.0, other.map_or((0, 0), |c| c.first))
            }
        };
        Ok(Trace {
            path: path.to_path_buf(),
            profile,
            functions,
            ns_per_tick,
            origin,
            warnings,
        })
    }

    /// Function `id`, named.
    #[must_use]
    pub fn function(&self, id: u64) -> Option<&Function> {
        self.functions.get(id as usize)?.as_ref()
    }

    /// The name of function `id` (`[unknown]` where the recording does
    /// not say).
    #[must_use]
    pub fn name(&self, id: u64) -> &str {
        self.function(id).map_or("[unknown]", |f| &f.name)
    }

    /// Ticks as nanoseconds.
    #[must_use]
    pub fn ns(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ns_per_tick
    }

    /// A moment in ticks as nanoseconds since the recording's start.
    #[must_use]
    pub fn time_ns(&self, ticks: u64) -> f64 {
        self.origin.1 as f64 + (ticks as f64 - self.origin.0 as f64) * self.ns_per_tick
    }

    /// Reads the trace's `Calls` records, in order.
    pub fn for_each_block(&self, mut f: impl FnMut(&Calls<'_>)) -> Result<(), TraceReadError> {
        let err = |source| TraceReadError::Read {
            path: self.path.clone(),
            source,
        };
        let file = File::open(&self.path).map_err(|source| TraceReadError::Open {
            path: self.path.clone(),
            source,
        })?;
        let mut reader = Reader::new(BufReader::new(file)).map_err(err)?;
        loop {
            match reader.next_chunk() {
                Ok(Some(chunk)) => {
                    for record in chunk.records() {
                        if let Record::Calls(c) = record.map_err(err)? {
                            f(&c);
                        }
                    }
                }
                Ok(None) => return Ok(()),
                // What was read before the cut stands (the profile says
                // the file was cut).
                Err(e) if e.is_truncation() => return Ok(()),
                Err(e) => return Err(err(e)),
            }
        }
    }

    /// Walks every thread's events as calls; a flight recorder's rings
    /// saved more than once are read once. An exit closes the innermost
    /// open entry of its function and the entries above it (a `longjmp`
    /// or an exception skipped their exits); an exit no open entry
    /// matches is ignored; calls still open at the end are left open.
    pub fn walk(&self, visitor: &mut dyn Visitor) -> Result<(), TraceReadError> {
        let mut threads: FxHashMap<(u32, u32), Thread> = FxHashMap::default();
        self.for_each_block(|calls| {
            let (pid, tid) = (calls.pid as u32, calls.tid as u32);
            let thread = threads.entry((pid, tid)).or_default();
            if calls.lost > 0 {
                visitor.lost(pid, tid, calls.first, calls.lost);
            }
            if calls.flags & ichnos_data::CALLS_RING == 0 {
                for event in calls.events.iter() {
                    step(thread, pid, tid, event, visitor);
                }
                return;
            }
            // A ring repeats what an earlier ring of the thread saved and
            // has lost what was overwritten since: the events already read
            // are skipped, and where nothing overlaps, the calls open
            // before the gap end at the last event seen (their exits are
            // gone). A block that goes on from the one before is the same
            // ring: neither.
            let continued = calls.flags & ichnos_data::CALLS_CONTINUED != 0;
            let seen = thread.ring_newest.filter(|_| !continued);
            if let (Some(seen), Some(first)) = (seen, calls.events.iter().next()) {
                if first.ticks() > seen {
                    close_above(thread, pid, tid, 0, seen, visitor);
                    thread.jumps.clear();
                }
            }
            for event in calls.events.iter() {
                let ticks = event.ticks();
                if seen.is_some_and(|s| ticks <= s) {
                    continue;
                }
                thread.ring_newest = Some(thread.ring_newest.map_or(ticks, |n| n.max(ticks)));
                step(thread, pid, tid, event, visitor);
            }
        })
    }
}

fn step(thread: &mut Thread, pid: u32, tid: u32, event: CallEvent, visitor: &mut dyn Visitor) {
    match event {
        CallEvent::Enter { ticks, function } => {
            let index = thread.entries;
            thread.entries += 1;
            visitor.enter(pid, tid, function, ticks, thread.stack.len(), index);
            thread.stack.push(Open {
                function,
                enter: ticks,
                children: 0,
                index,
            });
        }
        CallEvent::Exit { ticks, function } => {
            let Some(at) = thread.stack.iter().rposition(|o| o.function == function) else {
                return;
            };
            close_above(thread, pid, tid, at, ticks, visitor);
        }
        CallEvent::Probe { ticks, id, value } => visitor.probe(pid, tid, ticks, id, value),
        CallEvent::Jump {
            buffer,
            long: false,
            ..
        } => {
            // Bounded: a program keeps few jmp_bufs; the oldest go first.
            if thread.jumps.len() >= MAX_JUMPS && !thread.jumps.contains_key(&buffer) {
                thread.jumps.clear();
            }
            thread.jumps.insert(buffer, thread.stack.len());
        }
        CallEvent::Jump {
            ticks,
            buffer,
            long: true,
        } => {
            // The calls entered since the setjmp end here; a jmp_buf
            // never set (or set deeper than the stack now is) changes
            // nothing.
            if let Some(&depth) = thread.jumps.get(&buffer) {
                close_above(thread, pid, tid, depth, ticks, visitor);
            }
        }
    }
}

/// Closes the thread's open calls from the innermost down to depth `at`,
/// at `ticks` (those whose exits were skipped end when the one below
/// them returns).
fn close_above(
    thread: &mut Thread,
    pid: u32,
    tid: u32,
    at: usize,
    ticks: u64,
    visitor: &mut dyn Visitor,
) {
    while thread.stack.len() > at {
        let Some(open) = thread.stack.pop() else {
            return;
        };
        let depth = thread.stack.len();
        let call = Call {
            function: open.function,
            enter: open.enter,
            exit: ticks.max(open.enter),
            depth,
            children: open.children,
            index: open.index,
        };
        if let Some(parent) = thread.stack.last_mut() {
            parent.children = parent.children.saturating_add(call.exit - call.enter);
        }
        visitor.exit(pid, tid, &call);
    }
}

/// `setjmp` places kept per thread at most.
const MAX_JUMPS: usize = 1024;
