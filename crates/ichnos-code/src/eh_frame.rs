//! `.eh_frame` call-frame information converted to unwind rows.
//!
//! Most binaries have no `.sframe`, but nearly all have `.eh_frame`. Each
//! row of its CFI table (gimli evaluates the CFA instructions) is turned into
//! an [`UnwindRow`] where the rule is expressible as one: CFA = SP or FP +
//! offset, return address and caller's FP at fixed offsets from the CFA.
//! Ranges whose rule is anything else (a DWARF expression, a CFA in another
//! register, a register saved in a register) become rows marked
//! [`crate::row::ROW_UNEXPRESSIBLE`]; their FDEs and the section's bytes
//! are kept with the table ([`crate::cfi`]), and the unwinder evaluates the
//! CFI there before it falls back to the frame-pointer chain.
//!
//! Only x86-64 register numbers are understood; other architectures'
//! `.eh_frame` is reported as [`EhFrameError::UnsupportedArch`].

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection};

use crate::cfi::{CfiSection, FdeSpan};
use crate::row::{RowTable, UnwindRow, ROW_CFA_BASE_SP, ROW_OUTERMOST, ROW_UNEXPRESSIBLE};

/// Largest `.eh_frame` read (that of a 1 GiB binary is tens of MiB).
pub(crate) const MAX_SECTION: u64 = 256 << 20;

/// Upper bound on the rows kept from one `.eh_frame` (a 1 GiB binary has a
/// few million); beyond it conversion stops and reports truncation.
const MAX_ROWS: usize = 1 << 24;

/// Why `.eh_frame` could not be converted at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EhFrameError {
    /// The ELF file could not be parsed.
    #[error("not a readable ELF file")]
    BadElf(#[source] object::Error),
    /// The file has no `.eh_frame` section.
    #[error("no .eh_frame section")]
    Missing,
    /// Its `.eh_frame` cannot be read.
    #[error("its .eh_frame section cannot be read")]
    BadSection(#[source] object::Error),
    /// Its `.eh_frame` is larger than is read.
    #[error("its .eh_frame section of {0} bytes is larger than the {MAX_SECTION} read")]
    TooLarge(u64),
    /// The file is for an architecture whose register numbers are not
    /// understood here.
    #[error("unsupported architecture {0} (only x86-64 CFI is converted)")]
    UnsupportedArch(String),
}

/// An entry of `.eh_frame` that could not be read: where, and gimli's
/// reason. Conversion passes over it and goes on where it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(".eh_frame entry{}", offset.map(|o| format!(" at offset {o:#x}")).unwrap_or_default())]
pub struct FdeError {
    /// The entry's offset in the section, where known (an entry whose
    /// length cannot be read has none the reader reports).
    pub offset: Option<u64>,
    /// What was wrong.
    #[source]
    pub source: gimli::Error,
}

impl FdeError {
    /// The entry at `offset`.
    fn at(offset: u64, source: gimli::Error) -> Self {
        Self {
            offset: Some(offset),
            source,
        }
    }

    /// An entry whose offset the reader does not report.
    fn unplaced(source: gimli::Error) -> Self {
        Self {
            offset: None,
            source,
        }
    }
}

/// Why a row of `.eh_frame` cannot be one of the unwinder's rows. The row
/// is kept, marked, and the unwinder evaluates the CFI there itself (as
/// framehop's `ConversionError` tells its caller why it could not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Unexpressible {
    /// The CFA is an offset from a register other than the stack and
    /// frame pointers (DWARF register number).
    #[error(
        "the CFA is an offset from DWARF register {0}, neither the stack nor the frame pointer"
    )]
    CfaRegister(u16),
    /// The CFA's offset does not fit in 32 bits.
    #[error("the CFA's offset does not fit in 32 bits")]
    CfaOffset,
    /// The CFA is a DWARF expression that is not "SP plus a constant".
    #[error("the CFA is a DWARF expression")]
    CfaExpression,
    /// The return address is not saved at an offset from the CFA (kept in
    /// a register, computed by an expression, or given no rule).
    #[error("the return address is not saved at an offset from the CFA")]
    ReturnAddressRule,
    /// The return address's offset is 0 or does not fit in 32 bits.
    #[error("the return address's offset from the CFA is 0 or does not fit in 32 bits")]
    ReturnAddressOffset,
    /// The frame pointer is restored by a rule other than an offset from
    /// the CFA.
    #[error("the frame pointer is restored other than from an offset from the CFA")]
    FramePointerRule,
    /// The frame pointer's offset is 0 or does not fit in 32 bits.
    #[error("the frame pointer's offset from the CFA is 0 or does not fit in 32 bits")]
    FramePointerOffset,
}

