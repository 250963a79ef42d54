//! The profiler end to end: `ichnos record` of C fixtures built with `-O2
//! -fomit-frame-pointer` and of the built-in demo, read back with `ichnos
//! report`; the completeness of their stacks, the chains and names the
//! reports show, their attribution to processes and threads, and the self
//! shares against `perf record --call-graph dwarf` + `perf report`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;

use common::*;

fn chains_are_complete(build: Build) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), build);
    let data = dir.path().join("chains.data");
    record(&data, 2000, &[exe.to_str().unwrap(), "8000"]);
    // The leaves' loop is inlined into each (`work`): counted as theirs.
    let stacks = folded(&data, &["--no-inline"]);
    assert_chains_complete(&stacks, &format!("{build:?}"));
    // Whole from the process's start.
    assert!(stacks
        .iter()
        .any(|(f, _)| f[0] == "chains" && f[1] == "_start"));
}

#[test]
fn stacks_through_sframe_are_complete() {
    chains_are_complete(Build::Sframe);
}

#[test]
fn stacks_through_eh_frame_alone_are_complete() {
    chains_are_complete(Build::EhFrame);
}

#[test]
fn stacks_through_a_shared_library_and_its_plt_are_complete() {
    chains_are_complete(Build::SharedLibrary);
}

/// Both profilers sample the same run: ichnos records `perf record`,
/// which runs the fixture, so the fixture's own run-to-run variation
/// (a few points under a loaded machine) is not counted as disagreement.
/// perf samples user mode only, as ichnos does, so that its shares are
/// of the same time. About 15,000 samples each keep the sampling noise
/// of the difference near 0.6 points, against the 3 allowed.
#[test]
fn self_shares_agree_with_perf_record_call_graph_dwarf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let exe = exe.to_str().unwrap();
    let perf_data = dir.path().join("perf.data");
    let data = dir.path().join("chains.data");
    let perf = perf_record_command(&perf_data, "cpu-clock:u", 4000, "dwarf", &[exe, "32000"]);
    let mut command: Vec<&str> = perf.iter().map(String::as_str).collect();
    command.insert(0, "perf");
    record(&data, 4000, &command);
    let theirs = perf_shares(&perf_data);
    // perf's own samples are in the recording too: the fixture's only.
    let ours = self_shares_of(&data, &["--comm", "chains"]);
    // Not vacuous: the shares are the fixture's 60/20/20.
    assert_chains_shares_agree(&ours, &theirs);
}

#[test]
fn threads_are_named_and_each_keeps_its_own_samples() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "threads",
        &["-fomit-frame-pointer", "-Wa,--gsframe", "-pthread"],
    );
    let data = dir.path().join("threads.data");
    record(&data, 1000, &[exe.to_str().unwrap(), "0.4"]);
    let stacks = folded(&data, &[]);
    for (thread, work) in [
        ("worker-a", "work_a"),
        ("worker-b", "work_b"),
        ("worker-c", "work_c"),
    ] {
        let mine: u64 = stacks
            .iter()
            .filter(|(f, _)| f.iter().any(|x| x == work))
            .map(|(f, n)| {
                assert_eq!(f[0], thread, "{work} sampled under {f:?}");
                assert_eq!(f[1..4], ["clone3", "start_thread", work], "{f:?}");
                n
            })
            .sum();
        assert!(mine >= 100, "{thread}: {mine} samples");
        // The thread filter keeps exactly the thread's samples: those in
        // its work and the few a timer tick may catch before or after it
        // (the thread's start and exit in libc).
        let theirs: u64 = stacks
            .iter()
            .filter(|(f, _)| f[0] == thread)
            .map(|(_, n)| n)
            .sum();
        assert!(
            theirs - mine <= 5,
            "{thread}: {theirs} samples, {mine} in {work}"
        );
        let only = folded(&data, &["--comm", thread]);
        assert!(only.iter().all(|(f, _)| f[0] == thread), "{only:?}");
        assert_eq!(only.iter().map(|(_, n)| n).sum::<u64>(), theirs);
    }
}

/// The vDSO is in no file: the report names its addresses from its own
/// vDSO when the recording's build id says it is the same build, as
/// binutils' nm names the same bytes.
#[test]
fn vdso_addresses_are_named_in_the_report() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "clocks", &["-fomit-frame-pointer"]);
    let data = dir.path().join("clocks.data");
    record(&data, 1000, &[exe.to_str().unwrap(), "0.5"]);
    // This process's vDSO, for nm: the same kernel, the same bytes.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let range = maps.lines().find(|l| l.ends_with("[vdso]")).unwrap();
    let (start, end) = range
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    let mut bytes = vec![0u8; usize::try_from(hex(end) - hex(start)).unwrap()];
    std::fs::File::open("/proc/self/mem")
        .unwrap()
        .read_exact_at(&mut bytes, hex(start))
        .unwrap();
    let copy = dir.path().join("vdso.so");
    std::fs::write(&copy, &bytes).unwrap();
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&copy)
        .output()
        .unwrap();
    let names: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect();
    let stacks = folded(&data, &[]);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let in_vdso: u64 = stacks
        .iter()
        .filter(|(f, _)| f.last().is_some_and(|leaf| names.contains(leaf)))
        .map(|(_, n)| n)
        .sum();
    // Most of the time is in the vDSO's clock_gettime, named.
    assert!(in_vdso * 2 > total, "{in_vdso} of {total}: {stacks:?}");
    assert!(
        stacks
            .iter()
            .all(|(f, _)| f.iter().all(|x| !x.starts_with("[vdso]+"))),
        "{stacks:?}"
    );
}

#[test]
fn forked_and_execed_processes_keep_their_own_samples_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "forker",
        &["-fomit-frame-pointer", "-Wa,--gsframe"],
    );
    let data = dir.path().join("forker.data");
    let out = record(&data, 1000, &[exe.to_str().unwrap()]);
    // The fixture's lines: "ROLE PID".
    let pids: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    for (role, work) in [
        ("fork-parent", "parent_work"),
        ("fork-child", "forked_work"),
        ("exec-child", "exec_work"),
    ] {
        let only = folded(&data, &["--pid", &pids[role]]);
        let samples: u64 = only.iter().map(|(_, n)| n).sum();
        assert!(samples >= 100, "{role}: {samples} samples: {only:?}");
        let others = ["parent_work", "forked_work", "exec_work"];
        let mut excused = 0;
        for (frames, n) in &only {
            // A child runs under its parent's name from its fork until it
            // renames itself (or executes): a sample taken then (in fork's
            // return, in execve) keeps that name, as perf names it.
            let before_renamed = role != "fork-parent"
                && frames[0] == "fork-parent"
                && !frames.iter().any(|f| others.contains(&f.as_str()));
            if before_renamed {
                excused += n;
                continue;
            }
            assert_eq!(frames[0], role, "{frames:?}");
            let leaf = frames.last().unwrap();
            assert!(
                !others.contains(&leaf.as_str()) || leaf == work,
                "{role} sampled in {leaf}"
            );
        }
        assert!(only
            .iter()
            .any(|(f, _)| f.ends_with(&["main".into(), work.into()])));
        // A few milliseconds' worth at most.
        assert!(
            excused <= 5,
            "{role}: {excused} samples before renamed: {only:?}"
        );
    }
}

