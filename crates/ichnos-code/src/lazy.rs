//! `.eh_frame` rows made on demand, one FDE at a time.
//!
//! Converting a whole `.eh_frame` up front costs a pass over every FDE's
//! CFA program: 250 ms and a million rows for a 150 MB shared library, of
//! which a profile touches a few thousand. [`LazyRows`] finds FDEs by
//! address instead — through `.eh_frame_hdr`'s sorted table, or one pass
//! over the FDE headers where a file has none — and converts an FDE's
//! program to rows the first time an address in it is looked up. The
//! rows are the ones [`crate::eh_frame`] makes (CFA expressions of SP and
//! IP evaluated per address, the rest marked unexpressible), and the CFI
//! of unexpressible rows is evaluated from the same kept bytes.
//!
//! Lookups may run on many threads: each FDE's rows are made once
//! (`OnceLock`), and a lookup after that is a load from a page index,
//! a search among the FDEs that start in the address's page, and a
//! search of the FDE's rows. (A binary search of all of a large
//! object's FDEs was most of an uncached unwind's time: a dozen
//! dependent loads, each a cache miss.)

use std::sync::OnceLock;

use gimli::{BaseAddresses, CieOrFde, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};

use crate::cfi::{CfiError, CfiStep};
use crate::row::UnwindRow;
use crate::unwind::Regs;

/// Most FDEs indexed for one object.
const MAX_FDES: usize = 1 << 24;

/// One FDE: where its code starts (an offset from the object's origin)
/// and where it lies in `.eh_frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fde {
    start: u64,
    offset: usize,
}

/// An object's `.eh_frame`, indexed by address, converted on demand.
pub struct LazyRows {
    data: Box<[u8]>,
    bases: BaseAddresses,
    /// The link-time address that offset 0 stands for (the page of the
    /// first `PT_LOAD`).
    origin: u64,
    fdes: Box<[Fde]>,
    /// Where to look among `fdes` for an address.
    pages: PageIndex,
    /// Each FDE's rows once made, offsets from the FDE's start.
    rows: Box<[OnceLock<Box<[UnwindRow]>>]>,
    /// Rows that win where they have one (the file's SFrame rows), with
    /// `.eh_frame` filling their gaps.
    primary: Option<crate::row::RowTable>,
}

impl std::fmt::Debug for LazyRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyRows")
            .field("bytes", &self.data.len())
            .field("fdes", &self.fdes.len())
            .field("converted", &self.converted())
            .finish_non_exhaustive()
    }
}

impl LazyRows {
    /// Indexes `.eh_frame` bytes loaded at `eh_frame_addr` (link-time),
    /// with `.eh_frame_hdr` at `hdr` if the file has one, `.text` and `.got`
    /// for pointer encodings, and `origin`, the link-time address offsets
    /// count from.
    #[must_use]
    pub fn new(
        eh_frame: Vec<u8>,
        eh_frame_addr: u64,
        hdr: Option<(&[u8], u64)>,
        text_addr: Option<u64>,
        got_addr: Option<u64>,
        origin: u64,
    ) -> LazyRows {
        let mut bases = crate::eh_frame::eh_frame_bases(eh_frame_addr, text_addr, got_addr);
        if let Some((_, hdr_addr)) = hdr {
            bases = bases.set_eh_frame_hdr(hdr_addr);
        }
        // A damaged index is passed over: the FDEs' own headers say the
        // same, at the cost of one pass.
        let mut fdes = hdr
            .and_then(|(bytes, _)| {
                from_header(bytes, &bases, eh_frame_addr, eh_frame.len(), origin)
            })
            .unwrap_or_default();
        if fdes.is_empty() {
            fdes = from_entries(&eh_frame, &bases, origin);
        }
        fdes.sort_by_key(|f| f.start);
        fdes.dedup_by_key(|f| f.start);
        let rows = (0..fdes.len()).map(|_| OnceLock::new()).collect();
        let starts: Vec<u64> = fdes.iter().map(|f| f.start).collect();
        LazyRows {
            data: eh_frame.into_boxed_slice(),
            bases,
            origin,
            pages: PageIndex::new(&starts),
            fdes: fdes.into_boxed_slice(),
            rows,
            primary: None,
        }
    }

    /// The same, with `primary`'s rows (SFrame rows counted from the same
    /// origin) taking precedence wherever it has one.
    #[must_use]
    pub fn with_primary(mut self, primary: crate::row::RowTable) -> Self {
        self.primary = Some(primary);
        self
    }

