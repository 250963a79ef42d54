//! `ichnos trace`, `ichnos replay` and `ichnos report --trace` end to end,
//! on C and C++ fixtures built with `-finstrument-functions` whose call
//! structure is known from their source: exact call counts, nesting,
//! filters, exec, threads, fork, signal handlers, exceptions, the time
//! filter, probes and spans. The process's end (crashes, exits, the
//! recorder killed) is `trace_process.rs`'s; exports `trace_exports.rs`'s.

use std::collections::HashMap;
use std::path::Path;

mod trace_support;

use trace_support::*;

#[test]
fn replay_and_totals_follow_the_known_call_structure() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    let stderr = traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "2"]);
    assert!(stderr.contains("0 lost"), "{stderr}");
    let lines: Vec<String> = replayed_calls(dir.path(), "t.data");
    // From the source: main -> top(2) -> middle(3) x2 -> leaf x3 each.
    let mut expected = vec!["main() {", "  top() {"];
    for _ in 0..2 {
        expected.extend([
            "    middle() {",
            "      leaf();",
            "      leaf();",
            "      leaf();",
            "    } /* middle */",
        ]);
    }
    // longjmp skipped the exits of deep and jumper: both end at the
    // longjmp, and after_jump runs in main again.
    expected.extend([
        "  } /* top */",
        "  jumper() {",
        "    deep();",
        "  } /* jumper */",
        "  after_jump();",
        "} /* main */",
    ]);
    assert_eq!(lines, expected, "{lines:#?}");
    let counts = calls(dir.path(), "t.data");
    for (name, n) in [
        ("main", 1),
        ("top", 1),
        ("middle", 2),
        ("leaf", 6),
        ("jumper", 1),
        ("deep", 1),
        ("after_jump", 1),
    ] {
        assert_eq!(counts.get(name), Some(&n), "{name}: {counts:?}");
    }
    // A table cut short says how much it left out.
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "3", "-i"])
        .arg(dir.path().join("t.data")));
    let table = String::from_utf8(out.stdout).unwrap();
    // Seven functions, three shown.
    assert!(
        table.ends_with("# 4 more functions (--limit 0 shows all)\n"),
        "{table}"
    );
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "6", "-i"])
        .arg(dir.path().join("t.data")));
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.ends_with("# 1 more function (--limit 0 shows all)\n"),
        "{table}"
    );
}

/// Seconds since 1970, now.
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A word of `uname`'s (`-n`, `-r`).
fn uname(option: &str) -> String {
    let out = run(std::process::Command::new("uname").arg(option));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn the_trace_table_says_what_was_recorded_where_and_when() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    let before = now_s();
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "2"]);
    traced(
        dir.path(),
        "r.data",
        &["--ring", "64K"],
        &[exe.to_str().unwrap(), "2"],
    );
    let after = now_s();
    let header = |data: &str| -> Vec<String> {
        let out = run(ichnos()
            .args(["report", "--trace", "-i"])
            .arg(dir.path().join(data)));
        let text = String::from_utf8(out.stdout).unwrap();
        let header: Vec<String> = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        assert_eq!(header.len(), 2, "{text}");
        header
    };
    // 13 calls from the source (see the test above): main, top, jumper,
    // deep, after_jump once, middle twice, leaf six times.
    let full = header("t.data");
    let path = dir.path().join("t.data");
    let first = format!("# {}: function trace of 13 calls over ", path.display());
    assert!(full[0].starts_with(&first), "{full:?}");
    assert!(
        full[0].ends_with("; 1 process, 1 thread; 0 lost"),
        "{full:?}"
    );
    let second = format!(
        "# recorded by ichnos {} on {} (Linux {}) at ",
        env!("CARGO_PKG_VERSION"),
        uname("-n"),
        uname("-r")
    );
    assert!(full[1].starts_with(&second), "{full:?}");
    assert!(
        full[1].ends_with(&format!(": {} 2", exe.display())),
        "{full:?}"
    );
    // The date, read back by GNU date, is the run's.
    let date = &full[1][second.len()..full[1].find(" UTC").unwrap() + 4];
    let out = run(std::process::Command::new("date").args(["-d", date, "+%s"]));
    let at: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((before..=after).contains(&at), "{date}: {before}..{after}");
    let ring = header("r.data");
    assert!(
        ring[0].contains(": flight-recorder trace of 13 calls over "),
        "{ring:?}"
    );
}

#[test]
fn a_depth_limit_keeps_the_shallow_calls_and_survives_a_longjmp() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    traced(
        dir.path(),
        "t.data",
        &["-D", "2"],
        &[exe.to_str().unwrap(), "2"],
    );
    let lines: Vec<String> = replayed_calls(dir.path(), "t.data");
    // Depth 1 and 2 only: middle, leaf and deep are deeper. The longjmp
    // out of deep skipped two exits; were the depth not put back to
    // main's, after_jump would count as depth 4 and be left out.
    assert_eq!(
        lines,
        [
            "main() {",
            "  top();",
            "  jumper();",
            "  after_jump();",
            "} /* main */"
        ],
        "{lines:#?}"
    );
}

