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
//! each frame's line. JIT frames carry the "JIT" category, native ones
//! "Native", frames in no object "Other".
//!
//! Time off the CPU is a sample at the moment the thread left, with no
//! CPU time, its stack topped by the `[waiting]` or `[preempted]` frame
//! in the "Off-CPU" category (transparent in the activity graph), and a
//! weight of the samples the clock would have taken while it was away.
//!
//! Unlike the other exports this is a timeline: it holds every sample,
//! so its memory grows with the samples (the crate keeps about 20 bytes
//! of each), read from the recording one by one in a second pass.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::sync::Arc;

use fxprof_processed_profile as fx;
use ichnos_data::{OffCpuState, ReadError, StackStop};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::super::load::{for_each_sample, Profile};
use super::super::print::INCOMPLETE;
use super::super::symbols::{Frame, Symbolized};
use super::super::{off_cpu_frame, Filter, OFF_CPU_OBJECT};
use super::{object_files, ObjectFile};

/// Why the Firefox profile could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FirefoxError {
    /// The recording's second read failed.
    #[error("cannot read the recording's samples: {0}")]
    Read(#[from] ReadError),
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

/// Writes the samples of `profile` that `filter` keeps as a gzipped
/// Firefox profile, reading them from `recording` (the same recording,
/// opened again) with the frames of `symbols`.
pub fn write_firefox(
    profile: &Profile,
    symbols: &Symbolized,
    filter: &Filter,
    recording: impl Read,
    out: &mut dyn Write,
) -> Result<(), FirefoxError> {
    let value = firefox_profile(profile, symbols, filter, recording)?;
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    // The serializer writes a few bytes at a time, and the encoder pays
    // for each call (it clears its output buffer): a buffer in between.
    let mut buffered = io::BufWriter::with_capacity(1 << 20, gz);
    serde_json::to_writer(&mut buffered, &value)?;
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
    jit: fx::CategoryPairHandle,
    off_cpu: fx::CategoryPairHandle,
    /// The frames the labels stand for (label `\u{1}N` is `frames[N]`).
    frames: Vec<Frame>,
    labels: HashMap<FrameKey, fx::StringHandle>,
    processes: HashMap<u32, fx::ProcessHandle>,
    threads: HashMap<(u32, u32), fx::ThreadHandle>,
    stacks: HashMap<StackKey, Option<fx::StackHandle>>,
    /// Per thread, the nanoseconds off the CPU not yet counted as a
    /// sample's weight.
    carry: HashMap<(u32, u32), f64>,
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

    /// The stack of `key`, whose frames are `symbolized` and whose walk
    /// ended as `stop`, interned once.
    fn stack(
        &mut self,
        thread: fx::ThreadHandle,
        key: StackKey,
        symbolized: &[Frame],
        stop: StackStop,
    ) -> Option<fx::StackHandle> {
        if let Some(&h) = self.stacks.get(&key) {
            return h;
        }
        let mut root_first = Vec::with_capacity(symbolized.len() + 1);
        if stop != StackStop::Complete {
            root_first.push(self.frame(&Frame {
                function: Arc::from(INCOMPLETE),
                object: Arc::from(""),
                source: None,
                inlined: false,
                jit: false,
            }));
        }
        for f in symbolized.iter().rev() {
            root_first.push(self.frame(f));
        }
        if let Some(state) = key.3 {
            root_first.push(self.frame(&off_cpu_frame(state)));
        }
        let h = self.fxp.intern_stack_frames(thread, root_first.into_iter());
        self.stacks.insert(key, h);
        h
    }
}

/// A JSON object kept as its members' text: the sample tables pass
/// through unparsed, so the memory to complete a profile is that of its
/// text, not of a value per sample.
type RawObject = BTreeMap<String, Box<RawValue>>;

/// The profile as JSON, completed.
fn firefox_profile(
    profile: &Profile,
    symbols: &Symbolized,
    filter: &Filter,
    recording: impl Read,
) -> Result<RawObject, FirefoxError> {
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
    let native = fxp.add_category("Native", fx::CategoryColor::Blue).into();
    let jit = fxp.add_category("JIT", fx::CategoryColor::Green).into();
    // Only where there is off-CPU time: other profiles keep their
    // categories as they were.
    let off_cpu = if profile.has_off_cpu() {
        fxp.add_category("Off-CPU", fx::CategoryColor::Transparent)
            .into()
    } else {
        fx::CategoryHandle::OTHER.into()
    };
    let period = profile.sample_period_ns();
    let mut timeline = Timeline {
        profile,
        fxp,
        native,
        jit,
        off_cpu,
        carry: HashMap::new(),
        frames: Vec::new(),
        labels: HashMap::new(),
        processes: HashMap::new(),
        threads: HashMap::new(),
        stacks: HashMap::new(),
    };
    let cpu_time = matches!(d.event.as_str(), "cpu-clock" | "");
    for_each_sample(recording, |s| {
        let (Some(Some(symbolized)), Some(Some(stack))) = (
            symbols.stacks.get(s.stack as usize),
            profile.stacks.get(s.stack as usize),
        ) else {
            return;
        };
        if !filter.keeps(profile, s.pid, s.tid) {
            return;
        }
        let thread = timeline.thread(s.pid, s.tid);
        let key = (s.stack, s.pid, s.tid, s.off_cpu);
        let handle = timeline.stack(thread, key, symbolized, stack.stop);
        let time = fx::Timestamp::from_nanos_since_reference(s.time);
        if s.off_cpu.is_some() {
            // Away for as many samples as the clock would have taken,
            // the remainder carried to the thread's next wait.
            let carry = timeline.carry.entry((s.pid, s.tid)).or_default();
            let periods = ((*carry + s.weight as f64) / period).floor();
            *carry += s.weight as f64 - periods * period;
            let weight = i32::try_from(periods as i64).unwrap_or(i32::MAX);
            timeline
                .fxp
                .add_sample(thread, time, handle, fx::CpuDelta::ZERO, weight);
            return;
        }
        let cpu = if cpu_time {
            fx::CpuDelta::from_nanos(s.weight)
        } else {
            fx::CpuDelta::ZERO
        };
        timeline.fxp.add_sample(thread, time, handle, cpu, 1);
    })?;
    let text = serde_json::to_vec(&timeline.fxp)?;
    drop(timeline.fxp);
    let mut top: RawObject = serde_json::from_slice(&text)?;
    complete(&mut top, &timeline.frames, &object_files(profile))?;
    Ok(top)
}

/// The library entry of an object, as the processed format's `libs` hold
/// them: its build id as the code id, and as the breakpad id the
/// Firefox Profiler derives from it.
fn library(name: &str, file: &ObjectFile) -> Value {
    let build_id: Vec<u8> = (0..file.build_id.len() / 2)
        .filter_map(|i| u8::from_str_radix(file.build_id.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let breakpad_id = if build_id.is_empty() {
        String::new()
    } else {
        // The first 16 bytes as a GUID, its first three fields read as
        // little-endian (how ELF build ids become debug ids), age 0.
        let mut guid = [0u8; 16];
        for (slot, b) in guid.iter_mut().zip(&build_id) {
            *slot = *b;
        }
        guid[..4].reverse();
        guid[4..6].reverse();
        guid[6..8].reverse();
        fx::debugid::DebugId::from_guid_age(&guid, 0)
            .map(|id| id.breakpad().to_string())
            .unwrap_or_default()
    };
    json!({
        "name": name,
        "path": file.path,
        "debugName": name,
        "debugPath": file.path,
        "breakpadId": breakpad_id,
        "codeId": if file.build_id.is_empty() { Value::Null } else { json!(file.build_id) },
        "arch": "x86_64",
    })
}

/// Turns the labels the crate was given into the frames they stand for:
/// function names, source files and lines, and objects as libraries.
fn complete(
    top: &mut RawObject,
    frames: &[Frame],
    files: &HashMap<Arc<str>, ObjectFile>,
) -> Result<(), FirefoxError> {
    let mut libs = Libraries {
        files,
        list: Vec::new(),
        index: HashMap::new(),
    };
    let raw = top
        .get("threads")
        .ok_or(FirefoxError::Layout("no threads array"))?;
    let mut threads: Vec<RawObject> = serde_json::from_str(raw.get())?;
    for thread in &mut threads {
        // Only the tables completed are parsed.
        let mut tables = serde_json::Map::new();
        for key in TABLES {
            let raw = thread.get(key).ok_or(FirefoxError::Layout(key))?;
            tables.insert(key.to_owned(), serde_json::from_str(raw.get())?);
        }
        let mut tables = Value::Object(tables);
        complete_thread(&mut tables, frames, &mut libs)?;
        for key in TABLES {
            thread.insert(
                key.to_owned(),
                serde_json::value::to_raw_value(&tables[key])?,
            );
        }
    }
    top.insert(
        "threads".to_owned(),
        serde_json::value::to_raw_value(&threads)?,
    );
    top.insert(
        "libs".to_owned(),
        serde_json::value::to_raw_value(&libs.list)?,
    );
    Ok(())
}

/// The tables of a thread that are completed.
const TABLES: [&str; 4] = ["frameTable", "funcTable", "resourceTable", "stringArray"];

/// A column of a table, as an array.
fn column<'a>(
    table: &'a mut Value,
    name: &'static str,
) -> Result<&'a mut Vec<Value>, FirefoxError> {
    table
        .get_mut(name)
        .and_then(Value::as_array_mut)
        .ok_or(FirefoxError::Layout(name))
}

/// A thread's strings, each added once.
struct Strings {
    all: Vec<String>,
    index: HashMap<String, usize>,
}

impl Strings {
    fn get(&mut self, text: &str) -> usize {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        self.all.push(text.to_owned());
        self.index.insert(text.to_owned(), self.all.len() - 1);
        self.all.len() - 1
    }
}

/// The objects as libraries, across threads.
struct Libraries<'a> {
    files: &'a HashMap<Arc<str>, ObjectFile>,
    list: Vec<Value>,
    index: HashMap<Arc<str>, usize>,
}

