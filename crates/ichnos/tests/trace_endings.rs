//! `ichnos trace` of a program that a signal ends: Ctrl-C, SIGTERM to the
//! program, a signal arriving while the program makes calls without
//! pause; signals the program was started with ignored stay so, and the
//! program sees the default action where the runtime's handler stands in
//! for it; a process SIGKILL ends is named as one whose last buffers are
//! missing.

use std::process::Command;
use std::time::Duration;

mod trace_support;

use trace_support::*;

/// `ichnos trace` of `stopped` (CALLS calls on each of two threads,
/// buffers far from full), with `args`; the recorder, and the pid the
/// fixture prints once its calls are made.
fn trace_stopped(dir: &std::path::Path, args: &[&str], calls: u64) -> (std::process::Child, u32) {
    let exe = build(dir, "stopped.c", &["-pthread"]);
    spawn_reading_pid(
        ichnos()
            .arg("trace")
            .args(args)
            .arg("-o")
            .arg(dir.join("t.data"))
            .arg("--")
            .arg(&exe)
            .arg(calls.to_string()),
    )
}

/// Ctrl-C while the program runs: it is passed SIGINT, and the calls its
/// threads made before, which no buffer had filled up to hand over, are
/// all in the trace. (They were all lost: the program died of SIGINT
/// with nothing handed over.)
#[test]
fn ctrl_c_keeps_the_calls_the_buffers_held() {
    let dir = tempfile::tempdir().unwrap();
    let (recorder, pid) = trace_stopped(dir.path(), &[], 1000);
    let (out, _) = interrupt(recorder, Some(pid));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 2), "{stderr}");
    assert!(stderr.contains("0 lost"), "{stderr}");
    let counts = calls(dir.path(), "t.data");
    assert_eq!(counts.get("work"), Some(&1000), "{counts:?}");
    assert_eq!(counts.get("side"), Some(&1000), "{counts:?}");
}

/// SIGTERM sent to the program itself, in the full trace and in the
/// flight recorder: the calls are saved and the program dies of the
/// signal. SIGHUP, which the program was started with ignored, stays
/// ignored: the program runs on after one.
#[test]
fn a_program_ended_by_sigterm_keeps_its_trace_and_ignored_signals_stay_ignored() {
    let dir = tempfile::tempdir().unwrap();
    for ring in [false, true] {
        let args: &[&str] = if ring { &["--ring", "64K"] } else { &[] };
        let exe = build(dir.path(), "stopped.c", &["-pthread"]);
        let (recorder, pid) = spawn_reading_pid(
            Command::new("sh")
                .arg("-c")
                .arg("trap '' HUP; exec \"$@\"")
                .arg("sh")
                .arg(env!("CARGO_BIN_EXE_ichnos"))
                .arg("trace")
                .args(args)
                .arg("-o")
                .arg(dir.path().join("t.data"))
                .arg("--")
                .arg(&exe)
                .arg("1000"),
        );
        let unwaited = KilledAtEnd(recorder.id());
        let program = KilledAtEnd(pid);
        assert!(send("HUP", pid));
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            send("0", pid),
            "ring {ring}: SIGHUP, ignored, ended the program"
        );
        assert!(send("TERM", pid));
        let out = recorder.wait_with_output().unwrap();
        std::mem::forget(unwaited);
        // Reaped by the recorder: its pid may be another's now.
        std::mem::forget(program);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + 15), "ring {ring}: {stderr}");
        let counts = calls(dir.path(), "t.data");
        assert_eq!(counts.get("work"), Some(&1000), "ring {ring}: {counts:?}");
        assert_eq!(counts.get("side"), Some(&1000), "ring {ring}: {counts:?}");
    }
}

