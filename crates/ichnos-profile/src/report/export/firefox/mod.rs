//! The Firefox Profiler's processed format, gzipped (what samply writes,
//! through the same `fxprof-processed-profile` crate): one track per
//! thread, in its process, with every sample at its time. The Firefox
//! Profiler and Perfetto open it.
//!
//! Frames go in named: the crate takes frames either as addresses for
//! the viewer to symbolize later (the saved profiles that show bare
//! addresses elsewhere) or as labels, with no source file or object.
//! Each distinct frame is therefore handed to the crate as a label that
//! stands for it, and the tables it writes are then completed: each label
//! becomes its function's name, functions of one name, object and file
//! become one, with their source file, their object as a library, and
//! each frame's line. JIT frames carry the "JIT" category, the kernel's
//! "Kernel" (as samply has them), native ones "Native", frames in no
//! object "Other".
//!
//! Time off the CPU is a sample at the moment the thread left, with no
//! CPU time, its stack topped by the `[waiting]` or `[preempted]` frame
//! in the "Off-CPU" category (transparent in the activity graph), and a
//! weight of the samples the clock would have taken while it was away.
//!
//! Unlike the other exports this is a timeline, with every sample in it,
//! and yet its memory does not grow with the samples. The crate is given
//! the threads and their distinct stacks only (one read of the
//! recording), and each thread's sample table, whose columns are most of
//! the file, is written here as the recording is read again: one column
//! straight to the output, the others held as text within a fixed budget
//! ([`SAMPLE_TEXT_BUDGET`]) until their turn comes. A recording whose
//! columns do not fit is read once more for each budget's worth.

mod samples;
mod tables;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::sync::Arc;

use fxprof_processed_profile as fx;
use ichnos_data::{OffCpuState, ReadError, StackStop};
use rustc_hash::FxHashMap;
use serde_json::value::RawValue;
use serde_json::Value;

use super::super::load::{Profile, Sample};
use super::super::print::INCOMPLETE;
use super::super::symbols::{Frame, Symbolized};
use super::super::timeline::for_each_sample;
use super::super::{off_cpu_frame, Filter, OFF_CPU_OBJECT};
use super::object_files;

