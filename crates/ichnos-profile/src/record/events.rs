//! The sampling events of a recording and their rings: per CPU for a
//! command (inherited by its threads and children) and for the whole
//! machine, per thread and CPU when attaching (threads created later
//! inherit), one ring per CPU.

use ichnos_perf::event::tracepoint_id;
use ichnos_perf::{EventConfig, EventKind, OpenError, PerfEvent, Ring, RingError};

/// The smallest ring planned (1 MiB of data pages): what is asked for
/// first is [`planned_pages`], halved while the kernel refuses to lock
/// that much, down to [`MIN_RING_PAGES`].
const SMALLEST_PLANNED_PAGES: usize = 256;
/// The largest ring planned (16 MiB).
const LARGEST_PLANNED_PAGES: usize = 4096;
/// What all rings together are planned to lock at most (256 MiB): on a
/// machine with many CPUs each ring gets less, never under the smallest.
const PLANNED_PAGES_IN_ALL: usize = 65536;
/// Samples the recorder is woken for (a quarter of a ring, the
/// watermark, holds at least this many). Each wakeup is a context switch
/// for the recorder and a cache refill, and on a virtual machine they
/// were most of what it cost: with 1 MiB rings and 32 KiB stack copies
/// (8 samples a wakeup) the recorder took 5.0 µs of CPU a sample while
/// the target ran, with 4 MiB rings (31 a wakeup) 2.9 µs.
const SAMPLES_PER_WAKEUP: usize = 24;
/// A sample's bytes besides its stack copy: header, ids, time, period,
/// user registers and the two sizes, rounded up.
const SAMPLE_BYTES_BESIDE_STACK: usize = 512;
/// The smallest ring tried.
pub const MIN_RING_PAGES: usize = 16;

/// The data pages planned for each of `rings` rings whose samples copy
/// `stack_user` bytes of stack: a power of two whose quarter holds
/// [`SAMPLES_PER_WAKEUP`] samples, within the bounds above.
#[must_use]
pub(crate) fn planned_pages(stack_user: u32, rings: usize) -> usize {
    let sample = stack_user as usize + SAMPLE_BYTES_BESIDE_STACK;
    let wanted = (4 * SAMPLES_PER_WAKEUP * sample)
        .div_ceil(4096)
        .next_power_of_two();
    let share = (PLANNED_PAGES_IN_ALL / rings.max(1)).max(1);
    // The largest power of two within the share.
    let share = 1 << share.ilog2();
    wanted
        .min(LARGEST_PLANNED_PAGES)
        .min(share)
        .max(SMALLEST_PLANNED_PAGES)
}

/// Whether rings planned for `rings` rings whose samples copy
/// `stack_user` bytes of stack wake the recorder no more often than every
/// [`SAMPLES_PER_WAKEUP`] samples (with many CPUs, each ring's share of
/// [`PLANNED_PAGES_IN_ALL`] may be too small for large copies).
#[must_use]
pub(crate) fn wakeups_gather_enough(stack_user: u32, rings: usize) -> bool {
    gathers_enough(stack_user, planned_pages(stack_user, rings))
}

/// Whether rings of `pages` data pages whose samples copy `stack_user`
/// bytes of stack wake the recorder no more often than every
/// [`SAMPLES_PER_WAKEUP`] samples.
fn gathers_enough(stack_user: u32, pages: usize) -> bool {
    let sample = stack_user as usize + SAMPLE_BYTES_BESIDE_STACK;
    watermark(pages) as usize / sample >= SAMPLES_PER_WAKEUP
}

/// Who is sampled.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scope<'a> {
    /// A launched command (held before exec): its pid.
    Command(u32),
    /// Running processes: their threads.
    Threads(&'a [u32]),
    /// Every process.
    System,
}

