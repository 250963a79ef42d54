//! Perf records, parsed in place.
//!
//! A record is an 8-byte header (`type`, `misc`, `size`) and a body whose
//! layout depends on the type and, for samples and the `sample_id` trailer
//! of other records, on the event's `sample_type`. [`SampleFormat`] holds
//! what the layout depends on; [`parse`] returns views that borrow the
//! record's bytes. Bytes come from the kernel or from a file and are not
//! trusted: every length is checked against the record, and an error names
//! the record, the field and its offset.

use crate::attr::{self, sample, PerfEventAttr};

mod framing;
mod sample_body;

pub use framing::{FramingError, Records};
use sample_body::parse_sample;
pub use sample_body::{append_sample_with_stack_cut, append_with_stack_cut};

/// `PERF_RECORD_MMAP`.
pub const RECORD_MMAP: u32 = 1;
/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = 2;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
pub const RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_THROTTLE`.
pub const RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`.
pub const RECORD_UNTHROTTLE: u32 = 6;
/// `PERF_RECORD_FORK`.
pub const RECORD_FORK: u32 = 7;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = 10;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const RECORD_LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_SWITCH`.
pub const RECORD_SWITCH: u32 = 14;
/// `PERF_RECORD_SWITCH_CPU_WIDE`.
pub const RECORD_SWITCH_CPU_WIDE: u32 = 15;

/// A callchain's marker before the kernel's addresses
/// (`PERF_CONTEXT_KERNEL`).
pub const CONTEXT_KERNEL: u64 = u64::MAX - 127;
/// A callchain's marker before user addresses (`PERF_CONTEXT_USER`).
pub const CONTEXT_USER: u64 = u64::MAX - 511;
/// The least callchain marker (`PERF_CONTEXT_MAX`): a callchain word at
/// or above it is a marker, not an address.
pub const CONTEXT_MAX: u64 = u64::MAX - 4094;

/// `misc`: the sample's CPU mode bits.
pub const MISC_CPUMODE_MASK: u16 = 7;
/// CPU mode: user space.
pub const MISC_USER: u16 = 2;
/// `misc` of MMAP records: a data (not executable) mapping.
pub const MISC_MMAP_DATA: u16 = 1 << 13;
/// `misc` of COMM records: the name changed because of an exec.
pub const MISC_COMM_EXEC: u16 = 1 << 13;
/// `misc` of MMAP2 records: a build id instead of device and inode.
pub const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `misc` of SWITCH records: the thread left its CPU (else it came on).
pub const MISC_SWITCH_OUT: u16 = 1 << 13;
/// `misc` of SWITCH records that leave: the thread was preempted, still
/// runnable (Linux 4.17), rather than waiting.
pub const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 8;

/// `PERF_SAMPLE_REGS_ABI_NONE`: the sample has no user registers (a
/// kernel thread).
pub const REGS_ABI_NONE: u64 = 0;

/// What the layout of samples and `sample_id` trailers depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleFormat {
    /// The event's `sample_type`.
    pub sample_type: u64,
    /// Its `read_format`.
    pub read_format: u64,
    /// Its `sample_regs_user` mask.
    pub regs_user: u64,
    /// Its `branch_sample_type`.
    pub branch_sample_type: u64,
    /// Whether records other than samples end with the `sample_id` fields.
    pub sample_id_all: bool,
}

impl SampleFormat {
    /// The format of an event opened with `attr`.
    #[must_use]
    pub fn of(attr: &PerfEventAttr) -> Self {
        Self {
            sample_type: attr.sample_type,
            read_format: attr.read_format,
            regs_user: attr.sample_regs_user,
            branch_sample_type: attr.branch_sample_type,
            sample_id_all: attr.flags & attr::flag::SAMPLE_ID_ALL != 0,
        }
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// Bytes of the `sample_id` trailer of non-sample records.
    #[must_use]
    pub fn sample_id_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        [
            sample::TID,
            sample::TIME,
            sample::ID,
            sample::STREAM_ID,
            sample::CPU,
            sample::IDENTIFIER,
        ]
        .iter()
        .filter(|&&bit| self.has(bit))
        .count()
            * 8
    }
}

/// A record's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// `type` (`RECORD_*`).
    pub kind: u32,
    /// `misc` bits.
    pub misc: u16,
    /// Bytes of the whole record, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Reads the header at the start of `bytes`.
    #[must_use]
    pub fn read(bytes: &[u8]) -> Option<RecordHeader> {
        let h = bytes.first_chunk::<HEADER_LEN>()?;
        Some(RecordHeader {
            kind: u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
            misc: u16::from_le_bytes([h[4], h[5]]),
            size: u16::from_le_bytes([h[6], h[7]]),
        })
    }
}

/// The fields the `sample_id` trailer (or a sample) may carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// The process.
    pub pid: Option<u32>,
    /// The thread.
    pub tid: Option<u32>,
    /// The timestamp.
    pub time: Option<u64>,
    /// The event id.
    pub id: Option<u64>,
    /// The stream id.
    pub stream_id: Option<u64>,
    /// The CPU.
    pub cpu: Option<u32>,
}

/// User registers of a sample: the ABI and the values of the registers of
/// the event's mask, in bit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRegs<'a> {
    /// `PERF_SAMPLE_REGS_ABI_*`.
    pub abi: u64,
    mask: u64,
    values: &'a [u8],
}

impl UserRegs<'_> {
    /// The value of register `reg` (a `PERF_REG_*` number), if it was
    /// dumped.
    #[must_use]
    pub fn get(&self, reg: u32) -> Option<u64> {
        if reg >= 64 || self.mask & (1 << reg) == 0 {
            return None;
        }
        let index = (self.mask & ((1u64 << reg) - 1)).count_ones() as usize;
        let word = self.values.get(index * 8..)?.first_chunk::<8>()?;
        Some(u64::from_le_bytes(*word))
    }
}

/// A sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The header's `misc` (CPU mode in the low bits).
    pub misc: u16,
    /// The instruction pointer.
    pub ip: Option<u64>,
    /// Process, thread, time, ids and CPU.
    pub id: SampleId,
    /// The data address.
    pub addr: Option<u64>,
    /// The sampling period (event counts since the last sample).
    pub period: Option<u64>,
    /// The kernel's callchain: `u64` addresses, little-endian.
    pub callchain: Option<&'a [u8]>,
    /// Raw tracepoint data.
    pub raw: Option<&'a [u8]>,
    /// User registers.
    pub regs_user: Option<UserRegs<'a>>,
    /// The bytes of the user stack copied, from the sampled stack pointer
    /// up (`dyn_size` of them).
    pub stack_user: Option<&'a [u8]>,
    /// The stack copy's requested size (a `dyn_size` equal to it means the
    /// copy may have cut the stack).
    pub stack_user_size: u64,
}

impl Sample<'_> {
    /// The callchain's addresses.
    pub fn callchain(&self) -> impl Iterator<Item = u64> + '_ {
        self.callchain
            .unwrap_or_default()
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
    }
}

/// The inode a mapped file had (MMAP2 without a build id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeId {
    /// Device major number.
    pub maj: u32,
    /// Device minor number.
    pub min: u32,
    /// Inode number.
    pub ino: u64,
    /// Inode generation.
    pub ino_generation: u64,
}

/// A mapping (MMAP or MMAP2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// The process.
    pub pid: u32,
    /// The thread that mapped it.
    pub tid: u32,
    /// First address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of the first byte.
    pub pgoff: u64,
    /// MMAP2: the file's inode.
    pub inode: Option<InodeId>,
    /// MMAP2 with [`MISC_MMAP_BUILD_ID`]: the file's build id.
    pub build_id: Option<&'a [u8]>,
    /// MMAP2: protection bits (`PROT_*`).
    pub prot: Option<u32>,
    /// MMAP2: mapping flags (`MAP_*`).
    pub flags: Option<u32>,
    /// The file name (or `//anon`, `[vdso]`, ...), without its NUL.
    pub filename: &'a [u8],
    /// Whether the mapping is executable (not [`MISC_MMAP_DATA`]).
    pub executable: bool,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// A command name (COMM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The name, without its NUL.
    pub name: &'a [u8],
    /// The name changed because the process executed a new program.
    pub exec: bool,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// A fork or an exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskEvent {
    /// The process.
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// The thread.
    pub tid: u32,
    /// The parent thread.
    pub ptid: u32,
    /// When.
    pub time: u64,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// Records the kernel could not write into a full ring (LOST).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The event.
    pub id: u64,
    /// How many records.
    pub lost: u64,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// Samples lost by the event (`LOST_SAMPLES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostSamples {
    /// How many.
    pub lost: u64,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// The kernel throttled or unthrottled an event sampling too fast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// When.
    pub time: u64,
    /// The event.
    pub id: u64,
    /// The stream.
    pub stream_id: u64,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// A thread switched onto or off a CPU (`PERF_RECORD_SWITCH`, or
