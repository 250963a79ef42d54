//! `ichnos record --off-cpu`: where threads wait, checked against what
//! the kernel's clocks say of the fixture's own threads, and shown in
//! every report and export as their readers read them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod common;

use common::{build_fixture, go_pprof, ichnos, ok, python, stderr, text};

/// One test at a time: each measures a fixture's waits against its own
/// clocks, and one records the whole machine, where the others' fixtures
/// would be load of its own.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A recording of the napper fixture with off-CPU time: the directory,
/// the recording, what the fixture printed and what the recorder said.
struct Napped {
    _dir: tempfile::TempDir,
    data: PathBuf,
    /// The fixture's main thread by its own clocks: CPU and wall seconds,
    /// and the seconds it spent inside nanosleep.
    cpu: f64,
    wall: f64,
    slept: f64,
    /// The fixture's process.
    pid: u32,
    recorder: String,
    /// Time the hypervisor gave our CPUs to others while the recording
    /// ran (jiffies of all CPUs, from /proc/stat): the sampling clock
    /// misses it, the fixture's wall clock does not.
    stolen: u64,
}

impl Napped {
    /// A recording in `data` (under `dir`): what the napper printed (on
    /// `napper`'s stdout), what the recorder said (on `recorder`'s
    /// stderr), and the stolen time since `stolen_before`.
    fn new(
        dir: tempfile::TempDir,
        data: PathBuf,
        napper: &std::process::Output,
        recorder: &std::process::Output,
        stolen_before: u64,
    ) -> Napped {
        let (pid, cpu, wall, slept) = said(&text(napper));
        Napped {
            _dir: dir,
            data,
            cpu,
            wall,
            slept,
            pid,
            recorder: stderr(recorder),
            stolen: stolen().saturating_sub(stolen_before),
        }
    }
}

/// What the napper printed: "main thread: pid P cpu C s wall W s napped
/// N s".
fn said(out: &str) -> (u32, f64, f64, f64) {
    let words: Vec<&str> = out.split_whitespace().collect();
    let at = |w: &str| -> &str {
        let i = words
            .iter()
            .position(|x| *x == w)
            .unwrap_or_else(|| panic!("{out}"));
        words[i + 1]
    };
    (
        at("pid").parse().unwrap(),
        at("cpu").parse().unwrap(),
        at("wall").parse().unwrap(),
        at("napped").parse().unwrap(),
    )
}

/// The machine's stolen time so far: the eighth figure of /proc/stat's
/// `cpu` line, in jiffies of all CPUs (0 where it is not kept).
fn stolen() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().next()?.split_whitespace().nth(8)?.parse().ok())
        .unwrap_or(0)
}

fn build_napper(dir: &Path) -> PathBuf {
    // No frame pointers: the stacks off the CPU are unwound by SFrame.
    build_fixture(
        dir,
        "napper",
        &["-fomit-frame-pointer", "-Wa,--gsframe", "-pthread"],
    )
}

/// Records the napper (60 rounds of 5 ms of work and 5 ms of sleep) with
/// `env` set for the recorder.
fn nap(env: &[(&str, &str)]) -> Napped {
    nap_with(&[], env)
}

/// Records the napper as [`nap`] does, with `first` before its arguments.
fn nap_with(first: &[&str], env: &[(&str, &str)]) -> Napped {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_napper(dir.path());
    let data = dir.path().join("nap.data");
    let stolen_before = stolen();
    let out = Command::new(common::ICHNOS)
        .args(["record", "--off-cpu", "-o", data.to_str().unwrap(), "--"])
        .arg(&exe)
        .args(first)
        .args(["60", "5", "5"])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = ok(out, "ichnos record --off-cpu");
    Napped::new(dir, data, &out, &out, stolen_before)
}

fn napped() -> &'static Napped {
    static NAPPED: OnceLock<Napped> = OnceLock::new();
    NAPPED.get_or_init(|| within(2.0, || nap(&[])))
}

/// The folded stacks (root first, the thread's name first) and counts.
fn folded(data: &Path) -> Vec<(Vec<String>, u64)> {
    common::folded(data, &[])
}

fn is_off(stack: &[String]) -> bool {
    stack
        .last()
        .is_some_and(|f| f == "[waiting]" || f == "[preempted]")
}

/// The event the header line says off-CPU time came through.
fn off_cpu_event(data: &Path) -> String {
    let out = ok(
        ichnos(&["report", "-i", data.to_str().unwrap()]),
        "ichnos report",
    );
    let top = text(&out);
    let line = top
        .lines()
        .find(|l| l.starts_with("# off CPU: "))
        .unwrap_or_else(|| panic!("no off-CPU line:\n{top}"));
    let after = line.split(" through ").nth(1).unwrap();
    after.split_whitespace().next().unwrap().to_owned()
}

