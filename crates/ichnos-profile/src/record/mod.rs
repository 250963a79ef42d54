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
mod model;
mod order;
mod output;
mod stack_tops;

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ichnos_code::elf::RowChoice;
use ichnos_code::{unwind_cached, FrameKind, Regs, StopReason, UnwindOptions};
use ichnos_data::{LostCause, Meta, Record, StackOut, StackStop, Target};
use ichnos_perf::attr::regs;
use ichnos_perf::record::{Record as PerfRecord, Sample, REGS_ABI_NONE};
use ichnos_perf::{monotonic_ns, realtime_ns, EventConfig, EventKind};
use stack_tops::StackTops;

pub use events::EventsError;
pub use intern::Interner;

use crate::launch::{self, Child, LaunchError};
use crate::sys::{Epoll, ExitStatus};
use model::Spaces;
use order::{Sorter, MARGIN_NS};
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
    /// Bytes of user stack copied per sample (a multiple of 8).
    pub stack_size: u32,
    /// The event.
    pub event: EventChoice,
    /// The recording to write.
    pub output: PathBuf,
    /// At most this many frames per stack.
    pub max_frames: usize,
    /// What to write as the recording's command line (default: the
    /// target command).
    pub command_line: Vec<OsString>,
}

impl RecordOptions {
    /// The defaults for `target`: 1 kHz, 16 KiB of stack per sample,
    /// cycles or the CPU clock, `ichnos.data`.
    #[must_use]
    pub fn new(target: RecordTarget) -> Self {
        Self {
            target,
            frequency: 1000,
            stack_size: DEFAULT_STACK_SIZE,
            event: EventChoice::Default,
            output: PathBuf::from("ichnos.data"),
            max_frames: 256,
            command_line: Vec::new(),
        }
    }
}

/// Bytes of user stack copied per sample by default. The kernel copies
/// this much whatever the stack holds, in the target's time, and the
/// recorder reads it: the cost grows with it. C call chains fit in a few
/// KiB; Rust programs keep tens of KiB of frames (ichnos's own report
/// uses 20 to 30 KiB), which 16 KiB cut short in four samples of five.
pub const DEFAULT_STACK_SIZE: u32 = 32 << 10;

/// The most user stack the kernel copies per sample (a sample record's
/// size is 16 bits, and the copy a multiple of 8).
pub const MAX_STACK_SIZE: u32 = 65_528;

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
    let mut moved = None;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        let mut old = path.as_os_str().to_owned();
        old.push(".old");
        std::fs::rename(path, &old).map_err(create)?;
        moved = Some(PathBuf::from(old));
    }
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

/// The processes' threads; each process must exist.
fn threads_of(pids: &[u32]) -> Result<Vec<u32>, RecordError> {
    let mut tids = Vec::new();
    for &pid in pids {
        let dir = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|_| RecordError::NoSuchProcess { pid })?;
        let mut mine: Vec<u32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
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
    tids: Vec<u32>,
}

fn prepare(options: &RecordOptions) -> Result<Prepared, RecordError> {
    Ok(match &options.target {
        RecordTarget::Command(command) => {
            let program = launch::resolve(command.first().ok_or(LaunchError::Empty)?)?;
            let (file, output) = create_output(&options.output)?;
            let held = launch::hold(&program, command).inspect_err(|_| output.abandon())?;
            Prepared {
                file,
                output,
                held: Some(held),
                tids: Vec::new(),
            }
        }
        RecordTarget::Pids(pids) => {
            crate::sys::raise_file_limit();
            let tids = threads_of(pids)?;
            let (file, output) = create_output(&options.output)?;
            Prepared {
                file,
                output,
                held: None,
                tids,
            }
        }
        RecordTarget::System => {
            let (file, output) = create_output(&options.output)?;
            Prepared {
                file,
                output,
                held: None,
                tids: Vec::new(),
            }
        }
    })
}

/// A refusal to attach to another user's process says so, rather than
/// blame `perf_event_paranoid` (which is not what stands in the way).
fn refusal(e: EventsError, target: &RecordTarget) -> RecordError {
    use std::os::unix::fs::MetadataExt;
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
    e.into()
}

