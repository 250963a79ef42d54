//! A perf.data file made into an ichnos recording: its records, read by
//! the `linux-perf-data` crate in time order, go through the recorder as
//! the kernel's would — `perf record --call-graph dwarf` samples unwound
//! with our rows (SFrame, `.eh_frame`, CFI) from their stack copies,
//! `perf record -g` samples kept as the kernel's frame-pointer chains —
//! and the recording is reported like any other.
//!
//! The processes are gone (or another now has their number): nothing is
//! read from `/proc` or process memory, only the records and the files
//! they mapped. The file is untrusted, and the crate sizes its buffers by
//! what the file claims: before it reads anything, the header's sections,
//! the attrs' id sections, the feature sections it parses and the framing
//! of every record are checked against the file's length, and compressed
//! records (whose decompressed size nothing bounds) are refused. Every
//! record then goes through our own bounded parser. A file without
//! `FINISHED_ROUND` records is buffered whole by the crate (bounded by
//! its length).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ichnos_data::{LostCause, Meta, Record, Target};
use ichnos_perf::record::{parse, SampleFormat};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use super::output::{self, Output};
use super::recorder::Recorder;

/// Why a perf.data file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfDataError {
    /// It could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Its header is not a perf.data header, or names sections past its
    /// end.
    #[error("{path} is not a readable perf.data file: {what}")]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        what: String,
    },
    /// The perf.data reader failed, at a byte of the data section where
    /// known.
    #[error("{path}: corrupt perf.data{}: {source}", at.map(|a| format!(" at byte {a}")).unwrap_or_default())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where in the file the data section's reading stopped.
        at: Option<u64>,
        /// The reader's error.
        source: linux_perf_data::Error,
    },
    /// The recording could not be written.
    #[error("cannot write the recording {path}: {source}")]
    Write {
        /// The recording.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What a conversion found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfDataSummary {
    /// Samples converted.
    pub samples: u64,
    /// Of them, with a complete stack.
    pub complete: u64,
    /// Samples with neither registers nor a callchain, or records the
    /// parser refused.
    pub unreadable: u64,
}

/// The magic of a little-endian perf.data file.
const MAGIC: &[u8; 8] = b"PERFILE2";
/// Bytes of the header: magic, size, `attr_size`, three sections, the
/// feature bits.
const HEADER_LEN: u64 = 104;