/// The replay's lines of calls.c traced with `args`.
fn calls_traced_with(args: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    traced(dir.path(), "t.data", args, &[exe.to_str().unwrap(), "2"]);
    replayed_calls(dir.path(), "t.data")
}

#[test]
fn function_filters_keep_the_calls_inside_or_leave_them_out() {
    // -F: middle and what it calls, and nothing around it.
    let middle = [
        "middle() {",
        "  leaf();",
        "  leaf();",
        "  leaf();",
        "} /* middle */",
    ];
    let lines = calls_traced_with(&["-F", "middle"]);
    assert_eq!(lines, [middle, middle].concat(), "{lines:#?}");
    // -N: top and everything under it gone; `jump*` names jumper (not
    // after_jump), and deep goes with it. The longjmp out of deep skipped
    // jumper's exit: after it, the runtime is out of jumper again and
    // traces after_jump.
    let lines = calls_traced_with(&["-N", "top", "-N", "jump*"]);
    assert_eq!(
        lines,
        ["main() {", "  after_jump();", "} /* main */"],
        "{lines:#?}"
    );
    // -F jumper: the longjmp out of deep leaves jumper without its exit;
    // the runtime is back outside jumper after it, so after_jump, called
    // from main, is not traced.
    let lines = calls_traced_with(&["-F", "jumper"]);
    assert_eq!(
        lines,
        ["jumper() {", "  deep();", "} /* jumper */"],
        "{lines:#?}"
    );
}

#[test]
fn a_function_filter_that_names_nothing_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    let out = trace(
        dir.path(),
        "t.data",
        &["-F", "no_such_function"],
        &[exe.to_str().unwrap(), "2"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-F no_such_function")
            && stderr.contains("defines no function of that name"),
        "{stderr}"
    );
    // Before the run: the program printed nothing, no recording was made.
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!dir.path().join("t.data").exists());
}

#[test]
fn the_calls_before_a_variadic_exec_are_kept() {
    // execl, execlp and execle reach the system call inside the C
    // library, past the execv wrapper: without wrappers of their own the
    // calling thread's buffer (before_exec) would be lost.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exec.c", &[]);
    // What the new program says it was given: its argument count and
    // last argument (registers alone, the stack too, and more arguments
    // than the runtime's vector holds on its own stack).
    for (how, given) in [
        ("execl", "2 again"),
        ("execlp", "2 again"),
        ("execle", "2 again"),
        ("execl-9", "9 end"),
        ("execle-9", "9 end"),
        ("execl-303", "303 end"),
    ] {
        let data = format!("{how}.data");
        let out = trace(dir.path(), &data, &[], &[exe.to_str().unwrap(), how]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{how}: {stderr}");
        // One process, which connects again after its exec.
        assert!(
            stderr.contains("0 lost, 1 process, 1 thread "),
            "{how}: {stderr}"
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), given, "{how}");
        assert_eq!(
            replayed_calls(dir.path(), &data),
            [
                "main() {",
                "  before_exec();",
                "main() {",
                "  after_exec();",
                "} /* main */"
            ],
            "{how}"
        );
    }
}

#[test]
fn after_an_exec_that_fails_the_program_goes_on_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exec.c", &[]);
    for how in ["fail-execv", "fail-execl"] {
        for ring in [false, true] {
            let data = format!("{how}-{ring}.data");
            let args: &[&str] = if ring { &["--ring", "64K"] } else { &[] };
            traced(dir.path(), &data, args, &[exe.to_str().unwrap(), how]);
            // One program throughout: the calls after the failed exec
            // nest in the same main, which returns.
            assert_eq!(
                replayed_calls(dir.path(), &data),
                [
                    "main() {",
                    "  fail() {",
                    "    before_exec();",
                    "    after_failed_exec();",
                    "  } /* fail */",
                    "} /* main */"
                ],
                "{how}, ring {ring}"
            );
        }
    }
}

#[test]
fn the_calls_before_an_exec_are_kept_and_the_new_program_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exec.c", &[]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("0 lost"), "{stderr}");
    let lines = replay(dir.path(), "t.data", &[]);
    // One thread, two programs: the first one's main never returns (it
    // exec'ed), and the new program's main starts at depth 0 again.
    let tids: std::collections::HashSet<u32> = lines.iter().map(|(t, _)| *t).collect();
    assert_eq!(tids.len(), 1, "{lines:#?}");
    let calls: Vec<&str> = lines.iter().map(|(_, f)| f.as_str()).collect();
    assert_eq!(
        calls,
        [
            "main() {",
            "  before_exec();",
            "main() {",
            "  after_exec();",
            "} /* main */"
        ],
        "{lines:#?}"
    );
    // In Perfetto too: the first main's slice ends at its last event, and
    // the second one is a slice of its own at depth 0, not nested.
    let file = dir.path().join("t.pftrace");
    run(ichnos()
        .args(["report", "--format", "perfetto", "-i"])
        .arg(dir.path().join("t.data"))
        .arg("-o")
        .arg(&file));
    let slices = perfetto_lines(&file);
    let mains: Vec<(usize, &str)> = slices
        .iter()
        .filter(|l| l.name == "main")
        .map(|l| (l.depth, l.kind.as_str()))
        .collect();
    assert_eq!(
        mains,
        [(0, "open"), (0, "close"), (0, "open"), (0, "close")],
        "{slices:#?}"
    );
}

