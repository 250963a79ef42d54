//! Checks of a perf.data file's header, attrs and feature sections
//! before the `linux-perf-data` crate reads them: it sizes its buffers
//! by what the file claims, so every section it reads is first found to
//! lie within the file, and the counts in those it parses within their
//! sections.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::PerfDataError;

/// The magic of a little-endian perf.data file.
const MAGIC: &[u8; 8] = b"PERFILE2";
/// Bytes of the header: magic, size, `attr_size`, three sections, the
/// feature bits.
const HEADER_LEN: u64 = 104;

/// Checks that the sections the header names lie within the file, so
/// that what the crate reads is bounded by the file's length.
/// Returns where the data section lies: (offset, size).
pub(super) fn check_header(file: &mut File, path: &Path) -> Result<(u64, u64), PerfDataError> {
    let header_error = |what: String| PerfDataError::Header {
        path: path.to_path_buf(),
        what,
    };
    let io = |source| PerfDataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(io)?.len();
    // A file `perf record -o -` wrote to a pipe: its header is the magic
    // and its own size, 16, and its attrs come as records.
    let mut pipe_header = [0u8; 16];
    if file.read_exact(&mut pipe_header).is_ok()
        && &pipe_header[..8] == MAGIC
        && u64::from_le_bytes(pipe_header[8..].try_into().expect("8 bytes")) == 16
    {
        return Err(header_error(
            "written to a pipe (perf record -o -), which is not read: \
             record to a file (perf record -o FILE)"
                .into(),
        ));
    }
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut header = [0u8; HEADER_LEN as usize];
    file.read_exact(&mut header)
        .map_err(|_| header_error(format!("{len} bytes, shorter than a header")))?;
    if &header[..8] != MAGIC {
        return Err(header_error(
            "no PERFILE2 magic at byte 0 (a big-endian or pipe-mode file is not read)".into(),
        ));
    }
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let within = |name: &str, at: usize| -> Result<(u64, u64), PerfDataError> {
        let (offset, size) = (word(at), word(at + 8));
        match offset.checked_add(size) {
            Some(end) if end <= len => Ok((offset, size)),
            _ => Err(header_error(format!(
                "the {name} section (header byte {at}) runs from {offset} for {size} bytes, past the file's {len}"
            ))),
        }
    };
    let (attrs_offset, attrs_size) = within("attrs", 24)?;
    let (data_offset, data_size) = within("data", 40)?;
    within("event types", 56)?;
    // Each entry of the attrs section is a perf_event_attr (64 bytes in
    // its first version, grown by words since) and the section of its
    // event ids (16 bytes): attr_size is the entry's.
    let entry = word(16);
    if !(80..=4096).contains(&entry) {
        return Err(header_error(format!(
            "attr_size {entry} (header byte 16) is not a perf_event_attr and its ids (80 to 4096)"
        )));
    }
    if attrs_size % entry != 0 {
        return Err(header_error(format!(
            "the attrs section's {attrs_size} bytes are not whole entries of {entry}"
        )));
    }
    check_attr_ids(file, len, attrs_offset, attrs_size / entry, entry).map_err(|e| match e {
        Framing::Io(source) => io(source),
        Framing::Bad(what) => header_error(what),
    })?;
    // The feature sections' table follows the data section: 16 bytes
    // for each feature bit set.
    let features: u32 = header[72..104].iter().map(|b| b.count_ones()).sum();
    let table = data_offset + data_size;
    if table + 16 * u64::from(features) > len && data_size > 0 {
        return Err(header_error(format!(
            "the table of {features} feature sections at byte {table} runs past the file's {len} bytes"
        )));
    }
    let features_read = check_features(file, len, &header, table).map_err(|e| match e {
        Framing::Io(source) => io(source),
        Framing::Bad(what) => header_error(what),
    });
    if data_size == 0 && features_read.is_err() {
        // perf writes the data section's size (and the feature sections
        // after it) when it ends: a perf record killed leaves 0, and no
        // feature table where one should be, as perf report warns ("data
        // size field is 0"). A finished recording of no records has both.
        return Err(header_error(
            "the data section's size (header byte 48) is 0 and no feature sections follow \
             its start: the perf record that wrote it did not finish (was it killed?)"
                .to_owned(),
        ));
    }
    features_read?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    Ok((data_offset, data_size))
}

