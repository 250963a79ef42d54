//! `ichnos trace`: the recorder. It listens on a socket in a private
//! directory, runs the command with the runtime preloaded, takes each
//! traced process's shared buffer as the process connects, and turns the
//! frames that arrive in it into `Calls` records: functions interned as
//! one-frame stacks of the process's address space (whose mappings are
//! read from `/proc/PID/maps` while it lives), times kept in ticks with
//! the clock's readings at the start and the end.
//!
//! The recorder is a subreaper, so that a traced process's children stay
//! its children when their parent exits: the trace ends when every
//! process has exited and every connection has been drained.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ichnos_data::wire::FRAME_HEADER_BYTES;
use ichnos_data::{CallEventsEncoder, ClockSource, Meta, Record, Target};
use ichnos_profile::launch::{self, LaunchError};
use ichnos_profile::ExitStatus;
use rustc_hash::{FxHashMap, FxHashSet};

mod audit;
mod conn;
mod elf;
mod frames;
#[cfg(test)]
mod frames_test;
pub mod fuzzing;
mod side_band;

use crate::filter::{self, FilterError};
use crate::{clock, socket, sys};
use conn::{comm, service, Conn};

/// How often the clock is read into the recording while tracing.
const CLOCK_EVERY: Duration = Duration::from_secs(1);

/// When the clock is read the second time: soon, so that a trace cut
/// short (the recorder killed, the file truncated) still has two
/// readings to time its ticks by (a rate from 50 ms of both clocks is
/// good to a few parts per million).
const SECOND_CLOCK_AFTER: Duration = Duration::from_millis(50);

/// The recording's Zstandard level: 1, not the default 3. The recorder
/// turns each event into the recording as fast as a program makes them
/// (tens of millions a second), on a CPU the program may need; where it
/// falls behind, the program waits for room in its shared buffer. On 10
/// million traced calls, level 1 cut the program's time by 3% for a file
/// up to 5% larger (BENCHMARKS.md, issue 16).
const ZSTD_LEVEL: i32 = 1;

/// Records a reading of the trace clock.
fn clock_reading(out: &mut Out) -> Result<(), TraceError> {
    let (ticks, mono) = clock::pair(out.tsc);
    out.push(&Record::Clock {
        ticks,
        time: mono.saturating_sub(out.start_ns),
        source: if out.tsc {
            ClockSource::Tsc
        } else {
            ClockSource::Monotonic
        },
    })
}

/// What to trace and how.
#[derive(Clone, Debug)]
pub struct TraceOptions {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// The recording to write (an existing one is kept as `FILE.old`).
    pub output: PathBuf,
    /// The runtime library to preload.
    pub preload: PathBuf,
    /// Bytes per thread buffer (`-b`); `None`: the runtime's default.
    pub buffer: Option<u64>,
    /// Flight recorder: bytes per thread ring (`--ring`).
    pub ring: Option<u64>,
    /// Deepest call depth traced (`-D`).
    pub depth: Option<u32>,
    /// Calls shorter than this many nanoseconds are left out as the
    /// program runs (`-t`), with the calls they made.
    pub min_duration: Option<u64>,
    /// Trace only the calls inside functions these patterns name (`-F`).
    pub only: Vec<String>,
    /// Leave out the functions these patterns name, and their calls
    /// (`-N`).
    pub not: Vec<String>,
    /// Use `CLOCK_MONOTONIC` even where the TSC is invariant.
    pub monotonic: bool,
    /// Compress the recording on a thread of its own (`None`: where the
    /// recorder may use three CPUs or more).
    pub compress_on_a_thread: Option<bool>,
}

