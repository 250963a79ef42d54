//! `ichnos trace` as a traced process ends or changes: the flight
//! recorder after a crash or a stack overflow, calls after `main` returns
//! or a thread calls `exit`, SIGUSR2 snapshots, rings saved twice, the
//! recorder killed under the program, namespace changes that the kernel
//! grants a process of one thread only, and the status line while a
//! program runs.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod trace_support;

use trace_support::*;

#[test]
fn a_crash_leaves_the_flight_recorders_newest_calls() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "crash.c", &[]);
    // 4 KiB of ring: 256 events; each step is an entry, a probe (two
    // events) and an exit.
    let out = trace(
        dir.path(),
        "t.data",
        &["--ring", "4K"],
        &[exe.to_str().unwrap(), "100000"],
    );
    assert_eq!(out.status.code(), Some(128 + 6), "SIGABRT is the status");
    let lines = replay(dir.path(), "t.data", &[]);
    let values = probe_7_values(&lines);
    assert!(values.len() >= 60, "{} probes", values.len());
    let n = values.len() as u64;
    let expected: Vec<u64> = (100_000 - n..100_000).collect();
    assert_eq!(values, expected);
}

#[test]
fn a_stack_overflow_leaves_the_flight_recorders_newest_calls() {
    // The fault is on the guard page below the stack, where no handler
    // can run: the runtime's alternate stacks (the main thread's, and one
    // for each thread pthread_create starts) are where the save is asked.
    // The main thread's is there still in an exit handler, which exit
    // runs after the TLS destructors.
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "overflow.c", &["-pthread"]);
    for thread in ["main", "thread", "atexit"] {
        let command = [exe.to_str().unwrap(), thread];
        let out = trace(dir.path(), "t.data", &["--ring", "4K"], &command);
        assert_eq!(out.status.code(), Some(128 + 11), "SIGSEGV is the status");
        // 4 KiB of ring: the newest 256 events of the thread that
        // overflowed, each an entry of the recursion one level deeper
        // than the one before (the main thread's ring, with its main(),
        // is saved too).
        let all = replay(dir.path(), "t.data", &[]);
        let tid = all.last().map(|(t, _)| *t);
        let lines: Vec<_> = all.iter().filter(|(t, _)| Some(*t) == tid).collect();
        assert!(lines.len() >= 250, "thread {thread}: {} lines", lines.len());
        let depths: Vec<usize> = lines
            .iter()
            .map(|(_, f)| {
                assert_eq!(f.trim_start(), "down() {", "thread {thread}");
                f.len() - f.trim_start().len()
            })
            .collect();
        assert!(
            depths.windows(2).all(|w| w[1] == w[0] + 2),
            "thread {thread}: {depths:?}"
        );
    }
}

/// `exit` runs the main thread's TLS destructors before the `atexit`
/// handlers and the destructors: the calls those make are traced too,
/// in both modes (they were lost with the main thread's buffer).
#[test]
fn calls_after_main_returns_are_traced() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exit_hooks.c", &[]);
    let expected = [
        "main() {",
        "  leaf();",
        "} /* main */",
        "at_exit() {",
        "  leaf();",
        "  leaf();",
        "} /* at_exit */",
        "unloading() {",
        "  leaf();",
        "} /* unloading */",
    ];
    for options in [&[][..], &["--ring", "4K"]] {
        traced(dir.path(), "t.data", options, &[exe.to_str().unwrap()]);
        let lines = replayed_calls(dir.path(), "t.data");
        assert_eq!(lines, expected, "ichnos trace {options:?}");
    }
}

