//! The one unwind row format.
//!
//! Every unwind source — SFrame FREs, codectl JIT FREs, `.eh_frame` CFI — is
//! turned into [`UnwindRow`], which is field for field the codectl
//! `struct code_jit_unwind_fre` and the Linux kernel's decoded
//! `sframe_fre_internal`. A code object's rows sit in one sorted array, a
//! [`RowTable`], so finding the rule for an address is one binary search.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::cfi::{CfiError, CfiSection, CfiStep};
use crate::unwind::Regs;

/// `info` bit: the CFA is computed from the stack pointer (set) or the frame
/// pointer (clear). The same bit and meaning as SFrame's
/// `fre_cfa_base_reg_id`.
pub const ROW_CFA_BASE_SP: u8 = 0x01;
/// `info` bit: the return address is undefined here; this is the outermost
/// frame (SFrame v3 FREs without offsets, DWARF `DW_CFA_undefined` of the
/// return-address column).
pub const ROW_OUTERMOST: u8 = 0x02;
/// `info` bit: the range has unwind information that the row cannot express
/// (a DWARF expression, a CFA in another register). The unwinder falls back
/// to the frame-pointer chain here.
pub const ROW_UNEXPRESSIBLE: u8 = 0x04;
/// `info` bit: the saved return address is signed (AArch64 pointer
/// authentication); SFrame's `fre_mangled_ra_p`.
pub const ROW_MANGLED_RA: u8 = 0x80;
/// Every `info` bit with a meaning; a JIT table row with any other bit set
/// is rejected.
pub const ROW_KNOWN_BITS: u8 = ROW_CFA_BASE_SP | ROW_OUTERMOST | ROW_UNEXPRESSIBLE | ROW_MANGLED_RA;

/// Where the canonical frame address (CFA) is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CfaBase {
    /// CFA = SP + offset.
    Sp,
    /// CFA = FP + offset.
    Fp,
}

/// One unwind rule for a range of code: how to find the caller's frame from
/// an address in `[ip_off, ip_off + size)` of its code object.
///
/// The layout is the codectl `struct code_jit_unwind_fre` (24 bytes with
/// padding); `ra_off` and `fp_off` are offsets from the CFA where the return
/// address and the caller's frame pointer are saved, `0` meaning "not saved
/// here" (for `ra_off`: the architecture's fixed slot, CFA−8 on x86-64; on
/// AArch64 a row from SFrame with `ra_off` 0 means the return address is
/// still in the link register, which this crate's x86-64 unwinder does not
/// handle).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct UnwindRow {
    /// Length in bytes of the code range the row covers.
    pub size: u32,
    /// Offset of the range's first byte from the table's base address.
    pub ip_off: u32,
    /// CFA = base register + `cfa_off`.
    pub cfa_off: i32,
    /// The return address is at CFA + `ra_off`; 0 = the fixed slot.
    pub ra_off: i32,
    /// The caller's frame pointer is at CFA + `fp_off`; 0 = unchanged.
    pub fp_off: i32,
    /// `ROW_*` bits.
    pub info: u8,
}

impl UnwindRow {
    /// The register the CFA is computed from.
    #[must_use]
    pub fn cfa_base(&self) -> CfaBase {
        if self.info & ROW_CFA_BASE_SP != 0 {
            CfaBase::Sp
        } else {
            CfaBase::Fp
        }
    }

    /// Whether the row marks the outermost frame.
    #[must_use]
    pub fn is_outermost(&self) -> bool {
        self.info & ROW_OUTERMOST != 0
    }

    /// Whether the row only says "unwind information exists but is not
    /// expressible as a row".
    #[must_use]
    pub fn is_unexpressible(&self) -> bool {
        self.info & ROW_UNEXPRESSIBLE != 0
    }

    /// One past the last offset covered, widened so it cannot overflow.
    #[must_use]
    pub fn end_off(&self) -> u64 {
        u64::from(self.ip_off) + u64::from(self.size)
    }
}

impl fmt::Debug for UnwindRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = match self.cfa_base() {
            CfaBase::Sp => "sp",
            CfaBase::Fp => "fp",
        };
        write!(f, "[{:#x}+{:#x}) ", self.ip_off, self.size)?;
        if self.is_unexpressible() {
            return write!(f, "unexpressible");
        }
        if self.is_outermost() {
            return write!(f, "outermost");
        }
        write!(f, "cfa={base}{:+} ra=c{:+} ", self.cfa_off, self.ra_off)?;
        if self.fp_off == 0 {
            write!(f, "fp=u")
        } else {
            write!(f, "fp=c{:+}", self.fp_off)
        }
    }
}

