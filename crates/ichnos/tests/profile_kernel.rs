//! Time in the kernel, end to end: where the kernel allows it (to root,
//! which runs these tests), a sample taken in a system call or a page
//! fault carries the kernel's own frames above the user code that entered
//! it, named as the kernel's symbol table named them while recording. The
//! truth is `perf record -g` of the same run of the same program.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

mod common;

use common::*;

/// One perf run at a time: two at once here made perf's build-id code
/// fail (`assertion failed at util/build-id.c:1010`, then a smashed
/// stack), in `perf record` or `perf report`; and the whole machine's
/// recording is compared with perf's, which another recording's load
/// would skew.
fn one_perf_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static PERF: std::sync::Mutex<()> = std::sync::Mutex::new(());
    PERF.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A program that spends most of its CPU time reading /dev/zero has
/// about as many samples as it has milliseconds of CPU time (its own
/// account, getrusage), most of them under `read`. Sampling user space
/// only, it had samples for its user time alone.
#[test]
fn time_in_system_calls_is_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "syscalls", &["-g"]);
    let data = dir.path().join("s.data");
    let out = record(&data, 1000, &[exe.to_str().unwrap()]);
    let printed = String::from_utf8_lossy(&out.stdout);
    let times: Vec<u64> = printed
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let (user_ms, system_ms) = (times[0], times[1]);
    // 4 to 1 on an idle machine; 2 to 1 where other work shared the
    // CPUs (the kernel splits a process's time between the two by ticks).
    assert!(system_ms > user_ms, "mostly in the kernel: {printed}");
    let report = ichnos(&["report", "-i", data.to_str().unwrap()]);
    let header = text(&report);
    let samples: u64 = header
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    let cpu_ms = user_ms + system_ms;
    assert!(
        samples * 10 >= cpu_ms * 7,
        "{samples} samples for {cpu_ms} ms of CPU time ({user_ms} user)"
    );
    // glibc's read, by whichever of its names the symbol table gives: the
    // fixture reads for 0.4 s of its 0.5 s of CPU time (by its CPU clock;
    // less its clock readings, about 77% of the samples on an idle
    // machine), its time in the kernel's functions above it. Sampling user
    // space only, it had next to none.
    let stacks = folded(&data, &["--no-inline"]);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let under_read: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            frames
                .windows(2)
                .any(|w| w[0] == "read_zeros" && w[1].ends_with("read"))
        })
        .map(|(_, n)| n)
        .sum();
    assert!(under_read * 10 > total * 6, "{under_read} of {total}");
    // By address, the kernel's frames keep their object, as every other
    // frame does (they were a bare 0xffff...).
    let by_address = folded(&data, &["--no-inline", "--addresses"]);
    let kernel: Vec<&String> = by_address
        .iter()
        .flat_map(|(frames, _)| frames)
        .filter(|f| f.contains("0xffff"))
        .collect();
    assert!(!kernel.is_empty(), "{by_address:?}");
    assert!(
        kernel
            .iter()
            .all(|f| f.starts_with("[kernel.kallsyms]+0xffff") || f.contains("]+0xffff")),
        "{kernel:?}"
    );
}

/// The frames of each sample of `perf script`'s output (innermost
/// first): `(symbol, object)`, the symbol without its offset.
fn perf_script_stacks(data: &Path) -> Vec<Vec<(String, String)>> {
    let out = Command::new("perf")
        .args(["script", "-i", data.to_str().unwrap(), "-F", "ip,sym,dso"])
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf script: {}", stderr(&out));
    let mut stacks = vec![Vec::new()];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // "ffffffff81d73cd7 read_zero+0x77 ([kernel.kallsyms])"
        match words[..] {
            [_, symbol, object] => {
                let symbol = symbol.split("+0x").next().unwrap();
                let object = object.trim_start_matches('(').trim_end_matches(')');
                stacks
                    .last_mut()
                    .unwrap()
                    .push((symbol.to_owned(), object.to_owned()));
            }
            [] if !stacks.last().unwrap().is_empty() => stacks.push(Vec::new()),
            _ => {}
        }
    }
    stacks.retain(|s| !s.is_empty());
    stacks
}

/// The stack most samples have, and how many have it.
fn most_common<T: std::hash::Hash + Eq + Clone>(stacks: impl Iterator<Item = T>) -> (T, usize) {
    let mut counts: HashMap<T, usize> = HashMap::new();
    for s in stacks {
        *counts.entry(s).or_default() += 1;
    }
    counts.into_iter().max_by_key(|&(_, n)| n).unwrap()
}

