//! Tests for the ToPA region table, marker planning and the hardware-format
//! layout view (reference §5.4, "Table build", "locate/logical round trip",
//! "`plan_markers` against a brute-force model").
//!
//! The models here deliberately avoid the code under test's tricks: they
//! walk region lists linearly and enumerate boundaries instead of using
//! prefix sums, the uniform fast path or binary search.

use ichnos_buf::topa::layout::{EntrySite, MAX_ENTRIES_PER_TABLE};
use ichnos_buf::topa::table::MAX_CAPACITY;
use ichnos_buf::topa::{
    plan_markers, Cursor, Granularity, MarkerError, MarkerPlan, RegionDesc, RegionTable,
    TableError, TopaEntry, TopaLayout, TopaRuleViolation,
};
use proptest::prelude::*;

const K: u64 = 1024;
const TOP: u64 = 1 << 63;

// ---------------------------------------------------------------- models

/// Region starts by a running sum, one region at a time.
fn model_starts(lens: &[u64]) -> Vec<u64> {
    let mut starts = Vec::new();
    let mut sum = 0;
    for &len in lens {
        starts.push(sum);
        sum += len;
    }
    starts
}

/// Locate by linear scan over the regions.
fn model_locate(lens: &[u64], pos: u64) -> Cursor {
    let cap: u64 = lens.iter().sum();
    let mut r = pos % cap;
    for (region, &len) in lens.iter().enumerate() {
        if r < len {
            return Cursor { region, offset: r };
        }
        r -= len;
    }
    unreachable!("offset below capacity lies in some region")
}

/// Every absolute boundary (`lap * cap + region start`) in laps
/// `lo / cap ..= hi / cap + 1`, ascending.
fn model_boundaries(lens: &[u64], lo: u64, hi: u64) -> Vec<u64> {
    let cap: u64 = lens.iter().sum();
    let starts = model_starts(lens);
    let mut out = Vec::new();
    for lap in lo / cap..=hi / cap + 1 {
        for &s in &starts {
            out.push(lap * cap + s);
        }
    }
    out
}

fn model_floor(lens: &[u64], pos: u64) -> u64 {
    model_boundaries(lens, pos, pos)
        .into_iter()
        .filter(|&b| b <= pos)
        .max()
        .unwrap()
}

fn model_ceil_strict(lens: &[u64], pos: u64) -> u64 {
    model_boundaries(lens, pos, pos)
        .into_iter()
        .find(|&b| b > pos)
        .unwrap()
}

// ------------------------------------------------------------ strategies

/// Region lengths with a leading run of equal lengths (to exercise the
/// uniform fast path) followed by arbitrary lengths.
fn lens_strategy(max_run: usize, max_rest: usize, max_len: u64) -> impl Strategy<Value = Vec<u64>> {
    (
        1..=max_len,
        1..=max_run,
        prop::collection::vec(1..=max_len, 0..=max_rest),
    )
        .prop_map(|(u, run, rest)| {
            let mut v = vec![u; run];
            v.extend(rest);
            v
        })
}

fn granularity() -> impl Strategy<Value = Granularity> {
    prop_oneof![Just(Granularity::Region), Just(Granularity::Byte)]
}

/// Lengths whose regions are ToPA-expressible (4 KiB << 0..=3).
fn topa_lens(max: usize) -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec((0u32..=3).prop_map(|o| 4096u64 << o), 1..=max)
}

/// Naturally aligned addresses for `lens`, packed upwards from 16 MiB.
fn aligned_bases(lens: &[u64]) -> Vec<u64> {
    let mut next: u64 = 16 << 20;
    lens.iter()
        .map(|&len| {
            let base = next.div_ceil(len) * len;
            next = base + len;
            base
        })
        .collect()
}

fn table_bases(n: usize) -> Vec<u64> {
    // Deliberately not in ascending order, so link checks cannot rely on it.
    (0..n as u64).map(|t| 0x4000_0000 - t * 0x1000).collect()
}

fn worked_example() -> RegionTable {
    RegionTable::new(&[16 * K, 16 * K, 8 * K, 8 * K, 4 * K, 4 * K, 4 * K, 4 * K]).unwrap()
}

// ------------------------------------------------------------ RegionTable

