//! pprof's `profile.proto`, gzipped: the format of `go tool pprof` and of
//! the fleet profilers (Parca, Pyroscope). Frames are named when the
//! file is written, with their source lines and inlined functions, so it
//! reads symbolized anywhere; the objects keep their paths and build ids.
//!
//! One pprof sample per stack and thread, with two values (samples, and
//! their weight: CPU nanoseconds for `cpu-clock`, else events) and the
//! thread, its number and its process's as labels. A recording with
//! off-CPU time has two more: `off-cpu` nanoseconds, and `wall`
//! nanoseconds (on and off CPUs together, the default). A location is one
//! frame of a walk: the functions inlined at it first, the function they
//! were inlined into last, as `profile.proto` orders its lines.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use ichnos_data::StackStop;
use prost::Message;

use super::super::load::Profile;
use super::super::print::INCOMPLETE;
use super::super::symbols::Frame;
use super::super::Weighted;
use super::profile_proto as pb;
use super::{object_files, ObjectFile};

/// What the pprof file says beyond its samples.
#[derive(Clone, Debug, Default)]
pub struct PprofOptions {
    /// A comment to keep in the file (the recording it was made from).
    pub comment: Option<String>,
}

/// Strings of the file, each stored once.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.get("");
        s
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        let i = i64::try_from(self.table.len()).unwrap_or(i64::MAX);
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), i);
        i
    }
}

/// A function: its name and object.
type FunctionKey = (Arc<str>, Arc<str>);
/// A location: its object, and its functions with their lines.
type LocationKey = (Arc<str>, Vec<(u64, i64)>);

/// The tables of a profile being built.
struct Builder<'a> {
    strings: Strings,
    functions: HashMap<FunctionKey, u64>,
    function_list: Vec<pb::Function>,
    locations: HashMap<LocationKey, u64>,
    location_list: Vec<pb::Location>,
    mappings: HashMap<Arc<str>, u64>,
    mapping_list: Vec<pb::Mapping>,
    files: &'a HashMap<Arc<str>, ObjectFile>,
    /// Whether the frames hold inlined functions (not with
    /// `--no-inline`).
    inline_frames: bool,
}

impl Builder<'_> {
    /// A function by name and object, its source file the first its
    /// frames name (a function whose lines come from several files, as
    /// through macros, stays one function).
    fn function(&mut self, frame: &Frame) -> u64 {
        let key = (Arc::clone(&frame.function), Arc::clone(&frame.object));
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.function_list.len() as u64 + 1;
        let name = self.strings.get(&frame.function);
        let filename = frame
            .source
            .as_ref()
            .map_or(0, |(f, _)| self.strings.get(f));
        // The linker's (mangled) name is not kept: left unset rather
        // than given the demangled one.
        self.function_list.push(pb::Function {
            id,
            name,
            system_name: 0,
            filename,
            start_line: 0,
        });
        self.functions.insert(key, id);
        id
    }

    fn mapping(&mut self, object: &Arc<str>) -> u64 {
        if object.is_empty() {
            return 0;
        }
        if let Some(&id) = self.mappings.get(object) {
            return id;
        }
        let id = self.mapping_list.len() as u64 + 1;
        let (filename, build_id) = match self.files.get(object) {
            Some(file) => (
                self.strings.get(&file.path),
                self.strings.get(&file.build_id),
            ),
            None => (self.strings.get(object), 0),
        };
        self.mapping_list.push(pb::Mapping {
            id,
            filename,
            build_id,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: self.inline_frames,
            ..pb::Mapping::default()
        });
        self.mappings.insert(Arc::clone(object), id);
        id
    }

    /// The location of one walked frame: `group` is its inlined functions
    /// then the function they were inlined into.
    fn location(&mut self, group: &[Frame]) -> u64 {
        let lines: Vec<(u64, i64)> = group
            .iter()
            .map(|f| {
                let line = f.source.as_ref().map_or(0, |(_, l)| i64::from(*l));
                (self.function(f), line)
            })
            .collect();
        let object = group
            .last()
            .map_or_else(|| Arc::from(""), |f| Arc::clone(&f.object));
        let key = (object, lines);
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let id = self.location_list.len() as u64 + 1;
        let mapping_id = self.mapping(&key.0);
        self.location_list.push(pb::Location {
            id,
            mapping_id,
            address: 0,
            line: key
                .1
                .iter()
                .map(|&(function_id, line)| pb::Line { function_id, line })
                .collect(),
            is_folded: false,
        });
        self.locations.insert(key, id);
        id
    }
}

impl Builder<'_> {
    /// One stack of one thread, with the thread's labels (the string
    /// indexes of the keys `thread`, `tid` and `pid`).
    fn sample(&mut self, w: &Weighted<'_>, labels: [i64; 3], off_cpu_values: bool) -> pb::Sample {
        let mut location_id: Vec<u64> = walked_frames(&w.frames)
            .map(|group| self.location(group))
            .collect();
        if w.stop != StackStop::Complete {
            let incomplete = Frame {
                function: Arc::from(INCOMPLETE),
                object: Arc::from(""),
                source: None,
                inlined: false,
                jit: false,
                kernel: false,
            };
            location_id.push(self.location(std::slice::from_ref(&incomplete)));
        }
        let thread = self.strings.get(&w.thread);
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let (on, off) = match w.off_cpu {
            Some(_) => (0, w.tally.weight),
            None => (w.tally.weight, 0),
        };
        let mut value = vec![n(w.tally.samples), n(on)];
        if off_cpu_values {
            value.extend([n(off), n(w.tally.weight)]);
        }
        pb::Sample {
            location_id,
            value,
            label: vec![
                pb::Label {
                    key: labels[0],
                    str: thread,
                    ..pb::Label::default()
                },
                pb::Label {
                    key: labels[1],
                    num: i64::from(w.tid),
                    ..pb::Label::default()
                },
                pb::Label {
                    key: labels[2],
                    num: i64::from(w.pid),
                    ..pb::Label::default()
                },
            ],
        }
    }
}

