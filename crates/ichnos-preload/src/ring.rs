//! Flight-recorder mode: every thread's ring handed over at exit, on a
//! crash, on SIGUSR2 and on `ichnos_snapshot()`.
//!
//! A thread that exits hands its own ring over (the buffer's exit
//! flush); the exit hook saves the threads still running.
//!
//! The crash handlers save the rings, put back the handler that was there
//! before and return: the faulting instruction runs again and the signal
//! takes its course (a core dump, the program's own handler); `abort`
//! raises SIGABRT again itself. Saving copies the rings, which allocates:
//! a crash inside `malloc` may lose the snapshot, never the crash.

use std::sync::atomic::{AtomicBool, Ordering};

use ichnos_buf::fill::{FillBuffer, Flush};
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
    if let Some(buf) = crate::BUFFER.get() {
        if !SAVED_FOR_CRASH.load(Ordering::Relaxed) {
            save(buf);
        }
    }
}

extern "C" fn on_crash(sig: libc::c_int) {
    if !SAVED_FOR_CRASH.swap(true, Ordering::SeqCst) {
        if let Some(buf) = crate::BUFFER.get() {
            save(buf);
        }
    }
    restore(sig);
}

extern "C" fn on_usr2(_sig: libc::c_int) {
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

fn handle(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: sigaction structs are plain data; the handler has the
    // signature SA_SIGINFO-less handlers have.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&raw mut action.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, &raw const action, &raw mut old) == 0 {
            (*std::ptr::addr_of_mut!(PREVIOUS))[sig.unsigned_abs() as usize] = Some(old);
        }
    }
}

/// Installs the exit hook and the signal handlers.
pub(crate) fn install() {
    for sig in CRASHES {
        handle(sig, on_crash);
    }
    handle(libc::SIGUSR2, on_usr2);
    // SAFETY: registering an exit hook.
    unsafe { libc::atexit(at_exit) };
}
