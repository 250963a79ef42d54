//! `ichnos report --format firefox|pprof|speedscope|svg` on a recording
//! of the built-in demo, each file read by its own world's tools: `go
//! tool pprof` (Debian's golang-go) for pprof, speedscope's published
//! JSON schema (`fixtures/speedscope/`, checked by Python's jsonschema)
//! for speedscope, Python's XML parser for the SVG, and for the Firefox
//! Profiler's processed format a Python reader of its tables. Their totals, functions
//! and stacks are held to ichnos's own text reports. `--diff` of two
//! builds of a fixture whose hot function is switched by its argument is
//! held to the shares the fixture spends by construction.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

mod common;

use common::{go_pprof, ichnos, ok, python, text, ICHNOS};

/// One recording of the demo for every test here.
fn demo() -> &'static Path {
    static DEMO: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DEMO
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let data = dir.path().join("demo.data");
            ok(
                ichnos(&["record", "-q", "-o", data.to_str().unwrap()]),
                "ichnos record",
            );
            (dir, data)
        })
        .1
}

/// Exports the demo's recording as `format` (with `extra` flags) into a
/// file of its own; the file.
fn export(format: &str, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("demo.{format}"));
    let mut args = vec![
        "report",
        "-q",
        "-i",
        demo().to_str().unwrap(),
        "--format",
        format,
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(ichnos(&args), "ichnos report");
    (dir, out)
}

/// ichnos's own top table: function -> (self samples, total samples).
fn our_top() -> HashMap<String, (u64, u64)> {
    let out = ok(
        ichnos(&[
            "report",
            "-q",
            "-i",
            demo().to_str().unwrap(),
            "--limit",
            "0",
        ]),
        "ichnos report",
    );
    let mut rows = HashMap::new();
    for line in text(&out).lines() {
        if line.starts_with('#') || line.trim_start().starts_with("SELF%") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 6 {
            continue;
        }
        let function = words[4..words.len() - 1].join(" ");
        let entry = rows.entry(function).or_insert((0, 0));
        entry.0 += words[2].parse::<u64>().unwrap();
        entry.1 += words[3].parse::<u64>().unwrap();
    }
    rows
}

/// ichnos's whole top table of the demo's recording.
fn demo_top_table() -> String {
    let out = ok(
        ichnos(&[
            "report",
            "-q",
            "-i",
            demo().to_str().unwrap(),
            "--limit",
            "0",
        ]),
        "ichnos report",
    );
    text(&out)
}

/// ichnos's top table: function -> self share (percent of the weight)
/// and the number of rows of that name (`_start` of the program and of
/// the dynamic linker, say), whose shares are summed.
fn our_self_percent() -> HashMap<String, (f64, u32)> {
    demo_top_table()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("SELF%"))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let share = words.first()?.strip_suffix('%')?.parse::<f64>().ok()?;
            Some((words[4..words.len() - 1].join(" "), share))
        })
        .fold(HashMap::new(), |mut shares, (function, share)| {
            let row: &mut (f64, u32) = shares.entry(function).or_default();
            *row = (row.0 + share, row.1 + 1);
            shares
        })
}

/// The functions of the demo's recording that the top table shows in
/// the kernel: in `[kernel.kallsyms]`, or in a module's `[MODULE]`.
fn kernel_functions() -> Vec<String> {
    demo_top_table()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let object = *words.last()?;
            let other = ["[jit]", "[vdso]", "[unknown]", "[span]"];
            (object.starts_with('[') && !other.contains(&object)).then(|| words[4].to_owned())
        })
        .collect()
}

/// ichnos's folded stacks: (thread, frames root first) -> samples.
fn our_folded() -> BTreeMap<(String, Vec<String>), u64> {
    let out = ok(
        ichnos(&[
            "report",
            "-q",
            "-i",
            demo().to_str().unwrap(),
            "--format",
            "folded",
        ]),
        "ichnos report",
    );
    let mut stacks = BTreeMap::new();
    for line in text(&out).lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let mut frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
        let thread = frames.remove(0);
        *stacks.entry((thread, frames)).or_insert(0) += count.parse::<u64>().unwrap();
    }
    stacks
}