/// The result of converting one `.eh_frame` (or `.debug_frame`).
#[derive(Clone, Debug)]
pub struct EhConversion {
    /// The rows, counted from the lowest FDE start.
    pub table: RowTable,
    /// Rows whose rule could not be expressed (kept, marked).
    pub unexpressible_rows: usize,
    /// Those rows by why each could not be expressed.
    pub unexpressible_reasons: std::collections::BTreeMap<Unexpressible, usize>,
    /// FDEs whose CIE or instructions could not be parsed.
    pub skipped_fdes: usize,
    /// The first entry that could not be read, and why.
    pub first_error: Option<FdeError>,
    /// Whether the row budget (2^24 rows per section) cut the conversion short.
    pub truncated: bool,
    /// The FDEs holding unexpressible rows, kept in the table's
    /// [`CfiSection`] for the unwinder to evaluate (of `.eh_frame`; those
    /// of `.debug_frame` are listed, not kept).
    pub cfi_fdes: Vec<FdeSpan>,
}

/// Converts the `.eh_frame` of an ELF file given as bytes. Addresses are
/// the file's link-time virtual addresses; rows count from `base` (default:
/// the lowest FDE start) and rows below it are left out.
pub fn rows_from_elf(elf: &[u8], base: Option<u64>) -> Result<EhConversion, EhFrameError> {
    let file = object::File::parse(elf).map_err(EhFrameError::BadElf)?;
    rows_from_object(&file, base)
}

/// As [`rows_from_elf`], for an ELF file already parsed (over any
/// `ReadRef`: bytes in memory, or a `ReadCache` that reads only the
/// sections asked for).
pub fn rows_from_object<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    base: Option<u64>,
) -> Result<EhConversion, EhFrameError> {
    if file.architecture() != object::Architecture::X86_64 {
        return Err(EhFrameError::UnsupportedArch(format!(
            "{:?}",
            file.architecture()
        )));
    }
    let section = file
        .section_by_name(".eh_frame")
        .ok_or(EhFrameError::Missing)?;
    if section.size() > MAX_SECTION {
        return Err(EhFrameError::TooLarge(section.size()));
    }
    let data = section.data().map_err(EhFrameError::BadSection)?;
    let text = file.section_by_name(".text").map(|s| s.address());
    let got = file.section_by_name(".got").map(|s| s.address());
    Ok(rows_from_eh_frame(data, section.address(), text, got, base))
}

/// The code ranges `[start, end)` of the file's `.eh_frame` FDEs, at its
/// link-time addresses, sorted: where its functions are, for a file that
/// has no symbols to say (one FDE a function, as compilers write them).
/// Empty where the file has no readable `.eh_frame` (or is not a 64-bit
/// little-endian file); FDEs that cannot be parsed are passed over, and
/// an entry that cannot be read (its length, or a CIE gimli does not
/// know) ends the walk. At most one range every 12 bytes of the
/// section (an FDE's least size: its length, its CIE's offset and two
/// two-byte addresses), the section at most 256 MiB.
#[must_use]
pub fn fde_ranges<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> Vec<(u64, u64)> {
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    if section.size() > MAX_SECTION || !file.is_little_endian() || !file.is_64() {
        return Vec::new();
    }
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let address_of = |name| file.section_by_name(name).map(|s| s.address());
    fde_ranges_of(
        data,
        section.address(),
        address_of(".text"),
        address_of(".got"),
    )
}

/// [`fde_ranges`] of little-endian `.eh_frame` bytes loaded at
/// `eh_frame_addr`, with the `.text` and `.got` addresses that resolve
/// relative pointers.
#[must_use]
pub fn fde_ranges_of(
    data: &[u8],
    eh_frame_addr: u64,
    text_addr: Option<u64>,
    got_addr: Option<u64>,
) -> Vec<(u64, u64)> {
    let eh_frame = EhFrame::new(data, LittleEndian);
    fde_ranges_in(
        &eh_frame,
        &eh_frame_bases(eh_frame_addr, text_addr, got_addr),
    )
}

/// The base addresses `.eh_frame`'s relative pointers count from: the
/// section's own, `.text`'s and `.got`'s where known.
pub(crate) fn eh_frame_bases(
    eh_frame_addr: u64,
    text_addr: Option<u64>,
    got_addr: Option<u64>,
) -> BaseAddresses {
    let mut bases = BaseAddresses::default().set_eh_frame(eh_frame_addr);
    if let Some(text) = text_addr {
        bases = bases.set_text(text);
    }
    if let Some(got) = got_addr {
        bases = bases.set_got(got);
    }
    bases
}