#[test]
fn a_program_executed_by_a_second_thread_starts_after_the_main_threads_last_calls() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exec.c", &["-pthread"]);
    // The main thread calls spin_leaf without end and hands a 4 KiB
    // buffer over every 256 events: one is often in flight as the
    // second thread marks the program's end before its exec. Several
    // runs, for the race to show.
    for run in 0..5 {
        traced(
            dir.path(),
            "t.data",
            &["-b", "4K"],
            &[exe.to_str().unwrap(), "thread"],
        );
        let lines = replay(dir.path(), "t.data", &[]);
        let (execs, main): (Vec<_>, Vec<_>) = lines
            .iter()
            .partition(|(_, f)| f.contains("exec_thread") || f.contains("before_exec"));
        let execs: Vec<&str> = execs.iter().map(|(_, f)| f.as_str()).collect();
        assert_eq!(execs, ["exec_thread() {", "  before_exec();"], "run {run}");
        // The main thread: the old program's main and its spin_leaf calls
        // (none, if its buffer never filled before the exec ended it),
        // then the new program's main at depth 0.
        let main: Vec<&str> = main.iter().map(|(_, f)| f.as_str()).collect();
        let (old, new) = main.split_at(main.len().saturating_sub(3));
        assert_eq!(
            new,
            ["main() {", "  after_exec();", "} /* main */"],
            "run {run}"
        );
        if let Some((first, calls)) = old.split_first() {
            assert_eq!(*first, "main() {", "run {run}");
            let stray: Vec<&&str> = calls
                .iter()
                .filter(|f| **f != "  spin_leaf();" && **f != "  spin_leaf() {")
                .collect();
            assert!(
                stray.is_empty(),
                "run {run}: the old program's calls, read as the new one's: {stray:?}"
            );
        }
    }
}

#[test]
fn a_thread_whose_last_frame_is_lost_is_counted_in_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "lossy.c", &["-pthread", "-O0"]);
    // The smallest shared buffer: two frames of the default 128 KiB.
    let out = ichnos()
        .args(["trace", "-o"])
        .arg(dir.path().join("t.data"))
        .arg("--")
        .arg(&exe)
        .arg("600")
        .env("ICHNOS_TRACE_SHARED", "65536")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The late thread's calls (late, fill, 600 of leaf): 1,204 events, given up
    // while the recorder was stopped, and said where they were lost.
    assert!(stderr.contains(", 1,204 LOST,"), "{stderr}");
    let lines = replay(dir.path(), "t.data", &[]);
    let lost: Vec<&(u32, String)> = lines.iter().filter(|(_, f)| f.contains("LOST")).collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].1.contains("/* LOST 1204 records!! */"), "{lost:?}");
    let main_tid = lines.iter().find(|(_, f)| f == "main() {").unwrap().0;
    assert_ne!(lost[0].0, main_tid, "the loss is the late thread's");
}

#[test]
fn replay_prints_the_calls_of_threads_in_the_order_they_happened() {
    // Two threads take turns: ping() on the main thread, then pong() on
    // the other, N times. Each thread's buffer holds only its own calls
    // (one block each at 3 rounds; with 4 KiB buffers and 3000 rounds,
    // some twenty blocks each, written as the buffers fill), so the
    // alternation is seen only when the replay merges them by time.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "turns.c", &["-pthread"]);
    for (rounds, args) in [(3, &[][..]), (3000, &["-b", "4K"][..])] {
        let n = rounds.to_string();
        let stderr = traced(dir.path(), "t.data", args, &[exe.to_str().unwrap(), &n]);
        assert!(stderr.contains("0 lost"), "{stderr}");
        let lines = replay(dir.path(), "t.data", &[]);
        let turns: Vec<(u32, &str)> = lines
            .iter()
            .map(|(tid, f)| (*tid, f.trim()))
            .filter(|(_, f)| *f == "ping();" || *f == "pong();")
            .collect();
        assert_eq!(turns.len(), 2 * rounds, "{lines:#?}");
        let (main, other) = (turns[0].0, turns[1].0);
        assert_ne!(main, other);
        for (i, turn) in turns.iter().enumerate() {
            let expected = if i % 2 == 0 {
                (main, "ping();")
            } else {
                (other, "pong();")
            };
            assert_eq!(*turn, expected, "turn {i} of {rounds}");
        }
        // Each thread's own lines still nest: main() opens before the
        // first ping and closes after the last.
        let mains: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, (t, f))| *t == main && (f == "main() {" || f == "} /* main */"))
            .map(|(i, _)| i)
            .collect();
        let first_ping = lines
            .iter()
            .position(|(_, f)| f.trim() == "ping();")
            .unwrap();
        let last_pong = lines
            .iter()
            .rposition(|(_, f)| f.trim() == "pong();")
            .unwrap();
        assert_eq!(mains.len(), 2, "{lines:#?}");
        assert!(mains[0] < first_ping && mains[1] > last_pong, "{mains:?}");
    }
}

