//! `ichnos report perf.data`: recordings made by `perf record
//! --call-graph dwarf` unwound with ichnos's rows and held to `perf
//! report`'s shares; `perf record -g` chains kept as the kernel walked
//! them and held to `perf script`'s; damaged files refused with where.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::*;

#[test]
fn perf_record_call_graph_dwarf_is_unwound_completely_with_perf_reports_shares() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let exe = exe.to_str().unwrap();
    let data = dir.path().join("perf.data");
    perf_record(&data, 4000, "dwarf", &[exe, "16000"]);
    // Read as `ichnos report perf.data` and as `-i perf.data`.
    let stacks = folded(&data, &["--no-inline"]);
    assert_chains_complete(&stacks, "perf record --call-graph dwarf");
    assert_chains_shares_agree(&self_shares(&data), &perf_shares(&data));
    let positional = ichnos(&[
        "report",
        data.to_str().unwrap(),
        "--limit",
        "3",
        "--no-inline",
    ]);
    assert!(positional.status.success(), "{}", stderr(&positional));
    let text = String::from_utf8_lossy(&positional.stdout);
    assert!(text.contains("recorded by perf"), "{text}");
    assert!(text.contains("leaf_heavy"), "{text}");
}

/// The vDSO of a perf.data of this kernel is named from the reporting
/// process's own, as in ichnos's recordings: perf's header lists its
/// build id. The header counts the program's one process and thread. (Its frames were `[vdso]+0xOFFSET`, one row per address,
/// where perf report names `__vdso_clock_gettime`.)
#[test]
fn perf_datas_vdso_frames_are_named_with_perf_reports_share() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "clocks", &["-g"]);
    let data = dir.path().join("perf.data");
    perf_record(&data, 4000, "dwarf", &[exe.to_str().unwrap(), "0.5"]);
    let theirs = perf_shares(&data);
    let vdso_theirs = theirs
        .get("__vdso_clock_gettime")
        .copied()
        .unwrap_or_else(|| {
            panic!("perf report names no __vdso_clock_gettime: {theirs:?}");
        });
    let out = ok(
        ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "0"]),
        "report",
    );
    let table = text(&out);
    // One process of one thread: not perf, nor the kernel's mappings
    // (pid -1) as a process of their own, as they were counted.
    assert!(
        table
            .lines()
            .next()
            .unwrap_or_default()
            .ends_with("; 1 process, 1 thread"),
        "{table}"
    );
    // `SELF% TOTAL% SELF TOTAL FUNCTION OBJECT` rows of the vDSO.
    let vdso: Vec<(f64, &str)> = table
        .lines()
        .filter(|l| !l.starts_with('#') && l.trim_end().ends_with(" [vdso]"))
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields[0].trim_end_matches('%').parse().unwrap(), fields[4])
        })
        .collect();
    assert!(
        vdso.iter().all(|(_, f)| !f.starts_with("[vdso]+")),
        "unnamed vDSO frames:\n{table}"
    );
    let share: f64 = vdso.iter().map(|(s, _)| s).sum();
    assert!(
        (share - vdso_theirs).abs() <= 3.0,
        "the vDSO's self share {share}% against perf report's {vdso_theirs}%:\n{table}"
    );
}

