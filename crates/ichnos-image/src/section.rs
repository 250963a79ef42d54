//! Sections: one file range, mapped at most once however many users share it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::cache::CacheShared;
use crate::error::{Error, Result};
use crate::loader::{self, FileIdentity, Mapping};

/// One file range: the unit that is mapped and shared.
///
/// Sections are reference counted (`Arc`). The cache's entries and every image
/// window that shows the section hold a reference; the mapping is held by
/// whoever reads (the cache's LRU list, an image's last-hit slot) and shared by
/// all through the section's weak handle, so a file range is mapped once while
/// anyone uses it.
#[derive(Debug)]
pub(crate) struct Section {
    /// Unique among all sections of this process; keys the cache's LRU list.
    pub(crate) id: u64,
    /// The file name exactly as given: compared textually, as libipt does.
    pub(crate) path: PathBuf,
    /// Offset of the section in the file.
    pub(crate) offset: u64,
    /// Size in bytes, already cut to the end of the file; never 0.
    pub(crate) size: u64,
    /// The file as it was when the section was created.
    pub(crate) identity: FileIdentity,
    mapping: Mutex<Weak<Mapping>>,
    /// The cache this section belongs to, if any; told about every new map.
    cache: Weak<CacheShared>,
}

impl Section {
    /// Creates a section for `size` bytes at `offset` of the file `path`,
    /// cutting the size to the end of the file as libipt does.
    pub(crate) fn new(
        path: &Path,
        offset: u64,
        size: u64,
        cache: Weak<CacheShared>,
    ) -> Result<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        if path.as_os_str().is_empty() {
            return Err(Error::InvalidArgument {
                what: "file name is empty",
            });
        }
        let identity = loader::examine(path)?;
        if offset >= identity.size {
            return Err(Error::OffsetPastEnd {
                path: path.to_owned(),
                offset,
                file_size: identity.size,
            });
        }
        if size == 0 {
            return Err(Error::EmptySection {
                path: path.to_owned(),
                offset,
            });
        }
        Ok(Section {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_owned(),
            offset,
            size: size.min(identity.size - offset),
            identity,
            mapping: Mutex::new(Weak::new()),
            cache,
        })
    }

    /// The textual key of the file range (libipt's de-duplication key less
    /// the load address).
    pub(crate) fn key(&self) -> (OsString, u64, u64) {
        (self.path.as_os_str().to_owned(), self.offset, self.size)
    }

    /// Maps the section, or shares the mapping that exists, and tells the
    /// section's cache, which keeps it mapped within its limit.
    pub(crate) fn map(self: &Arc<Self>) -> Result<Arc<Mapping>> {
        let mapping = {
            let mut slot = self.mapping.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(mapping) = slot.upgrade() {
                mapping
            } else {
                let mapping = Arc::new(Mapping::new(
                    &self.path,
                    &self.identity,
                    self.offset,
                    self.size,
                )?);
                *slot = Arc::downgrade(&mapping);
                mapping
            }
        };
        // The cache lock is taken only after the section lock is released, so
        // the two locks are never held together.
        if let Some(cache) = self.cache.upgrade() {
            cache.notify_map(self, &mapping);
        }
        Ok(mapping)
    }
}