/// One at a time: the tests whose programs keep CPUs busy for a second or
/// more, and the one whose recorder must keep up with its program while
/// it runs (on a two-CPU machine, run together, they starved it: all of
/// its samples were handled after the program had exited).
fn cpu_heavy() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The threads fixture (built in `dir`) running for a second, its
/// threads started.
fn running_threads(dir: &Path) -> std::process::Child {
    let exe = build_fixture(
        dir,
        "threads",
        &["-fomit-frame-pointer", "-Wa,--gsframe", "-pthread"],
    );
    let child = Command::new(&exe).arg("1.0").spawn().unwrap();
    // Let its threads start.
    std::thread::sleep(std::time::Duration::from_millis(150));
    child
}

#[test]
fn a_running_process_is_recorded_with_dash_p() {
    let _cpu = cpu_heavy();
    let dir = tempfile::tempdir().unwrap();
    let mut child = running_threads(dir.path());
    let data = dir.path().join("attached.data");
    let pid = child.id().to_string();
    let out = ichnos(&["record", "-o", data.to_str().unwrap(), "-p", &pid]);
    let _ = child.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    // The header says whom it attached to.
    let report = text(&ok(
        ichnos(&["report", "-i", data.to_str().unwrap()]),
        "report",
    ));
    let second = report.lines().nth(1).unwrap_or_default();
    assert!(
        second.ends_with(&format!(": attached (-p) to {pid} (threads)")),
        "{report}"
    );
    let stacks = folded(&data, &[]);
    for (thread, work) in [("worker-a", "work_a"), ("worker-b", "work_b")] {
        let mine: Vec<_> = stacks
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == work))
            .collect();
        let samples: u64 = mine.iter().map(|(_, n)| n).sum();
        assert!(samples >= 200, "{thread}: {samples}: {stacks:?}");
        for (f, _) in mine {
            assert_eq!(f[..4], [thread, "clone3", "start_thread", work], "{f:?}");
        }
    }
}

/// `-e cycles`, asked for, is sampled as cycles where the machine has a
/// hardware cycle counter, and else falls back to the CPU clock with a
/// note, as the default does and as perf does (it was refused: "this
/// machine has no cycles event").
/// A child's samples before it executes another program are named as
/// they were taken, by the name it had then, as perf names them: they
/// were named by the thread's last name, the program it executed.
#[test]
fn samples_before_an_exec_keep_the_name_they_were_taken_under() {
    let _cpu = cpu_heavy();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "exec_after", &["-g"]);
    let renamed = dir.path().join("renamed");
    std::os::unix::fs::symlink(&exe, &renamed).unwrap();
    let data = dir.path().join("exec.data");
    let out = ichnos(&[
        "record",
        "-q",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        renamed.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stacks = folded(&data, &[]);
    for (leaf, name) in [("before_exec", "exec_after"), ("after_exec", "renamed")] {
        let roots: HashSet<&str> = stacks
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == leaf))
            .map(|(f, _)| f[0].as_str())
            .collect();
        assert_eq!(roots, HashSet::from([name]), "{leaf}: {stacks:?}");
        // --comm keeps the samples taken under that name, and only them.
        let only = folded(&data, &["--comm", name]);
        let leaves: HashSet<&str> = only
            .iter()
            .filter_map(|(f, _)| f.last().map(String::as_str))
            .filter(|l| l.ends_with("_exec"))
            .collect();
        assert_eq!(leaves, HashSet::from([leaf]), "--comm {name}: {only:?}");
    }
}

/// The whole top table of the recording `data`, with the samples and
/// the seconds its header counts ("# FILE: N samples of ... over S s").
fn report_figures(data: &Path) -> (String, f64, f64) {
    let report = ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "0"]);
    let text = String::from_utf8_lossy(&report.stdout).into_owned();
    let header = text.lines().next().unwrap_or_default().to_owned();
    let words: Vec<&str> = header.split_whitespace().collect();
    let samples: f64 = words[2].replace(',', "").parse().unwrap();
    let over = words.iter().position(|&w| w == "over").unwrap();
    let seconds: f64 = words[over + 1].parse().unwrap();
    (text, samples, seconds)
}

