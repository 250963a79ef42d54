//! perf.data files made into recordings: a clear error or a recording,
//! never a panic, a hang or an unbounded allocation, whatever the header,
//! sections and records claim.
#![no_main]

use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("ichnos-fuzz-perf-{}.data", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(sink) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return;
    };
    let _ = ichnos_profile::record::import_perf_data(&path, sink, Path::new("/dev/null"));
});