/// The same run of the system-call fixture recorded by both (`perf record
/// -g` run under `ichnos record`): the kernel's functions have the self
/// shares perf gives them, within 3 points, as do the program's (2.5 s of
/// CPU time at 4 kHz: 10,000 samples each keep the sampling noise of the
/// difference near 0.7 points); the
/// kernel frames of the most common stack are perf's, in its order, above
/// the program's `read_zeros` and glibc's `read`; and they read as the
/// kernel's in the top table.
#[test]
fn kernel_frames_and_their_shares_agree_with_perf_record_g() {
    let _perf = one_perf_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "syscalls", &["-g"]);
    let exe = exe.to_str().unwrap();
    let perf_data = dir.path().join("perf.data");
    let data = dir.path().join("s.data");
    let perf = perf_record_command(&perf_data, "cpu-clock", 4000, "fp", &[exe, "5"]);
    let mut command: Vec<&str> = perf.iter().map(String::as_str).collect();
    command.insert(0, "perf");
    record(&data, 4000, &command);
    let theirs = perf_shares(&perf_data);
    // perf's own samples are in the recording too: the fixture's only.
    let ours = self_shares_of(&data, &["--comm", "syscalls"]);
    let share =
        |shares: &HashMap<String, f64>, name: &str| shares.get(name).copied().unwrap_or(0.0);
    for (name, &perf_share) in theirs.iter().filter(|(_, &s)| s >= 2.0) {
        // perf names glibc's read by its symbol table, ichnos by its
        // DWARF (libc6-dbg).
        let ours_named = match name.as_str() {
            "read" if !ours.contains_key("read") => "__libc_read",
            name => name,
        };
        let our_share = share(&ours, ours_named);
        assert!(
            (our_share - perf_share).abs() <= 3.0,
            "{name}: ichnos {our_share:.2}%, perf {perf_share:.2}% (ours {ours:?}, perf {theirs:?})"
        );
    }
    // Not vacuous: most of the time is the kernel's clearing of the
    // buffer, in /dev/zero's read, a function of the kernel's.
    assert!(share(&ours, "read_zero") > 40.0, "{ours:?}");
    let top = text(&ichnos(&[
        "report",
        "-i",
        data.to_str().unwrap(),
        "--comm",
        "syscalls",
        "--limit",
        "3",
    ]));
    let kernel_row = top
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("read_zero"))
        .unwrap_or_else(|| panic!("{top}"));
    assert!(kernel_row.ends_with("[kernel.kallsyms]"), "{top}");

    // The chain: perf's most common kernel frames, innermost first.
    let perf_stacks = perf_script_stacks(&perf_data);
    let (kernel_chain, n) = most_common(perf_stacks.iter().map(|s| {
        s.iter()
            .take_while(|(_, object)| object == "[kernel.kallsyms]")
            .map(|(symbol, _)| symbol.clone())
            .collect::<Vec<_>>()
    }));
    assert!(
        kernel_chain.len() >= 3 && n >= 1000,
        "{kernel_chain:?} in {n} samples"
    );
    let stacks = folded(&data, &["--no-inline", "--comm", "syscalls"]);
    let ours_with_leaf: Vec<&Vec<String>> = stacks
        .iter()
        .filter(|(frames, _)| frames.last() == Some(&kernel_chain[0]))
        .flat_map(|(frames, count)| std::iter::repeat_n(frames, *count as usize))
        .collect();
    let (our_stack, _) = most_common(ours_with_leaf.into_iter());
    let mut expected: Vec<&str> = kernel_chain.iter().rev().map(String::as_str).collect();
    let at = our_stack.len() - expected.len();
    let ours_kernel: Vec<&str> = our_stack[at..].iter().map(String::as_str).collect();
    assert_eq!(ours_kernel, expected, "ours {our_stack:?}");
    // Below them, where the program entered the kernel: glibc's read,
    // called by the fixture's read_zeros, called by main.
    expected = our_stack[..at].iter().map(String::as_str).collect();
    let callers = &expected[expected.len() - 3..];
    assert!(
        callers[0] == "main" && callers[1] == "read_zeros" && callers[2].ends_with("read"),
        "{our_stack:?}"
    );
}