/// A library the program links is initialised before the preloaded
/// runtime and finalised after it. Its calls at the process's exit — its
/// destructor function, its static object's destructor and the `atexit`
/// hook its constructor registered, the last two run when the dynamic
/// linker finalises it — are traced, in both modes, whether the runtime
/// started at the library's first traced call or in its own constructor,
/// after the library had registered them. (They were all lost: the
/// runtime's exit hooks, tied to its own object, ran when it was
/// finalised, before the library.) The order after `main` is the C
/// library's: the library's destructor functions, then what it
/// registered, last first.
#[test]
fn calls_at_exit_of_a_library_finalised_after_the_runtime_are_traced() {
    let dir = tempfile::tempdir().unwrap();
    let repeated = |line: &str, n| std::iter::repeat_n(line.to_owned(), n);
    let expected: Vec<String> = ["unloading() {"]
        .map(str::to_owned)
        .into_iter()
        .chain(repeated("  unloading_work();", 5))
        .chain(["} /* unloading() */", "Held::~Held() {"].map(str::to_owned))
        .chain(repeated("  object_gone();", 4))
        .chain(["} /* Held::~Held() */", "hook() {"].map(str::to_owned))
        .chain(repeated("  hook_work();", 3))
        .chain(["} /* hook() */".to_owned()])
        .collect();
    let untraced_init = "-finstrument-functions-exclude-function-list=_GLOBAL__sub_I,__static_initialization,Held::Held";
    for library_extra in [&[][..], &[untraced_init]] {
        let exe = exit_lib_main(dir.path(), library_extra);
        for options in [&[][..], &["--ring", "64K"]] {
            traced(dir.path(), "t.data", options, &[exe.to_str().unwrap()]);
            let lines = replayed_calls(dir.path(), "t.data");
            let after_main = lines
                .iter()
                .position(|l| l == "} /* main */")
                .unwrap_or_else(|| panic!("{lines:?}"));
            assert_eq!(
                lines[after_main + 1..],
                expected[..],
                "library {library_extra:?}, ichnos trace {options:?}"
            );
            // The library's initialisation is traced only where it was
            // instrumented.
            assert_eq!(
                lines[0] == "_GLOBAL__sub_I_exit_lib.cc() {",
                library_extra.is_empty(),
                "{lines:?}"
            );
        }
    }
}

/// `exit_lib_main.c` linked with `exit_lib.cc` built with
/// `library_extra`.
fn exit_lib_main(dir: &std::path::Path, library_extra: &[&str]) -> std::path::PathBuf {
    build_with_library(dir, "exit_lib.cc", library_extra, "exit_lib_main.c", &[]).0
}

/// A `fork` in the destructor of a library finalised after the runtime
/// has the runtime's fork hooks, bound to the process as its exit hooks
/// are: the child is traced as its own process (it was taken for one made
/// without fork's handlers, and left untraced, once the runtime's object
/// was finalised and the hooks dropped with it).
#[test]
fn a_fork_in_a_library_destructor_is_traced_as_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let exe = exit_lib_main(dir.path(), &[]);
    for options in [&[][..], &["--ring", "64K"]] {
        let stderr = traced(
            dir.path(),
            "t.data",
            options,
            &[exe.to_str().unwrap(), "fork"],
        );
        assert!(!stderr.contains("without fork's handlers"), "{stderr}");
        assert!(stderr.contains("2 processes"), "{stderr}");
        let counts = calls(dir.path(), "t.data");
        assert_eq!(
            counts.get("forked_work"),
            Some(&2),
            "{options:?}: {counts:?}"
        );
        assert_eq!(
            counts.get("unloading_work"),
            Some(&5),
            "{options:?}: {counts:?}"
        );
    }
}

/// Calls still open when the program ends (main waiting in
/// `pthread_join`, a worker that calls `exit` after sleeping 20 ms) count
/// in `report --trace` to their thread's end, as `uftrace report` counts
/// them (it gives both about 20 ms here); they were left out, which left
/// `main` out of the totals of any program that calls `exit` below it;
/// and in the folded stacks, to the same end.
#[test]
fn calls_open_at_the_programs_end_count_to_their_threads_end() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "open_at_exit.c", &["-pthread"]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(dir.path().join("t.data")));
    let text = String::from_utf8(out.stdout).unwrap();
    // (total, self) in ms, of a function called once.
    let ms_of = |function: &str| -> (f64, f64) {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().last() == Some(function))
            .unwrap_or_else(|| panic!("no {function} in\n{text}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        let ms = |value: &str, unit: &str| duration_ns(value, unit) / 1e6;
        assert_eq!(f[4], "1", "{line}");
        (ms(f[0], f[1]), ms(f[2], f[3]))
    };
    for function in ["main", "worker"] {
        let (total, _) = ms_of(function);
        assert!(
            (20.0..2000.0).contains(&total),
            "{function}: {total} ms\n{text}"
        );
    }
    // The flame graph's lines count them the same way: each its self
    // time in the table, once (they were left out, and only the leaf
    // calls showed).
    let out = run(ichnos()
        .args(["report", "--trace", "--format", "folded", "-i"])
        .arg(dir.path().join("t.data")));
    let folded = String::from_utf8(out.stdout).unwrap();
    for function in ["main", "worker"] {
        let ns: u64 = folded
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(path, _)| path.ends_with(&format!(";{function}")))
            .map(|(_, n)| n.parse::<u64>().unwrap())
            .sum();
        let (_, self_ms) = ms_of(function);
        // The table rounds to a microsecond here.
        assert!(
            (ns as f64 / 1e6 - self_ms).abs() <= 0.002,
            "{function}: {ns} ns folded, {self_ms} ms in the table\n{folded}\n{text}"
        );
    }
}