#[test]
fn threads_forks_and_signal_handlers_are_each_traced_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c", &["-pthread"]);
    let stderr = traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "20000"]);
    assert!(
        stderr.contains(", 0 lost, 2 processes, 5 threads"),
        "{stderr}"
    );
    let counts = calls(dir.path(), "t.data");
    // Four threads of 20000 leaves (main, joined, pthread_exit, detached),
    // each thread's work once, the child's calls, the handler's three.
    assert_eq!(counts.get("leaf"), Some(&80_000), "{counts:?}");
    assert_eq!(counts.get("work"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("joined"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("detached"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("in_child"), Some(&5), "{counts:?}");
    assert_eq!(counts.get("on_signal"), Some(&3), "{counts:?}");
    // Every thread's leaves nest under its own work.
    let lines = replay(dir.path(), "t.data", &[]);
    let mut per_thread: HashMap<u32, u64> = HashMap::new();
    for (tid, f) in &lines {
        if f.trim() == "leaf();" {
            *per_thread.entry(*tid).or_default() += 1;
            assert!(f.starts_with("    "), "a leaf outside work: {f:?}");
        }
    }
    let mut per: Vec<u64> = per_thread.values().copied().collect();
    per.sort_unstable();
    assert_eq!(per, [20_000; 4], "{per_thread:?}");
    // --tid shows one thread only.
    let (tid, _) = lines
        .iter()
        .find(|(_, f)| f.trim() == "in_child();")
        .unwrap();
    let only = replay(dir.path(), "t.data", &["--tid", &tid.to_string()]);
    assert_eq!(only.iter().filter(|(t, _)| t != tid).count(), 0);
    assert_eq!(
        only.iter()
            .filter(|(_, f)| f.trim() == "in_child();")
            .count(),
        5
    );
    // A thread the trace has not: a warning, not a bare header.
    let out = run(ichnos()
        .args(["replay", "--tid", "4194305", "-i"])
        .arg(dir.path().join("t.data")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: --tid 4194305:") && err.contains("has no thread of that id"),
        "{err}"
    );
}

#[test]
fn exceptions_unwinding_traced_frames_keep_the_depth() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "throw.cc", &[]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let lines: Vec<String> = replayed_calls(dir.path(), "t.data");
    assert_eq!(
        lines.iter().filter(|l| *l == "    thrower(int);").count(),
        3,
        "{lines:#?}"
    );
    assert!(lines.contains(&"  after_catch();".to_owned()), "{lines:#?}");
    assert_eq!(lines.last().unwrap(), "} /* main */");
}

/// `nested_filter.c`'s calls under `-F`/`-D` options, as uftrace counts
/// them (`uftrace record -F f -D 2` of the fixture prints the first
/// lines): a filtered function called beneath itself shows as many
/// levels beneath it as the outermost call.
const NESTED_FILTER_CASES: [(&[&str], &[&str]); 3] = [
    (
        &["-F", "f", "-D", "2"],
        &[
            "f() {",
            "  g();",
            "  f() {",
            "    g();",
            "    f() {",
            "      g();",
            "      f();",
            "    } /* f */",
            "  } /* f */",
            "} /* f */",
        ],
    ),
    (
        &["-F", "f", "-D", "1"],
        &[
            "f() {",
            "  f() {",
            "    f() {",
            "      f();",
            "    } /* f */",
            "  } /* f */",
            "} /* f */",
        ],
    ),
    // Without a filter, from the thread's first call: main and f.
    (&["-D", "2"], &["main() {", "  f();", "} /* main */"]),
];

/// Under a filter the depth limit counts from the innermost open call of
/// a filtered function, as uftrace counts it ([`NESTED_FILTER_CASES`]).
#[test]
fn under_a_filter_the_depth_counts_from_the_innermost_filtered_call() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "nested_filter.c", &["-O0"]);
    let exe = exe.to_str().unwrap();
    for (options, expected) in NESTED_FILTER_CASES {
        traced(dir.path(), "t.data", options, &[exe]);
        assert_eq!(
            replayed_calls(dir.path(), "t.data"),
            expected,
            "ichnos trace {options:?}"
        );
    }
}

