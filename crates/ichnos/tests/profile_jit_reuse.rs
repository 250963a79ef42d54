//! JIT code freed and its memory reused by other code under another name,
//! told through the perf map (a second line for the same address, as
//! runtimes write it): the samples before the change keep the first
//! name, those after it take the second, where a name per address would
//! give one of them to both.

use std::process::Command;

mod common;

use common::*;

#[test]
fn perf_mapped_code_named_anew_keeps_each_name_for_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "named_jit", &[]);
    let data = dir.path().join("reuse.data");
    // 0.6 s of CPU under the first name (the perf map written a third of
    // the way in), then 0.6 s under the second; the other loop throughout.
    let out = Command::new(ICHNOS)
        .args(["record", "-o", data.to_str().unwrap(), "--"])
        .arg(&exe)
        .args(["0.6", "reuse"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let stacks = folded(&data, &[]);
    let leaf = |name: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == name))
            .map(|(_, n)| n)
            .sum()
    };
    let (first, again) = (leaf("perf_mapped_loop"), leaf("perf_mapped_again"));
    let other = leaf("jitdumped_loop");
    // The two loops take turns: the first's samples, under either name,
    // are about the other's.
    assert!(other >= 400, "{other}: {stacks:?}");
    assert!(
        (first + again) * 10 >= other * 8,
        "{first} + {again} against {other}: {stacks:?}"
    );
    // Each name has its own half, give or take the time the recorder
    // takes to see the perf map change (one look, 50 ms).
    for (name, n) in [("perf_mapped_loop", first), ("perf_mapped_again", again)] {
        assert!(
            n * 10 >= (first + again) * 4,
            "{name}: {n} of {}: {stacks:?}",
            first + again
        );
    }
}
