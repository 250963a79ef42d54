//! `ichnos trace`'s exports (Perfetto's protobuf trace, Chrome's JSON,
//! folded stacks) against its own replay and Perfetto's protos.

use std::collections::HashMap;
use std::path::Path;

mod trace_support;

use trace_support::*;

/// Lines of one export read back, per thread in order, against the
/// replay's: the same calls, nesting and kinds, durations within the
/// replay's precision and a nanosecond of rounding each end.
fn assert_same_calls(what: &str, exported: &[Line], replayed: &[Line]) {
    let by_thread = |lines: &[Line]| {
        let mut m: HashMap<u32, Vec<Line>> = HashMap::new();
        for l in lines {
            m.entry(l.tid).or_default().push(l.clone());
        }
        m
    };
    let (exported, replayed) = (by_thread(exported), by_thread(replayed));
    assert_eq!(
        exported.keys().collect::<std::collections::BTreeSet<_>>(),
        replayed.keys().collect(),
        "{what}: threads"
    );
    for (tid, ours) in &replayed {
        let theirs = &exported[tid];
        // Calls the replay leaves open (the thread ended inside them:
        // pthread_exit) end in the exports at the thread's last event.
        let kind = |k: &str| ours.iter().filter(|l| l.kind == k).count();
        let open = kind("open") - kind("close");
        assert_eq!(
            theirs.len(),
            ours.len() + open,
            "{what}: thread {tid}'s lines"
        );
        assert!(
            theirs[ours.len()..].iter().all(|t| t.kind == "close"),
            "{what}: thread {tid}: {:?}",
            &theirs[ours.len()..]
        );
        for (t, o) in theirs.iter().zip(ours) {
            assert_eq!(
                (t.depth, &t.kind, &t.name),
                (o.depth, &o.kind, &o.name),
                "{what}: thread {tid}: {t:?} against {o:?}"
            );
            if o.precision > 0.0 {
                assert!(
                    (t.ns - o.ns).abs() <= o.precision / 2.0 + 2.0,
                    "{what}: thread {tid}: {} took {} ns, the replay says {} ns",
                    o.name,
                    t.ns,
                    o.ns
                );
            }
        }
    }
}

/// The first and the last `B`/`E` event's times in the Chrome trace at
/// `trace`, in nanoseconds (its `ts` are microseconds).
#[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)] // asserted positive below
fn chrome_span(trace: &Path) -> (u64, u64) {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(trace).unwrap()).expect("the export is JSON");
    let times: Vec<u64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "B" || e["ph"] == "E")
        .map(|e| e["ts"].as_f64().unwrap() * 1e3)
        .inspect(|&ns| assert!(ns > 0.0, "{ns}"))
        .map(|ns| ns.round() as u64)
        .collect();
    (*times.iter().min().unwrap(), *times.iter().max().unwrap())
}

/// The Chrome export's B and E events, nested per thread as the replay
/// prints them.
fn chrome_lines(trace: &Path) -> Vec<Line> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(trace).unwrap()).expect("the export is JSON");
    assert_eq!(v["displayTimeUnit"], "ns");
    let mut stacks: HashMap<u64, Vec<(String, f64, bool)>> = HashMap::new();
    let mut lines = Vec::new();
    let mut named = std::collections::HashSet::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let tid = e["tid"].as_u64().unwrap();
        let stack = stacks.entry(tid).or_default();
        let line = |depth, kind: &str, ns, name: &str| Line {
            tid: tid as u32,
            depth,
            kind: kind.to_owned(),
            ns,
            precision: 0.0,
            name: name.to_owned(),
        };
        match e["ph"].as_str().unwrap() {
            "M" => {
                if e["name"] == "thread_name" {
                    named.insert(tid);
                }
            }
            "B" => {
                assert!(
                    named.contains(&tid),
                    "thread {tid} unnamed before its events"
                );
                if let Some(parent) = stack.last_mut() {
                    if !parent.2 {
                        lines.push(line(
                            stack.len() - 1,
                            "open",
                            0.0,
                            &stack[stack.len() - 1].0,
                        ));
                        stack.last_mut().unwrap().2 = true;
                    }
                }
                let name = e["name"].as_str().unwrap().to_owned();
                stack.push((name, e["ts"].as_f64().unwrap(), false));
            }
            "E" => {
                let (name, begin, children) = stack.pop().expect("an E with no B");
                let ns = (e["ts"].as_f64().unwrap() - begin) * 1e3;
                lines.push(line(
                    stack.len(),
                    if children { "close" } else { "leaf" },
                    ns,
                    &name,
                ));
            }
            other => panic!("event {other}"),
        }
    }
    lines
}

