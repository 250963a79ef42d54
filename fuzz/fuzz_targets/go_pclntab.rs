//! A Go program's function table (`.gopclntab`) from an untrusted file:
//! the header of each layout, the function table, names and pcsp tables
//! made into rows; errors end the read, never a panic; bounded by the
//! input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for text in [None, Some(0x40_1000)] {
        let functions = ichnos_code::go_pclntab::parse(data, text);
        if let Some(rows) = ichnos_code::go_pclntab::rows_of(data, text, 0) {
            for f in functions.iter().take(16) {
                let _ = rows.find(f.start);
            }
        }
    }
});
