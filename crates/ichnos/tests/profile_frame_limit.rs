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

/// Samples taken in a signal handler: their stacks go through the
/// kernel's signal trampoline, named as the C library's symbol table
/// names it (`__restore_rt`, as `nm` lists it in glibc's debug file),
/// down to the function the signal interrupted and `main`. (The
/// trampoline was an address: the handler returns to its first byte,
/// and the byte before, which "minus one" looked up, is no function's.)
#[test]
fn stacks_through_a_signal_handler_name_the_trampoline() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "handler", &["-fomit-frame-pointer"]);
    let data = dir.path().join("h.data");
    let out = ichnos(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let in_handler: Vec<(Vec<String>, u64)> = folded(&data, &["--no-inline"])
        .into_iter()
        .filter(|(frames, _)| {
            frames.len() > 2
                && frames[frames.len() - 2] == "handler_work"
                && frames.last().unwrap() == "spin"
        })
        .collect();
    let samples: u64 = in_handler.iter().map(|(_, n)| n).sum();
    assert!(samples >= 100, "{samples} samples in the handler");
    // Innermost first: the handler, the trampoline, then where the signal
    // came (the C library's raise), interrupted_work and main.
    let through: u64 = in_handler
        .iter()
        .filter(|(frames, _)| {
            let inner: Vec<&str> = frames.iter().rev().map(String::as_str).collect();
            inner.starts_with(&["spin", "handler_work", "on_signal", "__restore_rt"])
                && inner[4..].contains(&"interrupted_work")
                && inner[4..].contains(&"main")
        })
        .map(|(_, n)| n)
        .sum();
    assert!(
        through * 100 >= samples * 99,
        "{through} of {samples}: {in_handler:?}"
    );
}