#[test]
fn perfetto_and_chrome_exports_hold_the_replays_calls() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "threads.c", &["-pthread"]);
    let before = monotonic_ns();
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "300"]);
    let after = monotonic_ns();
    let replayed = replay_lines(dir.path(), "t.data");
    assert!(replayed.len() > 1200, "{}", replayed.len());
    // (The JSON without --trace: a function trace is read as one.)
    for (format, file, flag) in [
        ("perfetto", "t.pftrace", &["--trace"][..]),
        ("chrome", "t.json", &[][..]),
    ] {
        let out = run(ichnos()
            .arg("report")
            .args(flag)
            .args(["--format", format, "-i"])
            .arg(dir.path().join("t.data"))
            .arg("-o")
            .arg(dir.path().join(file)));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("on 5 threads"), "{stderr}");
        let path = dir.path().join(file);
        // Timed on CLOCK_MONOTONIC, as perf and Perfetto's own traces are:
        // within the run's. (They counted from the trace's start.)
        let (first, last) = if format == "perfetto" {
            perfetto_span(&path)
        } else {
            chrome_span(&path)
        };
        assert!(
            before <= first && first <= last && last <= after,
            "{format}: {first}..{last} outside {before}..{after}"
        );
        let exported = if format == "perfetto" {
            perfetto_lines(&path)
        } else {
            chrome_lines(&path)
        };
        assert_same_calls(format, &exported, &replayed);
    }
    // Perfetto's interned names keep it well below the JSON.
    let size = |f: &str| std::fs::metadata(dir.path().join(f)).unwrap().len();
    assert!(
        size("t.pftrace") * 3 < size("t.json"),
        "{} {}",
        size("t.pftrace"),
        size("t.json")
    );
    // --tid keeps one thread.
    let tid = replayed[0].tid;
    run(ichnos()
        .args([
            "report",
            "--trace",
            "--format",
            "perfetto",
            "--tid",
            &tid.to_string(),
            "-i",
        ])
        .arg(dir.path().join("t.data"))
        .arg("-o")
        .arg(dir.path().join("one.pftrace")));
    let one = perfetto_lines(&dir.path().join("one.pftrace"));
    assert!(!one.is_empty() && one.iter().all(|l| l.tid == tid));
}

#[test]
fn folded_stacks_of_a_deep_recursion_stop_at_a_depth() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "deep.c", &["-O0"]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "3000"]);
    assert!(out.status.success());
    let out = run(ichnos()
        .args(["report", "--format", "folded", "-i"])
        .arg(dir.path().join("t.data")));
    let text = String::from_utf8(out.stdout).unwrap();
    // 3001 calls of down under main: one line per depth down to 1024
    // (main and 1023 of down, under the thread), then one frame for all
    // the calls deeper, rather than 3001 lines of up to 3002 frames.
    let frames: Vec<usize> = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().0.split(';').count())
        .collect();
    assert!(frames.len() <= 1026, "{} lines", frames.len());
    assert!(frames.iter().all(|&n| n <= 1026), "{frames:?}");
    let deeper = text
        .lines()
        .find(|l| l.contains(";[deeper calls] "))
        .unwrap_or_else(|| panic!("no [deeper calls] line"));
    assert_eq!(deeper.split(';').count(), 1026, "{deeper}");
    assert!(deeper.starts_with("deep;main;down;down;"), "{deeper}");
}