/// `ichnos replay -F/-N/-D` of a whole trace prints what `ichnos trace`
/// with the same options records ([`NESTED_FILTER_CASES`]), as `uftrace
/// replay` filters a whole recording.
#[test]
fn replay_filters_a_whole_trace_as_the_same_options_record_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "nested_filter.c", &["-O0"]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let lines = |options: &[&str]| -> Vec<String> {
        replay(dir.path(), "t.data", options)
            .into_iter()
            .map(|(_, f)| f)
            .collect()
    };
    for (options, expected) in NESTED_FILTER_CASES {
        assert_eq!(lines(options), expected, "ichnos replay {options:?}");
    }
    // -N leaves g out with h, what it calls.
    assert_eq!(
        lines(&["-N", "g"]),
        [
            "main() {",
            "  f() {",
            "    f() {",
            "      f() {",
            "        f();",
            "      } /* f */",
            "    } /* f */",
            "  } /* f */",
            "} /* main */",
        ]
    );
    // Each call of g is its own root under -F g.
    assert_eq!(
        lines(&["-F", "g"]),
        ["g() {", "  h();", "} /* g */"].repeat(3)
    );
    // And -t after them: the calls they keep, less the short ones.
    assert!(lines(&["-F", "g", "-t", "1s"]).is_empty());
    // A pattern that names nothing is refused, naming it.
    let out = ichnos()
        .args(["replay", "-F", "nothing_so_named", "-i"])
        .arg(dir.path().join("t.data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-F nothing_so_named: no function called in the trace is named so"),
        "{stderr}"
    );
    // An -N pattern that names nothing hides nothing, and says so.
    assert_warns_of_a_notrace_naming_nothing(&["replay"], &dir.path().join("t.data"));
    assert_eq!(
        replay(dir.path(), "t.data", &["-N", "nothing_so_named"]),
        replay(dir.path(), "t.data", &[])
    );
}

/// Each thread's lines of a replay, the threads in an order of their
/// own (two runs of a program number its threads differently, and may
/// interleave them differently).
fn per_thread(lines: Vec<(u32, String)>) -> Vec<Vec<String>> {
    let mut threads: Vec<(u32, Vec<String>)> = Vec::new();
    for (tid, line) in lines {
        match threads.iter_mut().find(|(t, _)| *t == tid) {
            Some((_, l)) => l.push(line),
            None => threads.push((tid, vec![line])),
        }
    }
    let mut threads: Vec<Vec<String>> = threads.into_iter().map(|(_, l)| l).collect();
    threads.sort();
    threads
}

/// `spans.c`, built against the project's C header for spans, which
/// must compile cleanly.
fn build_spans(dir: &Path) -> std::path::PathBuf {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let include = format!("-I{}", include.display());
    build(dir, "spans.c", &["-Wall", "-Wextra", "-Werror", &include])
}

/// Named spans are recorded whatever the scope (the runtime writes them
/// as markers), and `replay -F/-N/-D` of a whole trace keeps them so:
/// the same lines, per thread, as a trace recorded with the options.
#[test]
fn replay_filters_keep_named_spans_as_the_runtime_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_spans(dir.path());
    let exe = exe.to_str().unwrap();
    traced(dir.path(), "whole.data", &[], &[exe]);
    // (With -D, the child forked inside main keeps counting from main's
    // depth at record time, and starts afresh in a whole trace, which
    // does not say where its parent was: only the parent's lines are
    // compared there.)
    let cases: [(&[&str], bool); 5] = [
        (&["-F", "phase"], true),
        (&["-N", "phase"], true),
        (&["-F", "work"], true),
        (&["-D", "1"], false),
        (&["-D", "2", "-N", "work"], false),
    ];
    for (options, children_too) in cases {
        traced(dir.path(), "scoped.data", options, &[exe]);
        let mut recorded = per_thread(replay(dir.path(), "scoped.data", &[]));
        let mut replayed = per_thread(replay(dir.path(), "whole.data", options));
        if !children_too {
            let parent = |threads: &mut Vec<Vec<String>>| {
                threads.retain(|t| t.first().is_some_and(|l| l == "main() {"));
            };
            parent(&mut recorded);
            parent(&mut replayed);
        }
        assert_eq!(replayed, recorded, "{options:?}: replayed, recorded");
        assert!(
            replayed.iter().flatten().any(|l| l.contains("loop step")),
            "{options:?}: {replayed:?}"
        );
    }
}

/// clang's instrumentation calls no exit hook as an exception unwinds
/// (its exits are put before returns only): the catch puts the depth
/// back, with no filter and under each one, which keep their own count.
#[test]
fn exceptions_that_skip_clangs_exits_keep_the_depth() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_by("clang++", dir.path(), "throw.cc", &[]);
    let exe = exe.to_str().unwrap();
    let thrown = [
        "  through(int) {",
        "    thrower(int);",
        "  } /* through(int) */",
    ];
    let mut whole = vec!["main() {"];
    for _ in 0..3 {
        whole.extend(thrown);
    }
    whole.extend(["  after_catch();", "} /* main */"]);
    let mut two_deep = vec!["main() {"];
    two_deep.extend(["  through(int);"; 3]);
    two_deep.extend(["  after_catch();", "} /* main */"]);
    let cases: [(&[&str], Vec<&str>); 5] = [
        (&[], whole.clone()),
        (&["-t", "1ns"], whole),
        (&["-D", "2"], two_deep),
        // Only calls inside thrower: main, which catches, is not traced.
        (&["-F", "thrower"], vec!["thrower(int);"; 3]),
        (
            &["-N", "through"],
            vec!["main() {", "  after_catch();", "} /* main */"],
        ),
    ];
    for (options, expected) in cases {
        traced(dir.path(), "t.data", options, &[exe]);
        let lines = replayed_calls(dir.path(), "t.data");
        assert_eq!(lines, expected, "ichnos trace {options:?}");
    }
}

