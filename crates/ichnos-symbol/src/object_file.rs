//! One object file, parsed once: its symbol tables and its DWARF.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::debug_file::{build_id_path, find_debug_file, DebugSource};

mod buffer;
mod plt;
mod symbols;
use crate::error::SymbolError;
use buffer::{collecting, map};
pub(crate) use buffer::{Buffer, Shared};
pub(crate) use symbols::defined_functions;
use symbols::{
    function_symbols, go_function_symbols, mini_debug_info_symbols, named_code,
    unwind_entry_symbols,
};

pub(crate) type Reader = gimli::EndianReader<gimli::RunTimeEndian, Shared>;

/// A function symbol from the ELF symbol tables.
#[derive(Clone, Debug)]
pub(crate) struct Sym {
    pub addr: u64,
    pub size: u64,
    /// End of the symbol's section: a symbol without a size covers no
    /// address beyond it.
    pub section_end: u64,
    pub name: String,
    /// For a local symbol, the source file its `STT_FILE` symbol names (as
    /// binutils reports it when there is no line information).
    pub file: Option<String>,
    /// An assembler label in code, not a function symbol: it names only
    /// code no function holds ([`named_code`]).
    pub label: bool,
    /// Of local binding (`STB_LOCAL`): at an address a global or weak
    /// symbol also names, the global name is the one given (glibc's
    /// `setlocale`, not its internal `__GI_setlocale`).
    pub local: bool,
}

/// A parsed object.
pub(crate) struct LoadedObject {
    pub symbols: Vec<Sym>,
    /// Address ranges of the file's allocated sections, sorted and merged:
    /// DWARF describes no address outside them (entries of code the linker
    /// discarded are left at address 0, and must not name address 0).
    pub alloc_ranges: Vec<(u64, u64)>,
    pub dwarf: Option<addr2line::Context<Reader>>,
    /// The DWARF sections `dwarf` reads (with any supplementary file),
    /// for walks over every unit (the symbol index's builder).
    pub sections: Option<Arc<gimli::Dwarf<Reader>>>,
    pub source: DebugSource,
    /// Debug files that were found but refused (CRC mismatch).
    pub refused: Vec<String>,
    /// Bytes of the files mapped for this object.
    pub mapped_bytes: u64,
    /// The GNU build id of the file mapped.
    pub build_id: Option<Vec<u8>>,
    /// Names and file names handed out, shared by every frame that
    /// repeats them (a batch names the same functions over and over), with
    /// each name's demangled form. Keyed by where the string lies: every
    /// string looked up here lives in this object (the mapped file, the
    /// symbol table, addr2line's line tables) as long as the object does,
    /// so the address names it without hashing or comparing its bytes.
    pub names: RefCell<HashMap<NameKey, Name, FxBuild>>,
    /// The names asked for most recently, by a hash of where they lie: a
    /// batch in address order asks for the same few names (the function,
    /// the functions inlined into it, their files) address after address,
    /// and this small table answers those without a probe of the large
    /// one, whose entries are mostly out of cache.
    pub recent_names: RefCell<RecentNames>,
    /// Split DWARF files (`-gsplit-dwarf`) by dwo id, loaded on first
    /// need; `None` when not found.
    pub dwos: RefCell<HashMap<u64, Option<Arc<gimli::Dwarf<Reader>>>>>,
    /// The DWARF package `<object>.dwp`, read on the first split lookup.
    pub dwp: std::cell::OnceCell<Option<gimli::DwarfPackage<Reader>>>,
    /// Where the object was read from (split DWARF paths may be relative
    /// to it).
    pub path: PathBuf,
    /// Every file mapped for it (the object, its debug files, split
    /// DWARF as it is loaded).
    mapped: RefCell<Vec<Shared>>,
}

/// Entries of [`LoadedObject::recent_names`].
pub(crate) const RECENT_NAMES: usize = 256;

/// Where a name's bytes lie in the object: address and length.
pub(crate) type NameKey = (usize, usize);

