//! Code maps of processes from their file mappings, and stacks of live
//! threads.
//!
//! Most processes register nothing. Their code is found in
//! `/proc/PID/maps` (or a recorder's mmap records): each executable file
//! mapping becomes a code object ([`code_object_for_mapping`]) whose rows
//! come from the file (SFrame, then `.eh_frame`), converted once per build
//! id (or, without one, per file as it is on disk) and shared, and placed
//! by the file's program headers. A thread's stack is taken by stopping it
//! for a moment with ptrace, reading its registers and its stack, and
//! letting it go: what `ichnos stack` prints and what a recorder does per sample.

use std::path::Path;
use std::sync::Arc;

use ichnos_image::MapsEntry;

use crate::code_map::{CodeMap, CodeObject, RowSource, Rows};
use crate::elf::{file_rows, object_rows, FileRowsError, RowChoice};
use crate::file_facts::{Layout, LoadSegment};
use crate::memory::ProcessMemory;
use crate::unwind::{unwind, Regs, Unwind, UnwindOptions};

/// A mapping that got no code object, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedCode {
    /// The mapped file.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// The code map of a process and what was left out of it.
#[derive(Debug, Default)]
pub struct ProcessCode {
    /// Code objects for the executable file mappings.
    pub map: CodeMap,
    /// Executable mappings without rows (they unwind by frame pointers).
    pub skipped: Vec<SkippedCode>,
}

/// Builds a code map from a process's mappings: one code object per
/// executable file mapping, with the file's rows as `choice` says.
#[must_use]
pub fn code_map_from_maps(entries: &[MapsEntry], choice: RowChoice) -> ProcessCode {
    let mut out = ProcessCode::default();
    for m in entries
        .iter()
        .filter(|m| m.perms.contains('x') && m.name.starts_with('/'))
    {
        let mapping = FileMapping {
            start: m.range.start,
            end: m.range.end,
            pgoff: m.offset,
        };
        let made = code_object_for_mapping(Path::new(&m.name), &m.name, mapping, choice)
            .map_err(|e| ichnos_image::error_chain(&e))
            .and_then(|object| out.map.insert(Arc::new(object)).map_err(|e| e.to_string()));
        if let Err(reason) = made {
            out.skipped.push(SkippedCode {
                path: m.name.clone(),
                reason,
            });
        }
    }
    out
}

/// The executable mappings of files, each with the file's ELF origin:
/// where its first page is mapped (`None` if it is not).
pub fn executable_file_mappings(
    entries: &[MapsEntry],
) -> impl Iterator<Item = (&MapsEntry, Option<u64>)> {
    entries
        .iter()
        .filter(|m| m.perms.contains('x') && m.name.starts_with('/'))
        .map(|m| {
            let origin = entries
                .iter()
                .find(|o| o.name == m.name && o.offset == 0)
                .map(|o| o.range.start);
            (m, origin)
        })
}

/// One mapping of a file into a process: `[start, end)` shows the file
/// from byte `pgoff` on (an mmap record, a line of `/proc/PID/maps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMapping {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
}

/// Why a mapping got no code object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MappingError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not an ELF file this crate reads.
    #[error("{path}: not a readable ELF file: {source}")]
    BadElf {
        /// The file.
        path: std::path::PathBuf,
        /// What object said.
        source: object::Error,
    },
    /// No `PT_LOAD` segment holds the mapped offset.
    #[error("{path}: no PT_LOAD segment holds file offset {pgoff:#x}")]
    NoSegment {
        /// The file.
        path: std::path::PathBuf,
        /// The mapping's offset.
        pgoff: u64,
    },
    /// The file's unwind information could not be read.
    #[error("{path}: {source}")]
    Rows {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: FileRowsError,
    },
}

/// The ELF origin (the run-time address of the page of the first
/// `PT_LOAD`) of a file whose byte `mapping.pgoff` is mapped at
/// `mapping.start`, from its loadable segments.
fn origin_of(segments: &[LoadSegment], mapping: FileMapping) -> Option<u64> {
    const PAGE: u64 = 0x1000;
    let first = segments.iter().map(|s| s.address).min()?;
    // The kernel maps a segment from the page holding its first byte: the
    // mapping's offset is the segment's offset rounded down (linkers need
    // not align segments to pages in the file). Prefer the segment that
    // starts on the mapped page; else one the offset falls in.
    let page_of = |s: &LoadSegment| s.offset & !(PAGE - 1);
    let segment = segments
        .iter()
        .find(|s| page_of(s) == mapping.pgoff)
        .or_else(|| {
            segments.iter().find(|s| {
                page_of(s) <= mapping.pgoff
                    && mapping.pgoff < s.offset.saturating_add(s.size.max(1))
            })
        })?;
    let vaddr = (segment.address & !(PAGE - 1)).wrapping_add(mapping.pgoff - page_of(segment));
    let bias = mapping.start.wrapping_sub(vaddr);
    Some(bias.wrapping_add(first & !(crate::elf::ELF_START_ALIGN - 1)))
}

