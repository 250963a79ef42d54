//! A thread's first traced call holds none of the runtime's one-time work
//! for the thread: the set-up of its buffer (a mapping, the thread's
//! registration) and the first store into it (a page fault, about a
//! microsecond here, now made before the first event). Measured on the
//! trace itself: in `first_calls.c` the main thread and a thread it
//! starts each call `leaf` twice first thing, so the time from their
//! entry to the first `leaf`'s holds the hooks' work for one call, as the
//! time from the first `leaf`'s exit to the second's entry does (each a
//! clock reading and a write; tens of nanoseconds here, more where the
//! clock is slow to read). The first may exceed the second by little.
//! The least of a few runs is taken: an interrupt may fall in any one.
//!
//! And a process's first traced calls are there at all, where a library
//! the program links makes them from its constructor, which the dynamic
//! linker runs before the runtime's own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod trace_support;

use trace_support::*;

/// Per thread (by its first function), in nanoseconds: from its entry to
/// the first `leaf`'s, and from the first `leaf`'s exit to the second's
/// entry, from the Chrome export of the trace.
fn first_gaps(dir: &Path, data: &str) -> HashMap<String, (f64, f64)> {
    let json = dir.join("first.json");
    run(ichnos()
        .args(["report", "--trace", "-q", "--format", "chrome", "-o"])
        .arg(&json)
        .arg("-i")
        .arg(dir.join(data)));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    // Each thread's begins and ends, in order.
    let mut threads: HashMap<i64, Vec<(&str, &str, f64)>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "B" || e["ph"] == "E") {
        threads
            .entry(e["tid"].as_i64().unwrap())
            .or_default()
            .push((
                e["ph"].as_str().unwrap(),
                e["name"].as_str().unwrap_or(""),
                e["ts"].as_f64().unwrap() * 1e3,
            ));
    }
    threads
        .into_values()
        .map(|events| {
            let kinds: Vec<(&str, &str)> =
                events.iter().take(4).map(|(k, n, _)| (*k, *n)).collect();
            assert_eq!(
                kinds[1..],
                [("B", "leaf"), ("E", ""), ("B", "leaf")],
                "{events:?}"
            );
            let at = |i: usize| events[i].2;
            (events[0].1.to_owned(), (at(1) - at(0), at(3) - at(2)))
        })
        .collect()
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
        let mut least: HashMap<String, (f64, f64)> = HashMap::new();
        for _ in 0..5 {
            traced(dir.path(), "t.data", options, &[exe]);
            for (thread, (first, second)) in first_gaps(dir.path(), "t.data") {
                let l = least.entry(thread).or_insert((f64::MAX, f64::MAX));
                *l = (l.0.min(first), l.1.min(second));
            }
        }
        for caller in ["main", "worker"] {
            let (first, second) = least[caller];
            // A page fault alone is about 1,000 ns here; the set-up more.
            assert!(
                first < second + 400.0,
                "{options:?}: {first} ns from {caller}'s entry to the first leaf's at least, {second} ns from its exit to the second's"
            );
        }
    }
}

/// `ctor_main.c` linked with the library built from `library` (with
/// `library_extra`).
fn ctor_main_with(dir: &Path, library: &str, library_extra: &[&str]) -> PathBuf {
    build_with_library(dir, library, library_extra, "ctor_main.c", &[]).0
}

#[test]
fn calls_a_linked_library_makes_from_its_constructor_are_traced() {
    let dir = tempfile::tempdir().unwrap();
    let exe = ctor_main_with(dir.path(), "ctor_lib.c", &[]);
    // From the sources: the library's constructor, then the program's,
    // then main.
    let expected = [
        "ctor_lib_init() {",
        "  ctor_work() {",
        "    ctor_leaf();",
        "    ctor_leaf();",
        "    ctor_leaf();",
        "  } /* ctor_work */",
        "} /* ctor_lib_init */",
        "main_init();",
        "main() {",
        "  lib_call() {",
        "    ctor_leaf();",
        "  } /* lib_call */",
        "} /* main */",
    ];
    let paths: [&[&str]; 4] = [&[], &["--ring", "64K"], &["-D", "9"], &["--monotonic"]];
    for options in paths {
        let stderr = traced(dir.path(), "t.data", options, &[exe.to_str().unwrap()]);
        assert_eq!(
            replayed_calls(dir.path(), "t.data"),
            expected,
            "{options:?}: {stderr}"
        );
    }
}

#[test]
fn a_vfork_child_of_a_constructor_does_not_start_the_trace_for_the_program() {
    // Its traced call comes first, in the program's memory; the trace
    // starts at the program's own first call after it.
    let dir = tempfile::tempdir().unwrap();
    let exe = ctor_main_with(dir.path(), "vfork_ctor_lib.c", &[]);
    let expected = [
        "parent_work();",
        "main_init();",
        "main() {",
        "  lib_call() {",
        "    parent_work();",
        "  } /* lib_call */",
        "} /* main */",
    ];
    for options in [&[][..], &["-D", "9"]] {
        let stderr = traced(dir.path(), "t.data", options, &[exe.to_str().unwrap()]);
        assert!(!stderr.contains("not traced"), "{options:?}: {stderr}");
        assert_eq!(
            replayed_calls(dir.path(), "t.data"),
            expected,
            "{options:?}: {stderr}"
        );
    }
}

#[test]
fn an_ifunc_resolver_run_before_the_runtime_is_relocated_does_not_start_it() {
    // A library bound at load (-z now) whose instrumented ifunc resolver
    // the dynamic linker runs while relocating it, before the runtime:
    // the resolver's call is not traced, and the program runs.
    let dir = tempfile::tempdir().unwrap();
    let exe = ctor_main_with(dir.path(), "ifunc_lib.c", &["-Wl,-z,now"]);
    let stderr = traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    assert_eq!(
        replayed_calls(dir.path(), "t.data"),
        [
            "main_init();",
            "main() {",
            "  lib_call() {",
            "    add_one_plain();",
            "  } /* lib_call */",
            "} /* main */",
        ],
        "{stderr}"
    );
}

#[test]
fn an_ifunc_resolver_of_the_program_run_before_the_c_library_is_up_does_not_start_it() {
    // The program's own resolver runs while the program is relocated:
    // the runtime is relocated by then, the C library not initialised
    // (an early start there read no environment, and the whole program
    // went untraced).
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "ifunc_main.c", &[]);
    let stderr = traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    assert_eq!(
        replayed_calls(dir.path(), "t.data"),
        [
            "main() {",
            "  work() {",
            "    add_one_plain();",
            "  } /* work */",
            "} /* main */"
        ],
        "{stderr}"
    );
}
