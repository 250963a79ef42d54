//! perf map text from an untrusted file: line errors, never panics.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let map = ichnos_symbol::perf_map::PerfMap::parse(&text, "fuzz");
    for e in map.entries().iter().take(16) {
        let _ = map.lookup(e.start);
    }
});
