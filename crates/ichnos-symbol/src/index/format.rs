//! The symbol index file's layout (docs/symbol-index.md): the writer, and
//! a reader that checks every count, offset and reference against the
//! file before anything is looked up.

use crate::debug_file::DebugSource;

/// The first eight bytes of every index file.
pub(crate) const MAGIC: [u8; 8] = *b"ICHNSYMI";
/// The version this crate writes and reads: of the layout, and of the
/// rules answers are made by, so that indexes made before a change in
/// what some address answers are not used (docs/symbol-index.md).
pub(crate) const VERSION: u32 = 6;
/// Bytes before the first table.
pub(crate) const HEADER_SIZE: usize = 136;
/// The fingerprint of the code that makes answers, as built (build.rs).
const GENERATOR: u64 = {
    match u64::from_str_radix(env!("ICHNOS_SYMBOL_INDEX_GENERATOR"), 10) {
        Ok(n) => n,
        Err(_) => 0,
    }
};
/// The fingerprint of the code that makes answers: [`GENERATOR`], its
/// FNV-1a continued over a zero byte and the C++ demangler this process
/// found when it runs (docs/symbol-index.md).
pub(crate) fn generator() -> u64 {
    static GENERATOR_HERE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *GENERATOR_HERE.get_or_init(|| {
        let demangler = crate::demangle::cpp_demangler();
        std::iter::once(0u8)
            .chain(demangler.bytes())
            .fold(GENERATOR, |hash, b| {
                (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
    })
}

/// Bytes of one frame record.
pub(crate) const FRAME_SIZE: usize = 32;
/// Longest build id the header holds.
pub(crate) const MAX_BUILD_ID: usize = 64;
/// Most frames one answer may have (the deepest real inline chains are
/// tens of frames): a bound on the work and memory of one lookup.
pub(crate) const MAX_ANSWER_FRAMES: usize = 1024;
/// "No string", "no frames".
pub(crate) const NONE: u32 = u32::MAX;
/// A range's answer when nothing is known of its addresses, by why:
/// [`NONE`] outside every section, these two inside one.
pub(crate) const NONE_PADDING: u32 = u32::MAX - 1;
pub(crate) const NONE_NO_SYMBOL: u32 = u32::MAX - 2;

/// Whether a range's answer says nothing is known (and why).
pub(crate) fn is_unknown(answer: u32) -> bool {
    matches!(answer, NONE | NONE_PADDING | NONE_NO_SYMBOL)
}

/// The range answer for an address nothing is known of, for `why`.
pub(crate) fn unknown_answer(why: crate::frame::Unnamed) -> u32 {
    match why {
        crate::frame::Unnamed::Padding => NONE_PADDING,
        crate::frame::Unnamed::NoSymbol => NONE_NO_SYMBOL,
        _ => NONE,
    }
}

/// Why nothing is known of a range whose answer is `answer`.
pub(crate) fn unnamed_of(answer: u32) -> Option<crate::frame::Unnamed> {
    match answer {
        NONE => Some(crate::frame::Unnamed::OutsideSections),
        NONE_PADDING => Some(crate::frame::Unnamed::Padding),
        NONE_NO_SYMBOL => Some(crate::frame::Unnamed::NoSymbol),
        _ => None,
    }
}

/// Frame flags.
pub(crate) const INLINED: u32 = 1;
pub(crate) const HAS_LINE: u32 = 2;
pub(crate) const HAS_COLUMN: u32 = 4;
/// The frame is the outermost of its address's answer.
pub(crate) const LAST: u32 = 8;
/// The frame's `function_start` is known.
pub(crate) const HAS_START: u32 = 16;
const KNOWN_FLAGS: u32 = INLINED | HAS_LINE | HAS_COLUMN | LAST | HAS_START;

/// Where the indexed answers came from (the header's `source_kind`).
pub(crate) const SOURCE_SAME_FILE: u32 = 0;
pub(crate) const SOURCE_BUILD_ID: u32 = 1;
pub(crate) const SOURCE_DEBUG_LINK: u32 = 2;

/// One frame as stored: string ids and a location.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RawFrame {
    pub function: u32,
    pub raw_function: u32,
    pub file: u32,
    pub line: u32,
    pub column: u32,
    pub flags: u32,
    /// Where the function starts (meaningful with [`HAS_START`]).
    pub function_start: u64,
}

/// What an index says of the object and the code it was made from: the
/// header's fields, apart from the table counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub build_id: Vec<u8>,
    pub object_size: u64,
    pub source_kind: u32,
    /// String id of the separate debug file's path, or [`NONE`].
    pub source_path: u32,
    /// Size and modification time (ns since the epoch) of the separate
    /// debug file the answers came from, so a changed one is noticed.
    pub debug_size: u64,
    pub debug_mtime_ns: i64,
    /// The fingerprint of the code that made the answers ([`generator`]).
    pub generator: u64,
}

/// What goes into an index file.
#[derive(Debug, Default)]
pub(crate) struct Contents {
    pub identity: Identity,
    /// Range starts (strictly increasing) and the first frame of each
    /// range's answer (nothing known: [`NONE`] and the other codes of
    /// [`unknown_answer`]). A range ends where the
    /// next begins; the last one runs to the top of the address space.
    pub ranges: Vec<(u64, u32)>,
    pub frames: Vec<RawFrame>,
    pub strings: Vec<std::sync::Arc<str>>,
}

/// Where each table lies in a file of a given shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub range_count: usize,
    pub frame_count: usize,
    pub string_count: usize,
    pub starts: usize,
    pub answers: usize,
    pub frames: usize,
    pub strings: usize,
    pub blob: usize,
    pub end: usize,
}