/// The FDEs' code ranges of a CFI section (`.eh_frame`, or `.debug_frame`
/// in [`crate::debug_frame`]), sorted, as [`fde_ranges`] gives them.
pub(crate) fn fde_ranges_in<'d, S>(section: &S, bases: &BaseAddresses) -> Vec<(u64, u64)>
where
    S: UnwindSection<gimli::EndianSlice<'d, LittleEndian>>,
    S::Offset: gimli::UnwindOffset<usize>,
{
    let mut ranges = Vec::new();
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            continue;
        };
        let start = fde.initial_address();
        if let Some(end) = start.checked_add(fde.len()).filter(|&end| end > start) {
            ranges.push((start, end));
        }
    }
    ranges.sort_unstable();
    ranges.dedup();
    ranges
}

/// Converts x86-64 `.eh_frame` bytes loaded at `eh_frame_addr`; `text_addr`
/// and `got_addr` resolve `DW_EH_PE_textrel` / `datarel` pointers; rows count
/// from `base` (default: the lowest FDE start).
#[must_use]
pub fn rows_from_eh_frame(
    data: &[u8],
    eh_frame_addr: u64,
    text_addr: Option<u64>,
    got_addr: Option<u64>,
    base: Option<u64>,
) -> EhConversion {
    let eh_frame = EhFrame::new(data, LittleEndian);
    let bases = eh_frame_bases(eh_frame_addr, text_addr, got_addr);
    let mut conversion = convert_section(&eh_frame, &bases, base);
    if !conversion.cfi_fdes.is_empty() {
        let section = CfiSection::new(
            data.to_vec(),
            eh_frame_addr,
            text_addr,
            got_addr,
            conversion.cfi_fdes.clone(),
        );
        let base = conversion.table.base();
        conversion.table = conversion
            .table
            .with_cfi(std::sync::Arc::new(section), base);
    }
    conversion
}

/// Converts the entries of a CFI section (`.eh_frame`, or `.debug_frame`
/// in [`crate::debug_frame`]) into rows counted from `base` (default: the
/// lowest FDE start). The FDEs holding unexpressible rows are listed in
/// `cfi_fdes`; the caller keeps the section for them where it can.
pub(crate) fn convert_section<'d, S>(
    section: &S,
    bases: &BaseAddresses,
    base: Option<u64>,
) -> EhConversion
where
    S: UnwindSection<gimli::EndianSlice<'d, LittleEndian>>,
    S::Offset: gimli::UnwindOffset<usize>,
{
    let mut ctx = Box::new(UnwindContext::new());
    let mut rows: Vec<(u64, u64, UnwindRow)> = Vec::new();
    let mut unexpressible = std::collections::BTreeMap::new();
    let mut skipped = 0;
    let mut first_error = None;
    let mut truncated = false;
    let mut evaluation_budget = MAX_EVALUATED_ADDRESSES;
    let mut cfi_fdes = Vec::new();
    let mut entries = section.entries(bases);
    loop {
        let entry = match entries.next() {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(source) => {
                // The entry's length is unreadable: nothing after it can be
                // found either.
                skipped += 1;
                first_error.get_or_insert(FdeError::unplaced(source));
                break;
            }
        };
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let offset = partial.offset() as u64;
        let fde = match partial.parse(S::cie_from_offset) {
            Ok(fde) => fde,
            Err(source) => {
                skipped += 1;
                first_error.get_or_insert(FdeError::at(offset, source));
                continue;
            }
        };
        let unexpressible_before: usize = unexpressible.values().sum();
        if let Err(e) = fde_rows(
            &fde,
            section,
            bases,
            &mut ctx,
            &mut rows,
            &mut unexpressible,
            &mut evaluation_budget,
        ) {
            skipped += 1;
            first_error.get_or_insert(FdeError::at(fde.offset() as u64, e));
        }
        if unexpressible.values().sum::<usize>() > unexpressible_before {
            cfi_fdes.push(FdeSpan {
                start: fde.initial_address(),
                end: fde.end_address(),
                offset: fde.offset(),
            });
        }
        if rows.len() >= MAX_ROWS {
            truncated = true;
            break;
        }
    }
    let base = base.unwrap_or_else(|| rows.iter().map(|r| r.0).min().unwrap_or(0));
    // Rows below the base, or reaching beyond 4 GiB above it, cannot be
    // expressed as offsets and are left out.
    let rows = rows
        .into_iter()
        .filter_map(|(start, end, mut row)| {
            let off = start.checked_sub(base)?;
            let end = end.checked_sub(base)?;
            (end <= 1 << 32).then(|| {
                row.ip_off = off as u32;
                row.size = (end - off) as u32;
                row
            })
        })
        .collect();
    let (table, _) = RowTable::from_unsorted(base, rows);
    EhConversion {
        table,
        unexpressible_rows: unexpressible.values().sum(),
        unexpressible_reasons: unexpressible,
        skipped_fdes: skipped,
        first_error,
        truncated,
        cfi_fdes,
    }
}

