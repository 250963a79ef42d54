//! JIT code registered through `codectl()` by a program that loads
//! `libichnos` late, as a language binding does: the recorder looked for
//! an exported code registry while the program ran code it had told no
//! one of, found none, and looks again in the files mapped since, so the
//! code registered later is unwound and named. Code unregistered and its
//! memory registered again under another name keeps each name for its
//! own time; other code put there, with another frame, is unwound by its
//! own rows, from the time it was registered, under another name or the
//! same.

use std::path::{Path, PathBuf};

mod common;
#[path = "../../ichnos-capi/tests/support/libichnos.rs"]
mod libichnos;

use common::*;

/// `libichnos.so`, as the C ABI tests of `ichnos-capi` build it.
fn libichnos() -> PathBuf {
    libichnos::lib_dir().join("libichnos.so")
}

/// Builds `codectl_late.c` in `dir`.
fn build(dir: &Path) -> PathBuf {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let program = dir.join("codectl_late");
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
    program
}

/// The folded stacks of `codectl_late LIBICHNOS 0.3 [EXTRA]`, recorded.
fn record_late(dir: &Path, extra: &[&str]) -> Vec<(Vec<String>, u64)> {
    let program = build(dir);
    let library = libichnos();
    let data = dir.join("late.data");
    let mut command = vec![program.to_str().unwrap(), library.to_str().unwrap(), "0.3"];
    command.extend_from_slice(extra);
    record(&data, 1000, &command);
    folded(&data, &[])
}

/// Samples of `stacks` in `spin` through the JIT function `name` called
/// from `main`, complete to `_start`.
fn through(stacks: &[(Vec<String>, u64)], name: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| {
            f.len() >= 4
                && f[f.len() - 1] == "spin"
                && f[f.len() - 2] == name
                && f[f.len() - 3] == "main"
                && f[1] == "_start"
        })
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn jit_code_registered_through_a_libichnos_loaded_late_is_unwound_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let stacks = record_late(dir.path(), &[]);
    let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks.iter().filter(|(f, _)| keep(f)).map(|(_, n)| n).sum()
    };
    let early = sum(&|f| f.last().map(String::as_str) == Some("spin_early"));
    let in_spin = sum(&|f| f.last().map(String::as_str) == Some("spin"));
    let through_jit = through(&stacks, "jit_late");
    // The first part ran (and looked for a registry in vain).
    assert!(early >= 150, "{early}: {stacks:?}");
    assert!(in_spin >= 150, "{in_spin}: {stacks:?}");
    assert!(
        through_jit * 1000 >= in_spin * 999,
        "{through_jit} of {in_spin} through jit_late: {stacks:?}"
    );
}

/// `codectl_late` recorded with `mode` (`reuse`, `reshape`,
/// `reshape_same`): its folded
/// stacks, the samples in `spin`, and those through `jit_late` and
/// through `jit_again` complete to `_start`.
fn record_twice_registered(dir: &Path, mode: &str) -> (Vec<(Vec<String>, u64)>, u64, u64, u64) {
    let stacks = record_late(dir, &[mode]);
    let in_spin: u64 = stacks
        .iter()
        .filter(|(f, _)| f.last().map(String::as_str) == Some("spin"))
        .map(|(_, n)| n)
        .sum();
    let (late, again) = (through(&stacks, "jit_late"), through(&stacks, "jit_again"));
    assert!(in_spin >= 400, "{in_spin}: {stacks:?}");
    (stacks, in_spin, late, again)
}

#[test]
fn code_registered_again_under_another_name_keeps_each_name_for_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let (stacks, in_spin, late, again) = record_twice_registered(dir.path(), "reuse");
    assert!(
        (late + again) * 1000 >= in_spin * 999,
        "{late} + {again} of {in_spin}: {stacks:?}"
    );
    // 0.3 s of CPU each: each name has most of its own.
    for (name, n) in [("jit_late", late), ("jit_again", again)] {
        assert!(
            n * 10 >= in_spin * 4,
            "{name}: {n} of {in_spin}: {stacks:?}"
        );
    }
}

#[test]
fn other_code_registered_in_the_same_memory_is_unwound_by_its_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (stacks, in_spin, late, again) = record_twice_registered(dir.path(), "reshape");
    // The second half's frame is 32 bytes larger: unwound by the first
    // half's rows, no sample of it would reach main. Samples taken before
    // the change but walked after the recorder saw it are walked with the
    // code that was there when they were taken, and those after it with
    // the new code's rows, though the recorder looks at the registry some
    // milliseconds later: every sample in spin goes through one of the
    // two, to main.
    assert!(
        again * 10 >= in_spin * 3,
        "jit_again: {again} of {in_spin}: {stacks:?}"
    );
    assert!(
        late * 10 >= in_spin * 3,
        "jit_late: {late} of {in_spin}: {stacks:?}"
    );
    assert!(
        (late + again) * 1000 >= in_spin * 999,
        "{late} + {again} of {in_spin}: {stacks:?}"
    );
}

#[test]
fn other_code_registered_alike_in_the_same_memory_is_unwound_by_its_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    // The same range, table and name: only the registration's time says
    // that the code and its rows are new.
    let (stacks, in_spin, late, again) = record_twice_registered(dir.path(), "reshape_same");
    assert_eq!(again, 0);
    assert!(
        late * 1000 >= in_spin * 999,
        "{late} of {in_spin}: {stacks:?}"
    );
}
