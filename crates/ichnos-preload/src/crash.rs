//! Crashes, signals that end the program, and SIGUSR2: the trace saved
//! by a thread of the runtime's own, never inside a signal handler.
//!
//! Saving copies the rings or flushes the buffers, allocating and taking
//! the channel's lock, which no signal handler may do (a handler that
//! interrupted `malloc` would wait for the lock its own thread holds). So
//! the handlers only ask: a saver thread the runtime starts waits on a
//! pipe, and a handler writes one byte to it. SIGUSR2 (flight-recorder
//! mode only) asks for a snapshot and returns. A crash handler (SIGSEGV,
//! SIGBUS, SIGILL, SIGFPE, SIGABRT; in both modes) asks for the crash save
//! and waits for it (at most [`CRASH_SAVE_PATIENCE_MS`]; a second thread
//! that crashes meanwhile waits for the same save), then puts back the
//! handler that was there before and returns: the faulting instruction
//! runs again and the signal takes its course (a core dump, the program's
//! own handler); a signal that was sent rather than raised by a fault
//! (`kill`, `raise`) is sent again, and `abort` raises SIGABRT again
//! itself. A signal whose default action ends the program ([`ENDINGS`]:
//! Ctrl-C's SIGINT, SIGTERM, a closed pipe's SIGPIPE) is handled the same
//! way where it has its default action at the start, and always sent
//! again. Both handlers keep the interrupted code's `errno`. A crash may
//! lose the save (the saver may find the lock held by the thread that
//! crashed), never the crash.

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use ichnos_buf::fill::ErrnoGuard;

use crate::dispositions::real_sigaction;

/// Signals that end a program with a core: saved first.
const CRASHES: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// Signals whose default action ends the program (without a fault to
/// come back): saved first, where the program has not set them otherwise
/// when the runtime starts. A program stopped by Ctrl-C, `kill`, a closed
/// pipe or its own `alarm` so keeps its trace, as a crashing one does.
/// SIGUSR2 is among them in the full trace only (in flight-recorder mode
/// it asks for a snapshot).
const ENDINGS: [libc::c_int; 11] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
];

/// The crash handler's type, as `sa_sigaction` holds it.
type Crash = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// The handlers before ours, by signal number.
static mut PREVIOUS: [Option<libc::sigaction>; 32] = [None; 32];
/// Ours, by signal number, for the signals that end the program whose
/// default we stand in for: put back where the program sets the default
/// (`dispositions.rs`).
static mut OURS: [Option<libc::sigaction>; 32] = [None; 32];
/// A signal that ends the program, which arrived inside the runtime and
/// whose save the saver makes ([`end_by_signal`]); 0: none.
static PENDING_END: AtomicI32 = AtomicI32::new(0);
/// The rings were saved for a crash already (a second fault while saving
/// must not save again).
static SAVED_FOR_CRASH: AtomicBool = AtomicBool::new(false);

/// The write end of the saver thread's pipe (-1: no saver).
static REQUESTS: AtomicI32 = AtomicI32::new(-1);
/// Its read end (closed in the child of a fork, which starts its own).
static REQUESTS_READ: AtomicI32 = AtomicI32::new(-1);
/// The saver's thread id (a crash of its own must not wait for itself).
static SAVER_TID: AtomicI32 = AtomicI32::new(0);
/// The crash save is done.
static CRASH_SAVE_DONE: AtomicBool = AtomicBool::new(false);
/// What a handler asks the saver for.
const ASK_SNAPSHOT: u8 = 1;
const ASK_CRASH_SAVE: u8 = 2;
/// How long a crashing thread waits for the crash save.
const CRASH_SAVE_PATIENCE_MS: u64 = 5000;

/// What the saver was last asked to save for the end of the process:
/// done.
static EXIT_SAVE_DONE: AtomicBool = AtomicBool::new(false);
/// The process ends without its hooks (`_exit`): save as at exit.
const ASK_EXIT_SAVE: u8 = 3;
/// The saver ends (it is paused: `pause_saver`).
const ASK_STOP: u8 = 4;
/// With a signal's number in the low bits: save, then send that signal
/// again ([`end_by_signal`]).
const ASK_END_BY: u8 = 0x40;