    /// The same, with `[addr, end)` (offsets from the origin) marked as
    /// the outermost frame where neither the primary rows nor an FDE
    /// covers it; the mark ends where the next of either starts.
    #[must_use]
    pub fn with_outermost(mut self, addr: u64, end: u64) -> Self {
        if self.find(addr).is_some() {
            return self;
        }
        let next_fde = self
            .fdes
            .get(self.fdes.partition_point(|f| f.start <= addr))
            .map(|f| f.start);
        let next_primary = self.primary.as_ref().and_then(|p| p.next_start_after(addr));
        let end = [Some(end), next_fde, next_primary]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end);
        let primary = self
            .primary
            .take()
            .unwrap_or_else(|| crate::row::RowTable::new(0));
        self.primary = Some(primary.with_outermost(addr, end));
        self
    }

    /// How many FDEs there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.fdes.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.fdes.is_empty()
    }

    /// How many FDEs have been converted so far.
    #[must_use]
    pub fn converted(&self) -> usize {
        self.rows.iter().filter(|r| r.get().is_some()).count()
    }

    /// The FDE covering `addr` (an offset from the origin), if one may.
    fn fde_index(&self, addr: u64) -> Option<usize> {
        let (lo, hi) = self.pages.range(addr, self.fdes.len())?;
        let within = self.fdes.get(lo..=hi)?;
        (lo + within.partition_point(|f| f.start <= addr)).checked_sub(1)
    }

    fn rows_of(&self, i: usize) -> &[UnwindRow] {
        self.rows[i].get_or_init(|| self.convert(i))
    }

    /// Runs FDE `i`'s CFA program: its rows, as offsets from its start.
    fn convert(&self, i: usize) -> Box<[UnwindRow]> {
        let fde = self.fdes[i];
        let start = fde.start.wrapping_add(self.origin);
        let mut rows = crate::eh_frame::rows_of_fde(&self.data, &self.bases, fde.offset);
        rows.retain_mut(|(row_start, row_end, row)| {
            let (Some(off), Some(end)) = (row_start.checked_sub(start), row_end.checked_sub(start))
            else {
                return false;
            };
            match (u32::try_from(off), u32::try_from(end - off)) {
                (Ok(off), Ok(size)) if size > 0 => {
                    row.ip_off = off;
                    row.size = size;
                    true
                }
                _ => false,
            }
        });
        let (table, _) =
            crate::row::RowTable::from_unsorted(0, rows.into_iter().map(|(_, _, r)| r).collect());
        table.rows().to_vec().into_boxed_slice()
    }

    /// The row covering `addr` (an offset from the origin: a run-time
    /// address less the code object's bias).
    #[must_use]
    pub fn find(&self, addr: u64) -> Option<UnwindRow> {
        self.find_at(addr).map(|(_, row)| row)
    }

    /// The row covering `addr`, and the offset its range starts at.
    #[must_use]
    pub fn find_at(&self, addr: u64) -> Option<(u64, UnwindRow)> {
        if let Some(primary) = &self.primary {
            if let Some(row) = primary.find(addr) {
                return Some((primary.base() + u64::from(row.ip_off), *row));
            }
        }
        let i = self.fde_index(addr)?;
        let start = self.fdes[i].start;
        let off = addr - start;
        let rows = self.rows_of(i);
        let j = rows
            .partition_point(|r| u64::from(r.ip_off) <= off)
            .checked_sub(1)?;
        let row = rows[j];
        (off < row.end_off()).then(|| (start + u64::from(row.ip_off), row))
    }

    /// Evaluates the CFI at `addr` (an offset from the origin) of a code
    /// object whose offsets are run-time addresses minus `bias`.
    pub fn evaluate_cfi(
        &self,
        addr: u64,
        bias: u64,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<CfiStep, CfiError> {
        let link_pc = addr.wrapping_add(self.origin);
        let i = self
            .fde_index(addr)
            .ok_or(CfiError::NoFde { addr: link_pc })?;
        let relocation = bias.wrapping_sub(self.origin);
        crate::cfi::evaluate_fde(
            &self.data,
            &self.bases,
            self.fdes[i].offset,
            link_pc,
            regs,
            relocation,
            read,
        )
    }
}

/// Most pages a [`PageIndex`] holds: a span of starts wider than this
/// many 4 KiB pages is indexed by larger pages.
const MAX_PAGES: u64 = 1 << 20;

/// For each page of the span FDE starts lie in, the last FDE that starts
/// at or before the page's first address: an address's FDE is then among
/// those from its page's entry to the next page's.
#[derive(Debug, Default)]
struct PageIndex {
    /// The first page's address.
    first: u64,
    /// log2 of the page size.
    shift: u32,
    pages: Box<[u32]>,
}

impl PageIndex {
    /// The index of `starts`, sorted ascending (at most `MAX_FDES`).
    fn new(starts: &[u64]) -> PageIndex {
        let (Some(&low), Some(&high)) = (starts.first(), starts.last()) else {
            return PageIndex::default();
        };
        let mut shift = 12;
        while ((high - (low & !((1u64 << shift) - 1))) >> shift) >= MAX_PAGES {
            shift += 1;
        }
        let first = low & !((1u64 << shift) - 1);
        let count = ((high - first) >> shift) + 1;
        let mut pages = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut next = 0usize;
        for page in 0..count {
            let base = first + (page << shift);
            while next < starts.len() && starts[next] <= base {
                next += 1;
            }
            // The last start at or before the page (none, for a first
            // page whose first start lies inside it: from the first).
            pages.push(u32::try_from(next.saturating_sub(1)).unwrap_or(u32::MAX));
        }
        PageIndex {
            first,
            shift,
            pages: pages.into_boxed_slice(),
        }
    }

