//! `.eh_frame` bytes from an untrusted file converted to unwind rows, and
//! the CFI kept for unexpressible rows evaluated with registers and memory
//! made of the input, the same bytes read as `.debug_frame`, and their
//! FDEs' ranges: errors, never panics; bounded by the input.
#![no_main]

use ichnos_code::Regs;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let conversion =
        ichnos_code::eh_frame::rows_from_eh_frame(data, 0x2000, Some(0x1000), None, None);
    let _ = conversion.table.find(0x1000);
    // The functions' ranges, as the symbolizer takes them for unnamed code.
    let ranges = ichnos_code::eh_frame::fde_ranges_of(data, 0x2000, Some(0x1000), None);
    assert!(ranges.len() <= data.len() / 12 + 1);
    assert!(ranges.iter().all(|&(start, end)| start < end));
    let debug = ichnos_code::debug_frame::rows_from_debug_frame(data, None);
    let _ = debug.table.find(debug.table.base());
    let word = |addr: u64| -> Option<u64> {
        let at = usize::try_from(addr).ok()? % data.len().max(1);
        data.get(at..)?.first_chunk::<8>().map(|w| u64::from_le_bytes(*w))
    };
    // The same bytes converted FDE by FDE on lookup, found through the
    // first half read as an .eh_frame_hdr and then by their headers.
    let (hdr, _) = data.split_at(data.len() / 2);
    for hdr in [Some((hdr, 0x1800)), None] {
        let lazy =
            ichnos_code::lazy::LazyRows::new(data.to_vec(), 0x2000, hdr, Some(0x1000), None, 0);
        for f in conversion.table.rows().iter().take(16) {
            let _ = lazy.find(conversion.table.base() + u64::from(f.ip_off));
        }
        let _ = lazy.find(0x1000);
        let mut read = |addr| word(addr);
        let _ = lazy.evaluate_cfi(0x1000, 0, Regs { ip: 0x1000, sp: 0x7000, fp: 0, bx: None }, &mut read);
    }
    for fde in conversion.cfi_fdes.iter().take(8) {
        for pc in [fde.start, fde.start.wrapping_add(1), fde.end.wrapping_sub(1)] {
            let regs = Regs {
                ip: pc,
                sp: word(pc).unwrap_or(0x7000),
                fp: word(pc ^ 8).unwrap_or(0x7100),
                bx: None,
            };
            let mut read = |addr| word(addr);
            let _ = conversion.table.evaluate_cfi(pc, 0, regs, &mut read);
        }
    }
});
