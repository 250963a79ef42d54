//! The function-trace runtime, `libichnos_preload.so`: what `ichnos trace`
//! preloads into a program built with `-finstrument-functions`.
//!
//! gcc and clang call `__cyg_profile_func_enter(fn, site)` at the start
//! of every function such a build compiles and `__cyg_profile_func_exit`
//! before it returns; uftrace's libmcount answers the same calls. Here
//! each call becomes one 16-byte event — the time-stamp counter and the
//! function's address (`ichnos_data::wire`) — stored into the thread's
//! own fill buffer (`ichnos-buf`, in the manner of DynamoRIO's drx_buf:
//! reserve, store, commit, no lock). A full buffer, a thread's exit and
//! the process's exit hand the buffer's bytes over, as one frame, into the
//! process's shared buffer (a region-table buffer in a memfd the recorder
//! maps), and the recorder turns frames into the recording.
//!
//! In flight-recorder mode (`ichnos trace --ring`) each thread keeps
//! only its newest events in a ring, and the rings are handed over when
//! the process exits, crashes (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT:
//! saved, then the signal takes its course), receives a signal that ends
//! it (SIGINT, SIGTERM, SIGPIPE and the others of `crash.rs`: saved in the
//! full trace too), receives SIGUSR2 or calls [`ichnos_snapshot`].
//!
//! Without `ICHNOS_TRACE_SOCKET` in its environment the library does
//! nothing: the hooks return after two comparisons and a call.

mod altstack;
#[cfg(all(
    target_arch = "x86_64",
    target_pointer_width = "64",
    target_os = "linux"
))]
mod bind;
#[cfg(target_arch = "x86_64")]
mod catch;
mod channel;
mod channel_lock;
mod clock;
#[cfg(target_arch = "x86_64")]
mod compiler;
mod config;
mod crash;
mod daemon;
mod descriptors;
mod dispositions;
mod ending;
mod handlers;
mod hooks;
#[cfg(target_arch = "x86_64")]
mod jump;
mod namespaces;
mod program_end;
mod ring;
mod scope;
mod short;
mod span;
mod thread_block;

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

use ichnos_buf::fill::{FillBuffer, Flush, FlushReason, RingWriter, TraceWriter};
use ichnos_data::wire::{self, event, FrameHeader, Hello, EVENT_BYTES};

use channel::Channel;
use config::Config;
pub(crate) use program_end::{after_failed_exec, before_exec, end_of_process, save_for_crash};

/// Tracing is on: the recorder is there and the buffers exist.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// What the hooks do, decided whenever tracing starts or stops so that a
/// hook makes one load and one branch before its timestamp, not four
/// (tracing on, nothing decided per call, the TSC, the buffers made).
static PATH: AtomicU8 = AtomicU8::new(PATH_OFF);
/// Tracing is off: the hooks do nothing (after two comparisons and a
/// call, [`enter_elsewhere`]).
const PATH_OFF: u8 = 0;
/// Every call is written as it comes, timestamped by `rdtsc`, through
/// [`RING_WRITER`] (flight-recorder mode).
const PATH_RING: u8 = 1;
/// Every call is written as it comes, timestamped by `rdtsc`, through
/// [`TRACE_WRITER`].
const PATH_TRACE: u8 = 2;
/// Every call is written as it comes, timestamped by `rdtsc`, through
/// the buffer's general write path, out of line (no writer: the thread
/// block was refused, or there is none on this platform).
const PATH_DIRECT: u8 = 3;
/// Through the depth limit, the filters or the time filter, or timed by
/// `clock_gettime`.
const PATH_SCOPED: u8 = 4;
/// The per-thread buffers.
static BUFFER: OnceLock<FillBuffer> = OnceLock::new();
/// The write path of [`BUFFER`] made once for its kind and the events'
/// size, where the thread block was provided: a circular buffer's...
static RING_WRITER: OnceLock<RingWriter<'static, EVENT_BYTES>> = OnceLock::new();
/// ... or a trace buffer's.
static TRACE_WRITER: OnceLock<TraceWriter<'static, EVENT_BYTES>> = OnceLock::new();
/// The settings the process started with (for the child of a fork).
static CONFIG: OnceLock<Config> = OnceLock::new();
/// Whether tracing is on.
pub(crate) fn tracing() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Called when the recorder is found gone: the program runs on untraced.
pub(crate) fn recorder_gone() {
    set_active(false);
}

