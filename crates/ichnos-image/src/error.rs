//! The one error type of the image layer.

use std::io;
use std::path::PathBuf;

use crate::{Asid, Isid};

/// What went wrong in a section cache or image operation.
///
/// Every variant names what it is about: the file, the isid, the address. The
/// variants cover libipt's error cases for the same operations (see
/// [`Error::kind`]), so the C ABI can return libipt's `pte_*` numbers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was out of its domain (libipt `pte_invalid`).
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// Which argument and why.
        what: &'static str,
    },
    /// A section of zero bytes was requested; it could never be read.
    #[error("{}: section at file offset {offset:#x} has size 0", path.display())]
    EmptySection {
        /// The file.
        path: PathBuf,
        /// The requested file offset.
        offset: u64,
    },
    /// The requested file offset is at or beyond the end of the file.
    #[error("{}: file offset {offset:#x} is at or past the end of the file ({file_size:#x} bytes)", path.display())]
    OffsetPastEnd {
        /// The file.
        path: PathBuf,
        /// The requested file offset.
        offset: u64,
        /// The file's size when it was examined.
        file_size: u64,
    },
    /// `vaddr + size` does not fit in 64 bits.
    #[error("section of {size:#x} bytes at {vaddr:#x} runs past the end of the address space")]
    AddressOverflow {
        /// The requested load address.
        vaddr: u64,
        /// The (truncated) section size.
        size: u64,
    },
    /// A load bias that moves a segment past the end of the address space.
    #[error("a load bias of {bias:#x} moves the segment at {vaddr:#x} past the end of the address space")]
    BiasOverflow {
        /// The segment's link-time address.
        vaddr: u64,
        /// The bias.
        bias: u64,
    },
    /// No section covers the address and no callback supplied it (libipt `pte_nomap`).
    #[error("no section covers address {vaddr:#x}{}", in_space(asid))]
    NoMapping {
        /// The address space that was searched.
        asid: Asid,
        /// The address that was read.
        vaddr: u64,
    },
    /// The address lies outside the section that the isid names (libipt `pte_nomap`).
    #[error("address {vaddr:#x} lies outside section {isid} ({begin:#x}..{end:#x})")]
    OutsideSection {
        /// The section.
        isid: Isid,
        /// The address that was read.
        vaddr: u64,
        /// Start of the section's address range.
        begin: u64,
        /// End (exclusive) of the section's address range.
        end: u64,
    },
    /// The isid is not known to this cache (libipt `pte_bad_image`).
    #[error("section cache {} has no section with isid {isid}", cache_name(cache.as_deref()))]
    UnknownIsid {
        /// The cache's name, if it has one.
        cache: Option<String>,
        /// The isid as given.
        isid: u32,
    },
    /// The file changed on disk after its section was added (libipt `pte_bad_image`).
    #[error("{}: file changed on disk since the section was added ({change})", path.display())]
    FileChanged {
        /// The file.
        path: PathBuf,
        /// What differs.
        change: FileChange,
    },
    /// The file could not be examined or opened (libipt `pte_bad_file`).
    #[error("{}: cannot {op}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What was attempted: "stat", "open", "read".
        op: &'static str,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// Mapping the file failed (libipt `pte_nomem`).
    #[error("{}: cannot map {len:#x} bytes at file offset {offset:#x}: {source}", path.display())]
    Map {
        /// The file.
        path: PathBuf,
        /// Page-aligned file offset of the mapping.
        offset: u64,
        /// Length of the mapping.
        len: u64,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// An ELF file could not be loaded.
    #[error("{}: not a loadable ELF file: {reason}", path.display())]
    BadElf {
        /// The file.
        path: PathBuf,
        /// What the ELF parser said.
        reason: String,
    },
    /// A line of `/proc/PID/maps` could not be understood.
    #[error("/proc/{pid}/maps line {line}: {reason}")]
    BadProcMaps {
        /// The process.
        pid: u32,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// Reading a process's memory failed.
    #[error("cannot read {len} bytes at {vaddr:#x} of process {pid}: {source}")]
    ProcessMemory {
        /// The process.
        pid: u32,
        /// The address.
        vaddr: u64,
        /// The number of bytes asked for.
        len: usize,
        /// The operating system's answer.
        #[source]
        source: io::Error,
    },
    /// An error reported by a read callback, passed through unchanged.
    #[error("read callback failed at {vaddr:#x}: {message}")]
    Callback {
        /// The address.
        vaddr: u64,
        /// What the callback said.
        message: String,
        /// The libipt error number the callback returned, if it came through the C ABI.
        code: Option<i32>,
    },
}

/// A cache's name as messages give it: quoted, or "(unnamed)".
fn cache_name(name: Option<&str>) -> String {
    name.map_or_else(|| "(unnamed)".to_owned(), |n| format!("\"{n}\""))
}

/// Which property of a file differs from when its section was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileChange {
    /// The path now names another file (device or inode number differs).
    Replaced,
    /// The size differs.
    Size {
        /// Size when the section was added.
        was: u64,
        /// Size now.
        now: u64,
    },
    /// The modification time differs.
    Modified,
    /// It was cut short while mapped: a read ran past its new end (and
    /// read zeros, not the file).
    Truncated,
}

impl std::fmt::Display for FileChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileChange::Replaced => f.write_str("the path names another file now"),
            FileChange::Size { was, now } => write!(f, "size was {was:#x} bytes, is {now:#x}"),
            FileChange::Modified => f.write_str("modification time differs"),
            FileChange::Truncated => {
                f.write_str("it was cut short while mapped: a read ran past its new end")
            }
        }
    }
}

/// The libipt error class of an [`Error`], for callers that need libipt's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `pte_invalid`
    Invalid,
    /// `pte_nomap`
    NoMap,
    /// `pte_bad_image`
    BadImage,
    /// `pte_bad_file`
    BadFile,
    /// `pte_nomem`
    NoMem,
    /// `pte_overflow`
    Overflow,
    /// Any other code, as returned by a callback.
    Other(i32),
}

impl Error {
    /// The libipt error class this error belongs to.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument { .. }
            | Error::EmptySection { .. }
            | Error::OffsetPastEnd { .. } => ErrorKind::Invalid,
            Error::AddressOverflow { .. } | Error::BiasOverflow { .. } => ErrorKind::Overflow,
            Error::NoMapping { .. }
            | Error::OutsideSection { .. }
            | Error::ProcessMemory { .. } => ErrorKind::NoMap,
            Error::UnknownIsid { .. } | Error::FileChanged { .. } => ErrorKind::BadImage,
            Error::File { .. } | Error::BadElf { .. } | Error::BadProcMaps { .. } => {
                ErrorKind::BadFile
            }
            Error::Map { .. } => ErrorKind::NoMem,
            Error::Callback { code, .. } => code.map_or(ErrorKind::Other(1), ErrorKind::Other),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error and its causes as one line, joined by `: ` (a cause whose
/// text its error already ends with is said once): for messages kept as
/// text, such as the debug files a symbolizer refused or the objects an
/// unwinder passed over. (Here because every crate of ichnos builds on
/// this one.)
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// ` in address space ASID`, or nothing for the wildcard (an image read
/// without naming its address space has only one).
fn in_space(asid: &Asid) -> String {
    if *asid == Asid::default() {
        String::new()
    } else {
        format!(" in address space {asid}")
    }
}
