//! The PLT's stubs, named `FUNCTION@plt` as binutils, gdb and perf name
//! them: no symbol table holds them. An x86-64 stub jumps through its
//! GOT slot (`jmp *slot(%rip)`, after an `endbr64` where the program was
//! built for indirect branch tracking), and the dynamic relocation of
//! that slot names the function it calls.

use std::collections::HashMap;

use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget, SymbolIndex,
};

use super::Sym;

/// Stubs named at most per file (a program with this many imports would
/// be a curiosity; the bound is on the work a hostile file can ask for).
const MAX_STUBS: usize = 1 << 20;

/// Longest name a stub is given (longer ones, which only a hostile or
/// broken file holds, leave the stub unnamed).
const MAX_NAME: usize = 4096;

/// The stubs of the file's `.plt`, `.plt.sec` and `.plt.got`, as function
/// symbols `NAME@plt` (x86-64 ELF files only; none elsewhere).
pub(super) fn plt_symbols(file: &object::File<'_>) -> Vec<Sym> {
    if file.architecture() != object::Architecture::X86_64 {
        return Vec::new();
    }
    let Some(symbols) = file.dynamic_symbol_table() else {
        return Vec::new();
    };
    let slots = slot_symbols(file);
    if slots.is_empty() {
        return Vec::new();
    }
    let mut names: HashMap<SymbolIndex, Option<String>> = HashMap::new();
    let mut out = Vec::new();
    for section in [".plt", ".plt.sec", ".plt.got"] {
        let Some(section) = file.section_by_name(section) else {
            continue;
        };
        let Ok(code) = section.data() else { continue };
        for (stub, slot) in stubs(code, section.address()) {
            let Some(&index) = slots.get(&slot) else {
                continue;
            };
            let name = names.entry(index).or_insert_with(|| {
                let name = symbols.symbol_by_index(index).ok()?.name().ok()?;
                (!name.is_empty() && name.len() <= MAX_NAME).then(|| format!("{name}@plt"))
            });
            if let Some(name) = name {
                out.push(Sym {
                    addr: stub.start,
                    size: stub.len,
                    section_end: stub.start + stub.len,
                    name: name.clone(),
                    file: None,
                    label: false,
                    local: false,
                });
            }
        }
    }
    out
}

/// The GOT slots the dynamic relocations bind to a function, by address:
/// the symbol each names (`R_X86_64_JUMP_SLOT` of `.rela.plt`, and the
/// `R_X86_64_GLOB_DAT` slots `.plt.got`'s stubs jump through). The walk
/// reads every dynamic relocation once (24 bytes of the file each).
fn slot_symbols(file: &object::File<'_>) -> HashMap<u64, SymbolIndex> {
    let Some(relocations) = file.dynamic_relocations() else {
        return HashMap::new();
    };
    relocations
        .filter_map(|(slot, relocation)| {
            let object::RelocationFlags::Elf { r_type } = relocation.flags() else {
                return None;
            };
            if !matches!(
                r_type,
                object::elf::R_X86_64_JUMP_SLOT | object::elf::R_X86_64_GLOB_DAT
            ) {
                return None;
            }
            match relocation.target() {
                RelocationTarget::Symbol(index) => Some((slot, index)),
                _ => None,
            }
        })
        .take(MAX_STUBS)
        .collect()
}

/// A stub's code.
#[derive(Debug, PartialEq, Eq)]
struct Stub {
    start: u64,
    len: u64,
}

