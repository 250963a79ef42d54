//! Symbol index files (read from a cache directory others can write):
//! refused with an error naming an offset, or looked up without a panic
//! or a read outside the file.
#![no_main]

use ichnos_symbol::SymbolIndex;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // The bytes as a file.
    probe(data.to_vec(), data);
    // The bytes behind a header whose counts fit them, so the table checks
    // and the lookups are reached.
    let [r, f, s, rest @ ..] = data else { return };
    let (r, f, s) = (u32::from(*r % 64) + 1, u32::from(*f % 64), u32::from(*s % 64));
    // Frames of 32 bytes (format version 3, whose layout is version 2's).
    let tables = ((136 + 12 * r as usize + 7) & !7) - 136 + 32 * f as usize + 8 * s as usize;
    let Some(b) = rest.len().checked_sub(tables) else { return };
    let mut file = Vec::with_capacity(136 + rest.len());
    file.extend_from_slice(b"ICHNSYMI");
    file.extend_from_slice(&3u32.to_le_bytes());
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&[0xab; 64]);
    file.extend_from_slice(&0u64.to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    file.extend_from_slice(&u32::MAX.to_le_bytes());
    file.extend_from_slice(&[0; 16]);
    for n in [r, f, s, b as u32] {
        file.extend_from_slice(&n.to_le_bytes());
    }
    file.extend_from_slice(&0u64.to_le_bytes());
    file.extend_from_slice(rest);
    probe(file, data);
});

fn probe(bytes: Vec<u8>, data: &[u8]) {
    let Ok(index) = SymbolIndex::from_bytes(bytes) else { return };
    let mut addrs = vec![0, u64::MAX];
    addrs.extend(
        data.chunks_exact(8)
            .take(16)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())),
    );
    for demangle in [true, false] {
        for frames in index.frames(&addrs, demangle) {
            assert!(!frames.is_empty());
        }
        for &a in &addrs {
            assert!(index.frame_refs(a, demangle).count() >= 1);
            std::hint::black_box(index.unnamed(a));
        }
    }
}
