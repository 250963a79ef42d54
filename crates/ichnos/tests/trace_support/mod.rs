//! What the function tracer's end-to-end tests share: running ichnos
//! on the fixtures built with `-finstrument-functions`, and reading its
//! replays and reports back.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// ichnos, started with the default actions of the signals that end a
/// program whatever this test was started with (a shell's `&` ignores
/// SIGINT, and ichnos keeps a command's ignored signals ignored): the
/// tests of Ctrl-C and of what a program finds need it.
pub fn ichnos() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ichnos"));
    default_endings(&mut command);
    command
}

/// Starts `command` with the default action of every signal that ends a
/// program whose action the runtime stands in for: a shell's `&` ignores
/// SIGINT and SIGQUIT, `nohup` SIGHUP (as CI runs the tests), and what a
/// program finds is compared with what it finds traced.
pub fn default_endings(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal is async-signal-safe, as the time between fork and
    // exec asks.
    unsafe {
        command.pre_exec(|| {
            for sig in [
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGPIPE,
                libc::SIGALRM,
                libc::SIGTERM,
                libc::SIGUSR1,
                libc::SIGUSR2,
                libc::SIGXCPU,
                libc::SIGXFSZ,
                libc::SIGVTALRM,
                libc::SIGPROF,
            ] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// Builds `fixtures/trace/NAME` with gcc (g++ for `.cc`) and
/// `-finstrument-functions`.
pub fn build(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let compiler = if Path::new(name).extension().is_some_and(|e| e == "cc") {
        "g++"
    } else {
        "gcc"
    };
    build_by(compiler, dir, name, extra)
}

/// The fixture `program` linked with the instrumented shared library
/// built from the fixture `library` (with `library_extra`, as
/// `lib<its stem>.so` in `dir`, found by the program's run path), with
/// `program_extra`: the program, and the library.
pub fn build_with_library(
    dir: &Path,
    library: &str,
    library_extra: &[&str],
    program: &str,
    program_extra: &[&str],
) -> (PathBuf, PathBuf) {
    let mut library_args = vec!["-shared", "-fPIC"];
    library_args.extend_from_slice(library_extra);
    let built = build(dir, library, &library_args);
    let linked = dir.join(format!(
        "lib{}.so",
        built.file_name().unwrap().to_str().unwrap()
    ));
    std::fs::rename(&built, &linked).unwrap();
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let mut program_args = vec!["-Wl,--no-as-needed", linked.to_str().unwrap(), &rpath];
    program_args.extend_from_slice(program_extra);
    (build(dir, program, &program_args), linked)
}

/// A fixture built by `compiler` (gcc, g++, clang, clang++).
pub fn build_by(compiler: &str, dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/trace")
        .join(name);
    let exe = dir.join(src.file_stem().unwrap());
    let status = Command::new(compiler)
        .args(["-O2", "-g", "-finstrument-functions"])
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} (Debian's {compiler} package): {e}"));
    assert!(status.success(), "{compiler} failed on {}", src.display());
    exe
}

/// `trace`, which must succeed; what it said on stderr.
pub fn traced(dir: &Path, data: &str, args: &[&str], command: &[&str]) -> String {
    let out = trace(dir, data, args, command);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// The replay's lines without their threads.
pub fn replayed_calls(dir: &Path, data: &str) -> Vec<String> {
    replay(dir, data, &[]).into_iter().map(|(_, f)| f).collect()
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ichnos trace -o DIR/DATA ARGS -- COMMAND`, whose processes all end
/// with their runtime's last word (none killed before it could hand
/// their threads' buffers over, as `trace` would note).
pub fn trace(dir: &Path, data: &str, args: &[&str], command: &[&str]) -> Output {
    let out = trace_cut_short(dir, data, args, command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains(CUT_SHORT),
        "a process was taken for cut short:\n{stderr}"
    );
    out
}

/// What `trace` notes of a process that ended before its runtime could
/// hand its threads' last buffers over.
pub const CUT_SHORT: &str = "ended before the tracing runtime handed over";

/// [`trace`], whatever its processes' ends.
pub fn trace_cut_short(dir: &Path, data: &str, args: &[&str], command: &[&str]) -> Output {
    ichnos()
        .arg("trace")
        .arg("-o")
        .arg(dir.join(data))
        .args(args)
        .arg("--")
        .args(command)
        .output()
        .unwrap()
}

/// Calls per function, from `report --trace`.
pub fn calls(dir: &Path, data: &str) -> HashMap<String, u64> {
    calls_and_lost(dir, data).0
}

/// Calls per function, and the events lost, from `report --trace` (its
/// first header line ends "...; 1 process, 1 thread; 4 lost").
pub fn calls_and_lost(dir: &Path, data: &str) -> (HashMap<String, u64>, u64) {
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(dir.join(data)));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut calls = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(2) {
        // total self calls avg max name: durations are "N.NNN us".
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(fields.len() >= 10, "{line}");
        let name = fields[9..].join(" ");
        calls.insert(name, fields[4].parse().unwrap());
    }
    let header = text.lines().next().unwrap_or_default();
    let lost = header
        .rsplit("; ")
        .next()
        .and_then(|last| last.strip_suffix(" lost"))
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no loss count in {header:?}"));
    (calls, lost)
}

/// The replay's function column for each line, with the thread id.
pub fn replay(dir: &Path, data: &str, extra: &[&str]) -> Vec<(u32, String)> {
    let out = run(ichnos()
        .arg("replay")
        .args(extra)
        .arg("-i")
        .arg(dir.join(data)));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# DURATION     TID     FUNCTION"));
    lines
        .map(|l| {
            let (head, function) = l.split_once(" | ").unwrap_or_else(|| panic!("{l}"));
            let tid = head
                .rsplit('[')
                .next()
                .unwrap()
                .trim_end_matches(']')
                .trim()
                .parse()
                .unwrap();
            (tid, function.to_owned())
        })
        .collect()
}

/// One call as a replay line says it: the thread, the depth, `leaf`,
/// `open` or `close`, the duration in nanoseconds and the precision the
/// line gives it to (0 where the line has none), the name.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub tid: u32,
    pub depth: usize,
    pub kind: String,
    pub ns: f64,
    pub precision: f64,
    pub name: String,
}

/// A duration as `ichnos replay` and `report --trace` print it, `value`
/// in `unit` (`ns`, `us`, `ms`, `s`), in nanoseconds.
pub fn duration_ns(value: &str, unit: &str) -> f64 {
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => panic!("unit {other}"),
    };
    value.parse::<f64>().unwrap() * scale
}

/// `ichnos replay`'s lines of calls (not probes or losses), parsed.
pub fn replay_lines(dir: &Path, data: &str) -> Vec<Line> {
    let out = run(ichnos().arg("replay").arg("-i").arg(dir.join(data)));
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip(1)
        .filter(|l| !l.ends_with(" */") || l.contains("} /* "))
        .map(|l| {
            let (head, text) = l.split_once(" | ").unwrap();
            let (duration, tid) = head.rsplit_once('[').unwrap();
            let tid = tid.trim_end_matches(']').trim().parse().unwrap();
            let (ns, precision) = match duration.split_whitespace().collect::<Vec<_>>()[..] {
                // Three decimals of the unit.
                [v, unit] => (duration_ns(v, unit), duration_ns("0.001", unit)),
                _ => (0.0, 0.0),
            };
            let depth = (text.len() - text.trim_start().len()) / 2;
            let text = text.trim_start();
            let (kind, name) = if let Some(name) = text.strip_suffix("();") {
                ("leaf", name)
            } else if let Some(name) = text.strip_suffix("() {") {
                ("open", name)
            } else {
                let name = text.strip_prefix("} /* ").unwrap().strip_suffix(" */");
                ("close", name.unwrap())
            };
            Line {
                tid,
                depth,
                kind: kind.to_owned(),
                ns,
                precision,
                name: name.to_owned(),
            }
        })
        .collect()
}

/// The Perfetto export read back by Perfetto's own protos (the `PyPI`
/// package `perfetto`; `.ci/run` installs it).
pub fn perfetto_lines(trace: &Path) -> Vec<Line> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/perfetto_slices.py");
    let out = run(Command::new("python3").arg(script).arg(trace));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, ' ').collect();
            Line {
                tid: f[0].parse().unwrap(),
                depth: f[1].parse().unwrap(),
                kind: f[2].to_owned(),
                ns: f[3].parse().unwrap(),
                precision: 0.0,
                name: f[4].to_owned(),
            }
        })
        .collect()
}

/// The first and the last event's timestamps in the Perfetto trace at
/// `trace`, read with Perfetto's own protos.
pub fn perfetto_span(trace: &Path) -> (u64, u64) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/perfetto_slices.py");
    let out = run(Command::new("python3").arg(script).arg(trace).arg("--span"));
    let text = String::from_utf8(out.stdout).unwrap();
    let (first, last) = text.trim().split_once(' ').unwrap();
    (first.parse().unwrap(), last.parse().unwrap())
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec.cast_unsigned() * 1_000_000_000 + ts.tv_nsec.cast_unsigned()
}

/// Runs ichnos with `args` and `-N nothing_so_named -i data`, which must
/// succeed and warn that the pattern hides nothing.
pub fn assert_warns_of_a_notrace_naming_nothing(args: &[&str], data: &Path) {
    let out = run(ichnos()
        .args(args)
        .args(["-N", "nothing_so_named", "-i"])
        .arg(data));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("warning: -N nothing_so_named: no function called in the trace is named so"),
        "{args:?}: {stderr}"
    );
}

/// Sends `signal` (a name `kill` takes) to process `pid`.
pub fn send(signal: &str, pid: u32) -> bool {
    Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap()
        .success()
}

/// A process killed when the test ends, however it ends, unless it is
/// known to be gone (`forget`: a pid reaped may be another's).
pub struct KilledAtEnd(pub u32);

impl Drop for KilledAtEnd {
    fn drop(&mut self) {
        send("KILL", self.0);
    }
}

/// Sends `recorder` SIGINT (Ctrl-C) and waits for it: its output, and the
/// time it took to end. It (and `reaped_by_it`, a process it reaps) is
/// killed if the test fails before it ends.
pub fn interrupt(
    recorder: std::process::Child,
    reaped_by_it: Option<u32>,
) -> (std::process::Output, Duration) {
    let unwaited = (KilledAtEnd(recorder.id()), reaped_by_it.map(KilledAtEnd));
    assert!(send("INT", recorder.id()));
    let asked = Instant::now();
    let out = recorder.wait_with_output().unwrap();
    std::mem::forget(unwaited);
    (out, asked.elapsed())
}

/// Spawns `command` (a recorder, whose traced program prints its pid
/// first) with its standard output and error piped: the recorder, and the
/// pid the program printed.
pub fn spawn_reading_pid(command: &mut Command) -> (std::process::Child, u32) {
    let mut recorder = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(recorder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    (recorder, pid)
}
