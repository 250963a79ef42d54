//! The profiler on a Go program: Go's linker writes its functions' CFI
//! into `.debug_frame` alone, and a goroutine's stack begins at
//! `runtime.goexit`, not `_start`. Every sample in the fixture's own
//! functions must unwind there completely, in the chain gdb's backtrace
//! (which reads the same `.debug_frame`) gives: linked by Go's own linker
//! (no `.eh_frame` at all), and by the system's (`.eh_frame` for the C
//! start-up code, `.debug_frame` for Go's); and stripped of its symbols
//! and `.debug_frame`, when Go's own function table names its functions
//! and gives its rows.

use std::path::Path;
use std::process::Command;

mod common;

use common::*;

/// How the fixture is linked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// By Go's own linker, a pure Go program.
    Go,
    /// By the system's linker (as a program with cgo is).
    System,
    /// By Go's own linker, position independent (its function table in
    /// `.data.rel.ro.gopclntab`).
    Pie,
}

/// Builds `goroutines.go` into `dir`.
fn build(dir: &Path, link: Link) -> std::path::PathBuf {
    build_go(dir, "goroutines", link)
}

/// Builds the fixture `NAME.go` into `dir`.
fn build_go(dir: &Path, name: &str, link: Link) -> std::path::PathBuf {
    let program = dir.join(name);
    let mut go = Command::new("go");
    go.arg("build");
    match link {
        Link::Go => go.env("CGO_ENABLED", "0"),
        Link::System => go
            .arg("-ldflags=-linkmode=external")
            .env("CGO_ENABLED", "1"),
        Link::Pie => go.arg("-buildmode=pie").env("CGO_ENABLED", "0"),
    };
    let out = go
        .arg("-o")
        .arg(&program)
        .arg(fixture(&format!("{name}.go")))
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
    goroutines_unwind_to_goexit(Link::Go, false);
}

#[test]
fn goroutines_linked_by_the_system_linker_unwind_to_goexit() {
    goroutines_unwind_to_goexit(Link::System, false);
}

#[test]
fn goroutines_of_a_stripped_program_unwind_to_goexit_by_its_function_table() {
    goroutines_unwind_to_goexit(Link::Go, true);
}

#[test]
fn goroutines_of_a_stripped_program_linked_by_the_system_linker_unwind_to_goexit() {
    goroutines_unwind_to_goexit(Link::System, true);
}

#[test]
fn goroutines_of_a_stripped_position_independent_program_unwind_to_goexit() {
    goroutines_unwind_to_goexit(Link::Pie, true);
}

fn goroutines_unwind_to_goexit(link: Link, stripped: bool) {
    let dir = tempfile::tempdir().unwrap();
    let program = build(dir.path(), link);
    let has_eh_frame = Command::new("readelf")
        .arg("-S")
        .arg(&program)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(".eh_frame "))
        .unwrap();
    assert_eq!(has_eh_frame, link == Link::System, "{}", program.display());
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
    let program = if stripped {
        let copy = dir.path().join("stripped");
        let out = Command::new("strip")
            .arg("-o")
            .arg(&copy)
            .arg(&program)
            .output()
            .unwrap();
        assert!(out.status.success(), "strip: {}", stderr(&out));
        copy
    } else {
        program
    };

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

/// The garbage collector's work runs on the system stack the runtime
/// switches to: above `runtime.systemstack` lies no frame of that stack
/// (Go's traceback stops there too), so its stacks end there, complete,
/// rather than running on into stale frames.
#[test]
fn stacks_on_the_system_stack_end_where_the_runtime_switched_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_go(dir.path(), "allocator", Link::Go);
    let data = dir.path().join("gc.data");
    record(&data, 1000, &[program.to_str().unwrap()]);
    let stacks = folded(&data, &["--no-inline"]);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let on_system_stack: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|name| name == "runtime.systemstack"))
        .collect();
    let switched: u64 = on_system_stack.iter().map(|(_, n)| n).sum();
    assert!(
        total >= 200 && switched >= 10,
        "{switched} of {total}: {stacks:?}"
    );
    for (frames, _) in &on_system_stack {
        assert_eq!(frames[1], "runtime.systemstack", "{frames:?}");
    }
    let incomplete: u64 = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|name| name == "[incomplete stack]"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        incomplete * 100 <= total,
        "{incomplete} of {total}: {stacks:?}"
    );
}