/// A process that floods the recorder with wake-up bytes (as its runtime
/// sends one when its buffer needs reading) is read on: the call after
/// 100,000 of them is traced as the one before (the recorder took any
/// message after the hello for the process's end, and lost what came
/// after it).
#[test]
fn wake_ups_from_a_process_are_read_as_wake_ups() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "wake_flood.c", &[]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let lines = replayed_calls(dir.path(), "t.data");
    assert_eq!(
        lines,
        ["main() {", "  before();", "  after();", "} /* main */"]
    );
}

#[test]
fn calls_after_a_second_thread_calls_exit_are_traced_on_that_thread() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "exit_hooks.c", &["-pthread"]);
    // The main thread waits in pthread_join, its call of main open; the
    // worker's exit() runs the handlers and destructors on the worker.
    let main = ["main() {", "  leaf();"];
    let worker = [
        "worker() {",
        "  leaf();",
        "  at_exit() {",
        "    leaf();",
        "    leaf();",
        "  } /* at_exit */",
        "  unloading() {",
        "    leaf();",
        "  } /* unloading */",
    ];
    for options in [&[][..], &["--ring", "4K"]] {
        traced(
            dir.path(),
            "t.data",
            options,
            &[exe.to_str().unwrap(), "thread"],
        );
        let lines = replay(dir.path(), "t.data", &[]);
        let main_tid = lines[0].0;
        let of = |main_thread: bool| -> Vec<&str> {
            lines
                .iter()
                .filter(|(tid, _)| (*tid == main_tid) == main_thread)
                .map(|(_, f)| f.as_str())
                .collect()
        };
        assert_eq!(of(true), main, "ichnos trace {options:?}: {lines:?}");
        assert_eq!(of(false), worker, "ichnos trace {options:?}: {lines:?}");
    }
}

#[test]
fn a_crash_in_a_full_trace_keeps_every_call_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "crash.c", &[]);
    // 100,000 steps of four events each: about 49 buffers of 128 KiB, the
    // last one partly full when abort() is called.
    let out = trace(
        dir.path(),
        "t.data",
        &[],
        &[exe.to_str().unwrap(), "100000"],
    );
    assert_eq!(out.status.code(), Some(128 + 6), "SIGABRT is the status");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("0 lost"), "{stderr}");
    let counts = calls(dir.path(), "t.data");
    assert_eq!(counts.get("step"), Some(&100_000), "{counts:?}");
}

#[test]
fn buffers_larger_than_the_default_shared_buffer_still_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c", &["-pthread"]);
    // The shared buffer is 8 MiB by default; each thread's 300,000 leaves
    // are 9.6 MB of events, which a 16 MiB buffer or ring sends as one
    // frame.
    for args in [&["-b", "16M"][..], &["--ring", "16M"][..]] {
        let out = trace(
            dir.path(),
            "t.data",
            args,
            &[exe.to_str().unwrap(), "300000"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.contains("0 lost"),
            "{args:?}: {stderr}"
        );
        let counts = calls(dir.path(), "t.data");
        assert_eq!(counts.get("leaf"), Some(&1_200_000), "{args:?}: {counts:?}");
        // A frame this large goes as several records; the calls open
        // across their seams (each thread's work) are whole too, and
        // every leaf after a seam is still inside its work.
        assert_eq!(counts.get("work"), Some(&4), "{args:?}: {counts:?}");
        let folded = run(ichnos()
            .args(["report", "--format", "folded", "-i"])
            .arg(dir.path().join("t.data")));
        let folded = String::from_utf8(folded.stdout).unwrap();
        let outside: Vec<&str> = folded
            .lines()
            .filter(|l| l.contains("leaf") && !l.contains(";work;leaf "))
            .collect();
        assert!(
            outside.is_empty(),
            "{args:?}: leaves outside work: {outside:?}"
        );
    }
}

#[test]
fn sigusr2_snapshots_without_saving_inside_the_handler() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "usr2.c", &["-pthread"]);
    let mut child = ichnos()
        .args(["trace", "--ring", "64K", "-o"])
        .arg(dir.path().join("t.data"))
        .arg("--")
        .arg(&exe)
        .args(["50", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // 300 snapshots asked of a thread inside malloc and free: a handler
    // that saved in place would hang it (the fixture takes well under a
    // second otherwise).
    let deadline = Instant::now() + Duration::from_mins(1);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the traced program hung under SIGUSR2");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The program killed itself: no exit hook saved anything, so the
    // steps are there by the last snapshot alone.
    assert_eq!(status.code(), Some(128 + 9), "{status:?}");
    let counts = calls(dir.path(), "t.data");
    assert_eq!(counts.get("step"), Some(&50), "{counts:?}");
}

#[test]
fn a_crash_signal_sent_by_the_program_still_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "raise.c", &[]);
    let out = trace(
        dir.path(),
        "t.data",
        &["--ring", "4K"],
        &[exe.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 11), "{stderr}");
    // ichnos itself exits normally, so the shell would not say it.
    assert!(
        stderr.contains("note: the command was killed by SIGSEGV (signal 11)"),
        "{stderr}"
    );
    assert_eq!(calls(dir.path(), "t.data").get("step"), Some(&10));
}

