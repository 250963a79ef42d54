//! Files as the symbolizer reads them: objects, debug files and symbol
//! indexes, each mapped once, guarded (a file cut short under its
//! mapping reads as zeros past its end and says so, never SIGBUS), with
//! the identity of the bytes mapped, so that a later look at the path can
//! tell whether it still names them (the check the image crate's section
//! cache makes).

use std::fs::{File, Metadata};
use std::ops::Deref;
use std::path::{Path, PathBuf};

use crate::error::SymbolError;

/// What identifies a file's contents short of reading them: device,
/// inode, size and modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Nanoseconds since the epoch.
    pub mtime_ns: i64,
}

impl FileStamp {
    /// The stamp of the file `path` names now (`None`: it cannot be
    /// looked at).
    pub(crate) fn of(path: &Path) -> Option<FileStamp> {
        std::fs::metadata(path).ok().map(|m| Self::of_metadata(&m))
    }

    fn of_metadata(m: &Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.mtime_nsec()),
        }
    }
}

/// A regular file mapped whole, with the stamp of the file opened.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: ichnos_image::GuardedMap,
    path: PathBuf,
    stamp: FileStamp,
}

impl MappedFile {
    /// Maps the regular file at `path` (never waiting on a FIFO or
    /// reading a device). Its bytes are untrusted input: whoever reads
    /// them checks every offset, and uses what was read only after
    /// [`MappedFile::faulted`] says the file was not cut short.
    pub(crate) fn open(path: &Path) -> Result<Self, SymbolError> {
        let io = |source| SymbolError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file: File = ichnos_image::open_regular(path).map_err(io)?;
        // The stamp of the file opened, not of whatever the path names
        // by the time it is looked at again.
        let stamp = FileStamp::of_metadata(&file.metadata().map_err(io)?);
        let len = usize::try_from(stamp.size).map_err(|_| {
            io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                "larger than the address space",
            ))
        })?;
        // SAFETY: the bytes are read by object, gimli, addr2line and the
        // index's checked accessors, which bounds-check every read of
        // untrusted input; the guarded mapping turns a read past a
        // truncated end into zeros and a flag, which every user checks
        // before trusting what it read. A file changed in place under the
        // mapping gives wrong answers, never memory errors.
        let map = unsafe { ichnos_image::GuardedMap::map(&file, 0, len) }.map_err(io)?;
        Ok(Self {
            map,
            path: path.to_path_buf(),
            stamp,
        })
    }

    /// The path it was opened by.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stamp of the file mapped.
    pub(crate) fn stamp(&self) -> FileStamp {
        self.stamp
    }

    /// Whether a read ran past the end of the file (it was cut short
    /// under the mapping; zeros were read).
    pub(crate) fn faulted(&self) -> bool {
        self.map.faulted()
    }
}

impl Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_is_the_opened_files_and_a_change_at_the_path_shows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("object");
        std::fs::write(&path, b"first contents").unwrap();
        let mapped = MappedFile::open(&path).unwrap();
        assert_eq!(&*mapped, b"first contents");
        assert_eq!(mapped.stamp(), FileStamp::of(&path).unwrap());
        assert_eq!(mapped.stamp().size, 14);

        // Replaced by a rename: another inode at the path, the mapping
        // still the old file's.
        let other = dir.path().join("other");
        std::fs::write(&other, b"second").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let now = FileStamp::of(&path).unwrap();
        assert_ne!(now, mapped.stamp());
        assert_ne!(now.ino, mapped.stamp().ino);
        assert_eq!(&*mapped, b"first contents");
        assert!(!mapped.faulted());

        // Changed in place: the same inode, another size.
        let again = MappedFile::open(&path).unwrap();
        std::fs::write(&path, b"second, longer").unwrap();
        let now = FileStamp::of(&path).unwrap();
        assert_eq!(now.ino, again.stamp().ino);
        assert_ne!(now, again.stamp());
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = MappedFile::open(dir.path()).unwrap_err();
        assert!(matches!(err, SymbolError::Io { .. }), "{err:?}");
        assert!(MappedFile::open(Path::new("/dev/null")).is_err());
    }
}
