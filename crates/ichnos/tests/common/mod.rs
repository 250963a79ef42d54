//! What the profiler's end-to-end tests share: running ichnos, building
//! the C fixtures, reading reports and `perf report`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const ICHNOS: &str = env!("CARGO_BIN_EXE_ichnos");

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/profile")
        .join(name)
}

/// The build id `readelf -n` shows for the file at `path`.
pub fn build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .args(["-n"])
        .arg(path)
        .output()
        .expect("readelf runs (install binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .expect("a build id")
}

pub fn gcc(args: &[&str]) {
    let out = Command::new("gcc").args(args).output().expect("gcc runs");
    assert!(
        out.status.success(),
        "gcc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How `chains` is built.
#[derive(Clone, Copy, Debug)]
pub enum Build {
    /// One executable, with SFrame.
    Sframe,
    /// One executable, `.eh_frame` only.
    EhFrame,
    /// The leaves in a shared library of ours, called through the PLT.
    SharedLibrary,
}

/// Builds the one-file fixture `name` (`NAME.c`) into `dir` with `-O2`
/// and `flags`; the executable's path.
pub fn build_fixture(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let src = fixture(&format!("{name}.c"));
    let mut args = vec!["-O2"];
    args.extend_from_slice(flags);
    args.extend(["-o", exe.to_str().unwrap(), src.to_str().unwrap()]);
    gcc(&args);
    exe
}

/// Builds `chains` as `build` says in `dir`.
pub fn build_chains(dir: &Path, build: Build) -> PathBuf {
    let flags = ["-O2", "-g", "-fomit-frame-pointer"];
    let exe = dir.join("chains");
    let chains = fixture("chains.c");
    let leaves = fixture("leaves.c");
    let (chains, leaves) = (chains.to_str().unwrap(), leaves.to_str().unwrap());
    let out = exe.to_str().unwrap();
    match build {
        Build::Sframe => gcc(&[&flags[..], &["-Wa,--gsframe", "-o", out, chains, leaves]].concat()),
        Build::EhFrame => gcc(&[&flags[..], &["-o", out, chains, leaves]].concat()),
        Build::SharedLibrary => {
            let lib = dir.join("libleaves.so");
            gcc(&[
                &flags[..],
                &[
                    "-Wa,--gsframe",
                    "-fPIC",
                    "-shared",
                    "-o",
                    lib.to_str().unwrap(),
                    leaves,
                ],
            ]
            .concat());
            let rpath = format!("-Wl,-rpath,{}", dir.display());
            let libdir = format!("-L{}", dir.display());
            gcc(&[
                &flags[..],
                &[
                    "-Wa,--gsframe",
                    "-o",
                    out,
                    chains,
                    &libdir,
                    "-lleaves",
                    &rpath,
                ],
            ]
            .concat());
        }
    }
    exe
}

pub fn ichnos(args: &[&str]) -> Output {
    Command::new(ICHNOS)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ichnos")
}

/// A program's standard output.
pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `out`, checked to be a success of `what`.
pub fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `go tool pprof ARGS FILE` (Debian's golang-go): its standard output.
pub fn go_pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .expect("go tool pprof runs (Debian's golang-go)");
    text(&ok(out, &format!("go tool pprof {args:?}")))
}

/// Runs Python with `script`; its standard output.
pub fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    text(&ok(out, "python3"))
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Records `command` into `data` at `hz`; the recorder's output.
pub fn record(data: &Path, hz: u32, command: &[&str]) -> Output {
    let hz = hz.to_string();
    let mut args = vec!["record", "-F", &hz, "-o", data.to_str().unwrap(), "--"];
    args.extend_from_slice(command);
    let out = ichnos(&args);
    assert!(out.status.success(), "ichnos record: {}", stderr(&out));
    out
}

/// The folded stacks of a report with `extra` flags: frames root first
/// (the thread's name first) and the sample count.
pub fn folded(data: &Path, extra: &[&str]) -> Vec<(Vec<String>, u64)> {
    let mut args = vec!["report", "-i", data.to_str().unwrap(), "--format", "folded"];
    args.extend_from_slice(extra);
    let out = ichnos(&args);
    assert!(out.status.success(), "ichnos report: {}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            (
                stack.split(';').map(str::to_owned).collect(),
                count.parse().unwrap(),
            )
        })
        .collect()
}

/// The self share (percent) of each function in the top table, inlined
/// functions counted as their callers' (as perf counts them).
pub fn self_shares(data: &Path) -> HashMap<String, f64> {
    self_shares_of(data, &[])
}

/// `self_shares` of a report with `extra` flags (a filter such as
/// `--comm`), the shares being of what the filter keeps.
pub fn self_shares_of(data: &Path, extra: &[&str]) -> HashMap<String, f64> {
    let mut args = vec![
        "report",
        "-i",
        data.to_str().unwrap(),
        "--limit",
        "0",
        "--no-inline",
    ];
    args.extend_from_slice(extra);
    let out = ichnos(&args);
    assert!(out.status.success(), "ichnos report: {}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("SELF%"))
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let share: f64 = fields[0].trim_end_matches('%').parse().unwrap();
            (fields[4].to_owned(), share)
        })
        .collect()
}

pub const CHAINS_FUNCTIONS: [&str; 6] = [
    "main",
    "run",
    "stage_a",
    "stage_b",
    "leaf_heavy",
    "leaf_light",
];

