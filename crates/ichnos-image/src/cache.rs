//! The image section cache: de-duplicated sections, named by isid, kept
//! mapped under a least-recently-used bound on mapped bytes.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};
use crate::loader::Mapping;
use crate::section::Section;

/// An image section identifier: names one `(section, load address)` entry of
/// a [`SectionCache`]. As in libipt, isids count from 1 in the order entries
/// were added, and are never reused while the cache lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Isid(NonZeroU32);

impl Isid {
    /// The isid with this number, or `None` for 0 ("no isid").
    #[must_use]
    pub fn new(isid: u32) -> Option<Isid> {
        NonZeroU32::new(isid).map(Isid)
    }

    /// The isid's number (1 or more).
    #[must_use]
    pub fn get(self) -> u32 {
        self.0.get()
    }

    fn index(self) -> usize {
        self.0.get() as usize - 1
    }
}

impl fmt::Display for Isid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a cache entry describes: a file range and the address it is loaded at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedSection {
    /// The file, exactly as it was named when added.
    pub path: std::path::PathBuf,
    /// Offset of the section in the file.
    pub offset: u64,
    /// Size in bytes (cut to the end of the file).
    pub size: u64,
    /// The load address.
    pub vaddr: u64,
}

/// Counters that describe a cache's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Number of isids handed out.
    pub entries: usize,
    /// Number of distinct sections (file ranges) behind them.
    pub sections: usize,
    /// Number of sections the cache keeps mapped.
    pub mapped_sections: usize,
    /// Bytes of address space those mappings take, page adjusted.
    pub mapped_bytes: u64,
    /// The limit on `mapped_bytes`.
    pub limit: u64,
}

/// A thread-safe cache of file sections, shared by handle (cloning a
/// `SectionCache` gives another handle to the same cache), the equivalent of
/// libipt's `struct pt_image_section_cache`.
///
/// Adding the same file range at the same load address twice returns the
/// same [`Isid`]; the same file range at another address gets a new isid that
/// shares the first one's section and mapping. Every section the cache maps
/// stays mapped until the least-recently-used bound set with
/// [`set_limit`](Self::set_limit) pushes it out (unbounded by default).
#[derive(Clone)]
pub struct SectionCache {
    shared: Arc<CacheShared>,
}

impl fmt::Debug for SectionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SectionCache")
            .field("name", &self.shared.name)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The part of a cache that handles share and sections point back to.
#[derive(Debug)]
pub(crate) struct CacheShared {
    name: Option<String>,
    state: Mutex<CacheState>,
}

#[derive(Debug)]
struct Entry {
    section: Arc<Section>,
    laddr: u64,
}

#[derive(Debug)]
struct LruEntry {
    mapping: Arc<Mapping>,
    size: u64,
    /// The cache's clock at the last map: larger is more recent.
    stamp: u64,
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[derive(Debug)]
struct CacheState {
    entries: Vec<Entry>,
    /// (file name, offset, size, load address) → isid.
    by_key: HashMap<(OsString, u64, u64, u64), Isid>,
    /// (file name, offset, size) → the section shared by all its load addresses.
    sections: HashMap<(OsString, u64, u64), Arc<Section>>,
    /// Section id → its mapping, kept alive by the cache.
    lru: FastMap<u64, LruEntry>,
    clock: u64,
    limit: u64,
    used: u64,
}

impl SectionCache {
    /// Creates an empty cache. The name is copied; it is for people reading
    /// diagnostics.
    #[must_use]
    pub fn new(name: Option<&str>) -> SectionCache {
        SectionCache {
            shared: Arc::new(CacheShared {
                name: name.map(str::to_owned),
                state: Mutex::new(CacheState {
                    entries: Vec::new(),
                    by_key: HashMap::new(),
                    sections: HashMap::new(),
                    lru: FastMap::default(),
                    clock: 0,
                    limit: u64::MAX,
                    used: 0,
                }),
            }),
        }
    }

    /// The cache's name, if it was given one.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }

    /// Whether two handles refer to the same cache.
    #[must_use]
    pub fn same_cache(&self, other: &SectionCache) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        self.shared.lock()
    }