#[test]
fn a_ring_saved_twice_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "snapshot.c", &[]);
    let exe = exe.to_str().unwrap();
    // 4 KiB of ring: 64 steps of four events. A snapshot 10 steps before
    // the end overlaps the exit's save; one 500 steps before it does not.
    for (k, overlapping) in [("989", true), ("499", false)] {
        let out = trace(dir.path(), "t.data", &["--ring", "4K"], &[exe, "1000", k]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let values = probe_7_values(&replay(dir.path(), "t.data", &[]));
        assert_eq!(values.last(), Some(&999), "{values:?}");
        assert!(
            values.windows(2).all(|w| w[0] < w[1]),
            "each step once: {values:?}"
        );
        let k: u64 = k.parse().unwrap();
        if overlapping {
            // The two saves together: the newest steps, without a gap.
            assert!(values.windows(2).all(|w| w[1] == w[0] + 1), "{values:?}");
        } else {
            // The snapshot's steps up to k, then the exit's newest.
            assert!(
                values.contains(&k) && values.contains(&(k - 50)),
                "{values:?}"
            );
            assert!(!values.contains(&(k + 100)), "{values:?}");
        }
        // Each step once too (a ring's oldest step may have lost its
        // entry to the ring's wrap: it does not count as a call).
        let steps = calls(dir.path(), "t.data")["step"];
        let n = values.len() as u64;
        assert!(steps <= n && steps + 2 >= n, "{steps} steps, {n} probes");
    }
}

/// A ring larger than one block of the recording (65,536 events) saved
/// twice, a snapshot 10 steps before the exit's save: each step is read
/// once (the second save's blocks after its first were read whole: 40%
/// of the steps twice), and the summary counts the events the replay
/// shows, not both saves' (it counted 393,216 of some 196,000).
#[test]
fn a_large_ring_saved_twice_is_read_and_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "snapshot.c", &[]);
    let out = trace(
        dir.path(),
        "t.data",
        &["--ring", "4M"],
        &[exe.to_str().unwrap(), "100000", "99990"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = replay(dir.path(), "t.data", &[]);
    let values = probe_7_values(&lines);
    // A 4 MiB ring holds 262,144 events: 65,536 steps of four (an entry,
    // the probe's two, an exit).
    assert!(values.len() > 60_000, "{}", values.len());
    assert_eq!(values.last(), Some(&99_999));
    assert!(
        values.windows(2).all(|w| w[1] == w[0] + 1),
        "each step once, in order"
    );
    // Events the replay shows: an entry per opening line, an exit per
    // closing one, both for a one-line call, and each probe.
    let shown: u64 = lines
        .iter()
        .map(|(_, f)| {
            let f = f.trim();
            if f.ends_with(" {") || f.starts_with("} ") || f.starts_with("/* probe") {
                1
            } else if f.ends_with(");") {
                2
            } else {
                0
            }
        })
        .sum();
    let counted: u64 = stderr
        .split("traced ")
        .nth(1)
        .and_then(|s| s.split(": ").nth(1))
        .and_then(|s| s.split(" events").next())
        .map_or_else(
            || panic!("{stderr}"),
            |n| n.replace(',', "").parse().unwrap(),
        );
    // The oldest step may keep its exit without its entry: counted, not
    // shown.
    assert!(
        counted >= shown && counted <= shown + 4,
        "counted {counted}, shown {shown}: {stderr}"
    );
}

/// On a terminal, a live status line while the program runs (elapsed
/// time, events so far, lost, processes), cleared before the summary;
/// none when standard error is not a terminal.
#[test]
fn a_terminal_shows_a_status_line_while_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "slow.c", &[]);
    let data = dir.path().join("t.data");
    let done = dir.path().join("done");
    // `script` (util-linux) runs ichnos on a pseudo-terminal and copies
    // what it writes there. Its size is never set here, so the line is
    // the plain one redrawn in place (status_line.rs checks the one kept
    // on the last row of a terminal of known size).
    let command = format!(
        "{} trace -o {} -- {} 1.2 {}",
        env!("CARGO_BIN_EXE_ichnos"),
        data.display(),
        exe.display(),
        done.display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("script runs (Debian's util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // The line is redrawn in place: each state of it follows a carriage
    // return or a line clear.
    let counts: Vec<u64> = text
        .split("tracing: ")
        .skip(1)
        .filter_map(|rest| {
            let events = rest.split(" events").next()?.rsplit(", ").next()?;
            events.replace(',', "").parse().ok()
        })
        .collect();
    assert!(
        counts.iter().any(|&n| n > 0),
        "no status line counting events: {text:?}"
    );
    assert!(text.contains(" lost, 1 process"), "{text:?}");
    assert!(text.contains("ichnos: traced "), "the summary: {text:?}");
    // Not on a terminal.
    let _ = std::fs::remove_file(&done);
    let plain = traced(
        dir.path(),
        "u.data",
        &[],
        &[exe.to_str().unwrap(), "0.6", done.to_str().unwrap()],
    );
    assert!(!plain.contains("tracing:"), "{plain}");
}

#[test]
fn the_program_runs_on_when_the_recorder_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "slow.c", &[]);
    let (done, _) = killed_under(dir.path(), &exe, &[]);
    let text = std::fs::read_to_string(&done).expect("the program finished");
    assert!(text.starts_with("done "), "{text}");
    // The recording stands up to its last whole chunk, and says it is cut.
    let out = ichnos()
        .args(["report", "--trace", "-i"])
        .arg(dir.path().join("t.data"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() || stderr.contains("incomplete"),
        "{stderr}"
    );
}

