//! The Firefox export of a recording made from fuzzer input: the bytes
//! are read as records to write (processes, threads, stacks, samples and
//! off-CPU intervals with any times, ids and weights, out of order, of
//! stacks that exist or not), so that every recording reaches the export
//! past the chunks' checksums; then it is read back and exported with a
//! budget of a few bytes, so that the sample tables are streamed from many
//! reads. Errors, never panics; and the file written is JSON whose every
//! thread's columns are as long as its sample table says.
#![no_main]

use std::sync::Arc;

use ichnos_data::{Meta, OffCpuState, Record, StackOut, StackStop, Target, Writer};
use ichnos_profile::report::export::write_firefox;
use ichnos_profile::report::{Filter, Frame, Profile, Symbolized};

/// The recording the bytes describe: each record 8 bytes, its first the
/// kind.
fn recording(data: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_chunk_target(Vec::new(), 256).unwrap();
    let _ = w.push(&Record::Meta(Meta {
        host: b"fuzz",
        kernel: b"6.1.0",
        command: vec![b"fuzzed".as_slice()],
        event: if data.first().is_some_and(|b| b & 1 == 1) {
            b"cpu-clock"
        } else {
            b"cycles"
        },
        frequency: u64::from(data.get(1).copied().unwrap_or(0)) * 100,
        stack_size: 8192,
        start_monotonic_ns: 0,
        start_realtime_ns: 1,
        recorder: b"fuzz",
        target: Target::Processes,
        off_cpu_event: b"sched:sched_switch",
    }));
    for r in data.chunks_exact(8) {
        let (pid, tid) = (u64::from(r[1] % 4), u64::from(r[2] % 8));
        let time = u64::from(u16::from_le_bytes([r[3], r[4]])) * 1000;
        let stack = u64::from(r[5] % 16);
        let weight = u64::from(u16::from_le_bytes([r[6], r[7]])) * 997;
        let _ = match r[0] % 6 {
            0 => w.push(&Record::Process {
                asid: pid,
                pid,
                parent: 0,
                time,
                name: b"proc",
            }),
            1 => w.push(&Record::Thread {
                pid,
                tid,
                time,
                name: &r[3..],
            }),
            2 => {
                let frames = [0x1000 + u64::from(r[3]), 0x2000 + u64::from(r[4])];
                let n = usize::from(r[6] % 3);
                w.push(&Record::StackOut(StackOut {
                    id: stack,
                    asid: pid,
                    stop: if r[7] & 1 == 0 {
                        StackStop::Complete
                    } else {
                        StackStop::StackEnd
                    },
                    frames: &frames[..n],
                }))
            }
            3 => w.push(&Record::OffCpu {
                time,
                pid,
                tid,
                cpu: 0,
                stack,
                duration: weight,
                state: if r[7] & 1 == 0 {
                    OffCpuState::Waiting
                } else {
                    OffCpuState::Preempted
                },
            }),
            _ => w.push(&Record::Sample {
                time,
                pid,
                tid,
                cpu: 0,
                stack,
                weight,
            }),
        };
    }
    w.finish().unwrap_or_default()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let bytes = recording(data);
    let Ok(profile) = Profile::read(&bytes[..]) else {
        return;
    };
    // Each stack's frames named after their addresses, as symbolization
    // would name them.
    let symbols = Symbolized {
        stacks: profile
            .stacks
            .iter()
            .map(|s| {
                s.as_ref().map(|s| {
                    s.frames
                        .iter()
                        .map(|(addr, _)| Frame {
                            function: Arc::from(format!("f{addr:x}")),
                            object: Arc::from(if addr & 1 == 0 { "prog" } else { "" }),
                            source: None,
                            inlined: false,
                            jit: addr & 2 == 2,
                            kernel: addr & 6 == 4,
                        })
                        .collect()
                })
            })
            .collect(),
        ..Symbolized::default()
    };
    let budget = usize::from(data.get(2).copied().unwrap_or(0));
    let mut out = Vec::new();
    let written = write_firefox(
        &profile,
        &symbols,
        &Filter::default(),
        || Ok::<_, std::io::Error>(&bytes[..]),
        budget,
        &mut out,
    );
    if written.is_ok() {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&out[..]), &mut text).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&text).expect("the export is JSON");
        for thread in json["threads"].as_array().expect("threads") {
            let samples = &thread["samples"];
            let length = samples["length"].as_u64().expect("length") as usize;
            for column in ["stack", "timeDeltas", "weight", "threadCPUDelta"] {
                assert_eq!(
                    samples[column].as_array().expect(column).len(),
                    length,
                    "{column}"
                );
            }
        }
    }
});
