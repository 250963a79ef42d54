//! A perf.data file made into an ichnos recording: its records, put in
//! time order as perf orders them, go through the recorder as the
//! kernel's would — `perf record --call-graph dwarf` samples unwound
//! with our rows (SFrame, `.eh_frame`, CFI) from their stack copies,
//! `perf record -g` samples kept as the kernel's frame-pointer chains —
//! and the recording is reported like any other.
//!
//! The processes are gone (or another now has their number): nothing is
//! read from `/proc` or process memory, only the records and the files
//! they mapped. The file is untrusted. The `linux-perf-data` crate reads
//! its header, attrs and feature sections, and sizes its buffers by what
//! the file claims: before it reads them, the header's sections, the
//! attrs' id sections and the feature sections it parses are checked
//! against the file's length ([`checks`]). The records are read here, in
//! place in the mapped file, each framed and checked as it is reached
//! and parsed by our own bounded parser ([`records`]); compressed records
//! (whose decompressed size nothing bounds) are refused. What is kept
//! while records wait for their turn is a few words each ([`rounds`]). A
//! second thread reads the records a little ahead of the walk, to take
//! the page faults and memory misses out of its way ([`read_ahead`]).

mod checks;
mod read_ahead;
mod records;
mod rounds;

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ichnos_data::{LostCause, Meta, Record, Target};
use ichnos_perf::record::{parse, SampleFormat};
use linux_perf_data::PerfFileReader;

use super::output::{self, Output};
use super::recorder::Recorder;

/// Why a perf.data file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfDataError {
    /// It could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Its header is not a perf.data header, or names sections past its
    /// end.
    #[error("{path} is not a readable perf.data file: {what}")]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        what: String,
    },
    /// The perf.data reader failed, at a byte of the data section where
    /// known.
    #[error("{path}: corrupt perf.data{}: {source}", at.map(|a| format!(" at byte {a}")).unwrap_or_default())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where in the file the data section's reading stopped.
        at: Option<u64>,
        /// The reader's error.
        source: linux_perf_data::Error,
    },
    /// The file was cut short while it was read: what was read past its
    /// new end was not the file.
    #[error("{path} was cut short while it was read")]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// The recording could not be written.
    #[error("cannot write the recording {path}: {source}")]
    Write {
        /// The recording.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What a conversion made: the recording's profile as a report reads it
/// (the same as reading the recording written), and what was found.
#[derive(Debug)]
pub struct PerfDataImport {
    /// The recording written, read.
    pub profile: crate::report::Profile,
    /// What the conversion found.
    pub summary: PerfDataSummary,
}

/// What a conversion found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfDataSummary {
    /// Samples converted.
    pub samples: u64,
    /// Of them, with a complete stack.
    pub complete: u64,
    /// Samples with neither registers nor a callchain, or records the
    /// parser refused.
    pub unreadable: u64,
    /// The event whose samples are the profile's.
    pub event: String,
    /// The other events' samples, left out: each event's name and count
    /// (a profile weighs one event's samples: nanoseconds of cpu-clock,
    /// page faults and cycles do not add up).
    pub left_out: Vec<(String, u64)>,
    /// Samples whose event id the header does not name, left out as the
    /// other events' are (of no event known, they are of no profile).
    pub unknown_id: u64,
    /// Samples whose kernel frames were left out, and why: the file's
    /// kernel is not the one running here, whose names would be wrong.
    pub kernel_frames_left_out: (u64, Option<String>),
    /// Samples of no program's time, left out: kernel threads', and
    /// threads' past their exit whose process had ended, without kernel
    /// frames.
    pub no_program: u64,
}

/// How often (in bytes of the data section walked past) the pages
/// already read are handed back.
const RELEASE_EVERY: usize = 4 << 20;

