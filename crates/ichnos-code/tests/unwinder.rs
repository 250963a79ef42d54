//! The unwinder's stop reasons, frame-pointer fallback and rule cache, on
//! hand-built stacks whose every word is known.

mod support;

use ichnos_code::memory::{Bytes, NoMemory};
use ichnos_code::row::{RowTable, UnwindRow, ROW_CFA_BASE_SP, ROW_OUTERMOST, ROW_UNEXPRESSIBLE};
use ichnos_code::unwind::unwind_into;
use ichnos_code::{
    unwind, unwind_cached, CodeMap, FrameKind, Regs, RowSource, StopReason, UnwindCache,
    UnwindOptions,
};

const SP: u64 = 0x7fff_0000;

/// Code at 0x1000..0x2000: [0x1000,0x1100) CFA=SP+16, [0x1100,0x1200)
/// CFA=SP+8 (no frame), [0x1200,0x1300) unexpressible, [0x1300,0x1400)
/// outermost, [0x1400,0x1500) CFA=FP+16 with FP saved at CFA-16.
fn map() -> CodeMap {
    let sp = |cfa| UnwindRow {
        cfa_off: cfa,
        ra_off: -8,
        info: ROW_CFA_BASE_SP,
        ..UnwindRow::default()
    };
    let rows = [
        (0x1000, sp(16)),
        (0x1100, sp(8)),
        (
            0x1200,
            UnwindRow {
                info: ROW_UNEXPRESSIBLE,
                ..UnwindRow::default()
            },
        ),
        (
            0x1300,
            UnwindRow {
                info: ROW_OUTERMOST,
                ..UnwindRow::default()
            },
        ),
        (
            0x1400,
            UnwindRow {
                cfa_off: 16,
                ra_off: -8,
                fp_off: -16,
                info: 0,
                ..UnwindRow::default()
            },
        ),
    ];
    let mut table = RowTable::new(0x1000);
    for (addr, row) in rows {
        table.push(addr, UnwindRow { size: 0x100, ..row }).unwrap();
    }
    support::one_object(0x1000, 0x2000, table, RowSource::EhFrame)
}