/// A program that closed the runtime's socket (as daemons close every
/// descriptor) runs on after the recorder is killed as one that kept it:
/// its first hand-over after the kill waits for room (2 seconds) and
/// finds the recorder gone from its listening socket, and the program
/// runs on untraced. It used to wait 2 seconds for every buffer, for
/// ever (it had no socket to find the recorder gone by): its 100,000
/// calls after the loop alone would have taken 48 seconds.
#[test]
fn a_program_that_closed_the_runtimes_socket_runs_on_when_the_recorder_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "slow.c", &[]);
    let (done, killed) = killed_under(dir.path(), &exe, &["close"]);
    let text = std::fs::read_to_string(&done).expect("the program finished");
    let pid: u32 = text.split_whitespace().nth(2).unwrap().parse().unwrap();
    let deadline = killed + Duration::from_secs(30);
    while ichnos_profile::alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let after_kill = killed.elapsed();
    assert!(
        after_kill < Duration::from_secs(10),
        "the program ended {after_kill:?} after the kill"
    );
}

/// `slow.c` (1.5 seconds, `extra` after its file argument) traced, its
/// recorder killed after 0.5 seconds, once the file it writes when done
/// is there (30 seconds at most); the file, and when the kill was.
fn killed_under(
    dir: &std::path::Path,
    exe: &std::path::Path,
    extra: &[&str],
) -> (std::path::PathBuf, Instant) {
    let done = dir.join("done");
    // Its socket's directory, which a killed recorder cannot remove, in
    // the test's own.
    let mut recorder = ichnos()
        .env("XDG_RUNTIME_DIR", dir)
        .arg("trace")
        .arg("-o")
        .arg(dir.join("t.data"))
        .arg("--")
        .arg(exe)
        .arg("1.5")
        .arg(&done)
        .args(extra)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    recorder.kill().unwrap();
    let killed = Instant::now();
    recorder.wait().unwrap();
    let deadline = killed + Duration::from_secs(30);
    while !done.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    (done, killed)
}

/// A trace cut short (a recorder killed, a file truncated) still times
/// its calls in nanoseconds: the clock is read a second time 50 ms into
/// the run, not first after a second. (Before, a trace cut within its
/// first second had one reading, and its ticks were shown as
/// nanoseconds, about three times too long here.)
#[test]
fn a_trace_cut_short_still_times_its_calls() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "slow.c", &[]);
    let done = dir.path().join("done");
    traced(
        dir.path(),
        "t.data",
        &[],
        &[exe.to_str().unwrap(), "0.4", done.to_str().unwrap()],
    );
    let whole = std::fs::read(dir.path().join("t.data")).unwrap();
    let cut = dir.path().join("cut.data");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(&cut));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("incomplete"), "{stderr}");
    assert!(!stderr.contains("in ticks"), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let tick = text
        .lines()
        .find(|l| l.trim_end().ends_with(" tick"))
        .unwrap_or_else(|| panic!("{text}"));
    let fields: Vec<&str> = tick.split_whitespace().collect();
    let total = duration_ns(fields[0], fields[1]);
    // Half of a 0.4 s run's calls, timed in nanoseconds: well under it.
    assert!(total > 1e6 && total < 0.4e9, "{tick}");
    // Cut inside its first chunk, which says what the recording is: the
    // cut is named (it was called a sampling profile).
    std::fs::write(&cut, &whole[..100]).unwrap();
    for args in [&["replay"][..], &["report", "--trace"]] {
        let out = ichnos().args(args).arg("-i").arg(&cut).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("truncated: the chunk at byte 32"),
            "{args:?}: {stderr}"
        );
    }
}