proptest! {
    #[test]
    fn prefix_sums_match_lengths(lens in lens_strategy(8, 40, 100_000)) {
        let t = RegionTable::new(&lens).unwrap();
        prop_assert_eq!(t.len(), lens.len());
        prop_assert!(!t.is_empty());
        prop_assert_eq!(t.capacity(), lens.iter().sum::<u64>());
        let mut sum = 0;
        for (i, &len) in lens.iter().enumerate() {
            prop_assert_eq!(t.region(i), RegionDesc { start: sum, len });
            sum += len;
        }
        let all: Vec<RegionDesc> = t.regions().collect();
        prop_assert_eq!(all.len(), lens.len());
        for (i, d) in all.iter().enumerate() {
            prop_assert_eq!(*d, t.region(i));
        }
    }

    #[test]
    fn locate_logical_round_trip_two_laps(lens in lens_strategy(4, 5, 24)) {
        let t = RegionTable::new(&lens).unwrap();
        let cap = t.capacity();
        for pos in 0..2 * cap {
            let c = t.locate(pos);
            prop_assert_eq!(c, model_locate(&lens, pos), "pos {}", pos);
            prop_assert_eq!(t.logical(c, pos / cap), pos);
            prop_assert_eq!(t.lap(pos), pos / cap);
        }
    }

    #[test]
    fn locate_near_top_of_domain(
        lens in lens_strategy(4, 6, 1 << 40),
        back in any::<u64>(),
    ) {
        let t = RegionTable::new(&lens).unwrap();
        let cap = t.capacity();
        // Positions in [2^63 - 2 cap, 2^63).
        let pos = TOP - 1 - back % (2 * cap);
        let c = t.locate(pos);
        prop_assert_eq!(c, model_locate(&lens, pos));
        prop_assert_eq!(t.logical(c, pos / cap), pos);
        prop_assert_eq!(t.region_end_at_or_before(pos), model_floor(&lens, pos));
        prop_assert_eq!(t.region_end_after(pos), model_ceil_strict(&lens, pos));
    }

    #[test]
    fn region_ends_match_enumerated_boundaries(lens in lens_strategy(3, 5, 16)) {
        let t = RegionTable::new(&lens).unwrap();
        let cap = t.capacity();
        let all = model_boundaries(&lens, 0, 3 * cap);
        for pos in 0..3 * cap {
            let floor = all.iter().copied().filter(|&b| b <= pos).max().unwrap();
            let ceil = all.iter().copied().find(|&b| b > pos).unwrap();
            prop_assert_eq!(t.region_end_at_or_before(pos), floor, "pos {}", pos);
            prop_assert_eq!(t.region_end_after(pos), ceil, "pos {}", pos);
        }
    }
}

#[test]
fn unaligned_layout_round_trips_exhaustively() {
    // The 8K region starts at 4K and the 16K one at 12K: neither is
    // naturally aligned, so any masking would misplace offsets.
    let lens = [4096, 8192, 16384, 4096];
    let t = RegionTable::new(&lens).unwrap();
    let cap = t.capacity();
    for pos in 0..2 * cap {
        let c = t.locate(pos);
        assert_eq!(c, model_locate(&lens, pos), "pos {pos}");
        assert_eq!(t.logical(c, pos / cap), pos);
    }
    assert_eq!(
        t.locate(4096 + 4096),
        Cursor {
            region: 1,
            offset: 4096
        }
    );
    assert_eq!(
        t.locate(12288 + 4096),
        Cursor {
            region: 2,
            offset: 4096
        }
    );
}

#[test]
fn buffers_beyond_4gib() {
    let lens = [1u64 << 31, 1 << 33, 4096, 1 << 31, 1 << 33];
    let t = RegionTable::new(&lens).unwrap();
    let cap = t.capacity();
    assert!(cap > 1 << 34);
    assert_eq!(t.region(4).start, (1 << 31) + (1 << 33) + 4096 + (1 << 31));
    let starts = model_starts(&lens);
    for lap in [0, 1, 7, (TOP - 2 * cap) / cap] {
        for (i, &s) in starts.iter().enumerate() {
            for delta in [0, 1, 4095, lens[i] / 2, lens[i] - 1] {
                let pos = lap * cap + s + delta;
                let c = t.locate(pos);
                assert_eq!(
                    c,
                    Cursor {
                        region: i,
                        offset: delta
                    },
                    "pos {pos:#x}"
                );
                assert_eq!(t.logical(c, lap), pos);
                assert_eq!(t.region_end_at_or_before(pos), lap * cap + s);
                assert_eq!(t.region_end_after(pos), lap * cap + s + lens[i]);
            }
        }
    }
}

#[test]
fn many_regions_against_linear_walk() {
    // 50_000 uniform 4K regions (fast path), then 50_000 of mixed sizes
    // from a fixed LCG (binary search).
    let mut lens = vec![4096u64; 50_000];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..50_000 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        lens.push(1 + (x >> 33) % 70_000);
    }
    let t = RegionTable::new(&lens).unwrap();
    let cap = t.capacity();
    let mut start = 0;
    for (i, &len) in lens.iter().enumerate() {
        for delta in [0, len / 2, len - 1] {
            for lap in [0, 3] {
                let pos = lap * cap + start + delta;
                assert_eq!(
                    t.locate(pos),
                    Cursor {
                        region: i,
                        offset: delta
                    },
                    "pos {pos}"
                );
                assert_eq!(t.region_end_at_or_before(pos), lap * cap + start);
                assert_eq!(t.region_end_after(pos), lap * cap + start + len);
            }
        }
        start += len;
    }
    assert_eq!(start, cap);
}

