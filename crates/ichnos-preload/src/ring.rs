//! Flight-recorder mode: every thread's ring handed over at exit, on a
//! crash, on SIGUSR2 and on `ichnos_snapshot()`.
//!
//! A thread that exits hands its own ring over (the buffer's exit
//! flush); the exit hook saves the threads still running.
//!
//! The crash handlers save the rings, put back the handler that was there
//! before and return: the faulting instruction runs again and the signal
//! takes its course (a core dump, the program's own handler); a signal
//! that was sent rather than raised by a fault (`kill`, `raise`) is sent
//! again, and `abort` raises SIGABRT again itself. Both handlers keep the
//! interrupted code's `errno`. Saving copies the rings, which allocates:
//! a crash inside `malloc` may lose the snapshot, never the crash.

use std::sync::atomic::{AtomicBool, Ordering};

use ichnos_buf::fill::{ErrnoGuard, FillBuffer, Flush};
use ichnos_data::wire::{self, FrameHeader, EVENT_BYTES};

use crate::channel::Channel;

/// Signals that end a program with a core: saved first.
const CRASHES: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// The handlers before ours, by signal number.
static mut PREVIOUS: [Option<libc::sigaction>; 32] = [None; 32];
/// The rings were saved for a crash already (a second fault while saving
/// must not save again).
static SAVED_FOR_CRASH: AtomicBool = AtomicBool::new(false);

/// Every live thread's ring as one frame each.
pub(crate) fn save(buf: &FillBuffer) {
    let now = crate::clock::ticks();
    for (tid, records) in buf.snapshot_threads() {
        // Newest first in the ring; oldest first in the frame.
        let mut events = Vec::with_capacity(records.len() * EVENT_BYTES);
        let all: Vec<&[u8]> = records.iter().collect();
        for r in all.into_iter().rev() {
            events.extend_from_slice(r);
        }
        let header = FrameHeader {
            tid: tid.cast_unsigned(),
            flags: wire::FRAME_RING | wire::FRAME_LAST,
            lost: 0,
            len: events.len() as u64,
            ticks: now,
        };
        Channel::send(header, &events);
    }
}

/// A thread's ring when the thread exits (the main thread's when `exit`
/// runs its destructors, before the exit hooks).
pub(crate) fn thread_exit(f: &Flush<'_>) {
    if !SAVED_FOR_CRASH.load(Ordering::Relaxed) {
        crate::send_flush(f, wire::FRAME_RING);
    }
}

extern "C" fn at_exit() {
    save_at_exit();
}

/// The rings at the process's end (its `atexit` hook, or `_exit`), unless
/// a crash saved them.
pub(crate) fn save_at_exit() {
    if let Some(buf) = crate::BUFFER.get() {
        if !SAVED_FOR_CRASH.load(Ordering::Relaxed) {
            save(buf);
        }
    }
}

extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let _errno = ErrnoGuard::save();
    if !SAVED_FOR_CRASH.swap(true, Ordering::SeqCst) {
        if let Some(buf) = crate::BUFFER.get() {
            save(buf);
        }
    }
    restore(sig);
    // A fault comes back when its instruction runs again; a signal that
    // was sent (kill, raise, sigqueue: si_code <= 0) does not, so it is
    // sent again, to the handler put back. It is blocked until this
    // handler returns.
    // SAFETY: the kernel's siginfo for this delivery, read only.
    if !info.is_null() && unsafe { (*info).si_code } <= 0 {
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
    }
}

extern "C" fn on_usr2(_sig: libc::c_int) {
    let _errno = ErrnoGuard::save();
    if let Some(buf) = crate::BUFFER.get() {
        save(buf);
    }
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
        if let Some(old) = previous {
            libc::sigaction(sig, &raw const old, std::ptr::null_mut());
        } else {
            libc::signal(sig, libc::SIG_DFL);
        }
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
        if libc::sigaction(sig, &raw const action, &raw mut old) == 0 {
            (*std::ptr::addr_of_mut!(PREVIOUS))[sig.unsigned_abs() as usize] = Some(old);
        }
    }
}

/// Installs the exit hook and the signal handlers.
pub(crate) fn install() {
    type Crash = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    type Plain = extern "C" fn(libc::c_int);
    for sig in CRASHES {
        handle(sig, on_crash as Crash as usize, libc::SA_SIGINFO);
    }
    handle(libc::SIGUSR2, on_usr2 as Plain as usize, 0);
    // SAFETY: registering an exit hook.
    unsafe { libc::atexit(at_exit) };
}
