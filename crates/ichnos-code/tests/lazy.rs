//! `.eh_frame` rows made FDE by FDE on lookup, against the whole table
//! converted at once, at every row's edges and between them, for real
//! objects: libc, the test binary, and a C fixture without `.eh_frame_hdr`.

mod support;

use std::path::Path;

use ichnos_code::elf::{file_rows, object_rows, RowChoice};
use ichnos_code::Rows;

/// Every address where a row starts or ends, and the ones beside them.
fn probes(table: &ichnos_code::RowTable) -> Vec<u64> {
    let base = table.base();
    let mut out = Vec::new();
    for r in table.rows() {
        let start = base + u64::from(r.ip_off);
        let end = base + r.end_off();
        out.extend([start, start + 1, start.midpoint(end), end - 1, end]);
        out.push(start.wrapping_sub(1));
    }
    out
}

fn agree(path: &Path) -> usize {
    agree_bytes(&std::fs::read(path).unwrap(), path)
}

fn agree_bytes(bytes: &[u8], path: &Path) -> usize {
    let eager = file_rows(bytes, RowChoice::EhFrame).unwrap();
    let file = object::File::parse(bytes).unwrap();
    let Rows::Lazy(lazy) = object_rows(&file, RowChoice::EhFrame).unwrap() else {
        panic!("{}: lazy rows expected", path.display());
    };
    let mut checked = 0;
    for addr in probes(&eager) {
        let want = eager
            .find(addr)
            .map(|r| (r.cfa_off, r.ra_off, r.fp_off, r.info));
        let got = lazy
            .find(addr)
            .map(|r| (r.cfa_off, r.ra_off, r.fp_off, r.info));
        assert_eq!(got, want, "{} at {addr:#x}", path.display());
        checked += 1;
    }
    // Every FDE was looked up, so every one was converted.
    assert_eq!(lazy.converted(), lazy.len(), "{}", path.display());
    checked
}

#[test]
fn lazy_rows_agree_with_the_whole_conversion_in_libc_and_the_test_binary() {
    assert!(agree(Path::new("/lib/x86_64-linux-gnu/libc.so.6")) > 10_000);
    assert!(agree(&std::env::current_exe().unwrap()) > 10_000);
}

