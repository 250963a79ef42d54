//! Stacks deeper than the frame limit: cut there with a note that says
//! so, and whole under a higher `--max-frames`.

mod common;

use common::*;

/// The frames of each stack of `bottom`'s samples in `data`, and their
/// sample counts.
fn bottom_stacks(data: &std::path::Path) -> Vec<(Vec<String>, u64)> {
    folded(data, &[])
        .into_iter()
        .filter(|(frames, _)| frames.last().is_some_and(|f| f == "bottom"))
        .collect()
}

#[test]
fn stacks_past_the_frame_limit_are_noted_and_a_higher_limit_walks_them_whole() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "recursion", &["-fomit-frame-pointer"]);
    let exe = exe.to_str().unwrap();
    let data = dir.path().join("r.data");
    let data_arg = data.to_str().unwrap();
    // 400 calls of descend between main and bottom: 402 frames and more
    // (the C library's below main), past the default 256.
    let out = ichnos(&["record", "-o", data_arg, "--", exe, "400"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let stacks = bottom_stacks(&data);
    let samples: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert!(samples >= 200, "{samples} samples in bottom: {err}");
    let cut: u64 = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| f == "[incomplete stack]"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(cut, samples, "every stack of bottom is cut: {err}");
    // The note counts the recording's samples cut there, bottom's and
    // the few taken above it while the recursion was made.
    assert!(
        err.contains("reached the limit of 256 frames and were cut there: --max-frames N"),
        "{err}"
    );
    for (frames, _) in &stacks {
        let descents = frames.iter().filter(|f| *f == "descend").count();
        assert_eq!(descents, 255, "256 frames, bottom's the first: {frames:?}");
    }
    // A limit above the depth: every stack of bottom is whole, through
    // the 400 calls the fixture makes.
    let out = ichnos(&[
        "record",
        "--max-frames",
        "1000",
        "-o",
        data_arg,
        "--",
        exe,
        "400",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("reached the limit"), "{err}");
    let stacks = bottom_stacks(&data);
    assert!(!stacks.is_empty(), "{err}");
    for (frames, _) in &stacks {
        assert!(
            !frames.iter().any(|f| f == "[incomplete stack]"),
            "{frames:?}"
        );
        let descents = frames.iter().filter(|f| *f == "descend").count();
        assert_eq!(descents, 400, "{frames:?}");
        let main = frames.iter().position(|f| f == "main");
        assert_eq!(main, Some(frames.len() - 402), "{frames:?}");
    }
    // Out of bounds: a usage error.
    let out = ichnos(&["record", "--max-frames", "0", "--", exe]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("from 1 to 16384"), "{}", stderr(&out));
}
