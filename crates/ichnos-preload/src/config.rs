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
    /// `-F`: the executable's functions (hex link-time addresses, comma
    /// separated) whose calls alone are traced.
    pub const ONLY: &str = "ICHNOS_TRACE_ONLY";
    /// `-N`: the executable's functions left out, with their calls.
    pub const NOT: &str = "ICHNOS_TRACE_NOT";
    /// `-t`: calls shorter than this many ticks are left out.
    pub const MIN_TICKS: &str = "ICHNOS_TRACE_MIN_TICKS";
    /// `DEV:INODE` of the executable the filters were resolved for.
    pub const FILTER_FOR: &str = "ICHNOS_TRACE_FILTER_FOR";
}

/// Filter addresses taken at most (a pattern such as `*` names every
/// function of a large program).
const MAX_FILTERED: usize = 8192;

/// The runtime's settings.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub socket: OsString,
    pub tsc: bool,
    pub buffer: usize,
    pub shared: usize,
    pub ring: Option<usize>,
    pub depth: Option<u32>,
    /// Calls shorter than this many ticks are left out (`-t`).
    pub min_ticks: Option<u64>,
    /// `-F` and `-N` addresses (link-time), and the executable they are of.
    pub only: Vec<u64>,
    pub not: Vec<u64>,
    pub filter_for: Option<(u64, u64)>,
}

/// A comma-separated list of hex addresses (what does not parse is
/// left out).
fn addresses(name: &str) -> Vec<u64> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .filter_map(|a| u64::from_str_radix(a.trim(), 16).ok())
        .take(MAX_FILTERED)
        .collect()
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
        // A buffer or ring is sent as one frame, at most 1 GiB.
        let most = ichnos_data::wire::MAX_FRAME_BYTES;
        let buffer = number(var::BUFFER).map_or(128 << 10, |n| round(n.clamp(4096, most)));
        let ring = number(var::RING).map(ichnos_data::wire::ring_bytes);
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
            min_ticks: number(var::MIN_TICKS).filter(|&t| t > 0),
            only: addresses(var::ONLY),
            not: addresses(var::NOT),
            filter_for: std::env::var(var::FILTER_FOR).ok().and_then(|v| {
                let (dev, ino) = v.split_once(':')?;
                Some((dev.parse().ok()?, ino.parse().ok()?))
            }),
        })
    }

    /// The `-F` and `-N` functions at their run-time addresses, if this
    /// process runs the executable they were resolved for (else none: a
    /// program exec'ed into is traced whole).
    pub(crate) fn filters(&self) -> (Vec<u64>, Vec<u64>) {
        use std::os::unix::fs::MetadataExt;
        let this = std::fs::metadata("/proc/self/exe")
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if self.filter_for.is_none() || this != self.filter_for {
            return (Vec::new(), Vec::new());
        }
        let bias = program_bias();
        let at = |a: &[u64]| a.iter().map(|x| x.wrapping_add(bias)).collect();
        (at(&self.only), at(&self.not))
    }
}

/// The executable's load bias (0 for one that is not position
/// independent): what its link-time addresses are moved by.
fn program_bias() -> u64 {
    extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader hands a valid dl_phdr_info for the call, and
        // data is the u64 below, alive across dl_iterate_phdr.
        unsafe { *data.cast::<u64>() = (*info).dlpi_addr };
        // The first object is the executable: stop.
        1
    }
    let mut bias = 0u64;
    // SAFETY: a callback with the signature dl_iterate_phdr calls, and a
    // pointer to a local it writes before returning.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut bias).cast()) };
    bias
}