fn stack(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn ips(w: &ichnos_code::Unwind) -> Vec<u64> {
    w.frames.iter().map(|f| f.ip).collect()
}

fn opts(fp: bool) -> UnwindOptions {
    UnwindOptions {
        max_frames: 64,
        frame_pointer_fallback: fp,
    }
}

#[test]
fn rows_then_outermost() {
    // 0x1010 (CFA=SP+16: RA at SP+8) -> 0x1105 (CFA=SP+8: RA at SP) ->
    // 0x1305, outermost.
    let s = stack(&[0, 0x1105 + 1, 0x1305 + 1]);
    let w = unwind(
        &map(),
        Regs {
            ip: 0x1010,
            sp: SP,
            fp: 0,
            bx: None,
        },
        &s,
        &mut NoMemory,
        &opts(false),
    );
    assert_eq!(ips(&w), [0x1010, 0x1106, 0x1306]);
    assert_eq!(w.stop, StopReason::Outermost);
    assert_eq!(w.frames[1].sp, SP + 16);
    assert_eq!(w.frames[1].kind, FrameKind::Row(RowSource::EhFrame));
}

#[test]
fn a_return_address_of_zero_is_the_outermost_frame() {
    let s = stack(&[0]);
    let w = unwind(
        &map(),
        Regs {
            ip: 0x1100,
            sp: SP,
            fp: 0,
            bx: None,
        },
        &s,
        &mut NoMemory,
        &opts(false),
    );
    assert_eq!(w.stop, StopReason::Outermost);
    assert_eq!(w.frames.len(), 1);
}

#[test]
fn an_fp_based_cfa_restores_the_callers_fp() {
    // FP = SP + 8: CFA = FP + 16 = SP + 24; caller's FP at CFA-16 = SP+8,
    // RA at CFA-8 = SP+16.
    let s = stack(&[0, 0xdead_0000, 0x1105, 0]);
    let w = unwind(
        &map(),
        Regs {
            ip: 0x1410,
            sp: SP,
            fp: SP + 8,
            bx: None,
        },
        &s,
        &mut NoMemory,
        &opts(false),
    );
    assert_eq!(ips(&w), [0x1410, 0x1105]);
    assert_eq!(w.frames[1].sp, SP + 24);
    // The next frame (CFA = SP+8) reads RA 0 at SP+24: outermost.
    assert_eq!(w.stop, StopReason::Outermost);
}

#[test]
fn the_frame_pointer_chain_serves_where_no_row_does() {
    // ip 0x5000 has no code object; FP = SP+16: [FP] = 0 (caller FP),
    // [FP+8] = 0x1106 (RA), caller SP = FP+16.
    let s = stack(&[0, 0, 0, 0x1106, 0]);
    let regs = Regs {
        ip: 0x5000,
        sp: SP,
        fp: SP + 16,
        bx: None,
    };
    let w = unwind(&map(), regs, &s, &mut NoMemory, &opts(true));
    assert_eq!(ips(&w), [0x5000, 0x1106]);
    assert_eq!(w.frames[1].kind, FrameKind::FramePointer);
    assert_eq!(w.frames[1].sp, SP + 32);
    // Without the fallback the walk stops and says where.
    let w = unwind(&map(), regs, &s, &mut NoMemory, &opts(false));
    assert_eq!(w.stop, StopReason::NoUnwindInfo { pc: 0x5000 });
    // An unexpressible row falls back the same way.
    let regs = Regs { ip: 0x1210, ..regs };
    let w = unwind(&map(), regs, &s, &mut NoMemory, &opts(true));
    assert_eq!(w.frames[1].kind, FrameKind::FramePointer);
    // A frame pointer below SP is not followed.
    let regs = Regs {
        ip: 0x5000,
        sp: SP,
        fp: SP - 64,
        bx: None,
    };
    let w = unwind(&map(), regs, &s, &mut NoMemory, &opts(true));
    assert_eq!(w.stop, StopReason::NoUnwindInfo { pc: 0x5000 });
}

#[test]
fn a_frame_that_does_not_move_up_is_a_loop() {
    // A frame-pointer chain that points at itself is followed once; the
    // caller's FP then lies below its SP and is not followed again.
    let s = stack(&[0, 0, SP + 16, 0x5000, 0]);
    let w = unwind(
        &map(),
        Regs {
            ip: 0x5000,
            sp: SP,
            fp: SP + 16,
            bx: None,
        },
        &s,
        &mut NoMemory,
        &opts(true),
    );
    assert_eq!(ips(&w), [0x5000, 0x5000]);
    assert_eq!(w.stop, StopReason::NoUnwindInfo { pc: 0x4fff });
    // A row whose CFA is at or below SP (CFA = SP + 0) is a loop.
    let mut table = RowTable::new(0x1000);
    table
        .push(
            0x1000,
            UnwindRow {
                size: 0x100,
                cfa_off: 0,
                ra_off: -8,
                info: ROW_CFA_BASE_SP,
                ..UnwindRow::default()
            },
        )
        .unwrap();
    let m = support::one_object(0x1000, 0x1100, table, RowSource::Jit);
    let mut mem = Bytes {
        addr: SP - 8,
        data: &stack(&[0x1010])[..],
    };
    let w = unwind(
        &m,
        Regs {
            ip: 0x1010,
            sp: SP,
            fp: 0,
            bx: None,
        },
        &[],
        &mut mem,
        &opts(false),
    );
    assert_eq!(w.stop, StopReason::Loop);
}

#[test]
fn the_depth_limit_and_the_end_of_the_copy_stop_the_walk() {
    // Every frame returns into 0x1105 (CFA = SP + 8): an endless chain.
    let words: Vec<u64> = (0..100).map(|_| 0x1106).collect();
    let s = stack(&words);
    let regs = Regs {
        ip: 0x1105,
        sp: SP,
        fp: 0,
        bx: None,
    };
    let w = unwind(
        &map(),
        regs,
        &s,
        &mut NoMemory,
        &UnwindOptions {
            max_frames: 10,
            frame_pointer_fallback: false,
        },
    );
    assert_eq!(w.frames.len(), 10);
    assert_eq!(w.stop, StopReason::DepthLimit);
    let w = unwind(&map(), regs, &s, &mut NoMemory, &opts(false));
    assert_eq!(w.frames.len(), 64);
    let w = unwind(
        &map(),
        regs,
        &s[..80],
        &mut NoMemory,
        &UnwindOptions {
            max_frames: 1000,
            frame_pointer_fallback: false,
        },
    );
    assert_eq!(w.stop, StopReason::StackEnd { addr: SP + 80 });
    assert_eq!(w.frames.len(), 11);
    // Memory beyond the copy is used when given.
    let rest = stack(&[0x1106, 0]);
    let mut mem = Bytes {
        addr: SP + 80,
        data: &rest,
    };
    let w = unwind(
        &map(),
        regs,
        &s[..80],
        &mut mem,
        &UnwindOptions {
            max_frames: 1000,
            frame_pointer_fallback: false,
        },
    );
    assert_eq!(w.stop, StopReason::Outermost);
    assert_eq!(w.frames.len(), 12);
}

#[test]
fn the_cache_gives_the_same_walks_and_forgets_a_changed_map() {
    let s = stack(&[0, 0x1105 + 1, 0x1305 + 1]);
    let regs = Regs {
        ip: 0x1010,
        sp: SP,
        fp: 0,
        bx: None,
    };
    let m = map();
    let mut cache = UnwindCache::new();
    let mut plain = Vec::new();
    let mut cached = Vec::new();
    let stop = unwind_into(&m, regs, &s, &mut NoMemory, &opts(false), &mut plain);
    for _ in 0..3 {
        let c = unwind_cached(
            &m,
            regs,
            &s,
            &mut NoMemory,
            &opts(false),
            &mut cache,
            &mut cached,
        );
        assert_eq!(c, stop);
        assert_eq!(cached, plain);
    }
    let (hits, misses) = cache.stats();
    assert!(hits >= 4 && misses <= 4, "{hits} hits, {misses} misses");

    // The same addresses with other rules in a new map: the cache must not
    // answer from the old one.
    let mut table = RowTable::new(0x1000);
    table
        .push(
            0x1000,
            UnwindRow {
                size: 0x1000,
                cfa_off: 24,
                ra_off: -8,
                info: ROW_CFA_BASE_SP,
                ..UnwindRow::default()
            },
        )
        .unwrap();
    let other = support::one_object(0x1000, 0x2000, table, RowSource::Sframe);
    let s2 = stack(&[0, 0, 0, 0]);
    unwind_cached(
        &other,
        regs,
        &s2,
        &mut NoMemory,
        &opts(false),
        &mut cache,
        &mut cached,
    );
    let fresh = unwind(&other, regs, &s2, &mut NoMemory, &opts(false));
    assert_eq!(cached, fresh.frames);
    assert_eq!(cached.len(), 1);
}

mod cache_model {
    //! The cached walk must be the plain walk, frame for frame and stop for
    //! stop, cold and warm, whatever the rows and the stack hold.
    use super::*;
    use proptest::prelude::*;

    /// A row of one of the shapes the cache treats differently: SP- or
    /// FP-based CFA, slots near the CFA or too far for a cache entry,
    /// unexpressible, outermost.
    fn row() -> impl Strategy<Value = UnwindRow> {
        (
            0u8..5,
            1i32..12,
            prop_oneof![Just(0), Just(-8), Just(-16), Just(-520)],
            prop_oneof![Just(0), Just(-16), Just(-24), Just(-264)],
        )
            .prop_map(|(shape, words, ra_off, fp_off)| UnwindRow {
                cfa_off: words * 8,
                ra_off,
                fp_off,
                info: match shape {
                    0 => 0,
                    1 => ROW_UNEXPRESSIBLE,
                    2 => ROW_OUTERMOST,
                    _ => ROW_CFA_BASE_SP,
                },
                ..UnwindRow::default()
            })
    }

    /// A stack word: mostly return addresses into the code, some frame
    /// pointers into the stack, zeros and noise.
    fn word() -> impl Strategy<Value = u64> {
        prop_oneof![
            6 => 0x1000u64..0x2000,
            2 => (0u64..96).prop_map(|w| SP + w * 8),
            1 => Just(0u64),
            1 => any::<u64>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn cached_walks_equal_plain_walks(
            rows in proptest::collection::vec(row(), 16),
            walks in proptest::collection::vec(
                (0x1000u64..0x2000, 0u64..96, proptest::collection::vec(word(), 0..96)),
                1..6,
            ),
            max_frames in 1usize..48,
            fp_fallback in any::<bool>(),
            beyond in any::<bool>(),
        ) {
            let mut table = RowTable::new(0x1000);
            for (i, row) in rows.into_iter().enumerate() {
                table.push(0x1000 + 0x100 * i as u64, UnwindRow { size: 0x100, ..row }).unwrap();
            }
            let m = support::one_object(0x1000, 0x2000, table, RowSource::Sframe);
            let options = UnwindOptions { max_frames, frame_pointer_fallback: fp_fallback };
            // One cache across several walks, interleaved, so that slots
            // are shared, overwritten and guessed wrong.
            let mut cache = UnwindCache::new();
            let mut cached = Vec::new();
            for _ in 0..3 {
                for (ip, fp_word, words) in &walks {
                    let regs = Regs { ip: *ip, sp: SP, fp: SP + fp_word * 8, bx: None };
                    let bytes = stack(words);
                    // The stack copy may stop short of the stack: the rest
                    // is memory the walk can still read through the slow
                    // path.
                    let cut = if beyond { bytes.len() / 2 / 8 * 8 } else { bytes.len() };
                    let mut plain = Vec::new();
                    let stop = unwind_into(
                        &m,
                        regs,
                        &bytes[..cut],
                        &mut Bytes { addr: SP, data: &bytes },
                        &options,
                        &mut plain,
                    );
                    let c = unwind_cached(
                        &m,
                        regs,
                        &bytes[..cut],
                        &mut Bytes { addr: SP, data: &bytes },
                        &options,
                        &mut cache,
                        &mut cached,
                    );
                    prop_assert_eq!(c, stop);
                    prop_assert_eq!(&cached, &plain);
                }
            }
        }
    }
}

/// An instruction pointer of `u64::MAX` (corrupt registers) has the cache
/// key of an empty slot; the cached walk must still be the plain one.
#[test]
fn the_cache_does_not_take_an_empty_slot_for_a_row() {
    let s = stack(&[0x1105 + 1, 0x1305 + 1, 0, 0]);
    for fp_fallback in [false, true] {
        let regs = Regs {
            ip: u64::MAX,
            sp: SP,
            fp: SP + 8,
            bx: None,
        };
        let plain = unwind(&map(), regs, &s, &mut NoMemory, &opts(fp_fallback));
        let mut cache = UnwindCache::new();
        let mut cached = Vec::new();
        let stop = unwind_cached(
            &map(),
            regs,
            &s,
            &mut NoMemory,
            &opts(fp_fallback),
            &mut cache,
            &mut cached,
        );
        assert_eq!((stop, &cached), (plain.stop, &plain.frames));
    }
}