/// Converts the perf.data file `input` into an ichnos recording written to
/// `output` (opened by the caller, who chooses how safely: a temporary
/// file is best created new), named `output_name` in errors; hands back
/// the recording read, as [`crate::report::Profile::read`] would read it.
pub fn import_perf_data(
    input: &Path,
    output: File,
    output_name: &Path,
) -> Result<PerfDataImport, PerfDataError> {
    let io = |source| PerfDataError::Io {
        path: input.to_path_buf(),
        source,
    };
    // A FIFO, a directory or a device is refused without blocking, with
    // what it is; a file that cannot be opened is an I/O error.
    let mut file = ichnos_image::open_regular(input).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidInput {
            PerfDataError::Header {
                path: input.to_path_buf(),
                what: e.to_string(),
            }
        } else {
            io(e)
        }
    })?;
    let (data_offset, data_size) = checks::check_header(&mut file, input)?;
    let mtime = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0));
    let corrupt = |source| PerfDataError::Corrupt {
        path: input.to_path_buf(),
        at: None,
        source,
    };
    // The crate reads the header, the attrs and the feature sections;
    // the records are read here, where they lie.
    let PerfFileReader { perf_file, .. } =
        PerfFileReader::parse_file(BufReader::with_capacity(1 << 16, &file)).map_err(corrupt)?;
    let attributes = perf_file.event_attributes();
    let formats: Vec<SampleFormat> = attributes
        .iter()
        .map(|a| records::format_of(&a.attr))
        .collect();

    let attrs = records::Attrs::new(attributes);
    let data_end = usize::try_from(data_offset + data_size).map_err(|_| {
        io(std::io::Error::other(
            "the data section lies beyond what this machine can map",
        ))
    })?;
    // SAFETY: the bytes are read only through bounds-checked slices and
    // parsed as untrusted input; `faulted` is checked before the result
    // is used.
    let map = unsafe { ichnos_image::GuardedMap::map(&file, 0, data_end) }.map_err(io)?;
    let data = map
        .bytes()
        .get(usize::try_from(data_offset).unwrap_or(usize::MAX)..)
        .unwrap_or_default();
    let write = |source| PerfDataError::Write {
        path: output_name.to_path_buf(),
        source,
    };
    let (mut out, writer) = output::start_converting(output)
        .map_err(|e| write(std::io::Error::other(e.to_string())))?;
    describe(&mut out, &perf_file, mtime);
    let mut recorder = Recorder::offline(ichnos_code::UnwindOptions::default().max_frames, out);
    let release = perf_file.os_release().ok().flatten().unwrap_or_default();
    let mut converted = Converted::of(attributes, release);
    converted.build_ids = user_build_ids(&perf_file);
    let place = read_ahead::Place::new();
    let section = usize::try_from(data_offset).unwrap_or(0);
    let release = |range: std::ops::Range<usize>| {
        map.release(section + range.start..section + range.end);
    };
    let walked = std::thread::scope(|scope| {
        // The reader also hands the pages the walk is done with back to
        // the kernel, every RELEASE_EVERY bytes. Without the thread (none
        // could be made) the walk is slower, and hands them back itself.
        let reader = std::thread::Builder::new()
            .name("ichnos-read-ahead".into())
            .spawn_scoped(scope, || {
                read_ahead::run(data, &place, RELEASE_EVERY, &release);
            });
        let mut released = reader.is_err().then_some(0);
        // The reader ends with the walk, also a walk that panics.
        let _end = read_ahead::EndOnDrop(&place);
        records::walk(
            data,
            data_offset,
            &attrs,
            |below| {
                place.done_below(below);
                if let Some(from) = released.filter(|&from| below >= from + RELEASE_EVERY) {
                    release(from..below);
                    released = Some(below);
                }
            },
            |found| converted.record(&formats, found, &mut recorder),
        )
    });
    let walked = if map.faulted() {
        Err(PerfDataError::Changed {
            path: input.to_path_buf(),
        })
    } else {
        walked.map_err(|what| PerfDataError::Header {
            path: input.to_path_buf(),
            what,
        })
    };
    let (summary, written, profile) = finish(recorder, &converted, writer);
    walked?;
    written.map_err(write)?;
    Ok(PerfDataImport {
        profile: profile.unwrap_or_default(),
        summary,
    })
}