#[test]
fn table_errors() {
    assert_eq!(RegionTable::new(&[]), Err(TableError::NoRegions));
    assert_eq!(
        RegionTable::new(&[4096, 0]),
        Err(TableError::EmptyRegion { index: 1 })
    );
    assert_eq!(
        RegionTable::new(&[MAX_CAPACITY / 2, MAX_CAPACITY / 2, 1]),
        Err(TableError::TooLarge { index: 2 })
    );
    assert_eq!(
        RegionTable::new(&[1, u64::MAX]),
        Err(TableError::TooLarge { index: 1 })
    );
}

// ------------------------------------------------------------ plan_markers

/// The brute-force marker model: enumerate boundaries and pick.
fn model_plan(
    lens: &[u64],
    head: u64,
    tail: u64,
    wakeup: u64,
    stop: Granularity,
    notify: Granularity,
) -> Option<MarkerPlan> {
    let cap: u64 = lens.iter().sum();
    let free_end = tail + cap;
    let bounds = model_boundaries(lens, tail, free_end);
    let stop_at = match stop {
        Granularity::Byte => free_end,
        Granularity::Region => bounds.iter().copied().filter(|&b| b <= free_end).max()?,
    };
    if stop_at <= head {
        return None;
    }
    let target = wakeup.min(stop_at);
    let notify_at = match notify {
        Granularity::Byte => (head + 1..=stop_at)
            .find(|&p| p >= target)
            .unwrap_or(stop_at),
        Granularity::Region => {
            // Boundaries the producer can still reach before stopping.
            let reachable: Vec<u64> = bounds
                .iter()
                .copied()
                .filter(|&b| b > head && b <= stop_at)
                .collect();
            match reachable.iter().copied().filter(|&b| b <= target).max() {
                Some(b) => b,
                None => reachable.first().copied().unwrap_or(stop_at),
            }
        }
    };
    Some(MarkerPlan { stop_at, notify_at })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn plan_markers_matches_model(
        lens in lens_strategy(3, 5, 12),
        near_top in any::<bool>(),
        tail_sel in any::<u64>(),
        used_sel in any::<u64>(),
        wake_raw in any::<bool>(),
        wake_sel in any::<u64>(),
        stop in granularity(),
        notify in granularity(),
    ) {
        let t = RegionTable::new(&lens).unwrap();
        let cap = t.capacity();
        let tail = if near_top {
            TOP - 1 - 2 * cap - tail_sel % cap
        } else {
            tail_sel % (4 * cap)
        };
        let head = tail + used_sel % (cap + 1);
        let wakeup = if wake_raw { wake_sel } else { tail + wake_sel % (3 * cap + 1) };

        let got = plan_markers(&t, head, tail, wakeup, stop, notify);
        let want = model_plan(&lens, head, tail, wakeup, stop, notify);
        match (got, want) {
            (Ok(plan), Some(model)) => {
                prop_assert_eq!(plan, model);
                prop_assert!(plan.stop_at - tail <= cap);
                prop_assert!(head < plan.notify_at && plan.notify_at <= plan.stop_at);
                match stop {
                    Granularity::Byte => prop_assert_eq!(plan.stop_at, tail + cap),
                    Granularity::Region => {
                        prop_assert_eq!(t.region_end_at_or_before(plan.stop_at), plan.stop_at);
                        prop_assert!(t.region_end_after(plan.stop_at) > tail + cap);
                    }
                }
                if notify == Granularity::Region && stop == Granularity::Region {
                    prop_assert_eq!(t.region_end_at_or_before(plan.notify_at), plan.notify_at);
                }
                // Pure and idempotent: planning again gives the same answer,
                // and asking for a wakeup exactly at notify_at is a fixed point.
                prop_assert_eq!(plan_markers(&t, head, tail, wakeup, stop, notify), Ok(plan));
                let again = plan_markers(&t, head, tail, plan.notify_at, stop, notify).unwrap();
                prop_assert_eq!(again, plan);
                // The stop point depends only on the tail.
                let from_tail = plan_markers(&t, tail, tail, wakeup, stop, notify).unwrap();
                prop_assert_eq!(from_tail.stop_at, plan.stop_at);
            }
            (Err(MarkerError::NoRoom { head: h, tail: tl, free_end, granularity }), None) => {
                prop_assert_eq!((h, tl, free_end, granularity), (head, tail, tail + cap, stop));
            }
            (got, want) => prop_assert!(false, "got {:?}, model {:?}", got, want),
        }
    }

    #[test]
    fn plan_markers_rejects_inconsistent_positions(
        lens in lens_strategy(3, 5, 12),
        a in 0u64..1 << 40,
        d in 1u64..1 << 20,
        stop in granularity(),
        notify in granularity(),
    ) {
        let t = RegionTable::new(&lens).unwrap();
        let cap = t.capacity();
        // Tail ahead of head.
        let bad = plan_markers(&t, a, a + d, a, stop, notify);
        prop_assert_eq!(bad, Err(MarkerError::BadPositions { head: a, tail: a + d, capacity: cap }));
        // More than a capacity unread.
        let head = a + cap + d;
        let bad = plan_markers(&t, head, a, a, stop, notify);
        prop_assert_eq!(bad, Err(MarkerError::BadPositions { head, tail: a, capacity: cap }));
    }

    #[test]
    fn empty_buffer_always_has_room(
        lens in lens_strategy(3, 5, 64),
        tail in 0u64..1 << 50,
        stop in granularity(),
        notify in granularity(),
    ) {
        let t = RegionTable::new(&lens).unwrap();
        let plan = plan_markers(&t, tail, tail, tail, stop, notify).unwrap();
        prop_assert!(plan.stop_at > tail);
    }
}

