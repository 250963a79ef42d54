//! The symbolizer: batches of addresses per object, parsed objects kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::SymbolError;
use crate::frame::frames;
use crate::frame::{unnamed, Frame, Symbolized, Unnamed};
use crate::index::{self, SymbolIndex};
use crate::mapped_file::FileStamp;
use crate::object_file::LoadedObject;

/// How to symbolize.
#[derive(Clone, Debug)]
pub struct SymbolizerOptions {
    /// Where separate debug files live (`/usr/lib/debug` by default).
    pub debug_dirs: Vec<PathBuf>,
    /// Demangle Rust and C++ names (the raw name is kept beside).
    pub demangle: bool,
    /// Report inlined functions as frames of their own.
    pub inlines: bool,
    /// Parsed objects are kept (one per build id, or per path without one)
    /// while the files they map total at most this many bytes; the least
    /// recently used are dropped beyond it.
    pub max_cached_bytes: u64,
    /// Where prepared symbol indexes are kept ([`Symbolizer::build_index`]
    /// writes them). An object with an index here, made from the same
    /// build, is answered from it without reading its DWARF. `None`: no
    /// indexes are read or written.
    pub index_dir: Option<PathBuf>,
}

impl Default for SymbolizerOptions {
    fn default() -> Self {
        Self {
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
            demangle: true,
            inlines: true,
            max_cached_bytes: 4 << 30,
            index_dir: None,
        }
    }
}

/// Symbolizes addresses of object files, keeping each parsed object.
#[derive(Debug, Default)]
pub struct Symbolizer {
    options: SymbolizerOptions,
    cache: Mutex<ObjectCache>,
}

/// What names a parsed object: its build id and size (a stripped and an
/// unstripped file share a build id but not what they can answer), or its
/// path without a build id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    BuildId(Vec<u8>, u64),
    /// A file without a build id: its path and what the file looked like.
    Path(PathBuf, Option<FileStamp>),
}

/// What answers for an object: the object parsed, or its index.
#[derive(Clone, Debug)]
enum Answers {
    Parsed(Arc<Mutex<LoadedObject>>),
    Indexed(Arc<SymbolIndex>),
}

#[derive(Debug)]
struct Cached {
    object: Answers,
    bytes: u64,
    used: u64,
}

/// Parsed objects by key, paths to keys, and a least-recently-used bound.
#[derive(Debug, Default)]
struct ObjectCache {
    /// Each path's object, with what the file looked like when it was
    /// keyed: a file rebuilt in place is keyed (and parsed) afresh.
    paths: HashMap<PathBuf, (Key, Option<FileStamp>)>,
    objects: HashMap<Key, Cached>,
    clock: u64,
    bytes: u64,
}

impl ObjectCache {
    fn get(&mut self, key: &Key) -> Option<Answers> {
        self.clock += 1;
        let clock = self.clock;
        self.objects.get_mut(key).map(|c| {
            c.used = clock;
            c.object.clone()
        })
    }

    fn insert(&mut self, key: &Key, object: Answers, bytes: u64, limit: u64) {
        self.clock += 1;
        self.bytes += bytes;
        // Two threads may have parsed the same object: count it once.
        if let Some(old) = self.objects.insert(
            key.clone(),
            Cached {
                object,
                bytes,
                used: self.clock,
            },
        ) {
            self.bytes -= old.bytes;
        }
        while self.bytes > limit && self.objects.len() > 1 {
            let Some(oldest) = self
                .objects
                .iter()
                .filter(|(k, _)| *k != key)
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(c) = self.objects.remove(&oldest) {
                self.bytes -= c.bytes;
            }
            self.paths.retain(|_, (k, _)| *k != oldest);
        }
    }
}

impl Symbolizer {
    /// A symbolizer with these options.
    #[must_use]
    pub fn new(options: SymbolizerOptions) -> Self {
        Self {
            options,
            cache: Mutex::new(ObjectCache::default()),
        }
    }

    /// Drops what answers for `path` from the cache: one of its files was
    /// cut short under its mapping.
    fn forget(&self, path: &Path) {
        let mut cache = self.lock();
        if let Some((key, _)) = cache.paths.remove(path) {
            if let Some(c) = cache.objects.remove(&key) {
                cache.bytes -= c.bytes;
            }
            cache.paths.retain(|_, (k, _)| *k != key);
        }
    }