/// Names the idle task (pid and tid 0, whose samples `perf record -a`
/// takes on idle CPUs) `swapper`, as perf does, after its first sample
/// (at `time`, which made its process): the kernel sends no COMM record
/// for it.
fn name_idle_task(time: Option<u64>, recorder: &mut Recorder) {
    let comm = ichnos_perf::record::Comm {
        pid: 0,
        tid: 0,
        name: b"swapper",
        exec: false,
        sample_id: ichnos_perf::record::SampleId {
            pid: Some(0),
            tid: Some(0),
            time,
            ..ichnos_perf::record::SampleId::default()
        },
    };
    recorder.handle(&ichnos_perf::record::Record::Comm(comm), false);
}

/// The build ids the header of `perf_file` lists for user-space objects
/// and the vDSO (`[vdso]`, which a report names from its own where the
/// build is the same), by path (none where it lists none, or its list
/// cannot be read).
fn user_build_ids(perf_file: &linux_perf_data::PerfFile) -> HashMap<Vec<u8>, Vec<u8>> {
    use linux_perf_data::DsoKey;
    let listed = perf_file.build_ids().unwrap_or_default();
    // A 32-bit process's vDSO is mapped as `[vdso]` too: where the file
    // lists one, which build a `[vdso]` mapping is cannot be told.
    let vdso = !listed
        .keys()
        .any(|key| matches!(key, DsoKey::Vdso32 | DsoKey::VdsoX32));
    listed
        .into_iter()
        .filter(|(key, info)| {
            (matches!(key, DsoKey::User { .. }) || (vdso && *key == DsoKey::Vdso64))
                && !info.build_id.is_empty()
        })
        .map(|(_, info)| (info.path, info.build_id))
        .collect()
}

/// Ends the recording: the last JIT names, the records refused counted
/// lost, the end record; waits for the writer. What was converted, and
/// how the writing went.
fn finish(
    mut recorder: Recorder,
    converted: &Converted,
    writer: std::thread::JoinHandle<output::WriterResult>,
) -> (
    PerfDataSummary,
    output::WriterResult,
    Option<crate::report::Profile>,
) {
    let Converted {
        unreadable,
        unknown_id,
        last_time,
        ..
    } = converted;
    let (unreadable, unknown_id, last_time) = (*unreadable, *unknown_id, *last_time);
    recorder.finish(ichnos_perf::monotonic_ns());
    if unreadable > 0 {
        recorder
            .output
            .lost(last_time, 0, unreadable, LostCause::Unreadable);
    }
    let summary = PerfDataSummary {
        samples: recorder.samples,
        complete: recorder.complete,
        unreadable,
        event: converted
            .names
            .get(converted.shown)
            .cloned()
            .unwrap_or_default(),
        left_out: converted
            .names
            .iter()
            .zip(&converted.left_out)
            .filter(|&(_, &n)| n > 0)
            .map(|(name, &n)| (name.clone(), n))
            .collect(),
        unknown_id,
        kernel_frames_left_out: (
            recorder.kernel_frames_left_out,
            converted.kernel.clone().and_then(Result::err),
        ),
        no_program: recorder.off_cpu.kernel_threads,
    };
    let (written, profile) =
        recorder
            .output
            .end_with_profile(writer, last_time, recorder.lost + unreadable);
    (summary, written, profile)
}

