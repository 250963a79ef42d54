//! Opening sampling events: what to sample, on which task and CPU, and
//! why the kernel refused.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::attr::{self, flag, sample, PerfEventAttr};
use crate::record::SampleFormat;

/// The event that triggers samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// CPU cycles, counted by the PMU (not there in most virtual machines).
    Cycles,
    /// The kernel's per-CPU clock: a software timer, available everywhere.
    CpuClock,
    /// Context switches, counted by the scheduler as a thread leaves its
    /// CPU (the software event `context-switches`): with a period of one,
    /// a sample of every switch, taken in the kernel with the thread's
    /// user registers as they were when it entered the kernel.
    ContextSwitches,
    /// The scheduler's `sched:sched_switch` tracepoint, numbered `id` in
    /// tracefs ([`tracepoint_id`]): the same moment as
    /// [`EventKind::ContextSwitches`], through the tracing framework.
    SchedSwitch {
        /// The tracepoint's number (`events/sched/sched_switch/id`).
        id: u64,
    },
}

impl EventKind {
    /// The name perf gives the event.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Cycles => "cycles",
            Self::CpuClock => "cpu-clock",
            Self::ContextSwitches => "context-switches",
            Self::SchedSwitch { .. } => "sched:sched_switch",
        }
    }

    /// Whether the event samples threads as they leave their CPU (every
    /// switch, not at a frequency).
    #[must_use]
    pub fn is_switch(self) -> bool {
        matches!(self, Self::ContextSwitches | Self::SchedSwitch { .. })
    }
}

/// Where tracefs is looked for: `$ICHNOS_TRACEFS` first, where set, then
/// the two places the kernel documents.
fn tracefs_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os("ICHNOS_TRACEFS") {
        dirs.push(std::path::PathBuf::from(dir));
        return dirs;
    }
    dirs.push("/sys/kernel/tracing".into());
    dirs.push("/sys/kernel/debug/tracing".into());
    dirs
}

/// The number of tracepoint `system:name` as tracefs gives it
/// (`events/SYSTEM/NAME/id`), or `None` where tracefs is not mounted or
/// not readable (it is root's by default) or has no such tracepoint.
/// `$ICHNOS_TRACEFS` names the mount point where it is not a standard one.
#[must_use]
pub fn tracepoint_id(system: &str, name: &str) -> Option<u64> {
    tracefs_dirs().iter().find_map(|dir| {
        let path = dir.join("events").join(system).join(name).join("id");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    })
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a sampling event is configured.
// The kernel's attribute is a word of flags; so is this.
#[allow(clippy::struct_excessive_bools)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventConfig {
    /// What triggers a sample.
    pub kind: EventKind,
    /// Samples per second per thread (the kernel adapts the period).
    pub frequency: u64,
    /// Bytes of user stack copied with each sample (a multiple of 8, at
    /// most 65,528; 0: none).
    pub stack_user: u32,
    /// User registers dumped with each sample (`PERF_REG_*` bits).
    pub regs_user: u64,
    /// Threads and processes the task creates later are sampled too.
    pub inherit: bool,
    /// Counting starts at the task's next exec.
    pub enable_on_exec: bool,
    /// Counting starts disabled (until [`PerfEvent::enable`] or the exec).
    pub disabled: bool,
    /// Wake a poller when this many bytes are in the ring.
    pub wakeup_watermark: u32,
    /// Record executable mappings, command names, forks and exits.
    pub side_band: bool,
    /// MMAP2 records carry build ids (Linux 5.12 and later).
    pub build_ids: bool,
    /// Record each switch of a thread onto and off its CPU
    /// (`PERF_RECORD_SWITCH`, or `PERF_RECORD_SWITCH_CPU_WIDE` for an
    /// event of every task on a CPU).
    pub context_switches: bool,
    /// Count while the task is in the kernel too (a sample taken there
    /// carries the user registers and stack it entered with, and its
    /// kernel frames only with `kernel_stacks`): time in system calls is
    /// then sampled.
    pub kernel: bool,
    /// With `kernel`, each sample taken there also carries up to this
    /// many of the kernel's own frames (`PERF_SAMPLE_CALLCHAIN` without
    /// its user part): a context marker, then the interrupted kernel
    /// address and its callers (of a switch event, the kernel's path to
    /// the switch). 0: none. The kernel
    /// refuses more than `kernel.perf_event_max_stack`
    /// ([`kernel_stack_frames`] asks for what it allows).
    pub kernel_stacks: u16,
    /// With `kernel`, not while a CPU idles (`exclude_idle`; an event of
    /// every task on a CPU would otherwise sample its idle task).
    pub exclude_idle: bool,
    /// Every sample and record starts with the event's id
    /// (`PERF_SAMPLE_IDENTIFIER`, [`PerfEvent::id`]), so that events that
    /// share a ring can be told apart.
    pub identify: bool,
}

/// The most kernel frames a sample asks for with
/// [`kernel_stack_frames`]: above the depth of the kernel's deepest
/// common paths (storage and network stacks run 30 to 50 deep).
pub const KERNEL_STACK_FRAMES: u16 = 64;