/// SIGTERM to a program whose two threads make calls without pause, so
/// that it lands, as often as not, inside the runtime's write of an event
/// on the thread it is delivered to, or on the other: every call each
/// thread counted (in a file the program maps) before the signal was sent
/// is in the trace, five times over. (A buffer with a write open was left
/// out of the save, with its last calls, and the thread the signal
/// interrupted mid-write waited for a save that could not take its
/// buffer.) Calls made after the signal, until the process ends, may be
/// in it or not.
#[test]
fn sigterm_amid_calls_keeps_every_threads_calls() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "busy.c", &["-pthread"]);
    let counts_file = dir.path().join("counts");
    let counted = |i: usize| {
        let bytes = std::fs::read(&counts_file).unwrap();
        u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap())
    };
    for round in 0..5 {
        let (recorder, pid) = spawn_reading_pid(
            ichnos()
                .args(["trace", "-o"])
                .arg(dir.path().join("t.data"))
                .arg("--")
                .arg(&exe)
                .arg(&counts_file),
        );
        let unwaited = KilledAtEnd(recorder.id());
        let program = KilledAtEnd(pid);
        let pid = pid.cast_signed();
        std::thread::sleep(Duration::from_millis(200));
        // Read, then the signal at once (not through kill(1), whose start
        // takes long enough for thousands of calls).
        let before = [counted(0), counted(1)];
        // SAFETY: kill has no preconditions.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let out = recorder.wait_with_output().unwrap();
        std::mem::forget(unwaited);
        // Reaped by the recorder: its pid may be another's now.
        std::mem::forget(program);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + 15), "round {round}: {stderr}");
        let traced = calls(dir.path(), "t.data");
        for (i, function) in ["step_a", "step_b"].into_iter().enumerate() {
            let n = traced.get(function).copied().unwrap_or(0);
            let after = counted(i);
            assert!(
                n >= before[i] && n <= after + 1,
                "round {round}: {function}: {n} traced, {} counted before the signal, {after} \
                 at the end: {stderr}",
                before[i]
            );
        }
    }
}

/// The runtime's handlers of the signals that end a program are not what
/// the program finds: `sigaction`, `signal` (and `bsd_signal`,
/// `sysv_signal`, `sigset`, `ssignal`) report the default action
/// it had, as the program run alone finds it; `CPython`, which installs its
/// `KeyboardInterrupt` handler only over the default, installs it. (They
/// reported a handler, and `CPython` left SIGINT to it: Ctrl-C killed a
/// traced Python instead of raising `KeyboardInterrupt`.)
#[test]
fn the_program_finds_the_default_action_where_the_runtime_stands_in_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "dispositions.c", &[]);
    // Both started with SIGINT's default action (a shell's `&` would
    // have it ignored, which ichnos keeps).
    let mut alone = Command::new(&exe);
    default_endings(&mut alone);
    let alone = run(&mut alone);
    assert_eq!(
        String::from_utf8_lossy(&alone.stdout),
        "SIGINT default\nSIGTERM default\nSIGHUP default\nSIGQUIT default\n\
         SIGUSR1 default\nSIGALRM default\n"
    );
    let traced = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    assert!(
        traced.status.success(),
        "{}",
        String::from_utf8_lossy(&traced.stderr)
    );
    assert_eq!(traced.stdout, alone.stdout);
    assert_eq!(calls(dir.path(), "t.data").get("work"), Some(&1));
    // The action found put back (as readline does around its own
    // handlers): the runtime's handler is back, and SIGTERM raised then
    // saves the trace. (The default was put back, and the calls lost.)
    let raised = trace(dir.path(), "r.data", &[], &[exe.to_str().unwrap(), "raise"]);
    assert_eq!(
        raised.status.code(),
        Some(128 + 15),
        "{}",
        String::from_utf8_lossy(&raised.stderr)
    );
    assert_eq!(calls(dir.path(), "r.data").get("work"), Some(&2));
    // Started with SIGINT ignored (as a shell's `&` starts it), ichnos
    // starts the command so, traced or recorded, as it would run alone.
    for command in ["trace", "record"] {
        let mut sh = Command::new("sh");
        default_endings(&mut sh);
        let out = run(sh
            .arg("-c")
            .arg("trap '' INT; exec \"$@\"")
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_ichnos"))
            .args([command, "-o"])
            .arg(dir.path().join("i.data"))
            .arg("--")
            .arg(&exe));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "SIGINT ignored\nSIGTERM default\nSIGHUP default\nSIGQUIT default\n\
             SIGUSR1 default\nSIGALRM default\n",
            "{command}"
        );
    }
    // CPython decides by what it finds.
    let script =
        "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)";
    let mut alone = Command::new("python3");
    default_endings(alone.args(["-c", script]));
    let alone = run(&mut alone);
    assert_eq!(String::from_utf8_lossy(&alone.stdout), "True\n");
    let traced = trace(dir.path(), "p.data", &[], &["python3", "-c", script]);
    assert_eq!(String::from_utf8_lossy(&traced.stdout), "True\n");
}

