//! Flight-recorder mode: every thread's ring handed over at exit, on a
//! crash, on SIGUSR2 and on `ichnos_snapshot()`.
//!
//! A thread that exits hands its own ring over (the buffer's exit
//! flush); the exit hook saves the threads still running; a crash or
//! SIGUSR2 asks the saver thread (`crash.rs`) to save them.

use ichnos_buf::fill::{FillBuffer, Flush};
use ichnos_data::wire::{self, FrameHeader, EVENT_BYTES};

use crate::channel::Channel;

/// Every live thread's ring as one frame each.
pub(crate) fn save(buf: &FillBuffer) {
    let now = crate::clock::ticks();
    for (tid, records) in buf.snapshot_threads() {
        crate::send_thread_name(tid);
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

/// A thread's ring when the thread exits (not the main thread's, which
/// the exit hook saves with the threads still running).
pub(crate) fn thread_exit(f: &Flush<'_>) {
    if !crate::crash::saved() {
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
        if !crate::crash::saved() {
            save(buf);
        }
    }
}

/// Installs the exit hook (bound to the process: see [`crate::at_exit`]).
pub(crate) fn install() {
    crate::at_exit(at_exit);
}