/// The saver thread, to join when it is paused (0: none).
static SAVER: AtomicUsize = AtomicUsize::new(0);
/// The write end of the pipe while the saver is paused (-1: it is not).
static PAUSED_REQUESTS: AtomicI32 = AtomicI32::new(-1);
/// The process that started the saver.
static SAVER_PID: AtomicI32 = AtomicI32::new(0);

/// In the child of a fork: the parent's saver and its pipe are not the
/// child's; what the parent saved is not either.
pub(crate) fn forget_after_fork() {
    // The parent's saver thread does not exist here: nothing to join,
    // nothing paused.
    SAVER.store(0, Ordering::Relaxed);
    if let Some(mut pauses) = lock_pauses() {
        *pauses = 0;
    }
    for end in [&REQUESTS, &REQUESTS_READ, &PAUSED_REQUESTS] {
        let fd = end.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: a pipe end inherited from the parent, ours to close.
            unsafe { libc::close(fd) };
        }
    }
    SAVER_TID.store(0, Ordering::Relaxed);
    SAVED_FOR_CRASH.store(false, Ordering::Relaxed);
    CRASH_SAVE_DONE.store(false, Ordering::Relaxed);
    EXIT_SAVE_DONE.store(false, Ordering::Relaxed);
}

/// Starts the saver thread (at the start, and in the child of a fork,
/// which has none). It starts with every signal blocked, so that it never
/// takes a signal the program meant for one of its own threads.
pub(crate) fn start_saver() {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    let fds = fds.map(crate::descriptors::raw_out_of_the_way);
    if spawn_saver(fds[0]) {
        REQUESTS_READ.store(fds[0], Ordering::Relaxed);
        REQUESTS.store(fds[1], Ordering::Release);
    } else {
        // SAFETY: our own pipe's ends.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}

/// Starts a saver thread reading the pipe's end `read`, with every signal
/// blocked: whether it started.
fn spawn_saver(read: libc::c_int) -> bool {
    // SAFETY: sigset_t is plain data; sigfillset and pthread_sigmask take
    // valid pointers to ours.
    let (mut all, mut was): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const all, &raw mut was);
    }
    let spawned = std::thread::Builder::new()
        .name("ichnos-saver".to_owned())
        .stack_size(256 << 10)
        .spawn(move || saver(read));
    // SAFETY: the mask this thread had before.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &raw const was, std::ptr::null_mut()) };
    match spawned {
        Ok(handle) => {
            SAVER.store(handle.into_pthread_t() as usize, Ordering::Relaxed);
            // SAFETY: getpid has no preconditions.
            SAVER_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
            true
        }
        Err(_) => false,
    }
}

/// Ends the saver thread for a while, so that the process has one thread
/// fewer (`unshare` and `setns` refuse some changes to a process with
/// more than one): whether it is ended (or was, by a pause still going
/// on). Each pause that answers true is ended by one [`resume_saver`];
/// the saver starts again when the last one ends. Until then, crashes
/// and SIGUSR2 find no saver and save nothing. Not from a signal handler.
pub(crate) fn pause_saver() -> bool {
    let Some(mut pauses) = lock_pauses() else {
        return false;
    };
    if *pauses > 0 {
        *pauses += 1;
        return true;
    }
    // A vfork or CLONE_VM child shares the saver's memory but is not the
    // process that has it.
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != SAVER_PID.load(Ordering::Relaxed) {
        return false;
    }
    // Ended already where starting it again failed: this pause tries
    // again at its end.
    if PAUSED_REQUESTS.load(Ordering::Relaxed) < 0 && !end_saver() {
        return false;
    }
    *pauses = 1;
    true
}

/// Ends one [`pause_saver`] that answered true; after the last, starts
/// the saver again on the same pipe.
pub(crate) fn resume_saver() {
    let Some(mut pauses) = lock_pauses() else {
        return;
    };
    if *pauses == 0 {
        return;
    }
    *pauses -= 1;
    if *pauses > 0 {
        return;
    }
    let fd = PAUSED_REQUESTS.load(Ordering::Relaxed);
    if fd >= 0 && spawn_saver(REQUESTS_READ.load(Ordering::Relaxed)) {
        PAUSED_REQUESTS.store(-1, Ordering::Relaxed);
        REQUESTS.store(fd, Ordering::Release);
    }
}

