//! Prepared symbol indexes: an object's answers, worked out once and kept
//! in a file.
//!
//! Reading DWARF afresh for every batch costs most of a symbolizer's time
//! (unit line tables and inlined-function trees parsed, names demangled).
//! An index holds, for every address range of an object, the frames the
//! symbolizer would give — function names raw and demangled, files, lines,
//! inlined frames — so a lookup is one binary search and a few loads, as
//! with LLVM's GSYM or Sentry's symcache. It is keyed by build id and file
//! size and records the separate debug file it was made from, so a changed
//! one is noticed; docs/symbol-index.md specifies the file.

mod build;
pub(crate) mod format;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use self::format::{
    u32_at, u64_at, Header, RawFrame, FRAME_SIZE, HAS_COLUMN, HAS_LINE, HAS_START, INLINED, LAST,
    NONE,
};
use crate::debug_file::DebugSource;
use crate::error::SymbolError;
use crate::frame::Frame;
use crate::mapped_file::{FileStamp, MappedFile};

pub(crate) use build::build;

/// The bytes of an index: a mapped file, or bytes handed over.
enum Bytes {
    Mapped(MappedFile),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// An opened, checked symbol index.
pub struct SymbolIndex {
    bytes: Bytes,
    header: Header,
    path: PathBuf,
    source: DebugSource,
    /// Each string, made once it is first handed out.
    strings: Mutex<Vec<Option<Arc<str>>>>,
}

impl std::fmt::Debug for SymbolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymbolIndex")
            .field("path", &self.path)
            .field("ranges", &self.header.layout.range_count)
            .field("frames", &self.header.layout.frame_count)
            .finish_non_exhaustive()
    }
}

/// A file's size and modification time in nanoseconds since the epoch,
/// as an index records its debug file's.
pub(crate) fn stamp(path: &Path) -> Option<(u64, i64)> {
    FileStamp::of(path).map(|s| (s.size, s.mtime_ns))
}

impl SymbolIndex {
    /// The file name of the index for an object of this build id and size.
    #[must_use]
    pub fn file_name(build_id: &[u8], object_size: u64) -> String {
        format!(
            "{}-{object_size}.ichnos-symbols",
            crate::debug_file::hex(build_id)
        )
    }

    /// Opens and checks the index file at `path`.
    pub fn open(path: &Path) -> Result<Self, SymbolError> {
        // Index files are written whole and renamed into place, never
        // changed where they lie; one cut short by someone else reads as
        // zeros past its end (and says so): answers are used only after
        // `truncated` is checked.
        let map = MappedFile::open(path)?;
        Self::from_parts(Bytes::Mapped(map), path)
    }

