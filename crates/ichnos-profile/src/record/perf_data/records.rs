//! The records of a perf.data file's data section, read where they lie.
//!
//! The file is mapped (through [`ichnos_image::GuardedMap`], so a file
//! cut short while it is read gives zeros and a flag, not SIGBUS) and
//! each record is parsed in place: no record is copied, where reading
//! the file through `read(2)` and the `linux-perf-data` crate's record
//! buffers copied every byte of every stack copy twice. The walk checks
//! each record's framing as it goes (its size at least its header and
//! within the section, an aux trace's data too) and names the byte of a
//! record that breaks it.

use std::collections::HashMap;

use linux_perf_data::linux_perf_event_reader::{
    get_record_id, get_record_identifier, get_record_timestamp, Endianness, PerfEventAttr, RawData,
    RecordIdParseInfo, RecordParseInfo, RecordType,
};
use linux_perf_data::AttributeDescription;

use super::checks::{RECORD_AUXTRACE, RECORD_COMPRESSED, RECORD_COMPRESSED2};
use super::rounds::{Pending, Rounds};

/// perf's `PERF_RECORD_FINISHED_ROUND`.
const RECORD_FINISHED_ROUND: u32 = 68;
/// The kernel's `PERF_RECORD_SAMPLE`.
const RECORD_SAMPLE: u32 = 9;
/// A pending record's event where it is a sample of no known event.
const NO_EVENT: u32 = u32::MAX;
/// The first of perf's own record types (the kernel's are below).
const USER_TYPES: u32 = 64;
/// Bytes of a record header.
const HEADER: usize = 8;
/// Bytes of a `PERF_RECORD_AUXTRACE` record, header included (its trace
/// data follows, outside its size).
const AUXTRACE_LEN: usize = 48;

/// How a record's event (attr) is found, as perf finds it.
enum IdBy {
    /// One event: every record is its.
    One,
    /// Every event's ids lie at the same place.
    Same(RecordIdParseInfo),
    /// Every event has `PERF_SAMPLE_IDENTIFIER`: first in samples, last
    /// in other records when `sample_id_all` is set (the bool).
    Identifier(bool),
}

/// The events of a file, and how to tell which a record belongs to.
pub(super) struct Attrs {
    parse: Vec<RecordParseInfo>,
    ids: HashMap<u64, usize>,
    by: IdBy,
}

impl Attrs {
    /// From the attrs the crate read from the header.
    pub fn new(attributes: &[AttributeDescription]) -> Self {
        let parse: Vec<RecordParseInfo> = attributes
            .iter()
            .map(|a| RecordParseInfo::new(&a.attr, Endianness::LittleEndian))
            .collect();
        let mut ids = HashMap::new();
        for (i, a) in attributes.iter().enumerate() {
            for &id in &a.event_ids {
                ids.insert(id, i);
            }
        }
        let by = match parse.split_first() {
            None | Some((_, [])) => IdBy::One,
            Some((first, rest)) if rest.iter().all(|p| p.id_parse_info == first.id_parse_info) => {
                IdBy::Same(first.id_parse_info)
            }
            // The crate refused any other mix when it read the header.
            Some(_) => IdBy::Identifier(attributes.first().is_some_and(sample_id_all)),
        };
        Self { parse, ids, by }
    }

    /// The event of a record of type `kind` whose body (the bytes after
    /// its header) is `body`: the one its id names; the first where it
    /// carries no id, or where the header names no event of its id and
    /// it is not a sample (what it says of tasks and mappings is read
    /// alike for every event); `None` for a sample of an id the header
    /// does not name (perf report stops at one).
    fn attr_of(&self, kind: u32, body: &[u8]) -> Option<usize> {
        let record = RecordType(kind);
        let data = RawData::from(body);
        let id = match &self.by {
            IdBy::One => return Some(0),
            IdBy::Same(info) => get_record_id::<byteorder::LittleEndian>(record, data, info),
            IdBy::Identifier(all) => {
                get_record_identifier::<byteorder::LittleEndian>(record, data, *all)
            }
        };
        match id.map(|id| self.ids.get(&id).copied()) {
            Some(None) if kind == RECORD_SAMPLE => None,
            Some(Some(attr)) => Some(attr),
            _ => Some(0),
        }
    }

    /// A record's time, if its event gives it one.
    fn time_of(&self, attr: usize, kind: u32, body: &[u8]) -> Option<u64> {
        let info = self.parse.get(attr)?;
        get_record_timestamp::<byteorder::LittleEndian>(RecordType(kind), RawData::from(body), info)
    }
}

fn sample_id_all(a: &AttributeDescription) -> bool {
    a.attr
        .flags
        .contains(linux_perf_data::linux_perf_event_reader::AttrFlags::SAMPLE_ID_ALL)
}

/// A record the walk hands on: its event (`None`: a sample of an id the
/// header does not name), and its bytes, header included.
#[derive(Clone, Copy)]
pub(super) struct Found<'a> {
    pub attr: Option<usize>,
    pub bytes: &'a [u8],
}