/// [`LoadedObject::recent_names`]: a direct-mapped table of names.
pub(crate) type RecentNames = Box<[Option<(NameKey, Name)>; RECENT_NAMES]>;

/// A name as stored, and as shown once someone asked for it demangled.
#[derive(Clone, Debug)]
pub(crate) struct Name {
    pub raw: Arc<str>,
    pub demangled: Option<Arc<str>>,
}

/// A multiplicative hasher for the two-word keys above (`SipHash` was a
/// tenth of the time).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FxBuild;

impl std::hash::BuildHasher for FxBuild {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

/// See [`FxBuild`].
#[derive(Debug)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl LoadedObject {
    /// The split DWARF file a lookup asks for, loaded once: the path the
    /// skeleton unit names (relative to its compilation directory), else
    /// the same name next to the object. Its dwo id must match.
    pub(crate) fn dwo(
        &self,
        load: &addr2line::SplitDwarfLoad<Reader>,
    ) -> Option<Arc<gimli::Dwarf<Reader>>> {
        if let Some(d) = self.dwos.borrow().get(&load.dwo_id.0) {
            return d.clone();
        }
        let (found, mapped) = collecting(|| self.load_dwo(load));
        self.mapped.borrow_mut().extend(mapped);
        self.dwos.borrow_mut().insert(load.dwo_id.0, found.clone());
        found
    }

    fn load_dwo(
        &self,
        load: &addr2line::SplitDwarfLoad<Reader>,
    ) -> Option<Arc<gimli::Dwarf<Reader>>> {
        use std::os::unix::ffi::OsStrExt;
        // A DWARF package next to the object (`dwp -e`) holds them all.
        if let Some(package) = self.dwp.get_or_init(|| self.load_dwp()) {
            if let Ok(Some(dwarf)) = package.find_cu(load.dwo_id, &load.parent) {
                return Some(Arc::new(dwarf));
            }
        }
        let text = |r: &Option<Reader>| {
            r.as_ref()
                .map(|r| PathBuf::from(std::ffi::OsStr::from_bytes(r.bytes())))
        };
        let name = text(&load.path)?;
        let mut candidates = Vec::new();
        match text(&load.comp_dir) {
            Some(dir) => candidates.push(dir.join(&name)),
            None => candidates.push(name.clone()),
        }
        if let (Some(dir), Some(file)) = (self.path.parent(), name.file_name()) {
            candidates.push(dir.join(file));
        }
        candidates.into_iter().find_map(|candidate| {
            with_object(&candidate, |bytes, file| {
                let mut dwarf =
                    gimli::Dwarf::load(section_loader(bytes, file, endian_of(file), true)).ok()?;
                dwarf.make_dwo(&load.parent);
                // The unit inside must be the one the skeleton asked for.
                let mut units = dwarf.units();
                let header = units.next().ok()??;
                let unit = dwarf.unit(header).ok()?;
                (unit.dwo_id == Some(load.dwo_id)).then(|| Arc::new(dwarf))
            })
        })
    }

    fn load_dwp(&self) -> Option<gimli::DwarfPackage<Reader>> {
        let mut name = self.path.clone().into_os_string();
        name.push(".dwp");
        with_object(Path::new(&name), |bytes, file| {
            let endian = endian_of(file);
            let empty = Reader::new(Shared(Arc::new(Buffer::Owned(Vec::new()))), endian);
            gimli::DwarfPackage::load(section_loader(bytes, file, endian, true), empty).ok()
        })
    }