/// How a trace went.
#[derive(Clone, Debug)]
pub struct TraceSummary {
    /// From the command's start to the last process's end.
    pub duration: Duration,
    /// Events recorded (entries, exits, probes).
    pub events: u64,
    /// Events lost (counted by the runtime, or in frames that were
    /// damaged).
    pub lost: u64,
    /// Processes that connected (by process id: one that execs is one).
    pub processes: usize,
    /// Threads that sent events.
    pub threads: usize,
    /// The recording.
    pub output: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The command's exit status.
    pub status: ExitStatus,
    /// Ticks were the TSC.
    pub tsc: bool,
    /// Processes whose shared buffer could not be read, with why.
    pub refused: Vec<String>,
    /// The command's program is linked statically: it runs without the
    /// dynamic linker, which is what loads the tracing runtime.
    pub static_program: bool,
    /// Processes still running when a stop (Ctrl-C) ended the trace after
    /// the command had ended: what they did after that is not traced.
    pub left_running: Vec<u32>,
    /// Processes that ended before their runtime handed their threads'
    /// last buffers over (killed by SIGKILL, or ended in a way the
    /// runtime does not see), by id: their last events are missing, how
    /// many is not known.
    pub cut_short: Vec<u32>,
}

/// What the status line shows while a trace runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStatus {
    /// Since the command started.
    pub elapsed: Duration,
    /// Events recorded so far.
    pub events: u64,
    /// Events lost so far.
    pub lost: u64,
    /// Processes connected now.
    pub processes: usize,
}

/// How often the status is given.
const STATUS_EVERY: Duration = Duration::from_millis(250);