/// `setns` into a mount namespace and `unshare` of a user namespace,
/// which the kernel refuses to a process of more than one thread: the
/// runtime's saver thread ends for the call and starts again after it,
/// so the program runs as it does untraced, and a crash after the calls
/// is still saved (by the saver started again).
#[test]
fn namespace_changes_for_one_thread_only_work_under_trace() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "namespaces.c", &[]);
    let exe = exe.to_str().unwrap();
    let untraced = Command::new(exe).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&untraced.stdout),
        "ok\n",
        "untraced: this machine grants both calls to one thread"
    );
    let expected = ["main() {", "  before();", "  after();", "} /* main */"];
    for options in [&[][..], &["--ring", "64K"]] {
        let out = trace(dir.path(), "t.data", options, &[exe]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{options:?}");
        assert!(out.status.success(), "{options:?}: {}", out.status);
        assert_eq!(
            replayed_calls(dir.path(), "t.data"),
            expected,
            "{options:?}"
        );
    }
    let out = trace(dir.path(), "t.data", &["--ring", "64K"], &[exe, "crash"]);
    assert_eq!(out.status.code(), Some(128 + 6), "SIGABRT is the status");
    let lines = replayed_calls(dir.path(), "t.data");
    assert_eq!(lines[..3], expected[..3], "saved at the crash: {lines:?}");
}

/// A child made with `_Fork` runs no fork handlers: its copies of the
/// runtime's buffers and channel are its parent's. It is not traced (and
/// says so), and the parent's trace is exact: the child's events used to
/// land in the parent's shared buffer as a thread of the parent.
#[test]
fn a_child_made_without_fork_handlers_leaves_the_parents_trace_whole() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "fork_unhandled.c", &[]);
    // Small buffers: the child fills and hands over several; a ring that
    // holds all 20,006 of the parent's events. The child ends with
    // `_exit`, or with `exit`, whose hooks (its copies of the parent's)
    // would hand over its buffers, rings and mappings.
    for options in [&["-b", "4K"][..], &["--ring", "1M"]] {
        for end in ["_exit", "exit"] {
            let stderr = traced(dir.path(), "t.data", options, &[exe.to_str().unwrap(), end]);
            let what = format!("{options:?} {end}: {stderr}");
            // Said where the child tried to hand something over (a ring
            // that ends with `_exit` never does).
            let handed = options[0] == "-b" || end == "exit";
            assert_eq!(
                stderr.contains("made without fork's handlers"),
                handed,
                "{what}"
            );
            assert!(stderr.contains("1 process, 1 thread "), "{what}");
            let counts = calls(dir.path(), "t.data");
            assert_eq!(counts.get("parent_work"), Some(&2), "{counts:?} {what}");
            assert_eq!(counts.get("step"), Some(&10_000), "{counts:?} {what}");
            assert_eq!(counts.get("child_work"), None, "{counts:?} {what}");
        }
    }
    // The child crashes: its crash handler (a copy of the parent's) must
    // not ask the parent's saver (which would save the parent's rings
    // for a crash) and then wait for a save that never comes: the crash
    // handler's patience is 5 s, where the run takes milliseconds.
    let started = Instant::now();
    let stderr = traced(
        dir.path(),
        "t.data",
        // A ring that holds all 20,006 of the parent's events.
        &["--ring", "1M"],
        &[exe.to_str().unwrap(), "abort"],
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the child's crash waited {:?}",
        started.elapsed()
    );
    let counts = calls(dir.path(), "t.data");
    assert_eq!(counts.get("parent_work"), Some(&2), "{counts:?} {stderr}");
    assert_eq!(counts.get("step"), Some(&10_000), "{counts:?}");
}

