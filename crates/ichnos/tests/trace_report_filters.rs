//! `ichnos report --trace -F/-N/-D`: the calls of a whole trace that
//! `ichnos trace` with the same options would have recorded, in the table
//! and in the exports. The calls counted agree with `uftrace report` of
//! uftrace's own recording of the fixture under the same options; a call
//! left out is its caller's own time, as in a trace recorded so.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

mod trace_support;

use trace_support::*;

/// `report --trace` of the trace with `options`: per function, its calls
/// and its self and total time in nanoseconds.
fn table(dir: &Path, data: &str, options: &[&str]) -> HashMap<String, (u64, f64, f64)> {
    let out = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(dir.join(data))
        .args(options));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut rows = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(2) {
        // total self calls avg max name: durations are "N.NNN us".
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(fields.len() >= 10, "{line}");
        let ns = |at: usize| duration_ns(fields[at], fields[at + 1]);
        rows.insert(
            fields[9..].join(" "),
            (fields[4].parse().unwrap(), ns(2), ns(0)),
        );
    }
    rows
}

/// `uftrace report` of uftrace's recording in `data` with `options`: per
/// function, its calls.
fn uftrace_calls(data: &Path, options: &[&str]) -> HashMap<String, u64> {
    let out = run(Command::new("uftrace")
        .args(["report", "-d"])
        .arg(data)
        .args(options));
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip(2)
        .map(|line| {
            // total self calls name: durations are "N.NNN us".
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() >= 6, "{line}");
            (fields[5..].join(" "), fields[4].parse().unwrap())
        })
        .collect()
}

/// The option sets compared with uftrace's.
const OPTION_SETS: [&[&str]; 6] = [
    &[],
    &["-F", "f", "-D", "2"],
    &["-F", "f", "-D", "1"],
    &["-D", "2"],
    &["-N", "g"],
    &["-F", "g"],
];

#[test]
fn the_calls_kept_are_those_uftrace_report_counts() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "nested_filter.c", &["-O0"]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let uftrace_data = dir.path().join("uftrace.data");
    Command::new("uftrace")
        .arg("--version")
        .output()
        .expect("uftrace (Debian's uftrace package) is this test's truth");
    run(Command::new("uftrace")
        .args(["record", "-d"])
        .arg(&uftrace_data)
        .arg(&exe));
    for options in OPTION_SETS {
        let ours: HashMap<String, u64> = table(dir.path(), "t.data", options)
            .into_iter()
            .map(|(name, (calls, _, _))| (name, calls))
            .collect();
        // uftrace also traces the program's calls into libraries through
        // their PLT (printf here), which -finstrument-functions does not
        // instrument.
        let theirs: HashMap<String, u64> = uftrace_calls(&uftrace_data, options)
            .into_iter()
            .filter(|(name, _)| ["main", "f", "g", "h"].contains(&name.as_str()))
            .collect();
        assert_eq!(ours, theirs, "report --trace {options:?}");
    }
}

/// naps.c: `outer` calls `quick`, `napping` (a 20 ms sleep, then `quick`)
/// and `quick`.
#[test]
fn a_call_left_out_is_its_callers_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "naps.c", &[]);
    let exe = exe.to_str().unwrap();
    traced(dir.path(), "t.data", &[], &[exe]);
    let whole = table(dir.path(), "t.data", &[]);
    let (_, outer_self, outer_total) = whole["outer"];
    assert!(outer_self < 1e6, "{whole:?}");
    assert_eq!(whole["quick"].0, 7, "{whole:?}");

    let hidden = table(dir.path(), "t.data", &["-N", "napping"]);
    assert!(!hidden.contains_key("napping"), "{hidden:?}");
    assert_eq!(hidden["quick"].0, 6, "{hidden:?}");
    // napping's 20 ms are outer's own now; its total is what it was.
    assert!(hidden["outer"].1 >= 20e6, "{hidden:?}");
    assert!((hidden["outer"].2 - outer_total).abs() < 1.0, "{hidden:?}");

    let alone = table(dir.path(), "t.data", &["-F", "outer", "-D", "1"]);
    assert_eq!(alone.len(), 1, "{alone:?}");
    let (calls, own, total) = alone["outer"];
    assert_eq!(calls, 1);
    assert!(
        (own - total).abs() < 1.0 && (total - outer_total).abs() < 1.0,
        "{alone:?}"
    );

    // What a trace recorded with the options counts.
    for options in [&["-N", "napping"][..], &["-F", "outer", "-D", "1"]] {
        traced(dir.path(), "recorded.data", options, &[exe]);
        let counted = |rows: HashMap<String, (u64, f64, f64)>| -> HashMap<String, u64> {
            rows.into_iter().map(|(n, (c, _, _))| (n, c)).collect()
        };
        assert_eq!(
            counted(table(dir.path(), "t.data", options)),
            counted(table(dir.path(), "recorded.data", &[])),
            "{options:?}"
        );
    }
}

#[test]
fn the_exports_keep_the_same_calls() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "naps.c", &[]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let out = run(ichnos()
        .args([
            "report", "--trace", "--format", "folded", "-F", "napping", "-i",
        ])
        .arg(dir.path().join("t.data")));
    let mut stacks: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().0.to_owned())
        .collect();
    stacks.sort();
    // Each stack from its thread (named after the program) down.
    assert_eq!(stacks, ["naps;napping", "naps;napping;quick"]);
    let chrome = dir.path().join("t.json");
    let out = run(ichnos()
        .args(["report", "--trace", "--format", "chrome", "-D", "2", "-o"])
        .arg(&chrome)
        .arg("-i")
        .arg(dir.path().join("t.data")));
    // main and the three it calls.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("exported 4 calls on 1 thread"), "{stderr}");
}