const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

impl Layout {
    /// The layout for these counts, or `None` when it would not fit in
    /// memory's address range.
    fn of(
        range_count: u32,
        frame_count: u32,
        string_count: u32,
        string_bytes: u32,
    ) -> Option<Self> {
        let (r, f, s, b) = (
            range_count as usize,
            frame_count as usize,
            string_count as usize,
            string_bytes as usize,
        );
        let starts = HEADER_SIZE;
        let answers = starts.checked_add(r.checked_mul(8)?)?;
        let frames = align8(answers.checked_add(r.checked_mul(4)?)?);
        let strings = frames.checked_add(f.checked_mul(FRAME_SIZE)?)?;
        let blob = strings.checked_add(s.checked_mul(8)?)?;
        let end = blob.checked_add(b)?;
        Some(Self {
            range_count: r,
            frame_count: f,
            string_count: s,
            starts,
            answers,
            frames,
            strings,
            blob,
            end,
        })
    }
}

impl Contents {
    /// Writes the file's bytes to `out`.
    pub(crate) fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let total_bytes: usize = self.strings.iter().map(|s| s.len()).sum();
        let count = |n: usize| u32::try_from(n).unwrap_or(NONE);
        let layout = Layout::of(
            count(self.ranges.len()),
            count(self.frames.len()),
            count(self.strings.len()),
            count(total_bytes),
        )
        .unwrap_or(Layout {
            range_count: 0,
            frame_count: 0,
            string_count: 0,
            starts: HEADER_SIZE,
            answers: HEADER_SIZE,
            frames: HEADER_SIZE,
            strings: HEADER_SIZE,
            blob: HEADER_SIZE,
            end: HEADER_SIZE,
        });
        let mut written = 0;
        let mut put = |bytes: &[u8]| {
            written += bytes.len();
            out.write_all(bytes)
        };
        put(&MAGIC)?;
        put(&VERSION.to_le_bytes())?;
        let id_len = self.identity.build_id.len().min(MAX_BUILD_ID);
        put(&count(id_len).to_le_bytes())?;
        let mut id = [0u8; MAX_BUILD_ID];
        id[..id_len].copy_from_slice(&self.identity.build_id[..id_len]);
        put(&id)?;
        put(&self.identity.object_size.to_le_bytes())?;
        put(&self.identity.source_kind.to_le_bytes())?;
        put(&self.identity.source_path.to_le_bytes())?;
        put(&self.identity.debug_size.to_le_bytes())?;
        put(&self.identity.debug_mtime_ns.to_le_bytes())?;
        for n in [
            layout.range_count,
            layout.frame_count,
            layout.string_count,
            total_bytes,
        ] {
            put(&count(n).to_le_bytes())?;
        }
        put(&self.identity.generator.to_le_bytes())?;
        for &(start, _) in &self.ranges {
            put(&start.to_le_bytes())?;
        }
        for &(_, answer) in &self.ranges {
            put(&answer.to_le_bytes())?;
        }
        let padding = layout.frames - (layout.answers + 4 * layout.range_count);
        put(&[0; 8][..padding])?;
        for f in &self.frames {
            for v in [
                f.function,
                f.raw_function,
                f.file,
                f.line,
                f.column,
                f.flags,
            ] {
                put(&v.to_le_bytes())?;
            }
            put(&f.function_start.to_le_bytes())?;
        }
        let mut offset = 0u32;
        for s in &self.strings {
            put(&offset.to_le_bytes())?;
            put(&count(s.len()).to_le_bytes())?;
            offset = offset.wrapping_add(count(s.len()));
        }
        for s in &self.strings {
            put(s.as_bytes())?;
        }
        debug_assert_eq!(written, layout.end);
        Ok(())
    }
}

