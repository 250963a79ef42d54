//! The profiler through JIT code a process described to debuggers with
//! the GDB JIT interface (as LuaJIT, LLVM's JITs, V8 and Wasmtime do):
//! ichnos reads the object from the process while it runs, unwinds the
//! generated code by its `.eh_frame` and names it by its symbols. The
//! fixture (`ichnos-code`'s `gdb_jit.c`) calls back into native code from
//! a JIT function with a frame and no frame pointer; gdb, which reads the
//! same interface, gives the chain every sample must show.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::*;

fn ichnos_code_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ichnos-code/tests/fixtures")
        .join(name)
}

fn run(command: &mut Command) -> String {
    let out = command.output().expect("runs");
    assert!(out.status.success(), "{command:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Builds the fixtures in `dir` (`gdb_jit_build.sh`): (program, the
/// code's object). Beside them: `other.elf`, the same code under the name
/// `jit_other`; `libgdb_jit.so` and `gdb_jit_late`.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    run(Command::new("sh")
        .arg(ichnos_code_fixture("gdb_jit_build.sh"))
        .arg(dir));
    (dir.join("gdb_jit"), dir.join("code.elf"))
}

#[test]
fn jit_code_described_to_debuggers_is_unwound_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (program, object) = build(dir.path());
    let chain = gdb_backtrace(
        "spin",
        &[program.as_os_str(), object.as_os_str(), "0.01".as_ref()],
    );
    assert_eq!(&chain[..2], ["spin", "jit_hot"], "gdb's backtrace");
    assert_eq!(chain.last().map(String::as_str), Some("main"), "{chain:?}");
    // Root first, as the folded stacks read.
    let root_first: Vec<&str> = chain.iter().rev().map(String::as_str).collect();

    let data = dir.path().join("g.data");
    record(
        &data,
        1000,
        &[program.to_str().unwrap(), object.to_str().unwrap(), "0.5"],
    );
    let stacks = folded(&data, &[]);
    let (mut in_spin, mut through_jit) = (0, 0);
    for (frames, n) in &stacks {
        if frames.last().map(String::as_str) != Some("spin") {
            continue;
        }
        in_spin += n;
        // ..., main, ..., jit_hot, spin: gdb's chain from main down.
        let tail: Vec<&str> = frames[frames.len().saturating_sub(root_first.len())..]
            .iter()
            .map(String::as_str)
            .collect();
        if tail == root_first && frames[1] == "_start" {
            through_jit += n;
        }
    }
    assert!(in_spin >= 300, "{in_spin}: {stacks:?}");
    assert!(
        through_jit * 1000 >= in_spin * 999,
        "{through_jit} of {in_spin} through jit_hot to _start: {stacks:?}"
    );
    // The JIT frame is marked as such.
    let out = ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "0"]);
    let table = text(&out);
    assert!(
        table
            .lines()
            .any(|l| l.contains(" jit_hot ") && l.trim_end().ends_with("[jit]")),
        "{table}"
    );
}

/// The JIT frees its code (the entry leaves the list) and puts other code,
/// under another name, at the same address: the list is read again on
/// time, though no walk runs into unknown code, so the new object
/// replaces the old one and its name is recorded, in a new address space
/// of the process: the samples of the first half keep `jit_hot`, those of
/// the second are `jit_other`'s (the fixture runs each for 0.3 s of CPU).
#[test]
fn jit_code_freed_and_replaced_at_the_same_address_is_named_anew() {
    let dir = tempfile::tempdir().unwrap();
    let (program, object) = build(dir.path());
    let other = dir.path().join("other.elf");
    let data = dir.path().join("s.data");
    record(
        &data,
        1000,
        &[
            program.to_str().unwrap(),
            object.to_str().unwrap(),
            "0.3",
            other.to_str().unwrap(),
        ],
    );
    let stacks = folded(&data, &[]);
    let in_spin: u64 = stacks
        .iter()
        .filter(|(f, _)| f.last().map(String::as_str) == Some("spin"))
        .map(|(_, n)| n)
        .sum();
    let through = |name: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| f.len() >= 3 && f[f.len() - 2] == name && f[1] == "_start")
            .map(|(_, n)| n)
            .sum()
    };
    let (hot, other) = (through("jit_hot"), through("jit_other"));
    assert!(in_spin >= 300, "{in_spin}: {stacks:?}");
    assert!(
        (hot + other) * 1000 >= in_spin * 999,
        "{hot} + {other} of {in_spin}: {stacks:?}"
    );
    // Each half has most of its own samples: the names change within one
    // look at the list (50 ms) of the code's change.
    for (name, n) in [("jit_hot", hot), ("jit_other", other)] {
        assert!(
            n * 10 >= in_spin * 4,
            "{name}: {n} of {in_spin}: {stacks:?}"
        );
    }
}

/// The descriptor lives in a library loaded after the recorder first
/// looked for JIT code (a walk ran into code the process told no one of):
/// the files mapped since are searched at the next look, so the code the
/// library registers is unwound.
#[test]
fn a_jit_loaded_late_is_found_in_its_library() {
    let dir = tempfile::tempdir().unwrap();
    let (_, object) = build(dir.path());
    let library = dir.path().join("libgdb_jit.so");
    let late = dir.path().join("gdb_jit_late");
    let data = dir.path().join("late.data");
    record(
        &data,
        1000,
        &[
            late.to_str().unwrap(),
            library.to_str().unwrap(),
            object.to_str().unwrap(),
            "0.3",
        ],
    );
    let stacks = folded(&data, &[]);
    let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks.iter().filter(|(f, _)| keep(f)).map(|(_, n)| n).sum()
    };
    let early = sum(&|f| f.last().map(String::as_str) == Some("spin_early"));
    let in_spin = sum(&|f| f.last().map(String::as_str) == Some("spin"));
    let through_jit = sum(&|f| {
        f.len() >= 3 && f[f.len() - 1] == "spin" && f[f.len() - 2] == "jit_hot" && f[1] == "_start"
    });
    // The first part ran (and looked for JIT code in vain).
    assert!(early >= 150, "{early}: {stacks:?}");
    assert!(in_spin >= 150, "{in_spin}: {stacks:?}");
    assert!(
        through_jit * 1000 >= in_spin * 999,
        "{through_jit} of {in_spin}: {stacks:?}"
    );
}
