//! `ichnos trace` of programs with signal handlers of their own: a
//! handler left by `siglongjmp` (a computation bounded by a timer) keeps
//! the thread's trace going, and the program finds the handlers it
//! installed, as it does untraced.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

mod trace_support;

use trace_support::*;

/// The functions of `timeouts.c`.
const TIMEOUTS_FUNCTIONS: [&str; 6] = ["main", "spin", "leaf", "on_alarm", "inner", "after"];

/// What a run of `timeouts` gave: the jumps it made, the calls per
/// function, and the events the trace says were lost.
struct Timeouts {
    jumps: u64,
    handled: u64,
    calls: HashMap<String, u64>,
    lost: u64,
}

impl Timeouts {
    /// Checks that `function` was called once per handler run, but for
    /// calls whose entries were lost (and counted so): a handler that
    /// interrupts a hook whose event did not fit the buffer, in the
    /// moment before the hook hands the buffer over, has its own events
    /// dropped (its writes would need the buffer handed over first).
    fn assert_once_per_handler(&self, function: &str) {
        let called = self.calls.get(function).copied().unwrap_or(0);
        assert!(
            called <= self.handled && called + self.lost >= self.handled,
            "{function}: {called} calls for {} handlers run, {} events lost\n{:?}",
            self.handled,
            self.lost,
            self.calls
        );
    }
}

/// `timeouts` traced with `args` (and `mode`).
fn timeouts(dir: &std::path::Path, args: &[&str], mode: &[&str]) -> Timeouts {
    let exe = build(dir, "timeouts.c", &[]);
    let mut command = vec![exe.to_str().unwrap()];
    command.extend_from_slice(mode);
    let out = trace(dir, "t.data", args, &command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let printed = String::from_utf8_lossy(&out.stdout);
    let counts: Vec<u64> = printed
        .split_whitespace()
        .map(|n| n.parse().unwrap_or_else(|e| panic!("{e}: {printed:?}")))
        .collect();
    let [jumps, handled] = counts[..] else {
        panic!("{printed:?}")
    };
    assert!(jumps >= 300 && handled >= jumps, "{printed}");
    let (calls, lost) = calls_and_lost(dir, "t.data");
    for name in calls.keys() {
        assert!(
            TIMEOUTS_FUNCTIONS.contains(&name.as_str()),
            "a function timeouts.c does not have: {name}\n{calls:?}"
        );
    }
    Timeouts {
        jumps,
        handled,
        calls,
        lost,
    }
}

/// A timer's handler that jumps out of the calls it interrupted, 300
/// times: every handler and every call after the last jump are in the
/// trace. (The thread's trace ended at the first jump that landed inside
/// a write, within the first few: `after` had no calls.)
#[test]
fn jumps_out_of_a_timers_handler_keep_the_trace_going() {
    let dir = tempfile::tempdir().unwrap();
    let run = timeouts(dir.path(), &[], &[]);
    assert_eq!(run.handled, run.jumps, "every handler jumps out");
    assert_eq!(run.calls.get("after"), Some(&1000), "{:?}", run.calls);
    assert_eq!(run.calls.get("main"), Some(&1), "{:?}", run.calls);
    run.assert_once_per_handler("on_alarm");
}

/// The same in a handler that first jumps to a place of its own (from a
/// function it calls), which leaves no handler, and returns every other
/// time: every one is in the trace, with its inner call, and so are the
/// calls after. (Had the jump inside closed the write the handler
/// interrupted, the write's own commit after the return would count it
/// twice, and the trace would stop there.)
#[test]
fn a_jump_that_stays_inside_the_handler_leaves_it_running() {
    let dir = tempfile::tempdir().unwrap();
    let run = timeouts(dir.path(), &[], &["nested"]);
    assert_eq!(run.calls.get("after"), Some(&1000), "{:?}", run.calls);
    run.assert_once_per_handler("on_alarm");
    run.assert_once_per_handler("inner");
}

/// A handler that ends the process with `_exit` or `exit` after its
/// calls, from inside (it never returns): what the thread's last buffer
/// held reaches the trace, the handler's own calls included. Runs of
/// each, since the handler interrupts a write of the hooks only part of
/// the time. (When it did, the buffer, with its write open, was not
/// handed over at the exit: no `after` call and little else.)
#[test]
fn a_handler_that_ends_the_process_keeps_the_last_buffer() {
    let dir = tempfile::tempdir().unwrap();
    for mode in ["exit", "exit-hooks", "exit", "exit-hooks", "exit"] {
        let run = timeouts(dir.path(), &["-b", "1M"], &[mode]);
        let after = run.calls.get("after").copied().unwrap_or(0);
        assert!(
            after <= 1000 && after + run.lost >= 1000,
            "{mode}: {after} calls of after, {} events lost\n{:?}",
            run.lost,
            run.calls
        );
        run.assert_once_per_handler("on_alarm");
    }
}

/// The flight recorder: the ring saved at the exit holds the last calls.
/// (The main thread's ring, saved by the main thread with its write open
/// for good, was left out: an empty trace.)
#[test]
fn a_flight_recorder_keeps_its_ring_after_jumps_out_of_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let run = timeouts(dir.path(), &["--ring", "1M"], &[]);
    assert_eq!(run.calls.get("after"), Some(&1000), "{:?}", run.calls);
}

/// What the program reads of the handlers it installed is what it
/// installed, traced as untraced (the runtime runs them through an entry
/// point of its own); a child of `vfork` that sets a default leaves its
/// parent's handler running (it cleared the runtime's record of it, which
/// the two share: gdb hung at its first `run`); an install that faults,
/// its fault's handler jumping out, leaves the next install free (the
/// install lock stayed with the thread that jumped: a second thread's
/// install waited for good); a handler installed to reset to the default
/// as it runs (`sysv_signal`) leaves the default, and SIGTERM raised then ends
/// the program with its trace saved. (The kernel's reset left the real
/// default, not the runtime's stand-in: the trace was lost.)
#[test]
fn handlers_the_program_installs_are_what_it_finds() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "handlers.c", &[]);
    let mut alone = Command::new(&exe);
    default_endings(&mut alone);
    let alone = alone.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&alone.stdout),
        "SIGUSR1 mine\nSIGHUP mine\nSIGWINCH with_info\nsiginfo ok\n\
         SIGUSR1 after vfork ran 1\ninstall after a faulting one made\n\
         SIGTERM counted 1, then default\n"
    );
    assert_eq!(alone.status.signal(), Some(libc::SIGTERM));
    let traced = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&traced.stdout),
        String::from_utf8_lossy(&alone.stdout)
    );
    assert_eq!(
        traced.status.code(),
        Some(128 + libc::SIGTERM),
        "{}",
        String::from_utf8_lossy(&traced.stderr)
    );
    let calls = calls(dir.path(), "t.data");
    assert_eq!(calls.get("work"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("counting"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("with_info"), Some(&1), "{calls:?}");
}