/// The most kernel frames a sample is to carry
/// ([`EventConfig::kernel_stacks`]): [`KERNEL_STACK_FRAMES`], or fewer
/// where `kernel.perf_event_max_stack` allows fewer (its default is 127;
/// an event asking for more is refused), and none where that setting
/// cannot be read (asking blindly could have the event refused).
#[must_use]
pub fn kernel_stack_frames() -> u16 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse::<u16>().ok())
        .map_or(0, |allowed| allowed.min(KERNEL_STACK_FRAMES))
}

impl EventConfig {
    /// The registers the unwinder starts from: `rip`, `rsp`, `rbp`, and
    /// `rbx` (the CFA of the dynamic loader's lazy-binding trampoline is
    /// an offset from it).
    pub const UNWIND_REGS: u64 = (1 << attr::regs::BX)
        | (1 << attr::regs::BP)
        | (1 << attr::regs::SP)
        | (1 << attr::regs::IP);

    /// The attribute struct for this configuration: user space (and the
    /// kernel where `kernel` asks), timestamps on `CLOCK_MONOTONIC`,
    /// every record with its
    /// `sample_id`. A switch event ([`EventKind::is_switch`]) samples
    /// every switch instead of at `frequency`, and counts in the kernel,
    /// where switches happen (an event that excludes the kernel never
    /// sees one); its samples carry the user registers and stack, and
    /// with `kernel_stacks` the kernel's path to the switch.
    #[must_use]
    pub fn attr(&self) -> PerfEventAttr {
        let (kind, config) = match self.kind {
            EventKind::Cycles => (attr::TYPE_HARDWARE, attr::HW_CPU_CYCLES),
            EventKind::CpuClock => (attr::TYPE_SOFTWARE, attr::SW_CPU_CLOCK),
            EventKind::ContextSwitches => (attr::TYPE_SOFTWARE, attr::SW_CONTEXT_SWITCHES),
            EventKind::SchedSwitch { id } => (attr::TYPE_TRACEPOINT, id),
        };
        let mut sample_type =
            sample::IP | sample::TID | sample::TIME | sample::CPU | sample::PERIOD;
        if self.identify {
            sample_type |= sample::IDENTIFIER;
        }
        if self.regs_user != 0 {
            sample_type |= sample::REGS_USER;
        }
        if self.stack_user != 0 {
            sample_type |= sample::STACK_USER;
        }
        let switch = self.kind.is_switch();
        // Switch events too: events that share a ring share a sample
        // layout, which the ring's reader parses them by.
        let kernel_stacks = self.kernel && self.kernel_stacks > 0;
        if kernel_stacks {
            sample_type |= sample::CALLCHAIN;
        }
        let mut flags =
            flag::EXCLUDE_HV | flag::SAMPLE_ID_ALL | flag::USE_CLOCKID | flag::WATERMARK;
        let on = |bit: u64, when: bool| if when { bit } else { 0 };
        flags |= on(flag::EXCLUDE_CALLCHAIN_USER, kernel_stacks);
        flags |= on(flag::FREQ, !switch);
        flags |= on(flag::EXCLUDE_KERNEL, !switch && !self.kernel);
        flags |= on(flag::EXCLUDE_IDLE, !switch && self.exclude_idle);
        flags |= on(flag::CONTEXT_SWITCH, self.context_switches);
        flags |= on(flag::INHERIT, self.inherit);
        flags |= on(flag::ENABLE_ON_EXEC, self.enable_on_exec);
        flags |= on(flag::DISABLED, self.disabled || self.enable_on_exec);
        flags |= on(
            flag::MMAP | flag::MMAP2 | flag::COMM | flag::COMM_EXEC | flag::TASK,
            self.side_band,
        );
        flags |= on(flag::BUILD_ID, self.side_band && self.build_ids);
        PerfEventAttr {
            kind,
            size: attr::ATTR_SIZE,
            config,
            sample_period_or_freq: if switch { 1 } else { self.frequency },
            sample_type,
            flags,
            wakeup_events_or_watermark: self.wakeup_watermark.max(1),
            sample_regs_user: self.regs_user,
            sample_stack_user: self.stack_user,
            clockid: libc::CLOCK_MONOTONIC,
            sample_max_stack: if kernel_stacks { self.kernel_stacks } else { 0 },
            ..PerfEventAttr::default()
        }
    }
}

/// An open sampling event.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    pid: i32,
    cpu: i32,
    format: SampleFormat,
}

