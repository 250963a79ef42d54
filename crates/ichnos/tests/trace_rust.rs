//! A Rust program's probes and named spans (the `ichnos-probe` crate),
//! traced by `ichnos trace`: this test binary runs itself under it, as
//! the traced program, and checks the replay against what it did.
//!
//! Run by cargo as a test without the harness: `main` is the test, and
//! the traced run is told apart by an environment variable.

use std::path::Path;
use std::process::Command;

/// Set for the run under `ichnos trace`.
const TRACED: &str = "ICHNOS_PROBE_TEST_TRACED";

/// The traced program: two spans, one inside the other, a probe in the
/// inner one, and a span on a second thread.
fn traced_program() {
    assert!(ichnos_probe::traced(), "the runtime is not loaded");
    {
        let _outer = ichnos_probe::span!("outer");
        ichnos_probe::probe!(7, 1);
        for i in 0..3 {
            let _inner = ichnos_probe::span!("inner");
            ichnos_probe::probe!(8, i);
        }
    }
    std::thread::spawn(|| {
        let _span = ichnos_probe::span!("on a thread");
    })
    .join()
    .unwrap();
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn main() {
    if std::env::var_os(TRACED).is_some() {
        traced_program();
        return;
    }
    // Untraced, the same calls find no runtime and do nothing.
    assert!(!ichnos_probe::traced());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("t.data");
    let ichnos = Path::new(env!("CARGO_BIN_EXE_ichnos"));
    run(Command::new(ichnos)
        .args(["trace", "-o"])
        .arg(&data)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .env(TRACED, "1"));
    let replay = run(Command::new(ichnos).args(["replay", "-i"]).arg(&data));
    let lines: Vec<&str> = replay
        .lines()
        .skip(1)
        .map(|l| l.split_once(" | ").unwrap().1)
        .collect();
    let inner = |i: u64| {
        [
            "  inner() {".to_owned(),
            format!("    /* probe 8 = {i} */"),
            "  } /* inner */".to_owned(),
        ]
    };
    let mut expected = vec!["outer() {".to_owned(), "  /* probe 7 = 1 */".to_owned()];
    for i in 0..3 {
        expected.extend(inner(i));
    }
    expected.push("} /* outer */".to_owned());
    let main_thread: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.contains("on a thread"))
        .collect();
    assert_eq!(main_thread, expected, "{replay}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("on a thread")).count(),
        1,
        "{replay}"
    );
    assert!(lines.contains(&"on a thread();"), "{replay}");
    println!("trace_rust: ok");
}
