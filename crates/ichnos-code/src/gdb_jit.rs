//! JIT code a process told debuggers of through the GDB JIT interface,
//! read from its memory.
//!
//! A JIT that wants a debugger to see its code (LuaJIT built with
//! `LUAJIT_USE_GDBJIT`, LLVM's MCJIT and ORC, V8 with `--gdbjit`,
//! Wasmtime, Mono) builds an ELF object in its own memory for each piece
//! of code, with sections at the code's run-time addresses, links it into
//! a list headed by the global `__jit_debug_descriptor` and calls
//! `__jit_debug_register_code`, where a debugger keeps a breakpoint. The
//! objects carry what a profiler needs and the process's files do not:
//! `.eh_frame` rows to unwind the generated code, and symbols naming it.
//! A profiler reads the same list from the process's memory whenever a
//! walk runs into code it does not know.
//!
//! ```c
//! struct jit_code_entry {
//!     struct jit_code_entry *next_entry, *prev_entry;
//!     const char *symfile_addr;
//!     uint64_t symfile_size;
//! };
//! struct jit_descriptor {
//!     uint32_t version;       /* 1 */
//!     uint32_t action_flag;   /* what the last call did */
//!     struct jit_code_entry *relevant_entry, *first_entry;
//! };
//! ```
//!
//! Everything read is the other process's and is checked: the list is
//! walked at most [`MAX_ENTRIES`] entries (a cycle ends there), an object
//! is read only up to [`MAX_OBJECT`] bytes, and an object that is not a
//! well-formed x86-64 ELF file is an error of its own entry, not of the
//! list. The list may change while it is read (the process runs on):
//! an entry freed meanwhile reads as garbage or fails, and is skipped
//! until the next look.

use std::ops::Range;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::eh_frame::{rows_from_object, EhFrameError};
use crate::memory::{Memory, MemoryError};
use crate::row::RowTable;

/// The descriptor's symbol.
pub const DESCRIPTOR_SYMBOL: &str = "__jit_debug_descriptor";

/// The interface's only version.
pub const VERSION: u32 = 1;

/// Entries walked at most: a list longer than this (or one that loops) is
/// read up to here.
pub const MAX_ENTRIES: usize = 1 << 16;

/// Largest object read (LuaJIT's are about a kilobyte, LLVM's a module's
/// worth).
pub const MAX_OBJECT: u64 = 64 << 20;

/// Functions kept from one object at most.
pub const MAX_FUNCTIONS: usize = 1 << 16;

/// Why the list or an object could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GdbJitError {
    /// The descriptor could not be read.
    #[error("the JIT descriptor at {addr:#x}: {source}")]
    Descriptor {
        /// Its address.
        addr: u64,
        /// The failed read.
        source: MemoryError,
    },
    /// The descriptor's version is not 1.
    #[error("the JIT descriptor at {addr:#x} has version {version}, not 1")]
    Version {
        /// Its address.
        addr: u64,
        /// The version it holds.
        version: u32,
    },
    /// An entry of the list could not be read.
    #[error("the JIT entry at {addr:#x}: {source}")]
    Entry {
        /// Its address.
        addr: u64,
        /// The failed read.
        source: MemoryError,
    },
    /// An object is larger than [`MAX_OBJECT`] (or empty).
    #[error("the JIT object at {addr:#x} claims {size} bytes (at most {MAX_OBJECT} are read)")]
    ObjectSize {
        /// Its address.
        addr: u64,
        /// The size its entry gives.
        size: u64,
    },
    /// An object could not be read.
    #[error("the JIT object at {addr:#x}: {source}")]
    ObjectRead {
        /// Its address.
        addr: u64,
        /// The failed read.
        source: MemoryError,
    },
    /// An object is not an ELF file this reader understands.
    #[error("the JIT object is not a readable ELF file: {0}")]
    BadObject(object::Error),
    /// An object holds no code (no executable section with an address).
    #[error("the JIT object holds no code")]
    NoCode,
    /// An object's unwind rows could not be converted.
    #[error("the JIT object's .eh_frame: {0}")]
    Rows(#[source] EhFrameError),
}

/// The run-time address of `__jit_debug_descriptor` in process `pid`,
/// from the symbol tables of the files it maps; `None` where no file
/// defines it (the process has no JIT that tells debuggers of its code).
pub fn find_descriptor(pid: u32) -> Result<Option<u64>, crate::export::RemoteError> {
    crate::process_symbols::find_process_symbol(pid, DESCRIPTOR_SYMBOL.as_bytes())
}

/// As [`find_descriptor`], reading only the files `searched` does not
/// hold (and adding them): a JIT loaded with `dlopen` after a search
/// that found none is found by the next, which reads its library alone.
pub fn find_descriptor_in_new_files(
    pid: u32,
    searched: &mut crate::export::SearchedFiles,
) -> Result<Option<u64>, crate::export::RemoteError> {
    crate::process_symbols::find_process_symbol_in(
        pid,
        DESCRIPTOR_SYMBOL.as_bytes(),
        Some(searched),
    )
}

