//! The recorder's handling of records, on samples of this very thread:
//! which walks that run off a sample's stack copy count as having gone
//! on past it (the note that suggests a larger `--stack-size`), and the
//! interval off the CPU of a leaving whose switch sample was lost.

use ichnos_data::{Reader, Record as Stored, StackStop};
use ichnos_perf::record::{parse, Record, SampleId, Switch};

use super::alloc_test::{format, recorder, sample_here_copying};
use super::off_cpu::OffCpu;

#[test]
fn a_walk_off_a_copy_that_the_stacks_end_cut_short_is_not_past_the_copy() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    // Asked for 16 KiB and given 256 bytes, as where the kernel's copy
    // ends at the end of the stack's mapping: more would not have come.
    let short = sample_here_copying(&format, start, 16 << 10, 256);
    // Asked for 256 bytes and given them: the stack went on.
    let whole = sample_here_copying(&format, start + 1, 256, 256);
    for record in [&short, &whole] {
        let Ok(sample @ Record::Sample(_)) = parse(&format, record) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
    }
    assert_eq!(recorder.samples, 2);
    // Both walks ran off their copies (this thread's frames take more
    // than 256 bytes).
    assert_eq!(recorder.complete, 0);
    assert_eq!(recorder.past_copy, 1, "only the copy as long as asked for");
    super::close(recorder.output, writer, 0).unwrap();
}

#[test]
fn a_leaving_whose_switch_sample_was_lost_is_an_interval_without_frames() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    // Off-CPU time recorded, its switch samples from event 77: the clock
    // samples here carry no id, so none is a switch sample.
    recorder.off_cpu = OffCpu::new(vec![77]);
    // The thread runs (a sample with its user registers): a program's.
    let record = sample_here_copying(&format, start, 16 << 10, 16 << 10);
    let Ok(sample @ Record::Sample(s)) = parse(&format, &record) else {
        panic!("not a sample");
    };
    recorder.handle(&sample, false);
    let (pid, tid) = (s.id.pid.unwrap(), s.id.tid.unwrap());
    let switch = |out: bool, time: u64| {
        Record::Switch(Switch {
            out,
            preempted: false,
            other: None,
            sample_id: SampleId {
                pid: Some(pid),
                tid: Some(tid),
                time: Some(time),
                id: None,
                stream_id: None,
                cpu: Some(0),
            },
        })
    };
    // It leaves, with no switch sample before the record, and comes back
    // 3 ms later.
    recorder.handle(&switch(true, start + 2_000_000), false);
    recorder.handle(&switch(false, start + 5_000_000), false);
    assert_eq!(recorder.off_cpu.unsampled, 1);
    super::close(recorder.output, writer, 0).unwrap();

    let file = std::fs::File::open(dir.path().join("x.data")).unwrap();
    let mut reader = Reader::new(std::io::BufReader::new(file)).unwrap();
    let mut frameless = Vec::new();
    let mut intervals = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                Stored::Stack(stack) if stack.stop == StackStop::SampleLost => {
                    assert_eq!(stack.frames.iter().count(), 0);
                    frameless.push(stack.id);
                }
                Stored::OffCpu {
                    tid: t,
                    stack,
                    duration,
                    ..
                } => intervals.push((t, stack, duration)),
                _ => {}
            }
        }
    }
    assert_eq!(frameless.len(), 1, "one stack without frames");
    assert_eq!(
        intervals,
        [(u64::from(tid), frameless[0], 3_000_000)],
        "the interval, on that stack"
    );
}