/// A function of the Firefox profile: its name, object and source file.
type FunctionKey = (Arc<str>, Arc<str>, Option<Arc<str>>);

/// A thread's new function and resource tables.
#[derive(Default)]
struct Functions {
    by_key: HashMap<FunctionKey, usize>,
    names: Vec<Value>,
    file_names: Vec<Value>,
    resources: Vec<Value>,
    resource_of_object: HashMap<Arc<str>, usize>,
    resource_libs: Vec<Value>,
    resource_names: Vec<Value>,
}

impl Functions {
    /// The function of `frame`: one per name, object and source file.
    fn of(&mut self, frame: &Frame, strings: &mut Strings, libs: &mut Libraries<'_>) -> usize {
        let file = frame.source.as_ref().map(|(f, _)| Arc::clone(f));
        let key = (
            Arc::clone(&frame.function),
            Arc::clone(&frame.object),
            file.clone(),
        );
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        self.names.push(json!(strings.get(&frame.function)));
        self.file_names
            .push(file.map_or(Value::Null, |f| json!(strings.get(&f))));
        let resource = match libs.files.get(&frame.object) {
            Some(file) if !frame.jit => {
                let lib = if let Some(&l) = libs.index.get(&frame.object) {
                    l
                } else {
                    libs.list.push(library(&frame.object, file));
                    libs.index
                        .insert(Arc::clone(&frame.object), libs.list.len() - 1);
                    libs.list.len() - 1
                };
                let next = self.resource_libs.len();
                let r = *self
                    .resource_of_object
                    .entry(Arc::clone(&frame.object))
                    .or_insert(next);
                if r == next {
                    self.resource_libs.push(json!(lib));
                    self.resource_names.push(json!(strings.get(&frame.object)));
                }
                json!(r)
            }
            _ => json!(-1),
        };
        self.resources.push(resource);
        self.by_key.insert(key, self.names.len() - 1);
        self.names.len() - 1
    }
}