/// In a child made without `fork`'s handlers (`_Fork`, a raw `clone`),
/// which has its own copy of the runtime's memory: its buffers and
/// channel are its parent's (a second writer would corrupt the parent's
/// shared buffer, and its buffers hold the parent's events from before it
/// was made). Tracing goes off, its copy of the parent's socket is closed
/// (it would keep the parent's connection open until the child exits),
/// and one line goes to stderr, written with `write` (the child may be in
/// a signal handler, or hold a copy of a lock). It runs on untraced; what
/// it execs is traced afresh.
pub(crate) fn untraced_copy() {
    static SAID: AtomicBool = AtomicBool::new(false);
    set_active(false);
    Channel::forget_after_fork();
    if !SAID.swap(true, Ordering::Relaxed) {
        let line = b"ichnos: a process made without fork's handlers (_Fork, clone) is not traced\n";
        // SAFETY: write is async-signal-safe; a valid buffer.
        unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    }
}

/// Turns tracing on or off, and chooses the hooks' path.
fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Relaxed);
    let path = if !on {
        PATH_OFF
    } else if scope::plain() && clock::is_tsc() && BUFFER.get().is_some() {
        if RING_WRITER.get().is_some() {
            PATH_RING
        } else if TRACE_WRITER.get().is_some() {
            PATH_TRACE
        } else {
            PATH_DIRECT
        }
    } else {
        PATH_SCOPED
    };
    // Release: a hook that reads PATH_RING, PATH_TRACE or PATH_DIRECT
    // (Acquire) sees the buffers and the writer.
    PATH.store(path, Ordering::Release);
}

/// The system's page size (4 KiB where it cannot be told).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Sets up the calling thread's buffer now where the hooks read the
/// clock before they write ([`PATH_SCOPED`], [`PATH_DIRECT`]): there a
/// thread's first event would hold its buffer's set-up (a mapping, the
/// thread's registration, its first page made present: microseconds) in
/// its first call. ([`PATH_RING`] and [`PATH_TRACE`] read the clock once
/// the set-up is done.) Called at the start, on the thread that loads the
/// runtime, and by each thread the program creates before its start
/// routine runs; a thread made otherwise sets up at its first event.
pub(crate) fn set_up_thread() {
    let path = PATH.load(Ordering::Acquire);
    if path == PATH_SCOPED || path == PATH_DIRECT {
        if let Some(buf) = BUFFER.get() {
            let _ = buf.attach_thread();
        }
    }
}

/// Writes one event into the thread's buffer.
#[inline(always)]
#[allow(clippy::inline_always)] // the whole cost of a traced call
pub(crate) fn record(kind: u8, address: u64) {
    record_at(clock::ticks(), kind, address);
}

/// Writes one event, timestamped by `rdtsc`, into the thread's buffer:
/// the whole of a traced call's work on [`PATH_DIRECT`].
#[inline(always)]
#[allow(clippy::inline_always)] // the whole cost of a traced call
fn record_direct(kind: u8, address: u64) {
    record_at(clock::tsc(), kind, address);
}

/// An event timestamped by `rdtsc` through the ring's writer: the whole
/// of a traced call's work on [`PATH_RING`].
#[inline(always)]
#[allow(clippy::inline_always)] // the whole cost of a traced call
fn record_ring(kind: u8, address: u64) {
    // SAFETY: PATH_RING is chosen (and read with Acquire) only once the
    // writer is set, and a OnceLock once set stays set.
    let writer = unsafe { RING_WRITER.get().unwrap_unchecked() };
    let _ = writer.write(event_now(kind, address));
}

