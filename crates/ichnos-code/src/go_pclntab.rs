//! The function table of a Go program (`.gopclntab`), which Go's runtime
//! reads for its own tracebacks and which stays in a program stripped of
//! its ELF symbols and DWARF (`strip`, `go build -ldflags=-s -w`, the Go
//! programs distributions ship): the functions' entry addresses and names.
//!
//! The table begins with a header whose magic number gives its layout
//! (`runtime/symtab.go`'s `pcHeader`, and `debug/gosym` for older ones):
//!
//! | magic | Go | header after magic, pads, `minLC`, `ptrSize` | function table entry |
//! |---|---|---|---|
//! | `0xfffffffb` | 1.2–1.15 | `nfunc` (a pointer) | `entry`, `funcoff` (pointers) |
//! | `0xfffffffa` | 1.16–1.17 | `nfunc`, `nfiles`, then five offsets | `entry`, `funcoff` (pointers) |
//! | `0xfffffff0`, `0xfffffff1` | 1.18–1.19, 1.20 on | `nfunc`, `nfiles`, `textStart`, then five offsets | `entryoff`, `funcoff` (`u32`) |
//!
//! The function table holds `nfunc + 1` entries sorted by address (the
//! last marks the end of the code); each `funcoff` leads to the function's
//! `_func`, whose second field (after its entry) is the offset of its name
//! in the function-name table (in 1.2–1.15, from the start of the table).
//! Everything is read bounded by the section; a field out of bounds ends
//! the read with what was read before it.
//!
//! Each `_func` also leads to the function's *pcsp* table (its field after
//! the entry, name, argument size and one more 32-bit field, counted from
//! the start of `pctab`, or of the table before Go 1.16): how far the
//! stack pointer lies below the function's entry value at each address,
//! the rule Go's own unwinder goes by. [`rows`] makes unwind rows of it
//! (CFA = SP + that + 8, the return address below the CFA), for programs
//! stripped of the `.debug_frame` the linker writes from the same tables.

use object::{Object, ObjectSection};

use crate::row::{RowTable, UnwindRow, ROW_CFA_BASE_SP};

/// A function of the table: `[start, end)` at link-time addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    /// Its entry.
    pub start: u64,
    /// Where the next function begins.
    pub end: u64,
    /// Its name as Go writes it (`main.main`, `runtime.goexit`,
    /// `net/http.(*Server).Serve`).
    pub name: String,
    /// Whether Go's own traceback of a profiling signal stops at it, where
    /// the table says (Go 1.18 on: its `_func`'s flag `TOPFRAME`, the top
    /// of a stack, or `SPWRITE`, code that switches stacks, such as
    /// `runtime.systemstack`); `None` in older layouts.
    pub stack_top: Option<bool>,
}

/// `funcFlag_TOPFRAME` and `funcFlag_SPWRITE` (runtime/symtab.go).
const TOP_FLAGS: u8 = 1 | 2;

/// Most functions read from one table (a large Go program has about
/// 100,000).
const MAX_FUNCTIONS: usize = 1 << 22;

/// Longest name read.
const MAX_NAME: usize = 4096;

/// Largest table read (a large Go program's is tens of MiB).
const MAX_SECTION: u64 = 256 << 20;

/// The section holding the table: `.gopclntab`, or in a position
/// independent program `.data.rel.ro.gopclntab`.
pub fn section<'d, 'f, R: object::ReadRef<'d>>(
    file: &'f object::File<'d, R>,
) -> Option<object::Section<'d, 'f, R>> {
    file.section_by_name(".gopclntab")
        .or_else(|| file.section_by_name(".data.rel.ro.gopclntab"))
        .filter(|s| s.size() > 0 && s.size() <= MAX_SECTION)
}

/// The table's bytes and the address of `.text`.
fn table<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
) -> Option<(&'d [u8], Option<u64>)> {
    let data = section(file)?.data().ok()?;
    Some((data, file.section_by_name(".text").map(|s| s.address())))
}

/// The functions of the Go program `file`, in address order; none if it
/// has no function table or one of a layout not described above.
pub fn functions<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> Vec<GoFunction> {
    table(file).map_or_else(Vec::new, |(data, text)| parse(data, text))
}

