//! The recorder's side of the trace clock: whether the time-stamp
//! counter can be trusted, and readings of it paired with
//! `CLOCK_MONOTONIC`.

/// Whether this CPU's TSC runs at one rate on every CPU and through
/// sleep states (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`),
/// so that ticks read on different CPUs compare.
#[must_use]
pub fn tsc_is_invariant() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    info.lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|flags| {
            let has = |f: &str| flags.split_whitespace().any(|w| w == f);
            has("constant_tsc") && has("nonstop_tsc")
        })
}

/// `CLOCK_MONOTONIC` in nanoseconds.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec.cast_unsigned() * 1_000_000_000 + ts.tv_nsec.cast_unsigned()
}

/// The TSC now (0 off x86-64).
#[must_use]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

/// A reading of the trace clock (`tsc` true: the TSC, else monotonic
/// nanoseconds) and `CLOCK_MONOTONIC` at the same moment: the TSC read
/// between two monotonic readings, paired with their middle (the pair of
/// the three closest together out of a few tries).
#[must_use]
pub fn pair(tsc: bool) -> (u64, u64) {
    if !tsc {
        let now = monotonic_ns();
        return (now, now);
    }
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let before = monotonic_ns();
        let ticks = self::tsc();
        let after = monotonic_ns();
        let width = after.saturating_sub(before);
        if width < best.0 {
            best = (width, ticks, before + width / 2);
        }
    }
    (best.1, best.2)
}

/// `ns` nanoseconds in ticks of the trace clock (at least 1): the TSC's
/// rate measured over 20 ms against `CLOCK_MONOTONIC` (what the
/// runtime's time filter compares durations in).
#[must_use]
pub fn ns_to_ticks(ns: u64, tsc: bool) -> u64 {
    if !tsc {
        return ns.max(1);
    }
    let (t0, m0) = pair(true);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (t1, m1) = pair(true);
    let rate = t1.saturating_sub(t0) as f64 / m1.saturating_sub(m0).max(1) as f64;
    // A duration of hours in ticks stays far below 2^64; `as` saturates.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ticks = (ns as f64 * rate).round() as u64;
    ticks.max(1)
}
