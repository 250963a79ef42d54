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

/// The folded stacks of `codectl_late LIBICHNOS 0.3 [EXTRA]`, recorded,
/// and the recorder's notes.
fn record_late_noted(dir: &Path, extra: &[&str]) -> (Vec<(Vec<String>, u64)>, String) {
    let program = build(dir);
    let library = libichnos();
    let data = dir.join("late.data");
    let mut command = vec![program.to_str().unwrap(), library.to_str().unwrap(), "0.3"];
    command.extend_from_slice(extra);
    let out = record(&data, 1000, &command);
    (folded(&data, &[]), stderr(&out))
}

/// The folded stacks of `codectl_late LIBICHNOS 0.3 [EXTRA]`, recorded.
fn record_late(dir: &Path, extra: &[&str]) -> Vec<(Vec<String>, u64)> {
    record_late_noted(dir, extra).0
}

/// Samples of `stacks` in `spin` through the JIT function `name` called
/// from `main`, complete to `_start`.
fn through(stacks: &[(Vec<String>, u64)], name: &str) -> u64 {
    through_to(stacks, name, "spin")
}

/// Samples of `stacks` in `leaf` through the JIT function `name` called
/// from `main`, complete to `_start`.
fn through_to(stacks: &[(Vec<String>, u64)], name: &str, leaf: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| {
            f.len() >= 4
                && f[f.len() - 1] == leaf
                && f[f.len() - 2] == name
                && f[f.len() - 3] == "main"
                && f[1] == "_start"
        })
        .map(|(_, n)| n)
        .sum()
}

/// Samples of `stacks` in `leaf`.
fn in_leaf(stacks: &[(Vec<String>, u64)], leaf: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| f.last().map(String::as_str) == Some(leaf))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn jit_code_registered_through_a_libichnos_loaded_late_is_unwound_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let (stacks, notes) = record_late_noted(dir.path(), &[]);
    // The first part's code no one names is told of, with how to name it.
    let note = notes
        .lines()
        .find(|l| l.contains("JIT code without a name"))
        .unwrap_or_else(|| panic!("no note on unnamed JIT code: {notes}"));
    assert!(
        note.contains("(codectl_late)") && note.contains("codectl()"),
        "{note}"
    );
    let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
        stacks.iter().filter(|(f, _)| keep(f)).map(|(_, n)| n).sum()
    };
    let early = sum(&|f| f.last().map(String::as_str) == Some("spin_early"));
    let in_spin = sum(&|f| f.last().map(String::as_str) == Some("spin"));
    let through_jit = through(&stacks, "jit_late");
    // The first part ran (and looked for a registry in vain); the code
    // no one named shows as one function, whatever its address.
    assert!(early >= 150, "{early}: {stacks:?}");
    // With --addresses, each address of it (JIT code, in no file).
    let by_address = folded(&dir.path().join("late.data"), &["--addresses"]);
    assert!(
        by_address.iter().any(|(f, _)| f.len() >= 2
            && f[f.len() - 2].starts_with("0x")
            && !f.iter().any(|x| x == "[unnamed JIT code]")),
        "{by_address:?}"
    );
    // (Nothing says how to unwind it: those stacks end there.)
    let through_unnamed =
        sum(&|f| f.ends_with(&["[unnamed JIT code]".into(), "spin_early".into()]));
    assert!(
        through_unnamed * 1000 >= early * 999,
        "{through_unnamed} of {early} through the unnamed code: {stacks:?}"
    );
    assert!(in_spin >= 150, "{in_spin}: {stacks:?}");
    assert!(
        through_jit * 1000 >= in_spin * 999,
        "{through_jit} of {in_spin} through jit_late: {stacks:?}"
    );
}

/// `codectl_late` recorded with `mode` (`reuse`, `reshape`,
/// `reshape_same`) and the samples of each of its halves: the first half
/// calls `spin` through the code first registered, the second
/// `spin_again` through the code registered in its place. Asserts that
/// every sample of each half (but one in a thousand) went through the
/// code `names` says, to main and `_start`: a sample walked with the other
/// half's rows would not reach main, and one named for the other half's
/// time would have the other name.
fn assert_each_half_has_its_code(mode: &str, names: [&str; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let stacks = record_late(dir.path(), &[mode]);
    for (leaf, name) in ["spin", "spin_again"].into_iter().zip(names) {
        let (all, through) = (in_leaf(&stacks, leaf), through_to(&stacks, name, leaf));
        // 0.3 s of CPU time each at 1 kHz.
        assert!(all >= 200, "{leaf}: {all}: {stacks:?}");
        assert!(
            through * 1000 >= all * 999,
            "{mode}: {through} of {all} samples in {leaf} through {name}: {stacks:?}"
        );
    }
}

#[test]
fn code_registered_again_under_another_name_keeps_each_name_for_its_own_time() {
    // The same code and rows: only the names tell the halves apart, and
    // each sample has the name of the code it ran, though the recorder
    // sees the change some milliseconds after it and walks samples taken
    // before it after that.
    assert_each_half_has_its_code("reuse", ["jit_late", "jit_again"]);
}

#[test]
fn other_code_registered_in_the_same_memory_is_unwound_by_its_own_rows() {
    // The second half's frame is 32 bytes larger: unwound by the first
    // half's rows, no sample of it would reach main; nor would one of the
    // first half, walked after the change, unwound by the new rows.
    assert_each_half_has_its_code("reshape", ["jit_late", "jit_again"]);
}

#[test]
fn other_code_registered_alike_in_the_same_memory_is_unwound_by_its_own_rows() {
    // The same range, table and name: only the registration's time says
    // that the code and its rows are new.
    assert_each_half_has_its_code("reshape_same", ["jit_late", "jit_late"]);
}
