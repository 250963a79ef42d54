//! The PLT's stubs, named `FUNCTION@plt` as binutils, gdb and perf name
//! them: no symbol table holds them. An x86-64 stub jumps through its
//! GOT slot (`jmp *slot(%rip)`, after an `endbr64` where the program was
//! built for indirect branch tracking), and the dynamic relocation of
//! that slot names the function it calls.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

use super::Sym;

/// Stubs named at most per file (a program with this many imports would
/// be a curiosity; the bound is on the work a hostile file can ask for).
const MAX_STUBS: usize = 1 << 20;

/// The stubs of the file's `.plt`, `.plt.sec` and `.plt.got`, as function
/// symbols `NAME@plt` (x86-64 ELF files only; none elsewhere).
pub(super) fn plt_symbols(file: &object::File<'_>) -> Vec<Sym> {
    if file.architecture() != object::Architecture::X86_64 {
        return Vec::new();
    }
    let slots = slot_names(file);
    if slots.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for section in file.sections() {
        let Ok(name) = section.name() else { continue };
        if !matches!(name, ".plt" | ".plt.sec" | ".plt.got") {
            continue;
        }
        let Ok(code) = section.data() else { continue };
        let start = section.address();
        let end = start.saturating_add(code.len() as u64);
        for (stub, slot) in stubs(code, start) {
            if out.len() >= MAX_STUBS {
                return out;
            }
            if let Some(function) = slots.get(&slot) {
                out.push(Sym {
                    addr: stub.start,
                    size: stub.len,
                    section_end: end,
                    name: format!("{function}@plt"),
                    file: None,
                    label: false,
                });
            }
        }
    }
    out
}

/// The functions the dynamic relocations put into GOT slots: slot
/// address to name (`R_X86_64_JUMP_SLOT` of `.rela.plt`, and the
/// `R_X86_64_GLOB_DAT` slots `.plt.got`'s stubs jump through).
fn slot_names(file: &object::File<'_>) -> HashMap<u64, String> {
    let (Some(relocations), Some(symbols)) =
        (file.dynamic_relocations(), file.dynamic_symbol_table())
    else {
        return HashMap::new();
    };
    // (Most of a large library's relocations are relative ones, of no
    // symbol, which come first: the bound is on those kept, the walk on
    // the file's size.)
    relocations
        .filter_map(|(slot, relocation)| {
            let RelocationTarget::Symbol(index) = relocation.target() else {
                return None;
            };
            let name = symbols.symbol_by_index(index).ok()?.name().ok()?;
            (!name.is_empty()).then(|| (slot, name.to_owned()))
        })
        .take(MAX_STUBS)
        .collect()
}

/// A stub's code.
struct Stub {
    start: u64,
    len: u64,
}

/// The stubs of PLT code `code` at `start` that jump through a GOT slot,
/// with the slot: each `jmp *disp32(%rip)` (`ff 25`), the stub starting
/// at the jump where it lies on an 8-byte boundary of the section (the
/// classic 16-byte `.plt` entry, `.plt.got`'s 8-byte one) and else at the
/// 16-byte boundary before it (an `endbr64` first, and perhaps a `bnd`
/// prefix); each as long as to the next stub's start, at most 16 bytes.
fn stubs(code: &[u8], start: u64) -> Vec<(Stub, u64)> {
    let mut found: Vec<(u64, u64)> = Vec::new();
    let mut at = 0;
    while at + 6 <= code.len() {
        if code[at] != 0xff || code[at + 1] != 0x25 {
            at += 1;
            continue;
        }
        let disp = i32::from_le_bytes([code[at + 2], code[at + 3], code[at + 4], code[at + 5]]);
        let next = start.wrapping_add(at as u64 + 6);
        let slot = next.wrapping_add_signed(i64::from(disp));
        let offset = at as u64;
        let stub = if offset.is_multiple_of(8) {
            offset
        } else {
            offset & !15
        };
        if found.last().is_none_or(|&(last, _)| last < stub) {
            found.push((stub, slot));
        }
        at += 6;
    }
    let ends: Vec<u64> = found
        .iter()
        .skip(1)
        .map(|&(s, _)| s)
        .chain(std::iter::once(code.len() as u64))
        .collect();
    found
        .into_iter()
        .zip(ends)
        .map(|((stub, slot), end)| {
            (
                Stub {
                    start: start + stub,
                    len: (end - stub).min(16),
                },
                slot,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::stubs;

    /// The three shapes of stub, laid out as ld lays them out.
    #[test]
    fn stubs_start_where_ld_starts_them() {
        // .plt: PLT0 (push; jmp *GOT+16), then entries `jmp *slot; push;
        // jmp PLT0` of 16 bytes.
        let mut plt = vec![
            0xff, 0x35, 0, 0, 0, 0, 0xff, 0x25, 0, 0, 0, 0, 0x0f, 0x1f, 0x40, 0,
        ];
        for i in 0..2u8 {
            plt.extend_from_slice(&[0xff, 0x25, 0x10 * i, 0, 0, 0]);
            plt.extend_from_slice(&[0x68, i, 0, 0, 0, 0xe9, 0, 0, 0, 0]);
        }
        let found: Vec<(u64, u64, u64)> = stubs(&plt, 0x1000)
            .into_iter()
            .map(|(s, slot)| (s.start, s.len, slot))
            .collect();
        // PLT0's own jump (at +6, of the 16-byte block at 0) stands for
        // the block; the entries at 0x1010 and 0x1020.
        assert_eq!(
            found,
            [
                (0x1000, 16, 0x100c),
                (0x1010, 16, 0x1016),
                (0x1020, 16, 0x1036)
            ]
        );

        // .plt.sec: `endbr64; bnd jmp *slot; nop` of 16 bytes.
        let mut sec = Vec::new();
        for i in 0..2u8 {
            sec.extend_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, i, 0, 0, 0]);
            sec.extend_from_slice(&[0x0f, 0x1f, 0x44, 0, 0]);
        }
        let found: Vec<(u64, u64)> = stubs(&sec, 0x2000)
            .into_iter()
            .map(|(s, slot)| (s.start, slot))
            .collect();
        assert_eq!(found, [(0x2000, 0x200b), (0x2010, 0x201c)]);

        // .plt.got: `jmp *slot; xchg %ax,%ax` of 8 bytes.
        let got = [
            0xff, 0x25, 0, 0, 0, 0, 0x66, 0x90, 0xff, 0x25, 8, 0, 0, 0, 0x66, 0x90,
        ];
        let found: Vec<(u64, u64, u64)> = stubs(&got, 0x3000)
            .into_iter()
            .map(|(s, slot)| (s.start, s.len, slot))
            .collect();
        assert_eq!(found, [(0x3000, 8, 0x3006), (0x3008, 8, 0x3016)]);

        // Cut anywhere: never a panic.
        for cut in 0..plt.len() {
            let _ = stubs(&plt[..cut], 0);
        }
    }
}