/// Checks that the sections the header names lie within the file, so
/// that what the crate reads is bounded by the file's length.
/// Returns where the data section lies: (offset, size).
fn check_header(file: &mut File, path: &Path) -> Result<(u64, u64), PerfDataError> {
    let header_error = |what: String| PerfDataError::Header {
        path: path.to_path_buf(),
        what,
    };
    let io = |source| PerfDataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(io)?.len();
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
    if table + 16 * u64::from(features) > len {
        return Err(header_error(format!(
            "the table of {features} feature sections at byte {table} runs past the file's {len} bytes"
        )));
    }
    check_features(file, len, &header, table).map_err(|e| match e {
        Framing::Io(source) => io(source),
        Framing::Bad(what) => header_error(what),
    })?;
    // Every record within the data section, before the reader buffers
    // any: it sizes its buffers by what records claim.
    check_framing(file, data_offset, data_size).map_err(|e| match e {
        Framing::Io(source) => io(source),
        Framing::Bad(what) => header_error(what),
    })?;
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

/// perf's own record types that the framing walk looks into:
/// `PERF_RECORD_AUXTRACE`, whose data follows it outside its size, and
/// the compressed ones, which are not read.
const RECORD_AUXTRACE: u32 = 71;
const RECORD_COMPRESSED: u32 = 81;
const RECORD_COMPRESSED2: u32 = 83;

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

/// What a pass over the data section's record headers found.
enum Framing {
    Io(std::io::Error),
    Bad(String),
}

/// Walks the data section's record headers: each record at least its
/// header long and within the section (an aux trace's data too), and
/// none compressed, so that the reader's buffers are bounded by the file
/// and a damaged record is named by its offset.
fn check_framing(file: &mut File, offset: u64, size: u64) -> Result<(), Framing> {
    let end = offset + size;
    file.seek(SeekFrom::Start(offset)).map_err(Framing::Io)?;
    let mut reader = BufReader::with_capacity(1 << 16, &mut *file);
    let mut at = offset;
    while at < end {
        let mut header = [0u8; 8];
        if end - at < 8 {
            return Err(Framing::Bad(format!(
                "the record at byte {at} has {} bytes left in the data section, less than a header",
                end - at
            )));
        }
        reader.read_exact(&mut header).map_err(Framing::Io)?;
        let kind = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let len = u64::from(u16::from_le_bytes([header[6], header[7]]));
        if matches!(kind, RECORD_COMPRESSED | RECORD_COMPRESSED2) {
            return Err(Framing::Bad(format!(
                "the record at byte {at} is compressed (perf record -z): such files are not read; \
                 perf inject -i FILE -o OUT writes it uncompressed"
            )));
        }
        if len < 8 {
            return Err(Framing::Bad(format!(
                "the record at byte {at} claims {len} bytes, less than its 8-byte header"
            )));
        }
        if at + len > end {
            return Err(Framing::Bad(format!(
                "the record at byte {at} claims {len} bytes, past the data section's end at byte {end}"
            )));
        }
        let mut skip = len - 8;
        if kind == RECORD_AUXTRACE && len >= 16 {
            // Its trace data follows it: `size` bytes, within the section.
            let mut size = [0u8; 8];
            reader.read_exact(&mut size).map_err(Framing::Io)?;
            let data = u64::from_le_bytes(size);
            skip -= 8;
            if data > end - at - len {
                return Err(Framing::Bad(format!(
                    "the aux trace at byte {at} claims {data} bytes, past the data section's end at byte {end}"
                )));
            }
            skip += data;
            at += data;
        }
        reader
            .seek_relative(i64::try_from(skip).unwrap_or(i64::MAX))
            .map_err(Framing::Io)?;
        at += len;
    }
    Ok(())
}

/// The sample format of a perf.data event, as our parser takes it.
fn format_of(attr: &linux_perf_data::linux_perf_event_reader::PerfEventAttr) -> SampleFormat {
    SampleFormat {
        sample_type: attr.sample_format.bits(),
        read_format: attr.read_format.bits(),
        regs_user: attr.sample_regs_user,
        branch_sample_type: attr.branch_sample_format.bits(),
        sample_id_all: attr
            .flags
            .contains(linux_perf_data::linux_perf_event_reader::AttrFlags::SAMPLE_ID_ALL),
    }
}

/// Converts the perf.data file `input` into an ichnos recording written to
/// `output` (opened by the caller, who chooses how safely: a temporary
/// file is best created new), named `output_name` in errors.
pub fn import_perf_data(
    input: &Path,
    output: File,
    output_name: &Path,
) -> Result<PerfDataSummary, PerfDataError> {
    let io = |source| PerfDataError::Io {
        path: input.to_path_buf(),
        source,
    };
    let mut file = File::open(input).map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(PerfDataError::Header {
            path: input.to_path_buf(),
            what: "not a regular file".into(),
        });
    }
    check_header(&mut file, input)?;
    let mtime = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0));
    let corrupt = |source| PerfDataError::Corrupt {
        path: input.to_path_buf(),
        at: None,
        source,
    };
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(BufReader::with_capacity(1 << 20, file)).map_err(corrupt)?;
    let formats: Vec<SampleFormat> = perf_file
        .event_attributes()
        .iter()
        .map(|a| format_of(&a.attr))
        .collect();
    let write = |source| PerfDataError::Write {
        path: output_name.to_path_buf(),
        source,
    };
    let (mut out, writer) =
        output::start(output, 0).map_err(|e| write(std::io::Error::other(e.to_string())))?;
    out.wait_for_room();
    describe(&mut out, &perf_file, mtime);
    let mut recorder = Recorder::offline(ichnos_code::UnwindOptions::default().max_frames, out);
    let (result, unreadable, last_time) =
        convert_records(&mut perf_file, &mut record_iter, &formats, &mut recorder);
    let result = result.map_err(corrupt);
    recorder.finish();
    if unreadable > 0 {
        recorder
            .output
            .lost(last_time, 0, unreadable, LostCause::Unreadable);
    }
    let summary = PerfDataSummary {
        samples: recorder.samples,
        complete: recorder.complete,
        unreadable,
    };
    let (samples, lost) = (recorder.output.samples, recorder.lost);
    let mut out = recorder.output;
    out.meta(&Record::End {
        time: out.rel(last_time),
        samples,
        lost: lost + unreadable,
    });
    out.close(&writer);
    let written = writer
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")));
    result?;
    written.map_err(write)?;
    Ok(summary)
}