/// What handing the records to the recorder has found so far.
#[derive(Clone, Default)]
struct Converted {
    /// Records our parser refused.
    unreadable: u64,
    /// Samples whose id the header does not name.
    unknown_id: u64,
    /// The event (attr) whose samples are kept ([`shown_event`]).
    shown: usize,
    /// Samples of each other event, left out.
    left_out: Vec<u64>,
    /// Each event's name.
    names: Vec<String>,
    /// Whether each event's samples are the profile's.
    kept: Vec<bool>,
    /// Each event's fixed sampling period (`perf record -c N`), if it has
    /// one: its samples carry no period of their own, and each weighs it.
    fixed_periods: Vec<Option<u64>>,
    /// The first record's time, which the recording's times count from.
    first_time: Option<u64>,
    last_time: u64,
    /// The kernel the file was recorded on, its release; then, once its
    /// text's mapping is read, whether it is the one running here (its
    /// frames then named as it names its functions), or why not.
    kernel_release: String,
    kernel: Option<Result<(), String>>,
    /// The build ids the file's header lists for user-space objects, by
    /// path: a mapping whose record carries none has its object's, so
    /// that a file rebuilt since is found changed (and perf's copy of the
    /// build recorded is used where it kept one), not read as the build
    /// recorded.
    build_ids: HashMap<Vec<u8>, Vec<u8>>,
    /// The idle task (pid 0) was named: the kernel sends no COMM record
    /// for it, and perf names it `swapper` itself.
    idle_named: bool,
}

impl Converted {
    /// Nothing converted yet of a file of events `attributes`, recorded
    /// on kernel release `kernel_release`.
    fn of(attributes: &[linux_perf_data::AttributeDescription], kernel_release: &str) -> Converted {
        let names: Vec<String> = attributes
            .iter()
            .map(|a| a.name().unwrap_or("perf event").to_owned())
            .collect();
        let shown = shown_event(attributes);
        // The shown event's samples, and those of the same event on the
        // CPU's other core types (a hybrid CPU's `cpu_core/cycles/` and
        // `cpu_atom/cycles/`: one event, counted by two PMUs).
        let kept = names
            .iter()
            .map(|n| names.get(shown).is_some_and(|s| same_event(s, n)))
            .collect();
        let fixed_periods = attributes.iter().map(fixed_period).collect();
        Converted {
            shown,
            kept,
            fixed_periods,
            left_out: vec![0; attributes.len()],
            names,
            kernel_release: kernel_release.to_owned(),
            ..Converted::default()
        }
    }

    /// Hands one record, in time order, to `recorder`.
    fn record(
        &mut self,
        formats: &[SampleFormat],
        found: records::Found<'_>,
        recorder: &mut Recorder,
    ) {
        let Some(attr) = found.attr else {
            self.unknown_id += 1;
            return;
        };
        let Some(format) = formats.get(attr) else {
            self.unreadable += 1;
            return;
        };
        match parse(format, found.bytes) {
            Ok(ichnos_perf::record::Record::Sample(_))
                if !self.kept.get(attr).copied().unwrap_or(false) =>
            {
                if let Some(n) = self.left_out.get_mut(attr) {
                    *n += 1;
                }
            }
            Ok(mut parsed) => {
                if let ichnos_perf::record::Record::Sample(s) = &mut parsed {
                    if s.period.is_none() {
                        s.period = self.fixed_periods.get(attr).copied().flatten();
                    }
                }
                if let ichnos_perf::record::Record::Mmap(m) = &mut parsed {
                    self.see_kernel(m, recorder);
                    if m.build_id.is_none() {
                        m.build_id = self.build_ids.get(m.filename).map(Vec::as_slice);
                    }
                }
                // Times count from the first record's (perf's records
                // for what ran before it started have none, or 0).
                if let Some(t) = parsed.time().filter(|&t| t > 0) {
                    if self.first_time.is_none() {
                        self.first_time = Some(t);
                        recorder.output.set_start(t);
                    }
                    self.last_time = self.last_time.max(t);
                }
                // The kernel's and its modules' mappings (pid -1) are seen
                // above; handed on, they made a process of pid -1.
                let kernels = matches!(
                    &parsed,
                    ichnos_perf::record::Record::Mmap(m) if m.pid == u32::MAX
                );
                if !kernels {
                    recorder.handle(&parsed, false);
                }
                if let ichnos_perf::record::Record::Sample(s) = &parsed {
                    if s.id.pid == Some(0) && !self.idle_named {
                        // After its first sample, which made its process.
                        self.idle_named = true;
                        name_idle_task(s.id.time, recorder);
                    }
                }
            }
            Err(_) => self.unreadable += 1,
        }
    }
}