/// One entry of the list: where its object lies in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JitEntry {
    /// The entry's own address.
    pub entry: u64,
    /// The object's address.
    pub object: u64,
    /// The object's size.
    pub size: u64,
}

/// The list as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JitList {
    /// Its entries, in list order.
    pub entries: Vec<JitEntry>,
    /// Whether the walk reached the list's end. It stops short at
    /// [`MAX_ENTRIES`], or at an entry that could not be read (the
    /// process may be changing the list): then an entry missing from
    /// `entries` may still be in the list.
    pub complete: bool,
}

/// The entries of the list headed by the descriptor at `descriptor`, in
/// list order. The walk stops at [`MAX_ENTRIES`]; an entry that cannot be
/// read ends it with what was read before (returned, not complete),
/// unless it is the first.
pub fn read_entries(memory: &mut dyn Memory, descriptor: u64) -> Result<JitList, GdbJitError> {
    let mut head = [0u8; 24];
    memory
        .read(descriptor, &mut head)
        .map_err(|source| GdbJitError::Descriptor {
            addr: descriptor,
            source,
        })?;
    let [v0, v1, v2, v3, ..] = head;
    let version = u32::from_le_bytes([v0, v1, v2, v3]);
    if version != VERSION {
        return Err(GdbJitError::Version {
            addr: descriptor,
            version,
        });
    }
    let mut next = word_at(&head, 2);
    let mut entries = Vec::new();
    while next != 0 && entries.len() < MAX_ENTRIES {
        let mut raw = [0u8; 32];
        if let Err(source) = memory.read(next, &mut raw) {
            if entries.is_empty() {
                return Err(GdbJitError::Entry { addr: next, source });
            }
            return Ok(JitList {
                entries,
                complete: false,
            });
        }
        entries.push(JitEntry {
            entry: next,
            object: word_at(&raw, 2),
            size: word_at(&raw, 3),
        });
        next = word_at(&raw, 0);
    }
    Ok(JitList {
        entries,
        complete: next == 0,
    })
}

/// The `i`-th little-endian 64-bit word of `bytes` (0 past their end).
fn word_at(bytes: &[u8], i: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(b) = bytes.get(i * 8..i * 8 + 8) {
        word.copy_from_slice(b);
    }
    u64::from_le_bytes(word)
}

/// Reads the object of `entry`.
pub fn read_object(memory: &mut dyn Memory, entry: &JitEntry) -> Result<Vec<u8>, GdbJitError> {
    if entry.size == 0 || entry.size > MAX_OBJECT {
        return Err(GdbJitError::ObjectSize {
            addr: entry.object,
            size: entry.size,
        });
    }
    let size = usize::try_from(entry.size).map_err(|_| GdbJitError::ObjectSize {
        addr: entry.object,
        size: entry.size,
    })?;
    let mut bytes = vec![0u8; size];
    memory
        .read(entry.object, &mut bytes)
        .map_err(|source| GdbJitError::ObjectRead {
            addr: entry.object,
            source,
        })?;
    Ok(bytes)
}

/// A function an object names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitFunction {
    /// Its code.
    pub range: Range<u64>,
    /// Its symbol's name, as written (not demangled).
    pub name: String,
}

/// What one object says of its code.
#[derive(Debug)]
pub struct JitObject {
    /// The code: from the lowest executable section to the end of the
    /// highest.
    pub text: Range<u64>,
    /// Its unwind rows (run-time addresses: the table's bias is 0), if it
    /// has an `.eh_frame` whose addresses need no relocation (a
    /// relocatable object with `.rela.eh_frame` has its FDEs' addresses
    /// in relocations this reader does not apply).
    pub rows: Option<RowTable>,
    /// Its sized function symbols within the code, by address, at most
    /// [`MAX_FUNCTIONS`].
    pub functions: Vec<JitFunction>,
}