/// The sampling event for `scope`.
fn event_config(options: &RecordOptions, scope: events::Scope<'_>) -> EventConfig {
    EventConfig {
        kind: match options.event {
            EventChoice::Default => EventKind::Cycles,
            EventChoice::Exactly(kind) => kind,
        },
        frequency: options.frequency,
        stack_user: options.stack_size,
        regs_user: EventConfig::UNWIND_REGS,
        inherit: !matches!(scope, events::Scope::System),
        enable_on_exec: matches!(scope, events::Scope::Command(_)),
        disabled: true,
        // A quarter of the ring: the recorder is woken well before it fills.
        wakeup_watermark: events::watermark(events::RING_PAGES),
        side_band: true,
        build_ids: true,
    }
}

/// What the user should know about how the events were set up.
fn notes(options: &RecordOptions, events: &events::Events) -> Vec<String> {
    let mut notes = Vec::new();
    if options.event == EventChoice::Default && events.kind == EventKind::CpuClock {
        notes.push(
            "no hardware cycle counter here (a virtual machine without a PMU?): sampling cpu-clock"
                .to_owned(),
        );
    }
    if events.pages < events::RING_PAGES {
        notes.push(format!(
            "the kernel limits locked memory: rings of {} KiB instead of {} KiB (see kernel.perf_event_mlock_kb)",
            events.pages * 4,
            events::RING_PAGES * 4
        ));
    }
    notes
}

/// The recording's first record.
fn describe(output: &mut Output, options: &RecordOptions, kind: EventKind, start: u64) {
    let (host, kernel) = crate::sys::uname();
    // Bounded: the whole description is one record.
    let command_line: Vec<Vec<u8>> = options
        .command_line
        .iter()
        .take(1024)
        .map(|a| a.as_encoded_bytes().iter().copied().take(4096).collect())
        .collect();
    let recorder = format!("ichnos {}", env!("CARGO_PKG_VERSION"));
    output.meta(&Record::Meta(Meta {
        host: host.as_bytes(),
        kernel: kernel.as_bytes(),
        command: command_line.iter().map(Vec::as_slice).collect(),
        event: kind.name().as_bytes(),
        frequency: options.frequency,
        stack_size: u64::from(options.stack_size),
        start_monotonic_ns: start,
        start_realtime_ns: realtime_ns(),
        recorder: recorder.as_bytes(),
        target: match options.target {
            RecordTarget::Command(_) => Target::Command,
            RecordTarget::Pids(_) => Target::Processes,
            RecordTarget::System => Target::System,
        },
    }));
}

/// Lets the held command exec, or enables the events of attached ones.
fn start_target(
    held: Option<launch::Held>,
    events: &events::Events,
) -> Result<Option<Child>, RecordError> {
    if let Some(held) = held {
        return Ok(Some(held.start()?));
    }
    for e in &events.opened {
        e.enable().map_err(|source| RecordError::Os {
            what: "enabling the events",
            source,
        })?;
    }
    Ok(None)
}

/// Records as `options` say until the command exits, the processes exit,
/// or `stop` is set (then a command is asked to end: SIGTERM after a
/// second, SIGKILL after three more). `status` is called about four times
/// a second.
pub fn record(
    options: &RecordOptions,
    stop: &AtomicBool,
    status: &mut dyn FnMut(&Status),
) -> Result<Summary, RecordError> {
    let Prepared {
        file,
        output: output_file,
        held,
        tids,
    } = prepare(options)?;
    let scope = match (&options.target, &held) {
        (RecordTarget::Command(_), Some(h)) => events::Scope::Command(h.pid()),
        (RecordTarget::Pids(_), _) => events::Scope::Threads(&tids),
        _ => events::Scope::System,
    };
    let mut events = events::open(
        scope,
        event_config(options, scope),
        options.event == EventChoice::Default,
    )
    .map_err(|e| refusal(e, &options.target))
    .inspect_err(|_| output_file.abandon())?;
    let notes = notes(options, &events);
    let start = monotonic_ns();
    let (mut output, writer) = output::start(file, start).inspect_err(|_| output_file.abandon())?;
    describe(&mut output, options, events.kind, start);
    let mut recorder = Recorder::new(options, output, &events);
    if let RecordTarget::Pids(pids) = &options.target {
        recorder.attach(pids, &tids, start);
    }
    let mut child = match start_target(held, &events) {
        Ok(child) => child,
        Err(e) => {
            let _ = close(recorder.output, writer, 0);
            output_file.abandon();
            return Err(e);
        }
    };
    let result = recorder.run(&mut events, child.as_mut(), options, stop, status);
    for e in &events.opened {
        let _ = e.disable();
    }
    recorder.drain(&mut events, u64::MAX);
    recorder.finish();
    let failed = result.is_err() || recorder.output.writer_failed() || recorder.output.overflowed;
    let overflowed = recorder.output.overflowed;
    let (output, complete, lost) = (recorder.output, recorder.complete, recorder.lost);
    let (past_copy, cut_short) = (recorder.past_copy, recorder.cut_short);
    let written = close(output, writer, lost);
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
    notes.extend(closing_notes(
        options.stack_size,
        samples,
        [past_copy, cut_short, oversized],
    ));
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
    })
}

