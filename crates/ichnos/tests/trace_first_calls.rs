//! A thread's first traced call holds none of the runtime's one-time work
//! for the thread: the set-up of its buffer (a mapping, the thread's
//! registration) and the first store into it (a page fault, about a
//! microsecond here, now made before the first event). Measured on the
//! trace itself: in `first_calls.c` the main thread and a thread it starts
//! each call `leaf` first thing, so from their entry to `leaf`'s there is
//! only the call, tens of nanoseconds. The least of a few runs is taken:
//! an interrupt may fall in any one of them.

use std::path::Path;

mod trace_support;

use trace_support::*;

/// Nanoseconds from the entry of `caller` to the entry of `leaf` after
/// it, per thread, from the Chrome export of the trace.
fn first_gaps(dir: &Path, data: &str) -> Vec<(String, f64)> {
    let json = dir.join("first.json");
    run(ichnos()
        .args(["report", "--trace", "-q", "--format", "chrome", "-o"])
        .arg(&json)
        .arg("-i")
        .arg(dir.join(data)));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let begins: Vec<(i64, &str, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "B")
        .map(|e| {
            (
                e["tid"].as_i64().unwrap(),
                e["name"].as_str().unwrap(),
                e["ts"].as_f64().unwrap() * 1e3,
            )
        })
        .collect();
    let mut gaps = Vec::new();
    for caller in ["main", "worker"] {
        let (tid, _, entered) = *begins
            .iter()
            .find(|(_, name, _)| *name == caller)
            .unwrap_or_else(|| panic!("no {caller} in {begins:?}"));
        let (_, _, leaf) = *begins
            .iter()
            .find(|(t, name, at)| *t == tid && *name == "leaf" && *at >= entered)
            .unwrap_or_else(|| panic!("no leaf under {caller} in {begins:?}"));
        gaps.push((caller.to_owned(), leaf - entered));
    }
    gaps
}

#[test]
fn a_threads_first_call_holds_none_of_its_set_up() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "first_calls.c", &["-O1", "-pthread"]);
    let exe = exe.to_str().unwrap();
    // The paths of the hooks: the plain trace, the flight recorder, the
    // scoped path (-D, and the clock read by clock_gettime).
    let paths: [&[&str]; 4] = [&[], &["--ring", "64K"], &["-D", "9"], &["--monotonic"]];
    for options in paths {
        let mut least = [f64::MAX; 2];
        for _ in 0..5 {
            traced(dir.path(), "t.data", options, &[exe]);
            for (i, (_, gap)) in first_gaps(dir.path(), "t.data").iter().enumerate() {
                least[i] = least[i].min(*gap);
            }
        }
        // A page fault alone is about 1,000 ns here; the set-up more.
        for (caller, gap) in ["main", "worker"].iter().zip(least) {
            assert!(
                gap < 500.0,
                "{options:?}: {gap} ns from {caller}'s entry to leaf's at least"
            );
        }
    }
}