/// `-p` of a process that outlives one of its threads: one whose first
/// thread has exited (a zombie that runs on) is recorded, not refused;
/// one named by a worker's thread id is recorded until the process ends,
/// not until that worker does.
#[test]
fn dash_p_follows_the_process_not_the_thread_it_was_named_by() {
    let _cpu = cpu_heavy();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "leader_exits", &["-pthread"]);
    for (mode, name_it_by) in [("leader", "pid"), ("worker", "tid")] {
        let mut child = Command::new(&exe)
            .args([mode, "1.5"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let worker = line.trim().to_owned();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let id = if name_it_by == "pid" {
            child.id().to_string()
        } else {
            worker
        };
        let data = dir.path().join(format!("{mode}.data"));
        let out = ichnos(&["record", "-q", "-o", data.to_str().unwrap(), "-p", &id]);
        let _ = child.wait();
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let (text, _, seconds) = report_figures(&data);
        let header = text.lines().next().unwrap_or_default();
        // The process spins about 1.4 s more once attached.
        assert!(seconds > 1.0, "{mode}: {header}");
        assert!(text.contains(" spin"), "{mode}: {text}");
    }
}

#[test]
fn cycles_asked_for_fall_back_to_the_cpu_clock_without_a_pmu() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("cycles.data");
    let out = ichnos(&[
        "record",
        "-e",
        "cycles",
        "-o",
        data.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The kernel lists a PMU's events under its device, `cpu` (or
    // `cpu_core` on hybrid CPUs), and a VM without one has neither.
    let pmu = ["cpu", "cpu_core"].iter().any(|d| {
        Path::new("/sys/bus/event_source/devices")
            .join(d)
            .join("events/cpu-cycles")
            .exists()
    });
    let report = ichnos(&["report", "-i", data.to_str().unwrap()]);
    let header = String::from_utf8_lossy(&report.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    if pmu {
        assert!(header.contains(" of cycles at "), "{header}");
    } else {
        assert!(
            stderr(&out).contains("no hardware cycle counter here"),
            "{}",
            stderr(&out)
        );
        // `true` may give one sample, or none.
        assert!(header.contains(" of cpu-clock at "), "{header}");
    }
}

/// `-p` naming a process twice, and by one of its thread ids: one
/// process, each thread sampled once (it was sampled once per naming, and
/// the thread id counted as a process of its own).
#[test]
fn dash_p_names_each_process_once_however_it_is_named() {
    let _cpu = cpu_heavy();
    let dir = tempfile::tempdir().unwrap();
    let mut child = running_threads(dir.path());
    let pid = child.id();
    let thread = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&tid| tid != pid)
        .expect("a thread besides the main one");
    let data = dir.path().join("attached.data");
    let ids = format!("{pid},{pid},{thread}");
    let out = ichnos(&["record", "-o", data.to_str().unwrap(), "-p", &ids]);
    let _ = child.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let (text, samples, seconds) = report_figures(&data);
    let header = text.lines().next().unwrap_or_default();
    assert!(header.contains("; 1 process,"), "{header}");
    // Samples at 1 kHz of a recording of D seconds on this machine's CPUs
    // are at most 1000 D a CPU; counted once per naming they were three
    // times the fixture's.
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(samples > 500.0, "{header}");
    assert!(samples <= 1000.0 * seconds * cpus * 1.1, "{header}");
}

#[test]
fn the_demo_shows_its_jit_frame_by_name_between_native_frames() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo.data");
    let out = ichnos(&["demo", "-o", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The closing line names the command that shows this recording (it
    // said `ichnos report`, which reads ichnos.data).
    assert!(
        stderr(&out).contains(&format!(
            "`ichnos report -i {}` shows it again",
            data.display()
        )),
        "{}",
        stderr(&out)
    );
    // Its JIT code is named through the code registry: no note says
    // otherwise.
    assert!(
        !stderr(&out).contains("JIT code without a name"),
        "{}",
        stderr(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("jit_hot_loop") && l.trim_end().ends_with("[jit]")),
        "{text}"
    );
    let stacks = folded(&data, &[]);
    let jit = [
        "demo_jit_driver",
        "jit_hot_loop",
        "demo_jit_callback",
        "score_leaf",
    ];
    let through_jit: u64 = stacks
        .iter()
        .filter(|(f, _)| f.windows(4).any(|w| w == jit))
        .map(|(f, n)| {
            assert_eq!(f[0], "demo-jit");
            assert!(!f.contains(&"[incomplete stack]".to_owned()), "{f:?}");
            n
        })
        .sum();
    assert!(through_jit >= 100, "{through_jit}: {stacks:?}");
    let native = ["parse_records", "transform_table", "hash_row", "mix_block"];
    assert!(stacks
        .iter()
        .any(|(f, _)| f[0] == "demo-native" && f.windows(4).any(|w| w == native)));
    let own = [
        "demo_native_work",
        "parse_records",
        "transform_table",
        "hash_row",
        "mix_block",
        "checksum_row",
        "demo_jit_driver",
        "jit_hot_loop",
        "demo_jit_callback",
        "score_leaf",
    ];
    let (total, complete, broken) = completeness(&stacks, &own, "start_thread");
    // Fewer when other tests share the CPUs: the demo runs by the clock.
    assert!(total >= 1000, "{total}");
    assert!(
        complete * 1000 >= total * 999,
        "{complete} of {total}; the rest: {broken:?}"
    );
}

/// A function spinning under a frame whose bottom page it never touches:
/// the kernel copies none of its samples' stacks (perf's recording of it
/// has an empty copy in most samples: the independent truth that the
/// fixture makes the case), and the recorder reads that page in, so that
/// the samples after the first read of the rings are copied whole.
#[test]
fn a_stack_page_never_touched_is_read_in_and_later_stacks_are_complete() {
    // The page is read in while the program runs: the recorder must.
    let _cpu = cpu_heavy();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "untouched",
        &[
            "-fomit-frame-pointer",
            "-fno-stack-clash-protection",
            "-pthread",
        ],
    );
    let exe = exe.to_str().unwrap();
    let perf_data = dir.path().join("perf.data");
    let perf = Command::new("perf")
        .args(perf_record_command(
            &perf_data,
            "cpu-clock:u",
            1000,
            "dwarf,65528",
            &[exe, "0.5"],
        ))
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(perf.status.success(), "perf record: {}", stderr(&perf));
    let dump = Command::new("perf")
        .args(["report", "-D", "-i", perf_data.to_str().unwrap()])
        .output()
        .expect("perf report runs");
    let dump = String::from_utf8_lossy(&dump.stdout);
    let copies: Vec<&str> = dump
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("... ustack: size "))
        .collect();
    let empty = copies.iter().filter(|c| c.starts_with("0,")).count();
    assert!(
        copies.len() >= 200 && empty * 10 >= copies.len() * 8,
        "perf: {empty} of {} stack copies empty",
        copies.len()
    );

    let data = dir.path().join("untouched.data");
    let out = record(&data, 1000, &[exe, "1.5"]);
    let err = stderr(&out);
    assert!(
        err.contains("stack copy stop at a stack page never touched")
            && err.contains("the recorder read such pages in"),
        "{err}"
    );
    let stacks = folded(&data, &[]);
    let (total, complete, broken) = completeness(&stacks, &["spin_under_buffer"], "start_thread");
    assert!(
        total >= 700 && complete * 10 >= total * 9,
        "{complete} of {total}: {err}; the rest: {broken:?}"
    );
    // Left as the kernel copied them, and still counted.
    let out = ichnos(&[
        "record",
        "--no-stack-reads",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe,
        "0.5",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("had none of their stack copied")
            && err.contains("without --no-stack-reads the recorder reads such pages in"),
        "{err}"
    );
    let stacks = folded(&data, &[]);
    let (total, complete, _) = completeness(&stacks, &["spin_under_buffer"], "start_thread");
    assert!(
        total >= 200 && complete * 10 < total,
        "{complete} of {total}"
    );
    // Below the main thread's stack mapping nothing is read (a kernel
    // before 6.5 would grow the mapping for the read), and a note says
    // why those stacks stay cut.
    let out = record(&data, 1000, &[exe, "0.5", "main"]);
    let err = stderr(&out);
    assert!(
        err.contains("could not read the stack page in") && !err.contains("read such pages in"),
        "{err}"
    );
    let stacks = folded(&data, &[]);
    let (total, complete, _) = completeness(&stacks, &["spin_under_deep_buffer"], "main");
    assert!(
        total >= 200 && complete * 10 < total,
        "{complete} of {total}"
    );
}

#[test]
fn stacks_deeper_than_the_copy_are_noted_and_a_larger_copy_completes_them() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "deep", &["-fomit-frame-pointer"]);
    let data = dir.path().join("deep.data");
    let leaf_stacks = |data: &Path| -> (u64, u64, String) {
        let stacks = folded(data, &[]);
        let (total, complete, broken) = completeness(&stacks, &["deep_leaf"], "main");
        (total, complete, format!("{broken:?}"))
    };
    // A 32 KiB copy (the default where locked memory is limited) stops
    // inside the 40 KiB frame: kept to the copy, the recording says so
    // and how to go further.
    let out = ichnos(&[
        "record",
        "--stack-size",
        "32K",
        "--no-stack-reads",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("of stacks went on past the 32 KiB of stack copied per sample")
            && err.contains("--stack-size 65528"),
        "{err}"
    );
    let (total, complete, _) = leaf_stacks(&data);
    assert!(
        total >= 300 && complete * 10 < total,
        "{complete} of {total}"
    );
    // By default the rest of each stack is read from the thread's memory,
    // which still holds it: the return address into big_frame, which the
    // copy holds, is still there, and the frames beyond never change.
    // (Samples in big_frame itself, whose frame spans the copy's end and
    // whose buffer changes, cannot be told unchanged, and end at the copy;
    // the fixture waits at the end with its frames as they were, so that
    // the samples handled after the work find them.)
    let out = ichnos(&[
        "record",
        "--stack-size",
        "32K",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("stacks went on past the copy and were read on from their threads' memory"),
        "{err}"
    );
    let (total, complete, broken) = leaf_stacks(&data);
    assert!(
        total >= 300 && complete * 100 >= total * 98,
        "{complete} of {total}: {err}; the rest: {broken}"
    );
    // The most the kernel copies reaches main, and nothing is noted. Two
    // seconds, so that 99.9% asks what it says: of 600 samples it would
    // ask all.
    let out = ichnos(&[
        "record",
        "--stack-size",
        "65528",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "2",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("stacks went on past"), "{err}");
    let (total, complete, broken) = leaf_stacks(&data);
    assert!(
        total >= 1500 && complete * 1000 >= total * 999,
        "{complete} of {total}: {err}; the rest: {broken}"
    );
}

/// A program that exits as soon as its work ends: the samples of its
/// last tens of milliseconds are handled after its memory is gone, and
/// go on over what the thread's last read found past the copy, which
/// their copies still anchor (the return address into the 40 KiB frame).
#[test]
fn stacks_handled_after_their_process_exited_go_on_over_their_threads_last_read() {
    let _cpu = cpu_heavy();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "deep", &["-fomit-frame-pointer"]);
    let data = dir.path().join("exit.data");
    let out = ichnos(&[
        "record",
        "--stack-size",
        "32K",
        "-o",
        data.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "0.6",
        "exit",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("could not be read")
            && err.contains("were completed over what an earlier sample"),
        "{err}"
    );
    let stacks = folded(&data, &[]);
    let (total, complete, broken) = completeness(&stacks, &["deep_leaf"], "main");
    // (Without the kept reads, about 6% of them end at the copy.)
    assert!(
        total >= 300 && complete * 1000 >= total * 995,
        "{complete} of {total}: {broken:?}\n{err}"
    );
}

/// A frame larger than any copy the kernel makes (rustc's driver keeps
/// over 500 KiB of locals in one) holds its return address far past
/// the copy, and calls one function after another: the stacks are read
/// on where the walk ran off, and the frame that is still there, though
/// its callee changed since the sample, lets them be.
#[test]
fn stacks_past_a_frame_larger_than_the_copy_are_read_on_where_its_callee_changed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "deep", &["-fomit-frame-pointer"]);
    let data = dir.path().join("huge.data");
    let out = record(&data, 1000, &[exe.to_str().unwrap(), "0.6", "huge"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let stacks = folded(&data, &[]);
    let (total, complete, broken) = completeness(&stacks, &["deep_leaf", "other_leaf"], "main");
    // (Read whole past the copy, each sample's 512 KiB ran past what the
    // recorder reads a second: 8% of them reached main. Kept to the same
    // return address into the frame, half of them would not.)
    assert!(
        total >= 300 && complete * 100 >= total * 98,
        "{complete} of {total}: {broken:?}; {err}"
    );
    // Both leaves, each through the frame, to main.
    for leaf in ["deep_leaf", "other_leaf"] {
        assert!(
            stacks.iter().any(|(f, _)| f.ends_with(&[
                "main".to_owned(),
                "huge_frame".to_owned(),
                leaf.to_owned()
            ])),
            "{leaf}"
        );
    }
}

#[test]
fn commands_that_cannot_run_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    let data = data.to_str().unwrap();
    fails_with(
        &["record", "-o", data, "--", "/nonexistent/prog"],
        &["/nonexistent/prog", "no such file"],
    );
    fails_with(
        &["record", "-o", data, "--", "no-such-command-ichnos"],
        &["no-such-command-ichnos", "command not found"],
    );
    // A directory: said to be one (it was "permission denied").
    fails_with(
        &["record", "-o", data, "--", dir.path().to_str().unwrap()],
        &["is a directory, not a program"],
    );
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a program").unwrap();
    fails_with(
        &["record", "-o", data, "--", text.to_str().unwrap()],
        &["notes.txt", "not an executable"],
    );
    // Executable, but not a program the kernel can run.
    std::fs::set_permissions(&text, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let err = fails_with(
        &["record", "-o", data, "--", text.to_str().unwrap()],
        &["cannot run", "notes.txt", "Exec format error"],
    );
    assert_eq!(err.matches("Exec format error").count(), 1, "{err}");
    // A script whose interpreter is missing, and a program whose dynamic
    // linker is: exec says "No such file or directory" of the program,
    // which is there; what is missing is named.
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/nonexistent/ichnos-interp -e\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fails_with(
        &["record", "-o", data, "--", script.to_str().unwrap()],
        &["script.sh: its interpreter /nonexistent/ichnos-interp does not exist"],
    );
    // Saved with DOS line ends: the name has a carriage return after it
    // (printed, it hid the line); /bin/sh itself is there.
    std::fs::write(&script, "#!/bin/sh\r\nexit 0\r\n").unwrap();
    let err = fails_with(
        &["record", "-o", data, "--", script.to_str().unwrap()],
        &["its interpreter /bin/sh does not exist with a carriage return after its name: the script has DOS line ends"],
    );
    assert!(!err.contains('\r'), "{err:?}");
    let mut program = std::fs::read("/bin/true").unwrap();
    let linker = b"/lib64/ld-linux-x86-64.so.2";
    let at = program
        .windows(linker.len())
        .position(|w| w == linker)
        .expect("true names the usual dynamic linker");
    program[at..at + linker.len()].copy_from_slice(b"/lib64/ld-nowhere-x86-64.so");
    let elf = dir.path().join("elf");
    std::fs::write(&elf, program).unwrap();
    std::fs::set_permissions(&elf, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    fails_with(
        &["record", "-o", data, "--", elf.to_str().unwrap()],
        &["elf: its dynamic linker /lib64/ld-nowhere-x86-64.so does not exist"],
    );
    // Nothing was left behind for a command that never ran.
    assert!(!Path::new(data).exists());
    // A refusal after the command was started and held before its exec
    // (here the sample rate) ends it too: no hang, one message.
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hz = (max + 1).to_string();
    fails_with(
        &["record", "-F", &hz, "-o", data, "--", "sleep", "100"],
        &["above kernel.perf_event_max_sample_rate"],
    );
    assert!(!Path::new(data).exists());
}

#[test]
fn processes_that_cannot_be_attached_to_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    // Above the kernel's largest pid (2^22).
    fails_with(
        &["record", "-o", data.to_str().unwrap(), "-p", "4194305"],
        &["process 4194305 does not exist"],
    );
    // Not a number: a usage error.
    let out = ichnos(&["record", "-o", data.to_str().unwrap(), "-p", "12x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"12x\" is not a process id"));
    // A zombie (a child of this test, not waited for yet): it has exited
    // (it was said not to exist).
    let mut child = Command::new("true").spawn().unwrap();
    let zombie = child.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{zombie}/status"))
        .unwrap()
        .contains("State:\tZ")
    {
        assert!(std::time::Instant::now() < deadline, "true did not exit");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    fails_with(
        &["record", "-o", data.to_str().unwrap(), "-p", &zombie],
        &[&format!("process {zombie} has exited (a zombie")],
    );
    child.wait().unwrap();
    // A kernel thread (it recorded nothing, and said nothing): the kernel
    // marks them in their status.
    let kernel_thread = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .is_ok_and(|s| s.contains("Kthread:\t1"))
        })
        .expect("a kernel thread, marked Kthread: 1 (Linux 6.4 and later)");
    fails_with(
        &[
            "record",
            "-o",
            data.to_str().unwrap(),
            "-p",
            &kernel_thread.to_string(),
        ],
        &[&format!("process {kernel_thread} ("), "is a kernel thread"],
    );
}

#[test]
fn outputs_that_cannot_be_written_are_named() {
    fails_with(
        &["record", "-o", "/nonexistent/dir/x.data", "--", "true"],
        &["cannot create /nonexistent/dir/x.data", "No such file"],
    );
    // A full device: what was written before stays readable; here nothing
    // fits, and the error says which file and why.
    fails_with(
        &["record", "-o", "/dev/full", "--", "true"],
        &["/dev/full", "No space left on device"],
    );
}

#[test]
fn the_commands_exit_status_is_ichnos_s() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    let data = data.to_str().unwrap();
    let out = ichnos(&["record", "-o", data, "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Killed by a signal: 128 + its number, as a shell reports it.
    let out = ichnos(&["record", "-o", data, "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
    // And said: ichnos itself exits normally, so a shell would not.
    assert!(
        stderr(&out).contains("note: the command was killed by SIGKILL (signal 9)"),
        "{}",
        stderr(&out)
    );
    // The recording of a command killed midway is whole.
    let report = ichnos(&["report", "-i", data]);
    assert!(report.status.success(), "{}", stderr(&report));
}

#[test]
fn an_existing_recording_is_kept_as_old() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    std::fs::write(&data, b"previous").unwrap();
    record(&data, 100, &["true"]);
    let old = dir.path().join("x.data.old");
    assert_eq!(std::fs::read(old).unwrap(), b"previous");
    assert!(std::fs::read(&data).unwrap().starts_with(b"ICHNOSRC"));
}

#[test]
fn a_recorder_killed_with_sigkill_leaves_a_recording_read_to_its_last_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("killed.data");
    let mut recorder = Command::new(ICHNOS)
        .args(["record", "-o", data.to_str().unwrap(), "--"])
        .args([exe.to_str().unwrap(), "40000"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Chunks are written every second.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    recorder.kill().unwrap();
    recorder.wait().unwrap();
    // The command runs on without its recorder: end it.
    let _ = Command::new("pkill")
        .args(["-9", "-f", exe.to_str().unwrap()])
        .status();
    let out = ichnos(&["report", "-i", data.to_str().unwrap(), "--no-inline"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("did not finish"), "{err}");
    // Everything before the cut is reported.
    let text = String::from_utf8_lossy(&out.stdout);
    let heavy = text
        .lines()
        .find(|l| l.contains(" leaf_heavy "))
        .unwrap_or_else(|| panic!("{text}"));
    let samples: u64 = heavy.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(samples >= 200, "{heavy}");
}

#[test]
fn a_stop_signal_ends_the_command_and_the_recording_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("stopped.data");
    let recorder = Command::new(ICHNOS)
        .args(["record", "-o", data.to_str().unwrap(), "--"])
        .args([exe.to_str().unwrap(), "100000"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    // SIGINT to the recorder alone (as `kill -INT` would send it): the
    // command, which did not get it, is asked to end with SIGTERM.
    let pid = recorder.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = recorder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{}", stderr(&out));
    assert!(stderr(&out).contains("recorded "), "{}", stderr(&out));
    let report = ichnos(&["report", "-i", data.to_str().unwrap()]);
    assert!(report.status.success(), "{}", stderr(&report));
}

#[test]
fn damaged_and_foreign_recordings_are_named_with_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("good.data");
    let exe = build_chains(dir.path(), Build::Sframe);
    record(&data, 1000, &[exe.to_str().unwrap(), "3000"]);
    let bytes = std::fs::read(&data).unwrap();
    let path = dir.path().join("bad.data");
    let p = path.to_str().unwrap();

    std::fs::write(&path, b"\x7fELF and more bytes of some other file").unwrap();
    // Its first bytes as text, as a shell's string shows them.
    fails_with(
        &["report", "-i", p],
        &[
            "bad.data",
            "not an ichnos recording (it starts with \"\\x7fELF and\", not \"ICHNOSRC\")",
        ],
    );
    // An empty file (a recorder killed before it wrote anything) is
    // called empty, by ichnos report and replay alike.
    std::fs::write(&path, b"").unwrap();
    for command in ["report", "replay"] {
        fails_with(&[command, "-i", p], &["bad.data", "the file is empty"]);
    }
    // A perf.data magic is read as perf.data, and refused as one.
    std::fs::write(&path, b"PERFILE2 and more bytes of a perf.data file").unwrap();
    fails_with(
        &["report", "-i", p],
        &[
            "bad.data",
            "not a readable perf.data file",
            "43 bytes, shorter than a header",
        ],
    );

    let mut version = bytes.clone();
    version[8] = 9;
    std::fs::write(&path, &version).unwrap();
    fails_with(&["report", "-i", p], &["format version 9"]);

    // A flipped byte inside the first chunk (which starts at byte 32).
    let mut corrupt = bytes.clone();
    corrupt[60] ^= 0x40;
    std::fs::write(&path, &corrupt).unwrap();
    fails_with(&["report", "-i", p], &["corrupt chunk at byte 32"]);

    // Cut inside its first chunk, which holds what the recording is:
    // nothing to report, and the cut named. (A cut in a later chunk is
    // reported up to it: the SIGKILL test above.)
    assert!(
        ichnos_data::Reader::new(&bytes[..])
            .unwrap()
            .next_chunk()
            .unwrap()
            .is_some_and(|c| c.records().count() > 0),
        "a first chunk"
    );
    let mut reader = ichnos_data::Reader::new(&bytes[..]).unwrap();
    reader.next_chunk().unwrap();
    let first_chunk_end = usize::try_from(reader.offset()).unwrap();
    std::fs::write(&path, &bytes[..first_chunk_end - 10]).unwrap();
    fails_with(
        &["report", "-i", p],
        &["bad.data", "truncated: the chunk at byte 32"],
    );
    // Its header and nothing more (a recorder killed at once), or part of
    // its header.
    std::fs::write(&path, &bytes[..32]).unwrap();
    fails_with(&["report", "-i", p], &["bad.data", "it holds nothing"]);
    std::fs::write(&path, &bytes[..20]).unwrap();
    fails_with(
        &["report", "-i", p],
        &["bad.data", "ends after 20 bytes, inside its 32-byte header"],
    );

    fails_with(
        &["report", "-i", "/nonexistent.data"],
        &["/nonexistent.data"],
    );
    fails_with(&["report", "-i", "/tmp"], &["not a regular file"]);
}

/// An existing recording is kept as FILE.old: where that cannot be made
/// (a directory of the name), the error names FILE.old, not FILE, and
/// FILE is left as it was; `trace` the same.
#[test]
fn a_recording_that_cannot_be_kept_as_old_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("x.data");
    std::fs::write(&data, "before").unwrap();
    std::fs::create_dir(dir.path().join("x.data.old")).unwrap();
    for command in ["record", "trace"] {
        let err = fails_with(
            &[command, "-q", "-o", data.to_str().unwrap(), "--", "true"],
            &["cannot create", "x.data.old: Is a directory"],
        );
        assert!(!err.contains("x.data:"), "{err}");
        assert_eq!(std::fs::read_to_string(&data).unwrap(), "before");
    }
}

/// A command line larger than a record may be (800 KiB here) is cut in
/// the recording's description, which is kept: it was dropped whole, and
/// the report did not say what the recording was ("0 samples of  at 0
/// Hz").
#[test]
fn a_long_command_line_is_cut_not_the_description_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("long.data");
    let long = "x".repeat(4000);
    let mut args = vec![
        "record",
        "-q",
        "-o",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 0",
    ];
    args.extend(std::iter::repeat_n(long.as_str(), 200));
    let out = ichnos(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = ichnos(&["report", "-i", data.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&report.stdout).into_owned();
    let header: Vec<&str> = text.lines().take(2).collect();
    assert!(header[0].contains("of cpu-clock at 1000 Hz"), "{header:?}");
    assert!(
        header[1].contains(": sh -c 'exit 0' xxxx"),
        "{}",
        &header[1][..200.min(header[1].len())]
    );
    // Cut to about 64 KiB.
    assert!(header[1].len() < 70_000, "{}", header[1].len());
}

/// Runs ichnos as the unprivileged user `nobody`.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", ICHNOS])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("setpriv runs (util-linux)")
}

#[test]
fn refusals_say_which_setting_or_permission_is_missing() {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let data = dir.path().join("x.data");
    let data = data.to_str().unwrap();
    // Another user's process (pid 1 is root's).
    let out = as_nobody(&["record", "-o", data, "-p", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("belongs to another user"),
        "{}",
        stderr(&out)
    );
    // The whole machine needs perf_event_paranoid 0 or lower; the message
    // gives the value now and the sysctl to change it.
    if paranoid > 0 {
        let out = as_nobody(&["record", "-o", data, "-a"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("kernel.perf_event_paranoid is {paranoid}"))
                && err.contains("sysctl kernel.perf_event_paranoid=0"),
            "{err}"
        );
    }
    // A command of our own is allowed at paranoid 2, user space only:
    // the note says time in the kernel is not sampled, and why.
    if paranoid <= 2 {
        let out = as_nobody(&["record", "-o", data, "--", "true"]);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        let note = format!(
            "time in the kernel (system calls, page faults) is not sampled: \
             kernel.perf_event_paranoid {paranoid}"
        );
        assert_eq!(err.contains(&note), paranoid >= 2, "{err}");
        // Its rings may lock little memory: where rings for 24 samples of
        // the largest copy a wakeup (8 MiB each, and a page) do not fit
        // in what the kernel lets it lock, the smaller copy, which keeps
        // more samples in them.
        if paranoid > -1 {
            // (Past 32 CPUs the smaller copy is the default anyway.)
            let expected = if online_cpus() <= 32
                && nobody_may_lock_kib() >= 2049 * 4 * online_cpus() as u64
            {
                65528
            } else {
                32 << 10
            };
            assert_eq!(recorded_stack_size(Path::new(data)), expected);
            // And stacks that go on past that copy end with a note that
            // says how to copy more, and what it costs in those rings.
            if expected == 32 << 10 {
                let exe = build_fixture(dir.path(), "deep", &["-fomit-frame-pointer"]);
                let out = as_nobody(&[
                    "record",
                    "--no-stack-reads",
                    "-o",
                    data,
                    "--",
                    exe.to_str().unwrap(),
                ]);
                let err = stderr(&out);
                assert!(out.status.success(), "{err}");
                assert!(
                    err.contains("of stacks went on past the 32 KiB of stack copied per sample")
                        && err.contains("--stack-size 65528")
                        && err.contains("kernel.perf_event_mlock_kb"),
                    "{err}"
                );
            }
        }
    }
    // Rings that may lock what they ask for (root's, with CAP_IPC_LOCK,
    // outside a user namespace), on a machine of up to 32 CPUs: the most
    // the kernel copies.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap();
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap();
    let initial = uid_map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    if caps & (1 << 14) != 0 && initial && online_cpus() <= 32 {
        let out = ichnos(&["record", "-o", data, "--", "true"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(recorded_stack_size(Path::new(data)), 65528);
    }
}

/// Online CPUs: one ring each ("0-1", "0,2-3").
fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// KiB of rings a user without `CAP_IPC_LOCK` may lock (as `as_nobody`
/// runs, with this process's limits): `perf_event_mlock_kb` a CPU, then
/// `ulimit -l`.
fn nobody_may_lock_kib() -> u64 {
    let per_cpu: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let soft = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    let rlimit = if soft == "unlimited" {
        u64::MAX / 2
    } else {
        soft.parse::<u64>().unwrap() >> 10
    };
    per_cpu * online_cpus() as u64 + rlimit
}

/// The stack copy a recording says its samples asked for.
fn recorded_stack_size(data: &Path) -> u64 {
    let file = std::fs::File::open(data).unwrap();
    let mut reader = ichnos_data::Reader::new(std::io::BufReader::new(file)).unwrap();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            if let ichnos_data::Record::Meta(meta) = record.unwrap() {
                return meta.stack_size;
            }
        }
    }
    panic!("no description in {}", data.display());
}

#[test]
fn objects_are_found_by_build_id_and_changed_ones_are_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("chains.data");
    record(&data, 1000, &[exe.to_str().unwrap(), "3000"]);
    let id = build_id(&exe);
    // A copy kept by build id, as distributions keep debug files.
    let debug = dir.path().join("debug");
    let by_id = debug.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::copy(&exe, by_id.join(format!("{}.debug", &id[2..]))).unwrap();
    // The program is rebuilt differently: its build id changes.
    let flags = ["-O1", "-g", "-fomit-frame-pointer"];
    let (chains, leaves) = (fixture("chains.c"), fixture("leaves.c"));
    gcc(&[
        &flags[..],
        &[
            "-o",
            exe.to_str().unwrap(),
            chains.to_str().unwrap(),
            leaves.to_str().unwrap(),
        ],
    ]
    .concat());
    assert_ne!(build_id(&exe), id);

    // perf's build-id cache (~/.debug) is searched too: a home of its
    // own keeps copies other tests made out of this one.
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let report = |extra: &[&str]| {
        let mut args = vec![
            "report",
            "-i",
            data.to_str().unwrap(),
            "--no-inline",
            "--format",
            "folded",
        ];
        args.extend_from_slice(extra);
        Command::new(ICHNOS)
            .args(&args)
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .output()
            .unwrap()
    };
    // Without the copy: one warning naming the file and both build ids,
    // and the program's frames as chains+offset.
    let out = report(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("warning: ").count(), 1, "{err}");
    assert!(
        err.contains("has changed since the recording") && err.contains(&id),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("leaf_heavy"), "{text}");
    assert!(text.contains(";chains+0x"), "{text}");
    // With the copy found by build id, the names come back.
    let out = report(&["--debug-dir", debug.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(";stage_b;leaf_heavy "));
    // Gone altogether.
    std::fs::remove_file(&exe).unwrap();
    let out = report(&[]);
    assert!(stderr(&out).contains("is gone"), "{}", stderr(&out));
}

#[test]
fn objects_with_much_dwarf_are_indexed_once_and_answer_as_their_dwarf_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("chains.data");
    record(&data, 1000, &[exe.to_str().unwrap(), "1000"]);
    let index_dir = dir.path().join("index");
    let report = |extra: &[&str]| {
        let mut args = vec![
            "report",
            "-v",
            "-i",
            data.to_str().unwrap(),
            "--format",
            "folded",
        ];
        args.extend_from_slice(extra);
        let out = ichnos(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    };
    let (from_dwarf, _) = report(&["--no-index"]);
    // glibc's debug file (libc6-dbg) holds megabytes of DWARF: the first
    // report indexes it though the recording has few of its addresses.
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let (first, notes) = report(&["--index-dir", index_dir.to_str().unwrap()]);
    assert!(
        notes
            .lines()
            .any(|l| l.starts_with("note: indexed /") && l.contains("/libc.so.6 (")),
        "{notes}"
    );
    let libc_id = build_id(libc);
    let names: Vec<String> = std::fs::read_dir(&index_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.starts_with(&libc_id)), "{names:?}");
    // The small program is read from its DWARF as it is.
    assert!(
        !names.iter().any(|n| n.starts_with(&build_id(&exe))),
        "{names:?}"
    );
    // Later reports read the index, and every report says the same.
    let (second, notes) = report(&["--index-dir", index_dir.to_str().unwrap()]);
    assert!(!notes.contains("note: indexed"), "{notes}");
    assert_eq!(first, from_dwarf);
    assert_eq!(second, from_dwarf);
    assert!(from_dwarf.contains("start_thread") || from_dwarf.contains("__libc_start_call_main"));
}

#[test]
fn report_options_change_what_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("chains.data");
    record(&data, 2000, &[exe.to_str().unwrap(), "4000"]);
    let d = data.to_str().unwrap();
    let rows = |extra: &[&str]| -> Vec<Vec<String>> {
        let mut args = vec!["report", "-i", d, "--no-inline"];
        args.extend_from_slice(extra);
        let out = ichnos(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("SELF%"))
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    // By total time: the chain from _start to stage_b holds (nearly)
    // every sample of the program's own run. The dynamic loader's work
    // before it (relocating; a few samples, seen in CI) has a chain of its
    // own, from the loader's entry through _dl_start; of the rest, a rare
    // sample breaks off where the kernel could not copy a stack whose
    // pages were out. At most two of those.
    let total = rows(&["--sort", "total", "--limit", "8"]);
    assert_eq!(total.len(), 8, "{total:?}");
    let stacks = folded(&data, &["--no-inline"]);
    let loading = |s: &[String]| s.get(1..3) == Some(&["_start".into(), "_dl_start".into()]);
    let whole: u64 = stacks
        .iter()
        .filter(|(s, _)| !loading(s))
        .map(|(_, c)| c)
        .sum();
    for f in ["_start", "main", "run", "stage_a", "stage_b"] {
        let row = total
            .iter()
            .find(|r| r[4] == f)
            .unwrap_or_else(|| panic!("{f}: {total:?}"));
        let samples: u64 = row[3].parse().unwrap();
        assert!(
            samples + 2 >= whole,
            "{row:?} of {whole}: {:?}",
            stacks
                .iter()
                .filter(|(s, _)| !s.iter().any(|x| x == f))
                .collect::<Vec<_>>()
        );
    }
    let out = ichnos(&["report", "-i", d, "--limit", "2"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("more functions (--limit 0 shows all)"));
    let self_sorted = rows(&["--limit", "1"]);
    assert_eq!(self_sorted[0][4], "leaf_heavy");
    // Addresses instead of names.
    let addresses = rows(&["--addresses", "--limit", "0"]);
    assert!(
        addresses.iter().all(|r| !r[4].contains("leaf_")),
        "{addresses:?}"
    );
    assert!(
        addresses.iter().any(|r| r[4].starts_with("chains+0x")),
        "{addresses:?}"
    );
    // The tree folds what is below --min-percent.
    let out = ichnos(&[
        "report",
        "-i",
        d,
        "--tree",
        "--no-inline",
        "--min-percent",
        "50",
    ]);
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        tree.contains("leaf_heavy") && !tree.contains("leaf_light"),
        "{tree}"
    );
    assert!(tree.contains("more below 50%"), "{tree}");
}

#[test]
fn jit_code_named_in_perf_maps_and_jitdump_files_is_named_after_they_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "named_jit", &["-pthread"]);
    let data = dir.path().join("jit.data");
    // The fixture writes its jitdump file in its working directory.
    let out = Command::new(ICHNOS)
        .args([
            "record",
            "-o",
            data.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // The process removed both files on its way out.
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("jit-")));
    let stacks = folded(&data, &[]);
    for name in ["perf_mapped_loop", "jitdumped_loop"] {
        let samples: u64 = stacks
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == name))
            .map(|(_, n)| n)
            .sum();
        assert!(samples >= 100, "{name}: {samples}: {stacks:?}");
    }
    let out = ichnos(&["report", "-i", data.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["perf_mapped_loop", "jitdumped_loop"] {
        let row = text.lines().find(|l| l.contains(name)).unwrap();
        assert!(row.trim_end().ends_with("[jit]"), "{row}");
    }
    // The code keeps no frame pointer: the walk stops at the JIT frame
    // rather than reading made-up frames from rbp.
    assert!(
        stacks.iter().all(|(f, _)| !f
            .iter()
            .any(|x| x.starts_with("0x") || x == "[unnamed JIT code]")),
        "{stacks:?}"
    );
}

/// A perf map written as the process exits (as `java
/// -XX:+DumpPerfMapAtExit` writes one) is read once the process is gone,
/// as its user's: the recorder learnt the user while it ran. (Run by a
/// shell, which reaps it at once: `/proc` forgets it before the recorder
/// handles its last samples.)
#[test]
fn a_perf_map_written_at_exit_names_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "named_jit", &["-pthread"]);
    let data = dir.path().join("jit.data");
    for _ in 0..3 {
        let out = Command::new(ICHNOS)
            .args(["record", "-o", data.to_str().unwrap(), "--", "sh", "-c"])
            .arg(format!("{} 0.3 at-exit; true", exe.display()))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let stacks = folded(&data, &[]);
        // The map the fixture left behind.
        for pid in pids(&data) {
            let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        }
        let named: u64 = stacks
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == "perf_mapped_loop"))
            .map(|(_, n)| n)
            .sum();
        let unnamed: u64 = stacks
            .iter()
            .filter(|(f, _)| f.last().is_some_and(|l| l == "[unnamed JIT code]"))
            .map(|(_, n)| n)
            .sum();
        assert!(
            named >= 50 && unnamed == 0,
            "{named} named, {unnamed} unnamed: {stacks:?}"
        );
    }
}

