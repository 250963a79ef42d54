//! The SFrame reader against independent truths: binutils' own `objdump
//! --sframe` on sections `as --gsframe` produced (v1), a model encoded by a
//! test-only writer (v1, v2, v2 with PCREL, v3; AMD64 and AArch64), and the
//! simple-frame-rs crate as a second reader. Malformed sections give typed
//! errors and never panic.

mod support;

use object::{Object, ObjectSection};

use ichnos_code::sframe::{SframeErrorKind, SframeSection};
use proptest::prelude::*;
use support::sframe_writer::{encode, model_find, Arch, Flavour, ModelFre, ModelFunc};

const SECTION_ADDR: u64 = 0x40_2000;

fn fre_strategy(arch: Arch) -> impl Strategy<Value = ModelFre> {
    (
        any::<bool>(),
        prop_oneof![8i32..200, -40_000i32..40_000, 100_000i32..200_000],
        proptest::option::of(-300i32..-8),
        proptest::option::of(-300i32..-8),
    )
        .prop_map(move |(sp_base, cfa, ra, fp)| {
            let (ra, fp) = match arch {
                Arch::Amd64 => (None, fp),
                // AArch64 FREs cannot say "FP saved, RA not".
                Arch::Aarch64 => (ra, if ra.is_some() { fp } else { None }),
            };
            ModelFre {
                start: 0,
                sp_base,
                cfa,
                ra,
                fp,
                outermost: false,
            }
        })
}

fn func_strategy(arch: Arch, allow_mask: bool) -> impl Strategy<Value = ModelFunc> {
    (
        prop_oneof![1u32..300, 300u32..70_000, 70_000u32..200_000],
        proptest::collection::vec(fre_strategy(arch), 1..6),
        any::<bool>(),
        0u32..1_000,
    )
        .prop_map(move |(size, mut fres, mask, gap)| {
            let mask = (allow_mask && mask).then_some(16u8);
            let limit = if mask.is_some() { 16 } else { size };
            // Strictly increasing starts below the limit, the first at 0.
            let n = fres.len().min(limit as usize);
            fres.truncate(n);
            for (i, r) in fres.iter_mut().enumerate() {
                r.start = (i as u32 * (limit / n as u32)).min(limit - 1);
            }
            fres.dedup_by_key(|r| r.start);
            let size = if mask.is_some() { size.max(16) } else { size };
            ModelFunc {
                start: u64::from(gap),
                size,
                mask,
                fres,
            }
        })
}

/// Functions laid out one after another (with gaps) from `0x40_1000`.
fn funcs_strategy(arch: Arch, allow_mask: bool) -> impl Strategy<Value = Vec<ModelFunc>> {
    proptest::collection::vec(func_strategy(arch, allow_mask), 0..12).prop_map(|mut funcs| {
        let mut at = 0x40_1000u64;
        for f in &mut funcs {
            at += f.start; // the gap
            f.start = at;
            at += u64::from(f.size);
        }
        funcs
    })
}

