//! `.eh_frame` bytes from an untrusted file converted to unwind rows:
//! errors, never panics; bounded by the input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let conversion = ichnos_code::eh_frame::rows_from_eh_frame(data, 0x2000, Some(0x1000), None, None);
    let _ = conversion.table.find(0x1000);
});