/// Why an event could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The kernel refused for lack of permission.
    #[error("cannot open a {event} event for {}: permission denied ({})", target(*pid, *cpu), paranoid_hint(*paranoid, *pid))]
    Permission {
        /// The event.
        event: EventKind,
        /// The task (-1: every task on the CPU).
        pid: i32,
        /// The CPU (-1: any).
        cpu: i32,
        /// `kernel.perf_event_paranoid` as read, if it could be.
        paranoid: Option<i32>,
        /// The error.
        source: io::Error,
    },
    /// The machine has no such event (no PMU for cycles).
    #[error("this machine has no {event} event: {source}")]
    NoSuchEvent {
        /// The event.
        event: EventKind,
        /// The error.
        source: io::Error,
    },
    /// The task does not exist (any more).
    #[error("process or thread {pid} does not exist")]
    NoSuchProcess {
        /// The task.
        pid: i32,
        /// The error.
        source: io::Error,
    },
    /// The frequency is above the kernel's limit.
    #[error("a frequency of {frequency} Hz is above kernel.perf_event_max_sample_rate ({max} Hz)")]
    FrequencyTooHigh {
        /// Asked for.
        frequency: u64,
        /// The limit.
        max: u64,
    },
    /// Out of file descriptors.
    #[error("out of file descriptors opening events ({source}); raise the limit with ulimit -n")]
    TooManyFiles {
        /// The error.
        source: io::Error,
    },
    /// Any other refusal.
    #[error("cannot open a {event} event for {}: {source}", target(*pid, *cpu))]
    Other {
        /// The event.
        event: EventKind,
        /// The task.
        pid: i32,
        /// The CPU.
        cpu: i32,
        /// The error.
        source: io::Error,
    },
}

fn target(pid: i32, cpu: i32) -> String {
    match (pid, cpu) {
        (-1, cpu) => format!("CPU {cpu}"),
        (pid, -1) => format!("PID {pid}"),
        (pid, cpu) => format!("PID {pid} on CPU {cpu}"),
    }
}

fn paranoid_hint(paranoid: Option<i32>, pid: i32) -> String {
    let now = paranoid.map_or_else(
        || "kernel.perf_event_paranoid could not be read".to_owned(),
        |p| format!("kernel.perf_event_paranoid is {p}"),
    );
    if pid == -1 {
        format!(
            "{now}; profiling every process needs -1 or 0, or root or CAP_PERFMON: \
             sysctl kernel.perf_event_paranoid=0"
        )
    } else {
        format!(
            "{now}; 2 or lower lets users profile their own processes: \
             sysctl kernel.perf_event_paranoid=2"
        )
    }
}

/// `kernel.perf_event_paranoid`.
#[must_use]
pub fn paranoid() -> Option<i32> {
    read_sysctl("perf_event_paranoid").and_then(|v| i32::try_from(v).ok())
}

/// `kernel.perf_event_max_sample_rate`.
#[must_use]
pub fn max_sample_rate() -> Option<u64> {
    read_sysctl("perf_event_max_sample_rate").and_then(|v| u64::try_from(v).ok())
}

/// `kernel.perf_event_mlock_kb`.
#[must_use]
pub fn mlock_kb() -> Option<u64> {
    read_sysctl("perf_event_mlock_kb").and_then(|v| u64::try_from(v).ok())
}

fn read_sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl PerfEvent {
    /// Opens `config` for task `pid` (-1: every task) on `cpu` (-1: any).
    pub fn open(config: &EventConfig, pid: i32, cpu: i32) -> Result<PerfEvent, OpenError> {
        if let Some(max) = max_sample_rate().filter(|_| !config.kind.is_switch()) {
            if config.frequency > max {
                return Err(OpenError::FrequencyTooHigh {
                    frequency: config.frequency,
                    max,
                });
            }
        }
        let mut attr = config.attr();
        let fd = crate::sys::perf_event_open(&mut attr, pid, cpu).map_err(|source| {
            let event = config.kind;
            match source.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => OpenError::Permission {
                    event,
                    pid,
                    cpu,
                    paranoid: paranoid(),
                    source,
                },
                Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) => {
                    OpenError::NoSuchEvent { event, source }
                }
                Some(libc::ESRCH) => OpenError::NoSuchProcess { pid, source },
                Some(libc::EMFILE | libc::ENFILE) => OpenError::TooManyFiles { source },
                _ => OpenError::Other {
                    event,
                    pid,
                    cpu,
                    source,
                },
            }
        })?;
        Ok(PerfEvent {
            fd,
            pid,
            cpu,
            format: SampleFormat::of(&attr),
        })
    }

    /// The task the event follows (-1: every task).
    #[must_use]
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The CPU it counts on (-1: any).
    #[must_use]
    pub fn cpu(&self) -> i32 {
        self.cpu
    }

    /// The layout of its records.
    #[must_use]
    pub fn format(&self) -> SampleFormat {
        self.format
    }

    /// Starts counting.
    pub fn enable(&self) -> io::Result<()> {
        crate::sys::enable(&self.fd)
    }

    /// Stops counting.
    pub fn disable(&self) -> io::Result<()> {
        crate::sys::disable(&self.fd)
    }

    /// The id the kernel gave the event (`PERF_EVENT_IOC_ID`): what its
    /// samples carry with [`EventConfig::identify`], and those of the
    /// events inherited from it.
    pub fn id(&self) -> io::Result<u64> {
        crate::sys::id(&self.fd)
    }

    /// Writes this event's records into `to`'s ring (same CPU).
    pub fn set_output(&self, to: &PerfEvent) -> io::Result<()> {
        crate::sys::set_output(&self.fd, &to.fd)
    }
}

impl AsFd for PerfEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl PerfEvent {
    pub(crate) fn owned_fd(&self) -> &OwnedFd {
        &self.fd
    }
}
