//! What the recorder asked for, from the environment it gave the program.

use std::ffi::OsString;

/// The variables `ichnos trace` sets (documented in `docs/function-trace.md`).
pub(crate) mod var {
    /// The recorder's socket.
    pub const SOCKET: &str = "ICHNOS_TRACE_SOCKET";
    /// `tsc` or `monotonic`.
    pub const CLOCK: &str = "ICHNOS_TRACE_CLOCK";
    /// Bytes per thread buffer.
    pub const BUFFER: &str = "ICHNOS_TRACE_BUFFER";
    /// Bytes of the process's shared buffer.
    pub const SHARED: &str = "ICHNOS_TRACE_SHARED";
    /// Flight recorder: bytes per thread ring.
    pub const RING: &str = "ICHNOS_TRACE_RING";
    /// Deepest call depth traced.
    pub const DEPTH: &str = "ICHNOS_TRACE_DEPTH";
}

/// The runtime's settings.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub socket: OsString,
    pub tsc: bool,
    pub buffer: usize,
    pub shared: usize,
    pub ring: Option<usize>,
    pub depth: Option<u32>,
}

fn number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

impl Config {
    /// The settings, or `None` when the program was not started by
    /// `ichnos trace` (no socket): the runtime then stays out of the way.
    pub(crate) fn from_env() -> Option<Config> {
        let socket = std::env::var_os(var::SOCKET).filter(|s| !s.is_empty())?;
        let page = 4096u64;
        let round = |n: u64| n.div_ceil(page).max(1) * page;
        let buffer = number(var::BUFFER).map_or(128 << 10, |n| round(n.clamp(4096, 1 << 30)));
        let ring = number(var::RING).map(|n| n.clamp(4096, 1 << 34).next_power_of_two());
        // A frame is a whole thread buffer or ring and its header, written
        // all or nothing: the shared buffer holds two of them at least,
        // or every frame of a large -b or --ring would be refused.
        let frame = buffer.max(ring.unwrap_or(0)) + page;
        let shared = number(var::SHARED)
            .map_or(8 << 20, |n| round(n.clamp(64 << 10, 1 << 34)))
            .max(2 * frame);
        Some(Config {
            socket,
            tsc: std::env::var(var::CLOCK).is_ok_and(|c| c == "tsc"),
            buffer: buffer as usize,
            shared: shared as usize,
            ring: ring.map(|n| n as usize),
            depth: number(var::DEPTH).map(|d| d.min(u64::from(u32::MAX)) as u32),
        })
    }
}