/// Each sample's thread id and period (nanoseconds of `cpu-clock`), and
/// the outermost kernel frame of its stack, from `perf script`.
fn perf_script_threads(data: &Path) -> Vec<(String, u32, u64, String)> {
    let out = Command::new("perf")
        .args([
            "script",
            "-i",
            data.to_str().unwrap(),
            "-F",
            "comm,tid,period,ip,sym",
        ])
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf script: {}", stderr(&out));
    let mut samples = Vec::new();
    for block in String::from_utf8_lossy(&out.stdout).split("\n\n") {
        let lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
        let Some((head, frames)) = lines.split_first() else {
            continue;
        };
        // "kworker/u8:2-kv    37    1000000 " (a name may hold spaces)
        let words: Vec<&str> = head.split_whitespace().collect();
        let [.., tid, period] = words[..] else {
            continue;
        };
        let (Ok(tid), Ok(period)) = (tid.parse(), period.parse()) else {
            continue;
        };
        let comm = words[..words.len() - 2].join(" ");
        let outermost = frames
            .last()
            .and_then(|l| l.split_whitespace().nth(1))
            .map(|s| s.split("+0x").next().unwrap().to_owned())
            .unwrap_or_default();
        samples.push((comm, tid, period, outermost));
    }
    samples
}