/// The open events.
#[derive(Debug)]
pub(crate) struct Events {
    /// Every event opened.
    pub opened: Vec<PerfEvent>,
    /// One ring per CPU, and the event it belongs to.
    pub rings: Vec<(Ring, usize)>,
    /// The event sampled.
    pub kind: EventKind,
    /// Data pages of each ring.
    pub pages: usize,
    /// Data pages planned for each ring, before the kernel's limit on
    /// locked memory.
    pub planned_pages: usize,
    /// The event that samples threads leaving their CPUs, if off-CPU time
    /// is recorded.
    pub off_cpu_kind: Option<EventKind>,
    /// Its events' ids.
    pub off_cpu_ids: Vec<u64>,
    /// Whether time in the kernel is sampled (with the kernel's frames
    /// above the user code that entered it), or the kernel refused it.
    pub kernel: bool,
    /// Bytes of user stack each sample copies.
    pub stack_user: u32,
    /// Whether the rings the kernel allowed were too small for enough
    /// samples of the copy asked for first, and the smaller copy was taken
    /// instead.
    pub stack_user_gave_way: bool,
}

/// Why the events could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventsError {
    /// An event could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A ring could not be mapped.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// Redirecting an event into its CPU's ring failed.
    #[error("cannot share a ring between events: {0}")]
    SetOutput(std::io::Error),
    /// None of the threads could be followed (they all exited).
    #[error("none of the threads of the processes could be followed (they exited)")]
    NoThreads,
    /// Sampling threads as they leave their CPUs was refused.
    #[error("--off-cpu samples threads in the kernel as they leave their CPUs, which {} forbids to users without CAP_PERFMON: run as root, or sysctl kernel.perf_event_paranoid=1", paranoid_now(*paranoid))]
    OffCpuPermission {
        /// `kernel.perf_event_paranoid` as read, if it could be.
        paranoid: Option<i32>,
        /// The refusal.
        source: OpenError,
    },
    /// The switch event's id could not be read.
    #[error("cannot read the id of a context-switch event: {0}")]
    EventId(std::io::Error),
}

fn paranoid_now(paranoid: Option<i32>) -> String {
    paranoid.map_or_else(
        || "kernel.perf_event_paranoid (unreadable)".to_owned(),
        |p| format!("kernel.perf_event_paranoid {p}"),
    )
}

impl Events {
    /// Whether the kernel's limit on locked memory made the rings
    /// smaller than 1 MiB, where a busy recording starts to lose samples.
    /// A larger ring held back to 1 MiB costs only more wakeups: not
    /// worth a note on every unprivileged run (the kernel allows a user
    /// about 512 KiB a CPU plus `RLIMIT_MEMLOCK`).
    #[must_use]
    pub fn rings_limited(&self) -> bool {
        self.pages < self.planned_pages.min(SMALLEST_PLANNED_PAGES)
    }
}

/// Opens the events of `scope` with `config` (its kind tried first; with
/// `fall_back`, the CPU clock where the machine lacks it) and maps their
/// rings. With `smaller_copy`, a stack copy to take instead of
/// `config`'s where the kernel's limit on locked memory leaves rings too
/// small for enough samples of `config`'s copy a wakeup. With `off_cpu`,
/// a switch event beside each writes into the same ring (`config` must
/// then ask for switch records and ids).
pub(crate) fn open(
    scope: Scope<'_>,
    config: EventConfig,
    fall_back: bool,
    smaller_copy: Option<u32>,
    off_cpu: bool,
) -> Result<Events, EventsError> {
    let rings = ichnos_perf::online_cpus().len();
    let mut planned = planned_pages(config.stack_user, rings);
    let mut config = EventConfig {
        wakeup_watermark: watermark(planned),
        ..config
    };
    // Time in the kernel is sampled where it is allowed; off-CPU time
    // needs it (its refusal is that mode's error).
    let kernel_optional = !off_cpu;
    let mut events = open_with(scope, config, fall_back, kernel_optional, planned)?;
    let mut stack_user_gave_way = false;
    if events.pages != planned {
        // Smaller rings than planned: open again with a wakeup watermark
        // that fits them (one larger than a ring would only wake the
        // recorder once the ring is full), and where they would wake it
        // for too few samples, with the smaller copy. The kernel limits
        // locked bytes, so rings of as many pages are allowed again.
        let (mut pages, kernel) = (events.pages, events.kernel);
        drop(events);
        if let Some(smaller) = smaller_copy
            .filter(|&s| s < config.stack_user && !gathers_enough(config.stack_user, pages))
        {
            stack_user_gave_way = true;
            config.stack_user = smaller;
            planned = planned_pages(smaller, rings);
            pages = pages.min(planned);
        }
        let config = EventConfig {
            wakeup_watermark: watermark(pages),
            kernel,
            ..config
        };
        events = open_with(scope, config, fall_back, kernel_optional, pages)?;
    }
    events.planned_pages = planned;
    events.stack_user_gave_way = stack_user_gave_way;
    if off_cpu {
        open_switches(&mut events, config)?;
    }
    Ok(events)
}

