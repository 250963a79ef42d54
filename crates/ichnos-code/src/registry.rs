//! The code registry: a user-space re-creation of the codectl(2) proposal.
//!
//! Loaders register ELF code (text range, SFrame section, path, build id,
//! debug link) and JITs register text ranges with a JIT unwind table.
//! Lookups by instruction address read an immutable snapshot of the map
//! (an atomic pointer load), so a profiler looking up every frame never
//! waits for a registering thread, and registering never waits for lookups.
//! Registrations take a writer lock among themselves and publish a new
//! snapshot.
//!
//! Unwind rows are made once per registration: SFrame sections are read
//! from memory and decoded; ELF code without SFrame gets its `.eh_frame`
//! converted from the file at `path`. Both are cached per build id, so the
//! same library registered again (or in another process model) is not
//! converted twice.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use crate::code_map::{CodeMap, CodeObject, FindRow, Lookup, Overlap, RowSource, Rows};
use crate::elf::RowChoice;
use crate::jit::{JitRows, JitUnwindTable};
use crate::memory::{Memory, MemoryError, ProcessMemory};
pub use crate::registration::{ElfCode, JitCode, Publish, Registration};
use crate::row::RowTable;
use crate::sframe::{SframeError, SframeSection};

/// Largest object file opened to convert its `.eh_frame` (read in the
/// pieces parsing needs, not whole).
pub const MAX_OBJECT_FILE: u64 = 4 << 30;

/// Largest SFrame section read from memory (the SFrame of a 1 GiB binary is
/// a few tens of MiB).
pub const MAX_SFRAME_LEN: u64 = 256 << 20;

/// Why a registration failed. [`RegistryError::errno`] gives the codectl
/// error number.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// An argument is not valid.
    #[error("invalid argument: {0}")]
    InvalidArgument(Invalid),
    /// The object file a registration names could not be read for its
    /// `.eh_frame` rows.
    #[error("{path}: cannot read its unwind rows")]
    ObjectFile {
        /// The file, as the registration names it.
        path: PathBuf,
        /// Why.
        source: ObjectFileError,
    },
    /// The text range overlaps a registered one.
    #[error(transparent)]
    Overlap(#[from] Overlap),
    /// Nothing is registered at the address.
    #[error("no code registered at {0:#x}")]
    NotFound(u64),
    /// The SFrame section is malformed.
    #[error("SFrame section at {addr:#x}: {source}")]
    Sframe {
        /// Where the section is.
        addr: u64,
        /// What is wrong.
        source: SframeError,
    },
    /// Memory for the registration could not be allocated.
    #[error("out of memory allocating {bytes} bytes for {what}")]
    NoMemory {
        /// What was being allocated.
        what: &'static str,
        /// How much.
        bytes: usize,
    },
    /// Memory named by the registration could not be read.
    #[error("{what}: {source}")]
    Memory {
        /// What was being read.
        what: &'static str,
        /// The failed read.
        source: MemoryError,
    },
}

/// What is wrong with a registration's arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// A range whose start is not below its end.
    #[error("{what} range [{:#x}, {:#x}) is empty or reversed", range.start, range.end)]
    EmptyRange {
        /// Which range (`text`, `sframe`).
        what: &'static str,
        /// The range.
        range: Range<u64>,
    },
    /// An ELF range whose start is above its end.
    #[error("ELF range start {:#x} is above its end {:#x}", elf.start, elf.end)]
    ReversedElfRange {
        /// The range.
        elf: Range<u64>,
    },
    /// A text range outside its ELF range.
    #[error("text range [{:#x}, {:#x}) is not inside the ELF range [{:#x}, {:#x})", text.start, text.end, elf.start, elf.end)]
    TextOutsideElf {
        /// The text range.
        text: Range<u64>,
        /// The ELF range.
        elf: Range<u64>,
    },
    /// An SFrame section larger than is read.
    #[error("SFrame section of {0} bytes is larger than {MAX_SFRAME_LEN}")]
    SframeTooLarge(u64),
    /// A build id longer than 64 bytes.
    #[error("build id of {0} bytes is longer than 64")]
    BuildIdTooLong(usize),
}