/// An event timestamped by `rdtsc` through the trace buffer's writer:
/// the whole of a traced call's work on [`PATH_TRACE`].
#[inline(always)]
#[allow(clippy::inline_always)] // the whole cost of a traced call
fn record_trace(kind: u8, address: u64) {
    // SAFETY: as in `record_ring`, for PATH_TRACE.
    let writer = unsafe { TRACE_WRITER.get().unwrap_unchecked() };
    let _ = writer.write(event_now(kind, address));
}

/// An event of `kind` at `address`, as a writer stores it, timestamped
/// by `rdtsc` once its place is reserved: a thread's first event sets up
/// its buffer first, which is then not counted in the call (it was: 4 to
/// 5 us of `main`'s own time), and the reservation overlaps the read (a
/// ring's call 6% faster, an A/B of 10 million calls: 0.1886 s against
/// 0.1773 s). A signal handler that writes between the reservation and
/// the read gives its events the time before this one's (stored at this
/// one's, times in a block never going back), as one between the read
/// and the reservation did the other way round. A full buffer handed over
/// inside the write (waiting for the recorder, at worst) now counts
/// before the event rather than after it: in the call an exit leaves,
/// not in its caller. Only [`PATH_RING`] and [`PATH_TRACE`] read the
/// time so; the other paths read it before the write.
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
fn event_now(kind: u8, address: u64) -> impl FnOnce(&mut [u8; EVENT_BYTES]) {
    let word = wire::event_word(kind, address);
    move |dst| wire::store_event(dst, clock::tsc(), word)
}

/// Writes one event that happened at `ticks` into the thread's buffer.
#[inline(always)]
#[allow(clippy::inline_always)]
pub(crate) fn record_at(ticks: u64, kind: u8, address: u64) {
    if let Some(buf) = BUFFER.get() {
        // Stored where the record lies, not built apart and copied (see
        // `wire::store_event`); the closure holds two words, which the
        // buffer's slow path takes in registers.
        let word = wire::event_word(kind, address);
        let fill = move |dst: &mut [u8]| wire::store_event(dst, ticks, word);
        // Where this library provides the buffers' thread block (x86-64
        // glibc, `thread_block.rs`), from it alone, with no call.
        #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
        let _ = buf.write_with_provided(EVENT_BYTES, fill);
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
        let _ = buf.write_with(EVENT_BYTES, fill);
    }
}

/// Writes a marker event (a `setjmp`, a `longjmp`, a catch) when tracing is on,
/// after the entries the time filter holds back.
pub(crate) fn record_marker(kind: u8, address: u64) {
    if ACTIVE.load(Ordering::Relaxed) {
        short::before_marker();
        record(kind, address);
    }
}

/// An entry on [`PATH_SCOPED`]; `sp` is the traced function's stack
/// pointer at its call of the hook (0: not known).
#[inline(never)]
fn scoped_enter(function: u64, sp: u64) {
    if scope::plain() {
        record(event::ENTER, function);
    } else if scope::enter(function, sp) {
        if short::holding() {
            short::enter(function);
        } else {
            record(event::ENTER, function);
        }
    }
}

/// An exit on [`PATH_SCOPED`].
#[inline(never)]
fn scoped_exit(function: u64) {
    if scope::plain() {
        record(event::EXIT, function);
    } else if scope::exit(function) {
        write_exit(function);
    }
}

/// Writes the exit of a call whose entry the depth limit and the filters
/// let through, past the time filter.
pub(crate) fn write_exit(function: u64) {
    if short::holding() {
        short::exit(function);
    } else {
        record(event::EXIT, function);
    }
}