/// The short name of the first file `profile` mapped.
fn first_file(profile: &Profile) -> Option<Arc<str>> {
    let m = profile
        .mappings
        .iter()
        .find(|m| crate::mapping::is_file(&m.path))?;
    let path = String::from_utf8_lossy(&m.path);
    Some(Arc::from(path.rsplit('/').next().unwrap_or(&path)))
}

/// Splits a stack's frames (innermost first) into walked frames: each
/// group ends with a frame that was not inlined into the next.
fn walked_frames(frames: &[Frame]) -> impl Iterator<Item = &[Frame]> {
    frames.split_inclusive(|f| !f.inlined)
}

/// Writes `samples` of `profile` as a gzipped pprof profile.
pub fn write_pprof(
    profile: &Profile,
    samples: &[Weighted<'_>],
    options: &PprofOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    let encoded = pprof_profile(profile, samples, options).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&encoded)?;
    gz.finish()?.flush()
}

/// The pprof profile of `samples`, not yet encoded.
#[must_use]
pub fn pprof_profile(
    profile: &Profile,
    samples: &[Weighted<'_>],
    options: &PprofOptions,
) -> pb::Profile {
    let files = object_files(profile);
    let mut b = Builder {
        strings: Strings::new(),
        functions: HashMap::new(),
        function_list: Vec::new(),
        locations: HashMap::new(),
        location_list: Vec::new(),
        mappings: HashMap::new(),
        mapping_list: Vec::new(),
        files: &files,
        inline_frames: samples.iter().any(|w| w.frames.iter().any(|f| f.inlined)),
    };
    let d = &profile.description;
    let (weight_type, weight_unit) = if d.event == "cpu-clock" || d.event.is_empty() {
        ("cpu", "nanoseconds")
    } else {
        (d.event.as_str(), "count")
    };
    let samples_type = pb::ValueType {
        r#type: b.strings.get("samples"),
        unit: b.strings.get("count"),
    };
    let weight_value = pb::ValueType {
        r#type: b.strings.get(weight_type),
        unit: b.strings.get(weight_unit),
    };
    let labels = [
        b.strings.get("thread"),
        b.strings.get("tid"),
        b.strings.get("pid"),
    ];
    // pprof takes the first mapping for the main binary: the first file
    // the recording mapped (a program's executable is mapped before its
    // libraries), where frames name it.
    if let Some(main) = first_file(profile) {
        if samples
            .iter()
            .any(|w| w.frames.iter().any(|f| f.object == main))
        {
            b.mapping(&main);
        }
    }
    let off_cpu = profile.has_off_cpu() && weight_unit == "nanoseconds";
    let pb_samples: Vec<pb::Sample> = samples
        .iter()
        .map(|w| b.sample(w, labels, off_cpu))
        .collect();
    let mut types = vec![samples_type, weight_value];
    if off_cpu {
        for name in ["off-cpu", "wall"] {
            types.push(pb::ValueType {
                r#type: b.strings.get(name),
                unit: b.strings.get("nanoseconds"),
            });
        }
    }
    let period = if weight_unit == "nanoseconds" && d.frequency > 0 {
        i64::try_from(1_000_000_000 / d.frequency).unwrap_or(0)
    } else {
        0
    };
    let mut comment = Vec::new();
    if let Some(c) = &options.comment {
        comment.push(b.strings.get(c));
    }
    if !d.command.is_empty() {
        comment.push(b.strings.get(&d.command_line()));
    }
    let recorded = format!(
        "recorded by {} on {} (Linux {})",
        d.recorder, d.host, d.kernel
    );
    comment.push(b.strings.get(&recorded));
    let duration = profile.end.unwrap_or(profile.last_time);
    pb::Profile {
        default_sample_type: types.last().map_or(0, |t| t.r#type),
        sample_type: types,
        sample: pb_samples,
        mapping: b.mapping_list,
        location: b.location_list,
        function: b.function_list,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: i64::try_from(d.start_realtime_ns).unwrap_or(0),
        duration_nanos: i64::try_from(duration).unwrap_or(0),
        period_type: Some(weight_value),
        period,
        comment,
        string_table: b.strings.table,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, inlined: bool) -> Frame {
        Frame {
            function: Arc::from(function),
            object: Arc::from("a.out"),
            source: None,
            inlined,
            jit: false,
            kernel: false,
        }
    }

    #[test]
    fn inlined_frames_share_the_location_of_the_frame_they_were_inlined_into() {
        let frames = [
            frame("memcpy", true),
            frame("copy", true),
            frame("printf", false),
            frame("main", false),
        ];
        let groups: Vec<Vec<&str>> = walked_frames(&frames)
            .map(|g| g.iter().map(|f| &*f.function).collect())
            .collect();
        assert_eq!(groups, [vec!["memcpy", "copy", "printf"], vec!["main"]]);
    }

    #[test]
    fn strings_are_stored_once_after_the_empty_one() {
        let mut s = Strings::new();
        assert_eq!(s.get("a"), 1);
        assert_eq!(s.get("b"), 2);
        assert_eq!(s.get("a"), 1);
        assert_eq!(s.get(""), 0);
        assert_eq!(s.table, ["", "a", "b"]);
    }
}