/// The rows of one code object, sorted by `ip_off` and not overlapping.
///
/// Lookups go through an index built on first use: the rows' start offsets
/// in an array of their own (16 to a cache line), and per "page" of code —
/// sized so that a page holds about one row on average — the first row
/// starting in it. A lookup reads one index word and searches the few
/// starts of its page instead of binary-searching the whole table; the
/// index costs about eight bytes per row (at least 4 KiB).
#[derive(Clone, Debug, Default)]
pub struct RowTable {
    base: u64,
    rows: Vec<UnwindRow>,
    index: OnceLock<PageIndex>,
    cfi: Option<TableCfi>,
}

/// The call-frame information behind a table's unexpressible rows, and
/// the link-time address its offset 0 stands for.
#[derive(Clone, Debug)]
struct TableCfi {
    section: Arc<CfiSection>,
    link_of_offset0: u64,
}

impl PartialEq for RowTable {
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base && self.rows == other.rows
    }
}

impl Eq for RowTable {}

#[derive(Clone, Debug, Default)]
struct PageIndex {
    /// `rows[i].ip_off`.
    starts: Vec<u32>,
    /// `first[p]`: the number of rows starting below page `p`.
    first: Vec<u32>,
    /// log2 of the page size.
    shift: u32,
}

impl PageIndex {
    fn build(rows: &[UnwindRow]) -> Self {
        let starts: Vec<u32> = rows.iter().map(|r| r.ip_off).collect();
        let span = rows.last().map_or(0, UnwindRow::end_off);
        // Pages small enough to hold about one row each (16 bytes at the
        // least), so a lookup searches one or two starts; at most one index
        // word per row (or 1024 words for small tables).
        let mut shift = 4;
        while (span >> shift) > (rows.len() as u64).max(1024) {
            shift += 1;
        }
        let pages = (span >> shift) as usize + 1;
        let mut first = Vec::with_capacity(pages + 1);
        let mut i = 0usize;
        for p in 0..=pages as u64 {
            while i < starts.len() && u64::from(starts[i]) < p << shift {
                i += 1;
            }
            first.push(i as u32);
        }
        Self {
            starts,
            first,
            shift,
        }
    }

    /// The index of the last row starting at or below `off`.
    #[inline]
    fn last_at_or_below(&self, off: u32) -> Option<usize> {
        let p = (off >> self.shift) as usize;
        let (lo, hi) = match (self.first.get(p), self.first.get(p + 1)) {
            (Some(&lo), Some(&hi)) => (lo as usize, hi as usize),
            // Past the last page: only the last row can cover it.
            _ => (self.starts.len(), self.starts.len()),
        };
        let within = self.starts[lo..hi].partition_point(|&s| s <= off);
        (lo + within).checked_sub(1)
    }
}

/// A row that could not be added to a [`RowTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RowOrderError {
    /// The row starts before the end of the row before it.
    #[error("row at offset {ip_off:#x} overlaps or precedes the previous row, which ends at {prev_end:#x}")]
    Overlap {
        /// The rejected row's start.
        ip_off: u32,
        /// Where the previous row ends.
        prev_end: u64,
    },
    /// The row's address is not representable as an offset from the base.
    #[error("address {addr:#x} is not within 4 GiB above the table base {base:#x}")]
    OutOfRange {
        /// The rejected address.
        addr: u64,
        /// The table's base address.
        base: u64,
    },
}

impl RowTable {
    /// An empty table whose offsets count from `base`.
    #[must_use]
    pub fn new(base: u64) -> Self {
        Self {
            base,
            rows: Vec::new(),
            index: OnceLock::new(),
            cfi: None,
        }
    }

    /// Builds a table from rows in any order; rows that overlap an earlier
    /// (lower-starting) row are cut to start where it ends, or dropped.
    /// Returns the table and the number of rows dropped or cut.
    #[must_use]
    pub fn from_unsorted(base: u64, mut rows: Vec<UnwindRow>) -> (Self, usize) {
        rows.retain(|r| r.size != 0);
        // Offsets are 32-bit: clip rows that would end beyond 4 GiB.
        for r in &mut rows {
            if r.end_off() > 1 << 32 {
                r.size = ((1u64 << 32) - u64::from(r.ip_off)) as u32;
            }
        }
        rows.sort_by_key(|r| (r.ip_off, std::cmp::Reverse(r.size)));
        let mut out: Vec<UnwindRow> = Vec::with_capacity(rows.len());
        let mut damaged = 0;
        for mut row in rows {
            if let Some(prev) = out.last() {
                let prev_end = prev.end_off();
                if u64::from(row.ip_off) < prev_end {
                    damaged += 1;
                    if row.end_off() <= prev_end {
                        continue;
                    }
                    let cut = (prev_end - u64::from(row.ip_off)) as u32;
                    row.ip_off += cut;
                    row.size -= cut;
                }
            }
            out.push(row);
        }
        (
            Self {
                base,
                rows: out,
                index: OnceLock::new(),
                cfi: None,
            },
            damaged,
        )
    }