/// Walks `data`, the data section (which starts at byte `base` of the
/// file), handing each of the kernel's records to `f` in time order and
/// releasing, through `done_below`, the part of the section no record
/// waiting lies in. Returns what broke the walk, naming the file byte.
pub(super) fn walk(
    data: &[u8],
    base: u64,
    attrs: &Attrs,
    mut done_below: impl FnMut(usize),
    mut f: impl FnMut(Found<'_>),
) -> Result<(), String> {
    let mut rounds = Rounds::default();
    let mut hand_on = |p: &Pending, after: &[Pending]| {
        if let Some(ahead) = after.get(FETCH_AHEAD - 1) {
            fetch_ahead(data, ahead);
        }
        let start = usize::try_from(p.offset()).unwrap_or(usize::MAX);
        if let Some(bytes) = data.get(start..start + p.len as usize) {
            f(Found {
                attr: (p.attr != NO_EVENT).then_some(p.attr as usize),
                bytes,
            });
        }
    };
    let mut at = 0usize;
    while at < data.len() {
        let Framed { kind, len, next } = framed(data, at, base)?;
        let body = &data[at + HEADER..at + len];
        if kind == RECORD_FINISHED_ROUND {
            rounds.finish_round(&mut hand_on);
            done_below(rounds.first_waiting().map_or(next, |o| o as usize));
        } else if kind < USER_TYPES {
            let attr = attrs.attr_of(kind, body);
            rounds.insert(Pending {
                key: (attr.and_then(|a| attrs.time_of(a, kind, body)), at as u64),
                len: u32::try_from(len).unwrap_or(u32::MAX),
                attr: attr.and_then(|a| u32::try_from(a).ok()).unwrap_or(NO_EVENT),
            });
        }
        at = next;
    }
    rounds.finish(&mut hand_on);
    Ok(())
}

/// How many records ahead of the one handed on the next is fetched.
const FETCH_AHEAD: usize = 2;

/// Bytes at the start of a record fetched ahead: its fields, the user
/// registers and the start of a stack copy, which the parser and the
/// unwinder read first.
const FETCHED: usize = 1024;

/// Asks the processor to fetch the start of record `p` into its caches
/// while the records before it are handled: each record lies a page or
/// more past the one before, so that each was a wait for memory.
fn fetch_ahead(data: &[u8], p: &Pending) {
    let start = usize::try_from(p.offset()).unwrap_or(usize::MAX);
    let end = start.saturating_add((p.len as usize).min(FETCHED));
    let Some(bytes) = data.get(start..end) else {
        return;
    };
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch reads nothing the program sees and cannot
        // fault; the address lies in `data` anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// A record's framing: its type, its size, and where the next one starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Framed {
    pub kind: u32,
    pub len: usize,
    pub next: usize,
}

/// The framing of the record at `at` of `data`, the data section (which
/// starts at byte `base` of the file), checked: its size at least its
/// header and within the section, an aux trace's data too; compressed
/// records refused. The error names the file byte.
pub(super) fn framed(data: &[u8], at: usize, base: u64) -> Result<Framed, String> {
    let byte = base + at as u64;
    let left = data.len().saturating_sub(at);
    let Some(header) = data.get(at..at.saturating_add(HEADER)) else {
        return Err(format!(
            "the record at byte {byte} has {left} bytes left in the data section, less than a header"
        ));
    };
    let kind = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let len = usize::from(u16::from_le_bytes([header[6], header[7]]));
    if matches!(kind, RECORD_COMPRESSED | RECORD_COMPRESSED2) {
        return Err(format!(
            "the record at byte {byte} is compressed (perf record -z): such files are not read; \
             perf inject -i FILE -o OUT writes it uncompressed"
        ));
    }
    if len < HEADER {
        return Err(format!(
            "the record at byte {byte} claims {len} bytes, less than its 8-byte header"
        ));
    }
    if len > left {
        return Err(format!(
            "the record at byte {byte} claims {len} bytes, past the data section's end at byte {}",
            base + data.len() as u64
        ));
    }
    let mut next = at + len;
    if kind == RECORD_AUXTRACE {
        // Its trace data follows it: `size` bytes, within the section.
        if len < AUXTRACE_LEN {
            return Err(format!(
                "the aux trace record at byte {byte} is {len} bytes, shorter than its {AUXTRACE_LEN}"
            ));
        }
        let size = u64::from_le_bytes(
            data[at + HEADER..at + HEADER + 8]
                .try_into()
                .expect("8 bytes"),
        );
        if size > (data.len() - next) as u64 {
            return Err(format!(
                "the aux trace at byte {byte} claims {size} bytes, past the data section's end at byte {}",
                base + data.len() as u64
            ));
        }
        next += usize::try_from(size).unwrap_or(usize::MAX);
    }
    Ok(Framed { kind, len, next })
}

/// The sample format of a perf.data event, as our parser takes it.
pub(super) fn format_of(attr: &PerfEventAttr) -> ichnos_perf::record::SampleFormat {
    ichnos_perf::record::SampleFormat {
        sample_type: attr.sample_format.bits(),
        read_format: attr.read_format.bits(),
        regs_user: attr.sample_regs_user,
        branch_sample_type: attr.branch_sample_format.bits(),
        sample_id_all: attr
            .flags
            .contains(linux_perf_data::linux_perf_event_reader::AttrFlags::SAMPLE_ID_ALL),
    }
}