#[test]
fn exactly_full_buffer_is_no_room_not_empty() {
    // head == tail + capacity must never be mistaken for an empty buffer
    // (the kernel's 0-byte TRUNCATED record, Oct 2024).
    let t = worked_example();
    for tail in [0, 40 * K, 64 * K, 7 * 64 * K + 3] {
        for stop in [Granularity::Region, Granularity::Byte] {
            let head = tail + 64 * K;
            assert_eq!(
                plan_markers(&t, head, tail, 0, stop, Granularity::Byte),
                Err(MarkerError::NoRoom {
                    head,
                    tail,
                    free_end: head,
                    granularity: stop
                })
            );
        }
    }
}

#[test]
fn worked_example_plan() {
    let t = worked_example();
    let plan = plan_markers(
        &t,
        84 * K,
        40 * K,
        96 * K,
        Granularity::Region,
        Granularity::Region,
    )
    .unwrap();
    assert_eq!(
        plan,
        MarkerPlan {
            stop_at: 104 * K,
            notify_at: 96 * K
        }
    );
}

// ---------------------------------------------------------------- TopaEntry

#[test]
fn entry_bit_positions_are_the_sdm_ones() {
    assert_eq!(TopaEntry::END, 0x1);
    assert_eq!(TopaEntry::INT, 0x4);
    assert_eq!(TopaEntry::STOP, 0x10);
    assert_eq!(TopaEntry::SIZE_SHIFT, 6);
    assert_eq!(TopaEntry::SIZE_MASK, 0x3c0);
    assert_eq!(TopaEntry::BASE_MASK, 0x000f_ffff_ffff_f000);
    assert_eq!(TopaEntry::RESERVED_MASK, 0xfff0_0000_0000_0c2a);
    let fields = [
        TopaEntry::END,
        TopaEntry::INT,
        TopaEntry::STOP,
        TopaEntry::SIZE_MASK,
        TopaEntry::BASE_MASK,
        TopaEntry::RESERVED_MASK,
    ];
    // Disjoint and covering all 64 bits.
    assert_eq!(fields.iter().map(|f| f.count_ones()).sum::<u32>(), 64);
    assert_eq!(fields.iter().fold(0, |a, f| a | f), u64::MAX);

    // Hand-encoded values.
    assert_eq!(
        TopaEntry::output(0x20_0000, 0x4000),
        Ok(TopaEntry(0x20_0080))
    );
    assert_eq!(
        TopaEntry::output(0x800_0000, 128 << 20),
        Ok(TopaEntry(0x800_03c0))
    );
    assert_eq!(TopaEntry::output(0x1000, 0x1000), Ok(TopaEntry(0x1000)));
    assert_eq!(TopaEntry::link(0x10_0000), Ok(TopaEntry(0x10_0001)));
    let e = TopaEntry(0x20_0080);
    assert_eq!(e.with_int(true), TopaEntry(0x20_0084));
    assert_eq!(e.with_stop(true), TopaEntry(0x20_0090));
    assert_eq!(
        e.with_int(true).with_stop(true).with_int(false),
        TopaEntry(0x20_0090)
    );
    assert!(TopaEntry(0x10_0001).end());
    assert_eq!(TopaEntry(0x10_0001).base(), 0x10_0000);
}

proptest! {
    #[test]
    fn entry_round_trip(order in 0u32..=15, page in any::<u64>(), int in any::<bool>(), stop in any::<bool>()) {
        let size = 4096u64 << order;
        // Any size-aligned base below 2^52.
        let base = (page % (1u64 << (40 - order))) << (12 + order);
        let e = TopaEntry::output(base, size).unwrap();
        prop_assert_eq!(e.0, base | u64::from(order) << 6);
        prop_assert_eq!(e.size_bytes(), size);
        prop_assert_eq!(e.base(), base);
        prop_assert!(!e.end() && !e.int() && !e.stop());
        prop_assert_eq!(e.reserved_bits(), 0);
        let m = e.with_int(int).with_stop(stop);
        prop_assert_eq!((m.int(), m.stop(), m.end()), (int, stop, false));
        prop_assert_eq!((m.size_bytes(), m.base()), (size, base));
        prop_assert_eq!(m.with_int(false).with_stop(false), e);

        let link = TopaEntry::link(base).unwrap();
        prop_assert!(link.end() && !link.int() && !link.stop());
        prop_assert_eq!(link.base(), base);
    }
}