/// Why index bytes were refused: what, and at which file offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormatError {
    pub offset: usize,
    pub detail: String,
}

fn bad(offset: usize, detail: impl Into<String>) -> FormatError {
    FormatError {
        offset,
        detail: detail.into(),
    }
}

/// The little-endian `u32` at `at` (the caller checked the bounds).
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

/// The little-endian `u64` at `at` (the caller checked the bounds).
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The header's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub identity: Identity,
    pub layout: Layout,
}

/// Checks `bytes` as an index file: the header, that the tables fill the
/// file exactly, that range starts increase, and that every frame and
/// string reference lands inside its table. Lookups in a file that passed
/// need no further checks to be in bounds.
pub(crate) fn check(bytes: &[u8]) -> Result<Header, FormatError> {
    if bytes.len() < HEADER_SIZE {
        return Err(bad(
            bytes.len(),
            format!(
                "{} bytes, shorter than the {HEADER_SIZE}-byte header",
                bytes.len()
            ),
        ));
    }
    if bytes[..8] != MAGIC {
        return Err(bad(0, "not an ichnos symbol index (magic)"));
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(bad(
            8,
            format!("version {version}; this build reads {VERSION}"),
        ));
    }
    let id_len = u32_at(bytes, 12) as usize;
    if id_len == 0 || id_len > MAX_BUILD_ID {
        return Err(bad(
            12,
            format!("build id length {id_len} (1 to {MAX_BUILD_ID})"),
        ));
    }
    let source_kind = u32_at(bytes, 88);
    if source_kind > SOURCE_DEBUG_LINK {
        return Err(bad(88, format!("unknown source kind {source_kind}")));
    }
    let layout = Layout::of(
        u32_at(bytes, 112),
        u32_at(bytes, 116),
        u32_at(bytes, 120),
        u32_at(bytes, 124),
    )
    .filter(|l| l.end == bytes.len())
    .ok_or_else(|| {
        bad(
            112,
            format!("table counts do not fill the file's {} bytes", bytes.len()),
        )
    })?;
    let source_path = u32_at(bytes, 92);
    let string_ok = |id: u32| id == NONE || (id as usize) < layout.string_count;
    if !string_ok(source_path) || (source_kind != SOURCE_SAME_FILE && source_path == NONE) {
        return Err(bad(92, format!("source path string {source_path}")));
    }
    if layout.range_count == 0 {
        return Err(bad(112, "no ranges"));
    }
    check_ranges(bytes, &layout)?;
    check_frames(bytes, &layout)?;
    check_strings(bytes, &layout)?;
    Ok(Header {
        identity: Identity {
            build_id: bytes[16..16 + id_len].to_vec(),
            object_size: u64_at(bytes, 80),
            source_kind,
            source_path,
            debug_size: u64_at(bytes, 96),
            debug_mtime_ns: i64::from_le_bytes(bytes[104..112].try_into().unwrap_or_default()),
            generator: u64_at(bytes, 128),
        },
        layout,
    })
}

