//! Thread exit, process exit and fork, each in a fresh process: this test
//! binary runs itself with a scenario name, and the scenario's flush
//! function prints one line per flush, which the parent checks.

use std::sync::OnceLock;

use ichnos_buf::fill::{FillBuffer, Flush};

const SCENARIO: &str = "ICHNOS_BUF_SCENARIO";

mod support;

/// Runs `scenario` in a child process and returns its flush lines.
fn run(scenario: &str) -> Vec<String> {
    let out = support::run_self("scenario_entry", SCENARIO, scenario);
    assert!(
        out.status.success(),
        "{scenario}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("flush "))
        .map(str::to_owned)
        .collect()
}

/// One line per flush: pid, whether the writer was the process's main
/// thread, reason, and the record numbers it carried.
fn buffer() -> FillBuffer {
    FillBuffer::trace(1024, print_flush).unwrap()
}

/// A ring of four 16-byte records, handed over at thread exit.
fn ring() -> FillBuffer {
    FillBuffer::circular_with_exit_flush(64, 16, print_flush).unwrap()
}

fn print_flush(f: &Flush<'_>) {
    {
        let records: Vec<String> = f
            .data
            .chunks(16)
            .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()).to_string())
            .collect();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let main = if f.tid == pid { "main" } else { "other" };
        let line = format!(
            "flush pid={pid} writer={main} reason={:?} records={}\n",
            f.reason,
            records.join(",")
        );
        // Straight to fd 1: the process may be inside exit().
        // SAFETY: `line` is a valid buffer of that length.
        unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
    }
}

fn write(buf: &FillBuffer, range: std::ops::Range<u64>) {
    for i in range {
        buf.write_with(16, |r| {
            r[..8].copy_from_slice(&i.to_le_bytes());
            r[8..].copy_from_slice(&(!i).to_le_bytes());
        })
        .unwrap();
    }
}

/// The buffer an `atexit` hook of a scenario writes to.
static AT_EXIT: OnceLock<FillBuffer> = OnceLock::new();

/// An `atexit` hook that writes records 10 and 11.
extern "C" fn write_at_exit() {
    if let Some(buf) = AT_EXIT.get() {
        write(buf, 10..12);
    }
}

/// The child half of the scenarios, which `support::run_self` runs in a
/// fresh process: not a test of its own, so ignored by a plain run.
#[test]
#[ignore = "the child process of the scenario tests, run by them"]
fn scenario_entry() {
    let scenario = std::env::var(SCENARIO)
        .expect("run by the scenario tests in a child process, with the scenario named");
    let buf = if scenario.starts_with("ring") {
        ring()
    } else {
        buffer()
    };
    match scenario.as_str() {
        // A ring's newest four records, oldest first, when its thread
        // exits, and when the main thread's exit() runs its destructors.
        "ring-thread-exit" => {
            let b = buf.clone();
            std::thread::spawn(move || write(&b, 0..10)).join().unwrap();
            write(&buf, 20..22);
            std::process::exit(0);
        }
        // A process that ends without its hooks calls flush_at_exit: it
        // hands over this thread's records and a running thread's, and
        // records written later are dropped.
        "flush-at-exit" => {
            let b = buf.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                write(&b, 0..3);
                tx.send(()).unwrap();
                loop {
                    std::thread::park();
                }
            });
            rx.recv().unwrap();
            write(&buf, 10..12);
            ichnos_buf::fill::flush_at_exit();
            // Written after the last flush: exit()'s own hooks, which run
            // next, must not hand it over (nor anything twice).
            write(&buf, 99..100);
            std::process::exit(0);
        }
        "main-exit-hooks" => exit_hooks_in_a_forked_main_thread(&buf),
        "other-thread-exit-hooks" => exit_hooks_on_another_thread(&buf),
        // The writing thread is the one that calls exit().
        "exit" => {
            write(&buf, 0..10);
            std::process::exit(0);
        }
        "thread-exit" => {
            let b = buf.clone();
            std::thread::spawn(move || write(&b, 0..10)).join().unwrap();
            std::process::exit(0);
        }
        // A thread still running at exit: what it committed is flushed.
        "running-thread" => {
            let b = buf.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                write(&b, 0..10);
                tx.send(()).unwrap();
                loop {
                    std::thread::park();
                }
            });
            rx.recv().unwrap();
            std::process::exit(0);
        }
        "fork" => {
            write(&buf, 0..5);
            // SAFETY: the child only writes records and exits.
            let child = unsafe { libc::fork() };
            if child == 0 {
                write(&buf, 100..103);
                std::process::exit(0);
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(child, &raw mut status, 0) };
            write(&buf, 5..7);
            std::process::exit(0);
        }
        // Fork again and again while another thread writes and flushes;
        // the child must not deadlock on the registry or re-emit records.
        "fork-during-flush" => {
            let b = buf.clone();
            let t = std::thread::spawn(move || {
                for round in 0..200u64 {
                    write(&b, round * 100..round * 100 + 70);
                }
            });
            for _ in 0..20 {
                // SAFETY: the child writes a record and exits at once.
                let child = unsafe { libc::fork() };
                if child == 0 {
                    write(&buf, 900_000..900_001);
                    std::process::exit(0);
                }
                let mut status = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(child, &raw mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            }
            t.join().unwrap();
            std::process::exit(0);
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// The main thread's records, and those an `atexit` hook writes after
/// `exit()` has run the main thread's TLS destructors. (The harness runs the
/// scenario on a thread of its own: the child of a fork has the forking
/// thread as its main thread.)
fn exit_hooks_in_a_forked_main_thread(buf: &FillBuffer) -> ! {
    // SAFETY: the child writes records and exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        write(buf, 0..3);
        let _ = AT_EXIT.set(buf.clone());
        // SAFETY: registering a hook without arguments.
        unsafe { libc::atexit(write_at_exit) };
        std::process::exit(0);
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    std::process::exit(0);
}

/// A thread other than the main one calls `exit()` (the harness runs the
/// scenario on a thread of its own), saying so first: what an `atexit`
/// hook writes on it after `exit()` has run its TLS destructors still arrives.
fn exit_hooks_on_another_thread(buf: &FillBuffer) -> ! {
    write(buf, 0..3);
    let _ = AT_EXIT.set(buf.clone());
    // SAFETY: registering a hook without arguments.
    unsafe { libc::atexit(write_at_exit) };
    ichnos_buf::fill::before_exit();
    std::process::exit(0);
}

fn records(line: &str) -> &str {
    line.rsplit("records=").next().unwrap()
}

#[test]
fn exit_flushes_the_exiting_thread() {
    let lines = run("exit");
    assert_eq!(lines.len(), 1, "flushed exactly once: {lines:?}");
    // glibc's exit() runs the calling thread's TLS destructors before the
    // atexit hooks, so the thread-exit flush may be the one that runs.
    assert!(
        lines[0].contains("reason=ProcessExit") || lines[0].contains("reason=ThreadExit"),
        "{lines:?}"
    );
    assert_eq!(records(&lines[0]), "0,1,2,3,4,5,6,7,8,9");
}

#[test]
fn the_main_thread_keeps_its_buffer_for_the_exit_hooks() {
    let lines = run("main-exit-hooks");
    assert_eq!(lines.len(), 1, "flushed exactly once: {lines:?}");
    assert!(
        lines[0].contains("writer=main reason=ProcessExit"),
        "{lines:?}"
    );
    assert_eq!(records(&lines[0]), "0,1,2,10,11", "{lines:?}");
}

#[test]
fn a_thread_about_to_exit_keeps_its_buffer_for_the_exit_hooks() {
    let lines = run("other-thread-exit-hooks");
    assert_eq!(lines.len(), 1, "flushed exactly once: {lines:?}");
    assert!(
        lines[0].contains("writer=other reason=ProcessExit"),
        "{lines:?}"
    );
    assert_eq!(records(&lines[0]), "0,1,2,10,11", "{lines:?}");
}

#[test]
fn flush_at_exit_hands_over_every_thread_for_a_process_that_skips_its_hooks() {
    let mut lines = run("flush-at-exit");
    lines.sort();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("reason=ProcessExit")),
        "{lines:?}"
    );
    let mut carried: Vec<&str> = lines.iter().map(|l| records(l)).collect();
    carried.sort_unstable();
    // The record written after it is not there.
    assert_eq!(carried, ["0,1,2", "10,11"], "{lines:?}");
}