    /// What answers for `path`: its index, or the object parsed on first
    /// use. DWARF lookups keep lazily parsed state, so each parsed object
    /// is used by one thread at a time.
    fn object(&self, path: &Path) -> Result<Answers, SymbolError> {
        // One stat per batch: a path whose file changed since it was keyed
        // (rebuilt, replaced) must not answer from the old object.
        let mut stamp = FileStamp::of(path);
        {
            let mut cache = self.lock();
            if let Some((key, seen)) = cache.paths.get(path).cloned() {
                if stamp.is_some() && seen == stamp {
                    if let Some(o) = cache.get(&key) {
                        return Ok(o);
                    }
                }
            }
        }
        // The same file under another path (or a copy) is the same object:
        // key it by build id, read from the headers only (the headers of
        // the file stamped: looked at again after).
        let mut key = Self::key(path, stamp);
        for _ in 0..3 {
            let now = FileStamp::of(path);
            if now == stamp {
                break;
            }
            stamp = now;
            key = Self::key(path, stamp);
        }
        {
            let mut cache = self.lock();
            if let Some(o) = cache.get(&key) {
                cache.paths.insert(path.to_path_buf(), (key, stamp));
                return Ok(o);
            }
        }
        let (answers, bytes) = if let Some(index) = self.open_index(&key) {
            let bytes = index.len_bytes();
            (Answers::Indexed(Arc::new(index)), bytes)
        } else {
            let loaded = LoadedObject::load(path, &self.options.debug_dirs)?;
            let bytes = loaded.mapped_bytes;
            // The file read is what answers: if the path named another by
            // then, the answers are keyed as that file, and its stamp is
            // what the path is held to at the next look.
            let read = loaded.stamp();
            if read.is_some() && read != stamp {
                stamp = read;
                key = match &loaded.build_id {
                    Some(id) => Key::BuildId(id.clone(), read.map_or(0, |s| s.size)),
                    None => Key::Path(path.to_path_buf(), read),
                };
            }
            (Answers::Parsed(Arc::new(Mutex::new(loaded))), bytes)
        };
        let mut cache = self.lock();
        cache.paths.insert(path.to_path_buf(), (key.clone(), stamp));
        cache.insert(&key, answers.clone(), bytes, self.options.max_cached_bytes);
        Ok(answers)
    }

    /// The key of the object at `path`, whose file has `stamp`.
    fn key(path: &Path, stamp: Option<FileStamp>) -> Key {
        match crate::object_file::build_id_of(path) {
            Some(id) => Key::BuildId(id, stamp.map_or(0, |s| s.size)),
            None => Key::Path(path.to_path_buf(), stamp),
        }
    }

    /// The index that answers for the object `key` names: one made from
    /// this build, whose debug file is unchanged. Indexes hold inlined
    /// frames, so a symbolizer without them reads the DWARF.
    fn open_index(&self, key: &Key) -> Option<SymbolIndex> {
        if !self.options.inlines {
            return None;
        }
        self.find_index(key)
    }

    /// The index kept for the object `key` names, if there is one made
    /// from this build of the object by this build of ichnos, and its
    /// debug file is unchanged.
    fn find_index(&self, key: &Key) -> Option<SymbolIndex> {
        let (Key::BuildId(id, size), Some(dir)) = (key, &self.options.index_dir) else {
            return None;
        };
        let index = SymbolIndex::open(&dir.join(SymbolIndex::file_name(id, *size))).ok()?;
        (index.build_id() == id.as_slice()
            && index.object_size() == *size
            && index.made_by_this_build()
            && index.debug_file_unchanged())
        .then_some(index)
    }

    /// The index kept for the object at `path`: one in the index directory
    /// made from this build, with its debug file unchanged (it answers
    /// unless inlined frames are turned off). Where it answers, it is kept
    /// as the object's answers: the symbolization that follows is not
    /// made to open and check the file again.
    #[must_use]
    pub fn usable_index(&self, path: &Path) -> Option<Arc<SymbolIndex>> {
        let stamp = FileStamp::of(path)?;
        let build_id = crate::object_file::build_id_of(path)?;
        let key = Key::BuildId(build_id, stamp.size);
        if let Some(Answers::Indexed(index)) = self.lock().get(&key) {
            return Some(index);
        }
        let index = Arc::new(self.find_index(&key)?);
        if self.options.inlines {
            let mut cache = self.lock();
            cache
                .paths
                .insert(path.to_path_buf(), (key.clone(), Some(stamp)));
            cache.insert(
                &key,
                Answers::Indexed(Arc::clone(&index)),
                index.len_bytes(),
                self.options.max_cached_bytes,
            );
        }
        Some(index)
    }

    /// The index answering for the object at `path`, if an index answers
    /// for it (else the object is parsed, ready for the batches to come).
    pub fn index_of(&self, path: &Path) -> Result<Option<Arc<SymbolIndex>>, SymbolError> {
        Ok(match self.object(path)? {
            Answers::Indexed(index) => Some(index),
            Answers::Parsed(_) => None,
        })
    }

