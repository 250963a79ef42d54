//! `/proc/PID/maps` text from an untrusted source: errors, never panics.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(entries) = ichnos_image::parse_maps(1, text) {
            for e in entries {
                assert!(e.range.start < e.range.end);
            }
        }
    }
});