/// Pauses going on (the saver is ended while above 0).
static PAUSES: Mutex<usize> = Mutex::new(0);

/// The pauses' count, if it can be had in a moment (a fork may have left
/// it held by a thread the child does not have).
fn lock_pauses() -> Option<MutexGuard<'static, usize>> {
    for _ in 0..10_000 {
        match PAUSES.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            // SAFETY: sched_yield has no preconditions.
            Err(TryLockError::WouldBlock) => unsafe {
                libc::sched_yield();
            },
        }
    }
    None
}

/// Ends the saver thread and waits until the kernel no longer counts it
/// among the process's threads: whether it did.
fn end_saver() -> bool {
    let thread = SAVER.swap(0, Ordering::Relaxed);
    if thread == 0 {
        return false;
    }
    // Handlers see no saver from here on; the descriptor stays open (a
    // handler that read it just before still writes to the pipe).
    let fd = REQUESTS.swap(-1, Ordering::AcqRel);
    let stop = ASK_STOP;
    // SAFETY: the pipe's write end; a one-byte buffer.
    if fd < 0 || unsafe { libc::write(fd, (&raw const stop).cast(), 1) } != 1 {
        // No saver to end after all: leave things as they were.
        SAVER.store(thread, Ordering::Relaxed);
        REQUESTS.store(fd, Ordering::Release);
        return false;
    }
    // SAFETY: the saver's thread, joined once (its id was taken out of
    // SAVER above); it returns at the stop asked for.
    unsafe { libc::pthread_join(thread as libc::pthread_t, std::ptr::null_mut()) };
    PAUSED_REQUESTS.store(fd, Ordering::Relaxed);
    // The join returns when the thread's id is cleared, which the kernel
    // does before it lets go of the thread's filesystem information and
    // takes it out of the thread group (what `setns` and `unshare`
    // look at): wait, at most 100 ms, until the thread is gone.
    let tid = SAVER_TID.load(Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 100_000,
    };
    for _ in 0..1000 {
        // SAFETY: signal 0 only checks that the thread exists.
        let alive = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) } == 0;
        if !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            break;
        }
        // SAFETY: a valid timespec.
        unsafe { libc::nanosleep(&raw const pause, std::ptr::null_mut()) };
    }
    true
}

/// The saver thread: saves each time a handler (or `_exit`) asks.
fn saver(read: libc::c_int) {
    // SAFETY: gettid has no preconditions.
    SAVER_TID.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    loop {
        let mut ask = 0u8;
        // SAFETY: a one-byte buffer of ours.
        let n = unsafe { libc::read(read, (&raw mut ask).cast(), 1) };
        if n == 0
            || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted)
        {
            return;
        }
        if n != 1 {
            continue;
        }
        match ask {
            ASK_STOP => return,
            ASK_CRASH_SAVE => {
                crate::save_for_crash();
                CRASH_SAVE_DONE.store(true, Ordering::Release);
            }
            ASK_EXIT_SAVE => {
                crate::end_of_process();
                EXIT_SAVE_DONE.store(true, Ordering::Release);
            }
            end if end & ASK_END_BY != 0 => end_by_signal(libc::c_int::from(end & !ASK_END_BY)),
            _ => {
                if let Some(buf) = crate::BUFFER.get() {
                    crate::ring::save(buf);
                }
            }
        }
    }
}

/// The process ends without its hooks (`_exit`, maybe from a signal
/// handler): the saver saves as at exit, and this waits for it (at most
/// the crash save's patience). False if there is no saver to ask.
pub(crate) fn save_for_exit() -> bool {
    if !ask(ASK_EXIT_SAVE) {
        return false;
    }
    wait_for(&EXIT_SAVE_DONE);
    true
}

/// Asks the saver for `what` (async-signal-safe); false if there is none.
fn ask(what: u8) -> bool {
    // A child made without fork's handlers, or of vfork, holds its
    // parent's pipe, whose saver would save the parent.
    if !crate::ending::owning_process() {
        return false;
    }
    let fd = REQUESTS.load(Ordering::Acquire);
    // SAFETY: write is async-signal-safe; a one-byte buffer.
    fd >= 0 && unsafe { libc::write(fd, (&raw const what).cast(), 1) } == 1
}