/// Where the parsed ELF `elf`'s segments lie, and the key its rows are
/// shared by (its build id, else a Go program's).
fn layout_of<'d, R: object::ReadRef<'d>>(elf: &object::File<'d, R>) -> Layout {
    use object::{Object, ObjectSegment};
    let segments = elf
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            LoadSegment {
                address: s.address(),
                offset,
                size,
            }
        })
        .collect();
    let row_key = elf
        .build_id()
        .ok()
        .flatten()
        .map(<[u8]>::to_vec)
        .or_else(|| go_build_id(elf));
    Layout { segments, row_key }
}

/// The code object of an executable mapping of the ELF file at `path`
/// (the file as this process can open it; `name` is what to call it):
/// placed by the file's program headers, so the mapping need not be the
/// file's first, with rows made once per build id (else per file) for
/// every process and read from the file only when not already made; a
/// file met before is placed by what is known of it, without reading it.
pub fn code_object_for_mapping(
    path: &Path,
    name: &str,
    mapping: FileMapping,
    choice: RowChoice,
) -> Result<CodeObject, MappingError> {
    let io = |source| MappingError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = crate::elf::open_regular(path).map_err(io)?;
    code_object_for_file(file, path, name, mapping, choice)
}

/// [`code_object_for_mapping`] of a file already open (`path` names it in
/// errors).
pub fn code_object_for_file(
    file: std::fs::File,
    path: &Path,
    name: &str,
    mapping: FileMapping,
    choice: RowChoice,
) -> Result<CodeObject, MappingError> {
    // A file met before (in another process) whose rows live: placed by
    // what is known of it, without reading it again.
    let facts = crate::file_facts::facts_of(&file);
    let known = facts.as_ref().and_then(|f| f.layout.get());
    if let Some(layout) = known {
        let rows = crate::registry::row_cache().get(layout.row_key.as_deref(), choice);
        if let (Some(origin), Some(rows)) = (origin_of(&layout.segments, mapping), rows) {
            return Ok(mapped_object(mapping, origin, rows, name));
        }
    }
    let data = object::ReadCache::new(file);
    let elf = object::File::parse(&data).map_err(|source| MappingError::BadElf {
        path: path.to_path_buf(),
        source,
    })?;
    let mut layout = layout_of(&elf);
    if let Some(facts) = &facts {
        // Without a build id, the rows are shared by the file itself.
        layout.row_key = layout.row_key.or_else(|| Some(facts.row_key()));
        let _ = facts.layout.set(layout.clone());
    }
    // Only the headers and the unwind sections are read: an executable
    // of tens of megabytes has a few hundred kilobytes of them.
    placed(&elf, &layout, path, name, mapping, choice, || {
        object_rows(&elf, choice)
    })
}

/// The code object of ELF code whose bytes are at hand (the vDSO, read
/// from a process's memory), mapped as `mapping` says.
pub fn code_object_from_bytes(
    bytes: &[u8],
    name: &str,
    mapping: FileMapping,
    choice: RowChoice,
) -> Result<CodeObject, MappingError> {
    let path = Path::new(name);
    let elf = object::File::parse(bytes).map_err(|source| MappingError::BadElf {
        path: path.to_path_buf(),
        source,
    })?;
    placed(&elf, &layout_of(&elf), path, name, mapping, choice, || {
        file_rows(bytes, choice).map(|t| Rows::Fixed(Arc::new(t)))
    })
}