/// Why the Firefox profile could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FirefoxError {
    /// A later read of the recording failed.
    #[error("cannot read the recording's samples: {0}")]
    Read(#[from] ReadError),
    /// A later read of the recording found another number of samples of
    /// a thread than the first (the file changed in between).
    #[error(
        "the recording changed while it was exported: a thread had {first} samples, then {then}"
    )]
    Changed {
        /// Samples of the thread in the first read.
        first: usize,
        /// In the later one.
        then: usize,
    },
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The profile did not serialize (the crate's tables were not as
    /// expected).
    #[error("cannot write the Firefox profile: {0}")]
    Json(#[from] serde_json::Error),
    /// The crate wrote a table this export does not know how to complete.
    #[error("unexpected Firefox profile layout: {0}")]
    Layout(&'static str),
}

/// A distinct frame: how it is told apart from others.
type FrameKey = (Arc<str>, Arc<str>, Option<(Arc<str>, u32)>, bool);

/// The labels standing for frames: label text to frame.
const LABEL_MARK: char = '\u{1}';

/// Bytes of sample-table text held at once, beyond the column being
/// written out. Each entry is charged at its longest text (12 to 25
/// bytes; 79 a sample for all four columns of a thread): 64 MiB holds the
/// columns of 0.85 to 1.2 million samples.
pub const SAMPLE_TEXT_BUDGET: usize = 64 << 20;

/// Writes the samples of `profile` that `filter` keeps as a gzipped
/// Firefox profile with the frames of `symbols`, reading them from the
/// recording that `reread` opens from its start (the same recording, each
/// time), and holding at most `budget` bytes of sample-table text at once
/// ([`SAMPLE_TEXT_BUDGET`]).
pub fn write_firefox<R: Read>(
    profile: &Profile,
    symbols: &Symbolized,
    filter: &Filter,
    mut reread: impl FnMut() -> io::Result<R>,
    budget: usize,
    out: &mut dyn Write,
) -> Result<(), FirefoxError> {
    let sampler = Sampler::new(profile, symbols, filter);
    let mut tables = thread_tables(&sampler, reread()?)?;
    let libs = tables::complete(&mut tables.threads, &tables.frames, &object_files(profile))?;
    tables
        .top
        .insert("libs".to_owned(), serde_json::value::to_raw_value(&libs)?);
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    // Text is written a few bytes at a time, and the encoder pays for
    // each call (it clears its output buffer): a buffer in between.
    let mut buffered = io::BufWriter::with_capacity(1 << 20, gz);
    let mut pass = |each: &mut dyn FnMut(usize, samples::Entry)| -> Result<(), FirefoxError> {
        let mut state = ReadState::default();
        for_each_sample(reread()?, |s| {
            if let Some((thread, entry)) = state.entry(&sampler, &tables.placement, &s) {
                each(thread, entry);
            }
        })?;
        Ok(())
    };
    samples::write_profile(
        &mut buffered,
        &tables.top,
        &tables.threads,
        &tables.counts,
        budget,
        &mut pass,
    )?;
    let gz = buffered
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    gz.finish()?.flush()?;
    Ok(())
}

/// The crate's profile being filled, and the labels standing for frames.
struct Timeline<'a> {
    profile: &'a Profile,
    fxp: fx::Profile,
    native: fx::CategoryPairHandle,
    kernel: fx::CategoryPairHandle,
    jit: fx::CategoryPairHandle,
    off_cpu: fx::CategoryPairHandle,
    /// The frames the labels stand for (label `\u{1}N` is `frames[N]`).
    frames: Vec<Frame>,
    labels: HashMap<FrameKey, fx::StringHandle>,
    processes: HashMap<u32, fx::ProcessHandle>,
    threads: FxHashMap<(u32, u32), fx::ThreadHandle>,
    /// Each distinct stack of a thread, by the number of the placeholder
    /// sample it was given in that thread (the crate's stack handles do
    /// not say their index; the placeholder's serialized stack does).
    stacks: FxHashMap<StackKey, usize>,
    /// Placeholder samples given to each thread so far.
    placeholders: FxHashMap<(u32, u32), usize>,
}

/// A stack of a thread: its number, process, thread, and whether it is
/// one the thread left its CPU in.
type StackKey = (u64, u32, u32, Option<OffCpuState>);

impl Timeline<'_> {
    /// The track of thread `tid` of process `pid`, made on its first
    /// sample.
    fn thread(&mut self, pid: u32, tid: u32) -> fx::ThreadHandle {
        if let Some(&t) = self.threads.get(&(pid, tid)) {
            return t;
        }
        let start = fx::Timestamp::from_nanos_since_reference(0);
        let process = if let Some(&p) = self.processes.get(&pid) {
            p
        } else {
            let name = self
                .profile
                .processes
                .get(&pid)
                .map_or_else(|| format!("process {pid}"), ToString::to_string);
            let p = self.fxp.add_process(&name, pid, start);
            self.processes.insert(pid, p);
            p
        };
        let thread = self.fxp.add_thread(process, tid, start, pid == tid);
        let name = self
            .profile
            .thread_name(pid, tid)
            .0
            .map_or_else(|| format!("thread {tid}"), ToString::to_string);
        self.fxp.set_thread_name(thread, &name);
        self.threads.insert((pid, tid), thread);
        thread
    }

    /// The label standing for `frame`, in its category.
    fn frame(&mut self, f: &Frame) -> fx::FrameInfo {
        let key = (
            Arc::clone(&f.function),
            Arc::clone(&f.object),
            f.source.clone(),
            f.jit,
        );
        let label = if let Some(&l) = self.labels.get(&key) {
            l
        } else {
            self.frames.push(f.clone());
            let l = self
                .fxp
                .intern_string(&format!("{LABEL_MARK}{}", self.frames.len() - 1));
            self.labels.insert(key, l);
            l
        };
        let category = if f.jit {
            self.jit
        } else if f.kernel {
            self.kernel
        } else if &*f.object == OFF_CPU_OBJECT {
            self.off_cpu
        } else if f.object.is_empty() || f.object.starts_with('[') {
            fx::CategoryHandle::OTHER.into()
        } else {
            self.native
        };
        fx::FrameInfo {
            frame: fx::Frame::Label(label),
            category_pair: category,
            flags: fx::FrameFlags::empty(),
        }
    }

    /// Interns the stack of `key`, whose frames are `symbolized` and whose
    /// walk ended as `stop`, on its first sighting, with a placeholder
    /// sample that will say its index.
    fn stack(
        &mut self,
        thread: fx::ThreadHandle,
        key: StackKey,
        symbolized: &[Frame],
        stop: StackStop,
    ) {
        if self.stacks.contains_key(&key) {
            return;
        }
        let mut root_first = Vec::with_capacity(symbolized.len() + 1);
        if stop != StackStop::Complete {
            root_first.push(self.frame(&Frame {
                function: Arc::from(INCOMPLETE),
                object: Arc::from(""),
                source: None,
                inlined: false,
                jit: false,
                kernel: false,
            }));
        }
        for f in symbolized.iter().rev() {
            root_first.push(self.frame(f));
        }
        if let Some(state) = key.3 {
            root_first.push(self.frame(&off_cpu_frame(state)));
        }
        let h = self.fxp.intern_stack_frames(thread, root_first.into_iter());
        let zero = fx::Timestamp::from_nanos_since_reference(0);
        self.fxp.add_sample(thread, zero, h, fx::CpuDelta::ZERO, 0);
        let placeholder = self.placeholders.entry((key.1, key.2)).or_default();
        self.stacks.insert(key, *placeholder);
        *placeholder += 1;
    }
}

