//! `ichnos trace`, `ichnos replay` and `ichnos report --trace` end to end,
//! on C and C++ fixtures built with `-finstrument-functions` whose call
//! structure is known from their source: exact call counts, nesting,
//! threads, fork, signal handlers, exceptions, the flight recorder after
//! a crash, and a recorder killed under the program.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn ichnos() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ichnos"))
}

/// Builds `fixtures/trace/NAME` with gcc (g++ for `.cc`) and
/// `-finstrument-functions`.
fn build(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/trace")
        .join(name);
    let exe = dir.join(src.file_stem().unwrap());
    let compiler = if src.extension().is_some_and(|e| e == "cc") {
        "g++"
    } else {
        "gcc"
    };
    let status = Command::new(compiler)
        .args(["-O2", "-g", "-finstrument-functions"])
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "{compiler} failed on {}", src.display());
    exe
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn trace(dir: &Path, data: &str, args: &[&str], command: &[&str]) -> Output {
    ichnos()
        .arg("trace")
        .arg("-o")
        .arg(dir.join(data))
        .args(args)
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

/// Calls per function, from `report --trace`.
fn calls(dir: &Path, data: &str) -> HashMap<String, u64> {
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(dir.join(data)));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut calls = HashMap::new();
    for line in text.lines().skip(2) {
        // total self calls avg max name: durations are "N.NNN us".
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(fields.len() >= 10, "{line}");
        let name = fields[9..].join(" ");
        calls.insert(name, fields[4].parse().unwrap());
    }
    calls
}

/// The replay's function column for each line, with the thread id.
fn replay(dir: &Path, data: &str, extra: &[&str]) -> Vec<(u32, String)> {
    let out = run(ichnos()
        .arg("replay")
        .args(extra)
        .arg("-i")
        .arg(dir.join(data)));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# DURATION     TID     FUNCTION"));
    lines
        .map(|l| {
            let (head, function) = l.split_once(" | ").unwrap_or_else(|| panic!("{l}"));
            let tid = head
                .rsplit('[')
                .next()
                .unwrap()
                .trim_end_matches(']')
                .trim()
                .parse()
                .unwrap();
            (tid, function.to_owned())
        })
        .collect()
}

#[test]
fn replay_and_totals_follow_the_known_call_structure() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("0 lost"), "{stderr}");
    let lines: Vec<String> = replay(dir.path(), "t.data", &[])
        .into_iter()
        .map(|(_, f)| f)
        .collect();
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
    expected.push("  } /* top */");
    assert_eq!(lines[..expected.len()], expected[..], "{lines:#?}");
    // longjmp skipped the exits of deep and jumper: main's exit closes
    // them, and main ends at depth 0.
    assert_eq!(lines.last().unwrap(), "} /* main */", "{lines:#?}");
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
}

#[test]
fn threads_forks_and_signal_handlers_are_each_traced_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c", &["-pthread"]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "20000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
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
}

#[test]
fn exceptions_unwinding_traced_frames_keep_the_depth() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "throw.cc", &[]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = replay(dir.path(), "t.data", &[])
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(
        lines.iter().filter(|l| *l == "    thrower(int);").count(),
        3,
        "{lines:#?}"
    );
    assert!(lines.contains(&"  after_catch();".to_owned()), "{lines:#?}");
    assert_eq!(lines.last().unwrap(), "} /* main */");
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
    let some = replay(dir.path(), "t.data", &["-t", "1ns"]);
    assert_eq!(some.len(), all.len());
}

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
    let values: Vec<u64> = lines
        .iter()
        .filter_map(|(_, f)| f.trim().strip_prefix("/* probe 7 = "))
        .map(|v| v.trim_end_matches(" */").parse().unwrap())
        .collect();
    assert!(values.len() >= 60, "{} probes", values.len());
    let n = values.len() as u64;
    let expected: Vec<u64> = (100_000 - n..100_000).collect();
    assert_eq!(values, expected);
}

#[test]
fn the_program_runs_on_when_the_recorder_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "slow.c", &[]);
    let done = dir.path().join("done");
    let mut recorder = ichnos()
        .arg("trace")
        .arg("-o")
        .arg(dir.path().join("t.data"))
        .arg("--")
        .arg(&exe)
        .arg("1.5")
        .arg(&done)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    recorder.kill().unwrap();
    recorder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
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
}
