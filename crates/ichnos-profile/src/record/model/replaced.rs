//! JIT code replaced in its memory: which code a sample ran when it was
//! taken.
//!
//! A JIT frees code and registers other code where it was. The recorder
//! sees the change at its next look at the process's registry, while the
//! samples it unwinds were taken 10 to 20 ms before it unwinds them: some
//! of the samples it walks after a look are older than the change, and
//! the code map as it now is would unwind them with the new code's rows.
//! So the code objects a look finds gone from the registry are kept for a
//! while, each with the time it served until (the registration time of
//! the code put in its place, which the registry exports, else the look),
//! and a sample taken before that is unwound with it.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use ichnos_code::cfi::{CfiError, CfiStep};
use ichnos_code::code_map::{FindRow, Lookup};
use ichnos_code::memory::{Bytes, Overlay};
use ichnos_code::unwind::{unwind_cached, unwind_into};
use ichnos_code::{
    CfaBase, CodeMap, CodeObject, Frame, Regs, Rows, StopReason, UnwindOptions, UnwindRow,
};

use super::AddressSpace;

/// Code objects kept after they went, at most (a JIT freeing thousands
/// of functions at once keeps the newest).
const MAX_RETIRED: usize = 4096;
/// How long a retired object is kept past the time it served until:
/// samples are walked in time order but for a few the sorting lets
/// through late (at the next drain), and those older than this by more
/// are walked with the code map as it is.
const KEEP_PAST_NS: u64 = 200_000_000;

/// A code object the registry no longer holds.
#[derive(Debug)]
struct Retired {
    object: Arc<CodeObject>,
    /// When it was registered (0 where the registry did not say).
    since: u64,
    /// The time it served until.
    until: u64,
}

impl Retired {
    fn serves(&self, pc: u64, time: u64) -> bool {
        (self.since..self.until).contains(&time)
            && (self.object.start..self.object.end).contains(&pc)
    }
}

/// The code objects a process's registry no longer holds, kept for the
/// samples taken before they went.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    /// By start, then by the order they were retired in (the same
    /// memory may have held several).
    retired: BTreeMap<(u64, u64), Retired>,
    /// Their keys, oldest first.
    order: VecDeque<(u64, u64)>,
    /// Objects retired so far (the second half of the next key).
    count: u64,
    /// The largest retired object's size: a lookup looks back no
    /// further than that below its address.
    longest: u64,
    /// The latest time any of them serves until: samples at or after it
    /// are walked with the code map alone.
    until: u64,
}

impl Timeline {
    /// Keeps `object`, registered at `since` (0: not known), for the
    /// samples taken before `until`. Its rows are read no more: its
    /// table's memory may describe other code now.
    pub(super) fn retire(&mut self, object: Arc<CodeObject>, since: u64, until: u64) {
        if let Rows::Jit(rows) = &object.rows {
            rows.freeze();
        }
        if self.order.len() >= MAX_RETIRED {
            if let Some(oldest) = self.order.pop_front() {
                self.retired.remove(&oldest);
            }
        }
        self.until = self.until.max(until);
        self.longest = self.longest.max(object.end.saturating_sub(object.start));
        let key = (object.start, self.count);
        self.count += 1;
        self.order.push_back(key);
        self.retired.insert(
            key,
            Retired {
                object,
                since,
                until,
            },
        );
    }

    /// The retired objects that may hold an address in `range`, with
    /// their keys, from the highest start down.
    fn near(&self, range: &Range<u64>) -> impl Iterator<Item = (&(u64, u64), &Retired)> + '_ {
        let floor = range.start.saturating_sub(self.longest);
        self.retired
            .range(..(range.end, 0))
            .rev()
            .take_while(move |((start, _), _)| *start >= floor)
    }

    /// The retired object that `pc` lay in at `time`.
    pub(super) fn find(&self, pc: u64, time: u64) -> Option<&Arc<CodeObject>> {
        if time >= self.until {
            return None;
        }
        self.near(&(pc..pc.saturating_add(1)))
            .find(|(_, r)| r.serves(pc, time))
            .map(|(_, r)| &r.object)
    }

    /// Other code was mapped over `range` at `time`: the retired objects
    /// there registered before then served until then at the latest.
    pub(super) fn end_in(&mut self, range: &Range<u64>, time: u64) {
        let keys: Vec<(u64, u64)> = self
            .near(range)
            .filter(|(_, r)| r.object.end > range.start && r.since < time)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some(r) = self.retired.get_mut(&key) {
                r.until = r.until.min(time);
            }
        }
    }

    /// Whether it keeps any object.
    pub(super) fn is_empty(&self) -> bool {
        self.retired.is_empty()
    }

    /// Forgets the objects no sample walked from `time` on can need.
    fn forget_before(&mut self, time: u64) {
        while let Some(&oldest) = self.order.front() {
            let done = self
                .retired
                .get(&oldest)
                .is_none_or(|r| r.until.saturating_add(KEEP_PAST_NS) <= time);
            if !done {
                break;
            }
            self.order.pop_front();
            self.retired.remove(&oldest);
        }
        if self.retired.is_empty() {
            self.until = 0;
            self.longest = 0;
        }
    }
}