/// The code object of the parsed ELF `elf` (laid out as `layout` says)
/// mapped as `mapping` says, its rows from the cache by `layout`'s row
/// key, else made by `rows`.
fn placed<'d, R: object::ReadRef<'d>>(
    elf: &object::File<'d, R>,
    layout: &Layout,
    path: &Path,
    name: &str,
    mapping: FileMapping,
    choice: RowChoice,
    rows: impl FnOnce() -> Result<Rows, FileRowsError>,
) -> Result<CodeObject, MappingError> {
    use object::{Object, ObjectSection};
    let origin = origin_of(&layout.segments, mapping).ok_or(MappingError::NoSegment {
        path: path.to_path_buf(),
        pgoff: mapping.pgoff,
    })?;
    let has_sframe = elf.section_by_name(".sframe").is_some_and(|s| s.size() > 0);
    // (The source is the one the rows were made from, where another file
    // of the same build id made them.)
    let rows =
        crate::registry::row_cache().get_or_make(layout.row_key.as_deref(), choice, || {
            let rows = rows().map_err(|source| MappingError::Rows {
                path: path.to_path_buf(),
                source,
            })?;
            Ok((rows, row_source(elf, choice, has_sframe)))
        })?;
    Ok(mapped_object(mapping, origin, rows, name))
}

/// The code object of `mapping`, whose file's ELF origin is at `origin`,
/// unwound by `rows` (made from `source`).
fn mapped_object(
    mapping: FileMapping,
    origin: u64,
    (rows, source): (Rows, RowSource),
    name: &str,
) -> CodeObject {
    CodeObject {
        start: mapping.start,
        end: mapping.end,
        bias: origin,
        rows,
        source,
        name: Arc::from(name),
    }
}

/// The rows' cache key of a Go program whose linker wrote no GNU build
/// id (Go before 1.24): its Go build id (the `.note.go.buildid` note's
/// text, hashes of the build's inputs and output), with the address and
/// size of its `.text`, since a build may set the id to anything
/// (`-buildid=redacted`); prefixed so as not to meet a GNU build id by
/// chance.
fn go_build_id<'d, R: object::ReadRef<'d>>(elf: &object::File<'d, R>) -> Option<Vec<u8>> {
    use object::{Object, ObjectSection};
    let note = elf.section_by_name(".note.go.buildid")?;
    if note.size() > MAX_GO_BUILD_ID_NOTE {
        return None;
    }
    let id = go_build_id_of_note(note.data().ok()?, elf.is_little_endian())?;
    let text = elf.section_by_name(".text")?;
    let mut key = b"go build id ".to_vec();
    key.extend_from_slice(id);
    key.push(0);
    key.extend_from_slice(&text.address().to_le_bytes());
    key.extend_from_slice(&text.size().to_le_bytes());
    Some(key)
}

/// Whether the file's `.debug_frame` FDEs cover more code than its
/// `.eh_frame` ones (not looked at where `.eh_frame` covers half the
/// executable sections or more, as complete tables do).
fn debug_frame_covers_more<'d, R: object::ReadRef<'d>>(elf: &object::File<'d, R>) -> bool {
    use object::{Object, ObjectSection};
    let covered = |ranges: Vec<(u64, u64)>| -> u64 { ranges.iter().map(|&(s, e)| e - s).sum() };
    let code: u64 = elf
        .sections()
        .filter(|s| {
            matches!(s.flags(), object::SectionFlags::Elf { sh_flags }
                if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0)
        })
        .map(|s| s.size())
        .sum();
    let eh_frame = covered(crate::eh_frame::fde_ranges(elf));
    eh_frame.saturating_mul(2) < code && covered(crate::debug_frame::fde_ranges(elf)) > eh_frame
}

/// Largest `.note.go.buildid` read (Go's is about a hundred bytes).
const MAX_GO_BUILD_ID_NOTE: u64 = 4096;