/// A JSON object kept as its members' text, so that only the tables
/// completed are parsed.
type RawObject = BTreeMap<String, Box<RawValue>>;

/// Which samples are exported, and how each becomes an entry of its
/// thread's table: the same in every read of the recording.
struct Sampler<'a> {
    profile: &'a Profile,
    symbols: &'a Symbolized,
    filter: &'a Filter,
    /// Nanoseconds between samples, which an interval off the CPU is
    /// counted in.
    period: f64,
    /// Whether a sample's weight is CPU time (cpu-clock).
    cpu_time: bool,
    /// The CPU clock's period, if samples are of it (their weights are
    /// then counted in periods).
    clock: Option<f64>,
}

impl<'a> Sampler<'a> {
    fn new(profile: &'a Profile, symbols: &'a Symbolized, filter: &'a Filter) -> Self {
        let event = profile.description.event.as_str();
        Self {
            profile,
            symbols,
            filter,
            period: profile.sample_period_ns(),
            cpu_time: matches!(event, "cpu-clock" | ""),
            clock: profile.clock_period(),
        }
    }

    /// The frames and walk end of sample `s`, if it is exported.
    fn kept(&self, s: &Sample) -> Option<(&'a [Frame], StackStop)> {
        let symbolized = self.symbols.stacks.get(s.stack as usize)?.as_deref()?;
        let stack = self.profile.stacks.get(s.stack as usize)?.as_ref()?;
        self.filter
            .keeps(self.profile, s.stack, s.pid, s.tid)
            .then_some((symbolized, stack.stop))
    }
}

/// Where samples go in the profile written: their thread's place among
/// the threads, and their stack's index in that thread's stack table.
/// (Looked up for every sample in every read: keyed by the Fx hash,
/// which costs a multiplication where the standard one cost a fifth of
/// the export's time.)
#[derive(Default)]
struct Placement {
    threads: FxHashMap<(u32, u32), usize>,
    stacks: FxHashMap<StackKey, Option<u64>>,
}

/// What one read of the recording carries from a thread's sample to its
/// next, by the thread's place.
#[derive(Default)]
struct ReadState {
    threads: Vec<ThreadState>,
    /// Per stack of a thread on the CPU: the periods its samples' weights
    /// add up to that their weights in the profile have not counted
    /// (negative where they counted more), and whether one was counted.
    /// Bounded by the distinct stacks, as the export is.
    on_cpu: FxHashMap<(u64, u32, u32), (f64, bool)>,
}