/// The functions of the table `data`; `text` is the address of the
/// program's `.text`, where Go 1.18 and later count entries from (the
/// header's own copy of it is relocated at run time in a position
/// independent program, 0 in the file).
#[must_use]
pub fn parse(data: &[u8], text: Option<u64>) -> Vec<GoFunction> {
    let Some(header) = Header::read(data, text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut previous: Option<(u64, String, Option<bool>)> = None;
    // A real table holds each name once: names adding up to more than the
    // table are made up (many functions sharing one long name).
    let mut name_budget = data.len();
    let last = header.nfunc.min(MAX_FUNCTIONS as u64);
    for i in 0..=last {
        let Some(entry) = header.entry(data, i) else {
            break;
        };
        if let Some((start, name, stack_top)) = previous.take() {
            if entry > start {
                out.push(GoFunction {
                    start,
                    end: entry,
                    name,
                    stack_top,
                });
            }
        }
        if i == last {
            break;
        }
        let Some(funcoff) = header.funcoff(data, i) else {
            break;
        };
        let Some(name) = header.name(data, funcoff) else {
            break;
        };
        let Some(left) = name_budget.checked_sub(name.len() + 1) else {
            break;
        };
        name_budget = left;
        let stack_top = header.flag(data, funcoff).map(|f| f & TOP_FLAGS != 0);
        previous = Some((entry, name, stack_top));
    }
    out
}

/// The unwind rows of the x86-64 Go program `file` from its functions'
/// pcsp tables, counted from `base` (link-time addresses); `None` if it
/// has no function table of a known layout, or is for another machine
/// (whose return address is not at the CFA's top, or not 8 bytes).
pub fn rows<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>, base: u64) -> Option<RowTable> {
    if file.architecture() != object::Architecture::X86_64 {
        return None;
    }
    let (data, text) = table(file)?;
    rows_of(data, text, base)
}

/// [`rows`] of the x86-64 table `data` (`text` as for [`parse`]).
///
/// The work is bounded by the table's size whatever it says: each step
/// of a pc-value table reads at least two bytes of it, so a real table
/// has fewer steps in all than bytes, and rows are counted the same way.
#[must_use]
pub fn rows_of(data: &[u8], text: Option<u64>, base: u64) -> Option<RowTable> {
    let header = Header::read(data, text)?;
    if header.ptr != 8 {
        return None;
    }
    let mut rows = Vec::new();
    let mut steps = data.len();
    let last = header.nfunc.min(MAX_FUNCTIONS as u64);
    let mut start = header.entry(data, 0);
    for i in 0..last {
        let (Some(from), Some(end)) = (start, header.entry(data, i + 1)) else {
            break;
        };
        start = Some(end);
        if end <= from || from < base {
            continue;
        }
        let Some(table) = header.funcoff(data, i).and_then(|f| header.pcsp(data, f)) else {
            continue;
        };
        let mut values = PcValues::new(table, from, end, header.quantum, &mut steps);
        for (from, to, sp) in values.by_ref() {
            let (Ok(ip_off), Ok(size), Ok(cfa_off)) = (
                u32::try_from(from - base),
                u32::try_from(to - from),
                i32::try_from(i64::from(sp) + 8),
            ) else {
                continue;
            };
            if cfa_off < 8 {
                continue;
            }
            rows.push(UnwindRow {
                ip_off,
                size,
                cfa_off,
                ra_off: -8,
                fp_off: 0,
                info: ROW_CFA_BASE_SP,
            });
        }
        if steps == 0 {
            break;
        }
    }
    Some(RowTable::from_unsorted(base, rows).0)
}

/// The ranges of a pc-value table (`runtime.step`): from the entry, each
/// step adds a zigzag-encoded varint to the value (which starts at -1)
/// and then moves the address on by a varint times the instruction
/// quantum; the value holds from the address before the move to the one
/// after. A first value byte of 0 after the first step ends the table.
struct PcValues<'a, 'b> {
    table: &'a [u8],
    pc: u64,
    end: u64,
    value: i64,
    first: bool,
    quantum: u64,
    /// Steps left to the whole read.
    steps: &'b mut usize,
}

impl<'a, 'b> PcValues<'a, 'b> {
    fn new(table: &'a [u8], entry: u64, end: u64, quantum: u8, steps: &'b mut usize) -> Self {
        Self {
            table,
            pc: entry,
            end,
            value: -1,
            first: true,
            quantum: u64::from(quantum.max(1)),
            steps,
        }
    }

    fn varint(&mut self) -> Option<u32> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let (&byte, rest) = self.table.split_first()?;
            self.table = rest;
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
}

