//! The trace clock: the time-stamp counter where the recorder found it
//! invariant (one `rdtsc`, about 9 ns here), else `CLOCK_MONOTONIC`
//! through the vDSO.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether ticks are the TSC (set once at start-up, before tracing).
static TSC: AtomicBool = AtomicBool::new(false);

/// Chooses the TSC (`true`) or `CLOCK_MONOTONIC`.
pub(crate) fn use_tsc(tsc: bool) {
    TSC.store(tsc && cfg!(target_arch = "x86_64"), Ordering::Relaxed);
}

/// Whether ticks are the TSC.
pub(crate) fn is_tsc() -> bool {
    TSC.load(Ordering::Relaxed)
}

/// The clock now.
#[inline(always)]
#[allow(clippy::inline_always)] // twice on every traced call
pub(crate) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if TSC.load(Ordering::Relaxed) {
        // SAFETY: rdtsc has no preconditions; the recorder checked that
        // the CPU has an invariant TSC before asking for it.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// The TSC now, where the caller knows ticks are the TSC ([`is_tsc`]).
#[inline(always)]
#[allow(clippy::inline_always)] // twice on every traced call
pub(crate) fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions; the recorder checked that the
    // CPU has an invariant TSC before asking for it.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    monotonic_ns()
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec
        .cast_unsigned()
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec.cast_unsigned())
}
