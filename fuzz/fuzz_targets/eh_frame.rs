//! `.eh_frame` bytes from an untrusted file converted to unwind rows, and
//! the CFI kept for unexpressible rows evaluated with registers and memory
//! made of the input: errors, never panics; bounded by the input.
#![no_main]

use ichnos_code::Regs;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let conversion =
        ichnos_code::eh_frame::rows_from_eh_frame(data, 0x2000, Some(0x1000), None, None);
    let _ = conversion.table.find(0x1000);
    let word = |addr: u64| -> Option<u64> {
        let at = usize::try_from(addr).ok()? % data.len().max(1);
        data.get(at..)?.first_chunk::<8>().map(|w| u64::from_le_bytes(*w))
    };
    for fde in conversion.cfi_fdes.iter().take(8) {
        for pc in [fde.start, fde.start.wrapping_add(1), fde.end.wrapping_sub(1)] {
            let regs = Regs {
                ip: pc,
                sp: word(pc).unwrap_or(0x7000),
                fp: word(pc ^ 8).unwrap_or(0x7100),
            };
            let mut read = |addr| word(addr);
            let _ = conversion.table.evaluate_cfi(pc, 0, regs, &mut read);
        }
    }
});
