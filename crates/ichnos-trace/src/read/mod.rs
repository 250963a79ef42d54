//! A function trace read back: its functions named (offline, per object,
//! by the profiler's symbolization), its clock turned into nanoseconds,
//! and its events walked as calls — each thread's entries matched to
//! their exits on a shadow stack.

mod by_time;

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ichnos_data::{CallEvent, Calls, ClockSource, ReadError, Reader, Record};
use ichnos_profile::report::{symbolize, Profile, SymbolOptions};
use rustc_hash::FxHashMap;

use crate::ring_repeats::{RingSeen, SaveRead};
use crate::scoped::{CallFilters, Scope, ScopeError, Scoped};
use by_time::ChunkCache;
pub use by_time::ThreadBlocks;

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
    /// A perf.data file: samples, not function calls.
    #[error("{} is a perf.data file, a sampling profile, not a function trace (read it with `ichnos report`)", path.display())]
    PerfData {
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
    /// The calls every walk keeps ([`Trace::restrict`]; none: all).
    scope: Option<Scope>,
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
    /// Its number among the thread id's entries (numbered on across the
    /// programs an exec runs in it).
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
    /// The thread's program ended (it exec'ed, or the thread's last block
    /// came) with `open` calls still open, at `ticks` (as
    /// [`Visitor::unfinished`] takes the thread's end):
    /// they will never return, and the thread's next events, if any,
    /// start afresh.
    fn abandon(&mut self, _pid: u32, _tid: u32, _open: usize, _ticks: u64) {}
    /// A call still open when its thread's program ended, or the trace
    /// did, as if it returned at the thread's end (`call.exit`): the time
    /// of its last block where that was the runtime's last frame of the
    /// thread (a thread or process exit, an exec), else its last event
    /// (a trace cut short, a flight recorder's rings),
    /// for a reader that counts such calls to there (as `uftrace report`
    /// does: a program that calls `exit` inside `main` has `main` in its
    /// totals). Innermost first, each with the one above it in its
    /// `children`; before [`Visitor::abandon`] where the program ended.
    fn unfinished(&mut self, _pid: u32, _tid: u32, _call: &Call) {}
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
    /// The time of the thread's newest event, or of its end where its
    /// last block (of a program's end) is dated later.
    last_ticks: u64,
    /// What the thread's flight-recorder rings read so far hold: a later
    /// save of the same ring (a snapshot, then the exit) holds those
    /// events again.
    rings: RingSeen,
    /// `setjmp` places: the depth (open calls) at each, by `jmp_buf`
    /// address.
    jumps: FxHashMap<u64, usize>,
    /// The functions of the frames the next catch leaves on the stack,
    /// outermost first, as far as they came (`CallEvent::Live`).
    live: Vec<u64>,
    /// More came than [`MAX_LIVE`]: the catch falls back on its function.
    live_cut: bool,
    /// Its last block was written before an exec: its next block says
    /// whether the program ended there (a new program's block) or goes
    /// on (one flagged resumed: the exec failed).
    at_exec: bool,
}

impl Thread {
    /// Its open calls to [`Visitor::unfinished`], innermost first, as if
    /// they returned at its end (`last_ticks`).
    fn unfinished(&self, pid: u32, tid: u32, visitor: &mut dyn Visitor) {
        let mut above = 0u64;
        for (depth, open) in self.stack.iter().enumerate().rev() {
            let call = Call {
                function: open.function,
                enter: open.enter,
                exit: self.last_ticks.max(open.enter),
                depth,
                children: open.children.saturating_add(above),
                index: open.index,
            };
            visitor.unfinished(pid, tid, &call);
            above = call.exit - call.enter;
        }
    }

    /// Forgets the frames of a catch to come.
    fn drop_live(&mut self) {
        self.live.clear();
        self.live_cut = false;
    }

    /// Events were lost here: frames of a catch to come, if some came,
    /// may have lost their innermost ones, so that catch goes by its
    /// function. (Those before the first that came are the outermost,
    /// which the match does without.)
    fn lose_live(&mut self) {
        if !self.live.is_empty() {
            self.live_cut = true;
        }
    }