#[derive(Clone, Copy, Default)]
struct ThreadState {
    /// The time of its last sample (deltas are from it).
    last: u64,
    /// The nanoseconds off the CPU not yet counted in a weight.
    carry: f64,
}

impl ReadState {
    /// Sample `s` as its thread's table holds it, with the place of that
    /// thread; `None` if it is not exported.
    fn entry(
        &mut self,
        sampler: &Sampler<'_>,
        placement: &Placement,
        s: &Sample,
    ) -> Option<(usize, samples::Entry)> {
        sampler.kept(s)?;
        let thread = *placement.threads.get(&(s.pid, s.tid))?;
        let stack = *placement.stacks.get(&(s.stack, s.pid, s.tid, s.off_cpu))?;
        if self.threads.len() <= thread {
            self.threads.resize(thread + 1, ThreadState::default());
        }
        let state = &mut self.threads[thread];
        // The recording is in time order; a thread's sample that is not
        // (one the recorder's sorter took after its margin) is put at the
        // thread's previous sample, as a streamed timeline cannot go back.
        // (The crate sorted such samples into place.)
        let delta_ms = s.time.saturating_sub(state.last) as f64 / 1e6;
        state.last = state.last.max(s.time);
        let (weight, cpu_micros) = if s.off_cpu.is_some() {
            // Away for as many samples as the clock would have taken,
            // the remainder carried to the thread's next wait.
            let periods = ((state.carry + s.weight as f64) / sampler.period).floor();
            state.carry += s.weight as f64 - periods * sampler.period;
            (i32::try_from(periods as i64).unwrap_or(i32::MAX), 0)
        } else if sampler.cpu_time {
            // A sample weighs the time its thread ran: the periods a late
            // one stands for, or a part of one. Counted as the report
            // counts a stack's samples (its time in periods, to the
            // nearest, one at least): the remainder carried to the
            // stack's next sample, the first counting one at least.
            let weight = match sampler.clock {
                Some(period) => {
                    let (carry, counted) = self
                        .on_cpu
                        .entry((s.stack, s.pid, s.tid))
                        .or_insert((0.0, false));
                    let exact = *carry + s.weight as f64 / period;
                    let mut periods = exact.round().max(0.0);
                    if !*counted {
                        periods = periods.max(1.0);
                        *counted = true;
                    }
                    *carry = exact - periods;
                    i32::try_from(periods as i64).unwrap_or(i32::MAX)
                }
                None => 1,
            };
            (weight, s.weight / 1000)
        } else {
            (1, 0)
        };
        Some((
            thread,
            samples::Entry {
                stack,
                delta_ms,
                weight,
                cpu_micros,
            },
        ))
    }
}

/// The profile's tables but the samples', from a first read of the
/// recording, serialized by the crate.
struct Tables {
    /// The profile's members ("threads" is written in its turn).
    top: RawObject,
    /// The threads in the order written ("samples" is written in its
    /// turn).
    threads: Vec<RawObject>,
    /// Samples exported of each thread.
    counts: Vec<usize>,
    /// The frames the labels stand for.
    frames: Vec<Frame>,
    placement: Placement,
}

/// The categories of frames: native, JIT, the kernel's and off-CPU time,
/// the last two only where the profile has them (else "Other", so that
/// other profiles keep their categories as they were).
fn categories(fxp: &mut fx::Profile, profile: &Profile) -> [fx::CategoryPairHandle; 4] {
    let native = fxp.add_category("Native", fx::CategoryColor::Blue).into();
    let jit = fxp.add_category("JIT", fx::CategoryColor::Green).into();
    // Only where the kernel's frames were recorded, as off-CPU time below.
    let kernel = if profile.kernel_functions.is_empty() {
        fx::CategoryHandle::OTHER.into()
    } else {
        fxp.add_category("Kernel", fx::CategoryColor::Orange).into()
    };
    // Only where there is off-CPU time: other profiles keep their
    // categories as they were.
    let off_cpu = if profile.has_off_cpu() {
        fxp.add_category("Off-CPU", fx::CategoryColor::Transparent)
            .into()
    } else {
        fx::CategoryHandle::OTHER.into()
    };
    [native, jit, kernel, off_cpu]
}