    /// The same rows, with offset 0 standing for `base` (rows are relative,
    /// so nothing else changes).
    #[must_use]
    pub fn rebased(mut self, base: u64) -> Self {
        self.base = base;
        self
    }

    /// The address that offset 0 stands for.
    #[must_use]
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The same rows, with the call-frame information the unwinder
    /// evaluates where a row is unexpressible; offset 0 of the table is the
    /// file's link-time address `link_of_offset0`.
    #[must_use]
    pub fn with_cfi(mut self, section: Arc<CfiSection>, link_of_offset0: u64) -> Self {
        self.cfi = Some(TableCfi {
            section,
            link_of_offset0,
        });
        self
    }

    /// The call-frame information kept for unexpressible rows, if any.
    #[must_use]
    pub fn cfi(&self) -> Option<&Arc<CfiSection>> {
        self.cfi.as_ref().map(|c| &c.section)
    }

    /// Evaluates the call-frame information at `addr` (an address as
    /// [`RowTable::find`] takes it) of a code object whose table addresses
    /// are run-time addresses minus `bias`; `None` if the table keeps none.
    pub fn evaluate_cfi(
        &self,
        addr: u64,
        bias: u64,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Result<CfiStep, CfiError>> {
        let cfi = self.cfi.as_ref()?;
        let link_pc = addr
            .wrapping_sub(self.base)
            .wrapping_add(cfi.link_of_offset0);
        let relocation = addr.wrapping_add(bias).wrapping_sub(link_pc);
        Some(cfi.section.evaluate(link_pc, regs, relocation, read))
    }

    /// The rows, sorted.
    #[must_use]
    pub fn rows(&self) -> &[UnwindRow] {
        &self.rows
    }

    /// Number of rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Appends a row covering `[addr, addr + size)`; it must start at or
    /// after the end of the last row.
    pub fn push(&mut self, addr: u64, mut row: UnwindRow) -> Result<(), RowOrderError> {
        let off = addr
            .checked_sub(self.base)
            .filter(|off| u32::try_from(*off).is_ok())
            .ok_or(RowOrderError::OutOfRange {
                addr,
                base: self.base,
            })?;
        row.ip_off = off as u32;
        self.index = OnceLock::new();
        if let Some(prev) = self.rows.last_mut() {
            let prev_end = prev.end_off();
            if u64::from(row.ip_off) < prev_end {
                return Err(RowOrderError::Overlap {
                    ip_off: row.ip_off,
                    prev_end,
                });
            }
            // Adjacent rows with the same rule are one row.
            if u64::from(row.ip_off) == prev_end
                && (prev.cfa_off, prev.ra_off, prev.fp_off, prev.info)
                    == (row.cfa_off, row.ra_off, row.fp_off, row.info)
            {
                if let Some(size) = prev.size.checked_add(row.size) {
                    prev.size = size;
                    return Ok(());
                }
            }
        }
        if row.size != 0 {
            self.rows.push(row);
        }
        Ok(())
    }

    /// The row covering `addr`, if any.
    #[inline]
    #[must_use]
    pub fn find(&self, addr: u64) -> Option<&UnwindRow> {
        let off = u32::try_from(addr.checked_sub(self.base)?).ok()?;
        let index = self.index.get_or_init(|| PageIndex::build(&self.rows));
        let row = &self.rows[index.last_at_or_below(off)?];
        (u64::from(off) < row.end_off()).then_some(row)
    }

    /// Where the first row starting above `addr` starts.
    #[must_use]
    pub fn next_start_after(&self, addr: u64) -> Option<u64> {
        let i = match addr.checked_sub(self.base) {
            Some(off) => self.rows.partition_point(|r| u64::from(r.ip_off) <= off),
            // Below the table: its first row is the next.
            None => 0,
        };
        self.rows
            .get(i)
            .map(|r| self.base.saturating_add(u64::from(r.ip_off)))
    }

    /// This table with `[addr, end)` marked as the outermost frame where
    /// no row covers it (the rows it has are kept); unchanged where a row
    /// covers `addr` itself (its rows say what the code there is).
    #[must_use]
    pub fn with_outermost(&self, addr: u64, end: u64) -> RowTable {
        if self.find(addr).is_some() {
            return self.clone();
        }
        let mut entry = RowTable::new(addr);
        let size = u32::try_from(end.saturating_sub(addr)).unwrap_or(u32::MAX);
        let row = UnwindRow {
            size,
            info: ROW_OUTERMOST,
            ..UnwindRow::default()
        };
        if entry.push(addr, row).is_err() || entry.is_empty() {
            return self.clone();
        }
        self.with_gaps_filled_from(&entry)
    }

    /// This table's rows, and `other`'s rows where this table has none:
    /// SFrame rows with `.eh_frame` rows filling what SFrame does not cover
    /// (start-up code, hand-written assembly).
    #[must_use]
    pub fn with_gaps_filled_from(&self, other: &RowTable) -> RowTable {
        let base = self.base.min(other.base);
        let shift = |t: &RowTable, r: &UnwindRow| {
            (
                t.base.saturating_add(u64::from(r.ip_off)),
                t.base.saturating_add(r.end_off()),
            )
        };
        let mut out: Vec<UnwindRow> = Vec::with_capacity(self.rows.len() + other.rows.len());
        let mut emit = |start: u64, end: u64, row: &UnwindRow| {
            if let (Ok(off), Ok(size)) = (u32::try_from(start - base), u32::try_from(end - start)) {
                if size > 0 {
                    out.push(UnwindRow {
                        ip_off: off,
                        size,
                        ..*row
                    });
                }
            }
        };
        for r in &self.rows {
            let (s, e) = shift(self, r);
            emit(s, e, r);
        }
        let mut i = 0;
        for r in &other.rows {
            let (mut s, e) = shift(other, r);
            // Skip primary rows that end before this one starts.
            while i < self.rows.len() && shift(self, &self.rows[i]).1 <= s {
                i += 1;
            }
            let mut j = i;
            while s < e {
                match self.rows.get(j).map(|p| shift(self, p)) {
                    Some((ps, pe)) if ps < e => {
                        if ps > s {
                            emit(s, ps, r);
                        }
                        s = s.max(pe);
                        j += 1;
                    }
                    _ => {
                        emit(s, e, r);
                        break;
                    }
                }
            }
        }
        let mut merged = RowTable::from_unsorted(base, out).0;
        // Offsets move from each table's base to the merged one's.
        merged.cfi = match (&self.cfi, &other.cfi) {
            (Some(c), _) => Some(TableCfi {
                section: Arc::clone(&c.section),
                link_of_offset0: c.link_of_offset0.wrapping_add(base.wrapping_sub(self.base)),
            }),
            (None, Some(c)) => Some(TableCfi {
                section: Arc::clone(&c.section),
                link_of_offset0: c
                    .link_of_offset0
                    .wrapping_add(base.wrapping_sub(other.base)),
            }),
            (None, None) => None,
        };
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ip_off: u32, size: u32, cfa: i32) -> UnwindRow {
        UnwindRow {
            size,
            ip_off,
            cfa_off: cfa,
            ra_off: -8,
            fp_off: 0,
            info: ROW_CFA_BASE_SP,
        }
    }

    #[test]
    fn layout_is_the_codectl_fre() {
        assert_eq!(std::mem::size_of::<UnwindRow>(), 24);
        assert_eq!(std::mem::offset_of!(UnwindRow, ip_off), 4);
        assert_eq!(std::mem::offset_of!(UnwindRow, info), 20);
    }

    #[test]
    fn find_respects_gaps_and_ends() {
        let mut t = RowTable::new(0x1000);
        t.push(0x1000, row(0, 4, 8)).unwrap();
        t.push(0x1010, row(0, 4, 16)).unwrap();
        assert_eq!(t.find(0x1003).unwrap().cfa_off, 8);
        assert!(t.find(0x1004).is_none());
        assert!(t.find(0x0fff).is_none());
        assert_eq!(t.find(0x1013).unwrap().cfa_off, 16);
        assert!(t.find(0x1014).is_none());
        assert!(t.push(0x1012, row(0, 1, 1)).is_err());
    }

    #[test]
    fn the_next_row_after_an_address_below_and_inside_the_table() {
        let mut t = RowTable::new(0x1000);
        t.push(0x1000, row(0, 4, 8)).unwrap();
        t.push(0x1010, row(0, 4, 16)).unwrap();
        assert_eq!(t.next_start_after(0x800), Some(0x1000));
        assert_eq!(t.next_start_after(0x1000), Some(0x1010));
        assert_eq!(t.next_start_after(0x1010), None);
    }

    #[test]
    fn the_outermost_mark_fills_a_gap_only_where_no_row_covers_its_start() {
        let mut t = RowTable::new(0x1000);
        t.push(0x1000, row(0, 4, 8)).unwrap();
        t.push(0x1010, row(0, 4, 16)).unwrap();
        // Inside a row: the table stays as it is, its gap included.
        let covered = t.with_outermost(0x1002, 0x1010);
        assert!(covered.find(0x1004).is_none());
        assert!(!covered.find(0x1002).unwrap().is_outermost());
        // In the gap: marked up to the end given.
        let marked = t.with_outermost(0x1004, 0x1010);
        assert!(marked.find(0x1004).unwrap().is_outermost());
        assert!(marked.find(0x100f).unwrap().is_outermost());
        assert!(!marked.find(0x1010).unwrap().is_outermost());
    }

    #[test]
    fn adjacent_equal_rows_merge() {
        let mut t = RowTable::new(0);
        t.push(0, row(0, 4, 8)).unwrap();
        t.push(4, row(0, 4, 8)).unwrap();
        t.push(8, row(0, 4, 16)).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.rows()[0].size, 8);
    }