#[test]
fn entry_encoding_rejects_what_the_sdm_forbids() {
    let at = EntrySite::Unplaced;
    for size in [0, 2048, 3 * 4096, 256 << 20, 4096 + 1] {
        assert_eq!(
            TopaEntry::output(0, size),
            Err(TopaRuleViolation::BadRegionSize { at, size })
        );
    }
    assert_eq!(
        TopaEntry::output(0x1000, 0x2000),
        Err(TopaRuleViolation::MisalignedOutputBase {
            at,
            base: 0x1000,
            size: 0x2000
        })
    );
    assert_eq!(
        TopaEntry::output(1 << 52, 0x1000),
        Err(TopaRuleViolation::BaseAboveMaxPhyAddr { at, base: 1 << 52 })
    );
    assert_eq!(
        TopaEntry::link(0x1800),
        Err(TopaRuleViolation::MisalignedTableBase { at, base: 0x1800 })
    );
    assert_eq!(
        TopaEntry::link(1 << 52),
        Err(TopaRuleViolation::BaseAboveMaxPhyAddr { at, base: 1 << 52 })
    );
}

// -------------------------------------------------------------- TopaLayout

#[test]
fn tables_needed_counts_the_link_slot() {
    assert_eq!(TopaLayout::tables_needed(0, 5), 0);
    assert_eq!(TopaLayout::tables_needed(1, 2), 1);
    assert_eq!(TopaLayout::tables_needed(2, 2), 2);
    assert_eq!(TopaLayout::tables_needed(506, 507), 1);
    assert_eq!(TopaLayout::tables_needed(507, 507), 2);
    assert_eq!(TopaLayout::tables_needed(5, 1), usize::MAX);
    assert_eq!(TopaLayout::tables_needed(5, 0), usize::MAX);
}

proptest! {
    #[test]
    fn build_splits_reserves_link_slot_and_links_circularly(
        lens in topa_lens(40),
        ept in 2usize..8,
    ) {
        let t = RegionTable::new(&lens).unwrap();
        let bases = aligned_bases(&lens);
        let needed = TopaLayout::tables_needed(lens.len(), ept);
        let tbases = table_bases(needed);
        let layout = TopaLayout::build(&t, &bases, &tbases, ept).unwrap();
        prop_assert_eq!(layout.validate(), Ok(()));
        prop_assert_eq!(layout.table_bases(), &tbases[..]);
        prop_assert_eq!(layout.entries_per_table(), ept);

        let tables = layout.tables();
        prop_assert_eq!(tables.len(), needed);
        prop_assert_eq!(needed, lens.len().div_ceil(ept - 1));
        let mut region = 0;
        for (ti, entries) in tables.iter().enumerate() {
            let data = entries.len() - 1;
            if ti + 1 < tables.len() {
                prop_assert_eq!(entries.len(), ept, "full table {}", ti);
            } else {
                prop_assert_eq!(data, lens.len() - (needed - 1) * (ept - 1));
            }
            let link = entries[data];
            prop_assert!(link.end() && !link.int() && !link.stop());
            prop_assert_eq!(link.base(), tbases[(ti + 1) % needed]);
            for (slot, e) in entries[..data].iter().enumerate() {
                prop_assert!(!e.end() && !e.int() && !e.stop());
                prop_assert_eq!(e.size_bytes(), lens[region]);
                prop_assert_eq!(e.base(), bases[region]);
                prop_assert_eq!(layout.entry_for_region(region), (ti, slot));
                region += 1;
            }
        }
        prop_assert_eq!(region, lens.len());
    }

    #[test]
    fn apply_markers_renders_region_plans(
        lens in topa_lens(12),
        ept in 2usize..6,
        tail_sel in any::<u64>(),
        used_sel in any::<u64>(),
        wake_sel in any::<u64>(),
        other_sel in any::<u64>(),
    ) {
        let t = RegionTable::new(&lens).unwrap();
        let cap = t.capacity();
        let bases = aligned_bases(&lens);
        let tbases = table_bases(TopaLayout::tables_needed(lens.len(), ept));
        let fresh = TopaLayout::build(&t, &bases, &tbases, ept).unwrap();

        let plan_for = |sel: u64| {
            let tail = sel % (3 * cap);
            let head = tail + used_sel % (cap + 1);
            let wakeup = tail + wake_sel % (2 * cap);
            plan_markers(&t, head, tail, wakeup, Granularity::Region, Granularity::Region).ok()
        };
        let (Some(plan), Some(other)) = (plan_for(tail_sel), plan_for(other_sel)) else {
            return Ok(());
        };

        let mut layout = fresh.clone();
        layout.apply_markers(&t, &plan);
        prop_assert_eq!(layout.validate(), Ok(()));
        let stop_region = t.locate(plan.stop_at - 1).region;
        let notify_region = t.locate(plan.notify_at - 1).region;
        for r in 0..lens.len() {
            let (ti, s) = layout.entry_for_region(r);
            let e = layout.tables()[ti][s];
            prop_assert_eq!(e.stop(), r == stop_region, "region {}", r);
            prop_assert_eq!(e.int(), r == stop_region || r == notify_region, "region {}", r);
        }

        // Re-applying another plan clears the old bits: the result equals a
        // fresh layout with only the new plan applied.
        let mut expected = fresh.clone();
        expected.apply_markers(&t, &other);
        layout.apply_markers(&t, &other);
        prop_assert_eq!(&layout, &expected);
        layout.apply_markers(&t, &other);
        prop_assert_eq!(&layout, &expected);
    }
}