/// A perf.data of a fixed period (`perf record -c N`), whose samples
/// carry no period: each weighs the period, so the exports' CPU time is
/// perf report's event count, and the header gives the clock's rate.
/// (Each weighed 1 ns, and the header read "at 0 Hz".)
#[test]
fn perf_data_of_a_fixed_period_weighs_each_sample_the_period() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    // A period a second holds whole gives the header its rate; another
    // (7 ms: 142.86 a second) none, and the samples are counted one each.
    for (period, rate) in [
        ("250000", " of cpu-clock at 4000 Hz over "),
        ("7000000", " of cpu-clock over "),
    ] {
        let data = dir.path().join(format!("perf-{period}.data"));
        let out = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-c", period, "-g", "-o"])
            .arg(&data)
            .arg("--")
            .args([exe.to_str().unwrap(), "4000"])
            .output()
            .expect("perf runs (install linux-perf)");
        assert!(out.status.success(), "perf record: {}", stderr(&out));
        // Each sample's period as perf script gives it: their count and
        // sum (perf report's header rounds counts: "1K").
        let script = Command::new("perf")
            .args(["script", "-F", "period", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        let periods: Vec<u64> = String::from_utf8_lossy(&script.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let (samples, events) = (periods.len() as u64, periods.iter().sum::<u64>());
        assert!(samples > 10, "{periods:?}");
        let report = text(&ok(
            ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "1"]),
            "report",
        ));
        assert!(
            report.lines().next().unwrap_or_default().contains(rate),
            "{period}: {report}"
        );
        let pprof = dir.path().join(format!("p-{period}.pb.gz"));
        ok(
            ichnos(&[
                "report",
                "-i",
                data.to_str().unwrap(),
                "--format",
                "pprof",
                "-o",
                pprof.to_str().unwrap(),
            ]),
            "pprof",
        );
        // `-raw` lists each sample's values: samples, then nanoseconds.
        let raw = go_pprof(&["-raw"], &pprof);
        let values: Vec<(u64, u64)> = raw
            .lines()
            .skip_while(|l| !l.starts_with("Samples:"))
            .skip(2)
            .take_while(|l| l.contains(':'))
            .filter_map(|l| {
                let mut fields = l.split_whitespace();
                let count = fields.next()?.parse().ok()?;
                let ns = fields.next()?.trim_end_matches(':').parse().ok()?;
                Some((count, ns))
            })
            .collect();
        let ns: u64 = values.iter().map(|v| v.1).sum();
        let counted: u64 = values.iter().map(|v| v.0).sum();
        assert_eq!((counted, ns), (samples, events), "{period}: {raw}");
    }
}

/// `perf record` with no call graph: each sample is where the thread was,
/// a stack of one frame, and the self shares are perf report's. (Every
/// sample used to count as lost, "without user registers".)
#[test]
fn perf_record_without_a_call_graph_gives_perf_reports_self_shares() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("perf.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "4000", "-o"])
        .arg(&data)
        .arg("--")
        .args([exe.to_str().unwrap(), "16000"])
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
    assert_chains_shares_agree(&self_shares(&data), &perf_shares(&data));
}

/// A perf.data of two events: the first's samples are the profile (as
/// many as perf report counts of it), and the note counts the other's as
/// perf does. (Both were summed, under the first's name, nanoseconds of
/// cpu-clock with counts of page faults.)
#[test]
fn perf_data_of_two_events_shows_the_first_and_counts_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("perf.data");
    let out = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock,page-faults",
            "-F",
            "1000",
            "-g",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .args([exe.to_str().unwrap(), "4000"])
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
    // perf report's own count of each event's samples.
    let theirs = Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&theirs.stdout).into_owned();
    let count = |event: &str| -> u64 {
        text.lines()
            .find_map(|l| {
                let rest = l.strip_prefix("# Samples: ")?;
                let (n, of) = rest.split_once(' ')?;
                of.contains(&format!("'{event}'")).then(|| n.parse().ok())?
            })
            .unwrap_or_else(|| panic!("perf report names no {event} samples: {text}"))
    };
    let (clock, faults) = (count("cpu-clock"), count("page-faults"));
    assert!(faults > 0 && clock > 100, "{clock} {faults}");
    let ours = ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "1"]);
    assert!(ours.status.success(), "{}", stderr(&ours));
    let header = String::from_utf8_lossy(&ours.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(
        header.contains(&format!(": {} samples of cpu-clock", thousands(clock))),
        "{header} (perf: {clock})"
    );
    assert!(
        stderr(&ours).contains(&format!(
            "shown are those of cpu-clock; left out: {} of page-faults",
            thousands(faults)
        )),
        "{}",
        stderr(&ours)
    );
    // The page faults' samples given an id the header does not name: they
    // are left out and counted, not taken for the first event's (perf
    // report stops at the first of them), nor for samples lost.
    let unknown = dir.path().join("unknown-id.data");
    let (patched, bytes) = give_samples_an_unknown_id(&data, 1);
    assert_eq!(patched, faults);
    std::fs::write(&unknown, bytes).unwrap();
    let ours = ichnos(&["report", "-i", unknown.to_str().unwrap(), "--limit", "1"]);
    assert!(ours.status.success(), "{}", stderr(&ours));
    let (text, err) = (String::from_utf8_lossy(&ours.stdout), stderr(&ours));
    let lost = |text: &str| -> String {
        let (_, rest) = text.split_once("% complete stacks; ").unwrap_or_default();
        rest.split_once(" lost").unwrap_or_default().0.to_owned()
    };
    let whole = ichnos(&["report", "-i", data.to_str().unwrap(), "--limit", "1"]);
    let whole = String::from_utf8_lossy(&whole.stdout).into_owned();
    assert!(
        text.contains(&format!(": {} samples of cpu-clock", thousands(clock)))
            && !lost(&whole).is_empty()
            && lost(&text) == lost(&whole),
        "{text} (perf: {clock} and {faults}; undamaged: {whole})"
    );
    assert!(
        err.contains(&format!(
            "{} with an event id the header does not name (left out)",
            if faults == 1 {
                "1 sample".to_owned()
            } else {
                format!("{} samples", thousands(faults))
            }
        )) && !err.contains("left out: "),
        "{err}"
    );
}