    /// The string whose bytes are `bytes` (lying in this object), made
    /// once; with `demangle`, also its demangled form (made once too).
    /// Returns (as shown, as stored).
    pub(crate) fn name(&self, bytes: &[u8], demangle: bool) -> (Arc<str>, Arc<str>) {
        let key = (bytes.as_ptr() as usize, bytes.len());
        let slot = (key.0 ^ (key.0 >> 7) ^ key.1) % RECENT_NAMES;
        let mut recent = self.recent_names.borrow_mut();
        if let Some((k, name)) = &recent[slot] {
            if *k == key && (!demangle || name.demangled.is_some()) {
                let shown = if demangle {
                    name.demangled.as_ref()
                } else {
                    None
                };
                return (
                    Arc::clone(shown.unwrap_or(&name.raw)),
                    Arc::clone(&name.raw),
                );
            }
        }
        let found = self.name_slow(key, bytes, demangle);
        recent[slot] = Some((key, found.clone()));
        let shown = if demangle {
            found.demangled.as_ref()
        } else {
            None
        };
        (Arc::clone(shown.unwrap_or(&found.raw)), found.raw)
    }

    /// [`Self::name`] through the table of every name handed out.
    fn name_slow(&self, key: NameKey, bytes: &[u8], demangle: bool) -> Name {
        let mut names = self.names.borrow_mut();
        let name = names.entry(key).or_insert_with(|| Name {
            raw: Arc::from(String::from_utf8_lossy(bytes)),
            demangled: None,
        });
        if demangle && name.demangled.is_none() {
            let raw = &name.raw;
            name.demangled =
                Some(crate::demangle::demangle(raw).map_or_else(|| Arc::clone(raw), Arc::from));
        }
        name.clone()
    }
}

impl std::fmt::Debug for LoadedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedObject")
            .field("symbols", &self.symbols.len())
            .field("dwarf", &self.dwarf.is_some())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The GNU build id of the ELF file at `path`, reading only its headers
/// and notes.
pub(crate) fn build_id_of(path: &Path) -> Option<Vec<u8>> {
    let file = ichnos_image::open_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    elf.build_id().ok().flatten().map(<[u8]>::to_vec)
}

impl LoadedObject {
    pub(crate) fn load(path: &Path, debug_dirs: &[PathBuf]) -> Result<Self, SymbolError> {
        let (loaded, mapped) = collecting(|| Self::load_mapping(path, debug_dirs));
        // A file cut short under its mapping reads as damaged: say what
        // happened rather than what the parser saw.
        if let Some(cut) = mapped.iter().find_map(Shared::truncated) {
            return Err(SymbolError::FileChanged {
                path: cut.to_path_buf(),
            });
        }
        let loaded = loaded?;
        *loaded.mapped.borrow_mut() = mapped;
        Ok(loaded)
    }

    /// The stamp of the object's own file as it was mapped.
    pub(crate) fn stamp(&self) -> Option<crate::mapped_file::FileStamp> {
        self.mapped
            .borrow()
            .iter()
            .filter_map(Shared::file)
            .find(|f| f.path() == self.path)
            .map(crate::mapped_file::MappedFile::stamp)
    }

    /// The first file mapped for this object that was cut short under
    /// its mapping: what was read from it is not the file's.
    pub(crate) fn truncated(&self) -> Option<PathBuf> {
        self.mapped
            .borrow()
            .iter()
            .find_map(|m| m.truncated().map(Path::to_path_buf))
    }