fn worked_example_layout(ept: usize) -> (RegionTable, TopaLayout) {
    let t = worked_example();
    let lens: Vec<u64> = t.regions().map(|r| r.len).collect();
    let bases = aligned_bases(&lens);
    let tbases = table_bases(TopaLayout::tables_needed(lens.len(), ept));
    let layout = TopaLayout::build(&t, &bases, &tbases, ept).unwrap();
    (t, layout)
}

/// (region, int, stop) for every data entry with a marker.
fn marked(layout: &TopaLayout, regions: usize) -> Vec<(usize, bool, bool)> {
    (0..regions)
        .filter_map(|r| {
            let (ti, s) = layout.entry_for_region(r);
            let e = layout.tables()[ti][s];
            (e.int() || e.stop()).then_some((r, e.int(), e.stop()))
        })
        .collect()
}

#[test]
fn apply_markers_on_the_worked_example() {
    // Three data entries per table: R2 and R5 end their tables, so the
    // markers land on both sides of an END link.
    let (t, mut layout) = worked_example_layout(4);
    assert_eq!(layout.tables().len(), 3);
    let plan = plan_markers(
        &t,
        84 * K,
        40 * K,
        96 * K,
        Granularity::Region,
        Granularity::Region,
    )
    .unwrap();
    layout.apply_markers(&t, &plan);
    // STOP (+INT) on R2, INT on R1, nothing else.
    assert_eq!(marked(&layout, 8), vec![(1, true, false), (2, true, true)]);
    assert_eq!(layout.validate(), Ok(()));

    // Consumer moved on: tail 64K, wakeup 120K. Free space ends at 128K, the
    // end of R7; the wakeup is the end of R5.
    let plan = plan_markers(
        &t,
        84 * K,
        64 * K,
        120 * K,
        Granularity::Region,
        Granularity::Region,
    )
    .unwrap();
    assert_eq!(
        plan,
        MarkerPlan {
            stop_at: 128 * K,
            notify_at: 120 * K
        }
    );
    layout.apply_markers(&t, &plan);
    assert_eq!(marked(&layout, 8), vec![(5, true, false), (7, true, true)]);
    assert_eq!(layout.validate(), Ok(()));
}

#[test]
fn apply_markers_rounds_byte_plans_safely() {
    // R0 = 4K, R1 = 4K, R2 = 8K; capacity 16K. Tail 6K, head 10K, byte stop
    // at 22K (lap 1, inside R1): STOP must round down to the end of R0 (20K)
    // so that unread data at 22K..24K is not overwritten. A byte notify at
    // 13K (inside R2) rounds up to the end of R2 (16K).
    let t = RegionTable::new(&[4 * K, 4 * K, 8 * K]).unwrap();
    let bases = aligned_bases(&[4 * K, 4 * K, 8 * K]);
    let mut layout = TopaLayout::build(&t, &bases, &table_bases(1), 4).unwrap();
    let plan = plan_markers(
        &t,
        10 * K,
        6 * K,
        13 * K,
        Granularity::Byte,
        Granularity::Byte,
    )
    .unwrap();
    assert_eq!(
        plan,
        MarkerPlan {
            stop_at: 22 * K,
            notify_at: 13 * K
        }
    );
    layout.apply_markers(&t, &plan);
    assert_eq!(marked(&layout, 3), vec![(0, true, true), (2, true, false)]);

    // A notify inside the stop region's successor is capped at the stop.
    let plan = MarkerPlan {
        stop_at: 22 * K,
        notify_at: 21 * K,
    };
    layout.apply_markers(&t, &plan);
    assert_eq!(marked(&layout, 3), vec![(0, true, true)]);
}

