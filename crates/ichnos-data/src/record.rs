//! The records of a recording, borrowed from the chunk they were read
//! from (or from the caller, to be written), with their encoding.

use crate::varint::{put_bytes, put_s, put_u, Cursor, FieldError};

mod calls;
mod values;
pub use calls::{
    CallEvent, CallEvents, CallEventsEncoder, Calls, CallsOut, OwnedCallEvents, CALLS_CONTINUED,
    CALLS_EXEC, CALLS_LAST, CALLS_RESUMED, CALLS_RING,
};
use values::Code;
pub use values::{ClockSource, JitSource, LostCause, OffCpuState, StackStop, Target};

/// Record kinds (`docs/recording-format.md`).
pub mod kind {
    /// The recording's description.
    pub const META: u8 = 1;
    /// An address space of a process.
    pub const PROCESS: u8 = 2;
    /// A thread's name.
    pub const THREAD: u8 = 3;
    /// A thread ended.
    pub const EXIT: u8 = 4;
    /// A file mapping.
    pub const MAPPING: u8 = 5;
    /// An interned stack.
    pub const STACK: u8 = 6;
    /// A sample.
    pub const SAMPLE: u8 = 7;
    /// A JIT code range's name.
    pub const JIT_CODE: u8 = 8;
    /// Lost samples or records.
    pub const LOST: u8 = 9;
    /// Throttling.
    pub const THROTTLE: u8 = 10;
    /// The end of a finished recording.
    pub const END: u8 = 11;
    /// A thread off its CPU.
    pub const OFF_CPU: u8 = 12;
    /// A reading of a function trace's clock.
    pub const CLOCK: u8 = 13;
    /// A block of a thread's function trace.
    pub const CALLS: u8 = 14;
    /// A kernel function's name.
    pub const KERNEL_SYMBOL: u8 = 15;
}

/// The most bytes of a command line a description keeps, and of each
/// argument: far below the largest record a writer takes, and the count
/// of arguments below what a reader takes.
pub const MAX_COMMAND_BYTES: usize = 64 << 10;
/// See [`MAX_COMMAND_BYTES`].
pub const MAX_ARGUMENT_BYTES: usize = 4 << 10;

/// `args` as a description keeps them ([`Meta::command`]): the first
/// ones, each cut at [`MAX_ARGUMENT_BYTES`], up to [`MAX_COMMAND_BYTES`]
/// in all (a command line of any length, even one of a million
/// arguments, gives a description that can be written and read).
pub fn bounded_command<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    let mut budget = MAX_COMMAND_BYTES;
    let mut kept = Vec::new();
    for arg in args {
        let arg = &arg[..arg.len().min(MAX_ARGUMENT_BYTES)];
        // Each costs its bytes and its length's varint (at most 8 here).
        let cost = arg.len() + 8;
        if cost > budget {
            break;
        }
        budget -= cost;
        kept.push(arg);
    }
    kept
}

/// The recording's description: the first record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta<'a> {
    /// The machine's node name.
    pub host: &'a [u8],
    /// The kernel release.
    pub kernel: &'a [u8],
    /// The command that was run (empty when attaching).
    pub command: Vec<&'a [u8]>,
    /// The sampling event.
    pub event: &'a [u8],
    /// Samples per second asked for.
    pub frequency: u64,
    /// Bytes of user stack copied per sample.
    pub stack_size: u64,
    /// The start, on `CLOCK_MONOTONIC` (every `time` counts from it).
    pub start_monotonic_ns: u64,
    /// The start, in nanoseconds since 1970.
    pub start_realtime_ns: u64,
    /// What wrote the recording.
    pub recorder: &'a [u8],
    /// Who was recorded.
    pub target: Target,
    /// The event that sampled threads leaving their CPUs
    /// (`sched:sched_switch`, `context-switches`); empty: off-CPU time
    /// was not recorded.
    pub off_cpu_event: &'a [u8],
}

/// The frames of a stack, innermost first, as stored: decoded on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frames<'a> {
    count: u64,
    encoded: &'a [u8],
}

impl<'a> Frames<'a> {
    /// How many frames.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The frames (checked whole when the record was read).
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let mut cursor = Cursor::new(self.encoded);
        let mut prev = 0u64;
        (0..self.count).map(move |i| {
            let v = if i == 0 {
                cursor.u().unwrap_or(0)
            } else {
                prev.wrapping_add_signed(cursor.s().unwrap_or(0))
            };
            prev = v;
            v
        })
    }
}