#[test]
fn a_filter_that_names_nothing_or_a_profile_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "naps.c", &[]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    // Refused before the output is made: an existing one is left as it
    // was.
    let kept = dir.path().join("kept.json");
    std::fs::write(&kept, "kept").unwrap();
    let out = ichnos()
        .args([
            "report",
            "--trace",
            "--format",
            "chrome",
            "-F",
            "nothing_so_named",
        ])
        .arg("-o")
        .arg(&kept)
        .arg("-i")
        .arg(dir.path().join("t.data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-F nothing_so_named: no function called in the trace is named so"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "kept");
    // Nor is the trace itself made the output.
    let trace = dir.path().join("t.data");
    let before = std::fs::read(&trace).unwrap();
    let out = ichnos()
        .args(["report", "--trace", "--format", "folded", "-o"])
        .arg(&trace)
        .arg("-i")
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("that is a recording being read"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&trace).unwrap(), before);
    assert_warns_of_a_notrace_naming_nothing(&["report", "--trace"], &trace);
    // A sampling profile has no calls to choose.
    run(ichnos()
        .args(["record", "-q", "-o"])
        .arg(dir.path().join("p.data"))
        .args(["--", "true"]));
    let out = ichnos()
        .args(["report", "-D", "2", "-i"])
        .arg(dir.path().join("p.data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("-F, -N and -D choose a function trace's calls"),
        "{stderr}"
    );
    // A perf.data file is named as one (it was "not an ichnos
    // recording").
    let perf = dir.path().join("perf.data");
    let mut bytes = b"PERFILE2".to_vec();
    bytes.resize(200, 0);
    std::fs::write(&perf, bytes).unwrap();
    for args in [&["replay"][..], &["report", "--trace"]] {
        let out = ichnos().args(args).arg("-i").arg(&perf).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(
                "perf.data is a perf.data file, a sampling profile, not a function trace"
            ),
            "{args:?}: {stderr}"
        );
    }
    // Nor is a trace compared as a profile (it read as 0 samples, every
    // function shrunk by 100%), in either place.
    let (profile, trace) = (dir.path().join("p.data"), dir.path().join("t.data"));
    for (base, new) in [(&profile, &trace), (&trace, &profile)] {
        let out = ichnos()
            .args(["report", "--diff"])
            .args([base, new])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("t.data is a function trace: --diff compares sampling profiles"),
            "{stderr}"
        );
    }
}

/// Options of a profile's report, which a trace's ignored, are refused.
#[test]
fn a_traces_report_refuses_a_profiles_options() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "naps.c", &[]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let trace = dir.path().join("t.data");
    for (args, said) in [
        (
            &["--addresses"][..],
            "--addresses is for a sampling profile's report",
        ),
        (
            &["--no-inline"],
            "--no-inline is for a sampling profile's report",
        ),
        (
            &["--min-percent", "2"],
            "--min-percent is for a sampling profile's report",
        ),
        (
            &["--format", "folded", "--limit", "3"],
            "--limit counts the table's rows",
        ),
    ] {
        let out = ichnos()
            .args(["report", "--trace"])
            .args(args)
            .arg("-i")
            .arg(&trace)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// The demangled names `nm -C` gives the functions of `exe` that contain
/// `part`.
fn nm_names(exe: &Path, part: &str) -> Vec<String> {
    let out = run(Command::new("nm").arg("-C").arg(exe));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .filter(|name| name.contains(part))
        .map(str::to_owned)
        .collect()
}

/// C++ names: a const method prints as its demangled name, with no `()`
/// added after its qualifier (`area(int) const();` was printed), and a
/// template's instances are taken by the template's name (`-F twice`
/// was refused as naming nothing), at record and at replay time.
#[test]
fn cxx_methods_print_whole_and_templates_are_named_by_their_template() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "names.cc", &[]);
    let area = nm_names(&exe, "::area(");
    let twice = nm_names(&exe, "twice<");
    assert_eq!(area, ["shapes::S::area(int) const"]);
    assert_eq!(twice.len(), 2, "{twice:?}");
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap()]);
    let lines = replayed_calls(dir.path(), "t.data");
    assert!(lines.contains(&format!("    {};", area[0])), "{lines:#?}");
    // In the order called, each as nm names it.
    let called = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.contains("twice<"))
            .map(|l| l.trim().trim_end_matches(';').to_owned())
            .collect()
    };
    let mut expected = twice.clone();
    expected.sort_by_key(|n| !n.contains("<int>"));
    assert_eq!(called(&lines), expected, "{lines:#?}");
    // -F twice: both instances, at record time and at replay time.
    traced(
        dir.path(),
        "f.data",
        &["-F", "twice"],
        &[exe.to_str().unwrap()],
    );
    assert_eq!(called(&replayed_calls(dir.path(), "f.data")), expected);
    let only: Vec<String> = replay(dir.path(), "t.data", &["-F", "twice"])
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    assert_eq!(called(&only), expected, "{only:#?}");
    assert_eq!(only.len(), 2, "{only:#?}");
}