#[test]
fn locked_memory_limits_shrink_the_rings_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let data = dir.path().join("x.data");
    // As nobody with no locked memory of its own: only the kernel's
    // allowance per user (kernel.perf_event_mlock_kb per CPU) is left.
    let out = Command::new("prlimit")
        .args([
            "--memlock=0:0",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            ICHNOS,
        ])
        .args(["record", "-o", data.to_str().unwrap(), "--", "true"])
        .output()
        .expect("prlimit and setpriv run (util-linux)");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("the kernel limits locked memory: rings of")
            && err.contains("kernel.perf_event_mlock_kb"),
        "{err}"
    );
}

#[test]
fn the_whole_machine_is_recorded_with_dash_a_until_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("all.data");
    let recorder = Command::new(ICHNOS)
        .args(["record", "-a", "-o", data.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let status = Command::new(&exe).arg("6000").status().unwrap();
    assert!(status.success());
    let pid = recorder.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = recorder.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report = text(&ok(
        ichnos(&["report", "-i", data.to_str().unwrap()]),
        "report",
    ));
    assert!(
        report
            .lines()
            .nth(1)
            .unwrap_or_default()
            .ends_with(": every process on the machine (-a)"),
        "{report}"
    );
    let stacks = folded(&data, &["--comm", "chains", "--no-inline"]);
    let (total, complete, broken) = completeness(&stacks, &CHAINS_FUNCTIONS, "main");
    assert!(total >= 300, "{total}: {stacks:?}");
    assert!(
        complete * 1000 >= total * 999,
        "{complete} of {total}; the rest: {broken:?}"
    );
}

/// A thread named with a newline and a tab (a program's name is any
/// bytes; here a shell run through a link so named) is one node of the
/// call tree, on one line. (The newline split it in two.)
#[test]
fn the_tree_keeps_a_thread_name_with_a_newline_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("ab\ncd\tef");
    std::os::unix::fs::symlink("/bin/sh", &named).unwrap();
    let data = dir.path().join("named.data");
    record(
        &data,
        1000,
        &[
            named.to_str().unwrap(),
            "-c",
            "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done",
        ],
    );
    let out = ok(
        ichnos(&["report", "-i", data.to_str().unwrap(), "--tree"]),
        "report --tree",
    );
    let tree = text(&out);
    let nodes: Vec<&str> = tree
        .lines()
        .filter(|l| !l.starts_with('#') && !l.contains("CALL TREE"))
        .collect();
    assert!(
        nodes
            .iter()
            .all(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
        "{tree}"
    );
    assert!(nodes.iter().any(|l| l.ends_with("  ab cd ef")), "{tree}");
}

/// A command line whose words hold spaces, quotes and newlines (a shell
/// script given with `-c`) is shown in the report's header as a shell
/// would read it back, on its one `#` line: joined with spaces, its
/// newlines broke the header into lines that were not comments.
#[test]
fn the_report_header_quotes_the_command_line_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sh.data");
    let script = "i=0\nwhile [ $i -lt 300000 ]; do i=$((i+1)); done # it's done";
    record(&data, 1000, &["sh", "-c", script]);
    let out = ichnos(&["report", "-i", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("SELF%"))
        .collect();
    assert!(
        !header.is_empty() && header.iter().all(|l| l.starts_with('#')),
        "{text}"
    );
    let quoted = "sh -c $'i=0\\nwhile [ $i -lt 300000 ]; do i=$((i+1)); done # it\\'s done'";
    assert!(header.iter().any(|l| l.ends_with(quoted)), "{text}");
}
