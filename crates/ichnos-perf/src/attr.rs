//! `struct perf_event_attr`, as the kernel's UAPI header lays it out.
//!
//! The attribute is one versioned struct whose first field after `type`
//! is its own size; this is version 8 (136 bytes, Linux 6.3), and older
//! kernels accept it as long as every field they do not know is zero.
//! The bit-field word is `flags`, with one constant per bit.

/// Size of version 8 of the struct (`PERF_ATTR_SIZE_VER8`).
pub const ATTR_SIZE: u32 = 136;

/// `type`: a generalized hardware event.
pub const TYPE_HARDWARE: u32 = 0;
/// `type`: a software event.
pub const TYPE_SOFTWARE: u32 = 1;
/// `type`: a tracepoint.
pub const TYPE_TRACEPOINT: u32 = 2;

/// `config` of a hardware event: CPU cycles.
pub const HW_CPU_CYCLES: u64 = 0;
/// `config` of a software event: the CPU clock (an hrtimer per CPU).
pub const SW_CPU_CLOCK: u64 = 0;
/// `config` of a software event: the task clock.
pub const SW_TASK_CLOCK: u64 = 1;
/// `config` of a software event: context switches.
pub const SW_CONTEXT_SWITCHES: u64 = 3;

/// `sample_type` bits, in the order their fields appear in a sample.
pub mod sample {
    /// The instruction pointer.
    pub const IP: u64 = 1 << 0;
    /// Process and thread id.
    pub const TID: u64 = 1 << 1;
    /// The timestamp.
    pub const TIME: u64 = 1 << 2;
    /// An address (data address of the event).
    pub const ADDR: u64 = 1 << 3;
    /// Counter values (`read_format`).
    pub const READ: u64 = 1 << 4;
    /// A callchain collected by the kernel.
    pub const CALLCHAIN: u64 = 1 << 5;
    /// The event id.
    pub const ID: u64 = 1 << 6;
    /// The CPU.
    pub const CPU: u64 = 1 << 7;
    /// The sampling period.
    pub const PERIOD: u64 = 1 << 8;
    /// The stream id.
    pub const STREAM_ID: u64 = 1 << 9;
    /// Raw tracepoint data.
    pub const RAW: u64 = 1 << 10;
    /// The branch stack (LBR).
    pub const BRANCH_STACK: u64 = 1 << 11;
    /// User registers.
    pub const REGS_USER: u64 = 1 << 12;
    /// A copy of the user stack.
    pub const STACK_USER: u64 = 1 << 13;
    /// The event id, first in every record.
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// `read_format` bits.
pub mod read_format {
    /// Time enabled.
    pub const TOTAL_TIME_ENABLED: u64 = 1 << 0;
    /// Time running.
    pub const TOTAL_TIME_RUNNING: u64 = 1 << 1;
    /// The event id.
    pub const ID: u64 = 1 << 2;
    /// A group's values.
    pub const GROUP: u64 = 1 << 3;
    /// Lost samples.
    pub const LOST: u64 = 1 << 4;
}

/// `branch_sample_type` bit: branch stacks carry a hardware index.
pub const BRANCH_HW_INDEX: u64 = 1 << 17;

/// Bits of the `flags` word (the header's bit-fields).
pub mod flag {
    /// Off until enabled.
    pub const DISABLED: u64 = 1 << 0;
    /// Children (threads and processes created later) inherit the event.
    pub const INHERIT: u64 = 1 << 1;
    /// Do not count user space.
    pub const EXCLUDE_USER: u64 = 1 << 4;
    /// Do not count the kernel.
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    /// Do not count the hypervisor.
    pub const EXCLUDE_HV: u64 = 1 << 6;
    /// Do not count while the CPU idles.
    pub const EXCLUDE_IDLE: u64 = 1 << 7;
    /// Record executable mappings.
    pub const MMAP: u64 = 1 << 8;
    /// Record command names.
    pub const COMM: u64 = 1 << 9;
    /// `sample_period` is a frequency.
    pub const FREQ: u64 = 1 << 10;
    /// Enabled by the next exec.
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    /// Record fork and exit.
    pub const TASK: u64 = 1 << 13;
    /// `wakeup_events` is a byte watermark.
    pub const WATERMARK: u64 = 1 << 14;
    /// Every record carries the `sample_id` fields.
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// Exclude the guest.
    pub const EXCLUDE_GUEST: u64 = 1 << 20;
    /// Callchains leave out the user part (the kernel's own frames only).
    pub const EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
    /// Record mappings as MMAP2.
    pub const MMAP2: u64 = 1 << 23;
    /// Mark COMM records caused by exec.
    pub const COMM_EXEC: u64 = 1 << 24;
    /// Timestamps on `clockid`.
    pub const USE_CLOCKID: u64 = 1 << 25;
    /// Context-switch records.
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
    /// MMAP2 records carry build ids instead of inode numbers (Linux 5.12).
    pub const BUILD_ID: u64 = 1 << 34;
}

/// `perf_event_attr`, version 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    /// Major type (`TYPE_*`).
    pub kind: u32,
    /// `ATTR_SIZE`.
    pub size: u32,
    /// Type-specific configuration (`HW_*`, `SW_*`).
    pub config: u64,
    /// Sampling period, or frequency with [`flag::FREQ`].
    pub sample_period_or_freq: u64,
    /// [`sample`] bits.
    pub sample_type: u64,
    /// [`read_format`] bits.
    pub read_format: u64,
    /// [`flag`] bits.
    pub flags: u64,
    /// Wake up after this many events, or bytes with [`flag::WATERMARK`].
    pub wakeup_events_or_watermark: u32,
    /// Breakpoint type.
    pub bp_type: u32,
    /// `config1` (breakpoint address, probe function).
    pub config1: u64,
    /// `config2` (breakpoint length, probe offset).
    pub config2: u64,
    /// Branch sample type.
    pub branch_sample_type: u64,
    /// User registers to dump with each sample (`PERF_REG_*` bits).
    pub sample_regs_user: u64,
    /// Bytes of the user stack to dump with each sample (a multiple of 8).
    pub sample_stack_user: u32,
    /// The clock of timestamps with [`flag::USE_CLOCKID`].
    pub clockid: i32,
    /// Interrupt registers to dump.
    pub sample_regs_intr: u64,
    /// AUX area watermark.
    pub aux_watermark: u32,
    /// Most frames of a kernel callchain.
    pub sample_max_stack: u16,
    /// Reserved, zero.
    pub reserved_2: u16,
    /// AUX sample size.
    pub aux_sample_size: u32,
    /// AUX action bits.
    pub aux_action: u32,
    /// Data for SIGTRAP.
    pub sig_data: u64,
    /// `config3`.
    pub config3: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == ATTR_SIZE as usize);

/// x86-64 `PERF_REG_X86_*` numbers of the registers the unwinder needs.
pub mod regs {
    /// `rbx`.
    pub const BX: u32 = 1;
    /// `rbp`.
    pub const BP: u32 = 6;
    /// `rsp`.
    pub const SP: u32 = 7;
    /// `rip`.
    pub const IP: u32 = 8;
}
