//! The enumerated fields of records (who was recorded, why a walk
//! ended, where a JIT name came from, why samples were lost, why a thread
//! was off its CPU), each stored as a varint code; a code this reader does
//! not know is kept as the type's `Unknown`.

/// Who was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A command the recorder ran.
    Command,
    /// Processes it attached to.
    Processes,
    /// Every process on the machine.
    System,
    /// A value this reader does not know (a later version's).
    Unknown(u64),
}

/// A small enumeration stored as a varint code. A code no entry of
/// `ALL` has is kept as the type's `Unknown` (later versions may add
/// values; a reader does not refuse the record for one).
pub(crate) trait Code: Sized + Copy + PartialEq + 'static {
    const ALL: &'static [(Self, u64)];
    fn unknown(code: u64) -> Self;
    fn unknown_code(self) -> Option<u64>;
    fn code(self) -> u64 {
        self.unknown_code().unwrap_or_else(|| {
            Self::ALL
                .iter()
                .find(|(v, _)| *v == self)
                .map_or(0, |(_, c)| *c)
        })
    }
    fn from_code(code: u64) -> Self {
        Self::ALL
            .iter()
            .find(|(_, c)| *c == code)
            .map_or_else(|| Self::unknown(code), |(v, _)| *v)
    }
}

/// The `Unknown` methods of a [`Code`] type.
macro_rules! unknown_is {
    ($t:ident) => {
        fn unknown(code: u64) -> Self {
            $t::Unknown(code)
        }
        fn unknown_code(self) -> Option<u64> {
            match self {
                $t::Unknown(code) => Some(code),
                _ => None,
            }
        }
    };
}

impl Code for Target {
    unknown_is!(Target);
    const ALL: &'static [(Self, u64)] = &[
        (Target::Command, 0),
        (Target::Processes, 1),
        (Target::System, 2),
    ];
}

impl Code for JitSource {
    unknown_is!(JitSource);
    const ALL: &'static [(Self, u64)] = &[
        (JitSource::Registry, 1),
        (JitSource::PerfMap, 2),
        (JitSource::JitDump, 3),
        (JitSource::Span, 4),
        (JitSource::Debugger, 5),
    ];
}

impl Code for LostCause {
    unknown_is!(LostCause);
    const ALL: &'static [(Self, u64)] = &[
        (LostCause::KernelRing, 1),
        (LostCause::KernelSamples, 2),
        (LostCause::Recorder, 3),
        (LostCause::NoUserRegisters, 4),
        (LostCause::Unreadable, 5),
    ];
}

impl Code for OffCpuState {
    unknown_is!(OffCpuState);
    const ALL: &'static [(Self, u64)] = &[(OffCpuState::Waiting, 1), (OffCpuState::Preempted, 2)];
}

impl Code for StackStop {
    unknown_is!(StackStop);
    const ALL: &'static [(Self, u64)] = &[
        (StackStop::Complete, 0),
        (StackStop::StackEnd, 1),
        (StackStop::NoUnwindInfo, 2),
        (StackStop::Loop, 3),
        (StackStop::DepthLimit, 4),
        (StackStop::BadAddress, 5),
        (StackStop::SampleLost, 6),
    ];
}

/// Why a walk ended, as a stack records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackStop {
    /// The outermost frame was reached: the stack is complete.
    Complete,
    /// The stack copy ended.
    StackEnd,
    /// No unwind information for the last frame.
    NoUnwindInfo,
    /// The stack pointer did not move up.
    Loop,
    /// The frame limit.
    DepthLimit,
    /// Corrupt registers.
    BadAddress,
    /// No walk: the sample was lost (an interval off the CPU whose
    /// switch record came through and whose switch sample did not). The
    /// stack has no frames.
    SampleLost,
    /// A reason this reader does not know (a later version's): not
    /// complete.
    Unknown(u64),
}

impl StackStop {
    /// The number the format stores for it.
    #[must_use]
    pub fn number(self) -> u64 {
        Code::code(self)
    }

    /// For people.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::StackEnd => "the stack copy ended",
            Self::NoUnwindInfo => "no unwind information",
            Self::Loop => "the stack pointer did not move up",
            Self::DepthLimit => "the frame limit",
            Self::BadAddress => "corrupt registers",
            Self::SampleLost => "the sample was lost",
            Self::Unknown(_) => "an unknown reason",
        }
    }
}

/// Where a JIT code name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JitSource {
    /// The process's code registry (codectl).
    Registry,
    /// Its perf map.
    PerfMap,
    /// Its jitdump file.
    JitDump,
    /// Not code: a function trace's named span (`ichnos_span_begin`),
    /// whose events name the span by the address of its name.
    Span,
    /// The object it gave debuggers through the GDB JIT interface
    /// (`__jit_debug_descriptor`): the symbol of a function in it.
    Debugger,
    /// A source this reader does not know (a later version's).
    Unknown(u64),
}

/// Why a thread was off its CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OffCpuState {
    /// It waited: it slept, blocked on I/O or a lock, or the kernel did
    /// not say it was preempted.
    Waiting,
    /// It was preempted, still runnable, and waited for a CPU.
    Preempted,
    /// A state this reader does not know (a later version's).
    Unknown(u64),
}

impl OffCpuState {
    /// How reports name it.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Preempted => "preempted",
            Self::Unknown(_) => "off-CPU",
        }
    }
}

/// Why samples or records were lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostCause {
    /// The kernel's ring was full (records).
    KernelRing,
    /// The kernel lost samples.
    KernelSamples,
    /// The recorder could not keep up.
    Recorder,
    /// Samples without user registers.
    NoUserRegisters,
    /// Records the recorder could not read (their framing was broken).
    Unreadable,
    /// A cause this reader does not know (a later version's).
    Unknown(u64),
}

/// What a trace's ticks count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClockSource {
    /// The CPU's time-stamp counter (invariant: one rate on every CPU,
    /// through sleep states).
    Tsc,
    /// `CLOCK_MONOTONIC` nanoseconds.
    Monotonic,
    /// A source this reader does not know (a later version's).
    Unknown(u64),
}

impl Code for ClockSource {
    unknown_is!(ClockSource);
    const ALL: &'static [(Self, u64)] = &[(ClockSource::Tsc, 1), (ClockSource::Monotonic, 2)];
}
