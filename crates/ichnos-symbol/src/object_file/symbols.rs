//! An object's symbol tables: the function symbols and code labels of
//! `.symtab` and `.dynsym`, of MiniDebugInfo's compressed table, made one
//! name per address.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use super::buffer::map;
use super::Sym;
use crate::error::SymbolError;

/// Largest MiniDebugInfo decompressed (it holds a symbol table only; real
/// ones are a few MiB).
const MAX_MINI_DEBUG_INFO: u64 = 64 << 20;
/// Memory liblzma may use to decode it.
const MINI_DEBUG_INFO_MEMLIMIT: u64 = 128 << 20;

/// The function symbols of the xz-compressed ELF file in `.gnu_debugdata`
/// (MiniDebugInfo, as Fedora ships it); none if absent or unreadable.
pub(super) fn mini_debug_info_symbols(file: &object::File<'_>) -> Vec<Sym> {
    use std::io::Read;
    let Some(data) = file
        .section_by_name(".gnu_debugdata")
        .and_then(|s| s.data().ok())
    else {
        return Vec::new();
    };
    // liblzma streams its output, so reading at most the limit bounds the
    // memory whatever the compressed data claims.
    let Ok(stream) = xz2::stream::Stream::new_stream_decoder(MINI_DEBUG_INFO_MEMLIMIT, 0) else {
        return Vec::new();
    };
    let decoder = xz2::read::XzDecoder::new_stream(data, stream);
    let mut out = Vec::new();
    if decoder
        .take(MAX_MINI_DEBUG_INFO + 1)
        .read_to_end(&mut out)
        .is_err()
        || out.len() as u64 > MAX_MINI_DEBUG_INFO
    {
        return Vec::new();
    }
    object::File::parse(&*out).map_or_else(|_| Vec::new(), |mini| function_symbols(&mini))
}

/// The functions of a Go program's own function table (`.gopclntab`,
/// which `strip` leaves): where the file has no symbol table left.
pub(super) fn go_function_symbols(file: &object::File<'_>) -> Vec<Sym> {
    ichnos_code::go_pclntab::functions(file)
        .into_iter()
        .map(|f| Sym {
            addr: f.start,
            size: f.end - f.start,
            section_end: u64::MAX,
            name: f.name,
            file: None,
            label: false,
            local: false,
        })
        .collect()
}

/// Functions without a name, where the file's unwind tables place them
/// (one `.eh_frame` FDE each): `sub_ADDR` after the link-time address of
/// their first instruction, as disassemblers name them, so that the
/// addresses of a stripped file's functions add up to the function, not
/// each to itself. Only where `named` (the file's own symbols, one name
/// per address, [`named_code`]) has nothing covering the FDE's start; in
/// executable sections but the PLT's (whose one FDE covers every stub);
/// at most [`MAX_UNWIND_ENTRY_SYMBOLS`]. Each ends its section's code.
pub(super) fn unwind_entry_symbols(file: &object::File<'_>, named: &[Sym]) -> Vec<Sym> {
    let code: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| {
            matches!(s.flags(), object::SectionFlags::Elf { sh_flags }
                if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0)
                && !s
                    .name()
                    .is_ok_and(|n| n.starts_with(".plt") || n == ".iplt")
        })
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    ichnos_code::eh_frame::fde_ranges(file)
        .into_iter()
        .filter_map(|(start, end)| {
            let &(_, section_end) = code.iter().find(|&&(a, b)| (a..b).contains(&start))?;
            super::symbol_covering(named, start).is_none().then(|| Sym {
                addr: start,
                size: end.min(section_end) - start,
                section_end,
                name: format!("sub_{start:x}"),
                file: None,
                label: true,
                local: false,
            })
        })
        .take(MAX_UNWIND_ENTRY_SYMBOLS)
        .collect()
}

/// Unnamed functions named after their unwind entries, at most per file
/// (as many as the largest programs have functions).
const MAX_UNWIND_ENTRY_SYMBOLS: usize = 1 << 22;