    fn load_mapping(path: &Path, debug_dirs: &[PathBuf]) -> Result<Self, SymbolError> {
        let bytes = map(path)?;
        let mut mapped_bytes = bytes.len() as u64;
        let file = object::File::parse(&*bytes).map_err(|e| SymbolError::BadObject {
            path: path.to_path_buf(),
            source: e,
        })?;
        let mut symbols = function_symbols(&file);
        // The PLT's stubs, which no symbol table holds.
        symbols.extend(plt::plt_symbols(&file));
        let alloc_ranges = alloc_ranges(&file);
        let own_build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let mut refused = Vec::new();
        let mut dwarf = None;
        let mut sections = None;
        let mut source = DebugSource::SymbolsOnly;
        // Debug information that cannot be read is reported and passed
        // over: the symbol tables still name addresses.
        if has_dwarf(&file) && file.kind() == object::ObjectKind::Relocatable {
            // A `.o`'s DWARF holds its references to strings, lines and
            // code as relocations, resolved only when it is linked: read
            // as it stands, every name is the first string (`tn.c`).
            refused.push(format!(
                "{}: a relocatable object (not linked): its debug information                  is not read, as its relocations are not applied; its symbol                  table names addresses (link it, or use addr2line)",
                path.display()
            ));
        } else if has_dwarf(&file) {
            match load_dwarf(path, &bytes, &file, debug_dirs, &mut refused) {
                Ok(((d, all), extra)) => {
                    mapped_bytes += extra;
                    (dwarf, sections, source) = (Some(d), Some(all), DebugSource::SameFile);
                }
                Err(e) => refused.push(ichnos_image::error_chain(&e)),
            }
        } else {
            let build_id = file.build_id().ok().flatten();
            let link = file.gnu_debuglink().ok().flatten();
            let search = find_debug_file(path, build_id, link, debug_dirs);
            refused = search.refused;
            if let Some((debug_path, found)) = search.found {
                match load_debug_file(&debug_path, debug_dirs, &mut refused) {
                    Ok(((d, all), debug_symbols, len)) => {
                        mapped_bytes += len;
                        symbols.extend(debug_symbols);
                        (dwarf, sections, source) = (Some(d), Some(all), found);
                    }
                    Err(e) => refused.push(ichnos_image::error_chain(&e)),
                }
            }
        }
        if dwarf.is_none() {
            let mini = mini_debug_info_symbols(&file);
            if !mini.is_empty() {
                symbols.extend(mini);
                source = DebugSource::MiniDebugInfo;
            }
        }
        if dwarf.is_none() {
            // A stripped Go program still names its functions (after
            // what the symbol tables left: a program the system linker
            // linked keeps its C functions in .dynsym).
            symbols.extend(go_function_symbols(&file));
        }
        let mut symbols = named_code(symbols);
        if dwarf.is_none() {
            // And the functions no symbol names, where .eh_frame has them.
            let unnamed = unwind_entry_symbols(&file, &symbols);
            if !unnamed.is_empty() {
                symbols.extend(unnamed);
                symbols = named_code(symbols);
            }
        }
        Ok(Self {
            symbols,
            alloc_ranges,
            dwarf,
            sections,
            source,
            refused,
            mapped_bytes,
            build_id: own_build_id,
            names: RefCell::default(),
            recent_names: RefCell::new(Box::new([const { None }; RECENT_NAMES])),
            dwos: RefCell::default(),
            dwp: std::cell::OnceCell::new(),
            path: path.to_path_buf(),
            mapped: RefCell::default(),
        })
    }

    /// Whether `addr` lies in an allocated section (any, when the file has
    /// no section headers).
    pub(crate) fn in_alloc_section(&self, addr: u64) -> bool {
        if self.alloc_ranges.is_empty() {
            return true;
        }
        let i = self
            .alloc_ranges
            .partition_point(|&(start, _)| start <= addr);
        i.checked_sub(1)
            .is_some_and(|i| addr < self.alloc_ranges[i].1)
    }

    /// The nearest function symbol at or below `addr` in the same section,
    /// past its size or not (for addresses the line table gives to it).
    pub(crate) fn symbol_before(&self, addr: u64) -> Option<&Sym> {
        let i = self.symbols.partition_point(|s| s.addr <= addr);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        (addr < s.section_end).then_some(s)
    }

    /// The function symbol covering `addr`, never one of another section
    /// or past its end.
    pub(crate) fn symbol(&self, addr: u64) -> Option<&Sym> {
        symbol_covering(&self.symbols, addr)
    }
}

/// The symbol of `symbols` (sorted, one per address) covering `addr`,
/// never one of another section or past its end.
pub(crate) fn symbol_covering(symbols: &[Sym], addr: u64) -> Option<&Sym> {
    let i = symbols.partition_point(|s| s.addr <= addr);
    let s = symbols.get(i.checked_sub(1)?)?;
    let end = if s.size > 0 {
        s.addr.saturating_add(s.size)
    } else {
        // No size: up to the next symbol, within the section.
        symbols
            .get(i)
            .map_or(s.section_end, |next| next.addr.min(s.section_end))
    };
    (addr < end).then_some(s)
}

