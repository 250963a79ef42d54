//! The profiler on a Java program: HotSpot's compiled methods have no
//! unwind tables and keep no frame pointer unless the JVM is told to
//! (`-XX:+PreserveFramePointer`), so a walk out of them by the frame
//! pointer may skip their callers. The recording says so where the JVM
//! was not told, and with it the chain of compiled methods is whole.

use std::path::Path;
use std::process::Command;

mod common;

use common::*;

/// Compiles `Busy.java` into `dir`.
fn build(dir: &Path) {
    let out = Command::new("javac")
        .arg("-d")
        .arg(dir)
        .arg(fixture("Busy.java"))
        .output()
        .expect("javac runs (install default-jdk-headless)");
    assert!(out.status.success(), "javac: {}", stderr(&out));
}

/// Records `java [FLAGS] -cp DIR Busy 1000`, its methods named through
/// the perf map the JVM writes at its exit, leaf kept out of middle:
/// the folded stacks and the recording's notes.
fn record_busy(dir: &Path, flags: &[&str]) -> (Vec<(Vec<String>, u64)>, String) {
    let data = dir.join("java.data");
    let classes = dir.to_str().unwrap();
    let mut command = vec![
        "java",
        "-XX:+UnlockDiagnosticVMOptions",
        "-XX:+DumpPerfMapAtExit",
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,Busy::leaf",
    ];
    command.extend_from_slice(flags);
    command.extend_from_slice(&["-cp", classes, "Busy", "1000"]);
    let out = record(&data, 1000, &command);
    let stacks = folded(&data, &[]);
    // The JVM leaves its perf map behind; the recording holds its names.
    for pid in pids(&data) {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    (stacks, stderr(&out))
}

/// Samples in `Busy.leaf`, and those whose caller is `Busy.middle`,
/// compiled or in the interpreter (before it was compiled).
fn leaf_samples(stacks: &[(Vec<String>, u64)]) -> (u64, u64) {
    let in_leaf = |f: &[String]| f.last().is_some_and(|l| l.ends_with("Busy.leaf(int)"));
    let all = stacks
        .iter()
        .filter(|(f, _)| in_leaf(f))
        .map(|(_, n)| n)
        .sum();
    let under_middle = stacks
        .iter()
        .filter(|(f, _)| {
            in_leaf(f)
                && f.len() >= 2
                && (f[f.len() - 2].ends_with("Busy.middle()") || f[f.len() - 2] == "Interpreter")
        })
        .map(|(_, n)| n)
        .sum();
    (all, under_middle)
}

#[test]
fn java_without_frame_pointers_is_told_of_and_with_them_its_compiled_callers_are_whole() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    // As the JVM runs by default: walked out of leaf by rbp, which its
    // compiled code does not keep (whether a stack skipped a caller
    // depends on what the compiler made of each: not asserted); the
    // recording says so and what to do.
    let (stacks, notes) = record_busy(dir.path(), &[]);
    let note = notes
        .lines()
        .find(|l| l.contains("Java's compiled code keeps no frame pointer"))
        .unwrap_or_else(|| panic!("no note: {notes}"));
    assert!(
        note.contains("(java)") && note.contains("-XX:+PreserveFramePointer"),
        "{note}"
    );
    let (all, _) = leaf_samples(&stacks);
    assert!(all >= 300, "{all} in leaf: {stacks:?}");
    // Told to keep it: no note, and leaf's stacks go through middle.
    let (stacks, notes) = record_busy(dir.path(), &["-XX:+PreserveFramePointer"]);
    assert!(!notes.contains("Java's compiled code"), "{notes}");
    let (all, under_middle) = leaf_samples(&stacks);
    assert!(all >= 300, "{all} in leaf: {stacks:?}");
    assert!(
        under_middle * 100 >= all * 99,
        "{under_middle} of {all} in leaf under middle: {stacks:?}"
    );
}