impl Converted {
    /// Mapping `m`, where it is the kernel's text (`[kernel.kallsyms]_text`
    /// of no process, at the address of `_text`): whether that kernel is
    /// the one running here, the same release started at the same
    /// address (KASLR moves it at each boot), whose functions
    /// `/proc/kallsyms` then names; the recorder keeps kernel frames only
    /// then.
    fn see_kernel(&mut self, m: &ichnos_perf::record::Mmap<'_>, recorder: &mut Recorder) {
        if m.pid != u32::MAX
            || !m.filename.starts_with(b"[kernel.kallsyms]")
            || self.kernel.is_some()
        {
            return;
        }
        let (_, running) = crate::sys::uname();
        let here = super::kallsyms::running_kernel_text();
        let verdict = if self.kernel_release != running {
            Err(format!(
                "it was recorded on Linux {}, and this is Linux {running}",
                self.kernel_release
            ))
        } else if here != Some(m.pgoff) {
            Err(here.map_or_else(
                || "this kernel does not show where its text starts (/proc/kallsyms)".to_owned(),
                |here| {
                    format!(
                        "it was recorded on another boot of this kernel (its text at {:#x} then, at {here:#x} now)",
                        m.pgoff
                    )
                },
            ))
        } else {
            Ok(())
        };
        if verdict.is_ok() {
            recorder.kernel_symbols = Some(super::kernel_frames::KernelSymbols::default());
        }
        self.kernel = Some(verdict);
    }
}

/// The event whose samples make the profile: the first that is not
/// perf's `dummy` (which it adds to follow mappings and tasks, and which
/// samples nothing).
fn shown_event(attributes: &[linux_perf_data::AttributeDescription]) -> usize {
    use linux_perf_data::linux_perf_event_reader::{PerfEventType, SoftwareCounterType};
    attributes
        .iter()
        .position(|a| {
            !matches!(
                a.attr.type_,
                PerfEventType::Software(SoftwareCounterType::Dummy)
            )
        })
        .unwrap_or(0)
}

/// Whether events named `a` and `b` are one event, counted by two PMUs
/// of a hybrid CPU: `cpu_core/cycles/` and `cpu_atom/cycles/`, also with
/// modifiers (`cpu_core/cycles/u`) (perf names an event of a PMU
/// `pmu/event/modifiers`).
fn same_event(a: &str, b: &str) -> bool {
    let event = |name: &str| -> String {
        let mut parts = name.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(_pmu), Some(event), Some(modifiers)) => format!("{event}:{modifiers}"),
            _ => name.to_owned(),
        }
    };
    a == b || event(a) == event(b)
}

/// The fixed sampling period of an event recorded with one (`perf record
/// -c N`), whose samples carry none of their own.
fn fixed_period(attribute: &linux_perf_data::AttributeDescription) -> Option<u64> {
    match attribute.attr.sampling_policy {
        linux_perf_data::linux_perf_event_reader::SamplingPolicy::Period(p) => Some(p.get()),
        _ => None,
    }
}

/// Whether `attribute`'s event counts time in nanoseconds (the CPU or
/// task clock, whatever perf named it: `cpu-clock:u`, `cpu-clock:pppH`).
fn is_clock(attribute: &linux_perf_data::AttributeDescription) -> bool {
    use linux_perf_data::linux_perf_event_reader::{PerfEventType, SoftwareCounterType};
    matches!(
        attribute.attr.type_,
        PerfEventType::Software(SoftwareCounterType::CpuClock | SoftwareCounterType::TaskClock)
    )
}

