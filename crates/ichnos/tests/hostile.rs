//! The command line over a corpus of hostile and mistaken inputs, each run
//! under a time and a memory bound: FIFOs, devices and directories where
//! files are expected, truncated and damaged ELF files. Each must end with
//! the exit code of docs/cli.md and a message that names what was wrong,
//! never a hang, a signal or a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const ICHNOS: &str = env!("CARGO_BIN_EXE_ichnos");

/// Most time one case may take.
const TIME_BOUND: Duration = Duration::from_secs(20);
/// Most address space one case may use (bytes; `prlimit --as`).
const MEMORY_BOUND: u64 = 2 << 30;

/// Runs ichnos with `args` under the bounds, standard input from `stdin`
/// (or nothing).
fn bounded(args: &[&str], stdin: Option<&Path>) -> Output {
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--as={MEMORY_BOUND}"))
        .arg("--")
        .arg(ICHNOS)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match stdin {
        Some(path) => cmd.stdin(std::fs::File::open(path).unwrap()),
        None => cmd.stdin(Stdio::null()),
    };
    let mut child = cmd.spawn().expect("prlimit runs (util-linux)");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if started.elapsed() > TIME_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ichnos {args:?} ran past {TIME_BOUND:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that `out` exited with `code` (not a signal, not a panic) and
/// that standard error says each of `wanted`.
fn ends(out: &Output, code: i32, wanted: &[&str], case: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{case}: {err}");
    assert!(!err.contains("panicked"), "{case}: {err}");
    for w in wanted {
        assert!(err.contains(w), "{case}: wanted {w:?} in {err:?}");
    }
}

/// The hostile files: (name, path, what a message says of it besides its
/// path; for damaged ELF files the parser's wording varies, and the
/// message is held to naming the file, which their names are part of).
fn corpus(dir: &Path) -> Vec<(&'static str, PathBuf, &'static str)> {
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let junk = dir.join("junk");
    std::fs::write(
        &junk,
        b"\x7fELF\x02\x01\x01 and then nothing an ELF file holds",
    )
    .unwrap();
    // A real ELF file cut in the middle of its program headers, and one
    // whose section headers point past its end.
    let elf = std::fs::read("/bin/true").unwrap();
    let cut = dir.join("cut");
    std::fs::write(&cut, &elf[..100]).unwrap();
    let mut far = elf.clone();
    far[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes()); // e_shoff
    let far_path = dir.join("far");
    std::fs::write(&far_path, &far).unwrap();
    vec![
        ("FIFO", fifo, "a FIFO, not a regular file"),
        (
            "directory",
            dir.to_path_buf(),
            "a directory, not a regular file",
        ),
        (
            "/dev/null",
            PathBuf::from("/dev/null"),
            "a character device, not a regular file",
        ),
        ("empty file", empty, "empty"),
        ("junk ELF", junk, "junk"),
        ("truncated ELF", cut, "cut"),
        ("section headers past the end", far_path, "far"),
    ]
}

#[test]
fn files_that_are_not_objects_are_refused_by_name_and_never_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    for (name, path, says) in corpus(dir.path()) {
        let p = path.to_str().unwrap();
        for args in [
            vec!["image", "--elf", p],
            vec!["symbolize", "-e", p, "0x1000"],
        ] {
            let out = bounded(&args, None);
            let case = format!("{name}: {args:?}");
            if name == "section headers past the end" {
                // The program headers are sound: image reads them, and
                // the symbolizer names what it cannot (a clean exit
                // either way).
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    matches!(out.status.code(), Some(0 | 1)),
                    "{case}: {:?} {err}",
                    out.status
                );
                assert!(!err.contains("panicked"), "{case}: {err}");
                continue;
            }
            ends(&out, 1, &[p, says], &case);
        }
    }
}

#[test]
fn recordings_that_are_not_files_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (name, path, says) in corpus(dir.path()).into_iter().take(3) {
        let p = path.to_str().unwrap();
        let out = bounded(&["report", "-i", p], None);
        ends(&out, 1, &[p, says], name);
    }
}

/// Runs ichnos with `args`, its standard error (and output, with
/// `stdout_too`) a pipe whose reader is gone before it writes.
fn with_closed_pipes(args: &[&str], stdout_too: bool) -> std::process::ExitStatus {
    let mut cmd = Command::new(ICHNOS);
    cmd.args(args).stdin(Stdio::null()).stderr(Stdio::piped());
    if stdout_too {
        cmd.stdout(Stdio::piped());
    } else {
        cmd.stdout(Stdio::null());
    }
    let mut child = cmd.spawn().unwrap();
    drop(child.stderr.take());
    drop(child.stdout.take());
    child.wait().unwrap()
}

/// Runs ichnos with `args`, standard error (and output) the full device.
fn with_full_device(args: &[&str], stdout_too: bool) -> std::process::ExitStatus {
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let mut cmd = Command::new(ICHNOS);
    cmd.args(args).stdin(Stdio::null()).stderr(full());
    if stdout_too {
        cmd.stdout(full());
    } else {
        cmd.stdout(Stdio::null());
    }
    cmd.status().unwrap()
}

#[test]
fn a_closed_or_full_standard_error_is_no_panic() {
    // An error to report (exit 1), and a success with a note on stderr.
    let missing = ["symbolize", "-e", "/nonexistent/ichnos", "0x1000"];
    for status in [
        with_closed_pipes(&missing, false),
        with_full_device(&missing, false),
    ] {
        assert_eq!(status.code(), Some(1), "{status:?}");
    }
    let exe = std::env::current_exe().unwrap();
    let listed = ["image", "--elf", exe.to_str().unwrap()];
    assert_eq!(with_closed_pipes(&listed, false).code(), Some(0));
    assert_eq!(with_full_device(&listed, false).code(), Some(0));
    // Output that cannot be written: a reader gone is the end of the
    // output (as for head), a full device an error.
    assert_eq!(with_closed_pipes(&listed, true).code(), Some(0));
    assert_eq!(with_full_device(&listed, true).code(), Some(1));
}

