//! The unwinder against gdb: C fixtures built with `-O2
//! -fomit-frame-pointer -Wa,--gsframe` are stopped at known points under
//! gdb, which records the registers, the stack from rsp and its own
//! backtrace. The unwinder walks the same stack copy (as perf delivers it,
//! with no other memory) by SFrame alone, by converted `.eh_frame` alone,
//! and by both; the return addresses must agree with gdb's frame for frame.

mod support;

use ichnos_code::memory::NoMemory;
use ichnos_code::{
    unwind, unwind_cached, FindRow, FrameKind, Lookup, Regs, StopReason, UnwindCache, UnwindOptions,
};
use support::{
    build_prog_with, build_signal_prog, capture, capture_passing, code_map, newer_binutils,
    sframe_version, Rules, Stop,
};

fn walk(stop: &Stop, rules: &impl FindRow, fp_fallback: bool) -> (Vec<u64>, StopReason) {
    let (frames, why) = walk_frames(stop, rules, fp_fallback);
    (frames.iter().map(|f| f.ip).collect(), why)
}

fn walk_frames(
    stop: &Stop,
    rules: &impl FindRow,
    fp_fallback: bool,
) -> (Vec<ichnos_code::Frame>, StopReason) {
    let regs = Regs {
        ip: stop.rip,
        sp: stop.rsp,
        fp: stop.rbp,
        bx: Some(stop.rbx),
    };
    let options = UnwindOptions {
        max_frames: 128,
        frame_pointer_fallback: fp_fallback,
    };
    let w = unwind(rules, regs, &stop.stack, &mut NoMemory, &options);
    (w.frames, w.stop)
}

fn describe(stop: &Stop) -> String {
    let frames: Vec<String> = stop
        .frames
        .iter()
        .map(|(pc, name)| format!("{pc:#x} {name}"))
        .collect();
    format!("{}: gdb says [{}]", stop.label, frames.join(", "))
}

/// The stops, and the directory holding the fixtures they name (keep it
/// alive while reading their files).
fn stops() -> (tempfile::TempDir, Vec<Stop>) {
    stops_built_with(&[])
}