fn check_against_model(funcs: &[ModelFunc], flavour: Flavour, arch: Arch, pcs: &[u64]) {
    let bytes = encode(funcs, flavour, arch, SECTION_ADDR);
    let section = SframeSection::parse(&bytes, SECTION_ADDR).unwrap();
    let rows = section.to_rows();
    assert_eq!(rows.skipped_fdes, 0, "{:?}", rows.first_error);
    let first = funcs.first().map_or(0, |f| f.start);
    let last = funcs.last().map_or(0, |f| f.start + u64::from(f.size));
    let mut probe: Vec<u64> = pcs
        .iter()
        .map(|p| first.saturating_sub(8) + p % (last - first + 16).max(1))
        .collect();
    for f in funcs {
        probe.extend([
            f.start,
            f.start + u64::from(f.size) - 1,
            f.start + u64::from(f.size),
        ]);
        probe.extend(f.fres.iter().map(|r| f.start + u64::from(r.start)));
    }
    for pc in probe {
        let want = model_find(funcs, pc, 16);
        let got = section.find(pc).unwrap();
        let row = rows.table.find(pc);
        match (&want, &got) {
            (None, None) => assert!(row.is_none(), "row at {pc:#x} where the model has none"),
            (Some((start, fre)), Some(found)) => {
                assert_eq!(found.fde.start, *start, "function of {pc:#x}");
                assert_eq!(found.fre.cfa_base_is_sp(), fre.sp_base, "base at {pc:#x}");
                assert_eq!(found.fre.cfa_off, fre.cfa, "CFA at {pc:#x}");
                assert_eq!(found.fre.fp_off, fre.fp, "FP at {pc:#x}");
                let ra = match arch {
                    Arch::Amd64 => Some(-8),
                    Arch::Aarch64 => fre.ra,
                };
                assert_eq!(found.fre.ra_off, ra, "RA at {pc:#x}");
                let row = row.unwrap_or_else(|| panic!("no row at {pc:#x}"));
                assert_eq!((row.cfa_off, row.fp_off), (fre.cfa, fre.fp.unwrap_or(0)));
            }
            _ => panic!("{pc:#x}: model {want:?}, reader {got:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn find_agrees_with_a_linear_scan_of_the_model_in_every_version(
        amd in funcs_strategy(Arch::Amd64, true),
        arm in funcs_strategy(Arch::Aarch64, false),
        pcs in proptest::collection::vec(any::<u64>(), 32),
    ) {
        for flavour in [Flavour::V1, Flavour::V2, Flavour::V2Pcrel, Flavour::V3] {
            check_against_model(&amd, flavour, Arch::Amd64, &pcs);
            check_against_model(&arm, flavour, Arch::Aarch64, &pcs);
        }
    }

    #[test]
    fn find_agrees_with_simple_frame_rs(
        funcs in funcs_strategy(Arch::Amd64, false),
        pcs in proptest::collection::vec(any::<u64>(), 32),
    ) {
        for flavour in [Flavour::V1, Flavour::V2, Flavour::V2Pcrel, Flavour::V3] {
            let bytes = encode(&funcs, flavour, Arch::Amd64, SECTION_ADDR);
            let ours = SframeSection::parse(&bytes, SECTION_ADDR).unwrap();
            let theirs = simple_frame_rs::SFrameSection::from(&bytes, SECTION_ADDR).unwrap();
            for pc in pcs.iter().map(|p| 0x40_0f00 + p % 0x20_0000) {
                let got = ours.find(pc).unwrap();
                let want = theirs
                    .find_fde(pc)
                    .unwrap()
                    .and_then(|fde| fde.find_fre(&theirs, pc).unwrap());
                match (got, want) {
                    (None, None) => {}
                    (Some(g), Some(w)) => {
                        prop_assert_eq!(u8::from(g.fre.cfa_base_is_sp()), w.get_cfa_base_reg_id());
                        prop_assert_eq!(Some(g.fre.cfa_off), w.get_cfa_offset(&theirs).unwrap());
                        prop_assert_eq!(g.fre.fp_off, w.get_fp_offset(&theirs).unwrap());
                    }
                    (g, w) => prop_assert!(false, "{:?} at {:#x}: ours {:?}, simple-frame-rs {:?}", flavour, pc, g, w),
                }
            }
        }
    }

    #[test]
    fn damaged_sections_give_errors_not_panics(
        funcs in funcs_strategy(Arch::Amd64, true),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        pcs in proptest::collection::vec(any::<u64>(), 8),
    ) {
        for flavour in [Flavour::V1, Flavour::V2, Flavour::V3] {
            let mut bytes = encode(&funcs, flavour, Arch::Amd64, SECTION_ADDR);
            for (at, value) in &flips {
                let i = at.index(bytes.len());
                bytes[i] = *value;
            }
            let len = cut.index(bytes.len() + 1);
            let bytes = &bytes[..len];
            if let Ok(section) = SframeSection::parse(bytes, SECTION_ADDR) {
                let conversion = section.to_rows();
                prop_assert!(conversion.table.len() <= 1 << 22);
                for pc in &pcs {
                    let _ = section.find(0x40_1000 + pc % 0x10_0000);
                }
            }
        }
    }
}

/// One 64-byte function at `0x40_1000`: CFA = SP+8, then from offset 4
/// CFA = SP+16 with the FP saved at `fp`.
fn one_function(fp: Option<i32>) -> Vec<ModelFunc> {
    let row = |start, cfa, fp| ModelFre {
        start,
        sp_base: true,
        cfa,
        ra: None,
        fp,
        outermost: false,
    };
    vec![ModelFunc {
        start: 0x40_1000,
        size: 64,
        mask: None,
        fres: vec![row(0, 8, None), row(4, 16, fp)],
    }]
}

#[test]
fn every_truncation_is_an_error_naming_a_field() {
    let funcs = one_function(Some(-16));
    for flavour in [Flavour::V1, Flavour::V2, Flavour::V2Pcrel, Flavour::V3] {
        let bytes = encode(&funcs, flavour, Arch::Amd64, SECTION_ADDR);
        assert!(SframeSection::parse(&bytes, SECTION_ADDR).is_ok());
        for len in 0..bytes.len() {
            let e = SframeSection::parse(&bytes[..len], SECTION_ADDR)
                .err()
                .unwrap_or_else(|| panic!("{flavour:?}: {len} of {} bytes parsed", bytes.len()));
            assert!(!e.field.is_empty() && e.offset <= bytes.len(), "{e}");
        }
    }
}

fn parse(b: &[u8]) -> Result<SframeSection<'_>, ichnos_code::sframe::SframeError> {
    SframeSection::parse(b, SECTION_ADDR)
}

#[test]
fn malformed_fields_are_named() {
    let funcs = one_function(None);
    let good = encode(&funcs, Flavour::V2, Arch::Amd64, SECTION_ADDR);

    let mut b = good.clone();
    b[0] = 0x12;
    let e = parse(&b).unwrap_err();
    assert_eq!((e.field, e.offset), ("sfp_magic", 0));
    assert!(matches!(e.kind, SframeErrorKind::BadMagic(_)));

    let mut b = good.clone();
    b[2] = 9;
    let e = parse(&b).unwrap_err();
    assert_eq!(
        (e.field, e.kind),
        ("sfp_version", SframeErrorKind::UnsupportedVersion(9))
    );

    let mut b = good.clone();
    b[3] |= 0x40;
    assert_eq!(parse(&b).unwrap_err().field, "sfp_flags");

    let mut b = good.clone();
    b[4] = 7;
    assert_eq!(parse(&b).unwrap_err().kind, SframeErrorKind::UnknownAbi(7));

    let mut b = good.clone();
    b[8..12].copy_from_slice(&1000u32.to_le_bytes());
    assert_eq!(parse(&b).unwrap_err().field, "sfh_fdeoff");

    // The second FRE's start made equal to the first: not increasing.
    let mut b = good.clone();
    let fre2 = 28 + 20 + 3; // header, one FDE, first FRE (1 + 1 + 1 bytes)
    b[fre2] = 0;
    let s = parse(&b).unwrap();
    let e = s.find(0x40_1010).unwrap_err();
    assert_eq!((e.field, e.offset), ("sfre_start_address", fre2));
    assert!(matches!(e.kind, SframeErrorKind::FreOrder { .. }));
    assert_eq!(s.to_rows().skipped_fdes, 1);

    // A reserved offset size in the first FRE's info byte.
    let mut b = good.clone();
    b[28 + 20 + 1] |= 0x60;
    let e = parse(&b).unwrap().find(0x40_1000).unwrap_err();
    assert_eq!(
        (e.field, e.kind),
        ("sfre_info", SframeErrorKind::BadOffsetSize)
    );

    // A FLEX FDE in v3 is reported as unsupported, not misread.
    let mut b = encode(&funcs, Flavour::V3, Arch::Amd64, SECTION_ADDR);
    b[28 + 16 + 3] = 1; // info2 of the attribute record
    let e = parse(&b).unwrap().find(0x40_1000).unwrap_err();
    assert_eq!(e.field, "sfda_func_info2");
    assert_eq!(
        e.kind,
        SframeErrorKind::Unsupported(ichnos_code::sframe::Unsupported::FlexFde)
    );
}

#[test]
fn v1_sections_from_binutils_read_as_objdump_prints_them() {
    let dir = tempfile::tempdir().unwrap();
    let prog = support::build_prog(dir.path());
    // binutils 2.40 writes SFrame v1.
    sections_read_as_objdump_prints_them(&prog, "objdump", 1);
}

/// SFrame v2 as Debian trixie's binutils 2.44 writes it (its `as`,
/// its `ld`), read as its own objdump prints it.
#[test]
fn v2_sections_from_binutils_2_44_read_as_its_objdump_prints_them() {
    newer_binutils_sections_read_as_objdump_prints_them("trixie", 2);
}

/// SFrame v3 as Debian sid's binutils writes it (2.47.50 on 2026-12-02;
/// sid moves on): function starts relative to their own FDE
/// (`SFRAME_F_FDE_FUNC_START_PCREL`).
#[test]
fn v3_sections_from_sids_binutils_read_as_its_objdump_prints_them() {
    let flags = newer_binutils_sections_read_as_objdump_prints_them("sid", 3);
    assert!(
        flags & SFRAME_F_FDE_FUNC_START_PCREL != 0,
        "flags {flags:#x}"
    );
}

/// The fixtures built by `suite`'s binutils, read as its objdump prints
/// them; the flags of the program's section.
fn newer_binutils_sections_read_as_objdump_prints_them(suite: &str, version: u8) -> u8 {
    let bin = support::newer_binutils(suite);
    let dir = tempfile::tempdir().unwrap();
    let prog = support::build_prog_with(dir.path(), &[&format!("-B{}/", bin.display())]);
    let objdump = bin.join("objdump");
    sections_read_as_objdump_prints_them(&prog, objdump.to_str().unwrap(), version)
}

/// `SFRAME_F_FDE_FUNC_START_PCREL` of the SFrame header's flags.
const SFRAME_F_FDE_FUNC_START_PCREL: u8 = 0x4;

/// The `.sframe` of `prog` and of the `libfix.so` beside it, both of
/// SFrame `version`, answer every row `objdump --sframe` prints of them
/// (`objdump` of the binutils that wrote them) with its function, CFA,
/// FP and RA; returns the flags of `prog`'s section.
fn sections_read_as_objdump_prints_them(prog: &std::path::Path, objdump: &str, version: u8) -> u8 {
    let mut checked = 0;
    let mut flags = None;
    for path in [prog.to_path_buf(), prog.with_file_name("libfix.so")] {
        let bytes = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let sframe = file.section_by_name(".sframe").unwrap();
        let section = SframeSection::parse(sframe.data().unwrap(), sframe.address()).unwrap();
        assert_eq!(section.version(), version, "{}", path.display());
        flags.get_or_insert(section.flags());
        let want = support::objdump_sframe_rows(objdump, &path);
        assert!(want.len() >= 10, "{}: {want:?}", path.display());
        for (func, start, mask, cfa, fp) in want {
            let pc = if mask { func + start } else { start };
            let found = section.find(pc).unwrap().unwrap();
            assert_eq!(found.fde.start, func);
            let base = if found.fre.cfa_base_is_sp() {
                "sp"
            } else {
                "fp"
            };
            assert_eq!(
                format!("{base}+{}", found.fre.cfa_off),
                cfa,
                "CFA at {pc:#x}"
            );
            let ours_fp = found
                .fre
                .fp_off
                .map_or("u".to_string(), |o| format!("c{o}"));
            assert_eq!(ours_fp, fp, "FP at {pc:#x}");
            assert_eq!(found.fre.ra_off, Some(-8));
            checked += 1;
        }
    }
    assert!(checked >= 25);
    flags.unwrap_or_default()
}

/// Found by `cargo fuzz run sframe`: an FDE whose start lies near the top
/// of the address space overflowed the row conversion.
#[test]
fn fuzz_regression_function_end_overflow() {
    let data = [
        0xe2, 0xde, 0x01, 0x00, 0x01, 0xff, 0xff, 0x01, 0x03, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00,
        0x00, 0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x51, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x09, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x10,
    ];
    let section = SframeSection::parse(&data, 0x40_0000).unwrap();
    let conversion = section.to_rows();
    assert!(conversion.skipped_fdes > 0);
}

/// FREs without offsets mark the outermost frame (`_start` with
/// `.cfi_undefined rip`) in v2 as binutils writes it since 2.45 and in v3;
/// v1 never had them and calls them malformed.
#[test]
fn an_fre_without_offsets_is_the_outermost_frame() {
    let mut funcs = one_function(None);
    funcs[0].fres[1].outermost = true;
    for flavour in [Flavour::V2, Flavour::V2Pcrel, Flavour::V3] {
        let bytes = encode(&funcs, flavour, Arch::Amd64, SECTION_ADDR);
        let s = parse(&bytes).unwrap();
        let found = s.find(0x40_1010).unwrap().unwrap();
        assert!(found.fre.outermost, "{flavour:?}");
        let rows = s.to_rows();
        assert_eq!(rows.skipped_fdes, 0);
        assert!(rows.table.find(0x40_1010).unwrap().is_outermost());
        assert!(!rows.table.find(0x40_1000).unwrap().is_outermost());
    }
    let bytes = encode(&funcs, Flavour::V1, Arch::Amd64, SECTION_ADDR);
    let e = parse(&bytes).unwrap().find(0x40_1010).unwrap_err();
    assert_eq!(e.kind, SframeErrorKind::BadOffsetCount(0));
}

/// Rows counted from a chosen base: a function below it (a stray FDE
/// whose start resolved to 0) is skipped, not allowed to drag the table
/// away from the code.
#[test]
fn rows_from_a_base_skip_functions_below_it() {
    let mut funcs = one_function(Some(-16));
    let mut stray = funcs[0].clone();
    stray.start = 0x1000;
    funcs.insert(0, stray);
    let bytes = encode(&funcs, Flavour::V2, Arch::Amd64, SECTION_ADDR);
    let s = parse(&bytes).unwrap();
    let from_code = s.to_rows_from(0x40_0000);
    assert_eq!(from_code.skipped_fdes, 1);
    assert_eq!(from_code.table.base(), 0x40_0000);
    assert_eq!(from_code.table.find(0x40_1004).unwrap().fp_off, -16);
    assert!(from_code.table.find(0x1004).is_none());
    // From the lowest start both are kept: 4 MiB apart fits in 32 bits.
    assert_eq!(s.to_rows().skipped_fdes, 0);
}

/// FDEs that all point at the same FREs cannot multiply the rows beyond
/// the section's own size: 500 FDEs sharing one function's 10,000 FREs
/// would make 5 million rows from a 50 KiB section.
#[test]
fn shared_fres_cannot_multiply_rows_without_bound() {
    let fre = |start| ModelFre {
        start,
        sp_base: true,
        cfa: 8,
        ra: None,
        fp: None,
        outermost: false,
    };
    let big = ModelFunc {
        start: 0x40_0000,
        size: 60_000,
        mask: None,
        fres: (0..10_000).map(|i| fre(i * 6)).collect(),
    };
    let mut funcs = vec![big];
    for i in 1..500u64 {
        funcs.push(ModelFunc {
            start: 0x40_0000 + i * 0x1_0000,
            size: 16,
            mask: None,
            fres: vec![fre(0)],
        });
    }
    let mut bytes = encode(&funcs, Flavour::V2, Arch::Amd64, SECTION_ADDR);
    for i in 1..500usize {
        let at = 28 + i * 20;
        bytes[at + 4..at + 8].copy_from_slice(&60_000u32.to_le_bytes());
        bytes[at + 8..at + 12].copy_from_slice(&0u32.to_le_bytes());
        bytes[at + 12..at + 16].copy_from_slice(&10_000u32.to_le_bytes());
        bytes[at + 16] = bytes[28 + 16]; // the big function's FRE type
    }
    let s = parse(&bytes).unwrap();
    let rows = s.to_rows();
    assert!(rows.truncated);
    assert!(rows.table.len() <= bytes.len() + (1 << 20));
}