#[test]
fn build_rejects_unencodable_regions_and_bad_tables() {
    let build = |lens: &[u64], bases: &[u64], tbases: &[u64], ept: usize| {
        TopaLayout::build(&RegionTable::new(lens).unwrap(), bases, tbases, ept)
    };
    let bad_size = |r, size| TopaRuleViolation::BadRegionSize {
        at: EntrySite::Region(r),
        size,
    };
    // Not a power of two, too small, too large.
    assert_eq!(
        build(&[3 * 4096], &[0], &[0x1000], 4),
        Err(vec![bad_size(0, 3 * 4096)])
    );
    assert_eq!(
        build(&[4096, 2048], &[0, 0x2000], &[0x1000], 4),
        Err(vec![bad_size(1, 2048)])
    );
    assert_eq!(
        build(&[256 << 20], &[0], &[0x1000], 4),
        Err(vec![bad_size(0, 256 << 20)])
    );
    // Misaligned base, base above MAXPHYADDR.
    assert_eq!(
        build(&[8192], &[0x1000], &[0x1000], 4),
        Err(vec![TopaRuleViolation::MisalignedOutputBase {
            at: EntrySite::Region(0),
            base: 0x1000,
            size: 8192
        }])
    );
    assert_eq!(
        build(&[4096], &[1 << 52], &[0x1000], 4),
        Err(vec![TopaRuleViolation::BaseAboveMaxPhyAddr {
            at: EntrySite::Region(0),
            base: 1 << 52
        }])
    );
    // Several violations at once are all reported.
    assert_eq!(
        build(&[4096, 5000, 8192], &[0, 0x1000, 0x1000], &[0x10_0800], 1),
        Err(vec![
            TopaRuleViolation::BadEntriesPerTable {
                entries_per_table: 1
            },
            TopaRuleViolation::MisalignedTableBase {
                at: EntrySite::Table(0),
                base: 0x10_0800
            },
            bad_size(1, 5000),
            TopaRuleViolation::MisalignedOutputBase {
                at: EntrySite::Region(2),
                base: 0x1000,
                size: 8192
            },
        ])
    );
    // Table and base counts.
    assert_eq!(
        build(
            &[4096; 5],
            &[0, 0x1000, 0x2000, 0x3000, 0x4000],
            &[0x10_0000],
            3
        ),
        Err(vec![TopaRuleViolation::NotEnoughTables {
            needed: 3,
            given: 1
        }])
    );
    assert_eq!(
        build(&[4096; 2], &[0], &[0x10_0000], 3),
        Err(vec![TopaRuleViolation::RegionBaseCount {
            regions: 2,
            given: 1
        }])
    );
    assert_eq!(
        build(&[4096; 3], &[0, 0x1000, 0x2000], &[0x10_0000, 0x10_0000], 3),
        Err(vec![TopaRuleViolation::DuplicateTableBase {
            table: 1,
            base: 0x10_0000
        }])
    );
    assert_eq!(
        build(&[4096], &[0], &[0x10_0000], MAX_ENTRIES_PER_TABLE + 1),
        Err(vec![TopaRuleViolation::BadEntriesPerTable {
            entries_per_table: MAX_ENTRIES_PER_TABLE + 1
        }])
    );
    // The largest legal table, and extra table bases are ignored.
    let ok = build(
        &[4096; 3],
        &[0, 0x1000, 0x2000],
        &[0x10_0000, 0x20_0000],
        MAX_ENTRIES_PER_TABLE,
    )
    .unwrap();
    assert_eq!(ok.table_bases(), &[0x10_0000]);
    assert_eq!(ok.tables()[0].len(), 4);
}

/// Table bases of [`injection_fixture`].
const TB: [u64; 3] = [0x10_0000, 0x20_0000, 0x30_0000];

/// Five 4K regions, three slots per table: tables [R0 R1 E] [R2 R3 E] [R4 E].
fn injection_fixture() -> TopaLayout {
    let t = RegionTable::new(&[4096; 5]).unwrap();
    let bases = [0x1000, 0x2000, 0x3000, 0x4000, 0x5000];
    let layout = TopaLayout::build(&t, &bases, &TB, 3).unwrap();
    assert_eq!(layout.validate(), Ok(()));
    layout
}

/// Validates the fixture with one entry replaced and checks that exactly
/// `want` is reported.
fn check_injected(table: usize, slot: usize, entry: TopaEntry, want: &[TopaRuleViolation]) {
    let mut layout = injection_fixture();
    layout.set_entry(table, slot, entry);
    assert_eq!(
        layout.validate(),
        Err(want.to_vec()),
        "entry {entry:x?} at table {table} slot {slot}"
    );
}

fn slot(table: usize, slot: usize) -> EntrySite {
    EntrySite::Slot { table, slot }
}