    /// Makes the symbol index of the object at `path` and keeps it in the
    /// index directory, replacing any older one; later batches for this
    /// build are answered from it. `progress` is told (steps done, steps
    /// in all) as the work goes. Objects without a build id, without DWARF
    /// (their symbol tables are fast to read as they are) or with debug
    /// information found incomplete are not indexed.
    pub fn build_index(
        &self,
        path: &Path,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<SymbolIndex, SymbolError> {
        let refuse = |reason: String| SymbolError::NotIndexed {
            path: path.to_path_buf(),
            reason,
        };
        let Some(dir) = &self.options.index_dir else {
            return Err(refuse("no index directory is set".into()));
        };
        // Parsed first: a file that is unreadable or not ELF says so, not
        // that it lacks a build id.
        let object = LoadedObject::load(path, &self.options.debug_dirs)?;
        // The size and build id of the file read, which the index is keyed
        // by.
        let size = object.stamp().map_or(0, |s| s.size);
        let Some(build_id) = object.build_id.clone() else {
            return Err(refuse("it has no build id to key its index by".into()));
        };
        let contents = index::build(&object, &build_id, size, progress).map_err(refuse)?;
        // An index made from zeros would answer wrongly for good.
        if let Some(cut) = object.truncated() {
            return Err(SymbolError::FileChanged { path: cut });
        }
        // The parsed DWARF is not needed to write the file.
        drop(object);
        let target = dir.join(SymbolIndex::file_name(&build_id, size));
        let io = |source| SymbolError::Io {
            path: target.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|source| SymbolError::Io {
            path: dir.clone(),
            source,
        })?;
        // Written aside and renamed into place: a reader maps either the
        // old file or the new one whole, never one half written.
        let (temp, file) = tempfile_in(dir).map_err(io)?;
        let mut writer = std::io::BufWriter::new(file);
        let written = contents
            .write_to(&mut writer)
            .and_then(|()| {
                writer
                    .into_inner()
                    .map_err(std::io::IntoInnerError::into_error)
            })
            .and_then(|file| file.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io(e));
        }
        std::fs::rename(&temp, &target).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            io(e)
        })?;
        let key = Key::BuildId(build_id, size);
        let mut cache = self.lock();
        if let Some(c) = cache.objects.remove(&key) {
            cache.bytes -= c.bytes;
        }
        cache.paths.retain(|_, (k, _)| *k != key);
        drop(cache);
        SymbolIndex::open(&target)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ObjectCache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes of DWARF (as stored) that symbolizing the object at `path`
    /// reads, in the file or its separate debug file; 0 when it has none.
    /// What an index saves grows with it: loading DWARF means
    /// decompressing and walking all of it.
    pub fn dwarf_size(&self, path: &Path) -> Result<u64, SymbolError> {
        crate::object_file::dwarf_size(path, &self.options.debug_dirs)
    }

    /// Where symbol indexes are kept, if anywhere.
    #[must_use]
    pub fn index_dir(&self) -> Option<&Path> {
        self.options.index_dir.as_deref()
    }

    /// How many parsed objects are kept.
    #[must_use]
    pub fn cached_objects(&self) -> usize {
        self.lock().objects.len()
    }

    /// Debug files found for `path` but refused (a CRC that does not
    /// match), each with the reason.
    pub fn refused_debug_files(&self, path: &Path) -> Result<Vec<String>, SymbolError> {
        match self.object(path)? {
            Answers::Parsed(object) => Ok(object
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .refused
                .clone()),
            // Only objects whose debug information was complete are indexed.
            Answers::Indexed(_) => Ok(Vec::new()),
        }
    }

    /// Symbolizes `addrs`, virtual addresses of the object file at `path`
    /// as its program headers place it (what `addr2line -e` takes).
    pub fn symbolize_file(
        &self,
        path: &Path,
        addrs: &[u64],
    ) -> Result<Vec<Symbolized>, SymbolError> {
        let object = match self.object(path)? {
            Answers::Parsed(object) => object,
            Answers::Indexed(index) => {
                let frames = index.frames(addrs, self.options.demangle);
                let unnamed: Vec<Option<Unnamed>> =
                    addrs.iter().map(|&addr| index.unnamed(addr)).collect();
                if index.truncated() {
                    self.forget(path);
                    return Err(SymbolError::FileChanged {
                        path: index.path().to_path_buf(),
                    });
                }
                return Ok(addrs
                    .iter()
                    .zip(frames)
                    .zip(unnamed)
                    .map(|((&addr, frames), unnamed)| Symbolized {
                        addr,
                        frames,
                        source: index.source().clone(),
                        unnamed,
                    })
                    .collect());
            }
        };
        let object = object
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // In address order, so DWARF units are parsed and walked once; the
        // answers go back in the order asked.
        let mut order: Vec<usize> = (0..addrs.len()).collect();
        order.sort_by_key(|&i| addrs[i]);
        let mut out: Vec<Option<Symbolized>> = vec![None; addrs.len()];
        for i in order {
            let frames = frames(
                &object,
                addrs[i],
                self.options.demangle,
                self.options.inlines,
            );
            let unknown = frames.len() == 1 && frames[0] == Frame::default();
            out[i] = Some(Symbolized {
                addr: addrs[i],
                frames,
                source: object.source.clone(),
                unnamed: unknown.then(|| unnamed(&object, addrs[i])),
            });
        }
        // A file cut short under its mapping read as zeros past its new
        // end: answers made from them are not the file's, and the object
        // is parsed afresh next time.
        if let Some(cut) = object.truncated() {
            drop(object);
            self.forget(path);
            return Err(SymbolError::FileChanged { path: cut });
        }
        Ok(out.into_iter().flatten().collect())
    }
}

/// A new file in `dir` for writing, with its path: created exclusively
/// under a name no other writer picks.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".tmp-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}