/// The entry hook of `-finstrument-functions`, from its trampoline
/// ([`hooks`]), with the traced function's stack pointer `sp` (0: not
/// known).
extern "C" fn enter_hook(this_fn: *mut c_void, _call_site: *mut c_void, sp: u64) {
    // Compared one by one, the two paths of a plain trace first: a
    // `match` becomes a jump through a table, an indirect branch.
    let path = PATH.load(Ordering::Acquire);
    if path == PATH_RING {
        record_ring(event::ENTER, this_fn as u64);
    } else if path == PATH_TRACE {
        record_trace(event::ENTER, this_fn as u64);
    } else {
        enter_elsewhere(path, this_fn as u64, sp);
    }
}

/// An entry on another path than [`PATH_RING`] and [`PATH_TRACE`], out
/// of line: [`PATH_OFF`] too, whose test before the two would cost them
/// 1% (an A/B of 10 million calls in ring mode, 0.2235 s against
/// 0.2212 s).
#[inline(never)]
fn enter_elsewhere(path: u8, function: u64, sp: u64) {
    match path {
        PATH_OFF => enter_before_start(function, sp),
        PATH_DIRECT => record_direct(event::ENTER, function),
        _ => scoped_enter(function, sp),
    }
}

/// An entry while tracing is off. Where the runtime has not started yet
/// and this is the loading thread, the call is made by a constructor of
/// a library the program links: the dynamic linker runs those before
/// the runtime's own (a preloaded library is initialised after the
/// objects loaded after it). The runtime starts here, so that their calls
/// are traced too, and records the entry. Not:
/// - before the dynamic linker has relocated the runtime (an
///   instrumented ifunc resolver of a library relocated before it):
///   nothing here may call through the runtime's GOT before then;
/// - before the C library's own initialisation (an instrumented ifunc
///   resolver of the program, relocated after the runtime): the
///   environment is not there to read yet, and the thread-locals the
///   start writes are set up only after relocation;
/// - in other threads: one a constructor made goes untraced until the
///   runtime starts;
/// - in a child of `vfork` a constructor made, which shares the
///   program's memory: the start would be the child's, written into
///   the program's memory.
#[cold]
#[inline(never)]
fn enter_before_start(function: u64, sp: u64) {
    if !relocated() || STARTED.load(Ordering::Acquire) || NO_EARLY_START.load(Ordering::Relaxed) {
        return;
    }
    if !libc_initialised() {
        return;
    }
    if !loading_thread() {
        return;
    }
    match ending::shares_parents_memory() {
        Some(false) => {}
        Some(true) => return,
        None => {
            // Not asked again on every call until the constructor starts
            // the runtime.
            NO_EARLY_START.store(true, Ordering::Relaxed);
            return;
        }
    }
    start();
    let path = PATH.load(Ordering::Acquire);
    if path == PATH_RING {
        record_ring(event::ENTER, function);
    } else if path == PATH_TRACE {
        record_trace(event::ENTER, function);
    } else if path != PATH_OFF {
        enter_elsewhere(path, function, sp);
    }
}

/// The kernel could not say whether the process shares its parent's
/// memory: the runtime starts in its constructor only.
static NO_EARLY_START: AtomicBool = AtomicBool::new(false);

/// Holds [`STARTED`]'s address once the dynamic linker has relocated the
/// runtime (a relative relocation writes it); before, the address the
/// runtime was linked at, which no loaded library has.
static RELOCATED: &AtomicBool = &STARTED;

/// Whether the dynamic linker has relocated the runtime. Calls only
/// code of its own, none through the GOT.
fn relocated() -> bool {
    // SAFETY: a read of a static of ours, volatile so that it is read
    // from memory, not assumed from its initialiser.
    let stored = unsafe { std::ptr::read_volatile(&raw const RELOCATED) };
    std::ptr::eq(stored, &raw const STARTED)
}

/// Whether the C library has initialised itself: its constructor, the
/// first the dynamic linker runs (after every object is relocated and
/// the thread-locals are set up), sets `environ`, which is null until
/// then (and a pointer to a null pointer in an empty environment).
fn libc_initialised() -> bool {
    // SAFETY: a read of the C library's `environ`, a pointer-sized
    // static; no thread writes it during start-up.
    !unsafe { std::ptr::read_volatile(&raw const libc::environ) }.is_null()
}