/// The recording's description, from the perf.data header's features.
fn describe(out: &mut Output, perf_file: &linux_perf_data::PerfFile, mtime: u64) {
    let host = perf_file.hostname().ok().flatten().unwrap_or_default();
    let kernel = perf_file.os_release().ok().flatten().unwrap_or_default();
    let command: Vec<&str> = perf_file.cmdline().ok().flatten().unwrap_or_default();
    let attrs = perf_file.event_attributes();
    let shown = attrs.get(shown_event(attrs));
    let event = shown
        .and_then(|a| a.name())
        .unwrap_or("perf event")
        .to_owned();
    let (frequency, stack_size) = shown.map_or((0, 0), |a| {
        let frequency = match (a.attr.sampling_policy, fixed_period(a)) {
            (linux_perf_data::linux_perf_event_reader::SamplingPolicy::Frequency(f), _) => f,
            // A clock's fixed period is nanoseconds: samples a second,
            // where a second holds whole periods (a report counts a
            // clock's samples by its rate's period; else one a sample).
            (_, Some(period)) if is_clock(a) && 1_000_000_000 % period == 0 => {
                1_000_000_000 / period
            }
            _ => 0,
        };
        (frequency, u64::from(a.attr.sample_stack_user))
    });
    // When the first sample was taken, on the wall clock: from the clock
    // data perf keeps (the recording clock against the wall clock at one
    // instant), else from the file's last write less the samples' span.
    let range = perf_file.sample_time_range().ok().flatten();
    let start_realtime = match (perf_file.clock_data().ok().flatten(), range) {
        (Some(clock), Some(r)) => clock
            .wall_clock_ns
            .saturating_add(r.first_sample_time)
            .saturating_sub(clock.clockid_time_ns),
        (None, Some(r)) => {
            mtime.saturating_sub(r.last_sample_time.saturating_sub(r.first_sample_time))
        }
        _ => mtime,
    };
    let recorder = match perf_file.perf_version() {
        Ok(Some(v)) => format!("perf {v}"),
        _ => "perf".to_owned(),
    };
    out.meta(&Record::Meta(Meta {
        host: host.as_bytes(),
        kernel: kernel.as_bytes(),
        command: command.iter().take(1024).map(|a| a.as_bytes()).collect(),
        event: event.as_bytes(),
        frequency,
        stack_size,
        start_monotonic_ns: 0,
        start_realtime_ns: start_realtime,
        recorder: recorder.as_bytes(),
        target: Target::Command,
        off_cpu_event: b"",
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_of_two_core_types_is_one_event() {
        assert!(same_event("cpu_core/cycles/", "cpu_atom/cycles/"));
        assert!(same_event("cpu_core/cycles/u", "cpu_atom/cycles/u"));
        assert!(!same_event("cpu_core/cycles/u", "cpu_atom/cycles/k"));
        assert!(same_event("cpu-clock", "cpu-clock"));
        assert!(!same_event("cpu-clock", "page-faults"));
        assert!(!same_event("cpu_core/cycles/", "cpu_core/instructions/"));
    }

    fn sink() -> File {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap()
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_an_io_error_and_a_directory_is_no_perf_data() {
        let missing = import_perf_data(
            Path::new("/nonexistent/perf.data"),
            sink(),
            Path::new("out"),
        );
        assert!(
            matches!(&missing, Err(PerfDataError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound),
            "{missing:?}"
        );
        let dir = import_perf_data(Path::new("/tmp"), sink(), Path::new("out"));
        match dir {
            Err(e @ PerfDataError::Header { .. }) => {
                assert!(e.to_string().contains("directory"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}