/// An interned stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stack<'a> {
    /// Its number.
    pub id: u64,
    /// Its address space.
    pub asid: u64,
    /// Why its walk ended.
    pub stop: StackStop,
    /// Its frames.
    pub frames: Frames<'a>,
}

/// A stack to write: frames given as a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackOut<'a> {
    /// Its number.
    pub id: u64,
    /// Its address space.
    pub asid: u64,
    /// Why its walk ended.
    pub stop: StackStop,
    /// Its frames, innermost first.
    pub frames: &'a [u64],
}

/// `Exit.flags` bit, in a function trace: the process ended before its
/// tracing runtime handed its threads' last buffers over (it was killed
/// by SIGKILL, or ended in a way the runtime does not see), so their last
/// events are missing; how many is not known.
pub const EXIT_CUT_SHORT: u64 = 1;

/// A record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// The description.
    Meta(Meta<'a>),
    /// An address space of a process.
    Process {
        /// The address space.
        asid: u64,
        /// The process.
        pid: u64,
        /// The address space it starts as a copy of (0: none).
        parent: u64,
        /// From when.
        time: u64,
        /// The process's command name then.
        name: &'a [u8],
    },
    /// A thread's name.
    Thread {
        /// The process.
        pid: u64,
        /// The thread.
        tid: u64,
        /// From when.
        time: u64,
        /// The name.
        name: &'a [u8],
    },
    /// A thread (or, if `tid == pid`, the process) ended.
    Exit {
        /// The process.
        pid: u64,
        /// The thread.
        tid: u64,
        /// When.
        time: u64,
        /// [`EXIT_CUT_SHORT`], or 0 (and 0 in the recordings made before
        /// the field, whose bodies end before it).
        flags: u64,
    },
    /// A file mapping.
    Mapping {
        /// The address space.
        asid: u64,
        /// First address.
        start: u64,
        /// Length.
        len: u64,
        /// File offset of `start`.
        pgoff: u64,
        /// From when.
        time: u64,
        /// The file.
        path: &'a [u8],
        /// Its build id (empty: unknown).
        build_id: &'a [u8],
        /// Bit 0: executable.
        flags: u64,
    },
    /// An interned stack, as read.
    Stack(Stack<'a>),
    /// An interned stack, to write.
    StackOut(StackOut<'a>),
    /// A sample.
    Sample {
        /// When.
        time: u64,
        /// The process.
        pid: u64,
        /// The thread.
        tid: u64,
        /// The CPU.
        cpu: u64,
        /// The stack's number.
        stack: u64,
        /// Events attributed (nanoseconds of cpu-clock, or cycles).
        weight: u64,
    },
    /// A thread off its CPU: it left at `time` in stack `stack` and came
    /// back `duration` nanoseconds later.
    OffCpu {
        /// When it left.
        time: u64,
        /// The process.
        pid: u64,
        /// The thread.
        tid: u64,
        /// The CPU it left.
        cpu: u64,
        /// The stack it left in.
        stack: u64,
        /// Nanoseconds until it ran again (or the recording ended).
        duration: u64,
        /// Why it was off.
        state: OffCpuState,
    },
    /// A JIT code range's name.
    JitCode {
        /// The address space.
        asid: u64,
        /// First address.
        start: u64,
        /// One past the last.
        end: u64,
        /// Where the name came from.
        source: JitSource,
        /// The name.
        name: &'a [u8],
    },
    /// A function of the running kernel that stacks have frames in:
    /// machine-wide, as `/proc/kallsyms` named it while the recording was
    /// made.
    KernelSymbol {
        /// Its first address.
        start: u64,
        /// One past its last (where the next function starts).
        end: u64,
        /// The kernel module it is in (empty: the kernel itself).
        module: &'a [u8],
        /// Its name.
        name: &'a [u8],
    },
    /// Lost samples or records.
    Lost {
        /// About when.
        time: u64,
        /// On which CPU.
        cpu: u64,
        /// How many.
        count: u64,
        /// Why.
        cause: LostCause,
    },
    /// Throttling began or ended.
    Throttle {
        /// When.
        time: u64,
        /// On which CPU.
        cpu: u64,
        /// Began (true) or ended.
        throttled: bool,
    },
    /// The end of a finished recording.
    End {
        /// When.
        time: u64,
        /// Samples kept.
        samples: u64,
        /// Samples lost.
        lost: u64,
    },
    /// The function trace's clock read `ticks` at `time`: two of these
    /// (the first and the last) turn ticks into times.
    Clock {
        /// The trace clock's reading.
        ticks: u64,
        /// The recording's time at that moment.
        time: u64,
        /// What the ticks count.
        source: ClockSource,
    },
    /// A block of a thread's function trace, as read.
    Calls(Calls<'a>),
    /// A block of a thread's function trace, to write.
    CallsOut(CallsOut<'a>),
    /// A record of a kind this reader does not know.
    Unknown {
        /// Its kind.
        kind: u8,
    },
}

/// `Mapping.flags` bit: the mapping is executable.
pub const MAPPING_EXECUTABLE: u64 = 1;

impl Record<'_> {
    /// The record's kind byte.
    #[must_use]
    pub fn kind(&self) -> u8 {
        match self {
            Self::Meta(_) => kind::META,
            Self::Process { .. } => kind::PROCESS,
            Self::Thread { .. } => kind::THREAD,
            Self::Exit { .. } => kind::EXIT,
            Self::Mapping { .. } => kind::MAPPING,
            Self::Stack(_) | Self::StackOut(_) => kind::STACK,
            Self::Sample { .. } => kind::SAMPLE,
            Self::OffCpu { .. } => kind::OFF_CPU,
            Self::JitCode { .. } => kind::JIT_CODE,
            Self::KernelSymbol { .. } => kind::KERNEL_SYMBOL,
            Self::Lost { .. } => kind::LOST,
            Self::Throttle { .. } => kind::THROTTLE,
            Self::End { .. } => kind::END,
            Self::Clock { .. } => kind::CLOCK,
            Self::Calls(_) | Self::CallsOut(_) => kind::CALLS,
            Self::Unknown { kind } => *kind,
        }
    }

    /// Appends the record (kind, length, body) to `out`. `scratch` is
    /// reused for the body, so a caller encoding many records allocates
    /// only while it grows.
    pub fn encode(&self, out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
        scratch.clear();
        self.encode_body(scratch);
        out.push(self.kind());
        put_u(out, scratch.len() as u64);
        out.extend_from_slice(scratch);
    }

    // One short arm per record kind: splitting it would only scatter them.
    #[allow(clippy::too_many_lines)]
    fn encode_body(&self, b: &mut Vec<u8>) {
        match self {
            Self::Meta(m) => m.encode(b),
            Self::Process {
                asid,
                pid,
                parent,
                time,
                name,
            } => {
                put_all(b, &[*asid, *pid, *parent, *time]);
                put_bytes(b, name);
            }
            Self::Thread {
                pid,
                tid,
                time,
                name,
            } => {
                put_all(b, &[*pid, *tid, *time]);
                put_bytes(b, name);
            }
            Self::Exit {
                pid,
                tid,
                time,
                flags,
            } => {
                put_all(b, &[*pid, *tid, *time, *flags]);
            }
            Self::Mapping {
                asid,
                start,
                len,
                pgoff,
                time,
                path,
                build_id,
                flags,
            } => {
                put_all(b, &[*asid, *start, *len, *pgoff, *time]);
                put_bytes(b, path);
                put_bytes(b, build_id);
                put_u(b, *flags);
            }
            Self::StackOut(s) => s.encode(b),
            Self::Stack(s) => {
                put_all(b, &[s.id, s.asid, s.stop.code(), s.frames.count]);
                b.extend_from_slice(s.frames.encoded);
            }
            Self::Sample {
                time,
                pid,
                tid,
                cpu,
                stack,
                weight,
            } => {
                put_all(b, &[*time, *pid, *tid, *cpu, *stack, *weight]);
            }
            Self::OffCpu {
                time,
                pid,
                tid,
                cpu,
                stack,
                duration,
                state,
            } => {
                put_all(
                    b,
                    &[*time, *pid, *tid, *cpu, *stack, *duration, state.code()],
                );
            }
            Self::JitCode {
                asid,
                start,
                end,
                source,
                name,
            } => {
                put_all(b, &[*asid, *start, *end, source.code()]);
                put_bytes(b, name);
            }
            Self::KernelSymbol {
                start,
                end,
                module,
                name,
            } => {
                put_all(b, &[*start, *end]);
                put_bytes(b, module);
                put_bytes(b, name);
            }
            Self::Lost {
                time,
                cpu,
                count,
                cause,
            } => {
                put_all(b, &[*time, *cpu, *count, cause.code()]);
            }
            Self::Throttle {
                time,
                cpu,
                throttled,
            } => {
                put_all(b, &[*time, *cpu, u64::from(*throttled)]);
            }
            Self::End {
                time,
                samples,
                lost,
            } => {
                put_all(b, &[*time, *samples, *lost]);
            }
            Self::Clock {
                ticks,
                time,
                source,
            } => {
                put_all(b, &[*ticks, *time, source.code()]);
            }
            Self::Calls(c) => c.encode(b),
            Self::CallsOut(c) => c.encode(b),
            Self::Unknown { .. } => {}
        }
    }
}

/// Appends each value as a varint.
fn put_all(b: &mut Vec<u8>, values: &[u64]) {
    for &v in values {
        put_u(b, v);
    }
}

/// What is wrong with a record's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The body ends inside a field.
    #[error("the body ends inside {field}")]
    Truncated {
        /// The field.
        field: &'static str,
    },
    /// A varint is longer than 10 bytes or beyond 64 bits.
    #[error("{field} is not a 64-bit varint")]
    Overlong {
        /// The field.
        field: &'static str,
    },
    /// A field has a value no version of the format gives it.
    #[error("{field} has the unknown value {value}")]
    BadValue {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
}

struct Body<'a> {
    c: Cursor<'a>,
}

impl<'a> Body<'a> {
    fn map(field: &'static str) -> impl Fn(FieldError) -> BodyError {
        move |e| match e {
            FieldError::Truncated => BodyError::Truncated { field },
            FieldError::Overlong => BodyError::Overlong { field },
        }
    }
    fn u(&mut self, field: &'static str) -> Result<u64, BodyError> {
        self.c.u().map_err(Self::map(field))
    }
    fn s(&mut self, field: &'static str) -> Result<i64, BodyError> {
        self.c.s().map_err(Self::map(field))
    }
    fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], BodyError> {
        self.c.bytes().map_err(Self::map(field))
    }
}

/// Most arguments of a `Meta` command (the kernel's limit on arguments
/// is far below what a body could claim).
const MAX_COMMAND_ARGS: u64 = 1 << 16;

/// Decodes the body of a record of `kind`.
pub fn decode(kind: u8, body: &[u8]) -> Result<Record<'_>, BodyError> {
    let mut b = Body {
        c: Cursor::new(body),
    };
    Ok(match kind {
        kind::META => Record::Meta(Meta::decode(&mut b)?),
        kind::PROCESS => Record::Process {
            asid: b.u("asid")?,
            pid: b.u("pid")?,
            parent: b.u("parent")?,
            time: b.u("time")?,
            name: b.bytes("name")?,
        },
        kind::THREAD => Record::Thread {
            pid: b.u("pid")?,
            tid: b.u("tid")?,
            time: b.u("time")?,
            name: b.bytes("name")?,
        },
        kind::EXIT => Record::Exit {
            pid: b.u("pid")?,
            tid: b.u("tid")?,
            time: b.u("time")?,
            flags: if b.c.is_empty() { 0 } else { b.u("flags")? },
        },
        kind::MAPPING => Record::Mapping {
            asid: b.u("asid")?,
            start: b.u("start")?,
            len: b.u("len")?,
            pgoff: b.u("pgoff")?,
            time: b.u("time")?,
            path: b.bytes("path")?,
            build_id: b.bytes("build_id")?,
            flags: b.u("flags")?,
        },
        kind::STACK => Record::Stack(Stack::decode(body, &mut b)?),
        kind::SAMPLE => Record::Sample {
            time: b.u("time")?,
            pid: b.u("pid")?,
            tid: b.u("tid")?,
            cpu: b.u("cpu")?,
            stack: b.u("stack")?,
            weight: b.u("weight")?,
        },
        kind::OFF_CPU => Record::OffCpu {
            time: b.u("time")?,
            pid: b.u("pid")?,
            tid: b.u("tid")?,
            cpu: b.u("cpu")?,
            stack: b.u("stack")?,
            duration: b.u("duration")?,
            state: OffCpuState::from_code(b.u("state")?),
        },
        kind::JIT_CODE => Record::JitCode {
            asid: b.u("asid")?,
            start: b.u("start")?,
            end: b.u("end")?,
            source: JitSource::from_code(b.u("source")?),
            name: b.bytes("name")?,
        },
        kind::KERNEL_SYMBOL => Record::KernelSymbol {
            start: b.u("start")?,
            end: b.u("end")?,
            module: b.bytes("module")?,
            name: b.bytes("name")?,
        },
        kind::LOST => Record::Lost {
            time: b.u("time")?,
            cpu: b.u("cpu")?,
            count: b.u("count")?,
            cause: LostCause::from_code(b.u("cause")?),
        },
        kind::THROTTLE => Record::Throttle {
            time: b.u("time")?,
            cpu: b.u("cpu")?,
            throttled: b.u("throttled")? != 0,
        },
        kind::END => Record::End {
            time: b.u("time")?,
            samples: b.u("samples")?,
            lost: b.u("lost")?,
        },
        kind::CLOCK => Record::Clock {
            ticks: b.u("ticks")?,
            time: b.u("time")?,
            source: ClockSource::from_code(b.u("source")?),
        },
        kind::CALLS => Record::Calls(Calls::decode(body, &mut b)?),
        kind => Record::Unknown { kind },
    })
}