/// A snapshot of a thread that keeps writing its ring: the copy goes
/// newest first while the thread overwrites the oldest, so it keeps what
/// it reached first: two thirds or more of a small ring here, measured
/// (oldest first, it chased the writer and kept none of this one). The
/// bound asked is a quarter, for a machine busy with other tests.
#[test]
fn a_snapshot_keeps_a_busy_threads_ring() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "busy_snapshot.c", &["-pthread"]);
    // 4 KiB of ring: 256 events. The best of a few runs: either thread may
    // be put off its CPU during the copy.
    let mut best = 0;
    for _ in 0..3 {
        let out = trace_cut_short(
            dir.path(),
            "t.data",
            &["--ring", "4K"],
            &[exe.to_str().unwrap()],
        );
        // Killed by SIGKILL, as a shell says it, and so said to have kept
        // only what it saved before.
        assert_eq!(out.status.code(), Some(137), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(CUT_SHORT),
            "{out:?}"
        );
        let lines = replay(dir.path(), "t.data", &[]);
        let main = lines.first().map(|(tid, _)| *tid);
        let busy_leaves = lines
            .iter()
            .filter(|(tid, f)| Some(*tid) != main && f == "busy_leaf();")
            .count();
        best = best.max(busy_leaves);
    }
    // Each busy_leaf() line is two events: a quarter of 256 is 32 calls.
    assert!(best >= 32, "at most {best} of the busy thread's ~128 calls");
}

/// A program linked statically runs without the dynamic linker, so
/// without the runtime: the note says so, not "is the program built with
/// -finstrument-functions?" (as uftrace says "Cannot trace static
/// binary").
#[test]
fn a_static_program_is_named_as_why_nothing_was_traced() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &["-static"]);
    let stderr = traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    assert!(stderr.contains(" 0 events,"), "{stderr}");
    assert!(
        stderr
            .contains("is linked statically: the tracing runtime is loaded by the dynamic linker"),
        "{stderr}"
    );
    // A dynamic program built without the hooks: the other cause.
    let stderr = traced(dir.path(), "t.data", &[], &["/bin/true"]);
    assert!(stderr.contains(" 0 events,"), "{stderr}");
    assert!(!stderr.contains("linked statically"), "{stderr}");
    assert!(
        stderr.contains("built with -finstrument-functions?"),
        "{stderr}"
    );
    // Filters that keep nothing: named as the likelier cause.
    let stderr = traced(
        dir.path(),
        "t.data",
        &["-N", "main"],
        &[build(dir.path(), "calls.c", &[]).to_str().unwrap()],
    );
    assert!(
        stderr.contains(" 0 events,")
            && stderr.contains("no call passed the filters (-N), or the program is not built"),
        "{stderr}"
    );
    // The same from a shell, whose setjmp calls the runtime sends (for
    // the depths of traced calls that might come): none of them is an
    // event shown, and none was counted (5 were).
    let stderr = traced(
        dir.path(),
        "t.data",
        &[],
        &["sh", "-c", "/bin/true; /bin/true"],
    );
    assert!(stderr.contains(" 0 events,"), "{stderr}");
    assert!(
        stderr.contains("built with -finstrument-functions?"),
        "{stderr}"
    );
}

/// A ring asked for smaller than a page, or not a power of two, is made
/// larger, and a note says how large: `--ring 1K` kept 4 KiB (256 events)
/// where the docs said SIZE / 16 events, with nothing said.
#[test]
fn a_ring_rounded_up_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "snapshot.c", &[]);
    let exe = exe.to_str().unwrap();
    let stderr = traced(
        dir.path(),
        "t.data",
        &["--ring", "1K"],
        &[exe, "1000", "999"],
    );
    assert!(
        stderr.contains("note: --ring 1.0 KiB: each thread keeps 4.0 KiB (256 events)"),
        "{stderr}"
    );
    // 256 events a thread: the newest of the 1000 steps, four events a
    // step (as the snapshot test above counts them), 64 at most.
    let probes = replay(dir.path(), "t.data", &[])
        .iter()
        .filter(|(_, f)| f.trim().starts_with("/* probe 7 = "))
        .count();
    assert!((60..=64).contains(&probes), "{probes} probes in 256 events");
    let stderr = traced(dir.path(), "t.data", &["--ring", "8K"], &[exe, "10", "5"]);
    assert!(!stderr.contains("note: --ring"), "{stderr}");
}

/// `ichnos trace` of `leaves_running` with `args`, its standard output
/// piped; the pid the fixture prints first.
fn trace_leaves_running(dir: &std::path::Path, args: &[&str]) -> (std::process::Child, u32) {
    let exe = build(dir, "leaves_running.c", &[]);
    spawn_reading_pid(
        ichnos()
            .args(["trace", "-b", "64K", "-o"])
            .arg(dir.join("t.data"))
            .arg("--")
            .arg(&exe)
            .args(args),
    )
}

