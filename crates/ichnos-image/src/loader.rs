//! Opening, examining and mapping files: the only place this crate touches
//! the operating system's file and memory-mapping calls.
//!
//! # The hazard of a file that changes under a mapping
//!
//! A section records the identity of its file when it is added: device and
//! inode number, size, and modification time. When the section is mapped, the
//! file is opened and examined again, and any difference is reported as
//! [`Error::FileChanged`] instead of reading bytes that no longer belong to the
//! traced program. A file truncated *while* it is mapped would raise `SIGBUS`
//! on a read past its new end, as it does for every plain reader of mapped
//! files (ripgrep, git, perf): mappings here are [`GuardedMap`]s, whose pages
//! past the end read as zeros and mark the mapping, and a read that touched
//! one fails with [`FileChange::Truncated`]. Reads that find their section
//! (all of the cache's, and an image's other than repeats of its last hit)
//! also look at the file again (`stat`; the process looks at most once a
//! millisecond, at the mapping being read then, and at each mapping at
//! most every ten), so a file rewritten in place is reported even where
//! reads stay below its end, and from then on by every read of it. Replacing a file by renaming a new one over it (as
//! linkers and package managers do) is no change: the mapping keeps the old
//! inode alive, and its bytes are still the section's.

use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, FileChange, Result};
use crate::guarded_map::GuardedMap;

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

/// What kind of file `meta` is, for a message refusing it.
fn kind_of(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading if it is a regular file (following symbolic
/// links). The open does not block: a FIFO where a file was expected
/// would wait for a writer for ever. Anything but a regular file is
/// refused with an error (`InvalidInput`) that says what it is.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() {
        Ok(file)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind_of(&meta)),
        ))
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
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}, not a regular file", kind_of(&meta)),
            ),
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

/// How often, at most, reads look at a mapping's file again.
const RECHECK_NS: u64 = 1_000_000;
/// When reads may look at a file again next (`coarse_ns`).
static NEXT_CHECK: AtomicU64 = AtomicU64::new(0);

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds: a read of the vDSO's page.
fn coarse_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// A read-only mapping of one section's file range.
#[derive(Debug)]
pub(crate) struct Mapping {
    map: GuardedMap,
    /// Bytes between the page-aligned start of the mapping and the section.
    skip: usize,
    path: PathBuf,
    identity: FileIdentity,
    /// When reads may look at this mapping's file again (`coarse_ns`).
    next_check: AtomicU64,
    /// A look found the file changed (how): every read says so.
    changed: OnceLock<FileChange>,
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
        let file = open_regular(path).map_err(|source| Error::File {
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
        // SAFETY: the bytes are section contents handed out to readers
        // that copy them and check the mapping after every copy; they are
        // never trusted to stay unchanged.
        let map = unsafe { GuardedMap::map(&file, aligned, len) }.map_err(map_err)?;
        Ok(Mapping {
            map,
            skip: skip as usize,
            path: path.to_owned(),
            identity: *identity,
            next_check: AtomicU64::new(0),
            changed: OnceLock::new(),
        })
    }

    /// Whether no read of the mapping ran past the file's end (it was
    /// truncated): one load, for the reads that repeat the last one.
    #[inline]
    pub(crate) fn check_truncation(&self) -> Result<()> {
        if self.map.faulted() {
            return Err(Error::FileChanged {
                path: self.path.clone(),
                change: FileChange::Truncated,
            });
        }
        Ok(())
    }

    /// Whether what was read from the mapping is the section's: no read ran
    /// past the file's end (it was truncated), and the file is still as it
    /// was, where this read is the one that looks (the process looks at
    /// most once a millisecond, at the mapping read then).
    pub(crate) fn check(&self) -> Result<()> {
        self.check_truncation()?;
        if let Some(&change) = self.changed.get() {
            return Err(Error::FileChanged {
                path: self.path.clone(),
                change,
            });
        }
        // One look for the whole process at most every millisecond, at the
        // mapping being read then, and at one mapping at most every ten: a
        // few thousand sections read in turn would otherwise cost a stat
        // each, and a busy one would take every turn.
        let now = coarse_ns();
        if now < self.next_check.load(Ordering::Relaxed) {
            return Ok(());
        }
        let next = NEXT_CHECK.load(Ordering::Relaxed);
        if now < next
            || NEXT_CHECK
                .compare_exchange(next, now + RECHECK_NS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Ok(());
        }
        self.next_check
            .store(now + 10 * RECHECK_NS, Ordering::Relaxed);
        let seen = self.file_changed();
        if let Err(Error::FileChanged { change, .. }) = &seen {
            // Every later read says so too.
            let _ = self.changed.set(*change);
        }
        seen
    }

    /// Whether the file at the mapping's path differs from what the
    /// section was. The path may name another file now (a rename over
    /// it): the mapping holds the old one, whose bytes are still the
    /// section's.
    fn file_changed(&self) -> Result<()> {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return Ok(());
        };
        match self.identity.change_to(&FileIdentity::of(&meta)) {
            None | Some(FileChange::Replaced) => Ok(()),
            Some(change) => Err(Error::FileChanged {
                path: self.path.clone(),
                change,
            }),
        }
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