/// Whether the calling thread is the process's first, the one that
/// loaded the program.
fn loading_thread() -> bool {
    // SAFETY: gettid and getpid have no preconditions.
    unsafe { libc::gettid() == libc::getpid() }
}

/// The exit hook of `-finstrument-functions`. (It needs no stack pointer,
/// and gcc jumps to it after its epilogue, where the stack pointer is the
/// caller's.)
#[no_mangle]
pub extern "C" fn __cyg_profile_func_exit(this_fn: *mut c_void, _call_site: *mut c_void) {
    // As in `enter_hook`.
    let path = PATH.load(Ordering::Acquire);
    if path == PATH_RING {
        record_ring(event::EXIT, this_fn as u64);
    } else if path == PATH_TRACE {
        record_trace(event::EXIT, this_fn as u64);
    } else {
        exit_elsewhere(path, this_fn as u64);
    }
}

/// An exit on another path than [`PATH_RING`] and [`PATH_TRACE`], as
/// [`enter_elsewhere`].
#[inline(never)]
fn exit_elsewhere(path: u8, function: u64) {
    match path {
        PATH_OFF => {}
        PATH_DIRECT => record_direct(event::EXIT, function),
        _ => scoped_exit(function),
    }
}

/// An explicit probe: `id` (below 2^48) and `value` at this moment, in
/// the thread's trace.
#[no_mangle]
pub extern "C" fn ichnos_probe(id: u64, value: u64) {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    short::before_marker();
    if let Some(buf) = BUFFER.get() {
        let ticks = clock::ticks();
        let _ = buf.write(&wire::encode_event(
            ticks,
            event::PROBE,
            id & wire::MAX_ADDRESS,
        ));
        let _ = buf.write(&wire::encode_event(value, event::VALUE, 0));
    }
}

/// Hands the trace over now: in flight-recorder mode every thread's
/// ring, else this thread's buffer.
#[no_mangle]
pub extern "C" fn ichnos_snapshot() {
    if !ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    short::before_marker();
    if let Some(buf) = BUFFER.get() {
        if CONFIG.get().is_some_and(|c| c.ring.is_some()) {
            ring::save(buf);
        } else {
            let _ = buf.flush();
        }
    }
}

/// A full trace buffer, or one of an exiting thread or process: one frame.
fn flush(f: &Flush<'_>) {
    send_flush(f, 0);
}

thread_local! {
    /// A frame of events of this thread reached the shared buffer: its
    /// next ones are not its first ([`wire::FRAME_FIRST`]). A first frame
    /// lost (the recorder fell behind) leaves the next one first.
    static DELIVERED: Cell<bool> = const { Cell::new(false) };
}

/// `f` as one frame with `flags` (and [`wire::FRAME_LAST`] at an exit,
/// [`wire::FRAME_FIRST`] until one of the thread's frames of events is
/// delivered; not on a ring's).
pub(crate) fn send_flush(f: &Flush<'_>, flags: u32) {
    let last = matches!(f.reason, FlushReason::ThreadExit | FlushReason::ProcessExit);
    if last {
        send_thread_name(f.tid);
    }
    let ring = flags & wire::FRAME_RING != 0;
    let first = !ring && !DELIVERED.try_with(Cell::get).unwrap_or(true);
    let header = FrameHeader {
        tid: f.tid.cast_unsigned(),
        flags: flags
            | if last { wire::FRAME_LAST } else { 0 }
            | if first { wire::FRAME_FIRST } else { 0 },
        lost: f.lost_records,
        len: f.data.len() as u64,
        ticks: clock::ticks(),
    };
    if Channel::send(header, f.data) && first {
        let _ = DELIVERED.try_with(|d| d.set(true));
    }
}