/// `PERF_RECORD_SWITCH_CPU_WIDE`): the thread is the trailer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// It left the CPU (else it came on).
    pub out: bool,
    /// It left preempted, still runnable (else it waits, or the kernel
    /// is older than 4.17 and does not say).
    pub preempted: bool,
    /// For a CPU-wide record, the other thread (`pid`, `tid`): the next
    /// to run when leaving, the previous when coming on.
    pub other: Option<(u32, u32)>,
    /// The `sample_id` trailer.
    pub sample_id: SampleId,
}

/// A parsed record, borrowing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A sample.
    Sample(Sample<'a>),
    /// A mapping.
    Mmap(Mmap<'a>),
    /// A command name.
    Comm(Comm<'a>),
    /// A new process or thread.
    Fork(TaskEvent),
    /// A process or thread ended.
    Exit(TaskEvent),
    /// Records lost in a full ring.
    Lost(Lost),
    /// Samples lost.
    LostSamples(LostSamples),
    /// Sampling throttled.
    Throttle(Throttle),
    /// Sampling resumed.
    Unthrottle(Throttle),
    /// A context switch.
    Switch(Switch),
    /// A record of another type, not parsed.
    Other {
        /// Its type.
        kind: u32,
    },
}

impl Record<'_> {
    /// The record's timestamp, if it carries one.
    #[must_use]
    pub fn time(&self) -> Option<u64> {
        match self {
            Self::Sample(s) => s.id.time,
            Self::Mmap(m) => m.sample_id.time,
            Self::Comm(c) => c.sample_id.time,
            Self::Fork(t) | Self::Exit(t) => Some(t.time),
            Self::Lost(l) => l.sample_id.time,
            Self::LostSamples(l) => l.sample_id.time,
            Self::Throttle(t) | Self::Unthrottle(t) => Some(t.time),
            Self::Switch(s) => s.sample_id.time,
            Self::Other { .. } => None,
        }
    }
}

/// What is wrong with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordProblem {
    /// The record ends before the field does.
    #[error("{field} needs {needed} bytes, {left} are left")]
    Truncated {
        /// The field.
        field: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the record.
        left: usize,
    },
    /// The header's size cannot hold a header.
    #[error("size {size} is smaller than the 8-byte header")]
    BadSize {
        /// The size.
        size: u16,
    },
    /// A string has no terminating NUL within the record.
    #[error("{field} has no NUL within the record")]
    Unterminated {
        /// The field.
        field: &'static str,
    },
    /// A length field exceeds what a record can hold.
    #[error("{field} is {value}, more than a record holds")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
}