/// Reads an object's code range, rows and functions.
pub fn parse_object(bytes: &[u8]) -> Result<JitObject, GdbJitError> {
    let file = object::File::parse(bytes).map_err(GdbJitError::BadObject)?;
    let mut text: Option<Range<u64>> = None;
    for section in file.sections() {
        let is_code = matches!(
            section.flags(),
            object::SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0
        );
        if !is_code || section.address() == 0 || section.size() == 0 {
            continue;
        }
        let Some(end) = section.address().checked_add(section.size()) else {
            continue;
        };
        text = Some(match text {
            Some(t) => t.start.min(section.address())..t.end.max(end),
            None => section.address()..end,
        });
    }
    let text = text.ok_or(GdbJitError::NoCode)?;
    // In a relocatable object (LuaJIT's) a symbol's value counts from
    // its section, which the JIT placed at the code's address.
    let relocatable = file.kind() == object::ObjectKind::Relocatable;
    let pending_relocations = relocatable && file.section_by_name(".rela.eh_frame").is_some();
    let rows = if pending_relocations {
        None
    } else {
        match rows_from_object(&file, None) {
            Ok(conversion) => Some(conversion.table),
            Err(EhFrameError::Missing) => None,
            Err(e) => return Err(GdbJitError::Rows(e)),
        }
    };
    let mut functions: Vec<JitFunction> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.size() > 0)
        .filter_map(|s| {
            let start = if relocatable {
                let section = file.section_by_index(s.section_index()?).ok()?;
                section.address().checked_add(s.address())?
            } else {
                s.address()
            };
            let end = start.checked_add(s.size())?;
            let name = s.name().ok().filter(|n| !n.is_empty())?;
            (text.start <= start && end <= text.end).then(|| JitFunction {
                range: start..end,
                name: name.to_owned(),
            })
        })
        .take(MAX_FUNCTIONS)
        .collect();
    functions.sort_by_key(|f| (f.range.start, f.range.end));
    functions.dedup_by_key(|f| f.range.start);
    Ok(JitObject {
        text,
        rows,
        functions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Bytes;

    /// Memory holding `words` (little-endian) from `base`.
    fn memory(base: u64, words: &[u64]) -> (u64, Vec<u8>) {
        (base, words.iter().flat_map(|w| w.to_le_bytes()).collect())
    }

    #[test]
    fn the_list_is_read_in_order_from_the_descriptor() {
        // descriptor at 0x1000: version 1, action 1, relevant, first.
        // entries at 0x1020 and 0x1040.
        let (base, bytes) = memory(
            0x1000,
            &[
                1 | (1 << 32),
                0x1040,
                0x1020,
                0,
                // entry 1: next, prev, object, size
                0x1040,
                0,
                0x9000,
                100,
                // entry 2
                0,
                0x1020,
                0xa000,
                200,
            ],
        );
        let mut m = Bytes {
            addr: base,
            data: &bytes,
        };
        let list = read_entries(&mut m, 0x1000).unwrap();
        assert!(list.complete);
        assert_eq!(
            list.entries,
            vec![
                JitEntry {
                    entry: 0x1020,
                    object: 0x9000,
                    size: 100
                },
                JitEntry {
                    entry: 0x1040,
                    object: 0xa000,
                    size: 200
                },
            ]
        );
    }

    #[test]
    fn a_looping_list_ends_at_the_bound_and_a_bad_version_is_refused() {
        // One entry whose next is itself.
        let (base, bytes) = memory(0x1000, &[1, 0, 0x1020, 0, 0x1020, 0, 0x9000, 8]);
        let mut m = Bytes {
            addr: base,
            data: &bytes,
        };
        let list = read_entries(&mut m, 0x1000).unwrap();
        assert_eq!((list.entries.len(), list.complete), (MAX_ENTRIES, false));
        let (base, bytes) = memory(0x1000, &[2, 0, 0, 0]);
        let mut m = Bytes {
            addr: base,
            data: &bytes,
        };
        assert!(matches!(
            read_entries(&mut m, 0x1000),
            Err(GdbJitError::Version { version: 2, .. })
        ));
    }

    #[test]
    fn an_entry_out_of_memory_ends_the_walk_after_the_first() {
        // Second entry's next points nowhere readable.
        let (base, bytes) = memory(0x1000, &[1, 0, 0x1020, 0, 0x5000_0000, 0, 0x9000, 8]);
        let mut m = Bytes {
            addr: base,
            data: &bytes,
        };
        let list = read_entries(&mut m, 0x1000).unwrap();
        assert_eq!((list.entries.len(), list.complete), (1, false));
        // A first entry out of memory is an error naming it.
        let (base, bytes) = memory(0x1000, &[1, 0, 0x5000_0000, 0]);
        let mut m = Bytes {
            addr: base,
            data: &bytes,
        };
        assert!(matches!(
            read_entries(&mut m, 0x1000),
            Err(GdbJitError::Entry {
                addr: 0x5000_0000,
                ..
            })
        ));
    }

    #[test]
    fn objects_of_no_size_or_too_large_are_not_read() {
        let mut m = Bytes { addr: 0, data: &[] };
        for size in [0, MAX_OBJECT + 1, u64::MAX] {
            let entry = JitEntry {
                entry: 0,
                object: 0x1000,
                size,
            };
            assert!(matches!(
                read_object(&mut m, &entry),
                Err(GdbJitError::ObjectSize { .. })
            ));
        }
    }

    #[test]
    fn bytes_that_are_no_elf_file_are_an_error() {
        assert!(matches!(
            parse_object(b"not an ELF file at all"),
            Err(GdbJitError::BadObject(_))
        ));
    }
}