/// Sends thread `tid`'s name (its `comm`) in a frame of its own, before
/// its last frame: the recorder reads a thread's name from `/proc` when
/// its first frame comes, and a thread that had none before it ended (a
/// short one, whose only frame is its last) or renamed itself since is
/// named all the same. Not from a signal handler.
pub(crate) fn send_thread_name(tid: i32) {
    let mut name = [0u8; 16];
    // SAFETY: gettid has no preconditions.
    if tid == unsafe { libc::gettid() } {
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included.
        unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    } else if let Ok(comm) = std::fs::read(format!("/proc/self/task/{tid}/comm")) {
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        let n = comm.len().min(15);
        name[..n].copy_from_slice(&comm[..n]);
    }
    if name[0] == 0 {
        return;
    }
    let header = FrameHeader {
        tid: tid.cast_unsigned(),
        flags: wire::FRAME_THREAD_NAME,
        lost: 0,
        len: name.len() as u64,
        ticks: clock::ticks(),
    };
    Channel::send(header, &name);
}

fn hello(config: &Config) -> Hello {
    Hello {
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() }.cast_unsigned(),
        clock: if clock::is_tsc() {
            wire::CLOCK_TSC
        } else {
            wire::CLOCK_MONOTONIC
        },
        ring: config.ring.is_some(),
    }
}

/// Opens the process's channel; on failure says why, once, and leaves
/// tracing off.
fn open_channel(config: &Config) -> bool {
    match Channel::open(&config.socket, config.shared, hello(config)) {
        Ok(c) => {
            c.install();
            true
        }
        Err(e) => {
            eprintln!("ichnos: {e}; the program runs untraced");
            false
        }
    }
}

/// Sends the process's mappings (`/proc/self/maps`) as a frame.
pub(crate) fn send_maps() {
    let Ok(mut text) = std::fs::read("/proc/self/maps") else {
        return;
    };
    let padded = text.len().next_multiple_of(EVENT_BYTES) + EVENT_BYTES;
    text.resize(padded, 0);
    let header = FrameHeader {
        // SAFETY: getpid has no preconditions.
        tid: unsafe { libc::getpid() }.cast_unsigned(),
        flags: wire::FRAME_MAPS,
        lost: 0,
        len: text.len() as u64,
        ticks: clock::ticks(),
    };
    Channel::send(header, &text);
}

/// Registers `hook` to run at `exit`, bound to the process rather than
/// to the runtime's object: `atexit`'s hooks would run when the dynamic
/// linker finalises the runtime, before the libraries the program links
/// (initialised before a preloaded library, finalised after it), whose
/// destructors and exit hooks would then run after the hand-over and be
/// lost. Registered while the objects are initialised, before the C
/// library registers their finalisation, these run after it.
fn at_exit(hook: extern "C" fn()) {
    // Refused only out of memory at the start: traced on, unsaved at exit.
    let _ = ichnos_buf::fill::at_process_exit(hook);
}

extern "C" fn losses_at_exit() {
    if ACTIVE.load(Ordering::Relaxed) {
        Channel::report_losses();
        channel::say_ended();
    }
}

extern "C" fn maps_at_exit() {
    if ACTIVE.load(Ordering::Relaxed) {
        // `exit` from inside handlers: they never return.
        #[cfg(target_arch = "x86_64")]
        handlers::leave_all();
        send_maps();
    }
}

/// In the child of a fork: its own channel (the parent's stays the
/// parent's), its buffers already emptied by `ichnos-buf`.
extern "C" fn after_fork_child() {
    let was = ACTIVE.load(Ordering::Relaxed);
    // The child's thread is a new one to the recorder.
    let _ = DELIVERED.try_with(|d| d.set(false));
    set_active(false);
    Channel::forget_after_fork();
    span::forget_after_fork();
    crash::forget_after_fork();
    handlers::forget_installing();
    #[cfg(target_arch = "x86_64")]
    handlers::after_fork_child();
    ending::own();
    if was {
        if let Some(config) = CONFIG.get() {
            let open = open_channel(config);
            if open {
                send_maps();
                // The parent's saver thread is not the child's.
                crash::start_saver();
            }
            set_active(open);
        }
    }
}

