//! The sampling profiler: where a program's time goes, with complete
//! stacks through code built without frame pointers and through JIT code.
//!
//! [`record()`] samples a command (with its threads and children),
//! running processes, or the whole machine through `perf_event_open`,
//! keeps a model of each process's address space from the kernel's mmap
//! records (an `ichnos-image` image over one shared section cache, and an
//! `ichnos-code` code map whose rows are converted once per build id),
//! unwinds every sample as it arrives — SFrame and `.eh_frame` rows, CFI
//! evaluated where rows cannot express it, JIT tables read from the
//! target's code registry, frame pointers last — and writes interned
//! stacks of return addresses to a recording (`ichnos-data`), never the
//! stack bytes. [`report`] reads a recording back, symbolizes it offline
//! per object (`ichnos-symbol`, through symbol indexes), and aggregates it
//! into a top table, a call tree and folded stacks.

pub mod launch;
mod mapping;
pub mod output;
pub mod record;
pub mod report;
mod stop;
mod sys;

pub use record::{
    record, EventChoice, OffCpuSummary, RecordError, RecordOptions, RecordTarget, Status, Summary,
};
pub use stop::catch_stop_signals;
pub use sys::{alive, uname, ExitStatus};

/// Where ichnos keeps what it makes once and reads again (symbol indexes,
/// the running kernel's table of functions): `$XDG_CACHE_HOME/ichnos`,
/// else `~/.cache/ichnos`.
#[must_use]
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?;
    Some(cache.join("ichnos"))
}
