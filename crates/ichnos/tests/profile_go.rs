//! The profiler on a Go program: Go's linker writes its functions' CFI
//! into `.debug_frame` alone, and a goroutine's stack begins at
//! `runtime.goexit`, not `_start`. Every sample in the fixture's own
//! functions must unwind there completely, in the chain gdb's backtrace
//! (which reads the same `.debug_frame`) gives: linked by Go's own linker
//! (no `.eh_frame` at all), and by the system's (`.eh_frame` for the C
//! start-up code, `.debug_frame` for Go's).

use std::path::Path;
use std::process::Command;

mod common;

use common::*;

/// Builds `goroutines.go` into `dir`: a pure Go program, or one linked
/// by the system's linker (`external`).
fn build(dir: &Path, external: bool) -> std::path::PathBuf {
    let program = dir.join("goroutines");
    let mut go = Command::new("go");
    go.arg("build");
    if external {
        go.arg("-ldflags=-linkmode=external")
            .env("CGO_ENABLED", "1");
    } else {
        go.env("CGO_ENABLED", "0");
    }
    let out = go
        .arg("-o")
        .arg(&program)
        .arg(fixture("goroutines.go"))
        .current_dir(dir)
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .output()
        .expect("go runs (install golang-go)");
    assert!(out.status.success(), "go build: {}", stderr(&out));
    program
}

#[test]
fn goroutines_unwind_to_goexit_through_debug_frame() {
    goroutines_unwind_to_goexit(false);
}

#[test]
fn goroutines_linked_by_the_system_linker_unwind_to_goexit() {
    goroutines_unwind_to_goexit(true);
}

fn goroutines_unwind_to_goexit(external: bool) {
    let dir = tempfile::tempdir().unwrap();
    let program = build(dir.path(), external);
    let has_eh_frame = Command::new("readelf")
        .arg("-S")
        .arg(&program)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(".eh_frame "))
        .unwrap();
    assert_eq!(has_eh_frame, external, "{}", program.display());
    let chain = gdb_backtrace("main.leaf", &[program.as_os_str()]);
    assert_eq!(
        (
            chain.first().map(String::as_str),
            chain.last().map(String::as_str)
        ),
        (Some("main.leaf"), Some("runtime.goexit")),
        "gdb's backtrace: {chain:?}"
    );
    let root_first: Vec<&str> = chain.iter().rev().map(String::as_str).collect();

    let data = dir.path().join("go.data");
    let out = record(&data, 1000, &[program.to_str().unwrap()]);
    let stacks = folded(&data, &["--no-inline"]);
    let own = ["main.leaf", "main.middle"];
    let (total, complete, broken) = completeness(&stacks, &own, "runtime.goexit");
    assert!(
        total >= 500,
        "only {total} samples in the fixture: {stacks:?}"
    );
    assert!(
        complete * 1000 >= total * 999,
        "{complete} of {total} complete; the rest: {broken:?}"
    );
    // The leaf's samples show gdb's chain, right under the thread's name.
    let in_leaf: u64 = stacks
        .iter()
        .filter(|(f, _)| f.last().map(String::as_str) == Some("main.leaf"))
        .map(|(_, n)| n)
        .sum();
    let as_gdb: u64 = stacks
        .iter()
        .filter(|(f, _)| f[1..] == root_first[..])
        .map(|(_, n)| n)
        .sum();
    assert!(
        as_gdb * 1000 >= in_leaf * 999,
        "{as_gdb} of {in_leaf} in main.leaf as gdb's {root_first:?}: {stacks:?}"
    );
    // The recorder's summary counts the goroutines' stacks complete too.
    let summary = stderr(&out);
    let share = summary
        .split_once("s (")
        .and_then(|(_, rest)| rest.split_once("% complete"))
        .map(|(share, _)| share)
        .expect("the summary gives the complete share");
    let share: f64 = share.parse().unwrap();
    assert!(share >= 99.0, "{summary}");
}
