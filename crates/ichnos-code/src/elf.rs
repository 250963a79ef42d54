//! Small ELF facts the registry needs: where the first `PT_LOAD` starts,
//! and the build id and debug link of a file.

use object::{Object, ObjectSegment};

/// Alignment of the ELF range start: registrations count an object's
/// addresses from the page of its first `PT_LOAD`.
pub const ELF_START_ALIGN: u64 = 0x1000;

/// The lowest `PT_LOAD` virtual address of an ELF file.
#[must_use]
pub fn first_load_vaddr(elf: &[u8]) -> Option<u64> {
    let file = object::File::parse(elf).ok()?;
    file.segments().map(|s| s.address()).min()
}

/// Whether an ELF file has a section of this name.
#[must_use]
pub fn has_section(elf: &[u8], name: &str) -> bool {
    use object::ObjectSection as _;
    object::File::parse(elf)
        .ok()
        .is_some_and(|f| f.section_by_name(name).is_some_and(|s| s.size() > 0))
}

/// The build id and `.gnu_debuglink` of the ELF file at `path`, read the
/// first time the file, as it is on disk, is asked of.
#[must_use]
pub fn identity_of_file(path: &std::path::Path) -> (Option<Vec<u8>>, Option<DebugLink>) {
    let Ok(f) = open_regular(path) else {
        return (None, None);
    };
    match crate::file_facts::facts_of(&f) {
        Some(facts) => facts
            .identity
            .get_or_init(|| identity_in(&object::ReadCache::new(&f)))
            .clone(),
        None => identity_in(&object::ReadCache::new(&f)),
    }
}

/// Where the ELF file `bytes` defines the data or function symbol `name`
/// (`.symtab`, then `.dynsym`): its address less the file's link origin
/// (the page of its first segment), or `None`. As a recorder finds the
/// symbols it looks for in other processes' files, which are not trusted.
#[must_use]
pub fn symbol_offset(bytes: &[u8], name: &[u8]) -> Option<u64> {
    let file = object::File::parse(bytes).ok()?;
    crate::process_symbols::defined_in(&file, name)
}

/// Opens `path` for reading if it is a regular file. The open does not
/// block (a FIFO planted where a file was expected would wait for a writer
/// for ever), does not follow a symbolic link in the last component (the
/// kernel names mapped files by their real paths; a link there was put by
/// someone), and anything else is refused: paths come from other
/// processes and from recordings.
pub fn open_regular(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    if file.metadata()?.is_file() {
        Ok(file)
    } else {
        Err(std::io::Error::other("not a regular file"))
    }
}

/// A `.gnu_debuglink`: the debug file's name and its CRC32.
pub type DebugLink = (Vec<u8>, u32);

/// The build id and `.gnu_debuglink` of an ELF file.
#[must_use]
pub fn identity(elf: &[u8]) -> (Option<Vec<u8>>, Option<DebugLink>) {
    identity_in(elf)
}

fn identity_in<'d, R: object::ReadRef<'d>>(data: R) -> (Option<Vec<u8>>, Option<DebugLink>) {
    let Ok(file) = object::File::parse(data) else {
        return (None, None);
    };
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    let link = file
        .gnu_debuglink()
        .ok()
        .flatten()
        .map(|(name, crc)| (name.to_vec(), crc));
    (build_id, link)
}