/// A record that could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} record of {len} bytes, at byte {offset}: {problem}", record_name(*kind))]
pub struct RecordError {
    /// The record's type.
    pub kind: u32,
    /// The record's size.
    pub len: usize,
    /// Offset in the record of the field concerned.
    pub offset: usize,
    /// What is wrong.
    pub problem: RecordProblem,
}

/// The name of a record type, for messages.
#[must_use]
pub fn record_name(kind: u32) -> &'static str {
    match kind {
        RECORD_MMAP => "MMAP",
        RECORD_LOST => "LOST",
        RECORD_COMM => "COMM",
        RECORD_EXIT => "EXIT",
        RECORD_THROTTLE => "THROTTLE",
        RECORD_UNTHROTTLE => "UNTHROTTLE",
        RECORD_FORK => "FORK",
        RECORD_SAMPLE => "SAMPLE",
        RECORD_MMAP2 => "MMAP2",
        RECORD_LOST_SAMPLES => "LOST_SAMPLES",
        RECORD_SWITCH => "SWITCH",
        RECORD_SWITCH_CPU_WIDE => "SWITCH_CPU_WIDE",
        _ => "perf",
    }
}

/// Reads fields in order from a record's bytes.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
    kind: u32,
}

impl<'a> Fields<'a> {
    fn error(&self, problem: RecordProblem) -> RecordError {
        RecordError {
            kind: self.kind,
            len: self.bytes.len(),
            offset: self.pos,
            problem,
        }
    }

