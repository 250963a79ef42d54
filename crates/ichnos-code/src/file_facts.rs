//! What a file says of itself, learnt once per file as it is on disk.
//!
//! A recorder meets the same files in every process of a build: each
//! rustc maps a 150 MB `librustc_driver` and a 200 MB LLVM, each compiler
//! driver the same libc. What a file says (its build id and debug link,
//! where its segments lie, where it defines a symbol) does not change
//! while the file does not, and working it out means parsing the file's
//! headers and symbol tables: tens of megabytes read for each process.
//! So it is worked out the first time a file is asked of, keyed by the
//! file as it is on disk (device, inode, size, and the times it was
//! modified and its inode changed: a file rewritten in place, or a new
//! file given a freed inode, has a new change time, which no one can set
//! back), and kept for every later process. At most [`MAX_FILES`] files
//! are remembered; past it, they start afresh (worked out again, never
//! wrong).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::elf::DebugLink;

/// A file as it is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileKey {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A file's build id and `.gnu_debuglink`.
pub(crate) type Identity = (Option<Vec<u8>>, Option<DebugLink>);

/// A loadable segment of an ELF file: its link-time address and where it
/// lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoadSegment {
    pub address: u64,
    pub offset: u64,
    pub size: u64,
}

/// Where an ELF file's segments lie, and the key its rows are shared by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub segments: Vec<LoadSegment>,
    /// The key the rows are cached by: the build id, else a Go program's,
    /// else the file's own ([`FileFacts::row_key`]).
    pub row_key: Option<Vec<u8>>,
}

/// What is known of one file.
#[derive(Debug)]
pub(crate) struct FileFacts {
    key: FileKey,
    /// Its build id and debug link.
    pub identity: OnceLock<Identity>,
    /// Its segments and row key, once it was read as an ELF file.
    pub layout: OnceLock<Layout>,
    /// Symbols looked for, by name: the offset of the definition from
    /// the file's link origin, or `None`.
    symbols: Mutex<HashMap<Box<[u8]>, Option<u64>>>,
}

/// Symbol names remembered per file at most (a recorder asks two).
const MAX_SYMBOLS: usize = 64;

impl FileFacts {
    fn new(key: FileKey) -> Self {
        Self {
            key,
            identity: OnceLock::new(),
            layout: OnceLock::new(),
            symbols: Mutex::default(),
        }
    }

    /// The key rows made from this file are shared by where it has no
    /// build id (Rust's toolchain ships `librustc_driver` and LLVM
    /// without one): the file as it is on disk, prefixed so as not to
    /// meet a build id by chance.
    pub fn row_key(&self) -> Vec<u8> {
        let FileKey {
            dev,
            ino,
            size,
            mtime,
            ctime,
        } = self.key;
        let mut key = b"file on disk ".to_vec();
        let times = [mtime.0, mtime.1, ctime.0, ctime.1].map(i64::cast_unsigned);
        for word in [dev, ino, size].into_iter().chain(times) {
            key.extend_from_slice(&word.to_le_bytes());
        }
        key
    }

    /// Where the file defines `name` (see [`FileFacts::symbols`]), as
    /// `search` finds it the first time.
    pub fn symbol(&self, name: &[u8], search: impl FnOnce() -> Option<u64>) -> Option<u64> {
        let lock = || {
            self.symbols
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(&found) = lock().get(name) {
            return found;
        }
        let found = search();
        let mut symbols = lock();
        if symbols.len() >= MAX_SYMBOLS {
            symbols.clear();
        }
        symbols.insert(Box::from(name), found);
        found
    }
}

/// Files remembered at most.
const MAX_FILES: usize = 4096;

/// What is known of the regular file `file` (`None` for anything else).
pub(crate) fn facts_of(file: &std::fs::File) -> Option<Arc<FileFacts>> {
    static FILES: OnceLock<Mutex<HashMap<FileKey, Arc<FileFacts>>>> = OnceLock::new();
    let meta = file.metadata().ok().filter(std::fs::Metadata::is_file)?;
    let mut files = FILES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = FileKey::of(&meta);
    if !files.contains_key(&key) && files.len() >= MAX_FILES {
        files.clear();
    }
    Some(Arc::clone(
        files
            .entry(key)
            .or_insert_with(|| Arc::new(FileFacts::new(key))),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_known_by_what_it_is_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        let link = dir.path().join("g");
        std::fs::hard_link(&path, &link).unwrap();
        let open = || std::fs::File::open(&path).unwrap();
        let first = facts_of(&open()).unwrap();
        first.identity.set((Some(vec![1]), None)).unwrap();
        // Opened again, or through another name: the same facts.
        assert!(Arc::ptr_eq(&first, &facts_of(&open()).unwrap()));
        assert!(Arc::ptr_eq(
            &first,
            &facts_of(&std::fs::File::open(&link).unwrap()).unwrap()
        ));
        // Rewritten in place, same size, its modification time set back
        // to what it was (as `cp -p` or `tar` do): new facts all the same
        // (its inode changed).
        let mtime = open().metadata().unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"two").unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_modified(mtime).unwrap();
        assert_eq!(open().metadata().unwrap().modified().unwrap(), mtime);
        let after = facts_of(&open()).unwrap();
        assert!(!Arc::ptr_eq(&first, &after));
        assert!(after.identity.get().is_none());
        // Its rows are not the old file's.
        assert_ne!(first.row_key(), after.row_key());
        assert!(first.row_key().starts_with(b"file on disk "));
        // A directory is not a file that says anything.
        assert!(facts_of(&std::fs::File::open(dir.path()).unwrap()).is_none());
    }

    #[test]
    fn a_symbol_is_searched_for_once_per_file_and_name() {
        let file = tempfile::tempfile().unwrap();
        let facts = facts_of(&file).unwrap();
        let mut searches = 0;
        let mut search = |found| {
            facts.symbol(b"x", || {
                searches += 1;
                found
            })
        };
        assert_eq!(search(Some(8)), Some(8));
        assert_eq!(search(None), Some(8), "the first answer stands");
        assert_eq!(searches, 1);
        assert_eq!(facts.symbol(b"y", || None), None);
        assert_eq!(facts.symbol(b"y", || Some(1)), None);
    }
}