/// Why an ELF file's rows could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FileRowsError {
    /// Not a readable ELF file.
    #[error("not a readable ELF file")]
    BadElf(#[source] object::Error),
    /// An unwind section whose bytes cannot be read.
    #[error("its {section} section cannot be read")]
    BadSection {
        /// `.sframe`, `.eh_frame` or `.debug_frame`.
        section: &'static str,
        /// What the ELF reader said.
        #[source]
        source: object::Error,
    },
    /// An unwind section larger than is read.
    #[error("its {section} section of {size} bytes is larger than the {max} read")]
    SectionTooLarge {
        /// `.sframe`, `.eh_frame` or `.debug_frame`.
        section: &'static str,
        /// Its size.
        size: u64,
        /// The most read.
        max: u64,
    },
    /// The file has no section of the kind asked for.
    #[error("no {0} section")]
    Missing(&'static str),
    /// The SFrame section is malformed.
    #[error(transparent)]
    Sframe(#[from] crate::sframe::SframeError),
    /// The `.eh_frame` could not be converted.
    #[error(transparent)]
    EhFrame(#[from] crate::eh_frame::EhFrameError),
}

/// Which of a file's unwind sections [`file_rows`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowChoice {
    /// `.sframe` only.
    Sframe,
    /// `.eh_frame` only.
    EhFrame,
    /// `.sframe` rows, with `.eh_frame` rows where SFrame has none
    /// (start-up code, hand-written assembly); either alone if the other is
    /// missing.
    SframeThenEhFrame,
}

/// The unwind rows of an ELF file, counted from the file's *ELF origin*: the page of
/// its first `PT_LOAD`. A code object for the file loaded with its first
/// `PT_LOAD` page at `elf_start` uses the table with `bias = elf_start`.
pub fn file_rows(elf: &[u8], choice: RowChoice) -> Result<crate::RowTable, FileRowsError> {
    let file = object::File::parse(elf).map_err(FileRowsError::BadElf)?;
    rows_of_object(&file, choice)
}

/// Whether the file has a section `name` with bytes in it.
fn has_bytes_in<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>, name: &str) -> bool {
    use object::{Object, ObjectSection};
    file.section_by_name(name).is_some_and(|s| s.size() > 0)
}

/// The rows of a code object for an ELF file, counted from the file's ELF
/// origin as [`file_rows`]: `.eh_frame` as [`LazyRows`](crate::lazy::LazyRows),
/// which convert each FDE when a lookup first needs it, behind the file's
/// SFrame rows (converted now: SFrame is quick to decode) where the file
/// has them and `choice` allows; SFrame alone as a fixed table. A file
/// with `.debug_frame` (a Go program; C built without asynchronous unwind
/// tables, whose `.eh_frame` covers the C library's start-up code alone)
/// has its CFI converted at once, as [`file_rows`] does, into a fixed
/// table.
pub fn object_rows<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    choice: RowChoice,
) -> Result<crate::Rows, FileRowsError> {
    use object::{Object, ObjectSection};
    let has_sframe = has_bytes_in(file, ".sframe");
    let has_eh_frame = has_bytes_in(file, ".eh_frame");
    // (A Go program stripped of .debug_frame gets rows from its function
    // table, converted at once too.)
    let go = crate::go_pclntab::section(file).is_some();
    if choice != RowChoice::Sframe && (has_bytes_in(file, ".debug_frame") || go) {
        return rows_of_object(file, choice).map(|t| crate::Rows::Fixed(std::sync::Arc::new(t)));
    }
    if choice == RowChoice::Sframe || (has_sframe && !has_eh_frame) {
        return rows_of_object(file, RowChoice::Sframe)
            .map(|t| crate::Rows::Fixed(std::sync::Arc::new(t)));
    }
    // An SFrame section that cannot be read leaves .eh_frame to answer
    // alone, and .eh_frame that cannot be read leaves SFrame, as the
    // whole conversion does.
    // Unmarked: the entry's mark goes on last, capped by the FDEs too.
    let primary = if choice == RowChoice::SframeThenEhFrame && has_sframe {
        unmarked_rows_of_object(file, RowChoice::Sframe).ok()
    } else {
        None
    };
    let lazy = || -> Result<crate::lazy::LazyRows, FileRowsError> {
        if file.architecture() != object::Architecture::X86_64 {
            return Err(crate::eh_frame::EhFrameError::UnsupportedArch(format!(
                "{:?}",
                file.architecture()
            ))
            .into());
        }
        let section = file
            .section_by_name(".eh_frame")
            .ok_or(FileRowsError::Missing(".eh_frame"))?;
        if section.size() > crate::eh_frame::MAX_SECTION {
            return Err(FileRowsError::SectionTooLarge {
                section: ".eh_frame",
                size: section.size(),
                max: crate::eh_frame::MAX_SECTION,
            });
        }
        let data = section.data().map_err(|source| FileRowsError::BadSection {
            section: ".eh_frame",
            source,
        })?;
        let hdr = file
            .section_by_name(".eh_frame_hdr")
            .filter(|s| s.size() <= crate::eh_frame::MAX_SECTION)
            .and_then(|s| Some((s.data().ok()?, s.address())));
        let origin = origin_of(file);
        let address_of = |name| file.section_by_name(name).map(|s| s.address());
        Ok(crate::lazy::LazyRows::new(
            data.to_vec(),
            section.address(),
            hdr,
            address_of(".text"),
            address_of(".got"),
            origin,
        ))
    };
    let entry = entry_offset(file, origin_of(file));
    let with_entry = |lazy: crate::lazy::LazyRows| match entry {
        Some(entry) => lazy.with_outermost(entry, entry.saturating_add(MAX_ENTRY_CODE)),
        None => lazy,
    };
    let rows = match (lazy(), primary) {
        (Ok(lazy), Some(table)) => {
            crate::Rows::Lazy(std::sync::Arc::new(with_entry(lazy.with_primary(table))))
        }
        (Ok(lazy), None) => crate::Rows::Lazy(std::sync::Arc::new(with_entry(lazy))),
        (Err(_), Some(table)) => {
            crate::Rows::Fixed(std::sync::Arc::new(with_entry_marked(table, entry)))
        }
        (Err(e), None) => return Err(e),
    };
    Ok(rows)
}

