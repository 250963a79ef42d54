//! JIT code registered through `codectl()` by a program that loads
//! `libichnos` late, as a language binding does: the recorder looked for
//! an exported code registry while the program ran code it had told no
//! one of, found none, and looks again in the files mapped since, so the
//! code registered later is unwound and named.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::*;

/// `libichnos.so`, built by a nested cargo into a target directory of its
/// own (the C ABI tests of `ichnos-capi` build the same one there).
fn libichnos() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "ichnos-capi",
            "--lib",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(&root)
        .status()
        .expect("run cargo build -p ichnos-capi");
    assert!(status.success(), "building libichnos failed");
    target.join("debug/libichnos.so")
}

#[test]
fn jit_code_registered_through_a_libichnos_loaded_late_is_unwound_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let program = dir.path().join("codectl_late");
    gcc(&[
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-I",
        include.to_str().unwrap(),
        "-o",
        program.to_str().unwrap(),
        fixture("codectl_late.c").to_str().unwrap(),
        "-ldl",
    ]);
    let library = libichnos();
    let data = dir.path().join("late.data");
    record(
        &data,
        1000,
        &[program.to_str().unwrap(), library.to_str().unwrap(), "0.3"],
    );
    let stacks = folded(&data, &[]);
    let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks.iter().filter(|(f, _)| keep(f)).map(|(_, n)| n).sum()
    };
    let early = sum(&|f| f.last().map(String::as_str) == Some("spin_early"));
    let in_spin = sum(&|f| f.last().map(String::as_str) == Some("spin"));
    let through_jit = sum(&|f| {
        f.len() >= 4 && f[f.len() - 2] == "jit_late" && f[f.len() - 3] == "main" && f[1] == "_start"
    });
    // The first part ran (and looked for a registry in vain).
    assert!(early >= 150, "{early}: {stacks:?}");
    assert!(in_spin >= 150, "{in_spin}: {stacks:?}");
    assert!(
        through_jit * 1000 >= in_spin * 999,
        "{through_jit} of {in_spin} through jit_late: {stacks:?}"
    );
}
