//! `ichnos record`: sampling a command, processes or the whole machine,
//! unwinding every sample as it arrives, and writing the recording.
//!
//! ```text
//! kernel rings (one per CPU) ──drain on wakeup──► Sorter (time order)
//!   ──► Spaces: mmap/comm/fork/exit build each process's Image + CodeMap
//!   ──► sample: unwind (SFrame, .eh_frame rows, CFI, JIT tables) ──► Interner
//!   ──► Output: encoded records ──region-table buffer──► writer thread ──► file
//! ```
//!
//! The recorder's thread drains the rings when the kernel wakes it (the
//! ring's watermark, through epoll) or at least every 100 ms, and handles
//! each sample without allocating once its buffers have grown.

#[cfg(test)]
mod alloc_test;
mod events;
mod intern;
mod kallsyms;
mod kernel_frames;
mod live_stack;
#[cfg(test)]
mod live_stack_test;
mod model;
mod notes;
mod off_cpu;
mod order;
mod output;
mod perf_data;
mod recorder;
#[cfg(test)]
mod recorder_test;
mod stack_tops;
#[cfg(test)]
mod test_sample;
mod untouched;

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ichnos_data::{Meta, Record, Target};
use ichnos_perf::{monotonic_ns, realtime_ns, EventConfig, EventKind};
use recorder::Recorder;

pub use events::EventsError;
pub use intern::Interner;
pub use perf_data::{import_perf_data, PerfDataError, PerfDataImport, PerfDataSummary};

use crate::launch::{self, Child, LaunchError};
use crate::sys::ExitStatus;
use output::Output;

/// Whom to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordTarget {
    /// Run this command (program first) and record it, its threads and
    /// its children.
    Command(Vec<OsString>),
    /// Attach to these running processes (all their threads).
    Pids(Vec<u32>),
    /// Every process on the machine.
    System,
}

/// Which event triggers samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventChoice {
    /// Hardware cycles where the machine has a PMU, else the CPU clock.
    Default,
    /// This one.
    Exactly(EventKind),
}

/// How to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Whom.
    pub target: RecordTarget,
    /// Samples per second per thread.
    pub frequency: u64,
    /// Bytes of user stack copied per sample (a multiple of 8). `None`:
    /// [`default_stack_size`], or [`LOCK_LIMITED_STACK_SIZE`] where the
    /// kernel's limit on locked memory leaves rings too small for enough
    /// samples of it.
    pub stack_size: Option<u32>,
    /// The event.
    pub event: EventChoice,
    /// The recording to write.
    pub output: PathBuf,
    /// At most this many frames per stack.
    pub max_frames: usize,
    /// What to write as the recording's command line (default: the
    /// target command).
    pub command_line: Vec<OsString>,
    /// Record where threads wait: each switch off a CPU sampled with its
    /// stack, and the time until the thread runs again. Samples the CPU
    /// clock, so that time on and off CPUs add up.
    pub off_cpu: bool,
    /// Where a stack goes on past the bytes the kernel copied, read the
    /// rest from the thread's memory, and keep it if the memory still
    /// holds the end of the copy ([`recorder`]'s `live_stack`).
    pub stack_reads: bool,
    /// With [`RecordTarget::Pids`] or [`RecordTarget::System`]: a command
    /// run once the events are on, whose run bounds the recording (as
    /// `perf record -a -- sleep 5`); the exit status is its. It is
    /// recorded as any process is with [`RecordTarget::System`], not with
    /// [`RecordTarget::Pids`].
    pub workload: Option<Vec<OsString>>,
}

impl RecordOptions {
    /// The defaults for `target`: 1 kHz, the default stack copy, cycles
    /// or the CPU clock, `ichnos.data`.
    #[must_use]
    pub fn new(target: RecordTarget) -> Self {
        Self {
            target,
            frequency: 1000,
            stack_size: None,
            event: EventChoice::Default,
            output: PathBuf::from("ichnos.data"),
            max_frames: DEFAULT_MAX_FRAMES,
            command_line: Vec::new(),
            off_cpu: false,
            stack_reads: true,
            workload: None,
        }
    }
}

