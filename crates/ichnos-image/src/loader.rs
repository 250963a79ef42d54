//! Opening, examining and mapping files: the only place this crate touches
//! the operating system's file and memory-mapping calls.
//!
//! # The hazard of a file that changes under a mapping
//!
//! A section records the identity of its file when it is added: device and
//! inode number, size, and modification time. When the section is mapped, the
//! file is opened and examined again, and any difference is reported as
//! [`Error::FileChanged`] instead of reading bytes that no longer belong to the
//! traced program. A file that is truncated *while* it is mapped cannot be
//! detected this way: touching a page past the new end raises `SIGBUS`, as it
//! does for every reader of memory-mapped files (ripgrep, git, perf). Build
//! trees that rewrite binaries in place are the usual cause; replacing a file
//! by renaming a new one over it (as linkers and package managers do) is safe,
//! because the mapping keeps the old inode alive.

use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;

use memmap2::{Mmap, MmapOptions};

use crate::error::{Error, FileChange, Result};

/// What identifies the contents of a file at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    pub(crate) size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileIdentity {
    fn of(meta: &Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }

    /// The first difference between this (older) identity and `now`.
    pub(crate) fn change_to(&self, now: &FileIdentity) -> Option<FileChange> {
        if (self.dev, self.ino) != (now.dev, now.ino) {
            Some(FileChange::Replaced)
        } else if self.size != now.size {
            Some(FileChange::Size {
                was: self.size,
                now: now.size,
            })
        } else if (self.mtime, self.mtime_nsec) != (now.mtime, now.mtime_nsec) {
            Some(FileChange::Modified)
        } else {
            None
        }
    }
}

/// Examines the file at `path` (`stat`).
pub(crate) fn examine(path: &Path) -> Result<FileIdentity> {
    let meta = std::fs::metadata(path).map_err(|source| Error::File {
        path: path.to_owned(),
        op: "stat",
        source,
    })?;
    if !meta.is_file() {
        return Err(Error::File {
            path: path.to_owned(),
            op: "use",
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        });
    }
    Ok(FileIdentity::of(&meta))
}

/// The system's page size.
pub(crate) fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions; it only reads a constant.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
    })
}

/// A read-only mapping of one section's file range.
#[derive(Debug)]
pub(crate) struct Mapping {
    map: Mmap,
    /// Bytes between the page-aligned start of the mapping and the section.
    skip: usize,
}

impl Mapping {
    /// Opens `path`, checks that it is still the file described by `identity`,
    /// and maps `size` bytes from `offset`.
    pub(crate) fn new(
        path: &Path,
        identity: &FileIdentity,
        offset: u64,
        size: u64,
    ) -> Result<Self> {
        let file = File::open(path).map_err(|source| Error::File {
            path: path.to_owned(),
            op: "open",
            source,
        })?;
        let meta = file.metadata().map_err(|source| Error::File {
            path: path.to_owned(),
            op: "stat",
            source,
        })?;
        if let Some(change) = identity.change_to(&FileIdentity::of(&meta)) {
            return Err(Error::FileChanged {
                path: path.to_owned(),
                change,
            });
        }
        let skip = offset % page_size();
        let aligned = offset - skip;
        let map_err = |source| Error::Map {
            path: path.to_owned(),
            offset: aligned,
            len: size + skip,
            source,
        };
        let len = usize::try_from(size + skip).map_err(|_| {
            map_err(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                "larger than the address space",
            ))
        })?;
        // SAFETY: the mapping is read-only and private to this crate, which
        // hands out only shared borrows of it. The file was checked just above
        // to be the one the section describes, and `offset + size` lies within
        // it. A later truncation of the file by another process is the hazard
        // described in this module's documentation.
        let map =
            unsafe { MmapOptions::new().offset(aligned).len(len).map(&file) }.map_err(map_err)?;
        Ok(Mapping {
            map,
            skip: skip as usize,
        })
    }

    /// The section's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map[self.skip..]
    }

    /// Bytes of address space the mapping takes, page adjusted (libipt's `memsize`).
    pub(crate) fn memsize(&self) -> u64 {
        self.map.len() as u64
    }
}
