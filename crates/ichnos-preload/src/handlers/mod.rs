//! The program's signal handlers, run through the runtime's own entry
//! point ([`entry`]), so that a handler left by a `longjmp` does not stop
//! its thread's trace.
//!
//! A hook reads the time-stamp counter between reserving its event's
//! bytes and committing them, and that read is most of a hook's time: a
//! timer's signal lands inside an open write often. When the handler
//! returns, the write commits. When it `siglongjmp`s out instead (as
//! programs that bound a computation's time do, and interpreters on a
//! timeout), the write is never finished, and the thread's buffer, whose
//! bytes are handed over only when no write is open, would never be
//! handed over again: the thread's trace ended there, in any mode.
//!
//! So a handler the program installs (through `sigaction`, `signal` or
//! the others `dispositions.rs` wraps) is kept here and the entry point
//! installed in its place, with the program's flags and mask. The entry
//! point notes the write the handler interrupted, runs the handler and,
//! when it returns, forgets it; a `longjmp` out of handlers closes the
//! writes they interrupted (`levels.rs`). The program sees its own
//! handler wherever it asks for the action. Installs are made one at a
//! time, under a lock held with the thread's signals blocked, so that
//! the kernel's action and the handler kept here always agree. (A fault
//! inside an install whose handler installs in turn goes on under its
//! thread's lock; one whose handler `longjmp`s out lets the lock go. A
//! holder that is gone, the lock as a `fork` or `clone` copied it, is
//! not waited for.)
//!
//! Where a handler resets to the default as it runs (`SA_RESETHAND`, as
//! `sysv_signal` installs it) and the runtime stands in for that default
//! (`crash.rs`), the entry point puts the runtime's stand-in back, as
//! `sigaction` does for a default set by the program: otherwise the next
//! such signal would end the program without its trace being saved.
//!
//! Not followed: handlers installed before the runtime started (by the
//! constructors of the libraries loaded before it) or by a raw system
//! call; a handler left by other means than a `longjmp` (`setcontext`, a
//! C++ exception), which the counts then take for still running.

#[cfg(target_arch = "x86_64")]
mod levels;

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

use ichnos_buf::fill::with_signals_blocked;

#[cfg(target_arch = "x86_64")]
pub(crate) use levels::{after_fork_child, before_longjmp, leave_all, note_setjmp};

/// Signals are numbered below this.
const SIGNALS: usize = 65;

/// The program's handler of each signal where the entry point stands in
/// for it (0: none).
static PROGRAM: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
/// Its flags (`sa_flags`).
static FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];
/// Held while an action is installed (and [`PROGRAM`] kept with it): the
/// holder's thread id, 0 when free.
static INSTALLING: AtomicI32 = AtomicI32::new(0);
/// How many of the program's handlers ran on the holder's thread when it
/// took [`INSTALLING`].
static INSTALL_LEVELS: AtomicU32 = AtomicU32::new(0);

/// The program's handler as the entry point calls it: with the siginfo
/// and context the kernel gave (a handler of one argument ignores them).
type Handler = unsafe extern "C-unwind" fn(c_int, *mut libc::siginfo_t, *mut c_void);

/// The entry point's address, as an action holds it.
pub(crate) fn entry_address() -> libc::sighandler_t {
    entry as Handler as libc::sighandler_t
}

/// Whether `handler` is a function of the program's (not the default,
/// ignoring, an error or `sigset`'s hold), to run through the entry
/// point while tracing is on.
pub(crate) fn to_wrap(sig: c_int, handler: libc::sighandler_t) -> bool {
    const SIG_HOLD: libc::sighandler_t = 2;
    crate::tracing()
        && slot(sig).is_some()
        && ![libc::SIG_DFL, libc::SIG_IGN, libc::SIG_ERR, SIG_HOLD].contains(&handler)
        && handler != entry_address()
        && crate::ending::owning_process()
}

fn slot(sig: c_int) -> Option<usize> {
    usize::try_from(sig).ok().filter(|&s| s > 0 && s < SIGNALS)
}