#[test]
fn lazy_rows_agree_without_an_eh_frame_hdr() {
    let dir = tempfile::tempdir().unwrap();
    // No --eh-frame-hdr: the FDEs are found by reading their headers.
    let prog = dir.path().join("prog");
    let out = std::process::Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-Wl,--no-eh-frame-hdr", "-o"])
        .arg(&prog)
        .arg(support::fixtures_dir().join("signal.c"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&prog).unwrap();
    let file = object::File::parse(&bytes[..]).unwrap();
    assert!(object::Object::section_by_name(&file, ".eh_frame_hdr").is_none());
    assert!(agree(&prog) > 100);
}

#[test]
fn a_damaged_eh_frame_hdr_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    let out = std::process::Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer", "-o"])
        .arg(&prog)
        .arg(support::fixtures_dir().join("signal.c"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let bytes = std::fs::read(&prog).unwrap();
    let hdr = {
        let file = object::File::parse(&bytes[..]).unwrap();
        let section = object::Object::section_by_name(&file, ".eh_frame_hdr").unwrap();
        let (offset, size) = object::ObjectSection::file_range(&section).unwrap();
        offset as usize..(offset + size) as usize
    };
    // An unknown version: the table cannot be read at all.
    let mut bad_version = bytes.clone();
    bad_version[hdr.start] = 9;
    assert!(agree_bytes(&bad_version, &prog) > 100);
    // The last entry's FDE pointer (datarel sdata4) far outside .eh_frame.
    let mut bad_entry = bytes.clone();
    let last = hdr.end - 4;
    bad_entry[last..hdr.end].copy_from_slice(&0x7fff_0000_i32.to_le_bytes());
    assert!(agree_bytes(&bad_entry, &prog) > 100);
}

#[test]
fn a_lookup_converts_only_the_fde_it_needs() {
    let bytes = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
    let eager = file_rows(&bytes, RowChoice::EhFrame).unwrap();
    let file = object::File::parse(&bytes[..]).unwrap();
    let Rows::Lazy(lazy) = object_rows(&file, RowChoice::EhFrame).unwrap() else {
        panic!()
    };
    assert!(lazy.len() > 1000);
    let row = eager.rows()[eager.len() / 2];
    let addr = eager.base() + u64::from(row.ip_off);
    assert!(lazy.find(addr).is_some());
    assert_eq!(lazy.converted(), 1);
}

#[test]
fn sframe_rows_in_front_of_lazy_eh_frame_rows_agree_with_the_merged_table() {
    let dir = tempfile::tempdir().unwrap();
    let prog = support::build_prog(dir.path());
    for path in [prog, dir.path().join("libfix.so")] {
        let bytes = std::fs::read(&path).unwrap();
        let merged = file_rows(&bytes, RowChoice::SframeThenEhFrame).unwrap();
        let file = object::File::parse(&bytes[..]).unwrap();
        let Rows::Lazy(layered) = object_rows(&file, RowChoice::SframeThenEhFrame).unwrap() else {
            panic!("{}: lazy rows expected", path.display());
        };
        let sframe = file_rows(&bytes, RowChoice::Sframe).unwrap();
        let mut from_sframe = 0;
        for addr in probes(&merged) {
            let want = merged
                .find(addr)
                .map(|r| (r.cfa_off, r.ra_off, r.fp_off, r.info));
            let got = layered
                .find(addr)
                .map(|r| (r.cfa_off, r.ra_off, r.fp_off, r.info));
            assert_eq!(got, want, "{} at {addr:#x}", path.display());
            from_sframe += usize::from(sframe.find(addr).is_some());
        }
        // Not vacuous: most addresses are SFrame's, some .eh_frame's.
        assert!(from_sframe > 20, "{from_sframe}");
        assert!(layered.converted() > 0);
    }
}

/// The file range of section `name` of the ELF file in `bytes`.
fn section_range(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let file = object::File::parse(bytes).unwrap();
    let section = object::Object::section_by_name(&file, name).unwrap();
    let (offset, size) = object::ObjectSection::file_range(&section).unwrap();
    offset as usize..(offset + size) as usize
}

#[test]
fn either_unwind_section_answers_alone_when_the_other_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let prog = support::build_prog(dir.path());
    let bytes = std::fs::read(&prog).unwrap();
    // A damaged .sframe (its magic gone): the .eh_frame rows, lazily.
    let mut bad_sframe = bytes.clone();
    let sframe = section_range(&bytes, ".sframe");
    bad_sframe[sframe.start..sframe.start + 2].copy_from_slice(&[0, 0]);
    assert!(file_rows(&bad_sframe, RowChoice::Sframe).is_err());
    let file = object::File::parse(&bad_sframe[..]).unwrap();
    let Rows::Lazy(_) = object_rows(&file, RowChoice::SframeThenEhFrame).unwrap() else {
        panic!("lazy .eh_frame rows expected")
    };
    assert!(agree_bytes(&bad_sframe, &prog) > 100);
    // .eh_frame unreadable (its section header claims a terabyte):
    // SFrame's rows alone.
    let mut bad_eh_frame = bytes.clone();
    let index = {
        let file = object::File::parse(&bytes[..]).unwrap();
        object::ObjectSection::index(&object::Object::section_by_name(&file, ".eh_frame").unwrap())
            .0
    };
    let word = |at: usize, n: usize| -> u64 {
        bytes[at..at + n]
            .iter()
            .rev()
            .fold(0, |v, &b| (v << 8) | u64::from(b))
    };
    // ELF64: e_shoff at 0x28, e_shentsize at 0x3a; sh_size at 0x20 of an entry.
    let entry = word(0x28, 8) as usize + index * word(0x3a, 2) as usize;
    bad_eh_frame[entry + 0x20..entry + 0x28].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(file_rows(&bad_eh_frame, RowChoice::EhFrame).is_err());
    let file = object::File::parse(&bad_eh_frame[..]).unwrap();
    let sframe_only = file_rows(&bytes, RowChoice::Sframe).unwrap();
    let Rows::Fixed(table) = object_rows(&file, RowChoice::SframeThenEhFrame).unwrap() else {
        panic!("SFrame rows alone expected")
    };
    assert_eq!(table.rows(), sframe_only.rows());
    assert!(!table.is_empty());
}