/// Of the samples whose leaf is one of `own`: how many, how many reach
/// `root` unbroken, and the stacks of the rest.
pub fn completeness<'s>(
    stacks: &'s [(Vec<String>, u64)],
    own: &[&str],
    root: &str,
) -> (u64, u64, Vec<&'s (Vec<String>, u64)>) {
    let mut total = 0;
    let mut complete = 0;
    let mut broken = Vec::new();
    for stack in stacks {
        let (frames, count) = stack;
        let leaf = frames.last().unwrap();
        if !own.contains(&leaf.as_str()) && leaf != "unit" {
            continue;
        }
        total += count;
        if !frames.iter().any(|f| f == "[incomplete stack]") && frames.iter().any(|f| f == root) {
            complete += count;
        } else {
            broken.push(stack);
        }
    }
    (total, complete, broken)
}

/// Asserts that each of the chains fixture's leaves has in `ours` (ichnos
/// report's self shares) the share `theirs` (perf report's) gives it,
/// within 3 points, and that `leaf_heavy` has about its 60% (so that the
/// agreement is not of empty tables).
pub fn assert_chains_shares_agree(ours: &HashMap<String, f64>, theirs: &HashMap<String, f64>) {
    for function in ["leaf_heavy", "leaf_light", "unit"] {
        let (a, b) = (ours[function], theirs[function]);
        assert!(
            (a - b).abs() <= 3.0,
            "{function}: ichnos {a:.2}%, perf {b:.2}% (ours {ours:?}, perf {theirs:?})"
        );
    }
    assert!((ours["leaf_heavy"] - 60.0).abs() < 10.0, "{ours:?}");
}

/// `perf report`'s self share of each symbol.
pub fn perf_shares(data: &Path) -> HashMap<String, f64> {
    let out = Command::new("perf")
        .args([
            "report",
            "-i",
            data.to_str().unwrap(),
            "--stdio",
            "--no-children",
        ])
        .args(["--sort", "symbol", "--percent-limit", "0", "-g", "none"])
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf report: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('%'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let share: f64 = fields.first()?.trim_end_matches('%').parse().ok()?;
            // "12.34%  [.] name"
            let name = fields.get(2)?;
            Some(((*name).to_owned(), share))
        })
        .collect()
}

/// Runs `ichnos args`, expecting the user-error exit status 1 and an
/// error message holding every one of `wanted`.
pub fn fails_with(args: &[&str], wanted: &[&str]) -> String {
    let out = ichnos(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    for w in wanted {
        assert!(err.contains(w), "{args:?}: {err:?} lacks {w:?}");
    }
    err
}

/// Records `command` with `perf record -e cpu-clock -F hz` and `graph`
/// (`dwarf` or `fp`) into `data`.
pub fn perf_record(data: &Path, hz: u32, graph: &str, command: &[&str]) {
    let out = Command::new("perf")
        .args(perf_record_command(data, "cpu-clock", hz, graph, command))
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
}

/// The arguments after `perf` of a `perf record` of `event` as
/// `perf_record` runs it, for running it under another command.
pub fn perf_record_command(
    data: &Path,
    event: &str,
    hz: u32,
    graph: &str,
    command: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = ["record", "-q", "-e", event, "-F", &hz.to_string()]
        .into_iter()
        .map(str::to_owned)
        .collect();
    args.extend(["--call-graph", graph, "-o"].map(str::to_owned));
    args.push(data.to_str().unwrap().to_owned());
    args.push("--".to_owned());
    args.extend(command.iter().map(|&a| a.to_owned()));
    args
}

/// Asserts that the `chains` fixture's folded `stacks` (as `folded`
/// gives them, `--no-inline`) hold at least 1000 of its samples, 99.9% of
/// them complete through `main`, and each leaf's whole chain from `main`;
/// `label` names the recording in failures.
pub fn assert_chains_complete(stacks: &[(Vec<String>, u64)], label: &str) {
    let (total, complete, broken) = completeness(stacks, &CHAINS_FUNCTIONS, "main");
    assert!(
        total >= 1000,
        "{label}: only {total} samples in the fixture"
    );
    assert!(
        complete * 1000 >= total * 999,
        "{label}: {complete} of {total} complete; the rest: {broken:?}"
    );
    // The chains themselves, from the thread's start to each leaf.
    for leaf in ["leaf_heavy", "leaf_light", "unit"] {
        let want = ["main", "run", "stage_a", "stage_b", leaf];
        assert!(
            stacks
                .iter()
                .any(|(f, _)| f.len() >= 5 && f[f.len() - 5..] == want),
            "{label}: no chain {want:?}: {stacks:?}"
        );
    }
}

/// gdb's backtrace where `command` first reaches `breakpoint`, innermost
/// first: the functions' names.
pub fn gdb_backtrace(breakpoint: &str, command: &[&std::ffi::OsStr]) -> Vec<String> {
    let out = Command::new("gdb")
        .args(["-batch", "-nx", "-ex", "set pagination off", "-ex"])
        .arg(format!("break {breakpoint}"))
        .args(["-ex", "run", "-ex", "bt", "--args"])
        .args(command)
        .output()
        .expect("gdb runs");
    assert!(out.status.success(), "gdb: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            // "#1  0x... in jit_hot ()" or "#0  spin () at ..."
            let l = l.split_once(" in ").map_or(l, |(_, rest)| rest);
            let l = l.trim_start_matches(|c: char| c == '#' || c.is_ascii_digit() || c == ' ');
            l.split_whitespace().next().unwrap().to_owned()
        })
        .filter(|name| name != "??")
        .collect()
}

/// The processes a recording holds (their pids).
pub fn pids(data: &Path) -> Vec<u64> {
    let file = std::fs::File::open(data).unwrap();
    let mut reader = ichnos_data::Reader::new(std::io::BufReader::new(file)).unwrap();
    let mut pids = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            if let ichnos_data::Record::Process { pid, .. } = record.unwrap() {
                pids.push(pid);
            }
        }
    }
    pids
}