/// The runtime has started, or tried to: [`start`] runs once.
static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts tracing, once: from the runtime's constructor, or before it
/// from the loading thread's first traced call ([`enter_before_start`]).
fn start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(config) = Config::from_env() else {
        return;
    };
    // The C library's functions the runtime wraps, looked up while it is
    // safe to.
    ending::resolve();
    dispositions::resolve();
    namespaces::resolve();
    #[cfg(target_arch = "x86_64")]
    jump::resolve();
    #[cfg(target_arch = "x86_64")]
    {
        catch::resolve();
        catch::note_objects();
    }
    clock::use_tsc(config.tsc);
    if !open_channel(&config) {
        return;
    }
    // Registered before the buffers exist, so it runs after their own
    // exit hook (hooks run last first): the losses of the last frames are
    // known by then.
    at_exit(losses_at_exit);
    // The buffers' own exit hook, too, after every object's destructors,
    // and their fork hooks for a fork among those. Before any buffer.
    let bound = ichnos_buf::fill::bind_hooks_to_the_process();
    debug_assert!(bound, "a fill buffer was made before the runtime started");
    // Before the buffers exist, as the fill buffers ask. Where it is
    // refused, every record would take the buffers' slow path: say so.
    if !thread_block::provide() {
        eprintln!("ichnos: the trace runtime's thread block was refused; tracing is slower");
    }
    let buffer = match config.ring {
        Some(size) => FillBuffer::circular_with_exit_flush(size, EVENT_BYTES, ring::thread_exit),
        None => FillBuffer::trace(config.buffer, flush),
    };
    let buffer = match buffer {
        Ok(b) => b,
        Err(e) => {
            eprintln!("ichnos: cannot create the trace buffers: {e}; the program runs untraced");
            // Nothing will come: said now, or the process would read as
            // one that ended before handing its buffers over.
            ending::own();
            channel::say_ended();
            return;
        }
    };
    let (only, not) = config.filters();
    scope::configure(config.depth, only, not);
    short::configure(config.min_ticks.unwrap_or(0));
    let ring = config.ring.is_some();
    // Flushes block signals only once the program installs a handler of
    // its own (`handlers.rs`), which may run inside one: the runtime's
    // own handlers neither write events nor leave by a longjmp.
    buffer.set_flush_blocks_signals(false);
    let _ = BUFFER.set(buffer);
    if let Some(buffer) = BUFFER.get() {
        if let Some(w) = buffer.ring_writer() {
            let _ = RING_WRITER.set(w);
        } else if let Some(w) = buffer.trace_writer() {
            let _ = TRACE_WRITER.set(w);
        }
    }
    let _ = CONFIG.set(config);
    // Bound to the process, as the buffers' own (registered before it, so
    // run before it in the child): a fork in a library's destructor,
    // after the runtime's object is finalised, still has it.
    let _ = ichnos_buf::fill::at_process_fork(None, None, Some(after_fork_child));
    crash::install(ring);
    altstack::install();
    if ring {
        ring::install();
    }
    // Registered after the buffers' own exit hook, so it runs before it:
    // the mappings (with what was loaded since the start) arrive before
    // the last events.
    at_exit(maps_at_exit);
    ending::hook_quick_exit();
    send_maps();
    ending::own();
    // After everything a first call could need: binding makes the
    // objects' first calls of the hooks come straight here.
    #[cfg(all(
        target_arch = "x86_64",
        target_pointer_width = "64",
        target_os = "linux"
    ))]
    bind::bind_hooks();
    set_active(true);
    set_up_thread();
}

extern "C" fn init() {
    start();
}

/// Runs [`init`] when the library is loaded: before the executable's own
/// constructors, after those of the libraries it links (the dynamic
/// linker initialises a preloaded library after the objects loaded
/// after it). Where one of those calls a traced function first, the
/// runtime has started there already ([`enter_before_start`]).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