/// perf.data `data` with the id of each sample of its event `event` (its
/// place among the header's attrs) changed to one the header does not
/// name: how many samples were changed, and the file's bytes. The layout
/// is perf's (tools/perf/util/header.h): the header holds the attrs'
/// section at byte 24 and the data section at 40 (offset and size each);
/// each attr ends with the section of its ids; a sample's `PERF_SAMPLE_ID`
/// follows its ip, tid, time and addr, where those are sampled.
fn give_samples_an_unknown_id(data: &Path, event: u64) -> (u64, Vec<u8>) {
    const IDENTIFIER: u64 = 1 << 16;
    const ID: u64 = 1 << 6;
    let mut bytes = std::fs::read(data).unwrap();
    let u64_at = |b: &[u8], at: u64| {
        let at = usize::try_from(at).unwrap();
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    };
    let attr_size = u64_at(&bytes, 16);
    let attr = u64_at(&bytes, 24) + event * attr_size;
    let sample_type = u64_at(&bytes, attr + 24);
    let (ids_at, ids_len) = (
        u64_at(&bytes, attr + attr_size - 16),
        u64_at(&bytes, attr + attr_size - 8),
    );
    let ids: Vec<u64> = (0..ids_len / 8)
        .map(|i| u64_at(&bytes, ids_at + 8 * i))
        .collect();
    assert!(sample_type & (ID | IDENTIFIER) != 0, "{sample_type:#x}");
    let id_offset = if sample_type & IDENTIFIER != 0 {
        8
    } else {
        // ip, tid, time, addr: bits 0 to 3.
        8 + 8 * u64::from((sample_type & 0xf).count_ones())
    };
    let (mut at, end) = (u64_at(&bytes, 40), u64_at(&bytes, 40) + u64_at(&bytes, 48));
    let mut patched = 0;
    while at < end {
        let header = u64_at(&bytes, at);
        let (kind, size) = (header & 0xffff_ffff, header >> 48);
        assert!(size >= 8, "a record of {size} bytes at {at}");
        if kind == 9 && ids.contains(&u64_at(&bytes, at + id_offset)) {
            let id = usize::try_from(at + id_offset).unwrap();
            bytes[id..id + 8].copy_from_slice(&0xdead_0000_u64.to_le_bytes());
            patched += 1;
        }
        at += size;
    }
    (patched, bytes)
}