/// Why a registered object file could not give its rows.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectFileError {
    /// It could not be opened (or is not a regular file) or read.
    #[error(transparent)]
    Io(std::io::Error),
    /// It is larger than is read.
    #[error("larger than {MAX_OBJECT_FILE} bytes")]
    TooLarge,
    /// It is not an ELF file.
    #[error("not a readable ELF file")]
    NotElf(#[source] object::Error),
    /// Its build id is not the one the registration gives: its rows are
    /// not kept under that id.
    #[error("its build id is not the one registered")]
    OtherBuild,
    /// Its rows could not be made.
    #[error(transparent)]
    Rows(crate::elf::FileRowsError),
}

impl RegistryError {
    /// The negative errno codectl returns for this error.
    #[must_use]
    pub fn errno(&self) -> i32 {
        -match self {
            Self::InvalidArgument(_) | Self::ObjectFile { .. } | Self::Sframe { .. } => {
                libc::EINVAL
            }
            Self::Overlap(_) => libc::EEXIST,
            Self::NotFound(_) => libc::ENOENT,
            Self::Memory { .. } => libc::EFAULT,
            Self::NoMemory { .. } => libc::ENOMEM,
        }
    }
}

/// Rows converted per build id and source, shared by every registration of
/// the same file in every registry of this process (a recorder keeps one
/// registry per traced process; libc is converted once), with the section
/// they were converted from. Entries are weak: a table is freed when its
/// last registration goes.
type RowCacheMap = HashMap<(Vec<u8>, RowChoice), (WeakRows, RowSource)>;

/// Rows the cache keeps without keeping them alive.
#[derive(Debug)]
enum WeakRows {
    Fixed(std::sync::Weak<RowTable>),
    Lazy(std::sync::Weak<crate::lazy::LazyRows>),
}

impl WeakRows {
    fn of(rows: &Rows) -> Option<WeakRows> {
        match rows {
            Rows::Fixed(t) => Some(WeakRows::Fixed(Arc::downgrade(t))),
            Rows::Lazy(l) => Some(WeakRows::Lazy(Arc::downgrade(l))),
            Rows::Jit(_) => None,
        }
    }

    fn upgrade(&self) -> Option<Rows> {
        match self {
            WeakRows::Fixed(t) => t.upgrade().map(Rows::Fixed),
            WeakRows::Lazy(l) => l.upgrade().map(Rows::Lazy),
        }
    }

