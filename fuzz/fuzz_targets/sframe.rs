//! SFrame sections from untrusted files: every version and ABI, header,
//! FDE and FRE decoding, lookups and conversion to rows. Errors, never
//! panics; bounded work.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(section) = ichnos_code::sframe::SframeSection::parse(data, 0x40_0000) else {
        return;
    };
    let conversion = section.to_rows();
    for fde in section.fdes().take(64).flatten() {
        for pc in [fde.start, fde.start.wrapping_add(u64::from(fde.size) / 2), fde.end().wrapping_sub(1)] {
            let _ = section.find(pc);
            let _ = conversion.table.find(pc);
        }
    }
});
