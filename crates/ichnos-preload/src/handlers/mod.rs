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
//! the kernel's action and the handler kept here always agree.
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
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

#[cfg(target_arch = "x86_64")]
pub(crate) use levels::{after_fork_child, before_longjmp, leave_all, note_setjmp};

/// Signals are numbered below this.
const SIGNALS: usize = 65;

/// The program's handler of each signal where the entry point stands in
/// for it (0: none).
static PROGRAM: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
/// Its flags (`sa_flags`).
static FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];
/// Held while an action is installed (and [`PROGRAM`] kept with it).
static INSTALLING: AtomicBool = AtomicBool::new(false);

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
/// under [`INSTALLING`], with the thread's asynchronous signals blocked
/// (a handler of this thread's that installed an action meanwhile would
/// wait for itself).
pub(crate) fn installing<R>(install: impl FnOnce() -> R) -> R {
    let was = block_signals();
    while INSTALLING
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    let result = install();
    INSTALLING.store(false, Ordering::Release);
    restore_signals(&was);
    result
}

/// In the child of a fork: the lock as the fork found it may be another
/// thread's, which the child does not have.
pub(crate) fn forget_installing() {
    INSTALLING.store(false, Ordering::Relaxed);
}

/// Blocks the thread's asynchronous signals; the mask before.
pub(crate) fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on local values and pthread_sigmask on
    // the calling thread.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut was: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut block);
        for sync in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&raw mut block, sync);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const block, &raw mut was);
        was
    }
}

/// Puts back the mask [`block_signals`] found.
pub(crate) fn restore_signals(was: &libc::sigset_t) {
    // SAFETY: a mask pthread_sigmask gave, on the calling thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, was, std::ptr::null_mut()) };
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