/// A process killed by SIGKILL (which no handler sees) never hands its
/// threads' buffers over: the trace names it, and only it (its parent,
/// which ended as programs do, is not named, and its calls are whole). A
/// trace left without a call says why: its calls were never handed over
/// (it said "is the program built with -finstrument-functions?", and "0
/// lost", of a program that made 1,000 calls).
#[test]
fn a_process_killed_outright_is_named_as_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "process_ends.c", &[]);
    let exe = exe.to_str().unwrap();
    let out = trace_cut_short(dir.path(), "t.data", &[], &[exe]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let child: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let noted: Vec<&str> = stderr.lines().filter(|l| l.contains(CUT_SHORT)).collect();
    assert_eq!(noted.len(), 1, "{stderr}");
    assert!(
        noted[0].starts_with(&format!("note: process {child} {CUT_SHORT}")),
        "{stderr}"
    );
    let calls = calls(dir.path(), "t.data");
    assert_eq!(calls.get("step"), Some(&10), "{calls:?}");
    assert_eq!(calls.get("main"), Some(&1), "{calls:?}");
    // The recording says it too: its readers warn.
    let replayed = ichnos()
        .args(["replay", "-i"])
        .arg(dir.path().join("t.data"))
        .output()
        .unwrap();
    assert!(replayed.status.success());
    assert!(
        String::from_utf8_lossy(&replayed.stderr).contains(&format!(
            "warning: process {child} ended before the tracing runtime handed over"
        )),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );

    let out = trace_cut_short(dir.path(), "s.data", &[], &[exe, "self"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGKILL), "{stderr}");
    assert!(stderr.contains(CUT_SHORT), "{stderr}");
    assert!(
        stderr.contains(
            "note: no function was traced: what was called was never handed over (the process \
             ended first: above)"
        ),
        "{stderr}"
    );
}

/// A process that closes the runtime's socket (as a child that closes
/// every descriptor before it executes another program does) and runs on
/// is not taken for one killed: its connection ends while it runs.
#[test]
fn a_process_that_closes_the_runtimes_socket_is_not_taken_for_killed() {
    let dir = tempfile::tempdir().unwrap();
    let calls = process_ends(dir.path(), "closes", 0);
    assert_eq!(calls.get("step"), Some(&10), "{calls:?}");
}

/// A process that closes every descriptor but the standard ones (the
/// runtime's socket with them), as daemons do, and runs on is traced to
/// its end: its runtime writes on into the shared buffer, which the
/// recorder reads until the process ends. Its calls after the close
/// were all lost, several buffers' worth. Its last word goes in the
/// buffer: a normal end, or an exec of a program whose runtime connects
/// anew, is not taken for cut short; SIGKILL still is.
#[test]
fn a_process_that_closes_the_runtimes_socket_and_runs_on_is_traced_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let counts = process_ends_with(dir.path(), &["runs-on", "exit"], 0);
    assert_eq!(counts.get("step"), Some(&20_010), "{counts:?}");
    assert_eq!(process_records(&dir.path().join("t.data")), "P C+ E");
    let counts = process_ends_with(dir.path(), &["runs-on", "exec"], 0);
    assert_eq!(counts.get("step"), Some(&20_017), "{counts:?}");
    // The first program's calls and end come before the second's start,
    // as at an exec of a process that kept its socket: its connection is
    // read to the end and ended (not cut short) before the new hello.
    assert_eq!(
        process_records(&dir.path().join("t.data")),
        "P C+ E P C+ E",
        "Process, Calls, Exit records in order"
    );

    let exe = build(dir.path(), "process_ends.c", &[]);
    let out = trace_cut_short(
        dir.path(),
        "k.data",
        &[],
        &[exe.to_str().unwrap(), "runs-on", "kill"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 9), "{stderr}");
    assert!(stderr.contains(CUT_SHORT), "{stderr}");
    // What the full buffers handed over before the kill is there.
    let kept = calls(dir.path(), "k.data")
        .get("step")
        .copied()
        .unwrap_or(0);
    assert!((10_000..20_010).contains(&kept), "{kept} calls kept");
    assert_eq!(process_records(&dir.path().join("k.data")), "P C+ E!");
}

/// The recorder's socket is reached by an absolute path: a child forked
/// after its parent changed directory (as daemons do) connects though
/// the socket's directory was given relative (`XDG_RUNTIME_DIR=rt`); it
/// could not ("cannot reach the recorder"), and ran untraced.
#[test]
fn a_child_forked_after_a_change_of_directory_reaches_the_recorder() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "process_ends.c", &[]);
    std::fs::create_dir(dir.path().join("rt")).unwrap();
    let out = ichnos()
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", "rt")
        .args(["trace", "-o", "t.data", "--"])
        .arg(&exe)
        .arg("chdir-fork")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("2 processes"), "{stderr}");
    let counts = calls(dir.path(), "t.data");
    assert_eq!(counts.get("step"), Some(&8), "{counts:?}");
}