/// Ctrl-C after the command has ended: what it left running (a daemon
/// that would sleep a minute) is waited for a second, not to its end; the
/// trace keeps every buffer it handed over, a note names it, and it runs
/// on. (The trace used to end only when the daemon did.)
#[test]
fn a_stop_does_not_wait_for_what_the_command_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let calls = 20_000u64;
    let (recorder, daemon) = trace_leaves_running(dir.path(), &["daemon", &calls.to_string()]);
    // The daemon outlives the recorder, and the test: it is killed at the
    // end, alive (asserted below) so its own.
    let _daemon = KilledAtEnd(daemon);
    let (out, waited) = interrupt(recorder, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A second after the stop, not at the five seconds' cap.
    assert!(waited < Duration::from_secs(4), "{waited:?}: {stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the trace was stopped while 1 process the command started ran on (pid {daemon}): \
             only what it handed over by then is in it"
        )),
        "{stderr}"
    );
    // 64 KiB buffers of 16-byte events: 2,048 calls each; all but the
    // last, partly filled, were handed over.
    let work = calls_of(dir.path(), "work");
    assert!(
        work <= calls && work + 2048 >= calls,
        "{work} calls: {stderr}"
    );
    assert!(send("0", daemon), "the daemon runs on");
}

/// Ctrl-C of a command that ignores SIGINT: SIGTERM a second later ends
/// it, and the trace with it.
#[test]
fn a_command_deaf_to_ctrl_c_is_sent_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (recorder, pid) = trace_leaves_running(dir.path(), &["deaf"]);
    let (out, waited) = interrupt(recorder, Some(pid));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(20),
        "{waited:?}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(128 + 15), "{stderr}");
}

/// The calls of `function` that `report --trace` counts.
fn calls_of(dir: &std::path::Path, function: &str) -> u64 {
    calls(dir, "t.data").get(function).copied().unwrap_or(0)
}

/// gdb's commands for `lock_held`: at `arm()`, a breakpoint, for the
/// holder thread alone, where the runtime writes a frame into the shared
/// buffer (under the channel's lock); the holder run to it, and left
/// stopped there (non-stop mode: the other threads run on) until the
/// program has ended; the other thread let go once it is.
const HOLD_THE_LOCK: &str = r#"
set non-stop on
set breakpoint pending on
set pagination off
break arm
run
python
holder = [t for t in gdb.selected_inferior().threads() if t.name == "holder"][0]
holder.switch()
gdb.execute("break ichnos_buf::topa::producer::Producer::write_record_parts thread %d" % holder.num)
end
continue
set language c
set var go = 1
python
import os, time
pid = gdb.selected_inferior().pid
def running():
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False
deadline = time.time() + 60
while running() and time.time() < deadline:
    time.sleep(0.05)
end
"#;

/// A thread stopped for good inside a hand-over (by a debugger, here)
/// holds the channel's lock: another thread's frames are given up at the
/// lock, and their count reaches the recording on the runtime's socket
/// when the process ends, charged to that thread, exactly: each of its
/// 2,002 events.
#[test]
fn frames_given_up_behind_a_lock_held_for_good_are_counted_lost() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "lock_held.c", &["-pthread"]);
    let commands = dir.path().join("hold.gdb");
    std::fs::write(&commands, HOLD_THE_LOCK).unwrap();
    let out = ichnos()
        .args(["trace", "-b", "4K", "-o"])
        .arg(dir.path().join("t.data"))
        .args(["--", "gdb", "-batch", "-nx", "-x"])
        .arg(&commands)
        .arg(&exe)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("\"holder\" hit Breakpoint 2, ")
            && stdout.contains("Producer::write_record_parts ("),
        "gdb did not stop the holder in the hand-over: {stdout}{stderr}"
    );
    // The program's line may land amid one of gdb's.
    let other: u32 = stdout
        .split("other ")
        .skip(1)
        .find_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    let lost: Vec<(u32, u64)> = replay(dir.path(), "t.data", &[])
        .iter()
        .filter_map(|(tid, f)| {
            let n = f.trim().strip_prefix("/* LOST ")?.split(' ').next()?;
            Some((*tid, n.parse().ok()?))
        })
        .collect();
    let of_other: u64 = lost
        .iter()
        .filter(|(t, _)| *t == other)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(of_other, 2002, "{lost:?}: {stderr}");
}

/// The values of probe 7, in the order the replay `lines` print them.
fn probe_7_values(lines: &[(u32, String)]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|(_, f)| f.trim().strip_prefix("/* probe 7 = "))
        .map(|v| v.trim_end_matches(" */").parse().unwrap())
        .collect()
}