/// Why a trace could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The command could not be started.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The runtime library is not there.
    #[error("the tracing runtime {} is missing (build it with `cargo build --release -p ichnos-preload`, or point ICHNOS_PRELOAD at it)", path.display())]
    NoRuntime {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The recording could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The recording.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing the recording failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The recording.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The recorder's socket could not be set up.
    #[error("cannot set up the recorder's socket: {0}")]
    Socket(io::Error),
    /// A function filter could not be resolved.
    #[error(transparent)]
    Filter(#[from] FilterError),
}

impl TraceOptions {
    /// Options for a recording written from frames read from elsewhere
    /// (the fuzz target, tests): nothing is run.
    fn offline(output: &Path) -> TraceOptions {
        TraceOptions {
            command: vec!["offline".into()],
            output: output.to_path_buf(),
            preload: output.with_extension("so"),
            buffer: None,
            ring: None,
            depth: None,
            min_duration: None,
            only: Vec::new(),
            not: Vec::new(),
            monotonic: true,
            compress_on_a_thread: Some(false),
        }
    }
}

/// The recording being written.
struct Out {
    writer: ichnos_data::Writer<BufWriter<File>>,
    path: PathBuf,
    start_ns: u64,
    tsc: bool,
    /// The block of events being encoded (its allocation kept).
    encoder: CallEventsEncoder,
    /// Functions numbered since a block was last written (the vector
    /// kept from frame to frame).
    new_functions: Vec<(u64, u64)>,
    functions: FxHashMap<(u64, u64), u64>,
    /// The functions looked up last, by their address's slot: (address
    /// space, address, number); address space 0 is no one's. A number,
    /// once given, stays, so an entry never goes stale.
    recent_functions: Box<[(u64, u64, u64); frames::RECENT_FUNCTIONS]>,
    next_stack: u64,
    next_asid: u64,
    threads: FxHashSet<(u32, u32)>,
    /// Threads (process, thread id) with frames of events since their
    /// last frame, each with its latest frame's time.
    open_threads: FxHashMap<(u32, u32), u64>,
    /// Span names written, by address space and address.
    span_names: FxHashSet<(u64, u64)>,
    /// Entries, exits (spans' too) and probes written: what a reader
    /// shows (the `setjmp`, `longjmp` and catch events that keep depths
    /// right are not counted; a program built without instrumentation
    /// sends them too; nor are the events a ring saved again repeats).
    kept: u64,
    /// What each thread's flight-recorder rings sent so far hold, by
    /// process and thread: a ring saved again is counted for its new
    /// events only, as a reader reads it.
    rings: FxHashMap<(u32, u32), crate::ring_repeats::RingSeen>,
    /// The names thread-name frames gave, by process and thread: a name
    /// sent again (with each ring saved) is written once.
    thread_names: FxHashMap<(u32, u32), [u8; 16]>,
    lost: u64,
    /// Processes that connected, by id: a program that execs another
    /// connects again from the same process.
    processes: FxHashSet<u32>,
    refused: Vec<String>,
    /// Processes that ended without their runtime's last word
    /// ([`ichnos_data::wire::FRAME_END`]), by id.
    cut_short: Vec<u32>,
    /// Bytes read from a shared buffer at a time ([`read_piece`]).
    read_piece: u64,
}

impl Out {
    fn push(&mut self, record: &Record<'_>) -> Result<(), TraceError> {
        self.writer
            .push(record)
            .map_err(|source| TraceError::Write {
                path: self.path.clone(),
                source,
            })
    }

    fn time(&self) -> u64 {
        clock::monotonic_ns().saturating_sub(self.start_ns)
    }
}

/// Runs `options.command` under the tracing runtime and records it.
/// `stop` (set by Ctrl-C) passes SIGINT on to the command, and ends the
/// trace as [`Ending`] says.
pub fn trace(
    options: &TraceOptions,
    stop: &AtomicBool,
    status: &mut dyn FnMut(&TraceStatus),
) -> Result<TraceSummary, TraceError> {
    let program = launch::resolve(options.command.first().ok_or(LaunchError::Empty)?)?;
    let filters = filter::resolve(&program, &options.only, &options.not)?;
    if !options.preload.is_file() {
        return Err(TraceError::NoRuntime {
            path: options.preload.clone(),
        });
    }
    let dir = PrivateDir::new().map_err(TraceError::Socket)?;
    let sock_path = dir.path.join("socket");
    let listener = socket::listen(&sock_path).map_err(TraceError::Socket)?;
    let tsc = !options.monotonic && clock::tsc_is_invariant();
    let mut out = open_output(&options.output, options, tsc)?;
    let mut env = runtime_env(options, &sock_path, tsc);
    env.extend(filters.env());
    env.extend(audit::tunables(&program, &options.preload));
    clock_reading(&mut out)?;
    sys::become_subreaper();
    let started = Instant::now();
    let held = launch::hold_with_env(&program, &options.command, &env)?;
    let main_pid = held.pid();
    // Each traced process holds two of the recorder's descriptors (its
    // socket, its shared buffer): a build of hundreds of processes needs
    // more than the usual soft limit. Raised after the fork, so that the
    // program keeps the limits it was given.
    sys::raise_descriptor_limit();
    let _child = held.start()?;
    let (status, left_running) = serve(&listener, &mut out, main_pid, stop, started, status)?;
    let duration = started.elapsed();
    clock_reading(&mut out)?;
    let end = out.time();
    out.push(&Record::End {
        time: end,
        samples: out.kept,
        lost: out.lost,
    })?;
    let Out {
        writer,
        path,
        kept,
        lost,
        threads,
        processes,
        refused,
        cut_short,
        ..
    } = out;
    let file = writer
        .finish()
        .and_then(|w| w.into_inner().map_err(io::IntoInnerError::into_error))
        .map_err(|source| TraceError::Write {
            path: path.clone(),
            source,
        })?;
    file.sync_all().ok();
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    Ok(TraceSummary {
        duration,
        events: kept,
        lost,
        processes: processes.len(),
        threads: threads.len(),
        output: path,
        bytes,
        status,
        tsc,
        refused,
        static_program: elf::statically_linked(&program),
        left_running,
        cut_short,
    })
}

/// The command, as a turn of the recorder ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    /// Not reaped yet.
    Running,
    /// Reaped in this turn, after its look at the connections.
    JustEnded,
    /// Reaped before this turn's look.
    Ended,
}

/// How a stop (Ctrl-C, SIGTERM) ends a trace. The command is passed
/// SIGINT; one still running a second later is sent SIGTERM, and SIGKILL
/// three seconds after that, as `record` treats it. Once the command has
/// ended and its own connection is read to its end, the processes it left
/// running (a daemon; those in the terminal's process group had the
/// Ctrl-C themselves) are not waited for past a second from the stop, or
/// three while they keep handing buffers over, or five in all: the trace
/// ends with what they had handed over, and they run on.
#[derive(Debug, Default)]
struct Ending {
    stop_since: Option<Instant>,
    /// Signals sent to the command since the stop.
    signalled: u8,
}