/// The code of an address space as it was at a time: the code map, but
/// where a retired object served then, that object.
struct AtTime<'a> {
    code: &'a CodeMap,
    timeline: &'a Timeline,
    time: u64,
}

impl<'a> AtTime<'a> {
    fn find(&self, pc: u64) -> Option<&'a Arc<CodeObject>> {
        self.timeline
            .find(pc, self.time)
            .or_else(|| self.code.find(pc))
    }
}

impl FindRow for AtTime<'_> {
    fn find_row(&self, pc: u64) -> Lookup {
        Lookup::in_object(self.find(pc).map(Arc::as_ref), pc)
    }

    // (No generation: answers depend on the time, and are not cached.)

    fn evaluate_cfi(
        &self,
        pc: u64,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Result<CfiStep, CfiError>> {
        self.find(pc)?.evaluate_cfi(pc, regs, read)
    }
}

impl AddressSpace {
    /// Walks a stack taken at `time` from `regs` through its copy `stack`
    /// (and `past`, stack bytes read on from the thread past the copy, if
    /// any) into `frames`: with the code map (and its cache), and again
    /// with the code as it was at `time` where the walk went through code
    /// that was replaced or removed since.
    pub fn walk(
        &mut self,
        time: u64,
        regs: Regs,
        stack: &[u8],
        past: Bytes<'_>,
        options: &UnwindOptions,
        frames: &mut Vec<Frame>,
    ) -> StopReason {
        let stop = unwind_cached(
            &self.code,
            regs,
            stack,
            &mut Overlay {
                bytes: past,
                under: &mut self.image,
            },
            options,
            &mut self.cache,
            frames,
        );
        let timeline = &mut self.jit.timeline;
        if timeline.is_empty() {
            return stop;
        }
        timeline.forget_before(time);
        // Each frame's address was looked up: where none lies in a
        // retired object that served then, the walk is what it was.
        if !frames
            .iter()
            .any(|f| timeline.find(f.lookup_address(), time).is_some())
        {
            return stop;
        }
        let then = AtTime {
            code: &self.code,
            timeline: &self.jit.timeline,
            time,
        };
        let mut memory = Overlay {
            bytes: past,
            under: &mut self.image,
        };
        unwind_into(&then, regs, stack, &mut memory, options, frames)
    }

    /// The size of the frames return addresses `then` and `now`, looked
    /// up as of `time`, return into (the offset of their CFA from the
    /// stack pointer), where it is the same and they lie in one code
    /// object; `None` where they do not, or where a frame's CFA comes from
    /// the frame pointer (it could end anywhere).
    pub fn shared_extent(&self, time: u64, then: u64, now: u64) -> Option<u64> {
        // Looked up as callers are: at the call instruction.
        let (then, now) = (then.wrapping_sub(1), now.wrapping_sub(1));
        let (a, b) = (self.code_at(then, time)?, self.code_at(now, time)?);
        if !Arc::ptr_eq(a, b) {
            return None;
        }
        let plain = |row: &UnwindRow| {
            row.cfa_base() == CfaBase::Sp && !row.is_unexpressible() && !row.is_outermost()
        };
        match (
            Lookup::in_object(Some(a), then),
            Lookup::in_object(Some(b), now),
        ) {
            (Lookup::Row(r, _), Lookup::Row(s, _))
                if plain(&r) && plain(&s) && r.cfa_off == s.cfa_off && r.ra_off == s.ra_off =>
            {
                u64::try_from(r.cfa_off).ok()
            }
            _ => None,
        }
    }

    /// The code object `pc` lay in at `time`.
    pub(super) fn code_at(&self, pc: u64, time: u64) -> Option<&Arc<CodeObject>> {
        self.jit
            .timeline
            .find(pc, time)
            .or_else(|| self.code.find(pc))
    }
}