/// The notes a recording ends with: stacks that went past the copy, or
/// that the recorder cut short, and records left out.
fn closing_notes(
    stack_size: u32,
    samples: u64,
    [past_copy, cut_short, oversized]: [u64; 3],
) -> Vec<String> {
    let mut notes = Vec::new();
    // More than the completeness the defaults aim at: say what helps.
    if samples > 0 && past_copy * 1000 > samples {
        let share = 100.0 * past_copy as f64 / samples as f64;
        notes.push(if stack_size < MAX_STACK_SIZE {
            format!(
                "{share:.1}% of stacks went on past the {} KiB of stack copied per sample: \
                 --stack-size {MAX_STACK_SIZE} copies the most the kernel allows",
                stack_size >> 10,
            )
        } else {
            format!(
                "{share:.1}% of stacks went on past the stack copied per sample (the kernel \
                 copies at most {MAX_STACK_SIZE} bytes, and stops at a stack page never touched)"
            )
        });
    }
    if samples > 0 && cut_short * 1000 > samples {
        notes.push(format!(
            "{cut_short} stacks reached above where their threads' earlier stacks ended and \
             were cut short (those threads' stacks are now kept whole)"
        ));
    }
    if oversized > 0 {
        notes.push(format!(
            "{oversized} records larger than {} KiB were left out",
            output::MAX_RECORD >> 10
        ));
    }
    notes
}

/// Writes the end record and waits for the writer: (samples written,
/// samples dropped, bytes of the file).
fn close(
    mut output: Output,
    writer: std::thread::JoinHandle<output::WriterResult>,
    lost: u64,
) -> std::io::Result<(u64, u64, u64, u64)> {
    let (samples, dropped, oversized) = (output.samples, output.dropped, output.oversized);
    let now = monotonic_ns();
    output.tell_drops(now);
    output.meta(&Record::End {
        time: output.rel(now),
        samples,
        lost: lost + dropped,
    });
    output.close(&writer);
    let bytes = writer
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")))?;
    Ok((samples, dropped, bytes, oversized))
}

fn pid_of(tid: u32, pids: &[u32]) -> Option<u32> {
    pids.iter()
        .copied()
        .find(|pid| Path::new(&format!("/proc/{pid}/task/{tid}")).exists())
}

/// When a recording is over.
#[derive(Debug, Default)]
struct Ending {
    stop_since: Option<Instant>,
    /// Signals sent to a command that outlived a stop.
    signalled: u8,
    last_alive_check: Option<Instant>,
}

impl Ending {
    /// Whether the recording is over: the command ended, or the processes
    /// attached to did, or a stop was asked for. A command that outlives
    /// a stop by a second is sent SIGTERM, and SIGKILL three seconds
    /// later; the recording ends when it does.
    fn over(
        &mut self,
        child: Option<&mut Child>,
        target: &RecordTarget,
        stop: &AtomicBool,
    ) -> bool {
        let stopping = stop.load(Ordering::Relaxed);
        let Some(child) = child else {
            if stopping {
                return true;
            }
            if let RecordTarget::Pids(pids) = target {
                if self
                    .last_alive_check
                    .is_none_or(|t| t.elapsed() >= Duration::from_millis(500))
                {
                    self.last_alive_check = Some(Instant::now());
                    return pids.iter().all(|&p| !crate::sys::alive(p));
                }
            }
            return false;
        };
        if child.try_wait().ok().flatten().is_some() {
            return true;
        }
        if stopping {
            let since = self.stop_since.get_or_insert_with(Instant::now).elapsed();
            if since >= Duration::from_secs(1) && self.signalled == 0 {
                child.signal(libc::SIGTERM);
                self.signalled = 1;
            }
            if since >= Duration::from_secs(4) && self.signalled == 1 {
                child.signal(libc::SIGKILL);
                self.signalled = 2;
            }
        }
        false
    }
}

