//! Recordings of running processes (`-p`) and of the whole machine (`-a`)
//! bounded by a command, as `perf record -a -- sleep 5` is: the command
//! runs once the events are on, the recording ends when it does (or when
//! the attached processes exit: the command is then sent SIGTERM), and
//! ichnos exits with its status.

use std::path::Path;
use std::process::Command;

mod common;

use common::*;

/// The seconds the recording at `data` says it spans (its report's
/// header: "... over 0.51 s; ...").
fn recorded_seconds(data: &Path) -> f64 {
    let out = ok(
        ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "1"]),
        "report",
    );
    let text = text(&out);
    let over = text
        .split(" over ")
        .nth(1)
        .and_then(|rest| rest.split(" s;").next())
        .unwrap_or_else(|| panic!("no duration in {text}"));
    over.parse().unwrap()
}

/// `ichnos record -o DATA SELECTION -- COMMAND`.
fn record_bounded(data: &Path, selection: &[&str], command: &[&str]) -> std::process::Output {
    let mut args = vec!["record", "-o", data.to_str().unwrap()];
    args.extend_from_slice(selection);
    args.push("--");
    args.extend_from_slice(command);
    ichnos(&args)
}

/// Samples of `stacks` whose leaf is `leaf`.
fn in_leaf(stacks: &[(Vec<String>, u64)], leaf: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| f.last().is_some_and(|l| l == leaf))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn a_command_bounds_the_recording_of_running_processes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "threads", &["-pthread"]);
    // Runs 4 s: the recording's end is the command's, half a second.
    let mut target = Command::new(&exe).arg("4.0").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    let data = dir.path().join("bounded.data");
    let pid = target.id().to_string();
    let out = record_bounded(&data, &["-p", &pid], &["sh", "-c", "sleep 0.5; exit 7"]);
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let seconds = recorded_seconds(&data);
    assert!((0.4..2.0).contains(&seconds), "{seconds} s");
    let stacks = folded(&data, &[]);
    // (Three spinning threads share two CPUs with other tests.)
    for work in ["work_a", "work_b"] {
        let n = in_leaf(&stacks, work);
        assert!(n >= 50, "{work}: {n}: {stacks:?}");
    }
    // The command itself is not one of the processes recorded.
    assert!(
        stacks.iter().all(|(f, _)| f[0] != "sh" && f[0] != "sleep"),
        "{stacks:?}"
    );
}

#[test]
fn attached_processes_that_exit_end_the_recording_and_its_command() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "threads", &["-pthread"]);
    let mut target = Command::new(&exe).arg("0.3").spawn().unwrap();
    let data = dir.path().join("ended.data");
    let pid = target.id().to_string();
    let out = record_bounded(&data, &["-p", &pid], &["sleep", "60"]);
    let _ = target.wait();
    // The command was sent SIGTERM: 128 + 15.
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let seconds = recorded_seconds(&data);
    assert!(seconds < 10.0, "{seconds} s");
}

#[test]
fn a_command_bounds_a_recording_of_the_machine_and_is_recorded_in_it() {
    let dir = tempfile::tempdir().unwrap();
    // Under a name of its own: another test's target runs the same code.
    let built = build_fixture(dir.path(), "threads", &["-pthread"]);
    let exe = dir.path().join("machine_work");
    std::fs::rename(&built, &exe).unwrap();
    let data = dir.path().join("machine.data");
    let script = format!("{} 0.5; exit 5", exe.display());
    let out = record_bounded(&data, &["-a"], &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    let seconds = recorded_seconds(&data);
    assert!((0.4..6.0).contains(&seconds), "{seconds} s");
    let stacks = folded(&data, &["--comm", "machine_work"]);
    for work in ["work_a", "work_b"] {
        let n = in_leaf(&stacks, work);
        assert!(n >= 50, "{work}: {n}: {stacks:?}");
    }
}

#[test]
fn a_bounding_command_that_does_not_exist_is_named_and_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("none.data");
    let pid = std::process::id().to_string();
    let out = record_bounded(&data, &["-p", &pid], &["no-such-command-here"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no-such-command-here"),
        "{}",
        stderr(&out)
    );
    assert!(!data.exists());
}