    fn take(&mut self, field: &'static str, n: u64) -> Result<&'a [u8], RecordError> {
        let left = self.bytes.len() - self.pos;
        match usize::try_from(n).ok().filter(|&n| n <= left) {
            Some(n) => {
                let out = &self.bytes[self.pos..self.pos + n];
                self.pos += n;
                Ok(out)
            }
            None => Err(self.error(RecordProblem::Truncated {
                field,
                needed: n,
                left,
            })),
        }
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, RecordError> {
        let b = self.take(field, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, RecordError> {
        let b = self.take(field, 4)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }

    /// Two `u32`s packed in one word (`pid, tid`, `cpu, res`).
    fn pair(&mut self, field: &'static str) -> Result<(u32, u32), RecordError> {
        Ok((self.u32(field)?, self.u32(field)?))
    }

    /// A count of `u64`s followed by that many, bounded by the record.
    fn words(&mut self, field: &'static str) -> Result<&'a [u8], RecordError> {
        let n = self.u64(field)?;
        let bytes = n
            .checked_mul(8)
            .ok_or_else(|| self.error(RecordProblem::TooLong { field, value: n }))?;
        self.take(field, bytes)
    }

    /// A NUL-terminated string padded to 8 bytes, ending before `end`.
    fn string(&mut self, field: &'static str, end: usize) -> Result<&'a [u8], RecordError> {
        let area = self.bytes.get(self.pos..end).unwrap_or_default();
        let nul = area
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.error(RecordProblem::Unterminated { field }))?;
        self.pos = end;
        Ok(&area[..nul])
    }
}

/// Parses a whole record (header included) of an event with `format`.
pub fn parse<'a>(format: &SampleFormat, bytes: &'a [u8]) -> Result<Record<'a>, RecordError> {
    let header = RecordHeader::read(bytes).ok_or(RecordError {
        kind: 0,
        len: bytes.len(),
        offset: 0,
        problem: RecordProblem::Truncated {
            field: "header",
            needed: HEADER_LEN as u64,
            left: bytes.len(),
        },
    })?;
    let size = usize::from(header.size);
    if size < HEADER_LEN {
        return Err(RecordError {
            kind: header.kind,
            len: bytes.len(),
            offset: 6,
            problem: RecordProblem::BadSize { size: header.size },
        });
    }
    let bytes = bytes.get(..size).ok_or(RecordError {
        kind: header.kind,
        len: bytes.len(),
        offset: 6,
        problem: RecordProblem::Truncated {
            field: "record",
            needed: size as u64,
            left: bytes.len(),
        },
    })?;
    let mut f = Fields {
        bytes,
        pos: HEADER_LEN,
        kind: header.kind,
    };
    if header.kind == RECORD_SAMPLE {
        return parse_sample(format, header.misc, &mut f).map(Record::Sample);
    }
    parse_side_band(format, header, &mut f)
}

/// A record other than a sample: its fields, then the `sample_id`
/// trailer at its end.
fn parse_side_band<'a>(
    format: &SampleFormat,
    header: RecordHeader,
    f: &mut Fields<'a>,
) -> Result<Record<'a>, RecordError> {
    let size = f.bytes.len();
    // The trailer sits at the end; the fields before it end where it
    // starts.
    let body_end = size
        .checked_sub(format.sample_id_len())
        .filter(|&e| e >= HEADER_LEN);
    let Some(body_end) = body_end else {
        return Err(f.error(RecordProblem::Truncated {
            field: "sample_id",
            needed: format.sample_id_len() as u64,
            left: size - HEADER_LEN,
        }));
    };
    let trailer = |f: &Fields<'a>| -> Result<SampleId, RecordError> {
        let mut t = Fields {
            bytes: f.bytes,
            pos: body_end,
            kind: f.kind,
        };
        sample_id(format, &mut t)
    };
    let record = match header.kind {
        RECORD_MMAP | RECORD_MMAP2 => {
            let mut mmap = parse_mmap(header, f, body_end)?;
            mmap.sample_id = trailer(f)?;
            Record::Mmap(mmap)
        }
        RECORD_COMM => {
            let (pid, tid) = f.pair("pid")?;
            let name = f.string("comm", body_end)?;
            Record::Comm(Comm {
                pid,
                tid,
                name,
                exec: header.misc & MISC_COMM_EXEC != 0,
                sample_id: trailer(f)?,
            })
        }
        RECORD_FORK | RECORD_EXIT => {
            let (pid, parent) = f.pair("pid")?;
            let (tid, creator) = f.pair("tid")?;
            let event = TaskEvent {
                pid,
                ppid: parent,
                tid,
                ptid: creator,
                time: f.u64("time")?,
                sample_id: trailer(f)?,
            };
            if header.kind == RECORD_FORK {
                Record::Fork(event)
            } else {
                Record::Exit(event)
            }
        }
        RECORD_LOST => Record::Lost(Lost {
            id: f.u64("id")?,
            lost: f.u64("lost")?,
            sample_id: trailer(f)?,
        }),
        RECORD_LOST_SAMPLES => Record::LostSamples(LostSamples {
            lost: f.u64("lost")?,
            sample_id: trailer(f)?,
        }),
        RECORD_THROTTLE | RECORD_UNTHROTTLE => {
            let event = Throttle {
                time: f.u64("time")?,
                id: f.u64("id")?,
                stream_id: f.u64("stream_id")?,
                sample_id: trailer(f)?,
            };
            if header.kind == RECORD_THROTTLE {
                Record::Throttle(event)
            } else {
                Record::Unthrottle(event)
            }
        }
        RECORD_SWITCH | RECORD_SWITCH_CPU_WIDE => {
            let other = if header.kind == RECORD_SWITCH_CPU_WIDE {
                Some(f.pair("next_prev_pid")?)
            } else {
                None
            };
            let out = header.misc & MISC_SWITCH_OUT != 0;
            Record::Switch(Switch {
                out,
                preempted: out && header.misc & MISC_SWITCH_OUT_PREEMPT != 0,
                other,
                sample_id: trailer(f)?,
            })
        }
        kind => Record::Other { kind },
    };
    if f.pos > body_end {
        return Err(f.error(RecordProblem::Truncated {
            field: "sample_id",
            needed: format.sample_id_len() as u64,
            left: size.saturating_sub(f.pos),
        }));
    }
    Ok(record)
}