/// Hands every record of the file to `recorder`, in time order: the
/// reader's outcome, the records our parser refused, the last time.
fn convert_records(
    perf_file: &mut linux_perf_data::PerfFile,
    record_iter: &mut linux_perf_data::PerfRecordIter<BufReader<File>>,
    formats: &[SampleFormat],
    recorder: &mut Recorder,
) -> (Result<(), linux_perf_data::Error>, u64, u64) {
    let mut unreadable = 0;
    let mut bytes = Vec::new();
    let mut first_time = None;
    let mut last_time = 0;
    let result = loop {
        let record = match record_iter.next_record(perf_file) {
            Ok(Some(r)) => r,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let PerfFileRecord::EventRecord { attr_index, record } = record else {
            continue;
        };
        let Some(format) = formats.get(attr_index) else {
            unreadable += 1;
            continue;
        };
        // Our parser reads whole records: the header put back in front.
        let data = record.data.as_slice();
        let Ok(size) = u16::try_from(data.len() + 8) else {
            unreadable += 1;
            continue;
        };
        bytes.clear();
        bytes.extend_from_slice(&record.record_type.0.to_le_bytes());
        bytes.extend_from_slice(&record.misc.to_le_bytes());
        bytes.extend_from_slice(&size.to_le_bytes());
        bytes.extend_from_slice(&data);
        match parse(format, &bytes) {
            Ok(parsed) => {
                // Times count from the first record's (perf's records
                // for what ran before it started have none, or 0).
                if let Some(t) = parsed.time().filter(|&t| t > 0) {
                    if first_time.is_none() {
                        first_time = Some(t);
                        recorder.output.set_start(t);
                    }
                    last_time = last_time.max(t);
                }
                recorder.handle(&parsed, false);
            }
            Err(_) => unreadable += 1,
        }
    };
    (result, unreadable, last_time)
}

/// The recording's description, from the perf.data header's features.
fn describe(out: &mut Output, perf_file: &linux_perf_data::PerfFile, mtime: u64) {
    let host = perf_file.hostname().ok().flatten().unwrap_or_default();
    let kernel = perf_file.os_release().ok().flatten().unwrap_or_default();
    let command: Vec<&str> = perf_file.cmdline().ok().flatten().unwrap_or_default();
    let attrs = perf_file.event_attributes();
    let event = attrs
        .first()
        .and_then(|a| a.name())
        .unwrap_or("perf event")
        .to_owned();
    let (frequency, stack_size) = attrs.first().map_or((0, 0), |a| {
        let frequency = match a.attr.sampling_policy {
            linux_perf_data::linux_perf_event_reader::SamplingPolicy::Frequency(f) => f,
            _ => 0,
        };
        (frequency, u64::from(a.attr.sample_stack_user))
    });
    // When the first sample was taken, on the wall clock: from the clock
    // data perf keeps (the recording clock against the wall clock at one
    // instant), else from the file's last write less the samples' span.
    let range = perf_file.sample_time_range().ok().flatten();
    let start_realtime = match (perf_file.clock_data().ok().flatten(), range) {
        (Some(clock), Some(r)) => clock
            .wall_clock_ns
            .saturating_add(r.first_sample_time)
            .saturating_sub(clock.clockid_time_ns),
        (None, Some(r)) => {
            mtime.saturating_sub(r.last_sample_time.saturating_sub(r.first_sample_time))
        }
        _ => mtime,
    };
    let recorder = match perf_file.perf_version() {
        Ok(Some(v)) => format!("perf {v}"),
        _ => "perf".to_owned(),
    };
    out.meta(&Record::Meta(Meta {
        host: host.as_bytes(),
        kernel: kernel.as_bytes(),
        command: command.iter().take(1024).map(|a| a.as_bytes()).collect(),
        event: event.as_bytes(),
        frequency,
        stack_size,
        start_monotonic_ns: 0,
        start_realtime_ns: start_realtime,
        recorder: recorder.as_bytes(),
        target: Target::Command,
        off_cpu_event: b"",
    }));
}