/// The recording's `Process` (P), `Calls` (C) and `Exit` (E) records in
/// order, a run of `Calls` as `C+`, an `Exit` flagged cut short as `E!`.
fn process_records(data: &std::path::Path) -> String {
    let bytes = std::fs::read(data).unwrap();
    let mut reader = ichnos_data::Reader::new(&bytes[..]).unwrap();
    let mut seen: Vec<&str> = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            let kind = match record.unwrap() {
                ichnos_data::Record::Process { .. } => "P",
                ichnos_data::Record::Calls(_) => "C+",
                ichnos_data::Record::Exit { flags, .. } if flags != 0 => "E!",
                ichnos_data::Record::Exit { .. } => "E",
                _ => continue,
            };
            if !(kind == "C+" && seen.last() == Some(&"C+")) {
                seen.push(kind);
            }
        }
    }
    seen.join(" ")
}

/// `process_ends` traced in `mode`: it exits with `code`, none of its
/// processes taken for cut short (as `trace` checks); its calls per
/// function.
fn process_ends(
    dir: &std::path::Path,
    mode: &str,
    code: i32,
) -> std::collections::HashMap<String, u64> {
    process_ends_with(dir, &[mode], code)
}

/// [`process_ends`] with the arguments `args`.
fn process_ends_with(
    dir: &std::path::Path,
    args: &[&str],
    code: i32,
) -> std::collections::HashMap<String, u64> {
    let exe = build(dir, "process_ends.c", &[]);
    let command: Vec<&str> = std::iter::once(exe.to_str().unwrap())
        .chain(args.iter().copied())
        .collect();
    let out = trace(dir, "t.data", &[], &command);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    calls(dir, "t.data")
}

/// `quick_exit` ends the process through the C library's own `_exit`,
/// past the runtime's wrapper: the runtime's `at_quick_exit` hook hands
/// the trace over (the calls were lost, and the process taken for one
/// killed), after the program's own hook (whose call is kept).
#[test]
fn quick_exit_keeps_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let calls = process_ends(dir.path(), "quick", 3);
    assert_eq!(calls.get("step"), Some(&11), "{calls:?}");
    assert_eq!(calls.get("last_step"), Some(&1), "{calls:?}");
}

/// `daemon` ends the parent inside the C library, through its own
/// `_exit`: the runtime's `daemon` does what the C library's does, the
/// parent's end through the runtime's `_exit`, so the parent's calls
/// before it are kept (they were lost, and the parent taken for one
/// killed), and the daemon's after it (traced to its end).
#[test]
fn a_daemon_keeps_its_parents_calls() {
    let dir = tempfile::tempdir().unwrap();
    let calls = process_ends(dir.path(), "daemon", 0);
    assert_eq!(calls.get("step"), Some(&15), "{calls:?}");
    let exe = build(dir.path(), "process_ends.c", &[]);

    // The daemon it makes is the C library's daemon's: run untraced (the
    // C library's) and traced (the runtime's), each started with the same
    // standard streams, the same directory, session and streams, whichever
    // of `nochdir` and `noclose` is asked (swapped, they differ).
    let made = |traced: bool, nochdir: &str, noclose: &str| {
        let file = dir.path().join(format!("made-{traced}-{nochdir}{noclose}"));
        let args = [
            exe.to_str().unwrap(),
            "detach",
            file.to_str().unwrap(),
            nochdir,
            noclose,
        ];
        let out = if traced {
            trace(dir.path(), "d.data", &[], &args)
        } else {
            Command::new(args[0]).args(&args[1..]).output().unwrap()
        };
        assert!(out.status.success(), "{out:?}");
        // The daemon writes once its parent has ended (the recorder waits
        // for it; a run untraced does not).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if text.contains("fd 2") || std::time::Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let here = std::env::current_dir().unwrap();
    for (nochdir, noclose, cwd, null) in [("1", "0", here.to_str().unwrap(), 1), ("0", "1", "/", 0)]
    {
        let untraced = made(false, nochdir, noclose);
        // Standard input is /dev/null in both runs (as `output` sets it).
        assert_eq!(
            untraced,
            format!(
                "cwd {cwd}\nsession leader 1\nfd 0 null 1\nfd 1 null {null}\nfd 2 null {null}\n"
            )
        );
        assert_eq!(made(true, nochdir, noclose), untraced);
    }
}

/// A program started with its standard streams closed, which makes
/// `/dev/null` of them (`dup2`, as `daemon` does): the runtime's socket
/// is not among the numbers it writes over (it took 0, the program's
/// `dup2` closed it, and every call was lost).
#[test]
fn a_program_started_without_standard_streams_keeps_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "stdio_closed.c", &[]);
    let command = format!("exec 0<&- 1>&- 2>&- '{}'", exe.display());
    let out = trace(dir.path(), "t.data", &[], &["sh", "-c", &command]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = calls(dir.path(), "t.data");
    assert_eq!(calls.get("step"), Some(&15), "{calls:?}");
}
