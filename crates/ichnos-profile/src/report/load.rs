//! A recording read back into what a report needs: each stack resolved to
//! the mappings of its address space when it was recorded, samples summed
//! per stack and thread (memory grows with distinct stacks, not samples),
//! names, JIT code, losses.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxHashMap;
use std::io::Read;
use std::sync::Arc;

use ichnos_data::{
    JitSource, LostCause, OffCpuState, ReadError, Reader, Record, StackStop, Target,
};

/// A mapping of an address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file (or `//anon`, `[vdso]`).
    pub path: Arc<[u8]>,
    /// Its build id (empty: unknown).
    pub build_id: Arc<[u8]>,
}

/// Named JIT code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitName {
    /// The range.
    pub start: u64,
    /// One past its end.
    pub end: u64,
    /// The name.
    pub name: Arc<str>,
    /// Where it came from.
    pub source: JitSource,
}

/// A function of the kernel the recording ran on, as the recording names
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFunction {
    /// One past its last address.
    pub end: u64,
    /// Its name.
    pub name: Arc<str>,
    /// Its kernel module (empty: the kernel itself).
    pub module: Arc<str>,
}

/// The least kernel address (the upper half of x86-64's address space):
/// a stack's frames at or above it are the kernel's.
pub const KERNEL_HALF: u64 = 1 << 63;

/// One address space.
#[derive(Clone, Debug, Default)]
pub struct Space {
    /// Its process.
    pub pid: u32,
    /// The address space it was copied from (0: none).
    pub parent: u64,
    /// What is mapped where: ranges by start, each to its end and the
    /// mapping (an index into [`Profile::mappings`]) that shows it; a later
    /// mapping replaces what it overlaps.
    pub mapped: BTreeMap<u64, (u64, usize)>,
    /// Its JIT code, as named, by start.
    pub jit: BTreeMap<u64, JitName>,
}

impl Space {
    /// Maps `[start, end)` to `mapping`, replacing what was there.
    fn map(&mut self, start: u64, end: u64, mapping: usize) {
        let overlapping: Vec<(u64, (u64, usize))> = self
            .mapped
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > start)
            .map(|(&s, &v)| (s, v))
            .collect();
        for (s, (e, m)) in overlapping {
            self.mapped.remove(&s);
            if s < start {
                self.mapped.insert(s, (start, m));
            }
            if e > end {
                self.mapped.insert(end, (e, m));
            }
        }
        self.mapped.insert(start, (end, mapping));
    }

    /// The mapping that shows `pc`.
    fn mapping_at(&self, pc: u64) -> Option<usize> {
        let (_, &(end, m)) = self.mapped.range(..=pc).next_back()?;
        (pc < end).then_some(m)
    }
}

/// Where a frame lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In mapping `mapping` (an index into [`Profile::mappings`]), at file
    /// offset `offset`.
    Mapped {
        /// The mapping.
        mapping: usize,
        /// The file offset of the address looked up.
        offset: u64,
    },
    /// In no mapping of its address space.
    Unmapped,
    /// In the kernel (a sample taken there, with the kernel's frames).
    Kernel,
}

/// An interned stack, resolved.
#[derive(Clone, Debug)]
pub struct Stack {
    /// Its address space.
    pub asid: u64,
    /// Why its walk ended.
    pub stop: StackStop,
    /// Its frames, innermost first: the address looked up (the first
    /// frame's instruction pointer, a return address minus one) and where
    /// it lies.
    pub frames: Vec<(u64, Place)>,
}

/// Samples of one stack in one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many.
    pub samples: u64,
    /// Their weight (nanoseconds, or cycles).
    pub weight: u64,
}

/// The description of a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Description {
    /// The machine.
    pub host: String,
    /// Its kernel.
    pub kernel: String,
    /// What was run (each word as text, any bytes not UTF-8 replaced).
    pub command: Vec<String>,
    /// What was run, each word's bytes as recorded (empty where not
    /// known; `command_line` quotes these).
    pub command_bytes: Vec<Vec<u8>>,
    /// The event.
    pub event: String,
    /// Samples per second asked for.
    pub frequency: u64,
    /// The start, in nanoseconds since 1970.
    pub start_realtime_ns: u64,
    /// The start on `CLOCK_MONOTONIC`, which the recording's times count
    /// from (0: not known, a perf.data file's).
    pub start_monotonic_ns: u64,
    /// The recorder.
    pub recorder: String,
    /// Whom it recorded.
    pub target: Option<Target>,
    /// The event that sampled threads leaving their CPUs (empty: off-CPU
    /// time was not recorded).
    pub off_cpu_event: String,
}