    /// The first and last of `len` FDEs among which the last one starting
    /// at or before `addr` lies; `None` below the first page.
    fn range(&self, addr: u64, len: usize) -> Option<(usize, usize)> {
        let last = len.checked_sub(1)?;
        let page = usize::try_from(addr.checked_sub(self.first)? >> self.shift).ok()?;
        let entry = |p: usize| self.pages.get(p).map(|&i| i as usize);
        match entry(page) {
            Some(lo) => Some((lo, entry(page + 1).unwrap_or(last).min(last))),
            // Past the last page: after the last page's entry.
            None => Some((entry(self.pages.len().checked_sub(1)?)?, last)),
        }
    }
}

/// The FDEs of `.eh_frame_hdr`'s table (empty if it has none); `None` if
/// the table cannot be read or an entry points outside `.eh_frame`.
fn from_header(
    hdr: &[u8],
    bases: &BaseAddresses,
    eh_frame_addr: u64,
    eh_frame_len: usize,
    origin: u64,
) -> Option<Vec<Fde>> {
    let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(bases, 8).ok()?;
    let Some(table) = parsed.table() else {
        return Some(Vec::new());
    };
    let mut out = Vec::new();
    let mut iter = table.iter(bases);
    while let Some((initial, fde)) = iter.next().ok()? {
        if out.len() >= MAX_FDES {
            break;
        }
        let (initial, fde) = (initial.pointer(), fde.pointer());
        let offset = fde
            .checked_sub(eh_frame_addr)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|&o| o < eh_frame_len)?;
        // Code below the origin cannot be expressed as an offset.
        if let Some(start) = initial.checked_sub(origin) {
            out.push(Fde { start, offset });
        }
    }
    Some(out)
}

/// The FDEs found by reading every entry's header (no CFA program is run).
fn from_entries(eh_frame: &[u8], bases: &BaseAddresses, origin: u64) -> Vec<Fde> {
    let section = EhFrame::new(eh_frame, LittleEndian);
    let mut entries = section.entries(bases);
    let mut out = Vec::new();
    while let Ok(Some(entry)) = entries.next() {
        if out.len() >= MAX_FDES {
            break;
        }
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        if let Some(start) = fde.initial_address().checked_sub(origin) {
            out.push(Fde {
                start,
                offset: fde.offset(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The last of `starts` at or before `addr`, by a search of them all.
    fn plain(starts: &[u64], addr: u64) -> Option<usize> {
        starts.partition_point(|&s| s <= addr).checked_sub(1)
    }

    fn paged(starts: &[u64], addr: u64) -> Option<usize> {
        let index = PageIndex::new(starts);
        let (lo, hi) = index.range(addr, starts.len())?;
        (lo + starts[lo..=hi].partition_point(|&s| s <= addr)).checked_sub(1)
    }

    proptest! {
        #[test]
        fn the_page_index_finds_what_a_full_search_finds(
            mut starts in proptest::collection::vec(0u64..1 << 20, 1..300),
            base in prop_oneof![Just(0u64), 0x40_0000u64..0x50_0000, Just(u64::MAX - (1 << 21))],
            probes in proptest::collection::vec(0u64..(1 << 20) + 8192, 1..100),
        ) {
            starts.sort_unstable();
            starts.dedup();
            let starts: Vec<u64> = starts.iter().map(|s| base + s).collect();
            for p in probes {
                let addr = base.saturating_add(p);
                prop_assert_eq!(paged(&starts, addr), plain(&starts, addr), "at {:#x}", addr);
            }
            // Below the first start, and at each start and just before it.
            prop_assert_eq!(paged(&starts, base.saturating_sub(1)), plain(&starts, base.saturating_sub(1)));
            for &s in &starts {
                prop_assert_eq!(paged(&starts, s), plain(&starts, s));
                prop_assert_eq!(paged(&starts, s.saturating_sub(1)), plain(&starts, s.saturating_sub(1)));
            }
        }
    }

    #[test]
    fn starts_spread_over_the_address_space_use_larger_pages() {
        let starts = [0x1000, 0x7fff_0000_0000, u64::MAX - 0x1000];
        let index = PageIndex::new(&starts);
        assert!(
            index.pages.len() as u64 <= MAX_PAGES,
            "{}",
            index.pages.len()
        );
        for addr in [0x1000, 0x2000, 0x7fff_0000_0000, 0x7fff_0000_0001, u64::MAX] {
            assert_eq!(paged(&starts, addr), plain(&starts, addr), "{addr:#x}");
        }
        assert_eq!(paged(&[], 5), None);
    }
}