    #[test]
    fn gaps_are_filled_only_where_the_primary_has_no_row() {
        let mut primary = RowTable::new(0x100);
        primary.push(0x110, row(0, 0x10, 1)).unwrap();
        primary.push(0x130, row(0, 0x10, 2)).unwrap();
        let mut other = RowTable::new(0x100);
        other.push(0x100, row(0, 0x50, 9)).unwrap();
        let merged = primary.with_gaps_filled_from(&other);
        let at = |a| merged.find(a).map(|r| r.cfa_off);
        assert_eq!(at(0x100), Some(9));
        assert_eq!(at(0x10f), Some(9));
        assert_eq!(at(0x110), Some(1));
        assert_eq!(at(0x11f), Some(1));
        assert_eq!(at(0x120), Some(9));
        assert_eq!(at(0x135), Some(2));
        assert_eq!(at(0x140), Some(9));
        assert_eq!(at(0x14f), Some(9));
        assert_eq!(at(0x150), None);
    }

    proptest::proptest! {
        #[test]
        fn indexed_find_agrees_with_a_linear_scan(
            spans in proptest::collection::vec((0u32..5000, 1u32..300), 0..400),
            big_gap in proptest::option::of(1u32 << 20..1u32 << 31),
            probes in proptest::collection::vec(0u32..u32::MAX, 200),
        ) {
            let mut t = RowTable::new(0x40_0000);
            let mut at = 0u64;
            let mut rows = Vec::new();
            for (i, (gap, size)) in spans.iter().enumerate() {
                at += u64::from(*gap);
                if i == spans.len() / 2 {
                    at += u64::from(big_gap.unwrap_or(0));
                }
                let r = row(0, *size, i32::try_from(i).unwrap());
                t.push(0x40_0000 + at, r).unwrap();
                rows.push((at, at + u64::from(*size), i32::try_from(i).unwrap()));
                at += u64::from(*size);
            }
            let mut all: Vec<u64> = probes.iter().map(|p| u64::from(*p) % (at + 10)).collect();
            all.extend(rows.iter().flat_map(|r| [r.0, r.1 - 1, r.1]));
            for off in all {
                let want = rows.iter().find(|r| r.0 <= off && off < r.1).map(|r| r.2);
                // Every row has its own CFA offset, so none merge.
                let got = t.find(0x40_0000 + off).map(|r| r.cfa_off);
                proptest::prop_assert_eq!(want, got, "offset {:#x}", off);
            }
        }
    }

    #[test]
    fn rows_reaching_past_4_gib_are_clipped_not_wrapped() {
        let (t, _) = RowTable::from_unsorted(
            0,
            vec![
                row(0xffff_0000, 0xffff_ffff, 1),
                row(0xffff_0001, 0xffff_ffff, 2),
            ],
        );
        assert_eq!(t.len(), 1);
        assert_eq!(t.rows()[0].end_off(), 1 << 32);
        assert_eq!(t.find(0xffff_ffff).unwrap().cfa_off, 1);
    }

    #[test]
    fn from_unsorted_cuts_overlaps() {
        let (t, damaged) =
            RowTable::from_unsorted(0, vec![row(8, 8, 2), row(0, 10, 1), row(20, 0, 3)]);
        assert_eq!(damaged, 1);
        assert_eq!(t.rows()[1].ip_off, 10);
        assert_eq!(t.rows()[1].size, 6);
        assert_eq!(t.len(), 2);
    }
}
