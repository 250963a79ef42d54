//! Named spans: `ichnos_span_begin(name)` and `ichnos_span_end(name)`
//! mark a stretch of a thread's work that is no function of its own,
//! and the trace shows it as a call named `name`.
//!
//! A span is named by its name's address, as a call by its function's;
//! the first time the process begins a span of a name, the name itself
//! goes to the recorder in a names frame, before the span's events can
//! (they wait in the thread's buffer). So a name must be a string the
//! process keeps (a literal), and its first use takes the channel's lock
//! and allocates: not from a signal handler.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use ichnos_data::wire::{self, event, FrameHeader, MAX_ADDRESS, MAX_SPAN_NAME};

use crate::channel::Channel;

/// Name addresses whose names were sent (0: a free slot); past it full,
/// a name is sent at each use (the recorder keeps the first).
const SENT_SLOTS: usize = 1024;
static SENT: [AtomicU64; SENT_SLOTS] = [const { AtomicU64::new(0) }; SENT_SLOTS];
/// Slots looked at from a name's own before it counts as not sent.
const PROBES: usize = 16;

/// Whether the name at `address` was sent; notes it as sent if not.
fn first_use(address: u64) -> bool {
    // Fibonacci hashing of the address, to the table's size.
    let home = (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % SENT_SLOTS;
    for i in 0..PROBES {
        let slot = &SENT[(home + i) % SENT_SLOTS];
        match slot.compare_exchange(0, address, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) if seen == address => return false,
            Err(_) => {}
        }
    }
    true
}

/// In the child of a fork: its connection is new, its names not sent.
pub(crate) fn forget_after_fork() {
    for slot in &SENT {
        slot.store(0, Ordering::Relaxed);
    }
}

/// Forgets that the name at `address` was sent (its send failed).
fn unsent(address: u64) {
    for slot in &SENT {
        if slot
            .compare_exchange(address, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Sends `name` (at `address`) in a names frame; false if it was lost.
fn send_name(address: u64, name: &CStr) -> bool {
    let bytes = name.to_bytes();
    let mut body = Vec::with_capacity(16 + MAX_SPAN_NAME);
    wire::push_span_name(&mut body, address, bytes);
    let header = FrameHeader {
        // SAFETY: getpid has no preconditions.
        tid: unsafe { libc::getpid() }.cast_unsigned(),
        flags: wire::FRAME_NAMES,
        lost: 0,
        len: body.len() as u64,
        ticks: crate::clock::ticks(),
    };
    Channel::send(header, &body)
}

/// A span event of `kind` for the name at `name`.
fn span(kind: u8, name: *const c_char) {
    if name.is_null() || !crate::tracing() {
        return;
    }
    let address = name as u64 & MAX_ADDRESS;
    if kind == event::SPAN_BEGIN && first_use(address) {
        // SAFETY: the caller passes a NUL-terminated string (the C ABI's
        // contract, in ichnos.h).
        if !send_name(address, unsafe { CStr::from_ptr(name) }) {
            // Sent at the next begin instead.
            unsent(address);
        }
    }
    crate::record_marker(kind, address);
}

/// Begins the span called `name` (a NUL-terminated string the process
/// keeps, such as a literal) in the calling thread's trace.
#[no_mangle]
pub extern "C" fn ichnos_span_begin(name: *const c_char) {
    span(event::SPAN_BEGIN, name);
}

/// Ends the innermost span called `name` (the same pointer the begin
/// was given) in the calling thread's trace.
#[no_mangle]
pub extern "C" fn ichnos_span_end(name: *const c_char) {
    span(event::SPAN_END, name);
}