/// As [`file_rows`], for an ELF file already parsed: over a `ReadCache`,
/// only the headers and the unwind sections are read from the file.
pub fn rows_of_object<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    choice: RowChoice,
) -> Result<crate::RowTable, FileRowsError> {
    let table = unmarked_rows_of_object(file, choice)?;
    Ok(with_entry_marked(
        table,
        entry_offset(file, origin_of(file)),
    ))
}

/// `table` with the code at a program's entry point (an offset from the
/// origin, see [`entry_offset`]) marked outermost up to the next row, at
/// most [`MAX_ENTRY_CODE`] bytes, where no row covers the entry.
fn with_entry_marked(table: crate::RowTable, entry: Option<u64>) -> crate::RowTable {
    let Some(entry) = entry else {
        return table;
    };
    let most = entry.saturating_add(MAX_ENTRY_CODE);
    let end = table
        .next_start_after(entry)
        .map_or(most, |next| next.min(most));
    table.with_outermost(entry, end)
}

/// [`rows_of_object`] without the entry point's mark.
fn unmarked_rows_of_object<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    choice: RowChoice,
) -> Result<crate::RowTable, FileRowsError> {
    use object::ObjectSection;
    let origin = origin_of(file);
    let sframe = || -> Result<crate::RowTable, FileRowsError> {
        let section = file
            .section_by_name(".sframe")
            .ok_or(FileRowsError::Missing(".sframe"))?;
        if section.size() > crate::registry::MAX_SFRAME_LEN {
            return Err(FileRowsError::SectionTooLarge {
                section: ".sframe",
                size: section.size(),
                max: crate::registry::MAX_SFRAME_LEN,
            });
        }
        let data = section.data().map_err(|source| FileRowsError::BadSection {
            section: ".sframe",
            source,
        })?;
        Ok(
            crate::sframe::SframeSection::parse(data, section.address())?
                .to_rows_from(origin)
                .table,
        )
    };
    let eh_frame = || cfi_rows(file, origin);
    let table = match choice {
        RowChoice::Sframe => sframe()?,
        RowChoice::EhFrame => eh_frame()?,
        RowChoice::SframeThenEhFrame => match (sframe(), eh_frame()) {
            (Ok(s), Ok(e)) => s.with_gaps_filled_from(&e),
            (Ok(s), Err(_)) => s,
            (Err(_), Ok(e)) => e,
            (Err(e), Err(_)) => return Err(e),
        },
    };
    // Counted from the origin, the table serves every load address.
    Ok(table.rebased(0))
}