/// The switch event to try first: the `sched:sched_switch` tracepoint
/// where tracefs shows it, else the software event.
fn switch_kinds() -> Vec<EventKind> {
    let mut kinds = Vec::new();
    if let Some(id) = tracepoint_id("sched", "sched_switch") {
        kinds.push(EventKind::SchedSwitch { id });
    }
    kinds.push(EventKind::ContextSwitches);
    kinds
}

/// Opens a switch event beside each of `events`' events, on the same
/// task and CPU, writing into the same ring.
fn open_switches(events: &mut Events, config: EventConfig) -> Result<(), EventsError> {
    let main: Vec<usize> = (0..events.opened.len()).collect();
    let switch_config = |kind| EventConfig {
        kind,
        side_band: false,
        context_switches: false,
        identify: true,
        ..config
    };
    let at = |i: usize| (events.opened[i].pid(), events.opened[i].cpu());
    // The kind is settled on the first event whose thread still lives:
    // the tracepoint, unless it cannot be opened (tracefs readable but
    // the kernel refusing it).
    let mut chosen = None;
    let mut refusal = None;
    'events: for &i in &main {
        for kind in switch_kinds() {
            match PerfEvent::open(&switch_config(kind), at(i).0, at(i).1) {
                Ok(event) => {
                    chosen = Some((i, kind, event));
                    break 'events;
                }
                // That thread exited: the next one tells.
                Err(OpenError::NoSuchProcess { .. }) => continue 'events,
                Err(e @ OpenError::Permission { .. }) => {
                    refusal = Some(e);
                    break 'events;
                }
                Err(e) => refusal = Some(e),
            }
        }
        break;
    }
    let Some((first, kind, first_event)) = chosen else {
        let Some(source) = refusal else {
            // Every thread exited.
            return Err(EventsError::NoThreads);
        };
        return Err(match source {
            OpenError::Permission { paranoid, .. } => {
                EventsError::OffCpuPermission { paranoid, source }
            }
            other => other.into(),
        });
    };
    let mut opened = vec![(first, first_event)];
    for &i in main.iter().filter(|&&i| i > first) {
        let (pid, cpu) = at(i);
        match PerfEvent::open(&switch_config(kind), pid, cpu) {
            Ok(e) => opened.push((i, e)),
            // A thread that exited meanwhile is no loss.
            Err(OpenError::NoSuchProcess { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (beside, event) in opened {
        // Into the ring of the CPU's event that owns one.
        let ring_owner = events
            .rings
            .iter()
            .map(|(_, owner)| *owner)
            .find(|&o| events.opened[o].cpu() == events.opened[beside].cpu())
            .unwrap_or(beside);
        event
            .set_output(&events.opened[ring_owner])
            .map_err(EventsError::SetOutput)?;
        events
            .off_cpu_ids
            .push(event.id().map_err(EventsError::EventId)?);
        events.opened.push(event);
    }
    events.off_cpu_kind = Some(kind);
    Ok(())
}

/// The wakeup watermark for rings of `pages` data pages: a quarter of one.
#[must_use]
pub(crate) fn watermark(pages: usize) -> u32 {
    u32::try_from(pages * 4096 / 4).unwrap_or(u32::MAX)
}

/// Settles `config`'s event kind, build-id support and sampling in the
/// kernel on a first open (of `task` on `cpu`), which is closed again:
/// each refusal that has a fallback gives way to it once, in whichever
/// order the kernel refuses them.
fn settle(
    config: &mut EventConfig,
    fall_back: bool,
    kernel_optional: bool,
    task: i32,
    cpu: i32,
) -> Result<(), OpenError> {
    let mut probe = PerfEvent::open(config, task, cpu);
    loop {
        probe = match probe {
            Err(OpenError::NoSuchEvent { .. })
                if fall_back && config.kind != EventKind::CpuClock =>
            {
                config.kind = EventKind::CpuClock;
                PerfEvent::open(config, task, cpu)
            }
            // Kernels before 5.12 do not know the build-id bit.
            Err(OpenError::Other { source, .. })
                if config.build_ids && source.raw_os_error() == Some(libc::EINVAL) =>
            {
                config.build_ids = false;
                PerfEvent::open(config, task, cpu)
            }
            // `kernel.perf_event_paranoid` 2 or more: user space only, for
            // users without CAP_PERFMON.
            Err(OpenError::Permission { .. }) if config.kernel && kernel_optional => {
                config.kernel = false;
                PerfEvent::open(config, task, cpu)
            }
            other => return other.map(drop),
        };
    }
}

fn open_with(
    scope: Scope<'_>,
    mut config: EventConfig,
    fall_back: bool,
    kernel_optional: bool,
    first_pages: usize,
) -> Result<Events, EventsError> {
    let cpus = ichnos_perf::online_cpus();
    let first_task = match scope {
        Scope::Command(pid) => pid.cast_signed(),
        Scope::Threads(tids) => tids.first().map_or(-1, |t| t.cast_signed()),
        Scope::System => -1,
    };
    let first_cpu = cpus.first().map_or(0, |c| c.cast_signed());
    settle(
        &mut config,
        fall_back,
        kernel_optional,
        first_task,
        first_cpu,
    )?;
    let mut events = Vec::new();
    let mut leaders = Vec::new();
    // Events that write into another's ring: (event, leader).
    let mut followers: Vec<(usize, usize)> = Vec::new();
    match scope {
        Scope::Command(pid) => {
            for &cpu in &cpus {
                leaders.push(events.len());
                events.push(PerfEvent::open(
                    &config,
                    pid.cast_signed(),
                    cpu.cast_signed(),
                )?);
            }
        }
        Scope::System => {
            for &cpu in &cpus {
                leaders.push(events.len());
                events.push(PerfEvent::open(&config, -1, cpu.cast_signed())?);
            }
        }
        Scope::Threads(tids) => {
            let mut leader_of_cpu: Vec<Option<usize>> = vec![None; cpus.len()];
            for &tid in tids {
                for (c, &cpu) in cpus.iter().enumerate() {
                    let event = match PerfEvent::open(&config, tid.cast_signed(), cpu.cast_signed())
                    {
                        Ok(e) => e,
                        // A thread that exited meanwhile is no loss.
                        Err(OpenError::NoSuchProcess { .. }) => break,
                        Err(e) => return Err(e.into()),
                    };
                    let leader = *leader_of_cpu[c].get_or_insert_with(|| {
                        leaders.push(events.len());
                        events.len()
                    });
                    followers.push((events.len(), leader));
                    events.push(event);
                }
            }
            if events.is_empty() {
                return Err(EventsError::NoThreads);
            }
        }
    }
    let mut pages = first_pages;
    let rings = loop {
        let made: Result<Vec<(Ring, usize)>, RingError> = leaders
            .iter()
            .map(|&i| Ring::new(&events[i], pages).map(|r| (r, i)))
            .collect();
        match made {
            Ok(rings) => break rings,
            Err(RingError::Locked { .. }) if pages > MIN_RING_PAGES => pages /= 2,
            Err(e) => return Err(e.into()),
        }
    };
    // Only an event with a mapped ring can take others' records.
    for (event, leader) in followers {
        if event != leader {
            events[event]
                .set_output(&events[leader])
                .map_err(EventsError::SetOutput)?;
        }
    }
    Ok(Events {
        opened: events,
        rings,
        kind: config.kind,
        pages,
        planned_pages: pages,
        off_cpu_kind: None,
        off_cpu_ids: Vec::new(),
        kernel: config.kernel,
        stack_user: config.stack_user,
        stack_user_gave_way: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_copy_gathers_enough_samples_a_wakeup_on_up_to_32_rings() {
        // 8 MiB rings (2 MiB a wakeup, 31 samples of 66,040 bytes) fit in
        // the 256 MiB planned in all for 32 rings, not for 64.
        for rings in [1, 2, 32] {
            assert_eq!(planned_pages(65528, rings), 2048);
            assert!(wakeups_gather_enough(65528, rings), "{rings}");
        }
        assert!(!wakeups_gather_enough(65528, 64));
        assert!(wakeups_gather_enough(32 << 10, 64));
    }

    #[test]
    fn rings_held_back_by_the_lock_limit_gather_too_few_of_the_largest_copy() {
        // 4 MiB rings wake the recorder every 1 MiB: 15 samples of
        // 66,040 bytes, too few; 31 of 33,280.
        assert!(!gathers_enough(65528, 1024));
        assert!(gathers_enough(32 << 10, 1024));
        assert!(gathers_enough(65528, 2048));
        // A user's 516 KiB a CPU (perf_event_mlock_kb): 128 pages, which
        // no copy of tens of KiB fills enough.
        assert!(!gathers_enough(32 << 10, 128));
    }

    #[test]
    fn rings_are_planned_so_a_wakeup_gathers_enough_samples_within_the_bounds() {
        // A 32 KiB stack copy (the default where locked memory is
        // limited): 4 MiB rings, woken every 1 MiB, which is 31 samples of
        // 33 KiB.
        assert_eq!(planned_pages(32 << 10, 2), 1024);
        for stack in (0..=65528u32).step_by(1000) {
            for rings in [1, 2, 8, 64, 65, 256, 4096] {
                let pages = planned_pages(stack, rings);
                // The kernel maps only a power of two of data pages.
                assert!(pages.is_power_of_two(), "{stack} {rings}: {pages}");
                assert!(
                    (SMALLEST_PLANNED_PAGES..=LARGEST_PLANNED_PAGES).contains(&pages),
                    "{stack} {rings}: {pages}"
                );
                let per_wakeup =
                    watermark(pages) as usize / (stack as usize + SAMPLE_BYTES_BESIDE_STACK);
                let in_all = pages * rings;
                // Either a wakeup gathers enough samples, or a bound
                // stopped the ring short of that.
                assert!(
                    per_wakeup >= SAMPLES_PER_WAKEUP
                        || pages == LARGEST_PLANNED_PAGES
                        || in_all * 2 > PLANNED_PAGES_IN_ALL,
                    "{stack} {rings}: {pages} pages, {per_wakeup} a wakeup"
                );
                // Many CPUs share the budget, down to the smallest ring.
                assert!(
                    in_all <= PLANNED_PAGES_IN_ALL || pages == SMALLEST_PLANNED_PAGES,
                    "{stack} {rings}: {pages} pages"
                );
            }
        }
        // No larger than needed: small copies keep 1 MiB.
        assert_eq!(planned_pages(8 << 10, 2), SMALLEST_PLANNED_PAGES);
        assert_eq!(planned_pages(32 << 10, 256), SMALLEST_PLANNED_PAGES);
    }

    #[test]
    fn rings_held_back_to_a_mebibyte_are_no_limit_worth_a_note() {
        let events = |pages, planned_pages| Events {
            opened: Vec::new(),
            rings: Vec::new(),
            kind: EventKind::CpuClock,
            pages,
            planned_pages,
            off_cpu_kind: None,
            off_cpu_ids: Vec::new(),
            kernel: false,
            stack_user: 32 << 10,
            stack_user_gave_way: false,
        };
        assert!(!events(1024, 1024).rings_limited());
        assert!(!events(256, 1024).rings_limited());
        assert!(events(128, 1024).rings_limited());
        assert!(events(128, 256).rings_limited());
        assert!(!events(256, 256).rings_limited());
    }
}