#[test]
fn go_tool_pprof_reads_the_pprof_export_with_our_totals_and_functions() {
    let (_dir, file) = export("pprof", &[]);
    let top = go_pprof(
        &[
            "-top",
            "-sample_index=samples",
            "-nodefraction=0",
            "-nodecount=100000",
        ],
        &file,
    );
    let total: u64 = top
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("% of ")?;
            rest.strip_suffix(" total")?.trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("no total in {top}"));
    let ours = our_top();
    let folded_total: u64 = our_folded().values().sum();
    assert_eq!(total, folded_total, "{top}");
    // The first mapping is the main binary's: the demo is ichnos itself.
    assert!(top.lines().any(|l| l == "File: ichnos"), "{top}");
    // Each function's flat and cumulative samples as ours.
    let mut theirs: HashMap<String, (u64, u64)> = HashMap::new();
    let mut rows = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"));
    rows.next();
    for line in rows {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = words[5..].join(" ");
        let name = name.strip_suffix(" (inline)").unwrap_or(&name).to_owned();
        let entry = theirs.entry(name).or_insert((0, 0));
        entry.0 += words[0].parse::<u64>().unwrap();
        entry.1 += words[3].parse::<u64>().unwrap();
    }
    // Stacks whose walk stopped early hang from one pseudo-frame, which
    // the top table does not list as a function.
    let incomplete: u64 = our_folded()
        .iter()
        .filter(|((_, f), _)| f.first().is_some_and(|f| f == "[incomplete stack]"))
        .map(|(_, n)| n)
        .sum();
    let pseudo = theirs.remove("[incomplete stack]").unwrap_or((0, 0));
    assert_eq!(pseudo, (0, incomplete));
    for function in ["jit_hot_loop", "mix_block", "demo_jit_driver"] {
        assert!(ours.contains_key(function), "{function} not in {ours:?}");
    }
    // Names as ichnos gives them (the file keeps no linker names for
    // pprof to shorten), inlined ones marked.
    assert_eq!(theirs, ours, "go tool pprof -top:\n{top}");
    // The JIT frame between the native frames around it (leaf first).
    let traces = go_pprof(&["-traces", "-sample_index=samples"], &file);
    let names: Vec<&str> = traces
        .lines()
        .map(|l| l.split_whitespace().last().unwrap_or(""))
        .collect();
    assert!(
        names
            .windows(3)
            .any(|w| w == ["demo_jit_callback", "jit_hot_loop", "demo_jit_driver"]),
        "{traces}"
    );
}

