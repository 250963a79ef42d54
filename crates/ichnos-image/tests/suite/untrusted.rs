//! The parsers of untrusted bytes on arbitrary input: an error or a
//! plausible answer, never a panic. The fuzz targets in `fuzz/` run the
//! same functions under libFuzzer.

use std::path::Path;

use ichnos_image::{load_segments_from_bytes, parse_maps};
use proptest::prelude::*;

/// A valid 64-bit little-endian ELF header with one program header, to
/// mutate: random bytes alone rarely get past the magic.
fn elf_with_one_load() -> Vec<u8> {
    let mut f = vec![0u8; 64 + 56];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 2; // 64-bit
    f[5] = 1; // little-endian
    f[6] = 1; // version
    f[16] = 3; // ET_DYN
    f[18] = 62; // x86-64
    f[20] = 1;
    f[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    f[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    f[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    f[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let ph = &mut f[64..];
    ph[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    ph[32..40].copy_from_slice(&0x78u64.to_le_bytes()); // p_filesz
    f
}

#[test]
fn the_seed_elf_parses() {
    let segments =
        load_segments_from_bytes(Path::new("seed"), &elf_with_one_load(), 0x1000).unwrap();
    assert_eq!(segments.len(), 1);
    assert_eq!(
        (segments[0].offset, segments[0].filesz, segments[0].vaddr),
        (0, 0x78, 0x1000)
    );
}

proptest! {
    #[test]
    fn elf_program_headers_never_panic(
        edits in proptest::collection::vec((0usize..120, any::<u8>()), 0..16),
        cut in 0usize..=120,
        bias in any::<u64>(),
    ) {
        let mut bytes = elf_with_one_load();
        for (at, value) in edits {
            bytes[at] = value;
        }
        bytes.truncate(cut);
        if let Ok(segments) = load_segments_from_bytes(Path::new("mutant"), &bytes, bias) {
            prop_assert!(segments.len() <= 1);
        }
    }

    #[test]
    fn proc_maps_never_panics(text in "([0-9a-f]{0,13}-[0-9a-f]{0,13} [rwxps-]{0,5} [0-9a-f]{0,9} [0-9a-f:]{0,6} [0-9]{0,8} {0,20}[ -~]{0,30}\n){0,4}") {
        if let Ok(entries) = parse_maps(1, &text) {
            for e in entries {
                prop_assert!(e.range.start < e.range.end);
                prop_assert_eq!(e.perms.len(), 4);
            }
        }
    }

    #[test]
    fn proc_maps_arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse_maps(1, &text);
    }
}