/// The function symbols the file at `path` defines (its own symbol
/// tables, no debug file): [`function_symbols`].
pub(crate) fn defined_functions(path: &Path) -> Result<Vec<Sym>, SymbolError> {
    let bytes = map(path)?;
    let file = object::File::parse(&*bytes).map_err(|e| SymbolError::BadObject {
        path: path.to_path_buf(),
        source: e,
    })?;
    let functions = function_symbols(&file)
        .into_iter()
        .filter(|s| !s.label)
        .collect();
    Ok(named_code(functions))
}

/// Function symbols and code labels of `.symtab` and `.dynsym`, in the
/// tables' order (`.symtab` first); [`named_code`] makes them one name
/// per address.
pub(super) fn function_symbols(file: &object::File<'_>) -> Vec<Sym> {
    let mut out: Vec<Sym> = Vec::new();
    // In `.symtab`, a file symbol precedes the local symbols of that file.
    let mut current_file: Option<String> = None;
    for s in file.symbols().chain(file.dynamic_symbols()) {
        if s.kind() == SymbolKind::File {
            current_file = s.name().ok().map(str::to_string);
            continue;
        }
        let label = is_notype(&s) && s.size() == 0 && in_code(file, &s);
        if !label && (s.kind() != SymbolKind::Text || !s.is_definition()) {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        // Local labels (`.L`) and mapping symbols (`$x`) name no code.
        if name.is_empty() || (label && (name.starts_with(".L") || name.starts_with('$'))) {
            continue;
        }
        let section_end = s
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
            .map_or(u64::MAX, |sec| sec.address().saturating_add(sec.size()));
        out.push(Sym {
            addr: s.address(),
            size: s.size(),
            section_end,
            name: name.to_string(),
            file: if s.is_local() {
                current_file.clone()
            } else {
                None
            },
            label,
            local: s.is_local(),
        });
    }
    out
}

/// One name per address from the symbols of every table read (the
/// object's own, a debug file's, MiniDebugInfo's), sorted: at one
/// address a function wins over a label, a sized function over one
/// without a size, a global or weak one over a local one (an alias for
/// use inside the library: glibc's `__GI_setlocale` of `setlocale`, as
/// perf and uftrace choose), and otherwise the first read.
///
/// Labels count where no function symbol holds them: an assembler label
/// in code (`STT_NOTYPE`, no size) names the code from it to the next
/// symbol, as gdb names it. Hand-written entry code is often only that
/// (the dynamic loader's `_start`). A label inside a sized function is a
/// place in it, and the function keeps the name (gdb's choice, where
/// addr2line would name the label). Whether a function holds a label is
/// judged over all the tables at once: MiniDebugInfo keeps the labels of
/// functions whose symbols are only in `.dynsym`.
pub(super) fn named_code(mut symbols: Vec<Sym>) -> Vec<Sym> {
    // Stable: among equals the first read stays first.
    symbols.sort_by_key(|s| (s.addr, s.label, s.size == 0, s.local));
    symbols.dedup_by_key(|s| s.addr);
    // The end of the code the functions so far hold (they may nest or
    // overlap: the furthest end counts).
    let mut held_to = 0u64;
    symbols.retain(|s| {
        if s.label {
            return s.addr >= held_to;
        }
        held_to = held_to.max(s.addr.saturating_add(s.size));
        true
    });
    symbols
}

/// Whether a symbol's ELF type is `STT_NOTYPE` (object's
/// `SymbolKind::Unknown` also covers OS- and processor-specific types).
fn is_notype(symbol: &object::Symbol<'_, '_>) -> bool {
    matches!(symbol.flags(), object::SymbolFlags::Elf { st_info, .. }
        if st_info & 0xf == object::elf::STT_NOTYPE)
}

/// Whether a symbol lies in a section of code (`SHF_EXECINSTR`).
fn in_code(file: &object::File<'_>, symbol: &object::Symbol<'_, '_>) -> bool {
    symbol
        .section_index()
        .and_then(|i| file.section_by_index(i).ok())
        .is_some_and(|section| {
            matches!(section.flags(), object::SectionFlags::Elf { sh_flags }
                if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0)
        })
}