/// Runs `install` (a change of an action and of what is kept here) alone:
/// under [`INSTALLING`], with the thread's asynchronous signals blocked,
/// so that no handler of the program's installs an action while one is
/// half made. (A fault inside the install, whose handler installs in
/// turn, goes on under the lock its thread holds.) Not in a process that
/// is not the runtime's owner (a child of `vfork` or of `clone` sharing
/// its memory, or a copy that does not trace), where nothing is kept
/// here ([`keep`]): there it would wait for, or be taken over by, the
/// owner's threads, which are none of its own. The C library's functions
/// `install` calls must be looked up before: `dlsym` takes the loader's
/// lock, which a constructor that installs a handler holds.
pub(crate) fn installing<R>(install: impl FnOnce() -> R) -> R {
    with_signals_blocked(|| {
        if !crate::ending::owning_process() {
            return install();
        }
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        let taken = take_install_lock(me);
        if taken {
            INSTALL_LEVELS.store(handler_levels(), Ordering::Relaxed);
        }
        let result = install();
        if taken {
            INSTALLING.store(0, Ordering::Release);
        }
        result
    })
}

/// The program's handlers running on this thread.
fn handler_levels() -> u32 {
    #[cfg(target_arch = "x86_64")]
    return levels::levels();
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// A `longjmp` leaves this thread's handlers down to `target` running:
/// where the thread holds [`INSTALLING`], taken with that many running
/// or fewer, a fault inside its install ran the handler now left, and the
/// install never finishes: the lock is let go (else every other thread's
/// install would wait for it for good).
#[cfg(target_arch = "x86_64")]
fn abandon_install(target: u32) {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    if INSTALLING.load(Ordering::Relaxed) == me && INSTALL_LEVELS.load(Ordering::Relaxed) >= target
    {
        INSTALLING.store(0, Ordering::Release);
    }
}

/// Takes [`INSTALLING`] for thread `me`: true once taken; false where
/// `me` holds it already (a fault inside an install, whose handler
/// installs an action in turn: it goes on, not waiting for itself). A
/// holder that is no thread of this process (the lock as a fork or a
/// `clone` copied it, held by a thread the copy does not have) never
/// lets go: the lock is taken from it.
fn take_install_lock(me: i32) -> bool {
    let mut spins = 0u32;
    loop {
        match INSTALLING.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(holder) if holder == me => return false,
            Err(0) => {}
            Err(holder) => {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(128) {
                    if !thread_of_this_process(holder)
                        && INSTALLING
                            .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                    {
                        return true;
                    }
                    // SAFETY: sched_yield has no preconditions. (It gives
                    // the CPU to a holder of the same priority waiting for
                    // it; one of a lower real-time priority than the
                    // spinner's still waits.)
                    unsafe { libc::sched_yield() };
                }
            }
        }
        std::hint::spin_loop();
    }
}

/// Whether `tid` is a thread of this process (`tgkill` of no signal
/// finds none elsewhere). Keeps `errno`.
fn thread_of_this_process(tid: i32) -> bool {
    let _errno = ichnos_buf::fill::ErrnoGuard::save();
    // SAFETY: tgkill with signal 0 only checks that the thread exists;
    // getpid has no preconditions.
    let found = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) } == 0;
    // SAFETY: errno is this thread's.
    found || unsafe { *libc::__errno_location() } != libc::ESRCH
}

/// In the child of a fork: the lock as the fork found it may be another
/// thread's, which the child does not have.
pub(crate) fn forget_installing() {
    INSTALLING.store(0, Ordering::Relaxed);
}

/// The program's handler of `sig` kept here (0: none), and its flags.
pub(crate) fn program(sig: c_int) -> (libc::sighandler_t, c_int) {
    slot(sig).map_or((0, 0), |s| {
        (
            PROGRAM[s].load(Ordering::Acquire),
            FLAGS[s].load(Ordering::Relaxed),
        )
    })
}