/// A recursion 3001 calls deep under `main`: the table counts every call
/// of `down`, its time once in the total (its outermost call's), as
/// uftrace sums it, so its total cannot pass `main`'s. Summing each
/// frame's time would give about 1500 times `main`'s.
#[test]
fn the_trace_table_counts_a_recursions_time_once() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "deep.c", &["-O0"]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "3000"]);
    assert!(out.status.success());
    let table = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(dir.path().join("t.data")));
    let table = String::from_utf8(table.stdout).unwrap();
    let row = |name: &str| -> (f64, f64, u64, f64, f64) {
        let f: Vec<&str> = table
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() == 10 && f[9] == name)
            .unwrap_or_else(|| panic!("no {name} in {table}"));
        (
            duration_ns(f[0], f[1]),
            duration_ns(f[2], f[3]),
            f[4].parse().unwrap(),
            duration_ns(f[5], f[6]),
            duration_ns(f[7], f[8]),
        )
    };
    let (main_total, _, main_calls, _, _) = row("main");
    let (total, self_time, calls, average, longest) = row("down");
    assert_eq!((main_calls, calls), (1, 3001), "{table}");
    // The outermost call of down is the longest, and it is the total.
    assert!(total <= main_total, "{table}");
    assert!((total - longest).abs() <= total * 1e-3 + 1.0, "{table}");
    assert!(self_time <= total, "{table}");
    assert!(
        (average - total / 3001.0).abs() <= average * 1e-3 + 1.0,
        "{table}"
    );
}

#[test]
fn folded_stacks_weigh_each_path_by_its_self_time() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "calls.c", &[]);
    let out = trace(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "2"]);
    assert!(out.status.success());
    // Without --trace: a function trace is read as one.
    let out = run(ichnos()
        .args(["report", "--format", "folded", "-i"])
        .arg(dir.path().join("t.data")));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut by_path: HashMap<String, f64> = HashMap::new();
    for l in text.lines() {
        let (path, ns) = l.rsplit_once(' ').unwrap();
        by_path.insert(path.to_owned(), ns.parse().unwrap());
    }
    // The paths the source makes, rooted at the thread (after_jump runs
    // in main, after a longjmp out of deep).
    for path in [
        "calls;main;top;middle;leaf",
        "calls;main;top;middle",
        "calls;main;jumper;deep",
        "calls;main;after_jump",
    ] {
        assert!(by_path.contains_key(path), "{path} in {text}");
    }
    assert!(!text.contains("deep;after_jump"), "{text}");
    assert!(
        !text.lines().any(|l| l.contains("leaf;")),
        "leaf calls nothing: {text}"
    );
    // Each function's paths add up to its self time in the table.
    let table = run(ichnos()
        .args(["report", "--trace", "--limit", "0", "-i"])
        .arg(dir.path().join("t.data")));
    let table = String::from_utf8(table.stdout).unwrap();
    for line in table.lines().filter(|l| !l.starts_with('#')).skip(2) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let self_ns = f[2].parse::<f64>().unwrap() * if f[3] == "ms" { 1e6 } else { 1e3 };
        let name = f[9];
        let folded: f64 = by_path
            .iter()
            .filter(|(p, _)| p.rsplit(';').next() == Some(name))
            .map(|(_, ns)| ns)
            .sum();
        assert!(
            (folded - self_ns).abs() <= 3.0,
            "{name}: folded {folded} ns, self {self_ns} ns"
        );
    }
    // And the SVG draws them.
    let svg = run(ichnos()
        .args(["report", "--trace", "--format", "svg", "-i"])
        .arg(dir.path().join("t.data")));
    let svg = String::from_utf8(svg.stdout).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("middle") && svg.contains(" ns"),
        "{svg}"
    );
}

/// Threads that name themselves and end before the recorder could read
/// their names from `/proc` (their only frame of events is their last):
/// each is named as it named itself, in the Chrome export's thread names
/// and in the folded stacks. (They were "thread N", or an empty name,
/// depending on when the recorder looked.)
#[test]
fn threads_that_end_early_keep_the_names_they_gave_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), "named_threads.c", &["-pthread"]);
    traced(dir.path(), "t.data", &[], &[exe.to_str().unwrap(), "20"]);
    let json = dir.path().join("t.json");
    run(ichnos()
        .args(["report", "--format", "chrome", "-i"])
        .arg(dir.path().join("t.data"))
        .arg("-o")
        .arg(&json));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut names: Vec<String> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_owned())
        .filter(|n| n != "named_threads")
        .collect();
    names.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("worker-{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);
    // The folded stacks: each worker's calls under its own name.
    let folded = run(ichnos()
        .args(["report", "--format", "folded", "-i"])
        .arg(dir.path().join("t.data")));
    let folded = String::from_utf8(folded.stdout).unwrap();
    for i in 0..20 {
        assert!(
            folded
                .lines()
                .any(|l| l.starts_with(&format!("worker-{i};worker;work "))),
            "worker-{i}: {folded}"
        );
    }
}