/// The recorder's state while running.
struct Recorder {
    spaces: Spaces,
    interner: Interner,
    output: Output,
    sorter: Sorter,
    /// Where a record that wraps the end of a ring is put together.
    scratch: Vec<u8>,
    /// Where each thread's stacks end: a sample's stack is kept only
    /// below it.
    stack_tops: StackTops,
    options: UnwindOptions,
    frames: Vec<ichnos_code::Frame>,
    stack: Vec<u64>,
    samples: u64,
    complete: u64,
    /// Samples whose stack went on past the bytes the kernel copied.
    past_copy: u64,
    /// Samples whose stack was cut short by the recorder (its thread's
    /// frames reached higher than its complete stacks had).
    cut_short: u64,
    lost: u64,
}

impl Recorder {
    /// Describes the processes attached to, as they are now.
    fn attach(&mut self, pids: &[u32], tids: &[u32], now: u64) {
        for &pid in pids {
            self.spaces.get_or_synthesize(pid, now, &mut self.output);
        }
        for &tid in tids {
            if let Some(pid) = pid_of(tid, pids) {
                self.spaces.know_thread(pid, tid, now, &mut self.output);
            }
        }
    }

    fn new(options: &RecordOptions, output: Output, events: &events::Events) -> Self {
        let formats = events
            .rings
            .iter()
            .map(|(_, event)| events.opened[*event].format())
            .collect();
        Self {
            spaces: Spaces::new(RowChoice::SframeThenEhFrame),
            interner: Interner::default(),
            output,
            sorter: Sorter::new(formats),
            scratch: Vec::new(),
            stack_tops: StackTops::default(),
            options: UnwindOptions {
                max_frames: options.max_frames,
                frame_pointer_fallback: true,
            },
            frames: Vec::with_capacity(options.max_frames),
            stack: Vec::with_capacity(options.max_frames),
            samples: 0,
            complete: 0,
            past_copy: 0,
            cut_short: 0,
            lost: 0,
        }
    }

    /// The main loop: until the command or the processes are gone, or a
    /// stop is asked for.
    fn run(
        &mut self,
        events: &mut events::Events,
        mut child: Option<&mut Child>,
        options: &RecordOptions,
        stop: &AtomicBool,
        status: &mut dyn FnMut(&Status),
    ) -> Result<(), RecordError> {
        let os = |what| move |source| RecordError::Os { what, source };
        let epoll = Epoll::new().map_err(os("epoll"))?;
        // Every event, not only those that own a ring: an event whose
        // tasks are gone hangs up while the others keep writing into its
        // CPU's ring, and each one's readiness is that ring's.
        for (i, event) in events.opened.iter().enumerate() {
            epoll
                .add(event.as_fd().as_raw_fd(), i as u64)
                .map_err(os("epoll"))?;
        }
        let exit_fd = child.as_ref().and_then(|c| c.exit_fd().ok());
        if let Some(fd) = &exit_fd {
            epoll.add(fd.as_raw_fd(), u64::MAX).map_err(os("epoll"))?;
        }
        let started = Instant::now();
        let mut last_status = Instant::now();
        let mut ending = Ending::default();
        let mut ready = Vec::with_capacity(64);
        loop {
            epoll.wait(100, &mut ready).map_err(os("epoll"))?;
            for &(token, hung_up) in &ready {
                // Rings are drained each round whoever woke; an event whose
                // tasks are gone stays ready for ever, so it leaves the set.
                if let (true, Some(event)) = (hung_up, events.opened.get(token as usize)) {
                    let _ = epoll.remove(event.as_fd().as_raw_fd());
                }
            }
            let now = monotonic_ns();
            self.drain(events, now.saturating_sub(MARGIN_NS));
            if self.output.writer_failed() || self.output.overflowed {
                if let Some(c) = child.as_deref_mut() {
                    c.signal(libc::SIGTERM);
                }
                return Ok(());
            }
            if last_status.elapsed() >= Duration::from_millis(250) {
                last_status = Instant::now();
                status(&Status {
                    elapsed: started.elapsed(),
                    samples: self.samples,
                    lost: self.lost + self.output.dropped,
                    processes: self.spaces.by_pid.len(),
                });
            }
            if ending.over(child.as_deref_mut(), &options.target, stop) {
                return Ok(());
            }
        }
    }