/// Keeps `handler` (with `flags`) as the program's handler of `sig`, or
/// none (0). Called, [`installing`], before the action that installs the
/// entry point, so that the entry point never runs without it. Not in a
/// process that is not the runtime's owner: a child of `vfork` shares its
/// parent's memory, and its handlers (reset to the default before it
/// execs, as gdb's are) are not its parent's.
pub(crate) fn keep(sig: c_int, handler: libc::sighandler_t, flags: c_int) {
    if !crate::ending::owning_process() {
        return;
    }
    if let Some(s) = slot(sig) {
        if handler != 0 {
            // A handler that runs inside a flush could leave it by a
            // longjmp, and the buffer could never be flushed again.
            if let Some(buffer) = crate::BUFFER.get() {
                buffer.set_flush_blocks_signals(true);
            }
        }
        FLAGS[s].store(flags, Ordering::Relaxed);
        PROGRAM[s].store(handler, Ordering::Release);
    }
}

/// `found`, an action's handler as the C library gave it, as the program
/// sees it: its own handler where the entry point stands in for it
/// (`kept`: the one kept when the action was found, under the same
/// [`installing`]).
pub(crate) fn as_seen(found: libc::sighandler_t, kept: libc::sighandler_t) -> libc::sighandler_t {
    if found == entry_address() && kept != 0 {
        kept
    } else {
        found
    }
}

/// What the kernel calls in place of the program's handler.
unsafe extern "C-unwind" fn entry(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let Some(s) = slot(sig) else { return };
    let handler = PROGRAM[s].load(Ordering::Acquire);
    if handler == 0 {
        return;
    }
    if FLAGS[s].load(Ordering::Relaxed) & libc::SA_RESETHAND != 0 {
        stand_in_again(sig);
    }
    #[cfg(target_arch = "x86_64")]
    let running = levels::enter();
    // SAFETY: the program installed this function as the handler of
    // `sig`, with these flags; it is called as the kernel would have.
    unsafe { std::mem::transmute::<usize, Handler>(handler)(sig, info, context) };
    #[cfg(target_arch = "x86_64")]
    levels::leave(running);
}

/// A handler that reset `sig`'s action to the default as it began: the
/// runtime's stand-in for that default put back, where there is one and
/// nothing else was installed since.
fn stand_in_again(sig: c_int) {
    let Some(ours) = crate::crash::standing_in_for(sig) else {
        return;
    };
    installing(|| {
        // SAFETY: sigaction is plain data, all-zero valid.
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a struct of ours for the action; then the runtime's
        // valid action. sigaction is async-signal-safe.
        unsafe {
            if crate::dispositions::real_sigaction(sig, std::ptr::null(), &raw mut now) == 0
                && now.sa_sigaction == libc::SIG_DFL
            {
                crate::dispositions::real_sigaction(sig, &raw const ours, std::ptr::null_mut());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, since all use the process's one lock: a process that is
    /// not the runtime's owner (a child of `vfork`, sharing its parent's
    /// memory) installs without the lock, neither waiting for a holder
    /// of its parent's nor taking the lock from it; in the owner, an
    /// install inside an install on the same thread (a fault inside one,
    /// whose handler installs in turn) goes on, not waiting for itself,
    /// and the outer one still lets the lock go; a lock held by a thread
    /// that is gone (as a fork's child finds one another thread of its
    /// parent held) is taken from it.
    #[test]
    fn the_install_lock_never_waits_for_a_holder_that_cannot_let_go() {
        let (tell, told) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tell.send(unsafe { libc::gettid() }).unwrap();
            released.recv().unwrap();
        });
        let live = told.recv().unwrap();
        INSTALLING.store(live, Ordering::Relaxed);
        assert_eq!(installing(|| 6), 6);
        assert_eq!(INSTALLING.load(Ordering::Relaxed), live);
        INSTALLING.store(0, Ordering::Relaxed);
        release.send(()).unwrap();
        holder.join().unwrap();

        crate::ending::own();
        assert_eq!(installing(|| installing(|| 7)), 7);
        assert_eq!(INSTALLING.load(Ordering::Relaxed), 0);
        // SAFETY: gettid has no preconditions.
        let gone = std::thread::spawn(|| unsafe { libc::gettid() })
            .join()
            .unwrap();
        INSTALLING.store(gone, Ordering::Relaxed);
        assert_eq!(installing(|| 8), 8);
        assert_eq!(INSTALLING.load(Ordering::Relaxed), 0);
    }
}