impl Iterator for PcValues<'_, '_> {
    /// `[from, to)` and the value there.
    type Item = (u64, u64, i32);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.pc >= self.end || (!self.first && self.table.first() == Some(&0)) {
                return None;
            }
            *self.steps = self.steps.checked_sub(1)?;
            self.first = false;
            let delta = self.varint()?;
            // Zigzag: the low bit is the sign.
            let magnitude = i64::from(delta >> 1);
            self.value += if delta & 1 == 0 {
                magnitude
            } else {
                -magnitude - 1
            };
            let advance = u64::from(self.varint()?).checked_mul(self.quantum)?;
            let from = self.pc;
            self.pc = from.checked_add(advance)?.min(self.end);
            if self.pc > from {
                return Some((from, self.pc, i32::try_from(self.value).ok()?));
            }
        }
    }
}

/// What the header says, for one of the layouts.
struct Header {
    /// 1.18 and later: entries are `u32` offsets from `text`.
    relative: Option<u64>,
    ptr: usize,
    nfunc: u64,
    /// The function table's offset in the section.
    functab: usize,
    /// Where `_func` offsets count from.
    funcs: usize,
    /// Where name offsets count from.
    names: usize,
    /// Where pcsp offsets count from.
    pctab: usize,
    /// The instruction size unit of pc-value tables.
    quantum: u8,
    /// The layout's magic number.
    magic: u32,
}

impl Header {
    fn read(data: &[u8], text: Option<u64>) -> Option<Self> {
        let magic = u32::from_le_bytes(*data.first_chunk::<4>()?);
        let quantum = *data.get(6)?;
        let ptr = usize::from(*data.get(7)?);
        if !matches!(ptr, 4 | 8) || data.get(4..6)? != [0, 0] {
            return None;
        }
        let word = |i: usize| read_word(data, 8 + i * ptr, ptr);
        let offset = |i: usize| usize::try_from(word(i)?).ok();
        match magic {
            0xffff_fffb => {
                let functab = 8 + ptr;
                Some(Self {
                    relative: None,
                    ptr,
                    nfunc: word(0)?,
                    functab,
                    funcs: 0,
                    names: 0,
                    pctab: 0,
                    quantum,
                    magic,
                })
            }
            0xffff_fffa | 0xffff_fff0 | 0xffff_fff1 => {
                // nfunc, nfiles, textStart (from Go 1.18), funcnameOffset,
                // cuOffset, filetabOffset, pctabOffset, pclnOffset.
                let relative = if magic == 0xffff_fffa {
                    None
                } else {
                    Some(match word(2)? {
                        0 => text?,
                        start => start,
                    })
                };
                let shift = usize::from(relative.is_some());
                let pcln = offset(6 + shift)?;
                Some(Self {
                    relative,
                    ptr,
                    nfunc: word(0)?,
                    functab: pcln,
                    funcs: pcln,
                    names: offset(2 + shift)?,
                    pctab: offset(5 + shift)?,
                    quantum,
                    magic,
                })
            }
            _ => None,
        }
    }

    /// Where entry `i` of the function table is, and the size of each of
    /// its two fields.
    fn slot(&self, i: u64) -> Option<(usize, usize)> {
        let size = if self.relative.is_some() { 4 } else { self.ptr };
        let i = usize::try_from(i).ok()?;
        Some((self.functab.checked_add(i.checked_mul(2 * size)?)?, size))
    }

    /// The address of function `i` (of `nfunc`, the end of the code).
    fn entry(&self, data: &[u8], i: u64) -> Option<u64> {
        let (at, size) = self.slot(i)?;
        let entry = read_word(data, at, size)?;
        match self.relative {
            Some(text) => text.checked_add(entry),
            None => Some(entry),
        }
    }

    /// The offset of function `i`'s `_func` (the last entry, the end of
    /// the code, has none).
    fn funcoff(&self, data: &[u8], i: u64) -> Option<usize> {
        let (at, size) = self.slot(i)?;
        usize::try_from(read_word(data, at.checked_add(size)?, size)?).ok()
    }