impl<'a> Meta<'a> {
    fn encode(&self, b: &mut Vec<u8>) {
        put_bytes(b, self.host);
        put_bytes(b, self.kernel);
        put_u(b, self.command.len() as u64);
        for arg in &self.command {
            put_bytes(b, arg);
        }
        put_bytes(b, self.event);
        put_all(
            b,
            &[
                self.frequency,
                self.stack_size,
                self.start_monotonic_ns,
                self.start_realtime_ns,
            ],
        );
        put_bytes(b, self.recorder);
        put_u(b, self.target.code());
        put_bytes(b, self.off_cpu_event);
    }

    fn decode(b: &mut Body<'a>) -> Result<Self, BodyError> {
        let host = b.bytes("host")?;
        let kernel = b.bytes("kernel")?;
        let n = b.u("command")?;
        if n > MAX_COMMAND_ARGS {
            return Err(BodyError::BadValue {
                field: "command",
                value: n,
            });
        }
        let mut command = Vec::new();
        for _ in 0..n {
            command.push(b.bytes("command")?);
        }
        Ok(Meta {
            host,
            kernel,
            command,
            event: b.bytes("event")?,
            frequency: b.u("frequency")?,
            stack_size: b.u("stack_size")?,
            start_monotonic_ns: b.u("start_monotonic_ns")?,
            start_realtime_ns: b.u("start_realtime_ns")?,
            recorder: b.bytes("recorder")?,
            target: Target::from_code(b.u("target")?),
            // Added after the first recordings: absent, there was none.
            off_cpu_event: if b.c.is_empty() {
                &[]
            } else {
                b.bytes("off_cpu_event")?
            },
        })
    }
}

impl StackOut<'_> {
    fn encode(&self, b: &mut Vec<u8>) {
        put_all(
            b,
            &[
                self.id,
                self.asid,
                self.stop.code(),
                self.frames.len() as u64,
            ],
        );
        let mut prev = 0u64;
        for (i, &f) in self.frames.iter().enumerate() {
            if i == 0 {
                put_u(b, f);
            } else {
                put_s(b, f.wrapping_sub(prev).cast_signed());
            }
            prev = f;
        }
    }
}

impl<'a> Stack<'a> {
    fn decode(body: &'a [u8], b: &mut Body<'a>) -> Result<Self, BodyError> {
        let id = b.u("id")?;
        let asid = b.u("asid")?;
        let stop = StackStop::from_code(b.u("stop")?);
        let count = b.u("count")?;
        let start = b.c.pos();
        // Every frame is checked now, so iterating later cannot fail; a
        // count beyond the body's bytes fails at its first missing frame,
        // whatever its size.
        for i in 0..count {
            if i == 0 {
                b.u("frames")?;
            } else {
                b.s("frames")?;
            }
        }
        Ok(Stack {
            id,
            asid,
            stop,
            frames: Frames {
                count,
                encoded: &body[start..b.c.pos()],
            },
        })
    }
}