/// The time the JIT code object at `range`, registered at `since` and
/// gone from the registry, served until: the earliest registration time
/// after `since` among the `live` registrations that overlap it (code put
/// in its memory), else `looked` (when the look found it gone). `live`
/// is sorted by start, and its ranges do not overlap (a registry refuses
/// overlapping ones; a hostile table only misleads itself).
pub(super) fn served_until(
    range: &Range<u64>,
    since: u64,
    live: &[(Range<u64>, Option<u64>)],
    looked: u64,
) -> u64 {
    let first = live
        .partition_point(|(r, _)| r.start < range.start)
        .saturating_sub(1);
    live[first..]
        .iter()
        .take_while(|(r, _)| r.start < range.end)
        .filter(|(r, _)| range.start < r.end)
        .filter_map(|(_, at)| at.filter(|&at| at > since))
        .fold(looked, u64::min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ichnos_code::row::{RowTable, UnwindRow, ROW_CFA_BASE_SP};
    use ichnos_code::RowSource;

    /// A code object whose one row says the frame is `cfa_off` bytes.
    fn object(start: u64, end: u64, cfa_off: i32, name: &str) -> Arc<CodeObject> {
        let mut table = RowTable::new(start);
        table
            .push(
                start,
                UnwindRow {
                    size: u32::try_from(end - start).unwrap(),
                    ip_off: 0,
                    cfa_off,
                    ra_off: -8,
                    fp_off: 0,
                    info: ROW_CFA_BASE_SP,
                },
            )
            .unwrap();
        Arc::new(CodeObject {
            start,
            end,
            bias: 0,
            rows: Rows::Fixed(Arc::new(table)),
            source: RowSource::Jit,
            name: Arc::from(name),
        })
    }

    fn cfa_at(at: &AtTime<'_>, pc: u64) -> Option<i32> {
        match at.find_row(pc) {
            Lookup::Row(row, _) => Some(row.cfa_off),
            _ => None,
        }
    }

    #[test]
    fn a_sample_is_looked_up_in_the_code_that_was_there_when_it_was_taken() {
        let mut code = CodeMap::new();
        code.insert(object(0x1000, 0x1100, 72, "new")).unwrap();
        code.insert(object(0x2000, 0x2100, 24, "other")).unwrap();
        let mut timeline = Timeline::default();
        // Old code at 0x1000 served until 500 (when "new" was
        // registered); code at 0x3000 was removed, found gone at 700.
        timeline.retire(object(0x1000, 0x1100, 40, "old"), 100, 500);
        timeline.retire(object(0x3000, 0x3100, 16, "gone"), 0, 700);
        let at = |time| AtTime {
            code: &code,
            timeline: &timeline,
            time,
        };
        assert_eq!(cfa_at(&at(499), 0x1010), Some(40));
        assert_eq!(cfa_at(&at(500), 0x1010), Some(72));
        assert_eq!(cfa_at(&at(499), 0x2010), Some(24), "not replaced");
        assert_eq!(cfa_at(&at(699), 0x3010), Some(16));
        assert_eq!(cfa_at(&at(700), 0x3010), None);
        // Before the old code was registered it did not serve: the map's.
        assert_eq!(cfa_at(&at(50), 0x1010), Some(72));
        assert_eq!(&*at(499).find(0x1010).unwrap().name, "old");
        assert!(at(400).generation().is_none(), "answers are not cached");
    }

    #[test]
    fn the_newest_of_two_retired_objects_serves_its_own_time() {
        let mut timeline = Timeline::default();
        timeline.retire(object(0x1000, 0x1100, 8, "first"), 0, 300);
        timeline.retire(object(0x1000, 0x1100, 16, "second"), 300, 600);
        assert_eq!(&*timeline.find(0x1000, 299).unwrap().name, "first");
        assert_eq!(&*timeline.find(0x1000, 300).unwrap().name, "second");
        assert!(timeline.find(0x1000, 600).is_none());
    }

    #[test]
    fn retired_objects_are_forgotten_once_no_sample_can_need_them() {
        let mut timeline = Timeline::default();
        timeline.retire(object(0x1000, 0x1100, 8, "a"), 0, 1_000);
        timeline.retire(object(0x2000, 0x2100, 8, "b"), 0, 2_000);
        timeline.forget_before(1_000 + KEEP_PAST_NS - 1);
        assert_eq!(timeline.retired.len(), 2);
        assert!(timeline.find(0x1000, 999).is_some());
        timeline.forget_before(1_000 + KEEP_PAST_NS);
        assert_eq!(timeline.retired.len(), 1);
        timeline.forget_before(2_000 + KEEP_PAST_NS);
        assert!(timeline.retired.is_empty());
        assert_eq!(timeline.until, 0);
        for i in 0..MAX_RETIRED as u64 + 10 {
            timeline.retire(object(0x1000, 0x1100, 8, "c"), i, i + 1);
        }
        assert_eq!(timeline.retired.len(), MAX_RETIRED);
        assert_eq!(timeline.order.len(), MAX_RETIRED);
        assert!(timeline.find(0x1000, 5).is_none(), "the oldest went");
        assert!(timeline.find(0x1000, 20).is_some());
    }

    #[test]
    fn a_retired_objects_jit_rows_are_frozen() {
        let rows = Arc::new(ichnos_code::JitRows::new(1, 0x1000, 0x1100, 0));
        let mut timeline = Timeline::default();
        timeline.retire(
            Arc::new(CodeObject {
                start: 0x1000,
                end: 0x1100,
                bias: 0,
                rows: Rows::Jit(Arc::clone(&rows)),
                source: RowSource::Jit,
                name: Arc::from("jit"),
            }),
            0,
            10,
        );
        assert!(rows.is_frozen());
    }

    #[test]
    fn code_mapped_over_a_retired_object_ends_its_time() {
        let mut timeline = Timeline::default();
        timeline.retire(object(0x1000, 0x1100, 8, "under"), 0, 900);
        timeline.retire(object(0x3000, 0x3100, 8, "beside"), 0, 900);
        // Registered after the mapping (its record handled late).
        timeline.retire(object(0x1c00, 0x1d00, 8, "later"), 700, 800);
        timeline.end_in(&(0x1080..0x2000), 600);
        assert!(timeline.find(0x1010, 599).is_some());
        assert!(timeline.find(0x1010, 600).is_none());
        assert!(timeline.find(0x3010, 899).is_some());
        assert!(timeline.find(0x1c10, 799).is_some());
    }

    #[test]
    fn code_put_in_its_place_ends_a_retired_objects_time() {
        let live = [
            (0x0f00..0x1000, Some(10)),
            (0x1000..0x1080, Some(700)),
            (0x1080..0x1100, Some(650)),
            (0x1100..0x1200, Some(20)),
            (0x5000..0x5100, Some(10)),
        ];
        assert_eq!(served_until(&(0x1000..0x1100), 0, &live, 900), 650);
        // Registrations no later than its own do not end it.
        assert_eq!(served_until(&(0x1000..0x1100), 650, &live, 900), 700);
        // One that starts below it and reaches into it does.
        assert_eq!(served_until(&(0x1180..0x1300), 0, &live, 900), 20);
        assert_eq!(served_until(&(0x7000..0x7100), 0, &live, 900), 900);
        assert_eq!(served_until(&(0x1000..0x1100), 0, &[], 900), 900);
    }

    /// Return addresses into frames of one size are told apart from
    /// others: the same object, the same SP-based CFA offset.
    #[test]
    fn return_addresses_share_an_extent_only_in_one_object_with_one_frame_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("x.data")).unwrap();
        let (mut out, writer) = crate::record::output::start(file, 0).unwrap();
        let mut spaces = super::super::Spaces::offline(ichnos_code::elf::RowChoice::EhFrame);
        spaces.begin(7, b"p", 1, &mut out);
        let space = spaces.by_pid.get_mut(&7).unwrap();
        // One object: a 512 KiB frame at 0x1000, a 4 KiB one at 0x2000,
        // one whose CFA comes from the frame pointer at 0x3000; another
        // object with a 512 KiB frame at 0x10000.
        let big = 0x8_0008;
        let mut table = RowTable::new(0x1000);
        for (at, cfa_off, info) in [
            (0x1000, big, ROW_CFA_BASE_SP),
            (0x2000, 0x1008, ROW_CFA_BASE_SP),
            (0x3000, 16, 0),
        ] {
            let row = UnwindRow {
                size: 0x1000,
                ip_off: 0,
                cfa_off,
                ra_off: -8,
                fp_off: 0,
                info,
            };
            table.push(at, row).unwrap();
        }
        let one = Arc::new(CodeObject {
            start: 0x1000,
            end: 0x4000,
            bias: 0,
            rows: Rows::Fixed(Arc::new(table)),
            source: RowSource::EhFrame,
            name: Arc::from("one"),
        });
        space.code.insert(one).unwrap();
        space
            .code
            .insert(object(0x10000, 0x11000, big, "other"))
            .unwrap();
        // Two call sites in the large frame (return addresses are looked
        // up at the byte before).
        assert_eq!(space.shared_extent(5, 0x1011, 0x1ff1), Some(0x8_0008));
        assert_eq!(space.shared_extent(5, 0x2011, 0x2021), Some(0x1008));
        // Different frame sizes; the same size in another object; frames
        // the frame pointer ends; no code at all.
        assert_eq!(space.shared_extent(5, 0x1011, 0x2011), None);
        assert_eq!(space.shared_extent(5, 0x1011, 0x10011), None);
        assert_eq!(space.shared_extent(5, 0x3011, 0x3021), None);
        assert_eq!(space.shared_extent(5, 0x1011, 0x9_0000), None);
        crate::record::close(out, writer, 0).unwrap();
    }
}