/// Catches the runtime cannot place by the catching function alone: in a
/// function it does not trace, and in the outer of two open calls of the
/// same function (the exception left the inner one). Under a limit or a
/// filter the runtime keeps its own count of open calls, and the landing
/// pad's stack pointer says which were unwound; with clang (no exits as
/// an exception unwinds) the count used to drift, and with it which
/// calls were written. With every call traced, a program clang built has
/// the runtime walk the stack each catch leaves, for the reader to keep
/// the calls whose frames are left (the reader used to end the calls
/// above the catching function's innermost one). gcc, whose exits run as
/// the exception unwinds, must give the same.
#[test]
fn catches_in_untraced_and_recursive_functions_keep_the_depth() {
    let dir = tempfile::tempdir().unwrap();
    let through_thrice: Vec<&str> = [
        "  through(int) {",
        "    thrower(int);",
        "  } /* through(int) */",
    ]
    .repeat(3);
    let nested_thrice: Vec<&str> = [
        "  nested(int) {",
        "    nested(int) {",
        "      thrower(int);",
        "    } /* nested(int) */",
        "  } /* nested(int) */",
    ]
    .repeat(3);
    let whole = |calls: &[&'static str]| {
        let mut lines = vec!["main() {"];
        lines.extend(calls);
        lines.extend(["  after_catch();", "} /* main */"]);
        lines
    };
    let cases: [(&str, &[&str], Vec<&str>); 11] = [
        // Every call traced: with clang the runtime walks the stack the
        // catch leaves.
        ("untraced", &[], whole(&through_thrice)),
        ("recursive", &[], whole(&nested_thrice)),
        ("recursive", &["--ring", "64K"], whole(&nested_thrice)),
        ("untraced", &["-D", "2"], whole(&["  through(int);"; 3])),
        ("untraced", &["-t", "1ns"], whole(&through_thrice)),
        ("untraced", &["-N", "through"], whole(&[])),
        ("untraced", &["-F", "thrower"], vec!["thrower(int);"; 3]),
        ("recursive", &["-D", "2"], whole(&["  nested(int);"; 3])),
        ("recursive", &["-t", "1ns"], whole(&nested_thrice)),
        ("recursive", &["-N", "through"], whole(&nested_thrice)),
        ("recursive", &["-F", "thrower"], vec!["thrower(int);"; 3]),
    ];
    for compiler in ["g++", "clang++"] {
        let exe = build_by(compiler, dir.path(), "throw.cc", &[]);
        let exe = exe.to_str().unwrap();
        for (mode, options, expected) in &cases {
            traced(dir.path(), "t.data", options, &[exe, mode]);
            let lines = replayed_calls(dir.path(), "t.data");
            assert_eq!(
                &lines, expected,
                "{compiler}, {mode}: ichnos trace {options:?}"
            );
        }
        // The catcher is called by a function inlined into its caller
        // (traced all the same, with no frame of its own).
        let mut inlined = vec!["main() {"];
        for _ in 0..3 {
            inlined.extend([
                "  host(int) {",
                "    inlined(int) {",
                "      catcher(int) {",
                "        through(int) {",
                "          thrower(int);",
                "        } /* through(int) */",
                "        caught();",
                "      } /* catcher(int) */",
                "    } /* inlined(int) */",
                "  } /* host(int) */",
            ]);
        }
        inlined.extend(["  after_catch();", "} /* main */"]);
        for options in [&[][..], &["-t", "1ns"]] {
            traced(dir.path(), "t.data", options, &[exe, "inlined"]);
            let lines = replayed_calls(dir.path(), "t.data");
            assert_eq!(
                lines, inlined,
                "{compiler}, inlined: ichnos trace {options:?}"
            );
        }
        // 300 calls deep, more than the runtime keeps: each catch still
        // leaves main the only open call. With "deep_recursive", the
        // catch is in the 151st of 301 open calls of one function.
        for (mode, deepest) in [("deep", 301), ("deep_recursive", 302)] {
            for options in [&[][..], &["-t", "1ns"], &["-D", "1000"], &["-N", "through"]] {
                traced(dir.path(), "t.data", options, &[exe, mode]);
                let lines = replayed_calls(dir.path(), "t.data");
                let tail: Vec<&str> = lines.iter().rev().take(2).map(String::as_str).collect();
                assert_eq!(
                    tail,
                    ["} /* main */", "  after_catch();"],
                    "{compiler}, {mode}: ichnos trace {options:?}"
                );
                let indent = lines.iter().map(|l| l.len() - l.trim_start().len()).max();
                assert_eq!(
                    indent,
                    Some(2 * deepest),
                    "{compiler}, {mode}: {options:?}: main, 300 deep calls, thrower"
                );
            }
        }
    }
}