/// The address ranges of `file`'s allocated sections (`SHF_ALLOC`), sorted
/// and merged.
fn alloc_ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| {
            matches!(s.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_ALLOC) != 0)
                && s.size() > 0
        })
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// A file's DWARF: the lookup context, and the sections it reads.
type Dwarf = (addr2line::Context<Reader>, Arc<gimli::Dwarf<Reader>>);

/// A separate debug file: its DWARF, its function symbols (the stripped
/// file may have none) and its size.
fn load_debug_file(
    debug_path: &Path,
    debug_dirs: &[PathBuf],
    refused: &mut Vec<String>,
) -> Result<(Dwarf, Vec<Sym>, u64), SymbolError> {
    let debug_bytes = map(debug_path)?;
    let debug_file = object::File::parse(&*debug_bytes).map_err(|e| SymbolError::BadObject {
        path: debug_path.to_path_buf(),
        source: e,
    })?;
    let (dwarf, extra) = load_dwarf(debug_path, &debug_bytes, &debug_file, debug_dirs, refused)?;
    Ok((
        dwarf,
        function_symbols(&debug_file),
        debug_bytes.len() as u64 + extra,
    ))
}

/// Bytes of DWARF (as stored, compressed or not) that symbolizing the
/// object at `path` would read: its own, else its separate debug file's
/// as [`LoadedObject::load`] finds it; 0 when there is none. Only the
/// section headers are read.
pub(crate) fn dwarf_size(path: &Path, debug_dirs: &[PathBuf]) -> Result<u64, SymbolError> {
    let bytes = map(path)?;
    let file = object::File::parse(&*bytes).map_err(|e| SymbolError::BadObject {
        path: path.to_path_buf(),
        source: e,
    })?;
    // The sections a load reads: not locations (passed over) nor
    // .debug_frame (unwinding's, not naming's).
    let read = |name: &str| {
        let base = name
            .strip_prefix(".debug_")
            .or_else(|| name.strip_prefix(".zdebug_"));
        base.is_some_and(|b| !matches!(b, "loc" | "loclists" | "frame"))
    };
    let stored = |file: &object::File<'_>| -> u64 {
        file.sections()
            .filter(|s| s.name().is_ok_and(read))
            .map(|s| s.file_range().map_or(0, |(_, size)| size))
            .sum()
    };
    if has_dwarf(&file) {
        return Ok(stored(&file));
    }
    let build_id = file.build_id().ok().flatten();
    let link = file.gnu_debuglink().ok().flatten();
    let Some((debug_path, _)) = find_debug_file(path, build_id, link, debug_dirs).found else {
        return Ok(0);
    };
    Ok(with_object(&debug_path, |_, debug| Some(stored(debug))).unwrap_or(0))
}

fn has_dwarf(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0)
}