/// The rows of the file's `.eh_frame`, counted from `origin`, with those
/// of Go's functions where `.eh_frame` has none: from `.debug_frame`
/// (which describes only them in a Go program; in C built without
/// asynchronous unwind tables, the program's own functions), or in a Go
/// program stripped of it from the pcsp tables of Go's function table;
/// the Go runtime's stack tops marked outermost. Either alone where the
/// file has only one.
fn cfi_rows<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    origin: u64,
) -> Result<crate::RowTable, FileRowsError> {
    let eh_frame = || -> Result<crate::RowTable, FileRowsError> {
        Ok(crate::eh_frame::rows_from_object(file, Some(origin))?.table)
    };
    let other = if has_bytes_in(file, ".debug_frame") {
        crate::debug_frame::rows_from_object(file, Some(origin)).map(|c| c.table)
    } else if crate::go_pclntab::section(file).is_some() {
        crate::go_pclntab::rows(file, origin).ok_or(FileRowsError::Missing(".gopclntab"))
    } else {
        return eh_frame();
    };
    let other = other.map(|table| {
        crate::debug_frame::with_top_frames(&table, &crate::debug_frame::go_top_frames(file))
    });
    if !has_bytes_in(file, ".eh_frame") {
        return other;
    }
    match (eh_frame(), other) {
        (Ok(eh), Ok(other)) => Ok(eh.with_gaps_filled_from(&other)),
        (Ok(table), Err(_)) | (Err(_), Ok(table)) => Ok(table),
        (Err(e), Err(_)) => Err(e),
    }
}

/// The file's ELF origin: the page of its first `PT_LOAD`.
fn origin_of<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> u64 {
    use object::ObjectSegment;
    file.segments().map(|s| s.address()).min().unwrap_or(0) & !(ELF_START_ALIGN - 1)
}

/// Most bytes of code from a program's entry point marked as its
/// outermost frame, where no unwind row begins sooner.
const MAX_ENTRY_CODE: u64 = 4096;

/// The entry point, as an offset from `origin`, of an object the kernel
/// starts by jumping to it: one that names no interpreter (no
/// `PT_INTERP`) and needs no other object (no `DT_NEEDED` in its
/// `PT_DYNAMIC`) — a static executable or
/// the dynamic loader itself. Nothing calls the code there, so a frame in
/// it is a thread's first. glibc's loader has no unwind row for its
/// `_start`, which calls `_dl_start`: without this mark, every sample
/// taken while a program is being loaded would end there incomplete.
/// (Shared libraries often have an entry point too, the start of their
/// `.text`, but they need libc; a program with an interpreter is entered
/// through it, and its own `_start` says it is outermost in its CFI.)
fn entry_offset<'d, R: object::ReadRef<'d>>(
    file: &object::File<'d, R>,
    origin: u64,
) -> Option<u64> {
    use object::read::elf::ProgramHeader;
    use object::Object;
    // By the program headers, which the kernel and the loader go by (a
    // stripped file may have no section headers).
    let object::File::Elf64(elf) = file else {
        return None;
    };
    let entry = file.entry();
    if entry == 0 || !file.is_little_endian() {
        return None;
    }
    let endian = elf.endian();
    for header in elf.elf_program_headers() {
        match header.p_type(endian) {
            object::elf::PT_INTERP => return None,
            object::elf::PT_DYNAMIC => {
                let data = header.data(endian, elf.data()).ok()?;
                // Elf64_Dyn: a tag and a value, eight bytes each; DT_NULL
                // ends, and a loader's table is a few dozen entries.
                let tags = data
                    .chunks_exact(16)
                    .take(MAX_DYNAMIC_ENTRIES)
                    .map(|d| u64::from_le_bytes(d[..8].try_into().unwrap_or_default()));
                for tag in tags {
                    match tag {
                        DT_NULL => break,
                        DT_NEEDED => return None,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    entry.checked_sub(origin)
}

/// Dynamic-section entries read looking for `DT_NEEDED`.
const MAX_DYNAMIC_ENTRIES: usize = 4096;

const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