/// `n` with thousands separated by commas, as ichnos prints counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `perf script`'s callchains of `data` (kernel frames and user ones),
/// leaf first, by symbol: the count of each.
fn perf_script_chains(data: &Path) -> HashMap<Vec<String>, u64> {
    let out = Command::new("perf")
        .args(["script", "-F", "ip,sym", "--no-inline", "-i"])
        .arg(data)
        .output()
        .expect("perf runs");
    assert!(out.status.success(), "perf script: {}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut chains = HashMap::new();
    for block in text.split("\n\n") {
        let chain: Vec<String> = block
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                // Kernel frames too: ichnos keeps them, of a file recorded
                // on this boot.
                words.next()?;
                Some(words.next().unwrap_or("[unknown]").to_owned())
            })
            .collect();
        if !chain.is_empty() {
            *chains.entry(chain).or_insert(0) += 1;
        }
    }
    chains
}

/// A `perf record -g` sample's first address is the instruction the
/// thread was at, named as such: `one_byte` is a lone `ret`, so a sample
/// in it named from the byte before would land in the function before
/// it, and from the byte after, in what follows it. `spin_then` pauses
/// and falls through into it: the time goes to the `pause` and the
/// timer's interrupt is taken after it, at the `ret` (a lone `ret` called
/// from a loop got 2 of 3,500 samples on one host, 20 and more on
/// another). Every sample perf script puts in it, ichnos does too.
#[test]
fn perf_record_g_leaves_are_named_at_the_instruction_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("ret.c");
    std::fs::write(
        &source,
        "__asm__(\".text\\n.p2align 4\\n\"\n\
         \".globl spin_then\\n.type spin_then,@function\\nspin_then:\\n\\tpause\\n\"\n\
         \".size spin_then, .-spin_then\\n\"\n\
         \".globl one_byte\\n.type one_byte,@function\\none_byte:\\n\\tret\\n\"\n\
         \".size one_byte, .-one_byte\\n\");\n\
         void spin_then(void);\n\
         int main(void) { for (long i = 0; i < 10000000L; i++) spin_then(); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("ret");
    let built = Command::new("gcc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap();
    assert!(built.success());
    // A lone ret, as the test says.
    let disasm = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "--disassemble=one_byte"])
        .arg(&exe)
        .output()
        .unwrap();
    let body: Vec<String> = String::from_utf8_lossy(&disasm.stdout)
        .lines()
        .filter(|l| l.starts_with("    ") && l.contains(':'))
        .map(|l| l.split(':').nth(1).unwrap_or_default().trim().to_owned())
        .collect();
    assert_eq!(body, ["ret"], "{body:?}");
    let data = dir.path().join("perf.data");
    perf_record(&data, 4000, "fp", &[exe.to_str().unwrap()]);
    let theirs: u64 = perf_script_chains(&data)
        .iter()
        .filter(|(chain, _)| chain.first().is_some_and(|f| f == "one_byte"))
        .map(|(_, n)| n)
        .sum();
    let ours: u64 = folded(&data, &["--no-inline"])
        .iter()
        .filter(|(frames, _)| frames.last().is_some_and(|f| f == "one_byte"))
        .map(|(_, n)| n)
        .sum();
    assert!(theirs >= 20, "perf put only {theirs} samples in one_byte");
    assert_eq!(ours, theirs);
}

#[test]
fn perf_record_g_chains_are_kept_as_the_kernel_walked_them() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "chains",
        &[
            "-g",
            "-fno-omit-frame-pointer",
            fixture("leaves.c").to_str().unwrap(),
        ],
    );
    let data = dir.path().join("perf.data");
    perf_record(&data, 2000, "fp", &[exe.to_str().unwrap(), "8000"]);
    // ichnos's stacks of the fixture's own functions, leaf first, equal
    // perf script's chains of them.
    let own = |chain: &[String]| -> Vec<String> {
        chain
            .iter()
            .filter(|f| CHAINS_FUNCTIONS.contains(&f.as_str()) || *f == "unit")
            .cloned()
            .collect()
    };
    let mut ours: HashMap<Vec<String>, u64> = HashMap::new();
    for (frames, count) in folded(&data, &["--no-inline"]) {
        let leaf_first: Vec<String> = frames[1..].iter().rev().cloned().collect();
        *ours.entry(own(&leaf_first)).or_insert(0) += count;
    }
    let mut theirs: HashMap<Vec<String>, u64> = HashMap::new();
    for (chain, count) in perf_script_chains(&data) {
        *theirs.entry(own(&chain)).or_insert(0) += count;
    }
    ours.retain(|k, _| !k.is_empty());
    theirs.retain(|k, _| !k.is_empty());
    assert_eq!(ours, theirs);
    let heavy: u64 = ours
        .iter()
        .filter(|(k, _)| k.first().is_some_and(|f| f == "leaf_heavy"))
        .map(|(_, n)| n)
        .sum();
    assert!(heavy >= 500, "{ours:?}");
    // Chains from the leaf to main (stage_b's call is a tail call at -O2:
    // no frame of its own).
    assert!(
        ours.keys()
            .any(|k| k.first().is_some_and(|f| f == "leaf_heavy")
                && k.last().is_some_and(|f| f == "main")),
        "{ours:?}"
    );
}