/// DWARF sections of `file` (mapped as `bytes`) for gimli, each a slice
/// of the mapping or, when compressed, its own buffer. A section that
/// cannot be read (bad offsets, unknown compression) reads as empty: the
/// rest of the DWARF still answers.
fn section_loader<'a>(
    bytes: &'a Shared,
    file: &'a object::File<'_>,
    endian: gimli::RunTimeEndian,
    dwo: bool,
) -> impl FnMut(gimli::SectionId) -> Result<Reader, gimli::Error> + 'a {
    move |id: gimli::SectionId| {
        let empty = || Reader::new(Shared(Arc::new(Buffer::Owned(Vec::new()))), endian);
        // Locations say where variables live: naming code never reads
        // them, and they are a large part of a distribution's DWARF. (A
        // package's index checks its units' contributions to them: split
        // DWARF keeps them.)
        if !dwo
            && matches!(
                id,
                gimli::SectionId::DebugLoc | gimli::SectionId::DebugLocLists
            )
        {
            return Ok(empty());
        }
        // A split DWARF file names its sections `.debug_info.dwo` and so on.
        let name = if dwo { id.dwo_name() } else { Some(id.name()) };
        let Some(s) = name.and_then(|name| file.section_by_name(name)) else {
            return Ok(empty());
        };
        Ok(match s.uncompressed_data() {
            Ok(Cow::Owned(v)) => Reader::new(Shared(Arc::new(Buffer::Owned(v))), endian),
            Ok(Cow::Borrowed(b)) => {
                // A slice of the mapping: find where it starts.
                let whole = bytes.as_ptr_range();
                let inside = whole.start <= b.as_ptr() && b.as_ptr_range().end <= whole.end;
                if inside {
                    let start = b.as_ptr() as usize - whole.start as usize;
                    Reader::new(bytes.clone(), endian).range(start..start + b.len())
                } else {
                    empty()
                }
            }
            Err(_) => empty(),
        })
    }
}