/// A gdb breakpoint at the instruction after `with_alloca`'s `leave`
/// in `prog` (found by objdump): there `rbp` has been popped, and the
/// unwind rows still say it is saved at CFA-16, below the stack pointer,
/// outside the stack copy.
fn after_leave(prog: &std::path::Path) -> String {
    let out = std::process::Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(prog)
        .output()
        .expect("objdump (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let body: Vec<&str> = text
        .split("\n\n")
        .find(|block| block.contains("<with_alloca>:"))
        .expect("with_alloca in the disassembly")
        .lines()
        .collect();
    let address = |line: &str| -> u64 {
        let hex = line.trim().split(':').next().unwrap();
        u64::from_str_radix(hex.trim(), 16).unwrap()
    };
    let start = body
        .iter()
        .find(|l| l.contains("<with_alloca>:"))
        .map(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap())
        .unwrap();
    let leave = body
        .iter()
        .position(|l| l.split_whitespace().nth(1) == Some("leave"))
        .expect("with_alloca ends its rbp-based frame with leave");
    format!("*with_alloca+{}", address(body[leave + 1]) - start)
}

/// `stops`, of the fixtures built with `extra` gcc flags.
fn stops_built_with(extra: &[&str]) -> (tempfile::TempDir, Vec<Stop>) {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_prog_with(dir.path(), extra);
    let epilogue = after_leave(&prog);
    let stops = capture(
        &prog,
        &[
            "lib_inner",
            "*'lib_call@plt'",
            "*'lib_call@plt'+11",
            "*'lib_inner@plt'",
            &epilogue,
            // Lazy binding, the first call through each PLT entry: the
            // dynamic loader's trampoline keeps its CFA in rbx, which
            // `_dl_fixup` saves before it calls the symbol lookup.
            "_dl_fixup",
            "_dl_lookup_symbol_x",
        ],
    );
    // Not vacuous: every planned stop happened.
    let labels: Vec<&str> = stops.iter().map(|s| s.label.as_str()).collect();
    for want in [
        ":main",
        ":lib_call@plt",
        ":lib_inner@plt",
        ":lib_inner",
        ":leaf",
        ":with_alloca",
        ":_dl_fixup",
        ":_dl_lookup_symbol_x",
    ] {
        assert!(
            labels.iter().any(|l| l.ends_with(want)),
            "no stop at {want}: {labels:?}"
        );
    }
    assert!(
        labels
            .iter()
            .filter(|l| l.ends_with(":lib_call@plt"))
            .count()
            == 2
    );
    (dir, stops)
}

#[test]
fn eh_frame_alone_agrees_with_gdb_to_the_outermost_frame() {
    let (_dir, stops) = stops();
    for stop in stops {
        let map = code_map(&stop.maps, Rules::EhFrameOnly);
        let (ours, why) = walk(&stop, &map, false);
        let gdb: Vec<u64> = stop.frames.iter().map(|f| f.0).collect();
        assert_eq!(ours, gdb, "{}", describe(&stop));
        assert_eq!(why, StopReason::Outermost, "{}", describe(&stop));
    }
}

#[test]
fn sframe_alone_agrees_with_gdb_while_sframe_covers_the_frames() {
    let (_dir, stops) = stops();
    sframe_alone_agrees_with_gdb(stops);
}

/// SFrame v2 as binutils 2.44 (Debian trixie's) writes it, assembled and
/// linked by that binutils.
#[test]
fn sframe_v2_of_binutils_2_44_alone_agrees_with_gdb() {
    newer_binutils_sframe_agrees_with_gdb("trixie", 2);
}

/// SFrame v3 (function starts PC-relative) as Debian sid's binutils
/// writes it (2.47.50 on 2026-12-02; sid moves on).
#[test]
fn sframe_v3_of_sids_binutils_alone_agrees_with_gdb() {
    newer_binutils_sframe_agrees_with_gdb("sid", 3);
}

/// The fixtures built by `suite`'s binutils have SFrame `version`, and
/// their walks by it agree with gdb.
fn newer_binutils_sframe_agrees_with_gdb(suite: &str, version: u8) {
    let bin = newer_binutils(suite);
    let (dir, stops) = stops_built_with(&[&format!("-B{}/", bin.display())]);
    for object in ["prog", "libfix.so"] {
        assert_eq!(
            sframe_version(&dir.path().join(object)),
            version,
            "{object}"
        );
    }
    sframe_alone_agrees_with_gdb(stops);
}

/// Walking each stop by SFrame rows alone gives gdb's frames up to and
/// including the first one in an object without SFrame (libc, here),
/// and stops there for want of rows; the deepest of those walks goes
/// through every fixture function.
fn sframe_alone_agrees_with_gdb(stops: Vec<Stop>) {
    let mut deepest = 0;
    for stop in stops {
        let map = code_map(&stop.maps, Rules::SframeOnly);
        let (ours, why) = walk(&stop, &map, false);
        let gdb: Vec<u64> = stop.frames.iter().map(|f| f.0).collect();
        let first_uncovered = gdb
            .iter()
            .enumerate()
            .position(|(i, &pc)| {
                let lookup = if i == 0 { pc } else { pc - 1 };
                map.find_row(lookup) == Lookup::NoCode
            })
            .expect("libc frames have no SFrame");
        assert_eq!(ours, gdb[..=first_uncovered], "{}", describe(&stop));
        let pc = gdb[first_uncovered] - u64::from(first_uncovered > 0);
        assert_eq!(why, StopReason::NoUnwindInfo { pc }, "{}", describe(&stop));
        deepest = deepest.max(first_uncovered);
    }
    // leaf, big_frame, with_alloca, recurse x4, callback, lib_inner,
    // lib_call, main: all unwound through SFrame rows.
    assert!(deepest >= 10, "deepest SFrame walk was {deepest} frames");
}

#[test]
fn sframe_then_eh_frame_agrees_with_gdb_everywhere() {
    let (_dir, stops) = stops();
    for stop in stops {
        let map = code_map(&stop.maps, Rules::Preferred);
        let (ours, why) = walk(&stop, &map, true);
        let gdb: Vec<u64> = stop.frames.iter().map(|f| f.0).collect();
        assert_eq!(ours, gdb, "{}", describe(&stop));
        assert_eq!(why, StopReason::Outermost);
    }
}

/// The stops of the signal fixture: in a handler for an asynchronous
/// SIGALRM that interrupted a busy loop (called from a function whose CFA
/// is a DWARF expression reading memory), and in a handler for the SIGILL
/// of a `ud2` at a function's first instruction.
fn signal_stops() -> (tempfile::TempDir, Vec<Stop>) {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_signal_prog(dir.path());
    let stops: Vec<Stop> = capture_passing(&prog, &[], &["SIGALRM", "SIGILL"])
        .into_iter()
        .filter(|s| s.label.ends_with(":handler_leaf"))
        .collect();
    let names = |s: &Stop| -> Vec<String> { s.frames.iter().map(|f| f.1.clone()).collect() };
    assert_eq!(stops.len(), 2, "two handler stops: {stops:?}");
    // Not vacuous: gdb sees the trampoline and the interrupted functions.
    let alarm = names(&stops[0]);
    assert!(
        alarm
            .windows(3)
            .any(|w| w == ["__restore_rt", "spin", "realigned"]),
        "{alarm:?}"
    );
    let ill = names(&stops[1]);
    assert!(
        ill.windows(2)
            .any(|w| w == ["__restore_rt", "faults_at_entry"]),
        "{ill:?}"
    );
    (dir, stops)
}

#[test]
fn a_signal_frame_unwinds_through_the_trampolines_cfi_as_gdb_does() {
    let (_dir, stops) = signal_stops();
    for rules in [Rules::EhFrameOnly, Rules::Preferred] {
        for stop in &stops {
            let map = code_map(&stop.maps, rules);
            // No frame-pointer fallback: every frame is found by rows or CFI.
            let (frames, why) = walk_frames(stop, &map, false);
            let ours: Vec<u64> = frames.iter().map(|f| f.ip).collect();
            let gdb: Vec<u64> = stop.frames.iter().map(|f| f.0).collect();
            assert_eq!(ours, gdb, "{rules:?} {}", describe(stop));
            assert_eq!(why, StopReason::Outermost, "{}", describe(stop));
            // The frame above the trampoline is the interrupted one, found
            // by evaluating __restore_rt's CFI (its CFA is read from memory).
            let tramp = stop
                .frames
                .iter()
                .position(|f| f.1 == "__restore_rt")
                .unwrap();
            assert_eq!(frames[tramp + 1].kind, FrameKind::Interrupted);
            // The caller of the realigned function is found by evaluating
            // its CFA expression ([rbp - 8]) and rbp's.
            if let Some(realigned) = stop.frames.iter().position(|f| f.1 == "realigned") {
                assert_eq!(
                    frames[realigned + 1].kind,
                    FrameKind::Cfi,
                    "{}",
                    describe(stop)
                );
            }
        }
    }
}

#[test]
fn the_cached_walk_agrees_through_signal_frames() {
    let (_dir, stops) = signal_stops();
    cached_walk_agrees_with_gdb(&stops);
}

#[test]
fn the_cached_walk_agrees_with_gdb_everywhere() {
    let (_dir, stops) = stops();
    cached_walk_agrees_with_gdb(&stops);
}

/// The cached walk (the recorder's) of each stop, twice, gives gdb's
/// frames.
fn cached_walk_agrees_with_gdb(stops: &[Stop]) {
    for stop in stops {
        let map = code_map(&stop.maps, Rules::Preferred);
        let regs = Regs {
            ip: stop.rip,
            sp: stop.rsp,
            fp: stop.rbp,
            bx: Some(stop.rbx),
        };
        let options = UnwindOptions {
            max_frames: 128,
            frame_pointer_fallback: false,
        };
        let mut cache = UnwindCache::new();
        let mut frames = Vec::new();
        let gdb: Vec<u64> = stop.frames.iter().map(|f| f.0).collect();
        // Twice: the second walk runs from the cache and its links.
        for _ in 0..2 {
            let why = unwind_cached(
                &map,
                regs,
                &stop.stack,
                &mut NoMemory,
                &options,
                &mut cache,
                &mut frames,
            );
            let ours: Vec<u64> = frames.iter().map(|f| f.ip).collect();
            assert_eq!(ours, gdb, "{}", describe(stop));
            assert_eq!(why, StopReason::Outermost);
        }
    }
}