/// The feature sections (their table at `table`, the bits in `header`)
/// within the file's `len` bytes, and those the reader parses walked:
/// their counts within their sizes.
fn check_features(
    file: &mut File,
    len: u64,
    header: &[u8; HEADER_LEN as usize],
    table: u64,
) -> Result<(), Framing> {
    // The features in bit order, as their sections' table lists them.
    let bits: Vec<u32> = (0..256u32)
        .filter(|&bit| header[72 + (bit / 8) as usize] & (1 << (bit % 8)) != 0)
        .collect();
    let mut sections = Vec::with_capacity(bits.len());
    file.seek(SeekFrom::Start(table)).map_err(Framing::Io)?;
    for (i, &bit) in bits.iter().enumerate() {
        let mut entry = [0u8; 16];
        file.read_exact(&mut entry).map_err(Framing::Io)?;
        let offset = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
        let size = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(Framing::Bad(format!(
                "feature section {bit} (table byte {}) runs from {offset} for {size} bytes, past the file's {len}",
                table + 16 * i as u64
            )));
        }
        sections.push((bit, offset, size));
    }
    if bits.contains(&FEATURE_SIMPLEPERF_META_INFO) {
        return Err(Framing::Bad(
            "a simpleperf file (feature 128): only Linux perf's files are read".into(),
        ));
    }
    // The sections the reader parses: their counts checked against their
    // sizes, since it sizes its tables by the counts alone.
    for (bit, offset, size) in sections {
        if !matches!(
            bit,
            FEATURE_HOSTNAME
                | FEATURE_OSRELEASE
                | FEATURE_VERSION
                | FEATURE_CMDLINE
                | FEATURE_EVENT_DESC
        ) {
            continue;
        }
        let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
        file.seek(SeekFrom::Start(offset)).map_err(Framing::Io)?;
        file.read_exact(&mut bytes).map_err(Framing::Io)?;
        let checked = match bit {
            FEATURE_CMDLINE => check_string_list(&bytes),
            FEATURE_EVENT_DESC => check_event_desc(&bytes),
            _ => Walk::new(&bytes).string(),
        };
        if let Err(at) = checked {
            return Err(Framing::Bad(format!(
                "feature section {bit} (at byte {offset}, {size} bytes) runs out at its byte {at}: a count or length in it is wrong"
            )));
        }
    }
    Ok(())
}

/// Each of the `count` attrs' id sections (the last 16 bytes of each
/// `entry`-byte entry from `offset`) within the file's `len` bytes.
fn check_attr_ids(
    file: &mut File,
    len: u64,
    offset: u64,
    count: u64,
    entry: u64,
) -> Result<(), Framing> {
    for i in 0..count {
        let at = offset + i * entry + entry - 16;
        file.seek(SeekFrom::Start(at)).map_err(Framing::Io)?;
        let mut ids = [0u8; 16];
        file.read_exact(&mut ids).map_err(Framing::Io)?;
        let start = u64::from_le_bytes(ids[..8].try_into().expect("8 bytes"));
        let size = u64::from_le_bytes(ids[8..].try_into().expect("8 bytes"));
        if start.checked_add(size).is_none_or(|end| end > len) {
            return Err(Framing::Bad(format!(
                "the ids of attr {i} (byte {at}) run from {start} for {size} bytes, past the file's {len}"
            )));
        }
    }
    Ok(())
}

/// Feature bits of the sections the reader parses (perf's
/// `HEADER_HOSTNAME` and the rest).
const FEATURE_HOSTNAME: u32 = 3;
const FEATURE_OSRELEASE: u32 = 4;
const FEATURE_VERSION: u32 = 5;
const FEATURE_CMDLINE: u32 = 11;
const FEATURE_EVENT_DESC: u32 = 12;
const FEATURE_SIMPLEPERF_META_INFO: u32 = 128;

/// perf's own record types that the walk over the records looks into:
/// `PERF_RECORD_AUXTRACE`, whose data follows it outside its size, and
/// the compressed ones, which are not read.
pub(super) const RECORD_AUXTRACE: u32 = 71;
pub(super) const RECORD_COMPRESSED: u32 = 81;
pub(super) const RECORD_COMPRESSED2: u32 = 83;

/// A walk over a feature section: each step within it, or the byte
/// where it ran out.
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn skip(&mut self, n: u64) -> Result<(), usize> {
        let n = usize::try_from(n).map_err(|_| self.at)?;
        match self.at.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                self.at = end;
                Ok(())
            }
            _ => Err(self.at),
        }
    }

    fn u32(&mut self) -> Result<u32, usize> {
        let start = self.at;
        self.skip(4)?;
        Ok(u32::from_le_bytes(
            self.bytes[start..start + 4].try_into().expect("4 bytes"),
        ))
    }

    /// A perf header string: its length, then that many bytes.
    fn string(&mut self) -> Result<(), usize> {
        let len = self.u32()?;
        self.skip(u64::from(len))
    }
}

/// `HEADER_CMDLINE`: a count of strings, then the strings.
fn check_string_list(bytes: &[u8]) -> Result<(), usize> {
    let mut w = Walk::new(bytes);
    for _ in 0..w.u32()? {
        w.string()?;
    }
    Ok(())
}

/// `HEADER_EVENT_DESC`: a count of events and the size of an attr, then
/// per event its attr, a count of ids, its name and the ids.
fn check_event_desc(bytes: &[u8]) -> Result<(), usize> {
    let mut w = Walk::new(bytes);
    let events = w.u32()?;
    let attr_size = w.u32()?;
    for _ in 0..events {
        w.skip(u64::from(attr_size))?;
        let ids = w.u32()?;
        w.string()?;
        w.skip(u64::from(ids) * 8)?;
    }
    Ok(())
}

/// Why a check failed: the file could not be read, or what it holds is
/// wrong (and where).
enum Framing {
    Io(std::io::Error),
    Bad(String),
}
