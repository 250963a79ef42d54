//! `.debug_frame` call-frame information converted to unwind rows, for
//! programs that carry no `.eh_frame`: Go's linker writes its functions'
//! CFI only there (compressed), and so do some embedded toolchains.
//!
//! The entries are DWARF's own CIEs and FDEs (`.eh_frame` is a variant of
//! them), converted as [`crate::eh_frame`] converts `.eh_frame`. Rows whose
//! rule cannot be expressed are marked, and the unwinder falls back to the
//! frame-pointer chain there: the section's bytes are not kept for it to
//! evaluate (Go writes none such).
//!
//! Go's CFI does not say where a goroutine's or an OS thread's stack
//! begins: `runtime.goexit` (the return address every goroutine's first
//! function returns to), `runtime.mstart` (an OS thread's first function)
//! and `runtime.rt0_go` (the program's start) have ordinary rows. Nor does
//! it say where code switched to the system stack (`runtime.systemstack`,
//! `runtime.mcall`, the vDSO calls of `runtime.nanotime1`): above them
//! lies another stack, or stale frames. Go's own traceback of a profiling
//! signal stops at both kinds (`TOPFRAME` and `SPWRITE` in the runtime's
//! function table); [`go_top_frames`] finds them, and a file's rows mark
//! them as the outermost frame.

use gimli::{BaseAddresses, DebugFrame, LittleEndian};
use object::{Object, ObjectSection, ObjectSymbol};

use crate::eh_frame::{EhConversion, EhFrameError, MAX_SECTION};
use crate::elf::FileRowsError;
use crate::row::{RowTable, UnwindRow, ROW_OUTERMOST};

/// Converts the x86-64 `.debug_frame` bytes `data` (uncompressed) into
/// rows counted from `base` (default: the lowest FDE start). Addresses in
/// `.debug_frame` are absolute link-time addresses.
#[must_use]
pub fn rows_from_debug_frame(data: &[u8], base: Option<u64>) -> EhConversion {
    let mut debug_frame = DebugFrame::new(data, LittleEndian);
    // For CIEs before version 4, which do not say.
    debug_frame.set_address_size(8);
    crate::eh_frame::convert_section(&debug_frame, &BaseAddresses::default(), base)
}

/// As [`rows_from_debug_frame`], for the `.debug_frame` of an ELF file
/// already parsed (decompressed where it is compressed).
pub fn rows_from_object<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    base: Option<u64>,
) -> Result<EhConversion, FileRowsError> {
    const NAME: &str = ".debug_frame";
    if file.architecture() != object::Architecture::X86_64 {
        let arch = format!("{:?}", file.architecture());
        return Err(EhFrameError::UnsupportedArch(arch).into());
    }
    let section = file
        .section_by_name(NAME)
        .ok_or(FileRowsError::Missing(NAME))?;
    let bad = |source| FileRowsError::BadSection {
        section: NAME,
        source,
    };
    // Compressed, the section's size is the compressed one: bound what
    // it becomes before it is inflated.
    let size = section
        .compressed_file_range()
        .map_err(bad)?
        .uncompressed_size;
    if size > MAX_SECTION {
        return Err(FileRowsError::SectionTooLarge {
            section: NAME,
            size,
            max: MAX_SECTION,
        });
    }
    let data = section.uncompressed_data().map_err(bad)?;
    Ok(rows_from_debug_frame(&data, base))
}

/// The code ranges of the file's `.debug_frame` FDEs, sorted, as
/// [`crate::eh_frame::fde_ranges`] gives those of `.eh_frame` (x86-64
/// files only; empty where it cannot be read, or would inflate past 256
/// MiB).
#[must_use]
pub fn fde_ranges<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> Vec<(u64, u64)> {
    if file.architecture() != object::Architecture::X86_64 {
        return Vec::new();
    }
    let Some(section) = file.section_by_name(".debug_frame") else {
        return Vec::new();
    };
    let fits = section
        .compressed_file_range()
        .is_ok_and(|r| r.uncompressed_size <= MAX_SECTION);
    let Some(data) = fits.then(|| section.uncompressed_data().ok()).flatten() else {
        return Vec::new();
    };
    let mut debug_frame = gimli::DebugFrame::new(&data, gimli::LittleEndian);
    debug_frame.set_address_size(8);
    crate::eh_frame::fde_ranges_in(&debug_frame, &gimli::BaseAddresses::default())
}

/// The Go runtime's functions where a stack begins (`TOPFRAME` in its
/// assembly) or that switch to the system stack (`SPWRITE`), under their
/// names before and after Go 1.17's ABI wrappers: for a function table
/// too old to flag them.
const GO_TOP_FRAMES: [&str; 14] = [
    "runtime.goexit",
    "runtime.goexit.abi0",
    "runtime.mstart",
    "runtime.mstart.abi0",
    "runtime.rt0_go",
    "runtime.rt0_go.abi0",
    "runtime.systemstack",
    "runtime.systemstack.abi0",
    "runtime.mcall",
    "runtime.mcall.abi0",
    "runtime.morestack",
    "runtime.morestack.abi0",
    "runtime.asmcgocall",
    "runtime.asmcgocall.abi0",
];

/// Largest function taken for one of [`GO_TOP_FRAMES`] (they are a few
/// instructions; a bigger symbol of the name is not Go's).
const MAX_TOP_FRAME: u64 = 4096;

/// `[start, end)` link-time ranges of the functions where Go's own
/// traceback of a profiling signal stops: the tops of stacks, and code
/// that switches stacks (past which the stack above is another's, or
/// stale). From Go's function table where it flags them (Go 1.18 on),
/// else by name from the symbol table or, stripped, the function table;
/// none in a file that is not a Go program.
pub fn go_top_frames<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> Vec<(u64, u64)> {
    let functions = crate::go_pclntab::functions(file);
    if functions.first().is_some_and(|f| f.stack_top.is_some()) {
        return functions
            .into_iter()
            .filter(|f| f.stack_top == Some(true) && f.end - f.start <= MAX_TOP_FRAME)
            .map(|f| (f.start, f.end))
            .collect();
    }
    let top = |name: &str, size: u64| GO_TOP_FRAMES.contains(&name) && size <= MAX_TOP_FRAME;
    let from_symbols: Vec<(u64, u64)> = file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter(|s| s.name().is_ok_and(|n| top(n, s.size())))
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    if !from_symbols.is_empty() {
        return from_symbols;
    }
    functions
        .into_iter()
        .filter(|f| top(&f.name, f.end - f.start))
        .map(|f| (f.start, f.end))
        .collect()
}

/// `table` with each of `ranges` (link-time addresses, as
/// [`go_top_frames`] gives them) marked as the outermost frame, over the
/// rows it had there.
#[must_use]
pub fn with_top_frames(table: &RowTable, ranges: &[(u64, u64)]) -> RowTable {
    let mut ranges: Vec<(u64, u64)> = ranges
        .iter()
        .copied()
        .filter(|&(start, end)| start >= table.base() && start < end)
        .collect();
    if ranges.is_empty() {
        return table.clone();
    }
    ranges.sort_unstable();
    let mut top = RowTable::new(table.base());
    for (start, end) in ranges {
        let row = UnwindRow {
            size: u32::try_from(end - start).unwrap_or(u32::MAX),
            info: ROW_OUTERMOST,
            ..UnwindRow::default()
        };
        // An overlapping or out-of-range one is left out.
        let _ = top.push(start, row);
    }
    top.with_gaps_filled_from(table)
}