    fn alive(&self) -> bool {
        match self {
            WeakRows::Fixed(t) => t.strong_count() > 0,
            WeakRows::Lazy(l) => l.strong_count() > 0,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct RowCache {
    tables: Mutex<RowCacheMap>,
}

pub(crate) fn row_cache() -> &'static RowCache {
    static CACHE: OnceLock<RowCache> = OnceLock::new();
    CACHE.get_or_init(RowCache::default)
}

impl RowCache {
    /// The rows made for `build_id` with `choice`, and the section they
    /// came from: those made before while they live, else `make`'s.
    pub(crate) fn get_or_make<E>(
        &self,
        build_id: Option<&[u8]>,
        choice: RowChoice,
        make: impl FnOnce() -> Result<(Rows, RowSource), E>,
    ) -> Result<(Rows, RowSource), E> {
        let Some(id) = build_id.filter(|id| !id.is_empty()) else {
            return make();
        };
        if let Some(made) = self.get(Some(id), choice) {
            return Ok(made);
        }
        let key = (id.to_vec(), choice);
        let (rows, source) = make()?;
        if let Some(weak) = WeakRows::of(&rows) {
            let mut map = self.lock();
            map.retain(|_, (weak, _)| weak.alive());
            map.insert(key, (weak, source));
        }
        Ok((rows, source))
    }

    /// The rows made for `build_id` with `choice`, and their section, if
    /// they live.
    pub(crate) fn get(
        &self,
        build_id: Option<&[u8]>,
        choice: RowChoice,
    ) -> Option<(Rows, RowSource)> {
        let id = build_id.filter(|id| !id.is_empty())?;
        self.lock()
            .get(&(id.to_vec(), choice))
            .and_then(|(weak, source)| Some((weak.upgrade()?, *source)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RowCacheMap> {
        self.tables
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Entry {
    registration: Registration,
    _keep_alive: Option<Arc<JitUnwindTable>>,
}

/// The registrations in registration order, found by text start: adding
/// and removing one is O(log n), not a walk of them all.
#[derive(Default)]
struct Entries {
    by_order: std::collections::BTreeMap<u64, Entry>,
    order_of: std::collections::HashMap<u64, u64>,
    next: u64,
}

impl Entries {
    fn push(&mut self, entry: Entry) {
        self.order_of
            .insert(entry.registration.text().start, self.next);
        self.by_order.insert(self.next, entry);
        self.next += 1;
    }

    fn remove(&mut self, text_start: u64) {
        if let Some(order) = self.order_of.remove(&text_start) {
            self.by_order.remove(&order);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.by_order.values()
    }
}

/// A code registry for one process (see the module documentation).
pub struct Registry {
    map: ArcSwap<CodeMap>,
    writer: Mutex<Entries>,
    pid: u32,
    /// Told of each registration made and removed.
    publisher: Option<&'static dyn Publish>,
    /// Text ranges registered by [`crate::register_loaded_objects`], by
    /// their start, with the loaded object they belong to.
    loader_texts: Mutex<std::collections::HashMap<u64, crate::loaded::LoadedText>>,
    /// The perf map kept written, open to add a line per registration.
    perf_map: Mutex<Option<std::fs::File>>,
    /// The jitdump file kept written.
    jitdump: Mutex<Option<crate::jitdump::JitDump>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("pid", &self.pid)
            .field("objects", &self.map.load().len())
            .finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// An empty registry for code in this process.
    #[must_use]
    pub fn new() -> Self {
        Self::for_process(std::process::id())
    }

    /// An empty registry whose addresses are in process `pid` (SFrame
    /// sections and JIT tables are read from its memory).
    #[must_use]
    pub fn for_process(pid: u32) -> Self {
        Self {
            map: ArcSwap::from_pointee(CodeMap::new()),
            writer: Mutex::new(Entries::default()),
            pid,
            publisher: None,
            loader_texts: Mutex::new(std::collections::HashMap::new()),
            perf_map: Mutex::new(None),
            jitdump: Mutex::new(None),
        }
    }

    /// An empty registry for code in this process that tells `publish`
    /// of each registration it makes and removes.
    #[must_use]
    pub fn published(publish: &'static dyn Publish) -> Self {
        Self {
            publisher: Some(publish),
            ..Self::new()
        }
    }

    pub(crate) fn loader_texts(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, crate::loaded::LoadedText>> {
        self.loader_texts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers ELF code; its unwind rows come from the SFrame section if
    /// given, else from the `.eh_frame` of the file at `path`, else there
    /// are none (frame pointers only).
    pub fn register_elf(&self, code: ElfCode) -> Result<(), RegistryError> {
        check_range("text", &code.text)?;
        // An empty ELF range (both 0) means the text range; a reversed one
        // is a mistake, not that.
        if code.elf.start > code.elf.end {
            return Err(RegistryError::InvalidArgument(Invalid::ReversedElfRange {
                elf: code.elf.clone(),
            }));
        }
        let elf = if code.elf.is_empty() {
            code.text.clone()
        } else {
            code.elf.clone()
        };
        if elf.start > code.text.start || elf.end < code.text.end {
            return Err(RegistryError::InvalidArgument(Invalid::TextOutsideElf {
                text: code.text.clone(),
                elf,
            }));
        }
        if let Some(s) = &code.sframe {
            check_range("sframe", s)?;
            if s.end - s.start > MAX_SFRAME_LEN {
                return Err(RegistryError::InvalidArgument(Invalid::SframeTooLarge(
                    s.end - s.start,
                )));
            }
        }
        if let Some(id) = code.build_id.as_ref().filter(|b| b.len() > 64) {
            return Err(RegistryError::InvalidArgument(Invalid::BuildIdTooLong(
                id.len(),
            )));
        }
        let mut entries = self.entries();
        // Fail on overlap before doing any conversion work.
        self.map.load().check_free(code.text.start, code.text.end)?;
        let (rows, source) = self.elf_rows(&code, elf.start)?;
        let name: Arc<str> = code.path.as_ref().map_or_else(
            || Arc::from("[elf]"),
            |p| Arc::from(p.to_string_lossy().as_ref()),
        );
        let object = CodeObject {
            start: code.text.start,
            end: code.text.end,
            bias: elf.start,
            rows,
            source,
            name,
        };
        self.publish(&mut entries, object, Registration::Elf(code), None)
    }

    fn elf_rows(&self, code: &ElfCode, elf_start: u64) -> Result<(Rows, RowSource), RegistryError> {
        // Rows are shared by build id only when counted from a real ELF
        // range start; a registration without one counts from its text.
        let build_id = code.build_id.as_deref().filter(|_| !code.elf.is_empty());
        if let Some(range) = &code.sframe {
            let len = (range.end - range.start) as usize;
            let mut bytes = Vec::new();
            bytes
                .try_reserve_exact(len)
                .map_err(|_| RegistryError::NoMemory {
                    what: "a copy of the SFrame section",
                    bytes: len,
                })?;
            bytes.resize(len, 0);
            ProcessMemory::new(self.pid)
                .read(range.start, &mut bytes)
                .map_err(|source| RegistryError::Memory {
                    what: "reading the SFrame section",
                    source,
                })?;
            // The section comes from the registering process, which is not
            // trusted: the cache key names its bytes as well as the build
            // id, so a process that lies about a build id cannot give other
            // registrations its rows.
            let key = build_id.map(|id| {
                let mut hasher = std::hash::DefaultHasher::new();
                std::hash::Hash::hash(&bytes, &mut hasher);
                let mut key = id.to_vec();
                key.extend(std::hash::Hasher::finish(&hasher).to_le_bytes());
                key
            });
            let rows = row_cache().get_or_make(key.as_deref(), RowChoice::Sframe, || {
                let section = SframeSection::parse(&bytes, range.start).map_err(|source| {
                    RegistryError::Sframe {
                        addr: range.start,
                        source,
                    }
                })?;
                // Counted from the ELF start, the table serves this object at
                // any load address (and is shared per build id).
                let conversion = section.to_rows_from(elf_start);
                Ok::<_, RegistryError>((
                    Rows::Fixed(Arc::new(conversion.table.rebased(0))),
                    RowSource::Sframe,
                ))
            })?;
            return Ok(rows);
        }
        // .eh_frame rows count from the file's first PT_LOAD page, so they
        // need the ELF range to be placed. Rows already made for the build
        // id serve without the file (a hit reads nothing of it, and a file
        // gone since it was loaded still has them); a miss reads the file.
        if !code.elf.is_empty() && (code.path.is_some() || build_id.is_some()) {
            let made = row_cache().get_or_make(build_id, RowChoice::EhFrame, || {
                let Some(path) = code.path.as_ref() else {
                    return Err(RegistryError::ObjectFile {
                        path: PathBuf::new(),
                        source: ObjectFileError::Io(std::io::ErrorKind::NotFound.into()),
                    });
                };
                let (opened, len) = self.open_object_file(path)?;
                // Read in the pieces parsing asks for (headers, symbol
                // tables, the unwind sections), never past the length
                // checked when it was opened, not the whole file. The
                // file's addresses are link-time, counted here from the
                // page of its first PT_LOAD, as the ELF range is.
                let cache = object::ReadCache::new(opened);
                let data = cache.range(0, len);
                let bad = |source| RegistryError::ObjectFile {
                    path: path.clone(),
                    source,
                };
                let file =
                    object::File::parse(data).map_err(|e| bad(ObjectFileError::NotElf(e)))?;
                // Kept under the registration's build id only if the file
                // has it (a registrant may misstate it).
                if let Some(id) = build_id {
                    use object::Object;
                    if file.build_id().ok().flatten() != Some(id) {
                        return Err(bad(ObjectFileError::OtherBuild));
                    }
                }
                // (Named for the section the file's CFI came from: its
                // .debug_frame or Go's table where .eh_frame falls short.)
                let source = crate::process::row_source(&file, RowChoice::EhFrame, false);
                crate::elf::object_rows(&file, RowChoice::EhFrame)
                    .map(|rows| (rows, source))
                    .map_err(|e| bad(ObjectFileError::Rows(e)))
            });
            if let Ok(made) = made {
                return Ok(made);
            }
        }
        Ok((Rows::Fixed(Arc::new(RowTable::new(0))), RowSource::None))
    }

    /// Opens an object file named by a registration, with its length. The
    /// name comes from the registering process, which may be another one
    /// and is not trusted: only a regular file of at most
    /// [`MAX_OBJECT_FILE`] bytes is opened, seen from that process's root
    /// directory.
    fn open_object_file(
        &self,
        path: &std::path::Path,
    ) -> Result<(std::fs::File, u64), RegistryError> {
        let seen = if self.pid == std::process::id() {
            path.to_path_buf()
        } else {
            let relative = path.strip_prefix("/").unwrap_or(path);
            PathBuf::from(format!("/proc/{}/root", self.pid)).join(relative)
        };
        let bad = |source| RegistryError::ObjectFile {
            path: path.to_path_buf(),
            source,
        };
        // open_regular refuses what is not a regular file.
        let file = ichnos_image::open_regular(&seen).map_err(|e| bad(ObjectFileError::Io(e)))?;
        let meta = file.metadata().map_err(|e| bad(ObjectFileError::Io(e)))?;
        if meta.len() > MAX_OBJECT_FILE {
            return Err(bad(ObjectFileError::TooLarge));
        }
        Ok((file, meta.len()))
    }

    /// Registers JIT code whose rows are read from its table chain.
    pub fn register_jit(&self, code: JitCode) -> Result<(), RegistryError> {
        check_range("text", &code.text)?;
        let mut entries = self.entries();
        let jit = JitRows::new(self.pid, code.text.start, code.text.end, code.unwind_head);
        // Read what is published now, so the rows outlive a target that
        // exits before the first lookup.
        jit.refresh();
        let object = CodeObject {
            start: code.text.start,
            end: code.text.end,
            bias: 0,
            rows: Rows::Jit(Arc::new(jit)),
            source: RowSource::Jit,
            name: Arc::from(code.name.as_deref().unwrap_or("[jit]")),
        };
        let registration = Registration::Jit {
            text: code.text.clone(),
            unwind_head: code.unwind_head,
            name: code.name.clone(),
        };
        self.publish(&mut entries, object, registration, code.keep_alive)?;
        let mut kept = self
            .perf_map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = kept.as_mut() {
            let line = crate::perf_map::line(
                code.text.start,
                code.text.end,
                code.name.as_deref().unwrap_or("[jit]"),
            );
            // The registration stands whatever the map's fate: a map that
            // cannot be written stops being kept.
            if std::io::Write::write_all(file, line.as_bytes()).is_err() {
                *kept = None;
            }
        }
        drop(kept);
        let mut dump = self
            .jitdump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(d) = dump.as_mut() {
            let name = code.name.as_deref().unwrap_or("[jit]");
            if d.code_load(code.text.start, code.text.end, name).is_err() {
                *dump = None;
            }
        }
        Ok(())
    }

    /// Keeps a jitdump file of this process's JIT code written (`on`):
    /// creates it (see [`crate::jitdump`]) with a code load for every JIT
    /// registration so far, then adds one per registration as it is made;
    /// or closes it (`!on`). Returns the file's path when `on`. Only the
    /// registry of this process writes one (the code is read from it).
    pub fn keep_jitdump(&self, on: bool) -> std::io::Result<Option<PathBuf>> {
        let entries = self.entries();
        let mut dump = self
            .jitdump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(old) = dump.take() {
            old.close()?;
        }
        if !on {
            return Ok(None);
        }
        if self.pid != std::process::id() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "a jitdump file is written by the process whose code it holds",
            ));
        }
        let mut d = crate::jitdump::JitDump::create()?;
        for e in entries.iter() {
            if let Registration::Jit { text, name, .. } = &e.registration {
                d.code_load(text.start, text.end, name.as_deref().unwrap_or("[jit]"))?;
            }
        }
        let path = d.path().to_path_buf();
        *dump = Some(d);
        Ok(Some(path))
    }

    /// Writes the perf map of this registry's JIT code,
    /// `/tmp/perf-PID.map`, whole (see [`crate::perf_map`]), so that perf
    /// and samply name the frames the registry names. Returns its path.
    pub fn write_perf_map(&self) -> std::io::Result<PathBuf> {
        let path = crate::perf_map::perf_map_path(self.pid);
        let entries = self.entries();
        let mut kept = self
            .perf_map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        crate::perf_map::replace(
            &path,
            &crate::perf_map::lines(entries.iter().map(|e| &e.registration)),
        )?;
        // A map kept written goes on in the new file, not the old one.
        if kept.is_some() {
            *kept = crate::perf_map::open_for_append(&path).ok();
        }
        Ok(path)
    }

    /// Writes the perf map to `path` instead.
    pub fn write_perf_map_to(&self, path: &Path) -> std::io::Result<()> {
        let entries = self.entries();
        crate::perf_map::replace(
            path,
            &crate::perf_map::lines(entries.iter().map(|e| &e.registration)),
        )
    }

    /// Keeps the perf map written (`on`): writes it now, and then adds a
    /// line for every JIT registration as it is made; or stops (`!on`).
    /// A registration removed keeps its line (perf maps have no removal;
    /// a later registration of the range adds the line readers take).
    pub fn keep_perf_map(&self, on: bool) -> std::io::Result<()> {
        // The registrations' lock first, as register_jit takes them: no
        // registration falls between the map written and the one kept.
        let entries = self.entries();
        let mut kept = self
            .perf_map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *kept = None;
        if on {
            let path = crate::perf_map::perf_map_path(self.pid);
            crate::perf_map::replace(
                &path,
                &crate::perf_map::lines(entries.iter().map(|e| &e.registration)),
            )?;
            *kept = Some(crate::perf_map::open_for_append(&path)?);
        }
        Ok(())
    }

    fn publish(
        &self,
        entries: &mut Entries,
        object: CodeObject,
        registration: Registration,
        keep_alive: Option<Arc<JitUnwindTable>>,
    ) -> Result<(), RegistryError> {
        let mut map = CodeMap::clone(&self.map.load());
        map.insert(Arc::new(object))?;
        self.map.store(Arc::new(map));
        if let Some(publish) = self.publisher {
            publish.added(&registration);
        }
        entries.push(Entry {
            registration,
            _keep_alive: keep_alive,
        });
        Ok(())
    }

    /// Removes the registration whose text range starts at `text_start`.
    pub fn unregister(&self, text_start: u64) -> Result<(), RegistryError> {
        let mut entries = self.entries();
        let mut map = CodeMap::clone(&self.map.load());
        map.remove(text_start)
            .ok_or(RegistryError::NotFound(text_start))?;
        self.map.store(Arc::new(map));
        entries.remove(text_start);
        // Whoever unregistered it, a later walk of the loaded objects
        // must not take it for still registered.
        self.loader_texts().remove(&text_start);
        if let Some(publish) = self.publisher {
            publish.removed(text_start);
        }
        Ok(())
    }

    /// The code object containing `addr`. Never waits for a registration.
    #[must_use]
    pub fn lookup(&self, addr: u64) -> Option<Arc<CodeObject>> {
        self.map.load().find(addr).cloned()
    }

    /// The current map, to unwind many frames against one snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Arc<CodeMap> {
        self.map.load_full()
    }

    /// Every registration, in registration order.
    #[must_use]
    pub fn registrations(&self) -> Vec<Registration> {
        self.entries()
            .iter()
            .map(|e| e.registration.clone())
            .collect()
    }
}

impl FindRow for Registry {
    fn find_row(&self, pc: u64) -> Lookup {
        self.map.load().find_row(pc)
    }

    /// The current snapshot's: a cache is cleared by the next walk after a
    /// registration (unwinding against [`Registry::snapshot`] is exact).
    fn generation(&self) -> Option<u64> {
        self.map.load().generation()
    }

    fn evaluate_cfi(
        &self,
        pc: u64,
        regs: crate::Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Result<crate::cfi::CfiStep, crate::cfi::CfiError>> {
        self.map.load().evaluate_cfi(pc, regs, read)
    }
}

fn check_range(what: &'static str, r: &Range<u64>) -> Result<(), RegistryError> {
    if r.start >= r.end {
        return Err(RegistryError::InvalidArgument(Invalid::EmptyRange {
            what,
            range: r.clone(),
        }));
    }
    Ok(())
}