    /// Adds `size` bytes at `offset` of the file `path`, loaded at `vaddr`,
    /// and returns the entry's isid. The size is cut to the end of the file.
    ///
    /// An equal entry (same file name text, offset, cut size and address)
    /// returns the existing isid, unless the file changed on disk since that
    /// entry was made: then a new entry describes the file as it is now.
    pub fn add_file(
        &self,
        path: impl AsRef<Path>,
        offset: u64,
        size: u64,
        vaddr: u64,
    ) -> Result<Isid> {
        let path = path.as_ref();
        let section = Section::new(path, offset, size, Arc::downgrade(&self.shared))?;
        if vaddr.checked_add(section.size).is_none() {
            return Err(Error::AddressOverflow {
                vaddr,
                size: section.size,
            });
        }
        let (name, offset, size) = section.key();
        let mut state = self.state();
        let range_key = (name, offset, size);
        let shared = match state.sections.get(&range_key) {
            Some(existing) if existing.identity == section.identity => Arc::clone(existing),
            _ => {
                let section = Arc::new(section);
                state
                    .sections
                    .insert(range_key.clone(), Arc::clone(&section));
                section
            }
        };
        let (name, offset, size) = range_key;
        let key = (name, offset, size, vaddr);
        if let Some(&isid) = state.by_key.get(&key) {
            if Arc::ptr_eq(&state.entries[isid.index()].section, &shared) {
                return Ok(isid);
            }
        }
        let number = u32::try_from(state.entries.len() + 1)
            .ok()
            .and_then(Isid::new)
            .ok_or(Error::InvalidArgument {
                what: "the section cache holds 2^32 - 1 entries already",
            })?;
        state.entries.push(Entry {
            section: shared,
            laddr: vaddr,
        });
        state.by_key.insert(key, number);
        Ok(number)
    }

    /// Describes the entry `isid`.
    pub fn lookup(&self, isid: Isid) -> Result<CachedSection> {
        let (section, vaddr) = self.entry(isid)?;
        Ok(CachedSection {
            path: section.path.clone(),
            offset: section.offset,
            size: section.size,
            vaddr,
        })
    }

    /// The section and load address of `isid`.
    pub(crate) fn entry(&self, isid: Isid) -> Result<(Arc<Section>, u64)> {
        let state = self.state();
        state
            .entries
            .get(isid.index())
            .map(|e| (Arc::clone(&e.section), e.laddr))
            .ok_or_else(|| Error::UnknownIsid {
                cache: self.shared.name.clone(),
                isid: isid.get(),
            })
    }

    /// Reads memory of section `isid` at `vaddr` into `buf`. Returns the number
    /// of bytes read, which is less than `buf.len()` where the section ends
    /// first.
    pub fn read(&self, isid: Isid, vaddr: u64, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Err(Error::InvalidArgument {
                what: "read buffer is empty",
            });
        }
        let (section, laddr) = {
            let mut state = self.state();
            let Some(entry) = state.entries.get(isid.index()) else {
                return Err(Error::UnknownIsid {
                    cache: self.shared.name.clone(),
                    isid: isid.get(),
                });
            };
            let (section, laddr) = (Arc::clone(&entry.section), entry.laddr);
            let end = laddr + section.size;
            if vaddr < laddr || vaddr >= end {
                return Err(Error::OutsideSection {
                    isid,
                    vaddr,
                    begin: laddr,
                    end,
                });
            }
            // A mapped section is read under the lock: a copy of a few bytes
            // costs less than taking and dropping a reference to the mapping.
            if let Some(mapping) = state.touch(section.id) {
                let len = copy_out(mapping.bytes(), vaddr - laddr, buf);
                mapping.check()?;
                return Ok(len);
            }
            (section, laddr)
        };
        let mapping = section.map()?;
        let len = copy_out(mapping.bytes(), vaddr - laddr, buf);
        mapping.check()?;
        Ok(len)
    }

    /// Bounds the bytes of mappings the cache keeps, least recently mapped
    /// out first. `0` unmaps everything and keeps nothing mapped; a section
    /// larger than the limit is never kept. `u64::MAX` (the default) keeps
    /// everything mapped until the cache is dropped.
    pub fn set_limit(&self, limit: u64) {
        let evicted = {
            let mut state = self.state();
            state.limit = limit;
            state.prune()
        };
        // Unmapping happens here, after the lock is released.
        drop(evicted);
    }

    /// The cache's counters.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        let state = self.state();
        CacheStats {
            entries: state.entries.len(),
            sections: state.sections.len(),
            mapped_sections: state.lru.len(),
            mapped_bytes: state.used,
            limit: state.limit,
        }
    }

    /// The isids of the sections the cache keeps mapped, most recently mapped
    /// first (for each section, its first isid).
    #[must_use]
    pub fn mapped_isids(&self) -> Vec<Isid> {
        let state = self.state();
        let mut seen = std::collections::HashSet::new();
        let mut order: Vec<(u64, Isid)> = Vec::new();
        for (number, entry) in (1..).zip(&state.entries) {
            if let (Some(lru), Some(isid)) = (state.lru.get(&entry.section.id), Isid::new(number)) {
                if seen.insert(entry.section.id) {
                    order.push((lru.stamp, isid));
                }
            }
        }
        order.sort_by_key(|&(stamp, _)| std::cmp::Reverse(stamp));
        order.into_iter().map(|(_, isid)| isid).collect()
    }
}