/// The rows of the one FDE at `offset` of `.eh_frame` bytes `data`, at
/// link-time addresses (start, end, row); none if it cannot be parsed.
/// What [`LazyRows`](crate::lazy::LazyRows) makes an FDE into on first use.
pub(crate) fn rows_of_fde(
    data: &[u8],
    bases: &BaseAddresses,
    offset: usize,
) -> Vec<(u64, u64, UnwindRow)> {
    let eh_frame = EhFrame::new(data, LittleEndian);
    let Ok(fde) = eh_frame.fde_from_offset(
        bases,
        gimli::EhFrameOffset(offset),
        EhFrame::cie_from_offset,
    ) else {
        return Vec::new();
    };
    let mut ctx = Box::new(UnwindContext::new());
    let mut rows = Vec::new();
    let mut unexpressible = std::collections::BTreeMap::new();
    let mut budget = MAX_EVALUATED_RANGE;
    let _ = fde_rows(
        &fde,
        &eh_frame,
        bases,
        &mut ctx,
        &mut rows,
        &mut unexpressible,
        &mut budget,
    );
    rows
}

/// Appends the rows of one FDE; counts the unexpressible ones by reason.
fn fde_rows<'d, S: UnwindSection<gimli::EndianSlice<'d, LittleEndian>>>(
    fde: &gimli::FrameDescriptionEntry<gimli::EndianSlice<'d, LittleEndian>>,
    section: &S,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    rows: &mut Vec<(u64, u64, UnwindRow)>,
    unexpressible: &mut std::collections::BTreeMap<Unexpressible, usize>,
    evaluation_budget: &mut u64,
) -> Result<(), gimli::Error> {
    let mut table = fde.rows(section, bases, ctx)?;
    while let Some(row) = table.next_row()? {
        let (start, end) = (row.start_address(), row.end_address());
        if end <= start {
            continue;
        }
        let (converted, why) = match convert_row(row) {
            Ok(converted) => (converted, None),
            Err(why) => {
                let marked = UnwindRow {
                    info: ROW_UNEXPRESSIBLE,
                    ..UnwindRow::default()
                };
                (marked, Some(why))
            }
        };
        let evaluated = why.and_then(|_| {
            evaluate_cfa_expression(
                row,
                section,
                fde.cie().encoding(),
                &converted_rules(row),
                evaluation_budget,
            )
        });
        if let Some(pieces) = evaluated {
            rows.extend(pieces);
        } else {
            if let Some(why) = why {
                *unexpressible.entry(why).or_default() += 1;
            }
            rows.push((start, end, converted));
        }
        if rows.len() >= MAX_ROWS {
            break;
        }
    }
    Ok(())
}

/// Two stack pointers the CFA expression is evaluated with, to tell "SP +
/// constant" from anything else.
const SP_A: u64 = 0x1000_0000;
const SP_B: u64 = 0x2000_0000;

/// Largest code range whose CFA expression is evaluated address by address
/// (PLT sections are a few KiB).
const MAX_EVALUATED_RANGE: u64 = 64 * 1024;

/// Most addresses evaluated in one conversion, so that a crafted
/// `.eh_frame` full of expressions cannot take minutes.
const MAX_EVALUATED_ADDRESSES: u64 = 1 << 20;

/// The row's rules with the CFA rule replaced by "SP + 0": what
/// [`convert_row`] makes of the return-address and frame-pointer rules, for
/// use once the CFA expression is evaluated.
fn converted_rules(row: &gimli::UnwindTableRow<usize>) -> UnwindRow {
    let mut out = UnwindRow::default();
    match row.register(X86_64::RA) {
        Some(RegisterRule::Offset(offset)) => match i32::try_from(offset) {
            Ok(offset) if offset != 0 => out.ra_off = offset,
            _ => out.info |= ROW_UNEXPRESSIBLE,
        },
        _ => out.info |= ROW_UNEXPRESSIBLE,
    }
    match row.register(X86_64::RBP) {
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => {}
        Some(RegisterRule::Offset(offset)) => match i32::try_from(offset) {
            Ok(offset) if offset != 0 => out.fp_off = offset,
            _ => out.info |= ROW_UNEXPRESSIBLE,
        },
        _ => out.info |= ROW_UNEXPRESSIBLE,
    }
    out
}