/// The whole machine recorded by both at once (`perf record -a -g` run
/// under `ichnos record -a`) while a program writes 300 MB and syncs:
/// the kernel threads that write it back (kworkers) are sampled, with
/// no user code, in their kernel frames alone. Each such thread that
/// perf gives 10 ms or more has about as much time in ichnos (within 5
/// ms and a fifth), and its stacks are complete, rooted where perf's
/// are.
#[test]
fn kernel_threads_are_recorded_with_dash_a_in_their_kernel_frames() {
    let _perf = one_perf_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("all.data");
    let perf_data = dir.path().join("perf.data");
    let big = dir.path().join("big");
    // The file removed and synced, and a moment to settle, inside perf's
    // window: ichnos records on after perf stops sampling (while perf
    // writes its file out), and a kernel thread still busy with the file
    // then counted more in ichnos than in perf.
    let write = format!(
        "dd if=/dev/zero of={} bs=1M count=300 2>/dev/null; sync; rm -f {}; sync; sleep 0.3",
        big.display(),
        big.display()
    );
    let out = ichnos(&[
        "record",
        "-q",
        "-a",
        "-o",
        data.to_str().unwrap(),
        "--",
        "perf",
        "record",
        "-q",
        "-a",
        "-g",
        "-e",
        "cpu-clock",
        "-F",
        "1000",
        "-o",
        perf_data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &write,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let perf = perf_script_threads(&perf_data);
    // Time per kernel thread, by perf: milliseconds, and where its
    // stacks start.
    let mut theirs: HashMap<u32, (f64, String)> = HashMap::new();
    for (comm, tid, period, outermost) in &perf {
        if comm.starts_with("kworker") {
            let entry = theirs.entry(*tid).or_insert((0.0, outermost.clone()));
            entry.0 += *period as f64 / 1e6;
        }
    }
    theirs.retain(|_, (ms, _)| *ms >= 10.0);
    assert!(!theirs.is_empty(), "no kernel thread wrote back: {perf:?}");
    for (tid, (ms, outermost)) in &theirs {
        let stacks = folded(&data, &["--tid", &tid.to_string()]);
        let ours: u64 = stacks.iter().map(|(_, n)| n).sum();
        assert!(
            (ours as f64 - ms).abs() <= 5.0 + ms / 5.0,
            "thread {tid}: ichnos {ours} samples, perf {ms:.1} ms; {}",
            text(&ichnos(&[
                "report",
                "-i",
                data.to_str().unwrap(),
                "--limit",
                "1"
            ]))
        );
        let complete: u64 = stacks
            .iter()
            .filter(|(frames, _)| frames.get(1) == Some(outermost))
            .map(|(_, n)| n)
            .sum();
        assert!(
            complete * 10 >= ours * 9,
            "thread {tid}: {complete} of {ours} from {outermost}: {stacks:?}"
        );
    }
}

/// A perf.data file recorded here, on this boot (`perf record -g`, and
/// `--call-graph dwarf`), is reported with its kernel frames, named as
/// perf names them: the same samples give each kernel function the self
/// share `perf report` gives it (within a point). The same file with its
/// kernel's text moved (as another boot's, under KASLR) keeps no kernel
/// frames, and a note says why.
#[test]
fn a_perf_data_file_of_this_boot_shows_its_kernel_frames() {
    let _perf = one_perf_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "syscalls", &["-g"]);
    let exe = exe.to_str().unwrap();
    for graph in ["fp", "dwarf"] {
        let perf_data = dir.path().join(format!("{graph}.data"));
        perf_record(&perf_data, 1000, graph, &[exe]);
        let theirs = perf_shares(&perf_data);
        let ours = self_shares(&perf_data);
        let top = text(&ichnos(&[
            "report",
            "-i",
            perf_data.to_str().unwrap(),
            "--limit",
            "0",
        ]));
        let kernel_rows: Vec<&str> = top
            .lines()
            .filter(|l| l.ends_with(" [kernel.kallsyms]"))
            .collect();
        assert!(!kernel_rows.is_empty(), "{graph}: {top}");
        for row in kernel_rows {
            let words: Vec<&str> = row.split_whitespace().collect();
            let (name, share) = (words[4], ours[words[4]]);
            let perf_share = theirs.get(name).copied().unwrap_or(0.0);
            assert!(
                (share - perf_share).abs() <= 1.0,
                "{graph}: {name}: ichnos {share:.2}%, perf {perf_share:.2}% ({theirs:?})"
            );
        }
        assert!(ours["read_zero"] > 40.0, "{graph}: {ours:?}");

        // The kernel's text moved by 2 MiB in the file.
        let mut bytes = std::fs::read(&perf_data).unwrap();
        let name = b"[kernel.kallsyms]_text";
        let at = bytes
            .windows(name.len())
            .position(|w| w == name)
            .expect("the kernel's mapping");
        // MMAP: header, pid, tid, addr, len, then pgoff (the address of
        // _text) before the name.
        let pgoff = u64::from_le_bytes(bytes[at - 8..at].try_into().unwrap());
        bytes[at - 8..at].copy_from_slice(&(pgoff + (2 << 20)).to_le_bytes());
        let moved = dir.path().join(format!("{graph}-moved.data"));
        std::fs::write(&moved, &bytes).unwrap();
        let out = ichnos(&["report", "-i", moved.to_str().unwrap(), "--limit", "0"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            !text(&out).contains("[kernel.kallsyms]"),
            "{graph}: {}",
            text(&out)
        );
        let err = stderr(&out);
        assert!(
            err.contains("kernel frames of") && err.contains("another boot of this kernel"),
            "{graph}: {err}"
        );
    }
}

/// A `perf record -a` file's idle-CPU samples (the idle task, pid 0,
/// for which the kernel sends no name) are named `swapper` as perf names
/// them, and `--comm swapper` keeps the share `perf report --sort comm`
/// gives them. (They were nameless, and no --comm could pick them.)
#[test]
fn the_idle_task_of_a_perf_record_a_file_is_named_swapper() {
    let _perf = one_perf_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a.data");
    let out = Command::new("perf")
        .args([
            "record",
            "-q",
            "-a",
            "-g",
            "-e",
            "cpu-clock",
            "-F",
            "1000",
            "-o",
        ])
        .arg(&data)
        .args(["--", "sleep", "0.5"])
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
    let report = Command::new("perf")
        .args(["report", "--stdio", "--sort", "comm", "-g", "none", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let theirs: f64 = String::from_utf8_lossy(&report.stdout)
        .lines()
        .find(|l| l.trim_end().ends_with(" swapper"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|share| share.trim_end_matches('%').parse().ok())
        .expect("perf report names swapper");
    assert!(theirs > 5.0, "idle CPUs: {theirs}%");
    let top = text(&ichnos(&[
        "report",
        "-i",
        data.to_str().unwrap(),
        "--comm",
        "swapper",
    ]));
    let ours: f64 = top
        .lines()
        .find_map(|l| l.strip_prefix("# shown: "))
        .and_then(|l| l.split_once('(')?.1.split_once('%')?.0.parse().ok())
        .unwrap_or_else(|| panic!("{top}"));
    assert!(
        (ours - theirs).abs() <= 0.5,
        "ichnos {ours}%, perf {theirs}%"
    );
    let folded = folded(&data, &["--pid", "0"]);
    assert!(!folded.is_empty() && folded.iter().all(|(frames, _)| frames[0] == "swapper"));
}