impl CacheShared {
    fn lock(&self) -> MutexGuard<'_, CacheState> {
        // No operation leaves the state inconsistent when it panics between
        // two statements, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A section of this cache was mapped: keep the mapping, most recent first.
    pub(crate) fn notify_map(&self, section: &Section, mapping: &Arc<Mapping>) {
        let evicted = {
            let mut state = self.lock();
            state.clock += 1;
            let stamp = state.clock;
            if let Some(entry) = state.lru.get_mut(&section.id) {
                entry.stamp = stamp;
                if Arc::ptr_eq(&entry.mapping, mapping) {
                    return;
                }
                // The cache let go of an older mapping that someone else kept;
                // hold the current one instead.
                entry.mapping = Arc::clone(mapping);
                return;
            }
            let size = mapping.memsize();
            if size > state.limit {
                return;
            }
            state.lru.insert(
                section.id,
                LruEntry {
                    mapping: Arc::clone(mapping),
                    size,
                    stamp,
                },
            );
            state.used += size;
            state.prune()
        };
        drop(evicted);
    }
}

impl CacheState {
    /// The bytes of a section the cache keeps mapped, marked as most
    /// recently used.
    fn touch(&mut self, section_id: u64) -> Option<&Mapping> {
        self.clock += 1;
        let stamp = self.clock;
        self.lru.get_mut(&section_id).map(|entry| {
            entry.stamp = stamp;
            &*entry.mapping
        })
    }

    /// Drops mappings until `used <= limit`: walking from the most recent,
    /// the first entry that overflows the limit and every older one go.
    /// Returns them, to be unmapped once the lock is released.
    fn prune(&mut self) -> Vec<Arc<Mapping>> {
        if self.used <= self.limit {
            return Vec::new();
        }
        let mut order: Vec<(u64, u64, u64)> = self
            .lru
            .iter()
            .map(|(&id, e)| (e.stamp, id, e.size))
            .collect();
        order.sort_unstable_by_key(|&(stamp, _, _)| std::cmp::Reverse(stamp));
        let mut kept = 0u64;
        let mut evicted = Vec::new();
        let mut cutting = false;
        for (_, id, size) in order {
            if !cutting && kept + size <= self.limit {
                kept += size;
                continue;
            }
            cutting = true;
            if let Some(entry) = self.lru.remove(&id) {
                evicted.push(entry.mapping);
            }
        }
        self.used = kept;
        evicted
    }
}

/// Copies bytes of `section_bytes` from `offset` to its end or until `buf`
/// is full; returns how many.
pub(crate) fn copy_out(section_bytes: &[u8], offset: u64, buf: &mut [u8]) -> usize {
    let start = offset as usize;
    let n = buf.len().min(section_bytes.len() - start);
    buf[..n].copy_from_slice(&section_bytes[start..start + n]);
    n
}

/// Hashes the sections' unique ids: they are small distinct integers, so a
/// multiplication spreads them well and costs a cycle.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}