/// Reads the recording once for its threads and their distinct stacks,
/// and has the crate serialize them.
fn thread_tables(sampler: &Sampler<'_>, recording: impl Read) -> Result<Tables, FirefoxError> {
    let profile = sampler.profile;
    let d = &profile.description;
    let interval = 1_000_000_000u64.checked_div(d.frequency).map_or_else(
        || fx::SamplingInterval::from_millis(1),
        fx::SamplingInterval::from_nanos,
    );
    let product = d.command.first().map_or("ichnos", String::as_str);
    let mut fxp = fx::Profile::new(
        product,
        fx::ReferenceTimestamp::from_millis_since_unix_epoch(d.start_realtime_ns as f64 / 1e6),
        interval,
    );
    fxp.set_os_name("Linux");
    fxp.set_symbolicated(true);
    let [native, jit, kernel, off_cpu] = categories(&mut fxp, profile);
    let mut timeline = Timeline {
        profile,
        fxp,
        native,
        kernel,
        jit,
        off_cpu,
        frames: Vec::new(),
        labels: HashMap::new(),
        processes: HashMap::new(),
        threads: FxHashMap::default(),
        stacks: FxHashMap::default(),
        placeholders: FxHashMap::default(),
    };
    let mut kept: FxHashMap<(u32, u32), usize> = FxHashMap::default();
    for_each_sample(recording, |s| {
        let Some((symbolized, stop)) = sampler.kept(&s) else {
            return;
        };
        let thread = timeline.thread(s.pid, s.tid);
        timeline.stack(thread, (s.stack, s.pid, s.tid, s.off_cpu), symbolized, stop);
        *kept.entry((s.pid, s.tid)).or_default() += 1;
    })?;
    let text = serde_json::to_vec(&timeline.fxp)?;
    drop(timeline.fxp);
    let mut top: RawObject = serde_json::from_slice(&text)?;
    drop(text);
    let raw = top
        .insert(
            "threads".to_owned(),
            RawValue::from_string("[]".to_owned())?,
        )
        .ok_or(FirefoxError::Layout("no threads array"))?;
    let threads: Vec<RawObject> = serde_json::from_str(raw.get())?;
    drop(raw);
    // Each thread's place, and the stack index of each placeholder.
    let mut placement = Placement::default();
    let mut counts = Vec::with_capacity(threads.len());
    let mut indexes: HashMap<(u32, u32), Vec<Option<u64>>> = HashMap::new();
    for (place, thread) in threads.iter().enumerate() {
        let id = |key: &'static str| -> Result<u32, FirefoxError> {
            let raw = thread.get(key).ok_or(FirefoxError::Layout(key))?;
            let value: Value = serde_json::from_str(raw.get())?;
            value
                .as_u64()
                .or_else(|| value.as_str()?.parse().ok())
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(FirefoxError::Layout(key))
        };
        let key = (id("pid")?, id("tid")?);
        let table = thread
            .get("samples")
            .ok_or(FirefoxError::Layout("samples"))?;
        let table: Value = serde_json::from_str(table.get())?;
        let stacks = table
            .get("stack")
            .and_then(Value::as_array)
            .ok_or(FirefoxError::Layout("samples.stack"))?;
        indexes.insert(key, stacks.iter().map(Value::as_u64).collect());
        placement.threads.insert(key, place);
        counts.push(kept.get(&key).copied().unwrap_or(0));
    }
    for (key, placeholder) in timeline.stacks {
        let index = indexes
            .get(&(key.1, key.2))
            .and_then(|stacks| stacks.get(placeholder))
            .ok_or(FirefoxError::Layout(
                "a stack without its placeholder sample",
            ))?;
        placement.stacks.insert(key, *index);
    }
    Ok(Tables {
        top,
        threads,
        counts,
        frames: timeline.frames,
        placement,
    })
}
