//! Where a symbol lies in another process: the files it maps, searched
//! through their symbol tables.
//!
//! A recorder looks for two symbols in every process it records (the
//! exported code registry, `ichnos_code_registry`, and the GDB JIT
//! interface's `__jit_debug_descriptor`), and a build runs hundreds of
//! processes that map the same large files (rustc maps a 150 MB
//! `librustc_driver` whose string table alone is 20 MB, and LLVM, which
//! defines the GDB symbol). So what a file defines is worked out once per
//! file, as it is on disk, and each process only places it at its
//! mapping.
//!
//! Within a file, the string tables of its symbol tables are read whole
//! and searched for the name (a few milliseconds for the largest); where
//! they hold it, the symbols whose names start at those offsets are the
//! candidates, found in the symbol table as read, without reading any
//! other name (a walk reading each name apart costs one or two system
//! calls a symbol: seconds for LLVM's). What a file defines is kept with
//! the rest of what it says ([`crate::file_facts`]).

use crate::export::RemoteError;

/// Files of a process already searched for a symbol (by path and the
/// address it is mapped at), so that a later search reads only the files
/// mapped since.
#[derive(Clone, Debug, Default)]
pub struct SearchedFiles {
    files: std::collections::HashSet<(String, u64)>,
}

/// Files remembered as searched at most; past it, the set starts afresh
/// (a file is then read again, never missed).
const MAX_SEARCHED_FILES: usize = 1 << 14;

impl SearchedFiles {
    /// Whether the file at `path`, mapped at `start`, was searched;
    /// notes that it now is.
    fn first_time(&mut self, path: &str, start: u64) -> bool {
        if self.files.len() >= MAX_SEARCHED_FILES {
            self.files.clear();
        }
        self.files.insert((path.to_owned(), start))
    }
}

/// The run-time address of the data or function symbol `name` defined by
/// a file `pid` maps (its symbol tables, `.symtab` then `.dynsym`; the
/// first file that defines it), or `None`.
pub(crate) fn find_process_symbol(pid: u32, name: &[u8]) -> Result<Option<u64>, RemoteError> {
    find_process_symbol_in(pid, name, None)
}

/// As [`find_process_symbol`], reading only the files `searched` does not
/// hold yet (and adding them) when it is given.
pub(crate) fn find_process_symbol_in(
    pid: u32,
    name: &[u8],
    mut searched: Option<&mut SearchedFiles>,
) -> Result<Option<u64>, RemoteError> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|source| RemoteError::Maps { pid, source })?;
    let entries = ichnos_image::parse_maps(pid, &maps).map_err(|e| RemoteError::Maps {
        pid,
        source: std::io::Error::other(e.to_string()),
    })?;
    for m in entries
        .iter()
        .filter(|m| m.offset == 0 && m.name.starts_with('/'))
    {
        if let Some(searched) = searched.as_deref_mut() {
            if !searched.first_time(&m.name, m.range.start) {
                continue;
            }
        }
        // The file as the process sees it.
        let Ok(file) = std::fs::File::open(format!("/proc/{pid}/root{}", m.name)) else {
            continue;
        };
        if let Some(offset) = defined_in_file(file, name) {
            return Ok(Some(m.range.start.wrapping_add(offset)));
        }
    }
    Ok(None)
}

/// Where the regular file `file` defines `name`: the symbol's address
/// less the file's link origin (the page of its first segment), as found
/// the first time this file, as it is on disk, was searched for it.
fn defined_in_file(file: std::fs::File, name: &[u8]) -> Option<u64> {
    let facts = crate::file_facts::facts_of(&file)?;
    facts.symbol(name, || {
        // Only the headers, the symbol tables and their strings are read
        // (a mapped file can be large).
        let cache = object::ReadCache::new(file);
        object::File::parse(&cache)
            .ok()
            .and_then(|elf| defined_in(&elf, name))
    })
}

/// Largest string table read whole (a large program's is tens of MiB).
const MAX_STRING_TABLE: u64 = 256 << 20;

/// Where `file` defines `name`: its address less the file's link origin.
pub(crate) fn defined_in<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    name: &[u8],
) -> Option<u64> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let first = file.segments().map(|s| s.address()).min()?;
    let link_origin = first & !(crate::elf::ELF_START_ALIGN - 1);
    let address = match file {
        object::File::Elf32(f) => elf_definition(f, name),
        object::File::Elf64(f) => elf_definition(f, name),
        _ => file
            .symbols()
            .chain(file.dynamic_symbols())
            .find(|s| s.is_definition() && s.name_bytes().ok() == Some(name))
            .map(|s| s.address()),
    }?;
    address.checked_sub(link_origin)
}

