//! The exports' memory does not grow with the samples: recordings of
//! the same few stacks, one ten times as long as the other, exported in
//! every format, the peak resident memory of each `ichnos report` taken
//! by Python's `resource` module from the kernel's accounting of the
//! child.

use std::path::Path;

mod common;

use common::{python, ICHNOS};
use ichnos_data::{Meta, Record, StackOut, StackStop, Target, Writer};

/// Writes a recording of one process with two threads sampling three
/// stacks in turn, `samples` samples in all, a millisecond apart.
fn synthetic(path: &Path, samples: u64) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = Writer::new(file).unwrap();
    w.push(&Record::Meta(Meta {
        host: b"test",
        kernel: b"6.1.0",
        command: vec![b"synthetic".as_slice()],
        event: b"cpu-clock",
        frequency: 1000,
        stack_size: 16384,
        start_monotonic_ns: 1,
        start_realtime_ns: 1_700_000_000_000_000_000,
        recorder: b"ichnos test",
        target: Target::Processes,
        off_cpu_event: b"",
    }))
    .unwrap();
    w.push(&Record::Process {
        asid: 1,
        pid: 10,
        parent: 0,
        time: 0,
        name: b"synthetic",
    })
    .unwrap();
    for tid in [10, 11] {
        w.push(&Record::Thread {
            pid: 10,
            tid,
            time: 0,
            name: format!("worker-{tid}").as_bytes(),
        })
        .unwrap();
    }
    let frames: [&[u64]; 3] = [&[0x1010, 0x2020], &[0x1030, 0x2020], &[0x1050]];
    for (id, frames) in frames.iter().enumerate() {
        w.push(&Record::StackOut(StackOut {
            id: id as u64,
            asid: 1,
            stop: StackStop::Complete,
            frames,
        }))
        .unwrap();
    }
    for i in 0..samples {
        w.push(&Record::Sample {
            // A millisecond apart and a few microseconds more or less, so
            // that each time delta's text is long (`1.007919`, not `1`).
            time: i * 1_000_000 + (i * 7919) % 999_983,
            pid: 10,
            tid: 10 + i % 2,
            cpu: 0,
            stack: i % 3,
            weight: 1_000_000,
        })
        .unwrap();
    }
    w.push(&Record::End {
        time: samples * 1_000_000,
        samples,
        lost: 0,
    })
    .unwrap();
    w.finish().unwrap();
}

/// The peak resident kilobytes of `ichnos report -i data --format
/// format`, with the number of samples its output holds (the Firefox
/// profile's sample tables; the others' totals are checked elsewhere).
fn peak_kib(data: &Path, format: &str, dir: &Path) -> (u64, u64) {
    peak_kib_within(data, format, dir, None)
}

/// `peak_kib`, with the Firefox export's sample-text budget set to
/// `budget` bytes where given.
fn peak_kib_within(data: &Path, format: &str, dir: &Path, budget: Option<usize>) -> (u64, u64) {
    let out = dir.join(format!("out.{format}"));
    let printed = python(
        r#"
import gzip, json, os, resource, subprocess, sys
ichnos, data, fmt, out, budget = sys.argv[1:]
env = dict(os.environ)
if budget:
    env["ICHNOS_FIREFOX_SAMPLE_BUDGET"] = budget
subprocess.run([ichnos, "report", "-q", "-i", data, "--format", fmt, "-o", out], check=True, env=env)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
samples = 0
if fmt == "firefox":
    d = json.load(gzip.open(out))
    for t in d["threads"]:
        s = t["samples"]
        assert len(s["stack"]) == len(s["timeDeltas"]) == s["length"]
        samples += sum(s["weight"])
print(peak, samples)
"#,
        &[
            ICHNOS,
            data.to_str().unwrap(),
            format,
            out.to_str().unwrap(),
            &budget.map(|b| b.to_string()).unwrap_or_default(),
        ],
    );
    let mut fields = printed.split_whitespace().map(|f| f.parse().unwrap());
    (fields.next().unwrap(), fields.next().unwrap())
}

#[test]
fn the_exports_memory_does_not_grow_with_the_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (short, long) = (dir.path().join("short.data"), dir.path().join("long.data"));
    synthetic(&short, 50_000);
    synthetic(&long, 500_000);
    for format in ["pprof", "speedscope", "folded", "svg"] {
        let (a, _) = peak_kib(&short, format, dir.path());
        let (b, _) = peak_kib(&long, format, dir.path());
        // 450,000 samples more: what held as little as 16 bytes of each
        // would need 7 MB more.
        assert!(
            b < a + 4 * 1024,
            "{format}: {a} KiB for 50,000 samples, {b} KiB for 500,000"
        );
    }
    // The Firefox timeline holds every sample in the file, and holds the
    // text of its sample tables within the budget: 1 MiB here, where
    // the long recording's columns are about 6 MB (the default bound,
    // 64 MiB, would hold them whole).
    let budget = Some(1 << 20);
    let (a, a_samples) = peak_kib_within(&short, "firefox", dir.path(), budget);
    let (b, b_samples) = peak_kib_within(&long, "firefox", dir.path(), budget);
    assert_eq!((a_samples, b_samples), (50_000, 500_000));
    assert!(
        b < a + 4 * 1024,
        "firefox: {a} KiB for 50,000 samples, {b} KiB for 500,000"
    );
    // Held whole, the long one's columns show in the peak: the
    // measurement can tell. (With times a whole millisecond apart, each
    // delta's text was a digit or two, and in a release build the columns
    // held whole stood less than 1 MiB above the peak of the report's
    // other work; with these times, 3 MiB, and 7 in a debug build.)
    let (whole, _) = peak_kib(&long, "firefox", dir.path());
    assert!(
        whole > b + 2 * 1024,
        "{whole} KiB held whole, {b} KiB within 1 MiB"
    );
}