/// A copy of `data` with `edit` applied, in `dir`.
fn damaged(dir: &Path, data: &Path, name: &str, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = std::fs::read(data).unwrap();
    edit(&mut bytes);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A `perf record --call-graph dwarf` recording, in `dir`, of the leaves
/// fixture running `loops` rounds.
fn leaves_recording(dir: &Path, loops: &str) -> PathBuf {
    let exe = build_fixture(dir, "chains", &[fixture("leaves.c").to_str().unwrap()]);
    let data = dir.join("perf.data");
    perf_record(&data, 1000, "dwarf", &[exe.to_str().unwrap(), loops]);
    data
}

/// A file perf wrote to a pipe (perf record -o - > FILE), whose header is
/// the magic and its own size, 16: named as such (it was "the attrs
/// section runs from 549755813889 for 0 bytes").
#[test]
fn a_perf_data_written_to_a_pipe_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let piped = dir.path().join("piped.data");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "perf record -q -e cpu-clock -o - -- true > {}",
            piped.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "perf record -o -: {}", stderr(&out));
    let bytes = std::fs::read(&piped).unwrap();
    assert_eq!(
        &bytes[..16],
        b"PERFILE2\x10\0\0\0\0\0\0\0",
        "a pipe-mode header"
    );
    fails_with(
        &["report", piped.to_str().unwrap()],
        &["piped.data", "written to a pipe (perf record -o -)"],
    );
}

/// A perf.data left by a perf record killed outright: the data section's
/// size is still 0, as perf writes it at its end (with the feature
/// sections), and the records follow the header all the same. (It was
/// refused for a feature section at an absurd offset.)
#[test]
fn a_perf_data_a_killed_perf_record_left_is_refused_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let killed = dir.path().join("killed.data");
    let _ = Command::new("timeout")
        .args([
            "-s",
            "KILL",
            "0.5",
            "perf",
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-g",
            "-o",
        ])
        .arg(&killed)
        .args(["--", "sleep", "2"])
        .output()
        .expect("timeout runs perf");
    fails_with(
        &["report", killed.to_str().unwrap()],
        &[
            "killed.data",
            "the data section's size (header byte 48) is 0",
            "did not finish (was it killed?)",
        ],
    );
}