/// Under `-F` the depth limit counts from the innermost `-F` call, so a
/// catch can leave more written calls open than the limit: the time
/// filter's held entries must be cut back to those (they were cut to the
/// limit, and the entries of the calls left open were lost). Three calls
/// of `nested_catch`, each one level below the last (as uftrace shows a
/// `-F` function called beneath itself), the innermost catching what
/// `through` (past the limit) threw: with clang, whose exits do not run
/// as the exception unwinds, the time filter still holds all three
/// entries at the catch.
#[test]
fn a_catch_under_a_filter_and_a_depth_limit_keeps_the_time_filters_calls() {
    let dir = tempfile::tempdir().unwrap();
    let expected: Vec<&str> = [
        "nested_catch(int) {",
        "  nested_catch(int) {",
        "    nested_catch(int);",
        "  } /* nested_catch(int) */",
        "} /* nested_catch(int) */",
    ]
    .repeat(3);
    for compiler in ["g++", "clang++"] {
        let exe = build_by(compiler, dir.path(), "throw.cc", &[]);
        let exe = exe.to_str().unwrap();
        for options in [
            &["-F", "nested_catch", "-D", "1"][..],
            &["-F", "nested_catch", "-D", "1", "-t", "1ns"],
        ] {
            traced(dir.path(), "t.data", options, &[exe, "catch_in_recursion"]);
            let lines = replayed_calls(dir.path(), "t.data");
            assert_eq!(lines, expected, "{compiler}: ichnos trace {options:?}");
        }
    }
}

#[test]
fn short_calls_are_hidden_by_the_time_filter() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "2"]);
    assert!(out.status.success());
    let all = replay(dir.path(), "t.data", &[]);
    // main lasts longer than a second's millionth part; leaf far less
    // than a second.
    let filtered = replay(dir.path(), "t.data", &["-t", "1s"]);
    assert!(filtered.is_empty(), "{filtered:?}");
    // Under a nanosecond's filter every call is kept but those that
    // lasted less: two TSC readings are not ordered, and a leaf's can
    // come out less than a nanosecond apart. The replay prints them as
    // 0.000 us (what rounds to 0.001 us may lie on either side). Calls
    // are counted, not lines: a middle whose leaves are all hidden
    // prints as one line.
    let some = replay(dir.path(), "t.data", &["-t", "1ns"]);
    let calls = |lines: &[(u32, String)]| {
        lines
            .iter()
            .filter(|(_, f)| !f.trim_start().starts_with('}'))
            .count()
    };
    let printed = replay_lines(dir.path(), "t.data");
    let printed_at_most = |ns: f64| {
        printed
            .iter()
            .filter(|l| l.kind == "leaf" && l.ns <= ns)
            .count()
    };
    let hidden = calls(&all) - calls(&some);
    assert!(
        (printed_at_most(0.0)..=printed_at_most(1.0)).contains(&hidden),
        "{hidden} calls hidden: {some:?} of {all:?}"
    );
    // Just above the longest leaf: every leaf is hidden, and a middle
    // that is shown has no shown calls, so it prints as one line.
    let longest_leaf = replay_lines(dir.path(), "t.data")
        .iter()
        .filter(|l| l.name == "leaf")
        .map(|l| l.ns + l.precision)
        .fold(0.0, f64::max);
    let t = format!("{:.0}ns", longest_leaf.floor() + 1.0);
    let filtered = replay(dir.path(), "t.data", &["-t", &t]);
    assert!(
        filtered.iter().all(|(_, f)| !f.contains("leaf")),
        "{filtered:?}"
    );
    assert!(
        filtered.iter().all(|(_, f)| !f.contains("middle() {")),
        "{filtered:?}"
    );
    assert!(
        filtered.iter().any(|(_, f)| f.trim().starts_with("top()")),
        "{filtered:?}"
    );
}

/// What naps.c's trace keeps under a 5 ms time filter, at record time
/// and at replay alike. (Probes are indented inside the call they fired
/// in, as uftrace indents its event lines.)
const NAPS_KEPT: [&str; 13] = [
    "main() {",
    "  brief() {",
    "    /* probe 7 = 42 */",
    "  } /* brief */",
    "  outer() {",
    "    napping();",
    "  } /* outer */",
    "  wrapped() {",
    "    brief() {",
    "      /* probe 7 = 42 */",
    "    } /* brief */",
    "  } /* wrapped */",
    "} /* main */",
];

#[test]
fn short_calls_are_left_out_as_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "naps.c", &[]);
    traced(
        dir.path(),
        "t.data",
        &["-t", "5ms"],
        &[exe.to_str().unwrap()],
    );
    let lines: Vec<String> = replayed_calls(dir.path(), "t.data");
    // From the source: only napping (20 ms) and its callers last 5 ms;
    // the quick calls are gone, napping's own too. brief is short, but
    // its probe is kept, and with it the call it happened in and their
    // callers. (Probes print at the left margin.)
    assert_eq!(lines, NAPS_KEPT, "{lines:#?}");
    // The durations are the calls' own: napping slept its 20 ms.
    let napping = replay_lines(dir.path(), "t.data")
        .into_iter()
        .find(|l| l.name == "napping")
        .unwrap();
    assert!(napping.ns >= 20e6, "{napping:?}");
}