impl Ending {
    /// Whether the trace may end now though processes still run: the
    /// command itself has ended before this turn's look (`command`), its
    /// connection is read to its end (`command_connected` false: it
    /// closes once read past the process's end) and a second has passed
    /// since the stop, and then no buffer was found with anything
    /// (`busy` false), or three seconds have passed; or five, whatever
    /// holds the command's connection open. Signals the command as the
    /// time since the stop says while it runs.
    fn over(
        &mut self,
        stop: &AtomicBool,
        main_pid: u32,
        command: Command,
        command_connected: bool,
        busy: bool,
    ) -> bool {
        if !stop.load(Ordering::Relaxed) {
            return false;
        }
        let since = self.stop_since.get_or_insert_with(Instant::now).elapsed();
        match command {
            Command::Running => {}
            // Reaped after this turn's look: the next one reads it to its end.
            Command::JustEnded => return false,
            Command::Ended => {
                let secs = |n| Duration::from_secs(n);
                return since >= secs(5)
                    || (!command_connected && since >= secs(1) && (!busy || since >= secs(3)));
            }
        }
        let (signal, after) = match self.signalled {
            0 => (libc::SIGINT, Duration::ZERO),
            1 => (libc::SIGTERM, Duration::from_secs(1)),
            2 => (libc::SIGKILL, Duration::from_secs(4)),
            _ => return false,
        };
        if since >= after {
            sys::kill(main_pid, signal);
            self.signalled += 1;
        }
        false
    }
}

/// Serves the traced processes until every one has exited and every
/// connection is drained, or a stop ends the trace ([`Ending`]); the
/// command's exit status, and the processes left running.
fn serve(
    listener: &OwnedFd,
    out: &mut Out,
    main_pid: u32,
    stop: &AtomicBool,
    started: Instant,
    show: &mut dyn FnMut(&TraceStatus),
) -> Result<(ExitStatus, Vec<u32>), TraceError> {
    let mut conns: Vec<Conn> = Vec::new();
    let mut status = None;
    let mut ending = Ending::default();
    let mut clock_at = Instant::now();
    let mut clock_every = SECOND_CLOCK_AFTER;
    let mut status_at = Instant::now();
    loop {
        if clock_at.elapsed() >= clock_every {
            // A trace cut short still has two readings to time it by.
            clock_at = Instant::now();
            clock_every = CLOCK_EVERY;
            clock_reading(out)?;
        }
        if status_at.elapsed() >= STATUS_EVERY {
            status_at = Instant::now();
            show(&TraceStatus {
                elapsed: started.elapsed(),
                events: out.kept,
                lost: out.lost,
                processes: conns.len(),
            });
        }
        // Whether the command had ended before this turn's look: one
        // reaped after it is looked at once more (reaped only once its
        // descriptors are closed, its connection's end is seen then; and
        // reaped after the look, not before, so that the look finds its
        // /proc entry, which names its threads).
        let ended_before_look = status.is_some();
        accept_all(listener, &mut conns)?;
        let mut busy = conn::greet(&mut conns, out)?;
        for conn in &mut conns {
            busy |= service(conn, out)?;
        }
        // However a connection ends (the process gone, or refused), the
        // ends of its program held for it are written.
        for conn in conns.iter_mut().filter(|c| c.closed) {
            frames::end_of_connection(conn, out)?;
        }
        conns.retain(|c| !c.closed);
        for (pid, s) in sys::reap_children() {
            if pid == main_pid {
                status = Some(s);
            }
        }
        let command = match (status.is_some(), ended_before_look) {
            (false, _) => Command::Running,
            (true, false) => Command::JustEnded,
            (true, true) => Command::Ended,
        };
        let command_connected = conns.iter().any(|c| c.pid == main_pid);
        if ending.over(stop, main_pid, command, command_connected, busy) {
            // Everything handed over so far is in (or, from a process that
            // keeps writing, two seconds more of it): what the processes
            // still connected hold back is theirs (they find the recorder
            // gone at their next hand-over, and run on untraced). A
            // connection whose process has not said who it is yet (pid 0)
            // is no process to name, nor the command's, once it has ended
            // (its socket kept open by a child made without fork's
            // handlers).
            let ended = |p: u32| p == 0 || (p == main_pid && status.is_some());
            let left_running: Vec<u32> =
                conns.iter().map(|c| c.pid).filter(|&p| !ended(p)).collect();
            for conn in &mut conns {
                frames::end_of_connection(conn, out)?;
            }
            return Ok((status.unwrap_or(ExitStatus::Code(0)), left_running));
        }
        if status.is_some() && conns.is_empty() && !sys::has_children() {
            // A connection made just before the last exit is in the
            // listener's queue: one more look, and it is served.
            if accept_all(listener, &mut conns)? == 0 {
                break;
            }
            continue;
        }
        if !busy {
            sleep(listener, &conns);
        }
    }
    Ok((status.unwrap_or(ExitStatus::Code(0)), Vec::new()))
}