#[test]
fn the_pprof_export_keeps_objects_with_their_paths_and_build_ids() {
    let (_dir, file) = export("pprof", &[]);
    let raw = go_pprof(&["-raw"], &file);
    let exe = std::fs::canonicalize(ICHNOS).unwrap();
    let mappings: Vec<&str> = raw
        .lines()
        .skip_while(|l| !l.starts_with("Mappings"))
        .collect();
    let ours = mappings
        .iter()
        .find(|l| l.contains(exe.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no mapping of {} in {raw}", exe.display()));
    let id = Command::new("readelf")
        .args(["-n", exe.to_str().unwrap()])
        .output()
        .unwrap();
    let id = text(&id);
    let build_id = id
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("ichnos has a build id");
    assert!(ours.contains(build_id), "{ours}: wanted {build_id}");
    assert!(mappings.iter().any(|l| l.contains("[jit]")), "{raw}");
}

#[test]
fn the_speedscope_export_matches_its_schema_and_holds_our_stacks_root_first() {
    let (_dir, file) = export("speedscope", &[]);
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/speedscope/file-format-schema.json");
    // Validated by Python's jsonschema against the schema speedscope
    // publishes; each stack printed as `thread;frame;...` root first with
    // its weight, after the profile's endValue and weights' sum.
    let lines = python(
        r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
data = json.load(open(sys.argv[2]))
jsonschema.validate(data, schema)
frames = data["shared"]["frames"]
for p in data["profiles"]:
    assert p["endValue"] == sum(p["weights"]), p["name"]
    assert len(p["samples"]) == len(p["weights"])
    thread = p["name"].rsplit(" (pid ", 1)[0]
    assert len(set(map(tuple, p["samples"]))) == len(p["samples"]), "a stack twice"
    for stack, weight in zip(p["samples"], p["weights"]):
        assert weight > 0
        # A name's own ';' is ':' in folded stacks (ours among them).
        names = [frames[i]["name"].replace(";", ":") for i in stack]
        print(weight, ";".join([thread] + names))
"#,
        &[schema.to_str().unwrap(), file.to_str().unwrap()],
    );
    let stacks: Vec<(u64, String, Vec<String>)> = lines
        .lines()
        .map(|l| {
            let (weight, stack) = l.split_once(' ').unwrap();
            let mut frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
            let thread = frames.remove(0);
            (weight.parse().unwrap(), thread, frames)
        })
        .collect();
    let theirs: BTreeSet<(String, Vec<String>)> = stacks
        .iter()
        .map(|(_, t, f)| (t.clone(), f.clone()))
        .collect();
    let ours: BTreeSet<(String, Vec<String>)> = our_folded().into_keys().collect();
    assert_eq!(theirs, ours);
    assert!(ours
        .iter()
        .any(|(_, f)| f.contains(&"jit_hot_loop".to_owned())));
    // The weights are CPU time: each leaf function's share of them is its
    // self share in the top table (printed to 0.01%; a leaf's name stands
    // for every row of that name).
    let whole: u64 = stacks.iter().map(|(w, _, _)| w).sum();
    let mut own: HashMap<&str, u64> = HashMap::new();
    for (w, _, frames) in &stacks {
        *own.entry(frames.last().unwrap().as_str()).or_default() += w;
    }
    let shares = our_self_percent();
    assert!(shares.contains_key("jit_hot_loop"), "{shares:?}");
    for (function, (share, rows)) in shares {
        let theirs = 100.0 * *own.get(function.as_str()).unwrap_or(&0) as f64 / whole as f64;
        assert!(
            (theirs - share).abs() <= 0.006 * f64::from(rows),
            "{function}: {theirs} against {share} ({rows} rows)"
        );
    }
}

/// The SVG parsed by Python's XML parser: each frame's title and the y of
/// its rectangle.
fn svg_frames(file: &Path) -> Vec<(String, f64)> {
    let lines = python(
        r#"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
for g in ET.parse(sys.argv[1]).getroot().iter(ns + "g"):
    title, rect = g.find(ns + "title"), g.find(ns + "rect")
    if title is not None and rect is not None:
        print(rect.get("y"), title.text.replace("\n", " "))
"#,
        &[file.to_str().unwrap()],
    );
    lines
        .lines()
        .map(|l| {
            let (y, title) = l.split_once(' ').unwrap();
            (title.to_owned(), y.parse().unwrap())
        })
        .collect()
}

#[test]
fn the_flame_graph_is_well_formed_svg_naming_the_hot_functions() {
    let (_dir, file) = export("svg", &["--title", "the demo <&>"]);
    let frames = svg_frames(&file);
    let total: u64 = our_folded().values().sum();
    let (root, root_y) = frames
        .iter()
        .find(|(t, _)| t.starts_with("all ("))
        .unwrap_or_else(|| panic!("no root frame in {frames:?}"));
    // inferno writes counts with thousands separators.
    assert!(
        root.replace(',', "")
            .starts_with(&format!("all ({total} samples")),
        "{root}: wanted {total} samples"
    );
    for (function, (own, _)) in our_top() {
        if own * 20 >= total {
            assert!(
                frames
                    .iter()
                    .any(|(t, _)| t.starts_with(&format!("{function} ("))),
                "{function} ({own} of {total} samples) not in the flame graph"
            );
        }
    }
    // Roots at the bottom; an icicle graph hangs them from the top.
    assert!(frames.iter().all(|(_, y)| y <= root_y));
    let (_dir, icicle) = export("svg", &["--icicle"]);
    let frames = svg_frames(&icicle);
    let root_y = frames
        .iter()
        .find(|(t, _)| t.starts_with("all ("))
        .map(|(_, y)| *y)
        .unwrap();
    assert!(frames.iter().all(|(_, y)| *y >= root_y));
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.contains("the demo &lt;&amp;&gt;"), "title not escaped");
}

#[test]
fn pprof_is_not_written_to_a_terminal() {
    // `script` (util-linux) gives the report a terminal for its output.
    let command = format!(
        "{ICHNOS} report -i {} --format pprof",
        demo().to_str().unwrap()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script runs");
    let seen = text(&out);
    assert_eq!(out.status.code(), Some(1), "{seen}");
    assert!(seen.contains("name it with -o FILE"), "{seen}");
    // Redirected, it is written.
    let out = ok(
        ichnos(&[
            "report",
            "-i",
            demo().to_str().unwrap(),
            "--format",
            "pprof",
        ]),
        "ichnos report",
    );
    assert_eq!(out.stdout[..2], [0x1f, 0x8b], "a gzip stream");
}

/// Builds the `switch` fixture into `dir` with `opt` (an -O level): two
/// builds of one program at different addresses.
fn build_switch(dir: &Path, opt: &str) -> PathBuf {
    let exe = dir.join("switch");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profile/switch.c");
    let out = Command::new("gcc")
        .args([opt, "-g", "-fomit-frame-pointer", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("gcc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// The rows of a `--diff` table: function -> (sign, self change, total
/// change, base self samples, new self samples).
fn diff_rows(base: &Path, new: &Path, extra: &[&str]) -> Vec<(String, char, f64, f64, u64, u64)> {
    let mut args = vec![
        "report",
        "-q",
        "--diff",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "--limit",
        "0",
    ];
    args.extend_from_slice(extra);
    let out = ok(ichnos(&args), "ichnos report --diff");
    let table = text(&out);
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(2)
        .map(|l| {
            let sign = l.chars().next().unwrap();
            let words: Vec<&str> = l[1..].split_whitespace().collect();
            let points = |w: &str| w.trim_end_matches('%').parse::<f64>().unwrap();
            (
                words[6..words.len() - 1].join(" "),
                sign,
                points(words[0]),
                points(words[1]),
                words[4].parse().unwrap(),
                words[5].parse().unwrap(),
            )
        })
        .collect()
}

/// Recordings of `switch a` built -O2 and `switch b` built -O1, for the
/// tests of `--diff`: two builds of one program at different addresses.
fn switched_recordings() -> (&'static Path, &'static Path) {
    static PAIR: OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = OnceLock::new();
    let (_, base, new) = PAIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        std::fs::create_dir_all(&one).unwrap();
        std::fs::create_dir_all(&two).unwrap();
        let base_exe = build_switch(&one, "-O2");
        let new_exe = build_switch(&two, "-O1");
        let (base, new) = (dir.path().join("a.data"), dir.path().join("b.data"));
        for (data, exe, arg) in [(&base, &base_exe, "a"), (&new, &new_exe, "b")] {
            ok(
                ichnos(&[
                    "record",
                    "-q",
                    "-o",
                    data.to_str().unwrap(),
                    "--",
                    exe.to_str().unwrap(),
                    arg,
                ]),
                "ichnos record",
            );
        }
        (dir, base, new)
    });
    (base, new)
}

#[test]
fn diff_puts_the_switched_functions_first_with_the_right_signs_across_two_builds() {
    let (base, new) = switched_recordings();
    // By construction: hot_a goes from 70% to 10% of the CPU time, hot_b
    // from 10% to 70%, steady stays at 20%. All of it is spent in mix(),
    // inlined into each: with inlined frames shown, the three change by
    // their total share; without, by their self share.
    let rows = diff_rows(base, new, &[]);
    let first_two: BTreeSet<&str> = rows[..2].iter().map(|r| r.0.as_str()).collect();
    assert_eq!(first_two, BTreeSet::from(["hot_a", "hot_b"]), "{rows:?}");
    let row = |name: &str| rows.iter().find(|r| r.0 == name).unwrap().clone();
    let (a, b) = (row("hot_a"), row("hot_b"));
    assert_eq!((a.1, b.1), ('-', '+'), "{rows:?}");
    assert!(
        (a.3 + 60.0).abs() < 8.0 && (b.3 - 60.0).abs() < 8.0,
        "{rows:?}"
    );
    assert!(row("mix").3.abs() < 5.0, "{rows:?}");
    let rows = diff_rows(base, new, &["--no-inline"]);
    let first_two: BTreeSet<&str> = rows[..2].iter().map(|r| r.0.as_str()).collect();
    assert_eq!(first_two, BTreeSet::from(["hot_a", "hot_b"]), "{rows:?}");
    let row = |name: &str| rows.iter().find(|r| r.0 == name).unwrap().clone();
    let (a, b, steady) = (row("hot_a"), row("hot_b"), row("steady"));
    assert_eq!((a.1, b.1), ('-', '+'), "{rows:?}");
    assert!(
        (a.2 + 60.0).abs() < 8.0 && (b.2 - 60.0).abs() < 8.0,
        "{rows:?}"
    );
    assert!(steady.2.abs() < 5.0, "{rows:?}");
    assert!(a.4 > a.5 * 3 && b.5 > b.4 * 3, "{rows:?}");
    // The other way round, the signs turn.
    let back = diff_rows(new, base, &["--no-inline"]);
    let a_back = back.iter().find(|r| r.0 == "hot_a").unwrap();
    assert_eq!(a_back.1, '+');
    assert!((a_back.2 + a.2).abs() < 1e-9);
}

#[test]
fn the_differential_flame_graph_colours_growth_red_and_shrinkage_blue() {
    let (base, new) = switched_recordings();
    let dir = tempfile::tempdir().unwrap();
    // The differential flame graph: the grown function red, the shrunk
    // one blue, each title with its change (inferno colours a frame by the
    // change of its own samples: without inlined frames, those of hot_a
    // and hot_b).
    let svg = dir.path().join("diff.svg");
    ok(
        ichnos(&[
            "report",
            "-q",
            "--diff",
            base.to_str().unwrap(),
            new.to_str().unwrap(),
            "--format",
            "svg",
            "--no-inline",
            "-o",
            svg.to_str().unwrap(),
        ]),
        "ichnos report --diff --format svg",
    );
    let fills = python(
        r#"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
for g in ET.parse(sys.argv[1]).getroot().iter(ns + "g"):
    title, rect = g.find(ns + "title"), g.find(ns + "rect")
    if title is not None and rect is not None:
        print(rect.get("fill"), title.text)
"#,
        &[svg.to_str().unwrap()],
    );
    let fill_of = |name: &str| -> (u32, u32, String) {
        let line = fills
            .lines()
            .find(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, t)| t.starts_with(&format!("{name} (")))
            })
            .unwrap_or_else(|| panic!("{name} not in {fills}"));
        let (fill, title) = line.split_once(' ').unwrap();
        let rgb: Vec<u32> = fill
            .trim_start_matches("rgb(")
            .trim_end_matches(')')
            .split(',')
            .map(|c| c.parse().unwrap())
            .collect();
        (rgb[0], rgb[2], title.to_owned())
    };
    let (red, blue, title) = fill_of("hot_b");
    assert!(
        red > blue && title.contains("; +"),
        "{title}: rgb {red} .. {blue}"
    );
    let (red, blue, title) = fill_of("hot_a");
    assert!(
        blue > red && title.contains("; -"),
        "{title}: rgb {red} .. {blue}"
    );
}

#[test]
fn diff_refuses_formats_it_has_no_picture_for() {
    let data = demo().to_str().unwrap();
    let out = ichnos(&["report", "--diff", data, data, "--format", "pprof"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--diff shows a table"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Options it would ignore, refused as one recording's report refuses
    // them.
    for (args, said) in [
        (
            &["--sort", "total"][..],
            "--diff sorts its rows by the change",
        ),
        (&["--min-percent", "2"], "--min-percent folds the tree"),
        (
            &["--format", "svg", "--limit", "5"],
            "--limit counts the table's rows",
        ),
    ] {
        let mut all = vec!["report", "-q", "--diff", data, data];
        all.extend_from_slice(args);
        let out = ichnos(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// The output named as one of the recordings compared is refused, and
/// the recording left as it was.
#[test]
fn diff_refuses_to_write_over_a_recording_it_compares() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("new.data");
    std::fs::copy(demo(), &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let (base, new) = (demo().to_str().unwrap(), copy.to_str().unwrap());
    let out = ichnos(&["report", "--diff", base, new, "-o", new]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("that is a recording being read"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&copy).unwrap(), before);
}

/// One recording of `switch a` (built -O2 -g -fno-inline: only `mix`
/// is inlined) for the tests of inlined frames.
fn switch_recording() -> &'static Path {
    static SWITCH: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &SWITCH
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let exe = build_switch(dir.path(), "-O2");
            let data = dir.path().join("switch.data");
            ok(
                ichnos(&[
                    "record",
                    "-q",
                    "-o",
                    data.to_str().unwrap(),
                    "--",
                    exe.to_str().unwrap(),
                    "a",
                ]),
                "ichnos record",
            );
            (dir, data)
        })
        .1
}

/// The leaf-first traces of `go tool pprof -traces` of a pprof export of
/// `data` with `extra` flags: each a list of names, `(inline)` kept.
fn pprof_traces(data: &Path, extra: &[&str]) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.pb.gz");
    let mut args = vec![
        "report",
        "-q",
        "-i",
        data.to_str().unwrap(),
        "--format",
        "pprof",
        "-o",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(ichnos(&args), "ichnos report");
    let traces = go_pprof(&["-traces", "-sample_index=samples"], &file);
    let mut out = Vec::new();
    for block in traces.split("-----------+") {
        let frames: Vec<String> = block
            .lines()
            .filter(|l| !l.contains(':') && !l.trim().is_empty() && !l.starts_with('-'))
            .map(|l| {
                let l = l.trim();
                // The first line of a trace starts with its count.
                match l.split_once(char::is_whitespace) {
                    Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => {
                        rest.trim().to_owned()
                    }
                    _ => l.to_owned(),
                }
            })
            .collect();
        if !frames.is_empty() {
            out.push(frames);
        }
    }
    out
}

#[test]
fn pprof_locations_hold_inlined_functions_before_the_function_they_were_inlined_into() {
    let data = switch_recording();
    let traces = pprof_traces(data, &[]);
    // mix is inlined into hot_a: pprof marks it and shows it first.
    assert!(
        traces
            .iter()
            .any(|t| t.len() >= 2 && t[0] == "mix (inline)" && t[1] == "hot_a"),
        "{traces:?}"
    );
    assert!(traces.iter().flatten().all(|f| f != "mix"), "{traces:?}");
    // Without inlined frames, the samples are hot_a's own.
    let traces = pprof_traces(data, &["--no-inline"]);
    assert!(
        traces
            .iter()
            .flatten()
            .all(|f| !f.contains("(inline)") && f != "mix"),
        "{traces:?}"
    );
    assert!(traces.iter().any(|t| t[0] == "hot_a"), "{traces:?}");
}

#[test]
fn exports_of_no_samples_are_valid_files_that_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo().to_str().unwrap();
    let svg = dir.path().join("empty.svg");
    let json = dir.path().join("empty.json");
    for (format, file) in [("svg", &svg), ("speedscope", &json)] {
        ok(
            ichnos(&[
                "report",
                "-q",
                "-i",
                data,
                "--pid",
                "999999999",
                "--format",
                format,
                "-o",
                file.to_str().unwrap(),
            ]),
            "ichnos report",
        );
    }
    let title = python(
        r#"
import sys, xml.etree.ElementTree as ET
print(" / ".join(t.text for t in ET.parse(sys.argv[1]).getroot().iter("{http://www.w3.org/2000/svg}text")))
"#,
        &[svg.to_str().unwrap()],
    );
    assert_eq!(title.trim(), "Flame Graph / no samples");
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/speedscope/file-format-schema.json");
    let seen = python(
        r#"
import json, sys, jsonschema
data = json.load(open(sys.argv[2]))
jsonschema.validate(data, json.load(open(sys.argv[1])))
print(len(data["profiles"]), "activeProfileIndex" in data)
"#,
        &[schema.to_str().unwrap(), json.to_str().unwrap()],
    );
    assert_eq!(seen.trim(), "0 False");
}

#[test]
fn flame_graph_options_are_refused_with_other_formats() {
    let data = demo().to_str().unwrap();
    for args in [
        vec!["report", "-i", data, "--icicle"],
        vec![
            "report",
            "-i",
            data,
            "--format",
            "pprof",
            "--title",
            "x",
            "-o",
            "/dev/null",
        ],
    ] {
        let out = ichnos(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("use them with --format svg"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_firefox_export_is_the_processed_format_with_our_samples_named_and_timed() {
    let (_dir, file) = export("firefox", &[]);
    // Read as the Firefox Profiler reads a processed profile: every table's
    // columns as long as its `length`, stacks by prefix, frames to
    // functions to strings. Each sample printed as `thread;frame;...`
    // root first, with the category of its JIT frames.
    let lines = python(
        r#"
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
meta = d["meta"]
assert meta["preprocessedProfileVersion"] >= 40, meta["preprocessedProfileVersion"]
assert meta["symbolicated"] is True
cats = [c["name"] for c in meta["categories"]]
# No off-CPU time here: the categories are those of on-CPU profiles, with
# the kernel's where the recording has kernel frames (sampled as root).
kernel = set(n for n in sys.argv[2].split(",") if n)
assert cats == ["Other", "Native", "JIT"] + (["Kernel"] if kernel else []), (cats, kernel)
libs = d["libs"]
# A library's debug id is its build id's first 16 bytes read as a GUID
# whose first three fields are little-endian (Breakpad's and the Firefox
# Profiler's rule; Python's uuid reads such bytes with bytes_le), age 0.
import uuid
for lib in libs:
    if lib["codeId"]:
        guid = uuid.UUID(bytes_le=bytes.fromhex(lib["codeId"])[:16])
        assert lib["breakpadId"] == guid.hex.upper() + "0", (lib, guid)
assert any(lib["codeId"] for lib in libs), libs
longest = 0.0
for t in d["threads"]:
    strings = t["stringArray"]
    for table in ("frameTable", "funcTable", "stackTable", "samples", "resourceTable"):
        n = t[table]["length"]
        for key, col in t[table].items():
            if isinstance(col, list):
                assert len(col) == n, (table, key, len(col), n)
    ft, fn, st, rt = t["frameTable"], t["funcTable"], t["stackTable"], t["resourceTable"]
    for i in range(rt["length"]):
        assert 0 <= rt["lib"][i] < len(libs)
    def frames(stack):
        out = []
        while stack is not None:
            assert 0 <= stack < st["length"]
            f = st["frame"][stack]
            func = ft["func"][f]
            name = strings[fn["name"][func]]
            assert not name.startswith("\x01"), name
            if name == "jit_hot_loop":
                assert cats[ft["category"][f]] == "JIT"
                assert fn["resource"][func] == -1
            else:
                assert cats[ft["category"][f]] != "JIT", name
            # The kernel's functions, by our top table, and only they.
            assert (cats[ft["category"][f]] == "Kernel") == (name in kernel), name
            if name in kernel:
                assert fn["resource"][func] == -1, name
            if name == "mix_block":
                # Located: the demo's workload.c, where mix_block spans
                # lines 17 to 24; in the ichnos binary, as a library.
                assert strings[fn["fileName"][func]].endswith("ichnos-demo/src/workload.c")
                assert 17 <= ft["line"][f] <= 24, ft["line"][f]
                assert libs[rt["lib"][fn["resource"][func]]]["name"] == "ichnos"
                assert cats[ft["category"][f]] == "Native"
            out.append(name)
            prefix = st["prefix"][stack]
            assert prefix is None or prefix < stack
            stack = prefix
        return out[::-1]
    time = 0.0
    for stack, delta in zip(t["samples"]["stack"], t["samples"]["timeDeltas"]):
        assert delta >= 0
        time += delta
        # A name's own ';' is ':' in folded stacks (ours among them).
        print(t["name"] + ";" + ";".join(n.replace(";", ":") for n in frames(stack)))
    longest = max(longest, time)
# Milliseconds: the demo's threads sample for seconds.
assert longest > 1000, longest
"#,
        &[file.to_str().unwrap(), &kernel_functions().join(",")],
    );
    let mut theirs: BTreeMap<(String, Vec<String>), u64> = BTreeMap::new();
    for line in lines.lines() {
        let mut frames: Vec<String> = line.split(';').map(str::to_owned).collect();
        let thread = frames.remove(0);
        *theirs.entry((thread, frames)).or_insert(0) += 1;
    }
    assert_eq!(theirs, our_folded());
}

/// The page that opens the flame graph beside it in Chromium, clicks the
/// frame of `function` and writes what the zoom did into `<pre id=out>`:
/// the frame's width before and after (percent), whether the "Reset
/// Zoom" button was hidden before and after, and whether the graph's own
/// script had set up its `zoom` function.
const ZOOM_PAGE: &str = r#"<!doctype html>
<html><body>
<object id="fg" type="image/svg+xml" data="flame.svg" width="1200" height="800"></object>
<pre id="out">not loaded</pre>
<script>
const out = document.getElementById("out");
document.getElementById("fg").addEventListener("load", () => {
  try {
    const doc = document.getElementById("fg").contentDocument;
    const win = doc.defaultView;
    const frames = Array.from(doc.querySelectorAll("g"))
      .filter(g => g.querySelector("title") && g.querySelector("rect"));
    const title = g => g.querySelector("title").textContent;
    const width = g => parseFloat(g.querySelector("rect").getAttribute("width"));
    const target = frames.find(g => title(g).startsWith("FUNCTION ("));
    const unzoom = doc.getElementById("unzoom");
    const result = {frames: frames.length, zoom: typeof win.zoom,
      before: width(target), hiddenBefore: unzoom.classList.contains("hide")};
    target.querySelector("rect").dispatchEvent(new win.MouseEvent("click", {bubbles: true}));
    result.after = width(target);
    result.hiddenAfter = unzoom.classList.contains("hide");
    out.textContent = JSON.stringify(result);
  } catch (e) {
    out.textContent = "error: " + e;
  }
});
</script></body></html>
"#;

/// Runs headless Chromium (Debian's `chromium`) with `args`: its standard
/// output and its log (console messages included).
fn chromium(args: &[&str]) -> (String, String) {
    let out = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("chromium runs (Debian's chromium package)");
    let out = ok(out, &format!("chromium {args:?}"));
    (
        text(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_flame_graph_zooms_on_a_click_in_a_real_browser_without_script_errors() {
    let (dir, file) = export("svg", &[]);
    std::fs::copy(&file, dir.path().join("flame.svg")).unwrap();
    let page = dir.path().join("zoom.html");
    std::fs::write(&page, ZOOM_PAGE.replace("FUNCTION", "checksum_row")).unwrap();
    let url = format!("file://{}", page.display());
    let (dom, log) = chromium(&[
        "--allow-file-access-from-files",
        "--virtual-time-budget=10000",
        "--dump-dom",
        &url,
    ]);
    assert!(!log.contains("Uncaught"), "script errors: {log}");
    let result = dom
        .split("<pre id=\"out\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no result in {dom}"));
    let result: serde_json::Value =
        serde_json::from_str(result).unwrap_or_else(|e| panic!("{e}: {result}"));
    assert_eq!(result["zoom"], "function", "{result}");
    let (before, after) = (
        result["before"].as_f64().unwrap(),
        result["after"].as_f64().unwrap(),
    );
    // checksum_row holds about a tenth of the samples: zoomed, it spans
    // the graph, and the reset button shows.
    assert!(before < 50.0 && after > 99.0, "{result}");
    assert_eq!(result["hiddenBefore"], true, "{result}");
    assert_eq!(result["hiddenAfter"], false, "{result}");
    // A picture for people to look at, kept with the build.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("flamegraph.png");
    let _ = std::fs::remove_file(&shot);
    let svg_url = format!("file://{}", file.display());
    chromium(&[
        "--window-size=1200,900",
        &format!("--screenshot={}", shot.display()),
        &svg_url,
    ]);
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 4096, "{} bytes", png.len());
}

/// Every format ends quietly where its reader has gone (as `| head`
/// does), and names the file it cannot write. (The flame graph said
/// "Broken pipe" and exited 1 where the others ended quietly, and a full
/// disk's error named no file.)
#[test]
fn every_format_ends_quietly_on_a_closed_pipe_and_names_a_file_it_cannot_write() {
    let data = demo().to_str().unwrap();
    for format in ["top", "tree", "folded", "svg", "speedscope"] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ichnos"))
            .args(["report", "-q", "-i", data, "--format", format])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for format in ["top", "svg", "firefox", "pprof"] {
        let out = ichnos(&[
            "report",
            "-q",
            "-i",
            data,
            "--format",
            format,
            "-o",
            "/dev/full",
        ]);
        assert_eq!(out.status.code(), Some(1), "{format}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot write /dev/full: No space left on device"),
            "{format}: {stderr}"
        );
    }
}

/// Options a sampling profile's report cannot honour are refused before
/// anything is written (the header came out before the `--sort calls`
/// error), and none is silently ignored.
#[test]
fn a_profiles_report_refuses_what_it_cannot_honour_before_writing() {
    let data = demo().to_str().unwrap();
    for (args, said) in [
        (
            &["--sort", "calls"][..],
            "--sort calls: only a function trace",
        ),
        (
            &["--sort", "total", "--format", "folded"],
            "--sort orders the table",
        ),
        (
            &["--tree", "--min-percent", "nan"],
            "a share in percent, 0 to 100",
        ),
        (
            &["--tree", "--min-percent", "101"],
            "a share in percent, 0 to 100",
        ),
        // Each ignored before: the tree has no rows to count, the table
        // no tree to fold.
        (
            &["--tree", "--limit", "3"],
            "--limit counts the table's rows",
        ),
        (
            &["--format", "folded", "--limit", "3"],
            "--limit counts the table's rows",
        ),
        (&["--min-percent", "2"], "--min-percent folds the tree"),
    ] {
        let mut all = vec!["report", "-q", "-i", data];
        all.extend_from_slice(args);
        let out = ichnos(&all);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// `-o -` is standard output for a report (it made a file named `-`),
/// and refused for a recording, which is written to a file.
#[test]
fn dash_o_dash_is_standard_output_for_a_report_and_refused_for_a_recording() {
    let dir = tempfile::tempdir().unwrap();
    let data = demo().to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ichnos"))
        .current_dir(dir.path())
        .args(["report", "-q", "-i", data, "--limit", "1", "-o", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("# "),
        "the table on stdout"
    );
    assert!(!dir.path().join("-").exists(), "a file named -");
    for command in ["record", "trace"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ichnos"))
            .current_dir(dir.path())
            .args([command, "-o", "-", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("-o -: a recording is written to a file"),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!dir.path().join("-").exists(), "{command}: a file named -");
    }
}