/// Bytes of user stack copied per sample by default, tried first: the
/// most the kernel copies ([`MAX_STACK_SIZE`]) where rings of the planned
/// size for each of the machine's CPUs gather enough samples a wakeup (up
/// to 32 CPUs), else [`LOCK_LIMITED_STACK_SIZE`]. Where the kernel then
/// allows rings too small for enough of its samples (a user's locked
/// memory is limited by `perf_event_mlock_kb` unless it has
/// `CAP_IPC_LOCK`, as root has outside a user namespace, or
/// `perf_event_paranoid` is -1), a recording takes
/// [`LOCK_LIMITED_STACK_SIZE`].
///
/// The kernel copies a stack up to the end of its mapping, so a shallow
/// stack costs no more with a larger copy; a deep one (a compiler's:
/// clang 95% complete stacks at 32 KiB, 99.3% at the most; a Rust build
/// 78% and 94%) costs the target about 0.4 points more of its time
/// (BENCHMARKS.md). But the ring reserves the whole copy asked for, for
/// every sample, so the larger copy halves the samples a ring of a given
/// size holds; where locked memory is limited (`perf_event_mlock_kb`,
/// 516 KiB a CPU by default) rings stay small, and the smaller copy keeps
/// more samples between the recorder's wakeups.
#[must_use]
pub fn default_stack_size() -> u32 {
    let cpus = ichnos_perf::online_cpus().len().max(1);
    if events::wakeups_gather_enough(MAX_STACK_SIZE, cpus) {
        MAX_STACK_SIZE
    } else {
        LOCK_LIMITED_STACK_SIZE
    }
}

/// Bytes of user stack copied per sample by default where locked memory
/// is limited. C call chains fit in a few KiB; Rust programs keep tens of
/// KiB of frames (ichnos's own report uses 20 to 30 KiB), which 16 KiB cut
/// short in four samples of five.
pub const LOCK_LIMITED_STACK_SIZE: u32 = 32 << 10;

/// The most user stack the kernel copies per sample (a sample record's
/// size is 16 bits, and the copy a multiple of 8).
pub const MAX_STACK_SIZE: u32 = 65_528;

/// The frames a stack keeps by default: deeper ones are cut there,
/// with a note (perf's default, `kernel.perf_event_max_stack`, is 127).
pub const DEFAULT_MAX_FRAMES: usize = 256;

/// The most frames a stack may be asked to keep: a stack of them (and
/// the kernel's) is a record well below the largest one written.
pub const MAX_FRAMES: usize = 16_384;

/// What the status line shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Since the start.
    pub elapsed: Duration,
    /// Samples recorded.
    pub samples: u64,
    /// Samples and records lost.
    pub lost: u64,
    /// Processes alive.
    pub processes: usize,
}

/// What a finished recording holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// How long it ran.
    pub duration: Duration,
    /// Samples recorded.
    pub samples: u64,
    /// Samples whose stack reached the outermost frame.
    pub complete: u64,
    /// Samples and records lost (by the kernel or the recorder).
    pub lost: u64,
    /// The recording.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The event that was sampled.
    pub event: EventKind,
    /// How the launched command ended.
    pub exit: Option<ExitStatus>,
    /// Things the user should know (a fallback, a smaller ring).
    pub notes: Vec<String>,
    /// Off-CPU time, where it was recorded.
    pub off_cpu: Option<OffCpuSummary>,
}

/// What a recording holds of off-CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpuSummary {
    /// The event that sampled threads leaving their CPUs.
    pub event: EventKind,
    /// Intervals off a CPU recorded.
    pub intervals: u64,
    /// Of the switch samples, those whose stack reached the outermost
    /// frame.
    pub complete: u64,
}