/// The fields of an MMAP or MMAP2 record before its trailer, which ends
/// at `body_end` (the trailer is left for the caller).
fn parse_mmap<'a>(
    header: RecordHeader,
    f: &mut Fields<'a>,
    body_end: usize,
) -> Result<Mmap<'a>, RecordError> {
    let (pid, tid) = f.pair("pid")?;
    let addr = f.u64("addr")?;
    let len = f.u64("len")?;
    let pgoff = f.u64("pgoff")?;
    let (mut inode, mut build_id, mut prot, mut flags) = (None, None, None, None);
    if header.kind == RECORD_MMAP2 {
        if header.misc & MISC_MMAP_BUILD_ID != 0 {
            let id = f.take("build_id", 24)?;
            let n = usize::from(id[0]).min(20);
            build_id = Some(&id[4..4 + n]);
        } else {
            let (maj, min) = f.pair("maj")?;
            inode = Some(InodeId {
                maj,
                min,
                ino: f.u64("ino")?,
                ino_generation: f.u64("ino_generation")?,
            });
        }
        prot = Some(f.u32("prot")?);
        flags = Some(f.u32("flags")?);
    }
    let filename = f.string("filename", body_end)?;
    Ok(Mmap {
        pid,
        tid,
        addr,
        len,
        pgoff,
        inode,
        build_id,
        prot,
        flags,
        filename,
        executable: header.misc & MISC_MMAP_DATA == 0,
        sample_id: SampleId::default(),
    })
}

/// The `sample_id` trailer (none without `sample_id_all`).
fn sample_id(format: &SampleFormat, f: &mut Fields<'_>) -> Result<SampleId, RecordError> {
    let mut id = SampleId::default();
    if !format.sample_id_all {
        return Ok(id);
    }
    if format.has(sample::TID) {
        let (pid, tid) = f.pair("sample_id.pid")?;
        (id.pid, id.tid) = (Some(pid), Some(tid));
    }
    if format.has(sample::TIME) {
        id.time = Some(f.u64("sample_id.time")?);
    }
    if format.has(sample::ID) {
        id.id = Some(f.u64("sample_id.id")?);
    }
    if format.has(sample::STREAM_ID) {
        id.stream_id = Some(f.u64("sample_id.stream_id")?);
    }
    if format.has(sample::CPU) {
        id.cpu = Some(f.pair("sample_id.cpu")?.0);
    }
    if format.has(sample::IDENTIFIER) {
        id.id = Some(f.u64("sample_id.identifier")?);
    }
    Ok(id)
}