/// Maps the object file at `path`, parses it once and hands both to `f`.
fn with_object<T>(
    path: &Path,
    f: impl FnOnce(&Shared, &object::File<'_>) -> Option<T>,
) -> Option<T> {
    let bytes = map(path).ok()?;
    let file = object::File::parse(&*bytes).ok()?;
    f(&bytes, &file)
}

fn endian_of(file: &object::File<'_>) -> gimli::RunTimeEndian {
    if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// The DWARF of `file`, with the supplementary file its
/// `.gnu_debugaltlink` names (dwz's shared DWARF) attached when it is
/// found. Returns the context, the sections it reads and the bytes of any
/// file mapped for it; a supplementary file named but not found is noted
/// in `refused`.
fn load_dwarf(
    path: &Path,
    bytes: &Shared,
    file: &object::File<'_>,
    debug_dirs: &[PathBuf],
    refused: &mut Vec<String>,
) -> Result<(Dwarf, u64), SymbolError> {
    let bad = |e: gimli::Error| SymbolError::BadDwarf {
        path: path.to_path_buf(),
        source: e,
    };
    let mut dwarf =
        gimli::Dwarf::load(section_loader(bytes, file, endian_of(file), false)).map_err(bad)?;
    let mut extra = 0;
    if let Ok(Some((name, build_id))) = file.gnu_debugaltlink() {
        match find_alt_file(path, name, build_id, debug_dirs) {
            Some((sup, len)) => {
                dwarf.set_sup(sup);
                extra = len;
            }
            None => refused.push(format!(
                "{}: supplementary DWARF file {} (build id {}) not found",
                path.display(),
                String::from_utf8_lossy(name),
                crate::debug_file::hex(build_id)
            )),
        }
    }
    let dwarf = Arc::new(dwarf);
    let context = addr2line::Context::from_arc_dwarf(Arc::clone(&dwarf)).map_err(bad)?;
    Ok(((context, dwarf), extra))
}

/// The DWARF of the file a `.gnu_debugaltlink` names: its path (relative
/// to the file that names it, as dwz writes it) or, failing that, the
/// build-id directories; only a file whose build id matches is taken.
/// Returns it with the bytes mapped for it.
fn find_alt_file(
    path: &Path,
    name: &[u8],
    build_id: &[u8],
    debug_dirs: &[PathBuf],
) -> Option<(gimli::Dwarf<Reader>, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let named = Path::new(std::ffi::OsStr::from_bytes(name));
    let mut candidates = vec![path.parent().unwrap_or(Path::new("/")).join(named)];
    if build_id.len() >= 2 {
        candidates.extend(debug_dirs.iter().map(|dir| build_id_path(dir, build_id)));
    }
    candidates.into_iter().find_map(|candidate| {
        with_object(&candidate, |bytes, file| {
            let matches = build_id.is_empty() || file.build_id().ok().flatten() == Some(build_id);
            if !matches {
                return None;
            }
            let sup =
                gimli::Dwarf::load(section_loader(bytes, file, endian_of(file), false)).ok()?;
            Some((sup, bytes.len() as u64))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, addr: u64, size: u64, label: bool) -> Sym {
        Sym {
            addr,
            size,
            section_end: u64::MAX,
            name: name.to_owned(),
            file: None,
            label,
            local: false,
        }
    }

    fn names(symbols: &[Sym]) -> Vec<(&str, u64)> {
        symbols.iter().map(|s| (s.name.as_str(), s.addr)).collect()
    }

    #[test]
    fn a_label_names_only_code_no_function_of_any_table_holds() {
        let symbols = vec![
            // The object's own table: a label that lies inside `outer`,
            // whose symbol comes later, from another table (MiniDebugInfo
            // keeps labels of functions that are only in `.dynsym`).
            sym("inside_outer", 0x1010, 0, true),
            // A label after a function without a size: its own code.
            sym("no_size", 0x2000, 0, false),
            sym("after_no_size", 0x2008, 0, true),
            // A label at a function's address: the function's name.
            sym("at_f", 0x3000, 0, true),
            // Another table's symbols, read after.
            sym("outer", 0x1000, 0x100, false),
            // A small function nested in `outer`; past it, still `outer`.
            sym("nested", 0x1020, 0x10, false),
            sym("past_nested", 0x1040, 0, true),
            sym("f", 0x3000, 0x20, false),
            // At `outer`'s end: no function holds it.
            sym("at_outer_end", 0x1100, 0, true),
        ];
        assert_eq!(
            names(&named_code(symbols)),
            [
                ("outer", 0x1000),
                ("nested", 0x1020),
                ("at_outer_end", 0x1100),
                ("no_size", 0x2000),
                ("after_no_size", 0x2008),
                ("f", 0x3000),
            ]
        );
    }

    /// glibc's debug file names its functions' internal aliases
    /// (`__GI_setlocale`, local) in `.symtab`, read before `.dynsym`'s
    /// `setlocale`: the global name is given, as `nm -D` and perf give it.
    #[test]
    fn at_one_address_a_global_function_wins_over_a_local_alias() {
        let local = |name, addr| Sym {
            local: true,
            ..sym(name, addr, 0x40, false)
        };
        let symbols = vec![
            local("__GI_setlocale", 0x1000),
            sym("setlocale", 0x1000, 0x40, false),
            local("only_local", 0x2000),
        ];
        assert_eq!(
            names(&named_code(symbols)),
            [("setlocale", 0x1000), ("only_local", 0x2000)]
        );
    }

    #[test]
    fn at_one_address_a_sized_function_wins_over_one_without_a_size() {
        let symbols = vec![
            sym("alias_without_size", 0x1000, 0, false),
            sym("sized", 0x1000, 0x40, false),
            sym("first_read", 0x2000, 0x10, false),
            sym("second_read", 0x2000, 0x10, false),
        ];
        assert_eq!(
            names(&named_code(symbols)),
            [("sized", 0x1000), ("first_read", 0x2000)]
        );
    }

    #[test]
    fn an_object_cut_short_under_its_mapping_reads_zeros_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("inlines");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
        let built = std::process::Command::new("gcc")
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(src)
            .status()
            .unwrap();
        assert!(built.success());
        let object = LoadedObject::load(&exe, &[]).unwrap();
        assert!(object.truncated().is_none());
        let addrs: Vec<u64> = object.symbols.iter().map(|s| s.addr).collect();
        assert!(!addrs.is_empty());
        // Cut to its first page: its DWARF, read on the first lookup, now
        // lies past the end of the file under the mapping.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&exe)
            .unwrap()
            .set_len(4096)
            .unwrap();
        for &addr in &addrs {
            let _ = crate::frame::frames(&object, addr, true, true);
        }
        assert_eq!(object.truncated(), Some(exe));
    }
}