/// A CFA given by a DWARF expression of SP and IP, as the linker writes for
/// PLT sections (`rsp + 8 + ((rip & 15) >= 11) * 8`), evaluated at every
/// address of the row and turned into SP-based rows. `None` when the
/// expression reads other registers or memory, or is not SP plus a
/// function of IP.
fn evaluate_cfa_expression<'d, S: UnwindSection<gimli::EndianSlice<'d, LittleEndian>>>(
    row: &gimli::UnwindTableRow<usize>,
    section: &S,
    encoding: gimli::Encoding,
    rules: &UnwindRow,
    budget: &mut u64,
) -> Option<Vec<(u64, u64, UnwindRow)>> {
    let CfaRule::Expression(expression) = row.cfa() else {
        return None;
    };
    if rules.info & ROW_UNEXPRESSIBLE != 0 {
        return None;
    }
    let (start, end) = (row.start_address(), row.end_address());
    if end - start > MAX_EVALUATED_RANGE || end - start > *budget {
        return None;
    }
    *budget -= end - start;
    let expression = expression.get(section).ok()?;
    let cfa_at = |sp: u64, ip: u64| -> Option<u64> {
        let mut eval = expression.evaluation(encoding);
        eval.set_max_iterations(1000);
        let mut result = eval.evaluate().ok()?;
        loop {
            match result {
                gimli::EvaluationResult::Complete => break,
                gimli::EvaluationResult::RequiresRegister { register, .. } => {
                    let value = match register {
                        X86_64::RSP => sp,
                        X86_64::RA => ip,
                        _ => return None,
                    };
                    result = eval
                        .resume_with_register(gimli::Value::Generic(value))
                        .ok()?;
                }
                _ => return None,
            }
        }
        match eval.as_result().first()?.location {
            gimli::Location::Address { address } => Some(address),
            _ => None,
        }
    };
    let mut out: Vec<(u64, u64, UnwindRow)> = Vec::new();
    for ip in start..end {
        let a = cfa_at(SP_A, ip)?;
        let b = cfa_at(SP_B, ip)?;
        if b.wrapping_sub(a) != SP_B - SP_A {
            return None;
        }
        let offset = i32::try_from(a.wrapping_sub(SP_A).cast_signed()).ok()?;
        let row = UnwindRow {
            cfa_off: offset,
            info: rules.info | ROW_CFA_BASE_SP,
            ..*rules
        };
        match out.last_mut() {
            Some(last) if last.1 == ip && last.2.cfa_off == offset => last.1 = ip + 1,
            _ => out.push((ip, ip + 1, row)),
        }
    }
    Some(out)
}

fn convert_row(row: &gimli::UnwindTableRow<usize>) -> Result<UnwindRow, Unexpressible> {
    use Unexpressible as U;
    let mut out = UnwindRow::default();
    match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            if *register == X86_64::RSP {
                out.info |= ROW_CFA_BASE_SP;
            } else if *register != X86_64::RBP {
                return Err(U::CfaRegister(register.0));
            }
            out.cfa_off = i32::try_from(*offset).map_err(|_| U::CfaOffset)?;
        }
        CfaRule::Expression(_) => return Err(U::CfaExpression),
    }
    match row.register(X86_64::RA) {
        Some(RegisterRule::Undefined) => {
            out.info |= ROW_OUTERMOST;
            return Ok(out);
        }
        Some(RegisterRule::Offset(offset)) => match i32::try_from(offset) {
            Ok(offset) if offset != 0 => out.ra_off = offset,
            _ => return Err(U::ReturnAddressOffset),
        },
        // No rule (libgcc's "unsaved") or a rule in a register or expression.
        _ => return Err(U::ReturnAddressRule),
    }
    match row.register(X86_64::RBP) {
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => {}
        Some(RegisterRule::Offset(offset)) => match i32::try_from(offset) {
            Ok(offset) if offset != 0 => out.fp_off = offset,
            _ => return Err(U::FramePointerOffset),
        },
        _ => return Err(U::FramePointerRule),
    }
    Ok(out)
}
