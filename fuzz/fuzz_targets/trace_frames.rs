//! A traced process's shared buffer as the process could leave it: the
//! function tracer's runtime runs inside the traced program, which may
//! write anything there. The recorder reads it a piece at a time into a
//! recording (`ichnos_trace::fuzzing`), which is then read back as a
//! trace, totalled per function and replayed, whole and restricted to
//! calls as `-F`, `-N` and `-D` choose them. Refusals and errors, never
//! a panic, a hang or unbounded memory.
//!
//! The input's first 9 bytes say how the reads cut it: four offsets (two
//! bytes each) where pieces end, then a byte whose low four bits say
//! which pieces leave their cut frame for the next, and whose bit 4
//! makes the shared buffer small (4 KiB, so that frames larger than it
//! are refused) rather than 1 MiB. The rest is the buffer's bytes.
#![no_main]

use ichnos_profile::report::SymbolOptions;
use ichnos_trace::replay::{replay, ReplayOptions};
use ichnos_trace::totals::{totals, TotalsSort};
use ichnos_trace::{CallFilters, Trace};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((head, bytes)) = data.split_at_checked(9) else {
        return;
    };
    let cuts: Vec<usize> = head[..8]
        .chunks(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])))
        .collect();
    let leave: Vec<bool> = (0..4).map(|i| head[8] >> i & 1 == 1).collect();
    let capacity = if head[8] & 0x10 != 0 { 4096 } else { 1 << 20 };
    let path = std::env::temp_dir().join(format!("ichnos-fuzz-trace-{}.data", std::process::id()));
    let read = ichnos_trace::fuzzing::read_shared_buffer(bytes, &cuts, &leave, capacity, &path);
    if read.is_ok() {
        let options = SymbolOptions {
            inlines: false,
            index_dir: None,
            debug_dirs: Vec::new(),
            addresses: true,
        };
        if let Ok(mut trace) = Trace::open(&path, &options, &mut |_, _| {}) {
            let _ = totals(&trace, &[], TotalsSort::Total);
            let _ = replay(&trace, &ReplayOptions::default(), std::io::sink());
            // And restricted: -D, and -F and -N with patterns that name
            // every function; the table and the replay through it.
            let restricted = [
                CallFilters {
                    depth: Some(2),
                    ..CallFilters::default()
                },
                CallFilters {
                    only: vec!["*".into()],
                    not: vec!["*_*".into()],
                    depth: Some(3),
                },
            ];
            for filters in &restricted {
                if trace.restrict(filters).is_ok() {
                    let _ = totals(&trace, &[], TotalsSort::Total);
                    let _ = replay(&trace, &ReplayOptions::default(), std::io::sink());
                }
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    let mut old = path.into_os_string();
    old.push(".old");
    let _ = std::fs::remove_file(old);
});