/// Processes a [`Profile`] names as cut short at most (a hostile or huge
/// recording's others are counted).
pub const CUT_SHORT_NAMED: usize = 16;

/// A recording, read.
#[derive(Debug, Default)]
pub struct Profile {
    /// The description.
    pub description: Description,
    /// Every mapping of every address space.
    pub mappings: Vec<Mapping>,
    /// Address spaces by number.
    pub spaces: HashMap<u64, Space>,
    /// Stacks by number.
    pub stacks: Vec<Option<Stack>>,
    /// Samples per (stack, process, thread).
    pub tallies: FxHashMap<(u64, u32, u32), Tally>,
    /// Time off CPUs per (stack, process, thread, why): `samples` counts
    /// the intervals, `weight` their nanoseconds.
    pub off_cpu: FxHashMap<(u64, u32, u32, OffCpuState), Tally>,
    /// Thread names, by (process, thread): each thread's last.
    pub threads: HashMap<(u32, u32), Arc<str>>,
    /// Thread names by (address space, thread): the last a thread had
    /// while it ran that program. A child of fork runs its parent's
    /// program under its own name until it executes another, whose name
    /// it then takes: its samples before are named as they were taken.
    pub space_threads: HashMap<(u64, u32), Arc<str>>,
    /// Each process's address space as the records go (the last begun).
    pub current_space: HashMap<u32, u64>,
    /// Process names, by process.
    pub processes: HashMap<u32, Arc<str>>,
    /// Samples and records lost, per cause.
    pub lost: HashMap<LostCause, u64>,
    /// Times sampling was throttled.
    pub throttled: u64,
    /// Some of the names are a function trace's named spans.
    pub has_span_names: bool,
    /// The kernel's functions that stacks have frames in, by start.
    pub kernel_functions: BTreeMap<u64, KernelFunction>,
    /// The recording's end time (nanoseconds since the start), if it has
    /// its end record.
    pub end: Option<u64>,
    /// The losses its end record counts.
    pub end_lost: u64,
    /// The last sample's time.
    pub last_time: u64,
    /// Samples that named a stack the recording does not hold.
    pub orphans: u64,
    /// Why reading stopped early: the file was cut (the recorder did not
    /// finish).
    pub truncated: Option<ReadError>,
    /// Stack records left out: numbered out of order (stacks are numbered
    /// from 0 in the order of their records).
    pub misnumbered_stacks: u64,
    /// Address spaces started empty rather than as copies of their
    /// parents: the recording's copies would exceed what a report holds.
    pub uncopied_spaces: u64,
    /// A function trace's clock: its first and last readings, as
    /// (ticks, time), and what the ticks count.
    pub trace_clock: Option<TraceClock>,
    /// A function trace's processes that ended before the tracing runtime
    /// handed their threads' last buffers over
    /// ([`ichnos_data::EXIT_CUT_SHORT`]): the first [`CUT_SHORT_NAMED`]
    /// by id, in the order they ended, and how many in all.
    pub cut_short: Vec<u64>,
    /// How many processes ended so ([`Profile::cut_short`]).
    pub cut_short_total: u64,
    /// Mapping entries copied into address spaces so far.
    copied: u64,
}

/// The first and last readings of a function trace's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceClock {
    /// What the ticks count.
    pub source: ichnos_data::ClockSource,
    /// The first reading: (ticks, time).
    pub first: (u64, u64),
    /// The last reading.
    pub last: (u64, u64),
}

/// Most mapping and JIT entries copied from parents into the address
/// spaces of one recording (a recording of tens of thousands of forked
/// processes copies a few million).
const MAX_COPIED: u64 = 1 << 26;

/// Most address spaces a JIT name is carried back through
/// (`name_jit`).
const MAX_RENEWALS_WALKED: usize = 512;

