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
//! (`OnceLock`), and a lookup after that is two binary searches.

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
        let mut bases = BaseAddresses::default().set_eh_frame(eh_frame_addr);
        if let Some(text) = text_addr {
            bases = bases.set_text(text);
        }
        if let Some(got) = got_addr {
            bases = bases.set_got(got);
        }
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
        LazyRows {
            data: eh_frame.into_boxed_slice(),
            bases,
            origin,
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
        self.fdes
            .partition_point(|f| f.start <= addr)
            .checked_sub(1)
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