/// The id in a `.note.go.buildid` section's bytes: namesz, descsz, type
/// (4: Go's build id), `"Go\0"` padded to 4 bytes (Go's linker counts
/// the padding in namesz), the id; `None` if they are not that.
fn go_build_id_of_note(data: &[u8], little_endian: bool) -> Option<&[u8]> {
    let word = |at: usize| -> Option<usize> {
        let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
        usize::try_from(if little_endian {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
        .ok()
    };
    let (name_len, id_len, kind) = (word(0)?, word(4)?, word(8)?);
    if !(3..=4).contains(&name_len) || kind != 4 || data.get(12..15)? != b"Go\0" {
        return None;
    }
    let id = data.get(16..16usize.checked_add(id_len)?)?;
    (!id.is_empty()).then_some(id)
}

/// A file's main row source: SFrame if it has it and `choice` allows it,
/// else its CFI: `.debug_frame` where it covers more code than
/// `.eh_frame` (a Go program, or C built without asynchronous unwind
/// tables, whose `.eh_frame` describes start-up code alone, if anything),
/// Go's function table in a Go program stripped of it, `.eh_frame`
/// otherwise.
pub(crate) fn row_source<'d, R: object::ReadRef<'d>>(
    elf: &object::File<'d, R>,
    choice: RowChoice,
    has_sframe: bool,
) -> RowSource {
    use object::{Object, ObjectSection};
    let sframe = match choice {
        RowChoice::Sframe => true,
        RowChoice::EhFrame => false,
        RowChoice::SframeThenEhFrame => has_sframe,
    };
    if sframe {
        RowSource::Sframe
    } else if elf
        .section_by_name(".debug_frame")
        .is_some_and(|s| s.size() > 0)
        && debug_frame_covers_more(elf)
    {
        RowSource::DebugFrame
    } else if crate::go_pclntab::section(elf).is_some() {
        RowSource::GoTable
    } else {
        RowSource::EhFrame
    }
}

/// The code map of live process `pid`, from `/proc/PID/maps`. Besides
/// the files [`code_map_from_maps`] reads, it reads what only the process
/// still has: files deleted (or replaced) since they were mapped, through
/// the process's links to them ([`MapsEntry::deleted_file_link`]), and
/// the vDSO, from its memory.
pub fn code_map_for_process(pid: u32, choice: RowChoice) -> std::io::Result<ProcessCode> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let entries =
        ichnos_image::parse_maps(pid, &text).map_err(|e| std::io::Error::other(e.to_string()))?;
    let (files, others): (Vec<MapsEntry>, Vec<MapsEntry>) = entries
        .into_iter()
        .partition(|m| !m.name.ends_with(" (deleted)"));
    let mut out = code_map_from_maps(&files, choice);
    let kept = |out: &mut ProcessCode, m: &MapsEntry, made: Result<CodeObject, String>| {
        let made = made.and_then(|o| out.map.insert(Arc::new(o)).map_err(|e| e.to_string()));
        if let Err(reason) = made {
            out.skipped.push(SkippedCode {
                path: m.name.clone(),
                reason,
            });
        }
    };
    for m in others.iter().filter(|m| m.perms.contains('x')) {
        let mapping = FileMapping {
            start: m.range.start,
            end: m.range.end,
            pgoff: m.offset,
        };
        let link = m.deleted_file_link(pid);
        let made = ichnos_image::open_regular(&link)
            .map_err(|e| format!("{}: {e}", link.display()))
            .and_then(|file| {
                code_object_for_file(file, &link, &m.name, mapping, choice)
                    .map_err(|e| ichnos_image::error_chain(&e))
            });
        kept(&mut out, m, made);
    }
    for m in files.iter().filter(|m| m.name == "[vdso]") {
        let mapping = FileMapping {
            start: m.range.start,
            end: m.range.end,
            pgoff: 0,
        };
        let mut bytes = vec![0u8; usize::try_from(m.range.end - m.range.start).unwrap_or(0)];
        let made = crate::sys::process_vm_read(pid.cast_signed(), m.range.start, &mut bytes)
            .map_err(|e| format!("reading the vDSO of process {pid}: {e}"))
            .and_then(|n| {
                code_object_from_bytes(&bytes[..n], "[vdso]", mapping, choice)
                    .map_err(|e| ichnos_image::error_chain(&e))
            });
        kept(&mut out, m, made);
    }
    Ok(out)
}

/// A thread's stack as taken by [`take_stack`].
#[derive(Clone, Debug)]
pub struct ThreadStack {
    /// The thread.
    pub tid: u32,
    /// Its registers when it was stopped.
    pub regs: Regs,
    /// Up to `max_stack` bytes of its stack from SP.
    pub stack: Vec<u8>,
}

/// What stands in the way of tracing thread `tid` of process `pid`, as
/// `/proc` tells it, where something other than permission does: what
/// [`why_unreadable`] says, or another process (a debugger, strace)
/// traces it already. `None` where none of these is the case.
#[must_use]
pub fn why_untraceable(pid: u32, tid: u32) -> Option<String> {
    if let Some(why) = why_unreadable(pid, tid) {
        return Some(why);
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|t| t.trim().parse::<u32>().ok())?;
    if tracer == 0 || tracer == std::process::id() {
        return None;
    }
    let name = std::fs::read_to_string(format!("/proc/{tracer}/comm"))
        .map(|c| format!(" ({})", c.trim()))
        .unwrap_or_default();
    Some(format!(
        "thread {tid} is already traced by process {tracer}{name}: a thread has one tracer at a time"
    ))
}

/// What stands in the way of reading thread `tid` of process `pid` (its
/// mappings, memory, stack), as `/proc` tells it: it is not a thread of
/// that process, or the process is a zombie or a kernel thread. `None`
/// where none of these is the case.
#[must_use]
pub fn why_unreadable(pid: u32, tid: u32) -> Option<String> {
    if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
        return Some(if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            format!("thread {tid} is not a thread of process {pid}")
        } else {
            format!("process {pid} does not exist")
        });
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    if field("State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X')) {
        return Some(format!(
            "process {pid} is a zombie: it exited, and its parent has not collected it"
        ));
    }
    // Kernel threads have no memory of their own (and, since Linux 6.0,
    // say so).
    if field("Kthread:") == Some("1") || (field("VmSize:").is_none() && pid != 0) {
        return Some(format!(
            "process {pid} is a kernel thread: it has no user memory"
        ));
    }
    None
}