/// The address of the first definition of `name` in ELF file `f`'s
/// symbol tables (`.symtab`, then `.dynsym`).
fn elf_definition<'d, E: object::read::elf::FileHeader, R: object::ReadRef<'d>>(
    f: &object::read::elf::ElfFile<'d, E, R>,
    name: &[u8],
) -> Option<u64> {
    use object::read::elf::Sym;
    use object::{Object, ObjectSection};
    let endian = f.endian();
    let mut wanted = name.to_vec();
    wanted.push(0);
    let finder = memchr::memmem::Finder::new(&wanted);
    for table in [f.elf_symbol_table(), f.elf_dynamic_symbol_table()] {
        if table.is_empty() {
            continue;
        }
        let strings = f
            .section_by_index(table.string_section())
            .ok()
            .filter(|s| s.size() <= MAX_STRING_TABLE)
            .and_then(|s| s.data().ok());
        let defined = |s: &&E::Sym| s.is_definition(endian);
        let symbol = match strings {
            // The offsets where the name starts (it may end a longer
            // name: a linker merges a string into one it ends); a symbol
            // named there is named it.
            Some(data) => {
                let mut at: Vec<u32> = finder
                    .find_iter(data)
                    .filter_map(|p| u32::try_from(p).ok())
                    .collect();
                if at.is_empty() {
                    continue;
                }
                at.sort_unstable();
                table
                    .symbols()
                    .iter()
                    .filter(defined)
                    .find(|s| at.binary_search(&s.st_name(endian)).is_ok())
            }
            // Strings that cannot be read whole: name by name.
            None => table
                .symbols()
                .iter()
                .filter(defined)
                .find(|s| s.name(endian, table.strings()).ok() == Some(name)),
        };
        if let Some(symbol) = symbol {
            return Some(symbol.st_value(endian).into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds the shared object gcc makes of `source` at `lib` (stripped
    /// if `strip`).
    fn build(lib: &std::path::Path, source: &str, strip: bool) {
        let c = lib.with_extension("c");
        std::fs::write(&c, source).unwrap();
        let built = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(lib)
            .arg(&c)
            .status()
            .unwrap();
        assert!(built.success());
        if strip {
            let stripped = std::process::Command::new("strip")
                .arg(lib)
                .status()
                .unwrap();
            assert!(stripped.success());
        }
    }

    /// The value `nm` gives a defined symbol `name` of `lib` (its
    /// address: these objects' link origin is 0).
    fn nm(lib: &std::path::Path, name: &str) -> Option<u64> {
        let out = std::process::Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(lib)
            .output()
            .unwrap();
        let all = std::process::Command::new("nm")
            .arg("--defined-only")
            .arg(lib)
            .output()
            .unwrap();
        String::from_utf8_lossy(&all.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&out.stdout).lines())
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (value, _, n) = (f.next()?, f.next()?, f.next()?);
                (n == name).then(|| u64::from_str_radix(value, 16).unwrap())
            })
    }

    /// Where the object gcc makes of `source` defines `name`, by our
    /// search and by nm.
    fn search(source: &str, strip: bool, name: &str) -> (Option<u64>, Option<u64>) {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libx.so");
        build(&lib, source, strip);
        let file = std::fs::File::open(&lib).unwrap();
        (defined_in_file(file, name.as_bytes()), nm(&lib, name))
    }

    #[test]
    fn a_files_symbol_is_found_where_nm_says_it_is_defined() {
        let name = "ichnos_code_registry";
        let (ours, nm) = search("int ichnos_code_registry;\n", false, name);
        assert!(ours.is_some());
        assert_eq!(ours, nm);
        // Stripped, the dynamic symbol stays.
        let (ours, nm) = search("int ichnos_code_registry = 3;\n", true, name);
        assert!(ours.is_some());
        assert_eq!(ours, nm);
        // A longer name ending with it may share its string, and is not
        // it; it is found where both are defined.
        let both = "int my_ichnos_code_registry;\nint ichnos_code_registry = 7;\n";
        let (ours, nm) = search(both, false, name);
        assert!(ours.is_some());
        assert_eq!(ours, nm);
        assert_eq!(
            search("int my_ichnos_code_registry;\n", false, name),
            (None, None)
        );
        assert_eq!(search("int other_registry;\n", false, name).0, None);
        // Static: in .symtab only, and gone when stripped.
        let local = "static int ichnos_code_registry;\nint *p = &ichnos_code_registry;\n";
        let (ours, nm) = search(local, false, name);
        assert!(ours.is_some());
        assert_eq!(ours, nm);
        assert_eq!(search(local, true, name), (None, None));
        // A prefix of it is not it; nor is a name only referred to.
        assert_eq!(search("int ichnos_code_registry_x;\n", false, name).0, None);
        let used =
            "extern int ichnos_code_registry;\nint f(void) { return ichnos_code_registry; }\n";
        assert_eq!(search(used, false, name).0, None);
    }

    #[test]
    fn a_file_rewritten_since_it_was_searched_is_searched_again() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libx.so");
        let name = b"ichnos_code_registry";
        build(&lib, "int ichnos_code_registry;\n", false);
        let open = || std::fs::File::open(&lib).unwrap();
        let first = defined_in_file(open(), name);
        assert!(first.is_some());
        // The same file again: the same answer.
        assert_eq!(defined_in_file(open(), name), first);
        // Rewritten in place (same inode) without the symbol, and with a
        // modification time of its own.
        let other = dir.path().join("liby.so");
        build(&other, "int other_registry;\n", false);
        std::fs::write(&lib, std::fs::read(&other).unwrap()).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(10);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&lib)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(defined_in_file(open(), name), None);
    }
}