/// Most frames of a stack kept (a damaged recording may claim more).
const MAX_FRAMES: usize = 4096;
/// The most kernel functions a report holds (a kernel has about 100,000;
/// a recording names those its stacks touch).
const MAX_KERNEL_FUNCTIONS: usize = 1 << 20;
/// Most stacks a recording may hold.
const MAX_STACKS: u64 = 1 << 26;

/// One sample of a recording, as [`for_each_sample`] hands it on: a
/// sample of a thread on its CPU, or an interval off it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Nanoseconds since the recording started.
    pub time: u64,
    /// Its process.
    pub pid: u32,
    /// Its thread.
    pub tid: u32,
    /// Its stack's number (an index into [`Profile::stacks`]).
    pub stack: u64,
    /// Its weight (nanoseconds, or events; off a CPU, nanoseconds off).
    pub weight: u64,
    /// An interval off the CPU from `time`, and why; `None`: a sample on
    /// it.
    pub off_cpu: Option<OffCpuState>,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Profile {
    /// Reads a recording. A recording cut short is read to its last whole
    /// chunk and the cut kept in [`Profile::truncated`]; anything else
    /// wrong is the error.
    ///
    /// A recording cut before its first chunk ended holds nothing, not
    /// even what it is (its first chunk holds its `Meta`): the cut is the
    /// error then, and a recording of no chunk at all is
    /// [`ReadError::Empty`].
    pub fn read(input: impl Read) -> Result<Profile, ReadError> {
        let mut reader = Reader::new(input)?;
        let mut profile = Profile::default();
        let mut any_chunk = false;
        loop {
            match reader.next_chunk() {
                Ok(Some(chunk)) => {
                    any_chunk = true;
                    for record in chunk.records() {
                        profile.add(&record?);
                    }
                }
                Ok(None) if !any_chunk => return Err(ReadError::Empty),
                Ok(None) => break,
                Err(e) if e.is_truncation() && !any_chunk => return Err(e),
                Err(e) if e.is_truncation() => {
                    profile.truncated = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(profile)
    }

    /// Takes one record of a recording, in the recording's order.
    pub(crate) fn add(&mut self, record: &Record<'_>) {
        match record {
            Record::Meta(m) => self.describe(m),
            Record::Process {
                asid,
                pid,
                parent,
                name,
                ..
            } => self.begin_space(*asid, *pid as u32, *parent, name),
            Record::Thread { pid, tid, name, .. } => {
                let name: Arc<str> = Arc::from(text(name));
                if pid == tid {
                    self.processes.insert(*pid as u32, Arc::clone(&name));
                }
                if let Some(&asid) = self.current_space.get(&(*pid as u32)) {
                    self.space_threads
                        .insert((asid, *tid as u32), Arc::clone(&name));
                }
                self.threads.insert((*pid as u32, *tid as u32), name);
            }
            Record::Mapping { .. } => self.add_mapping(record),
            Record::Stack(s) => self.add_stack(s.id, s.asid, s.stop, s.frames.iter()),
            // As written (a conversion's profile is made from the records
            // it writes).
            Record::StackOut(s) => self.add_stack(s.id, s.asid, s.stop, s.frames.iter().copied()),
            Record::Sample {
                time,
                pid,
                tid,
                stack,
                weight,
                ..
            } => {
                let key = (*stack, *pid as u32, *tid as u32);
                let period = self.clock_period();
                if let Some(tally) = self.tally(*stack, |p| p.tallies.entry(key).or_default()) {
                    tally.weight = tally.weight.saturating_add(*weight);
                    // The CPU clock's samples weigh the time their threads
                    // ran: a stack's count is its time in periods, not a
                    // period for each sample of a part of one.
                    tally.samples = match period {
                        Some(period) => super::periods(tally.weight, period).max(1),
                        None => tally.samples + 1,
                    };
                    self.last_time = self.last_time.max(*time);
                }
            }
            Record::OffCpu {
                time,
                pid,
                tid,
                stack,
                duration,
                state,
                ..
            } => {
                let key = (*stack, *pid as u32, *tid as u32, *state);
                if let Some(tally) = self.tally(*stack, |p| p.off_cpu.entry(key).or_default()) {
                    tally.samples += 1;
                    tally.weight = tally.weight.saturating_add(*duration);
                    self.last_time = self.last_time.max(time.saturating_add(*duration));
                }
            }
            Record::JitCode {
                asid,
                start,
                end,
                source,
                name,
            } => {
                self.has_span_names |= *source == JitSource::Span;
                let name = JitName {
                    start: *start,
                    end: *end,
                    name: Arc::from(text(name)),
                    source: *source,
                };
                self.name_jit(*asid, name);
            }
            Record::KernelSymbol {
                start,
                end,
                module,
                name,
            } => self.name_kernel_function(*start, *end, module, name),
            Record::Lost { count, cause, .. } => {
                *self.lost.entry(*cause).or_default() += count;
            }
            Record::Throttle { throttled, .. } => {
                self.throttled += u64::from(*throttled);
            }
            Record::End { time, lost, .. } => {
                self.end = Some(*time);
                self.end_lost = *lost;
            }
            // A function trace's events are read by `ichnos-trace`; its
            // functions are the stacks above.
            Record::Clock {
                ticks,
                time,
                source,
            } => self.clock_reading(*ticks, *time, *source),
            Record::Exit { pid, flags, .. } => self.exited(*pid, *flags),
            Record::Calls(_) | Record::CallsOut(_) | Record::Unknown { .. } => {}
        }
    }

    /// Process (or thread) `pid` ended, as its `Exit` record's `flags`
    /// say: a function trace's process cut short is noted.
    fn exited(&mut self, pid: u64, flags: u64) {
        if flags & ichnos_data::EXIT_CUT_SHORT != 0 {
            if self.cut_short.len() < CUT_SHORT_NAMED {
                self.cut_short.push(pid);
            }
            self.cut_short_total += 1;
        }
    }

    /// The kernel function `name` (of `module`) is `[start, end)`, within
    /// the report's bound on them.
    fn name_kernel_function(&mut self, start: u64, end: u64, module: &[u8], name: &[u8]) {
        if self.kernel_functions.len() < MAX_KERNEL_FUNCTIONS {
            let function = KernelFunction {
                end,
                name: Arc::from(text(name)),
                module: Arc::from(text(module)),
            };
            self.kernel_functions.insert(start, function);
        }
    }

    /// A reading of a function trace's clock: the first is kept, and the
    /// latest.
    fn clock_reading(&mut self, ticks: u64, time: u64, source: ichnos_data::ClockSource) {
        let reading = (ticks, time);
        match &mut self.trace_clock {
            Some(clock) => clock.last = reading,
            None => {
                self.trace_clock = Some(TraceClock {
                    source,
                    first: reading,
                    last: reading,
                });
            }
        }
    }

    /// A mapping of an address space (an empty range is left out).
    fn add_mapping(&mut self, record: &Record<'_>) {
        let Record::Mapping {
            asid,
            start,
            len,
            pgoff,
            path,
            build_id,
            ..
        } = record
        else {
            return;
        };
        let end = start.saturating_add(*len);
        if end > *start {
            self.mappings.push(Mapping {
                start: *start,
                end,
                pgoff: *pgoff,
                path: Arc::from(*path),
                build_id: Arc::from(*build_id),
            });
            let index = self.mappings.len() - 1;
            self.spaces
                .entry(*asid)
                .or_default()
                .map(*start, end, index);
        }
    }

    /// The tally `entry` finds, for samples of stack `stack`; `None` (an
    /// orphan counted) where the recording holds no such stack.
    fn tally(
        &mut self,
        stack: u64,
        entry: impl FnOnce(&mut Self) -> &mut Tally,
    ) -> Option<&mut Tally> {
        if self.stacks.get(stack as usize).is_none_or(Option::is_none) {
            self.orphans += 1;
            return None;
        }
        Some(entry(self))
    }

    /// Names JIT code in address space `asid`, and in the address spaces
    /// of the same process it was renewed from where none named its
    /// start: the code was there unnamed until then (a process is given a
    /// new address space when a JIT reuses memory under a new name, and
    /// the names of other code may come later).
    fn name_jit(&mut self, asid: u64, name: JitName) {
        let start = name.start;
        let space = self.spaces.entry(asid).or_default();
        let (pid, mut parent) = (space.pid, space.parent);
        // (The recorder renews a process's space a few hundred times at
        // most; a recording that says more is not walked further.)
        for _ in 0..MAX_RENEWALS_WALKED {
            if parent == 0 {
                break;
            }
            let Some(older) = self.spaces.get_mut(&parent) else {
                break;
            };
            if older.pid != pid || older.jit.contains_key(&start) {
                break;
            }
            older.jit.insert(start, name.clone());
            parent = older.parent;
        }
        self.spaces.entry(asid).or_default().jit.insert(start, name);
    }

    /// Address space `asid` of `pid`: a copy of `parent`'s, within the
    /// report's bound on copies.
    fn begin_space(&mut self, asid: u64, pid: u32, parent: u64, name: &[u8]) {
        let mut space = match self.spaces.get(&parent) {
            Some(p) => {
                let size = (p.mapped.len() + p.jit.len()) as u64;
                if self.copied + size <= MAX_COPIED {
                    self.copied += size;
                    p.clone()
                } else {
                    self.uncopied_spaces += 1;
                    Space::default()
                }
            }
            None => Space::default(),
        };
        space.pid = pid;
        space.parent = parent;
        self.spaces.insert(asid, space);
        self.current_space.insert(pid, asid);
        let name: Arc<str> = Arc::from(text(name));
        // The first thread's name in the new program, until a thread
        // record renames it (none comes where an exec kept the name).
        self.space_threads.insert((asid, pid), Arc::clone(&name));
        self.processes.insert(pid, name);
    }

    fn describe(&mut self, m: &ichnos_data::Meta<'_>) {
        self.description = Description {
            host: text(m.host),
            kernel: text(m.kernel),
            command: m.command.iter().map(|a| text(a)).collect(),
            command_bytes: m.command.iter().map(|a| a.to_vec()).collect(),
            event: text(m.event),
            frequency: m.frequency,
            start_realtime_ns: m.start_realtime_ns,
            start_monotonic_ns: m.start_monotonic_ns,
            recorder: text(m.recorder),
            target: Some(m.target),
            off_cpu_event: text(m.off_cpu_event),
        };
    }

    /// Stack `id` of address space `asid`, innermost frame first, resolved
    /// against the mappings its address space has now.
    fn add_stack(
        &mut self,
        id: u64,
        asid: u64,
        stop: ichnos_data::StackStop,
        frames: impl Iterator<Item = u64>,
    ) {
        if id != self.stacks.len() as u64 || id >= MAX_STACKS {
            self.misnumbered_stacks += 1;
            return;
        }
        let frames: Vec<(u64, Place)> = frames
            .take(MAX_FRAMES)
            .enumerate()
            .map(|(i, f)| {
                // Callers are looked up at their return address minus one,
                // so the call is what is named.
                let pc = if i == 0 { f } else { f.wrapping_sub(1) };
                (pc, self.place(asid, pc))
            })
            .collect();
        self.stacks.push(Some(Stack { asid, stop, frames }));
    }

    /// Places the frames that lay in no mapping when their stacks were
    /// read in the mappings their address spaces have now (at the end of
    /// the recording). For a function trace, whose recorder writes a
    /// function when its first call arrives: code loaded while the
    /// program ran (`dlopen`) may have its mappings written later, when
    /// the process was gone before the recorder could look (they come in
    /// the runtime's last list of mappings). A profile's unmapped frames
    /// were in no mapping when sampled, and are left so. (A library
    /// unloaded and another loaded at its addresses before the end would
    /// take the frames of the first: the mappings have no end times.)
    pub fn place_unmapped_in_final_mappings(&mut self) {
        let mut stacks = std::mem::take(&mut self.stacks);
        for stack in stacks.iter_mut().flatten() {
            for (pc, place) in &mut stack.frames {
                if *place == Place::Unmapped {
                    *place = self.place(stack.asid, *pc);
                }
            }
        }
        self.stacks = stacks;
    }

    /// Where `pc` lies in address space `asid` now.
    fn place(&self, asid: u64, pc: u64) -> Place {
        if pc >= KERNEL_HALF {
            return Place::Kernel;
        }
        let Some(m) = self.spaces.get(&asid).and_then(|s| s.mapping_at(pc)) else {
            return Place::Unmapped;
        };
        let mapping = &self.mappings[m];
        Place::Mapped {
            mapping: m,
            offset: pc - mapping.start + mapping.pgoff,
        }
    }

    /// Samples and records lost: as the loss records tell, or as the end
    /// record counts if it counts more.
    #[must_use]
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum::<u64>().max(self.end_lost)
    }

    /// The period of the CPU clock in nanoseconds, if the recording's
    /// samples are of it: their weights are then the time their threads
    /// ran (with off-CPU time, the recorder weighs a sample by its
    /// thread's time since the one before: more than a period where the
    /// clock's timer came late, less after a part of one), and samples
    /// are counted as that time in periods.
    #[must_use]
    pub fn clock_period(&self) -> Option<f64> {
        let d = &self.description;
        (d.event == "cpu-clock" && d.frequency > 0).then(|| 1e9 / d.frequency as f64)
    }

    /// Whether the recording holds off-CPU time (it was asked for).
    #[must_use]
    pub fn has_off_cpu(&self) -> bool {
        !self.description.off_cpu_event.is_empty() || !self.off_cpu.is_empty()
    }

    /// Nanoseconds of the CPU clock a sample stands for, on average: what
    /// an interval off the CPU is measured in to sit beside samples.
    #[must_use]
    pub fn sample_period_ns(&self) -> f64 {
        let t = self.totals();
        if t.samples > 0 && t.weight > 0 && self.description.event == "cpu-clock" {
            t.weight as f64 / t.samples as f64
        } else {
            1e9 / self.description.frequency.max(1) as f64
        }
    }

    /// All samples and their weight (on CPUs).
    #[must_use]
    pub fn totals(&self) -> Tally {
        self.tallies.values().fold(Tally::default(), |a, t| Tally {
            samples: a.samples + t.samples,
            weight: a.weight.saturating_add(t.weight),
        })
    }

    /// The name of thread `tid` of process `pid`, and of the process.
    #[must_use]
    pub fn thread_name(&self, pid: u32, tid: u32) -> (Option<&Arc<str>>, Option<&Arc<str>>) {
        (self.threads.get(&(pid, tid)), self.processes.get(&pid))
    }

    /// The name thread `tid` of process `pid` had while it ran the
    /// program of address space `asid` (as perf names a sample by the
    /// thread's name when it was taken: a child's samples before it
    /// executed another program keep the name it had then), else its last.
    #[must_use]
    pub fn thread_name_in(&self, asid: u64, pid: u32, tid: u32) -> Option<&Arc<str>> {
        // A space begun for the same process without an exec (the JIT
        // names of a process renamed, `names.rs`) runs the same program:
        // its threads' names are its parent's, up the chain (bounded).
        let mut space = asid;
        for _ in 0..64 {
            if let Some(name) = self.space_threads.get(&(space, tid)) {
                return Some(name);
            }
            match self.spaces.get(&space) {
                Some(s)
                    if s.pid == pid
                        && s.parent != space
                        && self.spaces.get(&s.parent).is_some_and(|p| p.pid == pid) =>
                {
                    space = s.parent;
                }
                _ => break,
            }
        }
        self.threads.get(&(pid, tid))
    }

    /// The kernel function `pc` lies in, if the recording names one there.
    #[must_use]
    pub fn kernel_function(&self, pc: u64) -> Option<&KernelFunction> {
        let (_, function) = self.kernel_functions.range(..=pc).next_back()?;
        (pc < function.end).then_some(function)
    }

    /// The JIT code name covering `pc` in address space `asid`: of the
    /// names starting at or below it, the one starting last.
    #[must_use]
    pub fn jit_name(&self, asid: u64, pc: u64) -> Option<&JitName> {
        let (_, name) = self.spaces.get(&asid)?.jit.range(..=pc).next_back()?;
        (pc < name.end).then_some(name)
    }
}

#[cfg(test)]
#[path = "load_test.rs"]
mod tests;
