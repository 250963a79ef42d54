//! ELF program headers from an untrusted file: errors, never panics, and
//! allocates no more than the input describes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ichnos_image::load_segments_from_bytes(std::path::Path::new("fuzz"), data, 0x1000);
});