/// Stops thread `tid` for as long as it takes to read its registers and
/// up to `max_stack` bytes of its stack, then lets it go (ptrace; needs the
/// permission to trace it).
#[cfg(target_arch = "x86_64")]
pub fn take_stack(tid: u32, max_stack: usize) -> std::io::Result<ThreadStack> {
    crate::sys::with_stopped_thread(tid.cast_signed(), |r| {
        let mut stack = vec![0u8; max_stack];
        // A read running past the end of the stack mapping stops there.
        let n = crate::sys::process_vm_read(tid.cast_signed(), r.sp, &mut stack).unwrap_or(0);
        stack.truncate(n);
        ThreadStack {
            tid,
            regs: Regs {
                ip: r.ip,
                sp: r.sp,
                fp: r.fp,
                bx: Some(r.bx),
            },
            stack,
        }
    })
}

/// Unwinds a taken stack against `map`, reading beyond the copy from the
/// live process if it is still there.
#[must_use]
pub fn unwind_thread(map: &CodeMap, stack: &ThreadStack, options: &UnwindOptions) -> Unwind {
    unwind(
        map,
        stack.regs,
        &stack.stack,
        &mut ProcessMemory::new(stack.tid),
        options,
    )
}

#[cfg(test)]
mod tests {
    use super::go_build_id_of_note;

    /// A note as Go's linker writes it: namesz 4 ("Go\0" and its
    /// padding), descsz, type 4, then the id.
    fn note(name_len: u32, id_len: u32, kind: u32, id: &[u8], little: bool) -> Vec<u8> {
        let word = |v: u32| {
            if little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        let mut out = Vec::new();
        for v in [name_len, id_len, kind] {
            out.extend_from_slice(&word(v));
        }
        out.extend_from_slice(b"Go\0\0");
        out.extend_from_slice(id);
        out
    }

    #[test]
    fn a_go_build_id_note_is_read_and_anything_else_refused() {
        let id = b"abc/def/ghi/jkl";
        let n = id.len() as u32;
        assert_eq!(
            go_build_id_of_note(&note(4, n, 4, id, true), true),
            Some(&id[..])
        );
        assert_eq!(
            go_build_id_of_note(&note(3, n, 4, id, true), true),
            Some(&id[..])
        );
        assert_eq!(
            go_build_id_of_note(&note(4, n, 4, id, false), false),
            Some(&id[..])
        );
        // Read with the other byte order, the lengths are wrong.
        assert_eq!(go_build_id_of_note(&note(4, n, 4, id, false), true), None);
        // Another note type, another owner, an empty id.
        assert_eq!(go_build_id_of_note(&note(4, n, 3, id, true), true), None);
        let mut gnu = note(4, n, 4, id, true);
        gnu[12..16].copy_from_slice(b"GNU\0");
        assert_eq!(go_build_id_of_note(&gnu, true), None);
        assert_eq!(go_build_id_of_note(&note(4, 0, 4, b"", true), true), None);
        // An id longer than the section, or a length that would overflow.
        assert_eq!(
            go_build_id_of_note(&note(4, n + 1, 4, id, true), true),
            None
        );
        assert_eq!(
            go_build_id_of_note(&note(4, u32::MAX, 4, id, true), true),
            None
        );
        // Cut anywhere, never a panic, never an id past the bytes.
        let whole = note(4, n, 4, id, true);
        for cut in 0..whole.len() {
            assert_eq!(go_build_id_of_note(&whole[..cut], true), None);
        }
    }
}