/// Range starts increase; answers name a frame of the table or none.
fn check_ranges(bytes: &[u8], layout: &Layout) -> Result<(), FormatError> {
    let n = layout.range_count;
    // The tables lie inside the file (the layout was checked against its
    // length): whole words, read without a bounds check each.
    let table = |at: usize, len: usize| {
        bytes
            .get(at..at + len)
            .ok_or_else(|| bad(at, "a table past the end of the file"))
    };
    let starts = table(layout.starts, 8 * n)?.chunks_exact(8);
    let answers = table(layout.answers, 4 * n)?.chunks_exact(4);
    let mut previous = None;
    for (i, (start, answer)) in starts.zip(answers).enumerate() {
        let start = u64::from_le_bytes(start.try_into().expect("8 bytes"));
        if previous.is_some_and(|p| start <= p) {
            return Err(bad(
                layout.starts + 8 * i,
                format!("range {i} starts at {start:#x}, not above the one before"),
            ));
        }
        previous = Some(start);
        let answer = u32::from_le_bytes(answer.try_into().expect("4 bytes"));
        if !is_unknown(answer) && answer as usize >= layout.frame_count {
            return Err(bad(
                layout.answers + 4 * i,
                format!("range {i}'s frame {answer}"),
            ));
        }
    }
    Ok(())
}

/// Frames have known flags and name strings of the table; every answer
/// ends (flag `LAST`) within [`MAX_ANSWER_FRAMES`] frames and inside the
/// table.
fn check_frames(bytes: &[u8], layout: &Layout) -> Result<(), FormatError> {
    let string_ok = |id: u32| id == NONE || (id as usize) < layout.string_count;
    let table = bytes
        .get(layout.frames..layout.frames + FRAME_SIZE * layout.frame_count)
        .ok_or_else(|| bad(layout.frames, "the frame table past the end of the file"))?;
    // Frames since the last one that ended an answer.
    let mut run = 0;
    for (i, frame) in table.chunks_exact(FRAME_SIZE).enumerate() {
        let at = layout.frames + FRAME_SIZE * i;
        let word =
            |n: usize| u32::from_le_bytes(frame[4 * n..4 * n + 4].try_into().expect("4 bytes"));
        let flags = word(5);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(bad(at + 20, format!("frame {i}: unknown flags {flags:#x}")));
        }
        for (n, name) in [(0, "function"), (1, "raw function"), (2, "file")] {
            let id = word(n);
            if !string_ok(id) {
                return Err(bad(at + 4 * n, format!("frame {i}: {name} string {id}")));
            }
        }
        run += 1;
        if flags & LAST != 0 {
            run = 0;
        } else if run >= MAX_ANSWER_FRAMES {
            return Err(bad(
                at + 20,
                format!("frame {i}: an answer longer than {MAX_ANSWER_FRAMES} frames"),
            ));
        }
        if i + 1 == layout.frame_count && flags & LAST == 0 {
            return Err(bad(at + 20, "the last frame does not end its answer"));
        }
    }
    Ok(())
}

/// Strings lie inside the string bytes.
fn check_strings(bytes: &[u8], layout: &Layout) -> Result<(), FormatError> {
    let blob = layout.end - layout.blob;
    for i in 0..layout.string_count {
        let at = layout.strings + 8 * i;
        let (offset, len) = (u32_at(bytes, at) as usize, u32_at(bytes, at + 4) as usize);
        if offset.checked_add(len).is_none_or(|end| end > blob) {
            return Err(bad(
                at,
                format!("string {i} ({len} bytes at {offset}) outside the string bytes"),
            ));
        }
    }
    Ok(())
}

/// The header's source kind for `source`, or `None` for sources an index
/// is not made from.
pub(crate) fn source_kind(source: &DebugSource) -> Option<u32> {
    match source {
        DebugSource::SameFile => Some(SOURCE_SAME_FILE),
        DebugSource::BuildId(_) => Some(SOURCE_BUILD_ID),
        DebugSource::DebugLink(_) => Some(SOURCE_DEBUG_LINK),
        DebugSource::SymbolsOnly
        | DebugSource::MiniDebugInfo
        | DebugSource::JitDump
        | DebugSource::PerfMap
        | DebugSource::Registry
        | DebugSource::Nothing => None,
    }
}