fn complete_thread(
    thread: &mut Value,
    frames: &[Frame],
    libs: &mut Libraries<'_>,
) -> Result<(), FirefoxError> {
    let all: Vec<String> = thread
        .get("stringArray")
        .and_then(Value::as_array)
        .ok_or(FirefoxError::Layout("stringArray"))?
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_owned())
        .collect();
    let mut strings = Strings {
        all,
        index: HashMap::new(),
    };
    // The frame each of the crate's functions (one per label) stands for.
    let old_names: Vec<usize> = column(&mut thread["funcTable"], "name")?
        .iter()
        .map(|v| v.as_u64().map_or(usize::MAX, |i| i as usize))
        .collect();
    let old_frames: Vec<Option<&Frame>> = old_names
        .iter()
        .map(|&i| {
            let id: usize = strings.all.get(i)?.strip_prefix(LABEL_MARK)?.parse().ok()?;
            frames.get(id)
        })
        .collect();
    let mut funcs = Functions::default();
    let new_of_old: Vec<Option<usize>> = old_frames
        .iter()
        .map(|f| f.map(|f| funcs.of(f, &mut strings, libs)))
        .collect();
    let count = funcs.names.len();
    thread["funcTable"] = json!({
        "length": count,
        "name": funcs.names,
        "isJS": vec![false; count],
        "relevantForJS": vec![false; count],
        "resource": funcs.resources,
        "fileName": funcs.file_names,
        "lineNumber": vec![Value::Null; count],
        "columnNumber": vec![Value::Null; count],
    });
    let resources = funcs.resource_libs.len();
    thread["resourceTable"] = json!({
        "length": resources,
        "lib": funcs.resource_libs,
        "name": funcs.resource_names,
        "host": vec![Value::Null; resources],
        "type": vec![1; resources],
    });
    // Each frame points at its new function and carries its line.
    let frame_table = &mut thread["frameTable"];
    let mut new_funcs = Vec::new();
    let mut lines = Vec::new();
    for old in column(frame_table, "func")?.iter() {
        let old = old.as_u64().map_or(usize::MAX, |i| i as usize);
        let (Some(Some(new)), Some(Some(frame))) = (new_of_old.get(old), old_frames.get(old))
        else {
            return Err(FirefoxError::Layout("a frame of no known function"));
        };
        new_funcs.push(json!(new));
        lines.push(frame.source.as_ref().map_or(Value::Null, |(_, l)| json!(l)));
    }
    *column(frame_table, "func")? = new_funcs;
    *column(frame_table, "line")? = lines;
    // The labels are no longer referred to: what they stood for replaces
    // them, so that no placeholder is left in the file.
    for (&i, frame) in old_names.iter().zip(&old_frames) {
        if let (Some(slot), Some(frame)) = (strings.all.get_mut(i), frame) {
            *slot = frame.function.to_string();
        }
    }
    thread["stringArray"] = json!(strings.all);
    Ok(())
}