/// Recordings made for one share check, at most: the truth is the
/// fixture's wall clock, which a host that stops this machine's CPUs
/// moves on while the sampling clock's timer skips the periods it missed
/// (CI runs had all three checks 5 to 8 points off, our share too high,
/// with 20 to 160 jiffies stolen per recording; the recorder now weighs
/// a late sample by the periods its thread ran, and the noise that is
/// left is what the retries are for). Each recording that misses is
/// printed with what it measured, the recorder's summary and the
/// machine's stolen time, and the check fails if every one does.
const ATTEMPTS: usize = 3;

/// A recording by `record` whose main thread's waiting share is its
/// clocks' within `points`, then checked for where it waits.
fn within(points: f64, record: impl Fn() -> Napped) -> Napped {
    let mut misses = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let n = record();
        match share_miss(&n, points) {
            None => {
                check_waits(&n);
                return n;
            }
            Some(miss) => {
                // Past the test harness's capture (which keeps a passing
                // test's output to itself): a miss that a later attempt
                // makes up for is still in the log.
                let _ = writeln!(
                    std::io::stderr(),
                    "off-CPU share, attempt {attempt} of {ATTEMPTS}: {miss}"
                );
                misses.push(miss);
            }
        }
    }
    panic!(
        "the waiting share missed its clocks by more than {points} points in every one \
         of {ATTEMPTS} recordings:\n{}",
        misses.join("\n")
    );
}

/// Why the main thread's off-CPU share is not its clocks' within
/// `points`, with what was measured; `None` if it is.
fn share_miss(n: &Napped, points: f64) -> Option<String> {
    // The truth: the time the thread spent inside nanosleep, by the
    // monotonic clock around each call, over its wall time. (One minus
    // its CPU time over wall time would count time a hypervisor stole
    // from a running thread as waiting; the thread's clock does not run
    // then, ours does.)
    let truth = 100.0 * n.slept / n.wall;
    // The fixture sleeps about half its time (more when the machine is
    // busy: its work is 5 ms of wall time, and its share of a contended
    // CPU is less).
    assert!((10.0..90.0).contains(&truth), "truth {truth}");
    assert!(
        n.cpu > 0.0 && n.cpu < n.wall,
        "cpu {} wall {}",
        n.cpu,
        n.wall
    );
    // Ours: of all the main thread's samples (on the CPU, preempted and
    // waiting; the main thread's id is its process's), those waiting.
    let pid = n.pid.to_string();
    let stacks = common::folded(&n.data, &["--tid", &pid]);
    let mut by_leaf = [0u64; 3];
    for (stack, count) in &stacks {
        let leaf = match stack.last().map(String::as_str) {
            Some("[waiting]") => 2,
            Some("[preempted]") => 1,
            _ => 0,
        };
        by_leaf[leaf] += count;
    }
    let [running, preempted, waiting] = by_leaf;
    let all = running + preempted + waiting;
    let ours = 100.0 * waiting as f64 / all.max(1) as f64;
    ((ours - truth).abs() > points).then(|| {
        format!(
            "waiting share {ours:.2}% against {truth:.2}% by the thread's clocks \
             (samples: {running} running, {preempted} preempted, {waiting} waiting; \
             the thread's clocks: cpu {:.3} s, wall {:.3} s, napped {:.3} s; \
             {} jiffies stolen from the machine meanwhile); the recorder said:\n{}",
            n.cpu, n.wall, n.slept, n.stolen, n.recorder
        )
    })
}