    /// The pcsp table of the function whose `_func` is at `funcoff`: the
    /// bytes from its start to the end of the section.
    fn pcsp<'d>(&self, data: &'d [u8], funcoff: usize) -> Option<&'d [u8]> {
        let func = self.funcs.checked_add(funcoff)?;
        let entry_size = if self.relative.is_some() { 4 } else { self.ptr };
        let offset = read_u32(data, func.checked_add(entry_size + 12)?)?;
        if offset == 0 {
            // No table (the runtime reads it as "unknown").
            return None;
        }
        data.get(self.pctab.checked_add(usize::try_from(offset).ok()?)?..)
    }

    /// The flags of the function whose `_func` is at `funcoff`, in the
    /// layouts that place them: after nine 32-bit fields and `funcID`
    /// (Go 1.18 and 1.19), ten from Go 1.20 (`startLine`).
    fn flag(&self, data: &[u8], funcoff: usize) -> Option<u8> {
        let at = match self.magic {
            0xffff_fff0 => 37,
            0xffff_fff1 => 41,
            _ => return None,
        };
        data.get(self.funcs.checked_add(funcoff)?.checked_add(at)?)
            .copied()
    }

    /// The name of the function whose `_func` is at `funcoff`.
    fn name(&self, data: &[u8], funcoff: usize) -> Option<String> {
        let func = self.funcs.checked_add(funcoff)?;
        // The name offset follows the entry: a u32 offset from 1.18 on, a
        // pointer before.
        let entry_size = if self.relative.is_some() { 4 } else { self.ptr };
        let offset = read_u32(data, func.checked_add(entry_size)?)?;
        let at = self.names.checked_add(usize::try_from(offset).ok()?)?;
        let bytes = data.get(at..)?;
        let bytes = &bytes[..bytes.len().min(MAX_NAME)];
        let end = bytes.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&bytes[..end]).ok().map(str::to_owned)
    }
}

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn read_word(data: &[u8], at: usize, size: usize) -> Option<u64> {
    if size == 4 {
        return read_u32(data, at).map(u64::from);
    }
    let bytes = data.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.2 table (the layout `debug/gosym` reads) of two functions,
    /// written by hand: `a.f` at 0x1000 and `a.g` at 0x1010, ending at
    /// 0x1030.
    #[test]
    fn a_go_1_2_table_is_read() {
        let mut t = vec![0xfb, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        t.extend(2u64.to_le_bytes());
        // The function table at 16: (entry, funcoff) x 3.
        let funcs: u64 = 16 + 3 * 16;
        for (entry, func) in [(0x1000u64, funcs), (0x1010, funcs + 16), (0x1030, 0)] {
            t.extend(entry.to_le_bytes());
            t.extend(func.to_le_bytes());
        }
        let names: u32 = 16 + 3 * 16 + 32;
        for (entry, name) in [(0x1000u64, names), (0x1010, names + 4)] {
            t.extend(entry.to_le_bytes());
            t.extend(name.to_le_bytes());
            t.extend([0; 4]);
        }
        t.extend(b"a.f\0a.g\0");
        let got = parse(&t, None);
        let want = [("a.f", 0x1000, 0x1010), ("a.g", 0x1010, 0x1030)];
        let got: Vec<_> = got
            .iter()
            .map(|f| (f.name.as_str(), f.start, f.end))
            .collect();
        assert_eq!(got, want);
        // Cut anywhere, it reads what it can and never panics.
        for n in 0..t.len() {
            let _ = parse(&t[..n], None);
        }
    }

    /// A Go 1.18 table whose 100,000 functions all lead to one pcsp table
    /// of 50,000 steps that never move the address: read whole, that is
    /// five billion steps. The work stays within the table's size.
    #[test]
    fn functions_sharing_one_endless_pcsp_table_cost_no_more_than_the_table() {
        const N: u32 = 100_000;
        let names = 72u64;
        let pctab = names + 1; // pcsp offset 1: the byte after "f\0"
        let steps = 50_000usize;
        let pcln = pctab + 1 + 2 * steps as u64;
        let mut t = vec![0xf0, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        for word in [u64::from(N), 0, 0x1000, names, 0, 0, pctab, pcln] {
            t.extend(word.to_le_bytes());
        }
        t.extend(b"f\0");
        t.extend(std::iter::repeat_n([2u8, 0], steps).flatten());
        let func = (N + 1) * 8;
        for i in 0..=N {
            t.extend((i * 16).to_le_bytes());
            t.extend(func.to_le_bytes());
        }
        for field in [0u32, 0, 0, 0, 1] {
            t.extend(field.to_le_bytes());
        }
        let functions = parse(&t, None);
        assert_eq!(functions.len(), N as usize);
        let rows = rows_of(&t, None, 0).expect("a table of a known layout");
        assert!(rows.len() <= t.len());
    }
}