#[test]
fn standard_input_lines_that_are_not_addresses_are_answered_and_bounded() {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A good address, junk, a 10 MB line, then another good address: four
    // answers, in order, the junk ones as addr2line gives them.
    let input = dir.path().join("lines");
    let mut text = b"0x0\nzzz\n".to_vec();
    text.extend(std::iter::repeat_n(b'a', 10 << 20));
    text.extend(b"\n0x0\n");
    std::fs::write(&input, &text).unwrap();
    let out = bounded(&["symbolize", "-e", exe], Some(&input));
    ends(
        &out,
        0,
        &[
            "line 2: \"zzz\" is not a hex address",
            "line 3: longer than 4096 bytes",
        ],
        "junk lines",
    );
    let answers = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = answers.lines().collect();
    assert_eq!(lines.len(), 8, "{answers}");
    assert_eq!(&lines[2..6], ["??", "??:0", "??", "??:0"], "{answers}");
    assert_eq!(lines[0..2], lines[6..8], "{answers}");
    // The message does not echo the long line.
    assert!(
        out.stderr.len() < 4096,
        "{} bytes of messages",
        out.stderr.len()
    );
    // /dev/zero: one endless line. Memory stays small while it is read.
    let mut child = Command::new("prlimit")
        .arg(format!("--as={MEMORY_BOUND}"))
        .args(["--", ICHNOS, "symbolize", "-e", exe])
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "it ended early");
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        rss_kib < 100 << 10,
        "{rss_kib} KiB resident reading /dev/zero"
    );
}

/// A child that sleeps, killed when dropped.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleeper(script: &str) -> Sleeper {
    Sleeper(
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The first child of process `pid`, waited for.
fn child_of(pid: u32) -> u32 {
    for _ in 0..200 {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("process {pid} started no child");
}

#[test]
fn processes_that_cannot_be_read_say_why() {
    // A thread of another process: refused, the other left alone.
    let a = sleeper("exec sleep 30");
    let b = sleeper("exec sleep 30");
    let (pa, pb) = (a.0.id().to_string(), b.0.id().to_string());
    let out = bounded(&["stack", "-p", &pa, "--tid", &pb], None);
    ends(
        &out,
        1,
        &[&format!("thread {pb} is not a thread of process {pa}")],
        "foreign --tid",
    );
    let state = std::fs::read_to_string(format!("/proc/{pb}/status")).unwrap();
    assert!(!state.contains("(tracing stop)"), "{state}");

    // A zombie: its child exits and the parent, now sleep, never waits.
    let parent = sleeper("sleep 0 & exec sleep 30");
    let zombie = child_of(parent.0.id());
    for _ in 0..200 {
        let status = std::fs::read_to_string(format!("/proc/{zombie}/status")).unwrap();
        if status.contains("State:\tZ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let z = zombie.to_string();
    for args in [
        vec!["stack", "-p", &z],
        vec!["image", "-p", &z],
        vec!["symbolize", "-p", &z, "0x1000"],
    ] {
        let out = bounded(&args, None);
        ends(
            &out,
            1,
            &[&format!("process {z} is a zombie")],
            &format!("{args:?}"),
        );
    }

    // A kernel thread (kthreadd is process 2 on every Linux).
    for args in [vec!["stack", "-p", "2"], vec!["image", "-p", "2"]] {
        let out = bounded(&args, None);
        ends(
            &out,
            1,
            &["process 2 is a kernel thread"],
            &format!("{args:?}"),
        );
    }

    // A process another tracer holds: named, with its tracer.
    let held = sleeper("exec sleep 30");
    let t = held.0.id().to_string();
    let mut tracer = Command::new("python3")
        .args([
            "-c",
            "import ctypes, sys, time\n\
             libc = ctypes.CDLL(None)\n\
             assert libc.ptrace(16, int(sys.argv[1]), 0, 0) == 0\n\
             print('attached', flush=True)\n\
             time.sleep(30)",
            &t,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(tracer.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "attached");
    let out = bounded(&["stack", "-p", &t], None);
    let _ = tracer.kill();
    let _ = tracer.wait();
    ends(
        &out,
        1,
        &[
            &format!("is already traced by process {}", tracer.id()),
            "python3",
        ],
        "traced",
    );
}

#[test]
fn every_pid_option_takes_self() {
    let out = bounded(&["image", "-p", "self"], None);
    ends(&out, 0, &[], "image -p self");
    let out = bounded(&["symbolize", "-p", "self", "0x0"], None);
    ends(&out, 0, &[], "symbolize -p self");
    let out = bounded(&["stack", "-p", "self"], None);
    ends(&out, 1, &["cannot stop its own threads"], "stack -p self");
    let out = bounded(&["symbolize", "0x10"], None);
    ends(
        &out,
        2,
        &["--exe <FILE>|--pid <PID>"],
        "symbolize without -e or -p",
    );
}

#[test]
fn a_bias_that_overflows_is_named_as_one() {
    let exe = std::env::current_exe().unwrap();
    let spec = format!("{}:0xffffffffffff0000", exe.display());
    let out = bounded(&["image", "--elf", &spec], None);
    ends(
        &out,
        1,
        &[
            "a load bias of 0xffffffffffff0000 moves the segment at",
            "past the end of the address space",
        ],
        "bias",
    );
}