/// The waits are where the fixture waits, with complete stacks.
fn check_waits(n: &Napped) {
    let pid = n.pid.to_string();
    let stacks = common::folded(&n.data, &["--pid", &pid]);
    // Where it waits: in nap's nanosleep, and the second thread on its
    // condition variable, complete down to _start and clone.
    let waits = |through: &str| -> u64 {
        stacks
            .iter()
            .filter(|(s, _)| is_off(s) && s.iter().any(|f| f == through))
            .map(|(_, c)| c)
            .sum()
    };
    assert!(waits("nap") > 0, "{stacks:?}");
    let waiter = waits("waiter");
    let all_waiter: u64 = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "waiter"))
        .map(|(_, c)| c)
        .sum();
    // The waiter waits the whole run: nearly all of its time is off (an
    // attached recorder sees it from its first switch on: maybe never).
    assert!(waiter * 100 >= all_waiter * 95, "{waiter} of {all_waiter}");
    // Complete: down to _start or to the thread's start. A thread can
    // be preempted in its first instructions, back from clone3 on a new
    // stack and not yet where its unwind rows say it is the outermost
    // frame: at most 1% of the time off.
    let off: Vec<&(Vec<String>, u64)> = stacks.iter().filter(|(s, _)| is_off(s)).collect();
    let whole: u64 = off.iter().map(|(_, c)| c).sum();
    // A wait whose switch sample was lost (its switch record came
    // through) has no frames: the thread, the mark of a stack that is not
    // complete, the wait; its time is counted, its place is not known,
    // and it is no stack that stopped short.
    let lost = |s: &[String]| s.len() == 3 && s[1] == "[incomplete stack]";
    let broken: Vec<&&(Vec<String>, u64)> = off
        .iter()
        .filter(|(s, _)| !lost(s))
        .filter(|(s, _)| !s.get(1).is_some_and(|f| f == "_start" || f == "clone3"))
        .collect();
    let broken_count: u64 = broken.iter().map(|(_, c)| c).sum();
    assert!(
        broken_count * 100 <= whole,
        "off-CPU stacks that do not reach their thread's start: {broken:?}"
    );
}

#[test]
fn off_cpu_share_of_a_napping_thread_is_its_own_clocks_within_two_points() {
    let _serial = serial();
    let n = napped();
    assert!(n.recorder.contains("intervals off CPU"), "{}", n.recorder);
    // The tracepoint where tracefs shows it, as the header says.
    let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|d| Path::new(d).join("events/sched/sched_switch/id").exists());
    let expected = if tracefs {
        "sched:sched_switch"
    } else {
        "context-switches"
    };
    assert_eq!(off_cpu_event(&n.data), expected);
}

/// A thread other than the main one that executes a program takes its
/// process's id, which the old main thread has just left by exiting:
/// the new program's waits are its own, not the last switch of a
/// thread that exited.
#[test]
fn a_program_executed_by_a_second_thread_is_seen_waiting() {
    let _serial = serial();
    within(2.0, || nap_with(&["thread-exec"], &[]));
}

#[test]
fn without_tracefs_the_software_switch_event_records_the_same_waits() {
    let _serial = serial();
    let n = within(2.0, || nap(&[("ICHNOS_TRACEFS", "/nonexistent")]));
    assert!(
        n.recorder.contains("software event context-switches"),
        "{}",
        n.recorder
    );
    assert_eq!(off_cpu_event(&n.data), "context-switches");
}