/// Sleeps until a process connects, one ends or says something (its
/// runtime sends [`wire::WAKE`] when its buffer has regions to read or a
/// thread waits for room, while its consumer is armed), or
/// [`LOOK_AGAIN`] passes (for what lies below a wakeup's worth). Every
/// buffer was found empty just before.
fn sleep(listener: &OwnedFd, conns: &[Conn]) {
    let mut armed = Vec::with_capacity(conns.len());
    for conn in conns {
        if let Some(consumer) = &conn.consumer {
            match consumer.arm() {
                Some(a) => armed.push(a),
                // Written meanwhile: no sleep.
                None => return,
            }
        }
    }
    // A process running on without its socket is woken for by its end.
    let watched = conns.iter().map(|c| match &c.pidfd {
        Some(pidfd) if c.end_by == conn::EndBy::Pidfd => pidfd.as_raw_fd(),
        _ => c.socket.as_raw_fd(),
    });
    sys::wait_readable(
        std::iter::once(listener.as_raw_fd()).chain(watched),
        LOOK_AGAIN,
    );
}

/// How long the recorder sleeps at most between turns: what the
/// processes wrote below a wakeup watermark waits at most this long.
const LOOK_AGAIN: Duration = Duration::from_millis(2);

/// Wake-ups read from one process's socket at most in a turn.
const WAKES_A_TURN: usize = 64;

/// Takes every connection waiting on `listener` into `conns`; how many.
fn accept_all(listener: &OwnedFd, conns: &mut Vec<Conn>) -> Result<usize, TraceError> {
    let mut n = 0;
    while let Some(socket) = socket::accept(listener).map_err(TraceError::Socket)? {
        conns.push(Conn::new(socket));
        n += 1;
    }
    Ok(n)
}

/// The variables that tell the runtime where the recorder is and what
/// to do.
fn runtime_env(options: &TraceOptions, socket: &Path, tsc: bool) -> Vec<(OsString, OsString)> {
    let mut preload = options.preload.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut env = vec![
        (OsString::from("LD_PRELOAD"), preload),
        (
            OsString::from("ICHNOS_TRACE_SOCKET"),
            socket.as_os_str().to_owned(),
        ),
        (
            OsString::from("ICHNOS_TRACE_CLOCK"),
            OsString::from(if tsc { "tsc" } else { "monotonic" }),
        ),
    ];
    let mut number = |name: &str, v: Option<u64>| {
        if let Some(v) = v {
            env.push((OsString::from(name), OsString::from(v.to_string())));
        }
    };
    number("ICHNOS_TRACE_BUFFER", options.buffer);
    number("ICHNOS_TRACE_RING", options.ring);
    number("ICHNOS_TRACE_DEPTH", options.depth.map(u64::from));
    let min_ticks = options
        .min_duration
        .filter(|&ns| ns > 0)
        .map(|ns| clock::ns_to_ticks(ns, tsc));
    number("ICHNOS_TRACE_MIN_TICKS", min_ticks);
    env
}