/// Waits (async-signal-safely) for `done`, at most the crash save's
/// patience; not on the saver thread itself.
fn wait_for(done: &AtomicBool) {
    // SAFETY: gettid has no preconditions.
    if unsafe { libc::gettid() } == SAVER_TID.load(Ordering::Relaxed) {
        return;
    }
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..CRASH_SAVE_PATIENCE_MS {
        if done.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: nanosleep is async-signal-safe; a valid timespec.
        unsafe { libc::nanosleep(&raw const step, std::ptr::null_mut()) };
    }
}

extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let _errno = ErrnoGuard::save();
    // A signal that ends the program, arriving inside the runtime on
    // this thread (a write to its buffer open, or a hand-over holding
    // the channel; likely in a program that makes calls without pause):
    // a save now would wait in vain for what this thread has open, or
    // leave its buffer out. The saver saves once the thread has left the
    // runtime, then sends the signal again itself; the handler returns
    // at once. (Not a fault, which would come back.)
    if !CRASHES.contains(&sig) && crate::ending::owning_process() && inside_the_runtime() {
        if let Some(s) = u8::try_from(sig).ok().filter(|&s| s < ASK_END_BY) {
            PENDING_END.store(sig, Ordering::Release);
            if ask(ASK_END_BY | s) {
                return;
            }
            PENDING_END.store(0, Ordering::Release);
        }
    }
    // The first crash asks for the save; every crashing thread waits for
    // it, so that none ends the process while the rings are sent. A
    // process that is not the buffers' owner (a child of vfork, whose
    // memory is its parent's, or one made without fork's handlers) asks
    // nothing and marks nothing.
    // A crash inside this thread's hand-over (it holds the channel): the
    // saver would wait on it in vain; nothing is saved, and the signal
    // takes its course at once.
    let asked = crate::ending::owning_process()
        && !crate::channel::Channel::held_here()
        && (SAVED_FOR_CRASH.swap(true, Ordering::SeqCst) || ask(ASK_CRASH_SAVE));
    if asked {
        wait_for(&CRASH_SAVE_DONE);
    }
    restore(sig);
    // A fault comes back when its instruction runs again; a signal that
    // was sent (kill, raise, sigqueue: si_code <= 0) does not, so it is
    // sent again, to the handler put back, and so is every signal that
    // is not a fault's (SIGTERM, or SIGALRM, whose si_code from the
    // kernel is above 0). It is blocked until this handler returns.
    let fault = CRASHES.contains(&sig) && sig != libc::SIGABRT;
    // SAFETY: the kernel's siginfo for this delivery, read only.
    if !fault || (!info.is_null() && unsafe { (*info).si_code } <= 0) {
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
    }
}

/// Whether this thread is inside the runtime's write or hand-over
/// (async-signal-safe).
fn inside_the_runtime() -> bool {
    crate::channel::Channel::held_here()
        || crate::BUFFER
            .get()
            .is_some_and(ichnos_buf::fill::FillBuffer::writing_here)
}

/// On the saver: the save for signal `sig`, which arrived inside the
/// runtime ([`on_crash`]), then the signal sent again to the process, to
/// the default action put back (or to a handler the program installed
/// since).
fn end_by_signal(sig: libc::c_int) {
    if !SAVED_FOR_CRASH.swap(true, Ordering::SeqCst) {
        crate::save_for_crash();
    }
    CRASH_SAVE_DONE.store(true, Ordering::Release);
    // The signal came under the default action: the process ends of it,
    // whatever the program installed since (untraced, it was gone).
    restore(sig);
    // SAFETY: kill and getpid have no preconditions; the saver has every
    // signal blocked, so another thread takes it.
    unsafe { libc::kill(libc::getpid(), sig) };
}