#[test]
fn damaged_perf_data_files_are_refused_with_where() {
    let dir = tempfile::tempdir().unwrap();
    let data = leaves_recording(dir.path(), "500");
    let len = std::fs::metadata(&data).unwrap().len();
    // The data section's size pushed past the end of the file.
    let past = damaged(dir.path(), &data, "past.data", |b| {
        b[48..56].copy_from_slice(&(len * 4).to_le_bytes());
    });
    let err = fails_with(
        &["report", past.to_str().unwrap()],
        &["data section", "header byte 40"],
    );
    assert!(err.contains(&format!("past the file's {len}")), "{err}");
    // Cut in the middle of the data section (as a killed perf record
    // leaves a file): the section runs past the end.
    let cut = damaged(dir.path(), &data, "cut.data", |b| b.truncate(b.len() / 2));
    fails_with(
        &["report", cut.to_str().unwrap()],
        &["cut.data", "the data section", "past the file's"],
    );
    // An attr size of 0 (the reader divides by it).
    let zero = damaged(dir.path(), &data, "zero.data", |b| {
        b[16..24].copy_from_slice(&0u64.to_le_bytes());
    });
    fails_with(
        &["report", zero.to_str().unwrap()],
        &["attr_size 0 (header byte 16)"],
    );
    // An attr whose ids are said to be exabytes long (the reader would
    // reserve room for them all).
    let ids = damaged(dir.path(), &data, "ids.data", |b| {
        let attrs = u64::from_le_bytes(b[24..32].try_into().unwrap()) as usize;
        let attr_size = u64::from_le_bytes(b[16..24].try_into().unwrap()) as usize;
        // attr_size counts the attr and its 16-byte ids section.
        b[attrs + attr_size - 8..attrs + attr_size].copy_from_slice(&(1u64 << 62).to_le_bytes());
    });
    fails_with(&["report", ids.to_str().unwrap()], &["the ids of attr 0"]);
    // Shorter than a header.
    let short = damaged(dir.path(), &data, "short.data", |b| b.truncate(20));
    fails_with(
        &["report", short.to_str().unwrap()],
        &["shorter than a header"],
    );
    // A record whose header claims less than itself, named by its offset.
    let bytes = std::fs::read(&data).unwrap();
    let mut at = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    for _ in 0..10 {
        at += usize::from(u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]));
    }
    let small = damaged(dir.path(), &data, "small.data", |b| {
        b[at + 6..at + 8].copy_from_slice(&4u16.to_le_bytes());
    });
    fails_with(
        &["report", small.to_str().unwrap()],
        &[&format!("the record at byte {at} claims 4 bytes")],
    );
    // An aux trace record whose data is said to be 16 TiB (the reader
    // would grow its buffer to it).
    let aux = damaged(dir.path(), &data, "aux.data", |b| {
        b[at..at + 4].copy_from_slice(&71u32.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&(1u64 << 44).to_le_bytes());
    });
    fails_with(
        &["report", aux.to_str().unwrap()],
        &[&format!(
            "the aux trace at byte {at} claims 17592186044416 bytes"
        )],
    );
    // An event description claiming two billion events in a few hundred
    // bytes (the perf.data reader would size its table by the count
    // alone): refused before it is read.
    let events = damaged(dir.path(), &data, "events.data", |b| {
        let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let table = (word(b, 40) + word(b, 48)) as usize;
        let bits: Vec<usize> = (0..256)
            .filter(|&i| b[72 + i / 8] & (1 << (i % 8)) != 0)
            .collect();
        let entry = bits
            .iter()
            .position(|&bit| bit == 12)
            .expect("an EVENT_DESC section");
        let at = word(b, table + 16 * entry) as usize;
        b[at..at + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    });
    fails_with(
        &["report", events.to_str().unwrap()],
        &["feature section 12"],
    );
    // Records overwritten with noise: read or refused, never a crash.
    let noise = damaged(dir.path(), &data, "noise.data", |b| {
        let data_offset = u64::from_le_bytes(b[40..48].try_into().unwrap()) as usize;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for byte in &mut b[data_offset + 4096..data_offset + 8192] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
    });
    let out = ichnos(&["report", noise.to_str().unwrap()]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "status {:?}: {}",
        out.status,
        stderr(&out)
    );
}

/// An aux trace record too short to say how much data follows it is
/// refused by its offset (its data would otherwise be read as records).
#[test]
fn a_short_aux_trace_record_is_refused_with_where() {
    let dir = tempfile::tempdir().unwrap();
    let data = leaves_recording(dir.path(), "100");
    let bytes = std::fs::read(&data).unwrap();
    let mut short_at = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    while usize::from(u16::from_le_bytes([
        bytes[short_at + 6],
        bytes[short_at + 7],
    ])) >= 48
    {
        short_at += usize::from(u16::from_le_bytes([
            bytes[short_at + 6],
            bytes[short_at + 7],
        ]));
    }
    let short_len = u16::from_le_bytes([bytes[short_at + 6], bytes[short_at + 7]]);
    let short_aux = damaged(dir.path(), &data, "short-aux.data", |b| {
        b[short_at..short_at + 4].copy_from_slice(&71u32.to_le_bytes());
    });
    fails_with(
        &["report", short_aux.to_str().unwrap()],
        &[&format!(
            "the aux trace record at byte {short_at} is {short_len} bytes, shorter than its 48"
        )],
    );
}