fn open_output(path: &Path, options: &TraceOptions, tsc: bool) -> Result<Out, TraceError> {
    let create = |source| TraceError::Create {
        path: path.to_path_buf(),
        source,
    };
    // The rename makes FILE.old: its failure is named by it (a directory
    // of that name, say).
    ichnos_profile::output::move_aside(path)
        .map_err(|(path, source)| TraceError::Create { path, source })?;
    let file = File::create(path).map_err(create)?;
    let mut writer =
        ichnos_data::Writer::with_level(BufWriter::with_capacity(1 << 20, file), ZSTD_LEVEL)
            .map_err(create)?;
    if options
        .compress_on_a_thread
        .unwrap_or_else(compress_on_a_thread)
    {
        writer = writer.compressing_on_a_thread();
    }
    let start_ns = clock::monotonic_ns();
    let realtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let (host, kernel) = ichnos_profile::uname();
    let mut out = Out {
        writer,
        path: path.to_path_buf(),
        start_ns,
        tsc,
        encoder: CallEventsEncoder::new(),
        new_functions: Vec::new(),
        functions: FxHashMap::default(),
        recent_functions: Box::new([(0, 0, 0); frames::RECENT_FUNCTIONS]),
        next_stack: 0,
        next_asid: 1,
        threads: FxHashSet::default(),
        open_threads: FxHashMap::default(),
        rings: FxHashMap::default(),
        thread_names: FxHashMap::default(),
        span_names: FxHashSet::default(),
        kept: 0,
        lost: 0,
        processes: FxHashSet::default(),
        refused: Vec::new(),
        cut_short: Vec::new(),
        read_piece: read_piece(options.buffer, options.ring),
    };
    let command = ichnos_data::bounded_command(
        options
            .command
            .iter()
            .map(|a| std::os::unix::ffi::OsStrExt::as_bytes(a.as_os_str())),
    );
    let recorder = format!("ichnos {}", env!("CARGO_PKG_VERSION"));
    let event: &[u8] = match (options.ring.is_some(), tsc) {
        (true, _) => b"function-trace:ring",
        (false, _) => b"function-trace",
    };
    out.push(&Record::Meta(Meta {
        host: host.as_bytes(),
        kernel: kernel.as_bytes(),
        command,
        event,
        frequency: 0,
        stack_size: 0,
        start_monotonic_ns: start_ns,
        start_realtime_ns: realtime,
        recorder: recorder.as_bytes(),
        target: Target::Command,
        off_cpu_event: b"",
    }))?;
    Ok(out)
}

/// Whether the recording is compressed on a thread of its own: where
/// the recorder may use three CPUs or more. Compressing is up to half of
/// the recorder's work on a program's events, and on a thread of its own
/// it overlaps with the conversion of the next frames, where a CPU is
/// left once the program and the conversion have theirs. On two CPUs it
/// took them from the program (BENCHMARKS.md, issue 16: a database traced
/// 7% slower, two busy threads 11% faster, one 0%).
fn compress_on_a_thread() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= 3)
}

/// Bytes read from a shared buffer at a time, at least: two frames of
/// the runtime's default buffers, which the runtime has room for again
/// as soon as they are read (a read of everything there was, megabytes
/// when the recorder fell behind, gave the room back only at its end).
const READ_PIECE: u64 = 2 * ((128 << 10) + FRAME_HEADER_BYTES as u64);

/// Bytes read from a shared buffer at a time where each thread's buffer
/// is `buffer` bytes and each ring `ring` bytes: two of the largest
/// frames they make (the runtime rounds a buffer up to whole pages, a
/// ring to a power of two).
fn read_piece(buffer: Option<u64>, ring: Option<u64>) -> u64 {
    let largest = buffer
        .map_or(0, |b| b.div_ceil(4096).saturating_mul(4096))
        .max(ring.map_or(0, |r| r.checked_next_power_of_two().unwrap_or(r)));
    largest
        .saturating_add(FRAME_HEADER_BYTES as u64)
        .saturating_mul(2)
        .max(READ_PIECE)
}

/// A directory only we can enter, removed with what is in it.
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn new() -> io::Result<PrivateDir> {
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        // Absolute: a traced process reaches the socket by this path
        // from wherever it has gone (a daemon's `chdir("/")`).
        let base = std::path::absolute(base)?;
        for attempt in 0..100u32 {
            let path = base.join(format!("ichnos-trace-{}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode_private().create(&path) {
                Ok(()) => return Ok(PrivateDir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free directory name for the socket",
        ))
    }
}

trait PrivateMode {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateMode for std::fs::DirBuilder {
    fn mode_private(&mut self) -> &mut Self {
        std::os::unix::fs::DirBuilderExt::mode(self, 0o700)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