#[test]
fn validate_reports_markers_on_end_and_misplaced_ends() {
    let link0 = injection_fixture().tables()[0][2];
    // INT or STOP on an END entry.
    check_injected(
        0,
        2,
        link0.with_int(true),
        &[TopaRuleViolation::MarkerOnEnd {
            at: slot(0, 2),
            flags: TopaEntry::INT,
        }],
    );
    check_injected(
        0,
        2,
        link0.with_stop(true),
        &[TopaRuleViolation::MarkerOnEnd {
            at: slot(0, 2),
            flags: TopaEntry::STOP,
        }],
    );
    check_injected(
        0,
        2,
        link0.with_stop(true).with_int(true),
        &[TopaRuleViolation::MarkerOnEnd {
            at: slot(0, 2),
            flags: TopaEntry::INT | TopaEntry::STOP,
        }],
    );
    // END in entry 0 (linking to the right table, so only that rule fires).
    check_injected(
        2,
        0,
        TopaEntry::link(TB[0]).unwrap(),
        &[TopaRuleViolation::EndInFirstSlot { table: 2 }],
    );
    // The link replaced by data; an END in the middle of a table.
    check_injected(
        2,
        1,
        TopaEntry::output(0x6000, 4096).unwrap(),
        &[TopaRuleViolation::MissingLink { table: 2 }],
    );
    check_injected(
        1,
        1,
        TopaEntry::link(TB[2]).unwrap(),
        &[TopaRuleViolation::EarlyEnd { at: slot(1, 1) }],
    );
}

#[test]
fn validate_reports_reserved_bits_alignment_and_bad_links() {
    let fixture = injection_fixture();
    let data0 = fixture.tables()[0][0];
    let link1 = fixture.tables()[1][2];
    // Every kind of reserved bit, on a data entry and on a link.
    for bit in [1, 3, 5, 10, 11, 52, 60, 63] {
        check_injected(
            0,
            0,
            TopaEntry(data0.0 | 1 << bit),
            &[TopaRuleViolation::ReservedBits {
                at: slot(0, 0),
                bits: 1 << bit,
            }],
        );
    }
    check_injected(
        1,
        2,
        TopaEntry(link1.0 | 1 << 3),
        &[TopaRuleViolation::ReservedBits {
            at: slot(1, 2),
            bits: 1 << 3,
        }],
    );
    // An 8K region at a base that is only 4K aligned.
    check_injected(
        1,
        1,
        TopaEntry(0x5000 | 1 << 6),
        &[TopaRuleViolation::MisalignedOutputBase {
            at: slot(1, 1),
            base: 0x5000,
            size: 0x2000,
        }],
    );
    // Links to an unknown table and to the wrong one.
    check_injected(
        0,
        2,
        TopaEntry::link(0xdead_0000).unwrap(),
        &[TopaRuleViolation::UnknownLinkTarget {
            at: slot(0, 2),
            target: 0xdead_0000,
        }],
    );
    check_injected(
        0,
        2,
        TopaEntry::link(TB[2]).unwrap(),
        &[TopaRuleViolation::LinkOutOfOrder {
            at: slot(0, 2),
            target: TB[2],
            expected: TB[1],
        }],
    );
}

#[test]
fn dump_lists_every_entry_with_flags() {
    let t = RegionTable::new(&[0x4000, 0x1000]).unwrap();
    let mut layout = TopaLayout::build(&t, &[0x20_0000, 0x20_4000], &[0x10_0000], 3).unwrap();
    layout.apply_markers(
        &t,
        &MarkerPlan {
            stop_at: 0x4000,
            notify_at: 0x4000,
        },
    );
    let mut out = String::new();
    layout.dump(&mut out).unwrap();
    assert_eq!(
        out,
        "table 0 @ 0x100000 (3 entries)\n\
         \x20 [  0] base 0x200000 size 0x4000 -IS raw 0x0000000000200094\n\
         \x20 [  1] base 0x204000 size 0x1000 --- raw 0x0000000000204000\n\
         \x20 [  2] link 0x100000 E-- raw 0x0000000000100001\n"
    );

    // Two tables: one header each, one line per entry.
    let t = RegionTable::new(&[4096; 3]).unwrap();
    let mut layout =
        TopaLayout::build(&t, &[0, 0x1000, 0x2000], &[0x10_0000, 0x20_0000], 3).unwrap();
    layout.apply_markers(
        &t,
        &MarkerPlan {
            stop_at: 0x3000,
            notify_at: 0x1000,
        },
    );
    let mut out = String::new();
    layout.dump(&mut out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2 + 3 + 2);
    assert_eq!(lines[0], "table 0 @ 0x100000 (3 entries)");
    assert!(
        lines[1].contains("[  0] base 0x0 size 0x1000 -I-"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("[  1] base 0x1000 size 0x1000 ---"),
        "{}",
        lines[2]
    );
    assert!(lines[3].contains("[  2] link 0x200000 E--"), "{}", lines[3]);
    assert_eq!(lines[4], "table 1 @ 0x200000 (2 entries)");
    assert!(
        lines[5].contains("[  0] base 0x2000 size 0x1000 -IS"),
        "{}",
        lines[5]
    );
    assert!(lines[6].contains("[  1] link 0x100000 E--"), "{}", lines[6]);
}