#[test]
fn perf_names_the_demos_jit_frames_from_the_perf_map_the_registry_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("perf.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "1000", "-g", "-o"])
        .arg(&data)
        .args(["--", ICHNOS, "__demo-workload"])
        .env("ICHNOS_DEMO_PERF_MAP", "1")
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
    let pids = Command::new("perf")
        .args(["script", "-F", "pid", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .next()
        .expect("samples")
        .to_owned();
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let text = std::fs::read_to_string(&map).unwrap_or_default();
    let shares = perf_shares(&data);
    let _ = std::fs::remove_file(&map);
    assert!(
        text.contains(" jit_hot_loop\n"),
        "{}: {text:?}",
        map.display()
    );
    // perf's own report names the JIT frame, and gives it its share.
    let jit = shares.get("jit_hot_loop").copied().unwrap_or(0.0);
    assert!(jit > 10.0, "jit_hot_loop {jit}% in {shares:?}");
}

#[test]
fn perf_inject_jit_names_the_demos_jit_code_from_the_jitdump_the_registry_writes() {
    let dir = tempfile::tempdir().unwrap();
    let jit_dir = dir.path().join("jit");
    let data = dir.path().join("perf.data");
    let out = Command::new("perf")
        .args([
            "record",
            "-q",
            "-k",
            "mono",
            "-e",
            "cpu-clock",
            "-F",
            "1000",
            "-g",
            "-o",
        ])
        .arg(&data)
        .args(["--", ICHNOS, "__demo-workload"])
        .env("ICHNOS_DEMO_JITDUMP", "1")
        .env("JITDUMPDIR", &jit_dir)
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
    let injected = dir.path().join("injected.data");
    let out = Command::new("perf")
        .args(["inject", "--jit", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&injected)
        .output()
        .expect("perf inject runs");
    assert!(out.status.success(), "perf inject: {}", stderr(&out));
    let report = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym,dso",
            "-i",
        ])
        .arg(&injected)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    // The JIT function, named from the object perf inject made of its
    // jitdump record, with its share.
    let line = text
        .lines()
        .find(|l| l.contains("jit_hot_loop"))
        .unwrap_or_else(|| panic!("no jit_hot_loop in {text}"));
    assert!(line.contains("jitted-"), "{line}");
    let share: f64 = line
        .split_whitespace()
        .next()
        .and_then(|s| s.trim_end_matches('%').parse().ok())
        .unwrap();
    assert!(share > 10.0, "{line}");
}

/// The profile a conversion makes as it writes the recording is the one
/// a reader makes of the recording written (the report uses the first;
/// the exports that read the recording again, the second).
#[test]
fn the_profile_made_while_converting_is_the_recording_read_back() {
    use ichnos_profile::report::Profile;
    let dir = tempfile::tempdir().unwrap();
    let exe = build_chains(dir.path(), Build::Sframe);
    let data = dir.path().join("perf.data");
    perf_record(&data, 4000, "dwarf", &[exe.to_str().unwrap(), "4000"]);
    let recording = dir.path().join("converted.data");
    let file = std::fs::File::create(&recording).unwrap();
    let made = ichnos_profile::record::import_perf_data(&data, file, &recording).unwrap();
    let read = Profile::read(std::fs::File::open(&recording).unwrap()).unwrap();
    let made = made.profile;
    assert!(read.tallies.values().map(|t| t.samples).sum::<u64>() > 1000);
    assert_eq!(made.description, read.description);
    assert_eq!(made.mappings, read.mappings);
    assert_eq!(format!("{:?}", made.stacks), format!("{:?}", read.stacks));
    assert_eq!(made.tallies, read.tallies);
    assert_eq!(made.off_cpu, read.off_cpu);
    assert_eq!(made.threads, read.threads);
    assert_eq!(made.processes, read.processes);
    assert_eq!(made.lost, read.lost);
    let spaces = |p: &Profile| {
        let mut s: Vec<_> = p.spaces.iter().map(|(k, v)| format!("{k} {v:?}")).collect();
        s.sort();
        s
    };
    assert_eq!(spaces(&made), spaces(&read));
    assert_eq!(
        (
            made.throttled,
            made.end,
            made.end_lost,
            made.last_time,
            made.orphans
        ),
        (
            read.throttled,
            read.end,
            read.end_lost,
            read.last_time,
            read.orphans
        )
    );
    assert_eq!(
        (
            made.misnumbered_stacks,
            made.uncopied_spaces,
            made.has_span_names,
            made.trace_clock
        ),
        (
            read.misnumbered_stacks,
            read.uncopied_spaces,
            read.has_span_names,
            read.trace_clock
        )
    );
    assert!(made.truncated.is_none() && read.truncated.is_none());
}

/// `ichnos` with `args` and `HOME` at `home` (where perf keeps its build
/// id cache, and ichnos its own).
fn ichnos_at_home(home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ichnos"))
        .env("HOME", home)
        .args(args)
        .output()
        .unwrap()
}

/// The folded stacks of `ichnos report --format folded` of `data` with
/// `HOME` at `home`, and its standard error.
fn folded_at_home(home: &Path, data: &Path) -> (Vec<String>, String) {
    let out = ichnos_at_home(
        home,
        &[
            "report",
            "--no-inline",
            "--format",
            "folded",
            "-i",
            data.to_str().unwrap(),
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    (lines, err)
}

/// A perf.data file read after its program was rebuilt at the same path:
/// the build it recorded is found by the build id its header lists, in
/// perf's build-id cache, and the report is the one made before the
/// rebuild; with the cache gone, the program is named changed and its
/// frames are kept as addresses, never named from the new build. (The new
/// build used to be read as the one recorded, its names given to the old
/// addresses, with nothing said.)
#[test]
fn a_program_rebuilt_since_perf_recorded_it_is_read_from_perfs_cache_or_named_changed() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let exe = build_chains(dir.path(), Build::EhFrame);
    let data = dir.path().join("perf.data");
    let mut args = perf_record_command(
        &data,
        "cpu-clock",
        2000,
        "dwarf",
        &[exe.to_str().unwrap(), "6000"],
    );
    args.retain(|a| a != "-q");
    let out = Command::new("perf")
        .env("HOME", &home)
        .args(&args)
        .output()
        .expect("perf runs (install linux-perf)");
    assert!(out.status.success(), "perf record: {}", stderr(&out));
    assert!(
        home.join(".debug/.build-id").is_dir(),
        "perf keeps its cache in HOME"
    );
    let (before, err) = folded_at_home(&home, &data);
    assert!(
        before.iter().any(|l| l.contains(";leaf_heavy ")),
        "{before:?}: {err}"
    );
    // Another program at the same path.
    let other = build_fixture(dir.path(), "recursion", &["-fomit-frame-pointer"]);
    std::fs::rename(&other, &exe).unwrap();
    let (after, err) = folded_at_home(&home, &data);
    assert_eq!(after, before, "{err}");
    assert!(!err.contains("changed"), "{err}");
    // No copy kept: the program is named changed, and no frame is named
    // by the new build.
    std::fs::remove_dir_all(home.join(".debug")).unwrap();
    let (gone, err) = folded_at_home(&home, &data);
    assert!(
        err.contains(&format!(
            "{} has changed since the recording",
            exe.display()
        )),
        "{err}"
    );
    let names = ["leaf_heavy", "stage_a", "descend", "bottom"];
    assert!(
        !gone.iter().any(|l| names.iter().any(|n| l.contains(n))),
        "{gone:?}"
    );
    assert!(gone.iter().any(|l| l.contains("chains+0x")), "{gone:?}");
}
