//! The process's last hand-overs, made other than by the `atexit` hooks:
//! at `_exit` (which runs none), in a crash's save on the saver thread,
//! and before an exec (with the frames that say where the program ended,
//! taken back if the exec fails).

use ichnos_data::wire::{self, FrameHeader};

use crate::channel::Channel;
use crate::{clock, crash, ring, send_maps, short, BUFFER, CONFIG};

/// The process ends without its `atexit` hooks (`_exit`): what they
/// would have sent goes now, the mappings first.
pub(crate) fn end_of_process() {
    // A signal that ends the process waits for its save: ended of it.
    crash::finish_pending_ending();
    send_maps();
    if CONFIG.get().is_some_and(|c| c.ring.is_some()) {
        ring::save_at_exit();
    } else {
        ichnos_buf::fill::flush_at_exit();
    }
    Channel::report_losses();
    crate::channel::say_ended();
}

/// The save for a crash, on the saver thread: the mappings, then every
/// thread's ring or buffer.
pub(crate) fn save_for_crash() {
    send_maps();
    match BUFFER.get() {
        Some(buf) if CONFIG.get().is_some_and(|c| c.ring.is_some()) => ring::save(buf),
        Some(_) => ichnos_buf::fill::flush_at_exit(),
        None => {}
    }
    Channel::report_losses();
    crate::channel::say_ended();
}

/// The program is about to exec: the mappings, then the calling
/// thread's buffer (every ring, in flight-recorder mode), go now.
pub(crate) fn before_exec() {
    // Not `handlers::leave_all`, as `_exit` and `exit` do: an exec that
    // fails returns, and so may the handler it was made in; the write it
    // interrupted, closed here, would then count twice.
    crash::finish_pending_ending();
    send_maps();
    if CONFIG.get().is_some_and(|c| c.ring.is_some()) {
        ring::save_at_exit();
    } else {
        short::before_marker();
        if let Some(buf) = BUFFER.get() {
            let _ = buf.flush();
        }
    }
    // The last frame of this program for the calling thread and for the
    // main thread (the new program runs as the process's id, whichever
    // thread exec'ed): empty frames flagged last, after which a reader
    // starts the thread afresh.
    mark_program_end(wire::FRAME_LAST | wire::FRAME_EXEC);
}

/// The exec failed, and the program goes on: the frames flagged last
/// before it are taken back (empty frames flagged resumed).
pub(crate) fn after_failed_exec() {
    mark_program_end(wire::FRAME_RESUMED);
}

/// An empty frame flagged `flag` for the calling thread and the main
/// thread (the new program runs as the process's id, whichever thread
/// exec'ed).
fn mark_program_end(flag: u32) {
    // SAFETY: gettid and getpid have no preconditions.
    let (tid, pid) = unsafe { (libc::gettid(), libc::getpid()) };
    for thread in [tid, pid] {
        let header = FrameHeader {
            tid: thread.cast_unsigned(),
            flags: flag,
            lost: 0,
            len: 0,
            ticks: clock::ticks(),
        };
        Channel::send(header, &[]);
        if tid == pid {
            break;
        }
    }
}