    /// Checks `bytes` as an index (as [`Self::open`] checks a file).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, SymbolError> {
        Self::from_parts(Bytes::Owned(bytes), Path::new("<memory>"))
    }

    fn from_parts(bytes: Bytes, path: &Path) -> Result<Self, SymbolError> {
        let header = format::check(&bytes).map_err(|e| SymbolError::BadIndex {
            path: path.to_path_buf(),
            offset: e.offset as u64,
            detail: e.detail,
        })?;
        let mut index = Self {
            strings: Mutex::new(vec![None; header.layout.string_count]),
            bytes,
            header,
            path: path.to_path_buf(),
            source: DebugSource::SameFile,
        };
        let source_path = index.string(index.header.identity.source_path, &mut []);
        index.source = match (index.header.identity.source_kind, source_path) {
            (format::SOURCE_BUILD_ID, Some(p)) => DebugSource::BuildId(PathBuf::from(&*p)),
            (format::SOURCE_DEBUG_LINK, Some(p)) => DebugSource::DebugLink(PathBuf::from(&*p)),
            _ => DebugSource::SameFile,
        };
        Ok(index)
    }

    /// Whether the index file was cut short under its mapping: answers
    /// read past its new end are not the index's.
    #[must_use]
    pub fn truncated(&self) -> bool {
        matches!(&self.bytes, Bytes::Mapped(m) if m.faulted())
    }

    /// The index file (`<memory>` for one made from bytes).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The build id of the object indexed.
    #[must_use]
    pub fn build_id(&self) -> &[u8] {
        &self.header.identity.build_id
    }

    /// The size of the object file indexed.
    #[must_use]
    pub fn object_size(&self) -> u64 {
        self.header.identity.object_size
    }

    /// Where the indexed answers came from.
    #[must_use]
    pub fn source(&self) -> &DebugSource {
        &self.source
    }

    /// How many address ranges the index holds.
    #[must_use]
    pub fn ranges(&self) -> usize {
        self.header.layout.range_count
    }

    /// The index file's length in bytes.
    #[must_use]
    pub fn len_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether the index was made by this build of the code that makes
    /// answers; one made by another may answer some addresses differently.
    #[must_use]
    pub fn made_by_this_build(&self) -> bool {
        self.header.identity.generator == format::generator()
    }

    /// Whether the separate debug file the index was made from (if any)
    /// is still the one it was made from: same size and time.
    #[must_use]
    pub fn debug_file_unchanged(&self) -> bool {
        match &self.source {
            DebugSource::BuildId(p) | DebugSource::DebugLink(p) => {
                stamp(p)
                    == Some((
                        self.header.identity.debug_size,
                        self.header.identity.debug_mtime_ns,
                    ))
            }
            _ => true,
        }
    }

    /// The string with id `id`, made once; `None` for [`NONE`].
    fn string(&self, id: u32, cache: &mut [Option<Arc<str>>]) -> Option<Arc<str>> {
        if id == NONE {
            return None;
        }
        let i = id as usize;
        if let Some(Some(s)) = cache.get(i) {
            return Some(Arc::clone(s));
        }
        let s: Arc<str> = Arc::from(String::from_utf8_lossy(self.string_bytes(id)?));
        if let Some(slot) = cache.get_mut(i) {
            *slot = Some(Arc::clone(&s));
        }
        Some(s)
    }

    /// The frames of each of `addrs` (in the order given), innermost
    /// first, as the symbolizer gives them with inlined frames; with
    /// `demangle` false, functions are named as stored.
    #[must_use]
    pub fn frames(&self, addrs: &[u64], demangle: bool) -> Vec<Vec<Frame>> {
        let mut cache = self
            .strings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        addrs
            .iter()
            .map(|&addr| self.frames_of(addr, demangle, &mut cache))
            .collect()
    }

    fn frames_of(&self, addr: u64, demangle: bool, cache: &mut [Option<Arc<str>>]) -> Vec<Frame> {
        let Some(first) = self.first_frame(addr) else {
            return vec![Frame::default()];
        };
        self.raw_frames(first)
            .map(|f| {
                let raw_function = self.string(f.raw_function, cache);
                let function = if demangle {
                    self.string(f.function, cache)
                } else {
                    raw_function.clone()
                };
                Frame {
                    function,
                    raw_function,
                    file: self.string(f.file, cache),
                    line: (f.flags & HAS_LINE != 0).then_some(f.line),
                    column: (f.flags & HAS_COLUMN != 0).then_some(f.column),
                    inlined: f.flags & INLINED != 0,
                    function_start: (f.flags & HAS_START != 0).then_some(f.function_start),
                }
            })
            .collect()
    }

    /// The frames of `addr`, innermost first, borrowed from the index:
    /// what [`Self::frames`] gives for one address without making a
    /// string. An address nothing is known of has one frame with nothing
    /// in it.
    pub fn frame_refs(&self, addr: u64, demangle: bool) -> impl Iterator<Item = FrameRef<'_>> {
        let first = self.first_frame(addr);
        let unknown = first.is_none().then(FrameRef::default);
        unknown.into_iter().chain(
            first
                .into_iter()
                .flat_map(|first| self.raw_frames(first))
                .map(move |f| {
                    let raw_function = self.string_bytes(f.raw_function);
                    FrameRef {
                        function: if demangle {
                            self.string_bytes(f.function)
                        } else {
                            raw_function
                        },
                        raw_function,
                        file: self.string_bytes(f.file),
                        line: (f.flags & HAS_LINE != 0).then_some(f.line),
                        column: (f.flags & HAS_COLUMN != 0).then_some(f.column),
                        inlined: f.flags & INLINED != 0,
                        function_start: (f.flags & HAS_START != 0).then_some(f.function_start),
                    }
                }),
        )
    }

    /// The bytes of string `id`; `None` for [`NONE`].
    fn string_bytes(&self, id: u32) -> Option<&[u8]> {
        if id == NONE {
            return None;
        }
        let l = &self.header.layout;
        let at = l.strings + 8 * id as usize;
        let (offset, len) = (
            u32_at(&self.bytes, at) as usize,
            u32_at(&self.bytes, at + 4) as usize,
        );
        self.bytes.get(l.blob + offset..l.blob + offset + len)
    }

    /// The first frame of the answer for `addr`; `None` when nothing is
    /// known of it.
    fn first_frame(&self, addr: u64) -> Option<usize> {
        let first = self.answer_of(addr)?;
        (!format::is_unknown(first)).then_some(first as usize)
    }

    /// The answer of the range holding `addr`: its first frame, or a code
    /// of nothing known; `None` below the first range.
    fn answer_of(&self, addr: u64) -> Option<u32> {
        let l = &self.header.layout;
        let bytes = &*self.bytes;
        // The last range starting at or below `addr`.
        let (mut lo, mut hi) = (0, l.range_count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if u64_at(bytes, l.starts + 8 * mid) <= addr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(u32_at(bytes, l.answers + 4 * lo.checked_sub(1)?))
    }

    /// Why nothing is known of `addr`, if nothing is (an address below
    /// every range is outside every section).
    #[must_use]
    pub fn unnamed(&self, addr: u64) -> Option<crate::frame::Unnamed> {
        match self.answer_of(addr) {
            None => Some(crate::frame::Unnamed::OutsideSections),
            Some(answer) => format::unnamed_of(answer),
        }
    }

    /// The frames of one answer from frame `first` through the one marked
    /// last. The checked file ends its last frame's answer, so this stops
    /// inside the table.
    fn raw_frames(&self, first: usize) -> impl Iterator<Item = RawFrame> + '_ {
        let l = &self.header.layout;
        let mut done = false;
        (first..l.frame_count).map_while(move |i| {
            if done {
                return None;
            }
            let at = l.frames + FRAME_SIZE * i;
            let field = |n: usize| u32_at(&self.bytes, at + 4 * n);
            let f = RawFrame {
                function: field(0),
                raw_function: field(1),
                file: field(2),
                line: field(3),
                column: field(4),
                flags: field(5),
                function_start: u64_at(&self.bytes, at + 24),
            };
            done = f.flags & LAST != 0;
            Some(f)
        })
    }
}

/// One frame of an index's answer, borrowed from the index file. Strings
/// are as stored: UTF-8 in every index this crate writes, but a damaged
/// file may hold other bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The function, demangled if asked for.
    pub function: Option<&'a [u8]>,
    /// The function's name as stored.
    pub raw_function: Option<&'a [u8]>,
    /// The source file.
    pub file: Option<&'a [u8]>,
    /// The line.
    pub line: Option<u32>,
    /// The column.
    pub column: Option<u32>,
    /// Whether this frame was inlined into the next one.
    pub inlined: bool,
    /// Where the outermost frame's function starts
    /// ([`Frame::function_start`]).
    pub function_start: Option<u64>,
}