#[test]
fn thread_exit_flushes_once_and_exit_does_not_repeat_it() {
    let lines = run("thread-exit");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("writer=other reason=ThreadExit"),
        "{lines:?}"
    );
    assert_eq!(records(&lines[0]), "0,1,2,3,4,5,6,7,8,9");
}

#[test]
fn a_ring_is_handed_over_oldest_first_when_its_thread_exits() {
    let lines = run("ring-thread-exit");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("writer=other reason=ThreadExit"),
        "{lines:?}"
    );
    assert_eq!(records(&lines[0]), "6,7,8,9");
    // (The scenario runs on the test harness's thread, not the main one.)
    assert!(lines[1].contains("reason=ThreadExit"), "{lines:?}");
    assert_eq!(records(&lines[1]), "20,21");
}

#[test]
fn exit_flushes_threads_still_running() {
    let lines = run("running-thread");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("writer=other reason=ProcessExit"),
        "{lines:?}"
    );
    assert_eq!(records(&lines[0]), "0,1,2,3,4,5,6,7,8,9");
}

#[test]
fn fork_child_starts_empty_and_parent_records_are_flushed_once() {
    let lines = run("fork");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let pid_of = |l: &str| l.split_whitespace().nth(1).unwrap().to_owned();
    // The child exits first (the parent waits for it).
    assert_eq!(
        records(&lines[0]),
        "100,101,102",
        "the child has only its own records"
    );
    assert_eq!(records(&lines[1]), "0,1,2,3,4,5,6");
    assert_ne!(pid_of(&lines[0]), pid_of(&lines[1]));
}

#[test]
fn fork_while_another_thread_flushes_does_not_deadlock() {
    let lines = run("fork-during-flush");
    let children = lines.iter().filter(|l| records(l) == "900000").count();
    assert_eq!(
        children, 20,
        "every child flushed its one record: {lines:?}"
    );
    // The parent's other thread delivered all its records exactly once.
    let parent: Vec<u64> = lines
        .iter()
        .filter(|l| records(l) != "900000")
        .flat_map(|l| {
            records(l)
                .split(',')
                .map(|n| n.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let want: Vec<u64> = (0..200u64).flat_map(|r| r * 100..r * 100 + 70).collect();
    assert_eq!(parent, want);
}