/// The stubs of PLT code `code` at `start` that jump through a GOT slot,
/// with the slot: each `jmp *disp32(%rip)` (`ff 25`), with what may come
/// before it in a stub (a `bnd` prefix, an `endbr64`, mold's `mov
/// $index, %r11d`); a stub starts on an 8-byte boundary of the section,
/// and a jump whose stub would not (one inside another instruction) is
/// none. Each is as long as to the next stub, at most 16 bytes; at most
/// [`MAX_STUBS`].
fn stubs(code: &[u8], start: u64) -> Vec<(Stub, u64)> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let before =
        |at: usize, bytes: &[u8]| at >= bytes.len() && code[at - bytes.len()..at] == *bytes;
    let mut found: Vec<(usize, u64)> = Vec::new();
    let mut at = 0;
    while at + 6 <= code.len() && found.len() < MAX_STUBS {
        if code[at] != 0xff || code[at + 1] != 0x25 {
            at += 1;
            continue;
        }
        let mut stub = at;
        if before(stub, &[0xf2]) {
            stub -= 1;
        }
        if stub >= 6 && code[stub - 6] == 0x41 && code[stub - 5] == 0xbb {
            stub -= 6;
        }
        if before(stub, &ENDBR64) {
            stub -= 4;
        }
        if stub % 8 != 0 || found.last().is_some_and(|&(last, _)| last >= stub) {
            at += 1;
            continue;
        }
        let disp = i32::from_le_bytes([code[at + 2], code[at + 3], code[at + 4], code[at + 5]]);
        let next = start.wrapping_add(at as u64 + 6);
        found.push((stub, next.wrapping_add_signed(i64::from(disp))));
        at += 6;
    }
    let ends: Vec<usize> = found
        .iter()
        .skip(1)
        .map(|&(s, _)| s)
        .chain(std::iter::once(code.len()))
        .collect();
    found
        .into_iter()
        .zip(ends)
        .filter_map(|((stub, slot), end)| {
            let len = ((end - stub) as u64).min(16);
            let first = start.checked_add(stub as u64)?;
            first.checked_add(len)?;
            Some((Stub { start: first, len }, slot))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::stubs;

    /// (start, length, slot) of each stub found.
    fn found(code: &[u8], at: u64) -> Vec<(u64, u64, u64)> {
        stubs(code, at)
            .into_iter()
            .map(|(s, slot)| (s.start, s.len, slot))
            .collect()
    }

    /// The shapes of stub GNU ld, lld and mold lay out.
    #[test]
    fn stubs_start_where_the_linkers_start_them() {
        // .plt: PLT0 (push *GOT+8; jmp *GOT+16; nop), then entries `jmp
        // *slot; push $n; jmp PLT0` of 16 bytes. PLT0's jump, 6 bytes in,
        // is no stub's.
        let mut plt = vec![
            0xff, 0x35, 0, 0, 0, 0, 0xff, 0x25, 0, 0, 0, 0, 0x0f, 0x1f, 0x40, 0,
        ];
        for i in 0..2u8 {
            plt.extend_from_slice(&[0xff, 0x25, 0x10 * i, 0, 0, 0]);
            plt.extend_from_slice(&[0x68, i, 0, 0, 0, 0xe9, 0, 0, 0, 0]);
        }
        assert_eq!(
            found(&plt, 0x1000),
            [(0x1010, 16, 0x1016), (0x1020, 16, 0x1036)]
        );

        // .plt.sec: `endbr64; bnd jmp *slot; nop` of 16 bytes.
        let mut sec = Vec::new();
        for i in 0..2u8 {
            sec.extend_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, i, 0, 0, 0]);
            sec.extend_from_slice(&[0x0f, 0x1f, 0x44, 0, 0]);
        }
        assert_eq!(
            found(&sec, 0x2000),
            [(0x2000, 16, 0x200b), (0x2010, 16, 0x201c)]
        );

        // .plt.got: `jmp *slot; xchg %ax,%ax` of 8 bytes; with -z bndplt,
        // `bnd jmp *slot; nop` of 8, the second one's jump 9 bytes into a
        // 16-byte block.
        let got = [
            0xff, 0x25, 0, 0, 0, 0, 0x66, 0x90, 0xff, 0x25, 8, 0, 0, 0, 0x66, 0x90,
        ];
        assert_eq!(
            found(&got, 0x3000),
            [(0x3000, 8, 0x3006), (0x3008, 8, 0x3016)]
        );
        let bnd = [
            0xf2, 0xff, 0x25, 0, 0, 0, 0, 0x90, 0xf2, 0xff, 0x25, 1, 0, 0, 0, 0x90,
        ];
        assert_eq!(
            found(&bnd, 0x4000),
            [(0x4000, 8, 0x4007), (0x4008, 8, 0x4010)]
        );

        // mold: `endbr64; mov $index, %r11d; jmp *slot` of 16 bytes; an
        // index of 0x25ff puts `ff 25` inside the mov, which is no stub,
        // and the jump after it is still found.
        let mut mold = Vec::new();
        for index in [0x25ffu32, 7] {
            mold.extend_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0xbb]);
            mold.extend_from_slice(&index.to_le_bytes());
            mold.extend_from_slice(&[0xff, 0x25, 0x40, 0, 0, 0]);
        }
        assert_eq!(
            found(&mold, 0x5000),
            [(0x5000, 16, 0x5050), (0x5010, 16, 0x5060)]
        );

        // Cut anywhere, or placed at the top of the address space: never
        // a panic, never a stub past the end.
        for cut in 0..plt.len() {
            let _ = stubs(&plt[..cut], 0);
        }
        assert!(stubs(&plt, u64::MAX - 20)
            .iter()
            .all(|(s, _)| s.start.checked_add(s.len).is_some()));
    }
}