/// Why a recording failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The command could not be run.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The events could not be set up.
    #[error(transparent)]
    Events(#[from] EventsError),
    /// A process to attach to does not exist.
    #[error("process {pid} does not exist")]
    NoSuchProcess {
        /// The process.
        pid: u32,
    },
    /// A process to attach to has exited, and its parent has not yet
    /// reaped it: it runs nothing any more.
    #[error(
        "process {pid} has exited (a zombie its parent has not reaped): it runs nothing to sample"
    )]
    Exited {
        /// The process.
        pid: u32,
    },
    /// A process to attach to is a kernel thread: it runs no user code,
    /// which is what is sampled.
    #[error("process {pid} ({name}) is a kernel thread: it runs no user code to sample")]
    KernelThread {
        /// The process.
        pid: u32,
        /// Its name.
        name: String,
    },
    /// Profiling another user's process was refused.
    #[error("cannot profile process {pid}: it belongs to another user (uid {uid}); profiling it needs root, or CAP_PERFMON and CAP_SYS_PTRACE")]
    NotOurs {
        /// The process.
        pid: u32,
        /// Its owner.
        uid: u32,
    },
    /// The recording could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Writing the recording failed (a full disk); what was written
    /// before is readable.
    #[error("cannot write {}: {source} (the recording holds what was written before)", path.display())]
    Write {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Off-CPU time asked for with an event that does not count time.
    #[error("--off-cpu needs the cpu-clock event, so that time on and off the CPUs adds up; {event} counts something else")]
    OffCpuEvent {
        /// The event asked for.
        event: EventKind,
    },
    /// The buffer to the writer could not be made.
    #[error("cannot set up the recording buffer: {0}")]
    Buffer(#[from] ichnos_buf::topa::AllocError),
    /// A system call of the recorder failed.
    #[error("{what}: {source}")]
    Os {
        /// Which.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Moves an existing recording aside to `FILE.old`, as perf does, and
/// creates `path`.
fn create_output(path: &Path) -> Result<(File, OutputFile), RecordError> {
    let create = |source| RecordError::Create {
        path: path.to_path_buf(),
        source,
    };
    // The rename makes FILE.old: its failure is named by it (a directory
    // of that name, say).
    let moved = crate::output::move_aside(path)
        .map_err(|(path, source)| RecordError::Create { path, source })?;
    let file = File::create(path).map_err(create)?;
    Ok((
        file,
        OutputFile {
            path: path.to_path_buf(),
            old: moved,
        },
    ))
}

/// The recording being made, and the one it moved aside.
#[derive(Debug)]
struct OutputFile {
    path: PathBuf,
    old: Option<PathBuf>,
}

impl OutputFile {
    /// A recording that never started leaves nothing behind: the new file
    /// goes, and the one moved aside comes back.
    fn abandon(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_file()) {
            let _ = std::fs::remove_file(&self.path);
            if let Some(old) = &self.old {
                let _ = std::fs::rename(old, &self.path);
            }
        }
    }
}

/// The processes `ids` name, each once: an id may be a thread's (the
/// kernel lists every thread under `/proc`, and its `Tgid` is its
/// process), and each must exist.
fn processes_of(ids: &[u32]) -> Result<Vec<u32>, RecordError> {
    let mut pids: Vec<u32> = Vec::with_capacity(ids.len());
    for &id in ids {
        let status = std::fs::read_to_string(format!("/proc/{id}/status"))
            .map_err(|_| RecordError::NoSuchProcess { pid: id })?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let pid = field("Tgid:").and_then(|v| v.parse().ok()).unwrap_or(id);
        // (Its first thread a zombie, the others may run on.)
        if field("State:").is_some_and(|s| s.starts_with('Z')) && !crate::sys::alive(pid) {
            return Err(RecordError::Exited { pid });
        }
        // (Kthread: since Linux 6.4; before, a kernel thread's
        // /proc/PID/exe cannot be read either.)
        if field("Kthread:") == Some("1") {
            return Err(RecordError::KernelThread {
                pid,
                name: field("Name:").unwrap_or_default().to_owned(),
            });
        }
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The processes' threads; each process must exist.
fn threads_of(pids: &[u32]) -> Result<Vec<u32>, RecordError> {
    let mut tids = Vec::new();
    for &pid in pids {
        let dir = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|_| RecordError::NoSuchProcess { pid })?;
        // Not the zombies: a first thread that has exited while the
        // others run on cannot have an event opened on it.
        let mut mine: Vec<u32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&tid| crate::sys::task_alive(pid, tid))
            .collect();
        mine.sort_unstable();
        tids.extend(mine);
    }
    Ok(tids)
}

/// What is set up before anything runs: everything that can fail for a
/// reason of the user's is checked first.
struct Prepared {
    file: File,
    output: OutputFile,
    held: Option<launch::Held>,
    /// The processes attached to (`-p`), each once.
    pids: Vec<u32>,
    tids: Vec<u32>,
}

fn prepare(options: &RecordOptions) -> Result<Prepared, RecordError> {
    if let (true, EventChoice::Exactly(event)) = (options.off_cpu, options.event) {
        if event != EventKind::CpuClock {
            return Err(RecordError::OffCpuEvent { event });
        }
    }
    Ok(match &options.target {
        RecordTarget::Command(command) => {
            let program = launch::resolve(command.first().ok_or(LaunchError::Empty)?)?;
            let (file, output) = create_output(&options.output)?;
            let held = launch::hold(&program, command).inspect_err(|_| output.abandon())?;
            Prepared {
                file,
                output,
                held: Some(held),
                pids: Vec::new(),
                tids: Vec::new(),
            }
        }
        RecordTarget::Pids(ids) => {
            crate::sys::raise_file_limit();
            let pids = processes_of(ids)?;
            let tids = threads_of(&pids)?;
            let program = workload_program(options)?;
            let (file, output) = create_output(&options.output)?;
            Prepared {
                file,
                held: hold_workload(options, program.as_deref(), &output)?,
                output,
                pids,
                tids,
            }
        }
        RecordTarget::System => {
            let program = workload_program(options)?;
            let (file, output) = create_output(&options.output)?;
            Prepared {
                file,
                held: hold_workload(options, program.as_deref(), &output)?,
                output,
                pids: Vec::new(),
                tids: Vec::new(),
            }
        }
    })
}

/// The program of the workload that bounds an attached or machine-wide
/// recording, found before anything is made.
fn workload_program(options: &RecordOptions) -> Result<Option<std::path::PathBuf>, RecordError> {
    match &options.workload {
        Some(command) => Ok(Some(launch::resolve(
            command.first().ok_or(LaunchError::Empty)?,
        )?)),
        None => Ok(None),
    }
}

/// The workload held until the events are on (the output given up if it
/// cannot be).
fn hold_workload(
    options: &RecordOptions,
    program: Option<&std::path::Path>,
    output: &OutputFile,
) -> Result<Option<launch::Held>, RecordError> {
    let (Some(program), Some(command)) = (program, &options.workload) else {
        return Ok(None);
    };
    match launch::hold(program, command) {
        Ok(held) => Ok(Some(held)),
        Err(e) => {
            output.abandon();
            Err(e.into())
        }
    }
}

/// A refusal to attach to another user's process says so, rather than
/// blame `perf_event_paranoid` (which is not what stands in the way); one
/// to sample in the kernel for off-CPU time, where the paranoid setting
/// keeps users to user space (2 and above), says that.
fn refusal(e: EventsError, options: &RecordOptions) -> RecordError {
    use std::os::unix::fs::MetadataExt;
    let target = &options.target;
    if let (
        EventsError::Open(ichnos_perf::OpenError::Permission { .. }),
        RecordTarget::Pids(pids),
    ) = (&e, target)
    {
        let me = crate::sys::euid();
        for &pid in pids {
            if let Ok(meta) = std::fs::metadata(format!("/proc/{pid}")) {
                if meta.uid() != me {
                    return RecordError::NotOurs {
                        pid,
                        uid: meta.uid(),
                    };
                }
            }
        }
    }
    match e {
        EventsError::Open(source @ ichnos_perf::OpenError::Permission { paranoid, .. })
            if options.off_cpu
                && !matches!(target, RecordTarget::System)
                && paranoid.is_none_or(|p| p >= 2) =>
        {
            EventsError::OffCpuPermission { paranoid, source }.into()
        }
        other => other.into(),
    }
}

/// Opens the events of `scope` as `options` say: the default stack copy
/// gives way to [`LOCK_LIMITED_STACK_SIZE`] where the rings allowed are
/// too small for it.
fn open_events(
    options: &RecordOptions,
    scope: events::Scope<'_>,
) -> Result<events::Events, RecordError> {
    events::open(
        scope,
        event_config(options, scope),
        // Cycles asked for or by default fall back to the CPU clock where
        // there is no PMU, with a note, as perf's do.
        options.event != EventChoice::Exactly(EventKind::CpuClock),
        options
            .stack_size
            .is_none()
            .then_some(LOCK_LIMITED_STACK_SIZE),
        options.off_cpu,
    )
    .map_err(|e| refusal(e, options))
}

/// The sampling event for `scope`.
fn event_config(options: &RecordOptions, scope: events::Scope<'_>) -> EventConfig {
    EventConfig {
        kind: match options.event {
            // Time on the CPU, to add to time off it.
            EventChoice::Default if options.off_cpu => EventKind::CpuClock,
            EventChoice::Default => EventKind::Cycles,
            EventChoice::Exactly(kind) => kind,
        },
        frequency: options.frequency,
        stack_user: options.stack_size.unwrap_or_else(default_stack_size),
        regs_user: EventConfig::UNWIND_REGS,
        inherit: !matches!(scope, events::Scope::System),
        enable_on_exec: matches!(scope, events::Scope::Command(_)),
        disabled: true,
        // Set by events::open to a quarter of the rings it maps: the
        // recorder is woken well before one fills.
        wakeup_watermark: 0,
        side_band: true,
        build_ids: true,
        context_switches: options.off_cpu,
        // Time in the kernel (system calls, page faults), sampled where
        // the kernel allows it (events::open falls back to user space
        // only); time on and off CPUs add up only if it counts.
        kernel: true,
        // With the kernel's own frames above the user code that entered
        // it, named from /proc/kallsyms as the recording ends.
        kernel_stacks: ichnos_perf::event::kernel_stack_frames(),
        // Every task on a CPU: not its idle task.
        exclude_idle: matches!(scope, events::Scope::System),
        identify: options.off_cpu,
    }
}

/// The recording's first record.
fn describe(output: &mut Output, options: &RecordOptions, events: &events::Events, start: u64) {
    let (host, kernel) = crate::sys::uname();
    // Bounded: the whole description is one record, well within the
    // largest the output takes (a description over it would be dropped,
    // and the recording would not say what it is).
    let command_line =
        ichnos_data::bounded_command(options.command_line.iter().map(|a| a.as_encoded_bytes()));
    let recorder = format!("ichnos {}", env!("CARGO_PKG_VERSION"));
    output.meta(&Record::Meta(Meta {
        host: host.as_bytes(),
        kernel: kernel.as_bytes(),
        command: command_line,
        event: events.kind.name().as_bytes(),
        frequency: options.frequency,
        stack_size: u64::from(events.stack_user),
        start_monotonic_ns: start,
        start_realtime_ns: realtime_ns(),
        recorder: recorder.as_bytes(),
        target: match options.target {
            RecordTarget::Command(_) => Target::Command,
            RecordTarget::Pids(_) => Target::Processes,
            RecordTarget::System => Target::System,
        },
        off_cpu_event: events.off_cpu_kind.map_or("", EventKind::name).as_bytes(),
    }));
}

/// Lets the held command exec (its events come on at the exec), or
/// enables the events of attached processes or the machine, then lets
/// the held workload exec, if there is one.
fn start_target(
    target: &RecordTarget,
    held: Option<launch::Held>,
    events: &events::Events,
) -> Result<Option<Child>, RecordError> {
    if !matches!(target, RecordTarget::Command(_)) {
        for e in &events.opened {
            e.enable().map_err(|source| RecordError::Os {
                what: "enabling the events",
                source,
            })?;
        }
    }
    held.map(launch::Held::start)
        .transpose()
        .map_err(Into::into)
}

/// Records as `options` say until the command (or the workload) exits,
/// the processes exit, or `stop` is set (then a command is asked to end:
/// SIGTERM after a second, SIGKILL after three more). `status` is called
/// about four times a second.
pub fn record(
    options: &RecordOptions,
    stop: &AtomicBool,
    status: &mut dyn FnMut(&Status),
) -> Result<Summary, RecordError> {
    let Prepared {
        file,
        output: output_file,
        held,
        pids,
        tids,
    } = prepare(options)?;
    let scope = match (&options.target, &held) {
        (RecordTarget::Command(_), Some(h)) => events::Scope::Command(h.pid()),
        (RecordTarget::Pids(_), _) => events::Scope::Threads(&tids),
        _ => events::Scope::System,
    };
    let mut events = open_events(options, scope).inspect_err(|_| output_file.abandon())?;
    let notes = notes::setup_notes(options, &events);
    let start = monotonic_ns();
    let (mut output, writer) = output::start(file, start).inspect_err(|_| output_file.abandon())?;
    describe(&mut output, options, &events, start);
    let mut recorder = Recorder::new(options, output, &events);
    if matches!(options.target, RecordTarget::Pids(_)) {
        recorder.attach(&pids, &tids, start);
    }
    let mut child = match start_target(&options.target, held, &events) {
        Ok(child) => child,
        Err(e) => {
            let _ = close(recorder.output, writer, 0);
            output_file.abandon();
            return Err(e);
        }
    };
    let result = recorder.run(&mut events, child.as_mut(), stop, status);
    for e in &events.opened {
        let _ = e.disable();
    }
    recorder.drain(&mut events, u64::MAX);
    // The recording's end: what finishing it takes (naming JIT code and
    // the kernel's functions) is not recorded time.
    let stopped = monotonic_ns();
    recorder.finish(stopped);
    let failed = result.is_err() || recorder.output.writer_failed() || recorder.output.overflowed;
    let overflowed = recorder.output.overflowed;
    let recorder_notes = notes::recorder_notes(&recorder);
    let (output, complete, lost) = (recorder.output, recorder.complete, recorder.lost);
    let (past_copy, cut_short, at_frame_limit, max_frames) = (
        recorder.past_copy,
        recorder.cut_short,
        recorder.at_frame_limit,
        recorder.options.max_frames,
    );
    let off_cpu = events.off_cpu_kind.map(|event| OffCpuSummary {
        event,
        intervals: output.off_cpu,
        complete: recorder.off_cpu.complete,
    });
    let written = close_at(output, writer, lost, stopped);
    // A recording that failed does not leave its command running.
    let exit = match child.as_mut() {
        Some(c) if failed => Some(c.terminate(Duration::from_secs(2))),
        Some(c) => Some(c.wait_blocking()),
        None => None,
    }
    .transpose()
    .map_err(|source| RecordError::Os {
        what: "waiting for the command",
        source,
    })?;
    result?;
    let (samples, dropped, bytes, oversized) = written.map_err(|source| RecordError::Write {
        path: options.output.clone(),
        source,
    })?;
    if overflowed {
        return Err(RecordError::Write {
            path: options.output.clone(),
            source: std::io::Error::other(format!(
                "writing fell more than {} MiB behind the recording (is the output stalled?); \
                 what was written reads back",
                output::MAX_BACKLOG >> 20
            )),
        });
    }
    let mut notes = notes;
    notes.extend(notes::closing_notes(
        events.stack_user,
        events.stack_user_gave_way || events.rings_limited(),
        samples,
        [past_copy, cut_short, oversized],
        (at_frame_limit, max_frames),
    ));
    notes.extend(recorder_notes);
    Ok(Summary {
        duration: Duration::from_nanos(monotonic_ns() - start),
        samples,
        complete,
        lost: lost + dropped,
        path: options.output.clone(),
        bytes,
        event: events.kind,
        exit,
        notes,
        off_cpu,
    })
}

/// Writes the end record and waits for the writer: (samples written,
/// samples dropped, bytes of the file).
fn close(
    output: Output,
    writer: std::thread::JoinHandle<output::WriterResult>,
    lost: u64,
) -> std::io::Result<(u64, u64, u64, u64)> {
    close_at(output, writer, lost, monotonic_ns())
}

/// [`close`], with the recording's end at `end`.
fn close_at(
    mut output: Output,
    writer: std::thread::JoinHandle<output::WriterResult>,
    lost: u64,
    end: u64,
) -> std::io::Result<(u64, u64, u64, u64)> {
    let (samples, dropped, oversized) = (output.samples, output.dropped, output.oversized);
    output.tell_drops(end);
    let bytes = output.end(writer, end, lost + dropped)?;
    Ok((samples, dropped, bytes, oversized))
}