    /// The thread's program ended: its calls still open never return,
    /// and a later block of the id starts afresh (its entries numbered on
    /// from these).
    fn end_program(&mut self, pid: u32, tid: u32, visitor: &mut dyn Visitor) {
        if !self.stack.is_empty() {
            self.unfinished(pid, tid, visitor);
            visitor.abandon(pid, tid, self.stack.len(), self.last_ticks);
        }
        *self = Thread {
            entries: self.entries,
            ..Thread::default()
        };
    }
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
        let mut profile = Profile::read(BufReader::new(file)).map_err(|source| match source {
            ReadError::NotARecording { found } if found == b"PERFILE2" || found == b"2ELIFREP" => {
                TraceReadError::PerfData {
                    path: path.to_path_buf(),
                }
            }
            source => TraceReadError::Read {
                path: path.to_path_buf(),
                source,
            },
        })?;
        if !profile.description.event.starts_with("function-trace") {
            return Err(TraceReadError::NotATrace {
                path: path.to_path_buf(),
            });
        }
        // A library loaded as the program ran may have its mapping written
        // after its functions.
        profile.place_unmapped_in_final_mappings();
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
        if profile.cut_short_total > 0 {
            warnings.push(crate::cut_short_note(
                &profile.cut_short,
                profile.cut_short_total,
            ));
        }
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
            scope: None,
        })
    }

    /// From now on, every walk of the trace (and so the replay, the
    /// per-function table and the exports; not [`Trace::for_each_block`],
    /// which reads the records as they are) sees only the
    /// calls `ichnos trace` with `filters` would have recorded, at the
    /// depths and with the children such a trace gives them (the time of
    /// a call left out is its caller's own, as it is in a trace recorded
    /// so). Replaces any filters given before. Returns the `-N` patterns
    /// that name no function called in the trace (they hide nothing), for
    /// a warning; an `-F` pattern that names none is an error (nothing
    /// would be kept). See `scoped.rs` for what a whole trace cannot say.
    pub fn restrict(&mut self, filters: &CallFilters) -> Result<Vec<String>, ScopeError> {
        let (scope, unmatched) = Scope::of(self, filters)?;
        self.scope = (!scope.is_everything()).then_some(scope);
        Ok(unmatched)
    }

    /// The file the trace was read from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a walk keeps only some calls ([`Trace::restrict`]).
    #[must_use]
    pub fn is_restricted(&self) -> bool {
        self.scope.is_some()
    }

    /// Function `id`, named.
    #[must_use]
    pub fn function(&self, id: u64) -> Option<&Function> {
        self.functions.get(id as usize)?.as_ref()
    }

    /// Every function the trace names, by number.
    pub fn functions(&self) -> impl Iterator<Item = (u64, &Function)> {
        self.functions
            .iter()
            .enumerate()
            .filter_map(|(id, f)| Some((id as u64, f.as_ref()?)))
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

    /// Reads the trace's `Calls` records, in order: every event as
    /// recorded, whatever [`Trace::restrict`] was given (the walks apply
    /// it).
    pub fn for_each_block(&self, mut f: impl FnMut(&Calls<'_>)) -> Result<(), TraceReadError> {
        self.for_each_located_block(|_, calls| f(calls))
    }

    /// Why reading the file failed.
    fn read_error(&self, source: ReadError) -> TraceReadError {
        TraceReadError::Read {
            path: self.path.clone(),
            source,
        }
    }

    /// The file, opened for reading chunk by chunk.
    fn reader(&self) -> Result<Reader<BufReader<File>>, TraceReadError> {
        let file = File::open(&self.path).map_err(|source| TraceReadError::Open {
            path: self.path.clone(),
            source,
        })?;
        Reader::new(BufReader::new(file)).map_err(|e| self.read_error(e))
    }

    /// [`Trace::for_each_block`], with where each record is.
    fn for_each_located_block(
        &self,
        f: impl FnMut(BlockPlace, &Calls<'_>),
    ) -> Result<(), TraceReadError> {
        located_blocks(&mut self.reader()?, f).map_err(|e| self.read_error(e))
    }

    /// Walks every thread's events as calls; a flight recorder's rings
    /// saved more than once are read once. An exit closes the innermost
    /// open entry of its function and the entries above it (a `longjmp`
    /// or an exception skipped their exits); an exit no open entry
    /// matches is ignored; calls still open where a thread's program
    /// ends, or the trace does, go to [`Visitor::unfinished`].
    pub fn walk(&self, visitor: &mut dyn Visitor) -> Result<(), TraceReadError> {
        self.walk_located(visitor, |_, _| {})
    }

    /// [`Trace::walk`], telling `found` where each block is, before its
    /// events are walked.
    fn walk_located(
        &self,
        visitor: &mut dyn Visitor,
        found: impl FnMut(BlockPlace, (u32, u32)),
    ) -> Result<(), TraceReadError> {
        match &self.scope {
            Some(scope) => self.walk_located_all(&mut Scoped::new(scope, visitor), found),
            None => self.walk_located_all(visitor, found),
        }
    }

    /// [`Trace::walk_located`], of every call.
    fn walk_located_all(
        &self,
        visitor: &mut dyn Visitor,
        mut found: impl FnMut(BlockPlace, (u32, u32)),
    ) -> Result<(), TraceReadError> {
        let mut threads: FxHashMap<(u32, u32), Thread> = FxHashMap::default();
        self.for_each_located_block(|place, calls| {
            let (pid, tid) = (calls.pid as u32, calls.tid as u32);
            found(place, (pid, tid));
            let thread = threads.entry((pid, tid)).or_default();
            let head = BlockHead::of(calls);
            read_block(thread, pid, tid, head, calls.events.iter(), visitor);
        })?;
        // Programs that exec'ed with no block after: the exec went
        // through (to a program not traced, or not yet).
        let mut at_exec: Vec<_> = threads
            .iter()
            .filter(|(_, t)| t.at_exec)
            .map(|(k, _)| *k)
            .collect();
        at_exec.sort_unstable();
        for (pid, tid) in at_exec {
            if let Some(thread) = threads.get_mut(&(pid, tid)) {
                thread.end_program(pid, tid, visitor);
            }
        }
        // Calls still open where the trace ends (a thread the program's
        // end cut short without its last block, a recording cut short).
        let mut open: Vec<_> = threads
            .iter()
            .filter(|(_, t)| !t.stack.is_empty())
            .map(|(k, _)| *k)
            .collect();
        open.sort_unstable();
        for (pid, tid) in open {
            threads[&(pid, tid)].unfinished(pid, tid, visitor);
        }
        Ok(())
    }

    /// [`Trace::walk`], finding each thread's blocks on the way, for
    /// [`Trace::walk_by_time`]. Memory: one place per block.
    pub fn walk_finding_blocks(
        &self,
        visitor: &mut dyn Visitor,
    ) -> Result<ThreadBlocks, TraceReadError> {
        let mut blocks = ThreadBlocks::default();
        self.walk_located(visitor, |place, (pid, tid)| blocks.add(pid, tid, place))?;
        Ok(blocks)
    }

    /// [`Trace::walk`] with every thread's events in the order they
    /// happened, across threads and processes (as `uftrace replay` prints
    /// them): each thread's blocks (found by
    /// [`Trace::walk_finding_blocks`]) are read back a block at a time,
    /// the earliest next event first. Memory: a block for each thread
    /// whose events are being read (encoded: a few bytes an event, at
    /// most 65,536 events), and a few chunks.
    pub fn walk_by_time(
        &self,
        blocks: ThreadBlocks,
        visitor: &mut dyn Visitor,
    ) -> Result<(), TraceReadError> {
        let mut chunks = ChunkCache::new(self.reader()?);
        let walked = match &self.scope {
            Some(scope) => by_time::walk(blocks, &mut chunks, &mut Scoped::new(scope, visitor)),
            None => by_time::walk(blocks, &mut chunks, visitor),
        };
        walked.map_err(|e| self.read_error(e))
    }
}

/// Reads every `Calls` record after the reader's place, in order, with
/// where each is. What was read before a cut stands (the profile says the
/// file was cut).
fn located_blocks<R: Read>(
    reader: &mut Reader<R>,
    mut f: impl FnMut(BlockPlace, &Calls<'_>),
) -> Result<(), ReadError> {
    loop {
        match reader.next_chunk() {
            Ok(Some(chunk)) => {
                for (record, index) in chunk.records().zip(0u32..) {
                    if let Record::Calls(c) = record? {
                        let place = BlockPlace {
                            chunk: chunk.offset(),
                            record: index,
                            first: c.first,
                        };
                        f(place, &c);
                    }
                }
            }
            Ok(None) => return Ok(()),
            Err(e) if e.is_truncation() => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Where a `Calls` record lies: its chunk's offset and its number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockPlace {
    chunk: u64,
    record: u32,
    /// Ticks its first event counts from: at most that event's time.
    first: u64,
}

/// What a block says besides its events.
#[derive(Clone, Copy, Debug)]
struct BlockHead {
    flags: u64,
    lost: u64,
    first: u64,
}

impl BlockHead {
    fn of(calls: &Calls<'_>) -> BlockHead {
        BlockHead {
            flags: calls.flags,
            lost: calls.lost,
            first: calls.first,
        }
    }

    /// Before the block's first event (at `first`, if it has one): its
    /// losses, and how a ring's events are read.
    fn start(
        self,
        thread: &mut Thread,
        pid: u32,
        tid: u32,
        first: Option<u64>,
        visitor: &mut dyn Visitor,
    ) -> Option<RingRead> {
        if std::mem::take(&mut thread.at_exec) && self.flags & ichnos_data::CALLS_RESUMED == 0 {
            // The exec went through: this block is the new program's.
            thread.end_program(pid, tid, visitor);
        }
        if self.lost > 0 {
            visitor.lost(pid, tid, self.first, self.lost);
            thread.lose_live();
        }
        RingRead::start(thread, pid, tid, self.flags, first, visitor)
    }

    /// After the block's last event. The thread's last block of its
    /// program (it ended): a later block of the id is a new thread's. A
    /// ring's last blocks are each save's. Before an exec, the program's
    /// end waits for the thread's next block.
    fn end(self, thread: &mut Thread, pid: u32, tid: u32, visitor: &mut dyn Visitor) {
        let ended = ichnos_data::CALLS_LAST | ichnos_data::CALLS_RING;
        if self.flags & ended == ichnos_data::CALLS_LAST {
            // An empty last block is dated when the thread ended (its
            // last frame was made): its calls still open ran to there.
            thread.last_ticks = thread.last_ticks.max(self.first);
            if self.flags & ichnos_data::CALLS_EXEC != 0 {
                thread.at_exec = true;
            } else {
                thread.end_program(pid, tid, visitor);
            }
        }
    }
}

/// How a block of a flight recorder's ring is read: what earlier saves
/// of the thread's ring did not hold ([`crate::ring_repeats`]). Where
/// nothing overlaps, the calls open before the gap end at the last event
/// seen (their exits are gone). A block that goes on from the one before
/// is the same save, read on as it was: the events it repeats are skipped
/// too (a ring larger than one block, saved twice, was read whole from its
/// second block on), and no gap lies before it.
struct RingRead(SaveRead);

impl RingRead {
    /// At the start of a block with `flags` whose first event is at
    /// `first`; `None` for a block that is not a ring's (all its events
    /// are read).
    fn start(
        thread: &mut Thread,
        pid: u32,
        tid: u32,
        flags: u64,
        first: Option<u64>,
        visitor: &mut dyn Visitor,
    ) -> Option<RingRead> {
        if flags & ichnos_data::CALLS_RING == 0 {
            thread.rings.not_a_ring();
            return None;
        }
        let continued = flags & ichnos_data::CALLS_CONTINUED != 0;
        if !continued {
            if let (Some(seen), Some(first)) = (thread.rings.newest(), first) {
                if first > seen {
                    close_above(thread, pid, tid, 0, seen, visitor);
                    thread.jumps.clear();
                    thread.lose_live();
                }
            }
        }
        Some(RingRead(thread.rings.begin(continued)))
    }

    /// Whether the block's next event, at `ticks`, is new.
    fn take(&mut self, thread: &mut Thread, ticks: u64) -> bool {
        thread.rings.take(&mut self.0, ticks)
    }

    /// After the block's last event.
    fn end(self, thread: &mut Thread) {
        thread.rings.end(self.0);
    }
}

/// One block of a thread's events, whole.
fn read_block(
    thread: &mut Thread,
    pid: u32,
    tid: u32,
    head: BlockHead,
    events: impl Iterator<Item = CallEvent>,
    visitor: &mut dyn Visitor,
) {
    let mut events = events.peekable();
    let first = events.peek().map(CallEvent::ticks);
    let mut ring = head.start(thread, pid, tid, first, visitor);
    for event in events {
        if ring.as_mut().is_none_or(|r| r.take(thread, event.ticks())) {
            step(thread, pid, tid, event, visitor);
        }
    }
    // For a block that goes on from this one.
    if let Some(ring) = ring {
        ring.end(thread);
    }
    head.end(thread, pid, tid, visitor);
}

fn step(thread: &mut Thread, pid: u32, tid: u32, event: CallEvent, visitor: &mut dyn Visitor) {
    thread.last_ticks = thread.last_ticks.max(event.ticks());
    if !matches!(event, CallEvent::Live { .. } | CallEvent::Catch { .. }) {
        // A catch's frames come right before it: a run that something
        // else interrupted (a signal handler's calls) is of no catch.
        thread.drop_live();
    }
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
            // Places deeper than this one are of calls that have
            // returned: their buffers are dead. What is left is the live
            // nesting, bounded all the same (all of it is dropped past it).
            let depth = thread.stack.len();
            thread.jumps.retain(|_, d| *d <= depth);
            if thread.jumps.len() >= MAX_JUMPS && !thread.jumps.contains_key(&buffer) {
                thread.jumps.clear();
            }
            thread.jumps.insert(buffer, depth);
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
        CallEvent::Catch { ticks, function } => {
            let depth = if !thread.live.is_empty() && !thread.live_cut {
                // The frames left say which calls are: the rest were
                // unwound.
                Some(calls_left(&thread.stack, &thread.live))
            } else {
                // The calls above the innermost open one of the function
                // end here (an exception unwound them); a function not
                // open (a catch in code not traced) changes nothing.
                match function {
                    Some(f) => thread
                        .stack
                        .iter()
                        .rposition(|o| o.function == f)
                        .map(|at| at + 1),
                    None => Some(0),
                }
            };
            thread.drop_live();
            if let Some(depth) = depth {
                close_above(thread, pid, tid, depth, ticks, visitor);
            }
        }
        CallEvent::Live { function, .. } => {
            if thread.live.len() < MAX_LIVE {
                thread.live.push(function);
            } else {
                thread.live_cut = true;
            }
        }
    }
}

/// Frames of a catch's stack a reader keeps (the runtime sends at most
/// 512).
const MAX_LIVE: usize = 4096;

/// How many of the open calls `stack` (outermost first) a catch leaves,
/// given the functions of the frames it leaves on the stack (`live`,
/// outermost first): up to the innermost open call a frame accounts for.
/// Each frame, from the outermost, takes the next open call of its
/// function after the one the frame before took. Open calls no frame
/// takes are passed over: a call inlined into its caller (which clang's
/// instrumentation traces all the same, with no frame of its own), or
/// the calls outside a walk that stopped early (a fiber's stack). Frames
/// of functions not traced take nothing.
fn calls_left(stack: &[Open], live: &[u64]) -> usize {
    let mut next = 0;
    for &function in live {
        if let Some(at) = stack[next..].iter().position(|o| o.function == function) {
            next += at + 1;
        }
    }
    next
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

#[cfg(test)]
mod tests;