    /// Reads every ring and handles the records at or before `up_to`.
    fn drain(&mut self, events: &mut events::Events, up_to: u64) {
        let now = monotonic_ns();
        let mut broken = 0;
        for (i, (ring, _)) in events.rings.iter_mut().enumerate() {
            let (sorter, tops) = (&mut self.sorter, &mut self.stack_tops);
            let read = ring.read_records(&mut self.scratch, |record| {
                let ended =
                    sorter.stage_record(record, i as u16, now, |sample| tops.needed(sample));
                if let Some(tid) = ended {
                    tops.end(tid);
                }
            });
            broken += u64::from(read.broken);
        }
        if broken > 0 {
            // The rest of a read whose framing broke is dropped: count it.
            self.lost += broken;
            self.output.lost(now, 0, broken, LostCause::Unreadable);
        }
        let mut sorter = std::mem::take(&mut self.sorter);
        sorter.release(up_to, |record, staged| {
            self.handle(record, staged.stack_cut);
        });
        self.sorter = sorter;
        // JIT code can be named after its first samples (a runtime writes
        // its perf map late): look again while the processes live, not
        // only when a new stack comes.
        for space in self.spaces.by_pid.values_mut() {
            space.capture_jit_names(&mut self.output, now, false);
        }
        self.output.tell_drops(now);
    }

    /// Names JIT code still unnamed, while the processes live.
    fn finish(&mut self) {
        let now = monotonic_ns();
        for space in self.spaces.by_pid.values_mut() {
            space.capture_jit_names(&mut self.output, now, true);
        }
    }

    fn handle(&mut self, record: &PerfRecord<'_>, stack_cut: bool) {
        match record {
            PerfRecord::Sample(s) => self.sample(s, stack_cut),
            PerfRecord::Mmap(m) if m.executable => {
                let time = m.sample_id.time.unwrap_or_else(monotonic_ns);
                self.spaces.map(
                    m.pid,
                    m.addr..m.addr.saturating_add(m.len),
                    m.pgoff,
                    m.filename,
                    m.build_id,
                    time,
                    &mut self.output,
                );
            }
            PerfRecord::Comm(c) => {
                let time = c.sample_id.time.unwrap_or_else(monotonic_ns);
                if c.exec {
                    // A new program: a new stack.
                    self.stack_tops.ended(c.tid);
                }
                if c.exec && c.pid == c.tid {
                    self.spaces.begin(c.pid, c.name, time, &mut self.output);
                }
                self.spaces
                    .name_thread(c.pid, c.tid, c.name, time, &mut self.output);
            }
            PerfRecord::Fork(f) => {
                if f.pid == f.tid && f.pid != f.ppid {
                    self.spaces
                        .fork(f.pid, f.ppid, f.tid, f.time, &mut self.output);
                } else if let Some((_, name)) = self.spaces.threads.get(&f.ptid).cloned() {
                    self.spaces
                        .name_thread(f.pid, f.tid, &name, f.time, &mut self.output);
                } else {
                    self.spaces
                        .know_thread(f.pid, f.tid, f.time, &mut self.output);
                }
            }
            PerfRecord::Exit(e) => {
                self.spaces.exit(e.pid, e.tid, e.time, &mut self.output);
                self.stack_tops.ended(e.tid);
            }
            PerfRecord::Lost(l) => {
                self.lost += l.lost;
                let time = l.sample_id.time.unwrap_or_else(monotonic_ns);
                let cpu = l.sample_id.cpu.unwrap_or(0);
                self.output.lost(time, cpu, l.lost, LostCause::KernelRing);
            }
            PerfRecord::LostSamples(l) => {
                self.lost += l.lost;
                let time = l.sample_id.time.unwrap_or_else(monotonic_ns);
                let cpu = l.sample_id.cpu.unwrap_or(0);
                self.output
                    .lost(time, cpu, l.lost, LostCause::KernelSamples);
            }
            PerfRecord::Throttle(t) | PerfRecord::Unthrottle(t) => {
                let throttled = matches!(record, PerfRecord::Throttle(_));
                let rel = self.output.rel(t.time);
                self.output.meta(&Record::Throttle {
                    time: rel,
                    cpu: u64::from(t.sample_id.cpu.unwrap_or(0)),
                    throttled,
                });
            }
            _ => {}
        }
    }