/// Waits (10 seconds at most) until process `pid` holds a perf event
/// for each online CPU.
fn perf_events_opened(pid: u32) {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let events = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |fds| {
            fds.filter_map(Result::ok)
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter(|link| link.to_string_lossy().contains("perf_event"))
                .count()
        });
        if events >= cpus {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The whole machine recorded while the napper runs (160 rounds).
fn whole_machine() -> Napped {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_napper(dir.path());
    let data = dir.path().join("all.data");
    let stolen_before = stolen();
    let recorder = Command::new(common::ICHNOS)
        .args(["record", "-a", "--off-cpu", "-o", data.to_str().unwrap()])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its events open on every CPU first (a recorder starting slowly, as
    // on a machine fresh from its build, missed the quick thread's 20 ms
    // whole), then time to enable them.
    perf_events_opened(recorder.id());
    std::thread::sleep(Duration::from_millis(700));
    let napper = ok(
        // 1.6 s of 5 ms spins and 5 ms naps: about 800 samples on the
        // CPU, so that sampling noise (about 0.9 points) stays well
        // inside the 2 allowed (40 rounds, 200 samples, failed by 0.02).
        Command::new(&exe).args(["160", "5", "5"]).output().unwrap(),
        "napper",
    );
    // Threads that exited are not waiting while the recording goes on.
    std::thread::sleep(Duration::from_millis(500));
    assert!(Command::new("kill")
        .args(["-INT", &recorder.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = ok(recorder.wait_with_output().unwrap(), "ichnos record -a");
    Napped::new(dir, data, &napper, &out, stolen_before)
}

#[test]
fn the_whole_machine_records_waits_and_no_kernel_thread_as_lost() {
    let _serial = serial();
    let n = within(2.0, whole_machine);
    // Kernel threads, sampled in the kernel (the idle task is not), are
    // left out, not lost: what a busy machine loses is its full rings.
    assert!(
        n.recorder
            .contains("samples taken in the kernel with no user code to show"),
        "{}",
        n.recorder
    );
    let top = text(&ok(
        ichnos(&["report", "-i", n.data.to_str().unwrap()]),
        "ichnos report",
    ));
    assert!(!top.contains("without user registers"), "{top}");
    // The quick thread works 20 ms and exits. An event of the whole CPU
    // samples its last switch after its exit record (with its user
    // registers, on kernels that still give them then): no wait. (Time
    // it was preempted, runnable, is no wait: on a busy machine, with
    // three threads spinning on two CPUs, it was half its time.)
    let quick = common::folded(&n.data, &["--comm", "quick"]);
    let waited: u64 = quick
        .iter()
        .filter(|(s, _)| s.last().is_some_and(|f| f == "[waiting]"))
        .map(|(_, c)| c)
        .sum();
    let all: u64 = quick.iter().map(|(_, c)| c).sum();
    assert!(all >= 10 && waited * 2 < all, "{quick:?}");
}

/// The napper started first, sleeping 600 ms before it starts its
/// clocks (time to attach), and recorded by `-p` (40 rounds).
fn attached() -> Napped {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_napper(dir.path());
    let data = dir.path().join("attached.data");
    let stolen_before = stolen();
    let napper = Command::new(&exe)
        .args(["40", "5", "5", "600"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = napper.id().to_string();
    let recorder = Command::new(common::ICHNOS)
        .args([
            "record",
            "--off-cpu",
            "-o",
            data.to_str().unwrap(),
            "-p",
            &pid,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let napper = ok(napper.wait_with_output().unwrap(), "napper");
    let out = ok(recorder.wait_with_output().unwrap(), "ichnos record -p");
    Napped::new(dir, data, &napper, &out, stolen_before)
}

#[test]
fn an_attached_process_is_seen_waiting_from_its_first_switch() {
    let _serial = serial();
    // The recording may start late in the fixture's first nap: its own
    // clocks cover a little more than the recording does.
    within(5.0, attached);
}

#[test]
fn off_cpu_needs_time_as_its_event() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    let out = ichnos(&[
        "record",
        "--off-cpu",
        "-e",
        "cycles",
        "-o",
        data.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--off-cpu needs the cpu-clock event"),
        "{}",
        stderr(&out)
    );
    assert!(!data.exists(), "a refused recording leaves no file");
}

/// Exports the napper's recording as `format`; the file.
fn export(format: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("nap.{format}"));
    ok(
        ichnos(&[
            "report",
            "-q",
            "-i",
            napped().data.to_str().unwrap(),
            "--format",
            format,
            "-o",
            file.to_str().unwrap(),
        ]),
        "ichnos report",
    );
    (dir, file)
}

/// Off-CPU samples of the folded stacks, and all of them.
fn folded_off_and_all() -> (u64, u64) {
    let stacks = folded(&napped().data);
    let off = stacks
        .iter()
        .filter(|(s, _)| is_off(s))
        .map(|(_, c)| c)
        .sum();
    (off, stacks.iter().map(|(_, c)| c).sum())
}

#[test]
fn pprof_carries_off_cpu_nanoseconds_as_a_sample_type_of_its_own() {
    let _serial = serial();
    let (_dir, file) = export("pprof");
    // `go tool pprof -raw`: the sample types, then each sample's values
    // and its locations; the locations named below.
    let raw = go_pprof(&["-raw"], &file);
    let types = raw
        .lines()
        .skip_while(|l| !l.starts_with("Samples:"))
        .nth(1)
        .unwrap();
    assert_eq!(
        types.split_whitespace().collect::<Vec<_>>(),
        [
            "samples/count",
            "cpu/nanoseconds",
            "off-cpu/nanoseconds",
            "wall/nanoseconds[dflt]"
        ]
    );
    let mut totals = [0u64; 4];
    for line in raw
        .lines()
        .filter(|l| l.contains(": ") && l.starts_with(' '))
    {
        let values: Vec<u64> = line
            .split(':')
            .next()
            .unwrap()
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        if values.len() != 4 {
            continue;
        }
        // Time is on a CPU or off it, and wall time is both.
        assert!(values[1] == 0 || values[2] == 0, "{line}");
        assert_eq!(values[3], values[1] + values[2], "{line}");
        for (t, v) in totals.iter_mut().zip(&values) {
            *t += v;
        }
    }
    let (off, all) = folded_off_and_all();
    assert_eq!(totals[0], all, "samples, against the folded stacks");
    // pprof's own totals per type: its top line, in seconds.
    let top = go_pprof(&["-top", "-sample_index=off-cpu", "-unit=ms"], &file);
    assert!(top.contains("Type: off-cpu"), "{top}");
    let waiting = top
        .lines()
        .find(|l| l.trim_end().ends_with("[waiting]"))
        .unwrap_or_else(|| panic!("{top}"));
    assert!(waiting.contains("ms"), "{waiting}");
    // The off-CPU time over all time, as the folded stacks share it.
    let theirs = totals[2] as f64 / totals[3] as f64;
    let ours = off as f64 / all as f64;
    assert!((theirs - ours).abs() < 0.01, "{theirs} against {ours}");
}

#[test]
fn speedscope_and_svg_show_the_waits_beside_the_work() {
    let _serial = serial();
    let (_dir, file) = export("speedscope");
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/speedscope/file-format-schema.json");
    // Validated against speedscope's schema; the weight (nanoseconds)
    // of stacks that end off a CPU, and of all.
    let said = python(
        r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
data = json.load(open(sys.argv[2]))
jsonschema.validate(data, schema)
frames = data["shared"]["frames"]
off = total = 0
for p in data["profiles"]:
    assert p["unit"] == "nanoseconds", p["unit"]
    for stack, weight in zip(p["samples"], p["weights"]):
        total += weight
        if frames[stack[-1]]["name"] in ("[waiting]", "[preempted]"):
            off += weight
print(off, total)
"#,
        &[schema.to_str().unwrap(), file.to_str().unwrap()],
    );
    let v: Vec<f64> = said
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (off, all) = folded_off_and_all();
    assert!(
        (v[0] / v[1] - off as f64 / all as f64).abs() < 0.01,
        "{said} against {off}/{all}"
    );

    let (_dir, svg) = export("svg");
    let titles = python(
        r#"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
for g in ET.parse(sys.argv[1]).getroot().iter(ns + "g"):
    t = g.find(ns + "title")
    if t is not None:
        print(t.text)
"#,
        &[svg.to_str().unwrap()],
    );
    assert!(
        titles.lines().any(|t| t.starts_with("[waiting]")),
        "{titles}"
    );
    assert!(titles.lines().any(|t| t.starts_with("nap ")), "{titles}");
}

#[test]
fn the_firefox_export_puts_each_wait_on_the_timeline_with_no_cpu_time() {
    let _serial = serial();
    let (_dir, file) = export("firefox");
    // Per thread: the weight of samples whose leaf is off the CPU (their
    // category, CPU delta and frames checked on the way), and of all.
    let said = python(
        r#"
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
cats = [c["name"] for c in d["meta"]["categories"]]
for t in d["threads"]:
    strings = t["stringArray"]
    ft, fn, st, s = t["frameTable"], t["funcTable"], t["stackTable"], t["samples"]
    off = total = 0
    for i in range(s["length"]):
        leaf = st["frame"][s["stack"][i]]
        name = strings[fn["name"][ft["func"][leaf]]]
        w = s["weight"][i]
        total += w
        if name in ("[waiting]", "[preempted]"):
            assert cats[ft["category"][leaf]] == "Off-CPU", cats[ft["category"][leaf]]
            assert s["threadCPUDelta"][i] in (0, None), s["threadCPUDelta"][i]
            off += w
        else:
            assert cats[ft["category"][leaf]] != "Off-CPU", name
    print(t["name"], off, total)
"#,
        &[file.to_str().unwrap()],
    );
    // Two threads are called napper, the third quick.
    let per_thread: Vec<(u64, u64)> = said
        .lines()
        .map(|l| {
            let v: Vec<&str> = l.rsplitn(3, ' ').collect();
            (v[1].parse().unwrap(), v[0].parse().unwrap())
        })
        .collect();
    assert_eq!(per_thread.len(), 3, "{said}");
    // Per thread, against the folded stacks of that thread: the same
    // samples, to within the rounding of each wait (one a thread, as the
    // remainders carry, against one a stack).
    let stacks = folded(&napped().data);
    let (off, all) = folded_off_and_all();
    let (ff_off, ff_all) = per_thread
        .iter()
        .fold((0, 0), |(a, b), (o, t)| (a + o, b + t));
    let distinct_off = stacks.iter().filter(|(s, _)| is_off(s)).count() as u64;
    assert!(
        ff_off.abs_diff(off) <= distinct_off + 2,
        "{ff_off} off-CPU samples against {off} folded"
    );
    assert_eq!(ff_all - ff_off, all - off, "on-CPU samples");
}