/// The time filter at record time with `setjmp` and `longjmp`: a
/// `setjmp` keeps no call (1000 short protected calls leave nothing; each
/// `setjmp` wrote the calls open then, and the filter kept them all),
/// and the calls a `longjmp` ends are kept by how long they ran until it
/// (slow, 20 ms, is; thrower is not). The replay's own `-t` of the whole
/// trace agrees.
#[test]
fn a_time_filter_keeps_no_short_call_around_setjmp_and_longjmp() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "jumps_filtered.c", &[]);
    let kept = ["main() {", "  slow();", "} /* main */"];
    let out = trace(
        dir.path(),
        "t.data",
        &["-t", "5ms"],
        &[exe.to_str().unwrap()],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "500\n");
    let lines = replayed_calls(dir.path(), "t.data");
    assert_eq!(lines, kept, "{lines:#?}");
    let slow = replay_lines(dir.path(), "t.data")
        .into_iter()
        .find(|l| l.name == "slow")
        .unwrap();
    assert!(slow.ns >= 20e6, "{slow:?}");
    traced(dir.path(), "all.data", &[], &[exe.to_str().unwrap()]);
    let counts = calls(dir.path(), "all.data");
    assert_eq!(counts.get("protected_call"), Some(&1000), "{counts:?}");
    assert_eq!(counts.get("thrower"), Some(&501), "{counts:?}");
    let lines: Vec<String> = replay(dir.path(), "all.data", &["-t", "5ms"])
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(lines, kept, "{lines:#?}");
}

/// The replay's own `-t` keeps a short call a probe happened in, and
/// its callers, as the record-time filter does (`wrapped`, whose only
/// call is short, was printed as a call without lines inside it).
#[test]
fn a_probe_keeps_the_short_calls_it_happened_in_at_replay_too() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "naps.c", &[]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let lines: Vec<String> = replay(dir.path(), "t.data", &["-t", "5ms"])
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(lines, NAPS_KEPT, "{lines:#?}");
}

#[test]
fn named_spans_show_as_calls_of_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_spans(dir.path());
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let lines = replay(dir.path(), "t.data", &[]);
    // (The child's events may come first: its buffer is sent at its end.)
    let parent = lines
        .iter()
        .find(|(_, f)| f == "main() {")
        .unwrap_or_else(|| panic!("{lines:#?}"))
        .0;
    let of = |tid_is_parent: bool| -> Vec<&str> {
        lines
            .iter()
            .filter(|(t, _)| (*t == parent) == tid_is_parent)
            .map(|(_, f)| f.as_str())
            .collect()
    };
    // From the source: each span a call of its name, around the calls
    // made inside it; the child names its own span (and ends with _exit,
    // which runs no atexit hook: its events arrive all the same).
    let step = [
        "  phase() {",
        "    loop step() {",
        "      work();",
        "    } /* loop step */",
        "  } /* phase */",
    ];
    let expected: Vec<&str> = ["main() {", "  setup() {", "    work();", "  } /* setup */"]
        .into_iter()
        .chain(step)
        .chain(step)
        .chain(step)
        .chain(["  /* probe 1 = 2 */", "} /* main */"])
        .collect();
    assert_eq!(of(true), expected, "{lines:#?}");
    assert_eq!(
        of(false),
        [
            "phase() {",
            "  in child() {",
            "    work();",
            "  } /* in child */",
            "} /* phase */"
        ],
        "{lines:#?}"
    );
    let counts = calls(dir.path(), "t.data");
    assert_eq!(counts.get("loop step"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("setup"), Some(&1), "{counts:?}");
}

#[test]
fn bad_input_gets_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = trace(dir.path(), "t.data", &[], &["/no/such/program"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/no/such/program: no such file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.path().join("junk"), b"not a recording at all").unwrap();
    let out = ichnos()
        .args(["replay", "-i"])
        .arg(dir.path().join("junk"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    // The time filter holds entries back; a ring saved again would take
    // them for repeats.
    let out = trace(
        dir.path(),
        "t.data",
        &["--ring", "64K", "-t", "1ms"],
        &["true"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("-t is not for the flight recorder"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A ring the wire cannot carry as one frame is refused up front.
    let out = trace(dir.path(), "t.data", &["--ring", "2G"], &["true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ring: at most 1G"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Functions of a library loaded with `dlopen` as the program runs, called
/// from threads: every call counted, each function named from the
/// library (whose mapping the recorder may learn only from the runtime's
/// last list, after the process is gone).
#[test]
fn functions_of_a_library_loaded_as_the_program_runs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = build(dir.path(), "plugin.c", &["-shared", "-fPIC"]);
    let exe = build(dir.path(), "plugin_main.c", &["-pthread", "-ldl"]);
    for _ in 0..3 {
        traced(
            dir.path(),
            "t.data",
            &[],
            &[exe.to_str().unwrap(), plugin.to_str().unwrap()],
        );
        let counts = calls(dir.path(), "t.data");
        assert_eq!(counts.get("plugin_work"), Some(&100), "{counts:?}");
        assert_eq!(counts.get("plugin_step"), Some(&1000), "{counts:?}");
    }
}