    fn sample(&mut self, s: &Sample<'_>, stack_cut: bool) {
        let (Some(pid), Some(tid), Some(time)) = (s.id.pid, s.id.tid, s.id.time) else {
            return;
        };
        // A writer that is behind would be handed the sample's new stack
        // to keep back, and the sample itself dropped: drop it whole.
        if self.output.behind() {
            self.output.drop_sample();
            return;
        }
        let cpu = s.id.cpu.unwrap_or(0);
        let regs = s.regs_user.filter(|r| r.abi != REGS_ABI_NONE);
        let Some(regs) = regs.and_then(|r| {
            Some(Regs {
                ip: r.get(regs::IP)?,
                sp: r.get(regs::SP)?,
                fp: r.get(regs::BP)?,
            })
        }) else {
            self.lost += 1;
            self.output.lost(time, cpu, 1, LostCause::NoUserRegisters);
            return;
        };
        let stack = s.stack_user.unwrap_or_default();
        self.spaces.get_or_synthesize(pid, time, &mut self.output);
        self.spaces.know_thread(pid, tid, time, &mut self.output);
        let space = self.spaces.by_pid.get_mut(&pid).expect("made above");
        let mut stop = walk(space, regs, stack, &self.options, &mut self.frames);
        if stop != StopReason::Outermost
            && self
                .frames
                .iter()
                .any(|f| space.may_be_jit(f.lookup_address()))
            && space.take_refresh(time)
        {
            let jit = space.refresh_jit();
            let mapped = self.spaces.resync(pid, time, &mut self.output);
            if jit || mapped {
                let space = self.spaces.by_pid.get_mut(&pid).expect("still there");
                stop = walk(space, regs, stack, &self.options, &mut self.frames);
            }
        }
        let space = self.spaces.by_pid.get_mut(&pid).expect("still there");
        // A frame-pointer chain through code that does not keep one reads
        // whatever rbp holds: a "return address" in no mapping is not one,
        // and the stack ends before it rather than with made-up frames.
        let mut stop = stack_stop(stop);
        if let Some(bad) = self
            .frames
            .iter()
            .position(|f| f.kind == FrameKind::FramePointer && !space.is_mapped(f.lookup_address()))
        {
            self.frames.truncate(bad);
            stop = StackStop::NoUnwindInfo;
        }
        self.stack.clear();
        self.stack.extend(self.frames.iter().map(|f| match f.kind {
            // Stored plus one so that "minus one" finds the instruction.
            FrameKind::Interrupted => f.ip.wrapping_add(1),
            _ => f.ip,
        }));
        let (id, new) = self.interner.intern(space.asid, stop, &self.stack);
        if new {
            self.output.meta(&Record::StackOut(StackOut {
                id: u64::from(id),
                asid: space.asid,
                stop,
                frames: &self.stack,
            }));
            space.note_jit_frames(&self.stack, &mut self.output, time);
        }
        let rel = self.output.rel(time);
        self.output.sample(&Record::Sample {
            time: rel,
            pid: u64::from(pid),
            tid: u64::from(tid),
            cpu: u64::from(cpu),
            stack: u64::from(id),
            weight: s.period.unwrap_or(1),
        });
        self.samples += 1;
        match stop {
            StackStop::Complete => {
                self.complete += 1;
                if let Some(outermost) = self.frames.last() {
                    self.stack_tops.learn(tid, outermost.sp);
                }
            }
            // Cut too soon: this thread's stacks are copied whole from now.
            StackStop::StackEnd if stack_cut => {
                self.cut_short += 1;
                self.stack_tops.never_cut(tid);
            }
            StackStop::StackEnd => self.past_copy += 1,
            _ => {}
        }
    }
}

fn walk(
    space: &mut model::AddressSpace,
    regs: Regs,
    stack: &[u8],
    options: &UnwindOptions,
    frames: &mut Vec<ichnos_code::Frame>,
) -> StopReason {
    unwind_cached(
        &space.code,
        regs,
        stack,
        &mut space.image,
        options,
        &mut space.cache,
        frames,
    )
}

fn stack_stop(stop: StopReason) -> StackStop {
    match stop {
        StopReason::Outermost => StackStop::Complete,
        StopReason::StackEnd { .. } => StackStop::StackEnd,
        StopReason::NoUnwindInfo { .. } => StackStop::NoUnwindInfo,
        StopReason::Loop => StackStop::Loop,
        StopReason::DepthLimit => StackStop::DepthLimit,
        StopReason::BadAddress => StackStop::BadAddress,
    }
}