/// Before the process ends by itself (`exit`, `_exit`) or executes a
/// program, while a signal that ends it waits for its save
/// ([`end_by_signal`]): waits for the save, then ends of the signal, as
/// it would have untraced. Not on the saver.
pub(crate) fn finish_pending_ending() {
    let sig = PENDING_END.load(Ordering::Acquire);
    // SAFETY: gettid has no preconditions.
    if sig == 0 || unsafe { libc::gettid() } == SAVER_TID.load(Ordering::Relaxed) {
        return;
    }
    wait_for(&CRASH_SAVE_DONE);
    restore(sig);
    // SAFETY: raise is async-signal-safe; the default action ends the
    // process.
    unsafe { libc::raise(sig) };
}

/// The runtime's action for `sig` where it stands in for the default of
/// a signal that ends the program (`None` elsewhere).
pub(crate) fn standing_in_for(sig: libc::c_int) -> Option<libc::sigaction> {
    if CRASHES.contains(&sig) {
        return None;
    }
    // SAFETY: OURS is written in `install`, before the program runs.
    unsafe {
        (*std::ptr::addr_of!(OURS))
            .get(sig.unsigned_abs() as usize)
            .copied()
            .flatten()
    }
}

/// Whether `handler`, found as `sig`'s action, is the runtime's own in
/// place of the default: for a signal that ends the program, where the
/// runtime installed it over the default (the program sees the default).
pub(crate) fn stands_in_for_default(sig: libc::c_int, handler: libc::sighandler_t) -> bool {
    !CRASHES.contains(&sig) && handler == on_crash as Crash as usize
}

extern "C" fn on_usr2(_sig: libc::c_int) {
    let _errno = ErrnoGuard::save();
    ask(ASK_SNAPSHOT);
}

/// Puts back the handler that was there before ours for `sig`.
fn restore(sig: libc::c_int) {
    // SAFETY: PREVIOUS is written once, in `install`, before any handler
    // of ours can run.
    let previous = unsafe {
        (*std::ptr::addr_of!(PREVIOUS))
            .get(sig.unsigned_abs() as usize)
            .copied()
            .flatten()
    };
    // SAFETY: sigaction with a valid action (the old one, or the default).
    unsafe {
        let action = previous.unwrap_or_else(|| {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            default
        });
        real_sigaction(sig, &raw const action, std::ptr::null_mut());
    }
}

/// Installs `handler` (a plain one, or with `SA_SIGINFO` in `flags` one
/// that takes the siginfo) for `sig`.
fn handle(sig: libc::c_int, handler: usize, flags: libc::c_int) {
    // SAFETY: sigaction structs are plain data; the handler has the
    // signature `flags` says.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK | flags;
        libc::sigemptyset(&raw mut action.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if real_sigaction(sig, &raw const action, &raw mut old) == 0 {
            let at = sig.unsigned_abs() as usize;
            (*std::ptr::addr_of_mut!(PREVIOUS))[at] = Some(old);
            if !CRASHES.contains(&sig) && handler == on_crash as Crash as usize {
                (*std::ptr::addr_of_mut!(OURS))[at] = Some(action);
            }
        }
    }
}

/// Whether the trace was saved for a crash already (the rings are not
/// sent again after it).
pub(crate) fn saved() -> bool {
    SAVED_FOR_CRASH.load(Ordering::Relaxed)
}

/// Starts the saver and installs the crash handlers, and with `snapshots`
/// (flight-recorder mode) SIGUSR2's.
pub(crate) fn install(snapshots: bool) {
    type Plain = extern "C" fn(libc::c_int);
    start_saver();
    for sig in CRASHES {
        handle(sig, on_crash as Crash as usize, libc::SA_SIGINFO);
    }
    let usr2 = (!snapshots).then_some(libc::SIGUSR2);
    for sig in ENDINGS.into_iter().chain(usr2) {
        // A signal the program was started with ignored (`nohup`, a
        // shell's `&`) or caught stays as it is.
        if default_action(sig) {
            handle(sig, on_crash as Crash as usize, libc::SA_SIGINFO);
        }
    }
    if snapshots {
        handle(libc::SIGUSR2, on_usr2 as Plain as usize, 0);
    }
}

/// Whether `sig` has its default action now.
fn default_action(sig: libc::c_int) -> bool {
    // SAFETY: sigaction with no new action only reads the current one
    // into a struct of ours.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        real_sigaction(sig, std::ptr::null(), &raw mut now) == 0
            && now.sa_sigaction == libc::SIG_DFL
    }
}
