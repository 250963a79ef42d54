//! JIT code freed and its memory reused by other code under another name,
//! told through the perf map (a second line for the same address, as
//! runtimes write it) and the jitdump file (a second load record): the
//! samples before the change keep the first name, those after it take the
//! second, where a name per address would give one of them to both. The
//! fixture runs the code of the second names on a thread of its own, so
//! that a sample's thread says which code it ran.

use std::process::Command;

mod common;

use common::*;

#[test]
fn jit_code_named_anew_keeps_each_name_for_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "named_jit", &["-pthread"]);
    let data = dir.path().join("reuse.data");
    // 0.6 s of CPU under the first names (the perf map written a third
    // of the way in) on the main thread, then 0.6 s under the second on
    // the thread "again".
    let out = Command::new(ICHNOS)
        .args(["record", "-o", data.to_str().unwrap(), "--"])
        .arg(&exe)
        .args(["0.6", "reuse"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let stacks = folded(&data, &[]);
    // Samples of `thread` whose leaf is `name`.
    let leaf = |thread: &str, name: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| f[0] == thread && f.last().is_some_and(|l| l == name))
            .map(|(_, n)| n)
            .sum()
    };
    let main = "named_jit";
    let (dumped, dumped_again) = (leaf(main, "jitdumped_loop"), leaf(main, "jitdumped_again"));
    let (late_dumped, late_dumped_again) = (
        leaf("again", "jitdumped_loop"),
        leaf("again", "jitdumped_again"),
    );
    // (Each loop has half of each 0.6 s of CPU, at 1 kHz; the perf map is
    // written a third of the way in.) The jitdump file says when each
    // code was loaded: every sample has the name of the code it ran (none
    // other, with some 300 samples each).
    assert!(dumped >= 200, "{dumped}: {stacks:?}");
    assert!(late_dumped_again >= 200, "{late_dumped_again}: {stacks:?}");
    assert!(
        dumped_again * 1000 <= dumped + dumped_again,
        "{dumped_again} of the main thread's named jitdumped_again: {stacks:?}"
    );
    assert!(
        late_dumped * 1000 <= late_dumped + late_dumped_again,
        "{late_dumped} of the thread again's named jitdumped_loop: {stacks:?}"
    );
    // The perf map says no time: a sample taken before the change but
    // walked after the recorder saw it takes the new name (samples are
    // walked 10 ms after they are taken at the least, and up to the next
    // drain of the kernel ring, 30 to 100 ms here); one taken after it,
    // the new name always (the map is looked at again before a sample
    // newer than the last look is walked).
    let (mapped, mapped_again) = (
        leaf(main, "perf_mapped_loop"),
        leaf(main, "perf_mapped_again"),
    );
    let (late_mapped, late_mapped_again) = (
        leaf("again", "perf_mapped_loop"),
        leaf("again", "perf_mapped_again"),
    );
    assert!(mapped >= 150, "{mapped}: {stacks:?}");
    assert!(
        mapped_again * 4 <= mapped + mapped_again,
        "{mapped_again} of the main thread's named perf_mapped_again: {stacks:?}"
    );
    assert!(
        late_mapped * 1000 <= late_mapped + late_mapped_again,
        "{late_mapped} of the thread again's named perf_mapped_loop: {stacks:?}"
    );
}
