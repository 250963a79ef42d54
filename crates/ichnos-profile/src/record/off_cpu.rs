//! Off-CPU time: where threads wait.
//!
//! A switch event (`sched:sched_switch`, or the software event
//! `context-switches`) samples a thread as it leaves its CPU, with its
//! user registers and stack as they were when it entered the kernel; the
//! sample is unwound like any other. The thread's next switch record
//! that brings it back onto a CPU ends the interval: its length is the
//! time off. The switch record that took it off says whether it was
//! preempted (still runnable) or went to wait. Each interval becomes one
//! `OffCpu` record once it has ended.

use std::collections::{HashMap, HashSet};

use ichnos_data::{OffCpuState, Record};

use super::output::Output;

/// How long after its switch sample a thread's switch record leaving
/// may come: the kernel writes both in one pass through the scheduler.
const SWITCH_RECORD_WITHIN_NS: u64 = 1_000_000;

/// Most exited threads remembered (their last switch, after their exit
/// record, is not a wait); past it the oldest knowledge is dropped.
const MAX_EXITED: usize = 1 << 16;

/// Most threads whose time on a CPU is followed at once; past it all of
/// it is dropped (their next samples count one period each).
const MAX_RUNNING: usize = 1 << 16;

/// Periods one sample stands for at most: more than this since a thread's
/// last sample is not a late clock but a switch record lost.
const MAX_PERIODS: u64 = 100;

/// A thread's time on its CPU since its last sample.
#[derive(Clone, Copy, Debug, Default)]
struct Running {
    /// Since when it has been on its CPU (`None`: off it, or not known).
    since: Option<u64>,
    /// Nanoseconds on it before that, since its last sample.
    ran: u64,
    /// What its samples' whole periods left over (signed: a sample counts
    /// one period at least).
    carry: i64,
}

/// A thread that left its CPU and has not come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Away {
    pid: u32,
    cpu: u32,
    /// When it left (the switch sample's time).
    since: u64,
    /// The stack it left in.
    stack: u32,
    /// Whether that stack is complete.
    complete: bool,
    state: OffCpuState,
}

/// The threads off their CPUs, and the events whose samples say so.
#[derive(Debug, Default)]
pub(super) struct OffCpu {
    /// The ids of the switch events (samples of inherited events carry
    /// their parent's), sorted.
    ids: Vec<u64>,
    away: HashMap<u32, Away>,
    /// Threads that exited: a CPU-wide event samples a thread's last
    /// switch after its exit record.
    exited: HashSet<u32>,
    /// Intervals written whose stacks reached the outermost frame.
    pub complete: u64,
    /// Samples without user registers, of kernel threads on the whole
    /// machine (sampled in the kernel, on their CPUs or leaving them):
    /// no program's time, left out.
    pub kernel_threads: u64,
    /// Intervals left out because their end was never seen (the thread
    /// left again first): a switch record was lost.
    pub unended: u64,
    /// Threads' time on their CPUs since their last samples.
    running: HashMap<u32, Running>,
}

impl OffCpu {
    /// Off-CPU samples come from the events with these ids.
    pub(super) fn new(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        Self {
            ids,
            ..Self::default()
        }
    }

    /// Whether off-CPU time is recorded (and the sampling event counts in
    /// the kernel).
    pub(super) fn enabled(&self) -> bool {
        !self.ids.is_empty()
    }

    /// Whether a sample of event `id` is a thread leaving its CPU.
    pub(super) fn is_switch_sample(&self, id: Option<u64>) -> bool {
        id.is_some_and(|id| self.ids.binary_search(&id).is_ok())
    }

    /// Thread `tid` of `pid` left `cpu` at `time` in `stack` (`complete`
    /// if the walk reached the outermost frame). A thread already away
    /// had its return lost: that interval is left out. A thread that
    /// exited is not waiting: its last switch is not counted.
    pub(super) fn left(
        &mut self,
        pid: u32,
        tid: u32,
        cpu: u32,
        time: u64,
        stack: u32,
        complete: bool,
    ) {
        self.stopped_running(tid, time);
        if self.exited.contains(&tid) {
            return;
        }
        let away = Away {
            pid,
            cpu,
            since: time,
            stack,
            complete,
            state: OffCpuState::Waiting,
        };
        if self.away.insert(tid, away).is_some() {
            self.unended += 1;
        }
    }

    /// The switch record of `tid` leaving at `time`: whether it was
    /// preempted. It follows the thread's switch sample within moments;
    /// one long after is of a leaving whose sample was not kept.
    pub(super) fn left_preempted(&mut self, tid: u32, time: u64, preempted: bool) {
        self.stopped_running(tid, time);
        if let Some(away) = self.away.get_mut(&tid) {
            let after = time.checked_sub(away.since);
            if preempted && after.is_some_and(|a| a <= SWITCH_RECORD_WITHIN_NS) {
                away.state = OffCpuState::Preempted;
            }
        }
    }

    /// Thread `tid` is on a CPU at `time` (its switch record back, or a
    /// sample of it running): its interval away, if any, ends and is
    /// written. A time before it left (records out of order beyond the
    /// sort's margin) says nothing of this interval.
    pub(super) fn back(&mut self, tid: u32, time: u64, output: &mut Output) {
        if self.enabled() {
            if self.running.len() >= MAX_RUNNING && !self.running.contains_key(&tid) {
                self.running.clear();
            }
            let r = self.running.entry(tid).or_default();
            r.since = Some(r.since.unwrap_or(time).min(time));
        }
        if self.away.is_empty() {
            return;
        }
        if self.away.get(&tid).is_some_and(|a| time >= a.since) {
            if let Some(away) = self.away.remove(&tid) {
                self.write(tid, away, time, output);
            }
        }
    }

    /// Thread `tid` ended: it is not waiting any more, and its last
    /// switch (sampled after this by an event of the whole CPU) is not a
    /// wait.
    pub(super) fn ended(&mut self, tid: u32) {
        self.away.remove(&tid);
        self.running.remove(&tid);
        if self.ids.is_empty() {
            return;
        }
        if self.exited.len() >= MAX_EXITED {
            self.exited.clear();
        }
        self.exited.insert(tid);
    }

    /// Thread `tid` left its CPU at `time`: its time on it so far counts
    /// towards its next sample.
    fn stopped_running(&mut self, tid: u32, time: u64) {
        if let Some(r) = self.running.get_mut(&tid) {
            if let Some(since) = r.since.take() {
                r.ran = r.ran.saturating_add(time.saturating_sub(since));
            }
        }
    }

    /// The weight of a sample of the CPU clock (`period` nanoseconds) of
    /// thread `tid` on its CPU at `time`: the periods the thread ran since
    /// its last sample, in nanoseconds. The clock's timer fires late when
    /// the machine's CPU was taken away (a hypervisor that steals time
    /// from a virtual machine): it skips the periods it missed, and the
    /// thread's time would be short by them beside its time off the CPU,
    /// which is measured. Without off-CPU time, or where the thread's
    /// switches are not known, a sample is its period.
    pub(super) fn sample_weight(&mut self, tid: u32, time: u64, period: u64) -> u64 {
        if !self.enabled() || period == 0 {
            return period;
        }
        let Some(r) = self.running.get_mut(&tid) else {
            return period;
        };
        let ran = r
            .ran
            .saturating_add(r.since.map_or(0, |s| time.saturating_sub(s)));
        r.ran = 0;
        r.since = Some(time);
        if ran / period > MAX_PERIODS {
            r.carry = 0;
            return period;
        }
        // To the nearest period, at least one, what is left over carried
        // to the thread's next sample: a CPU's clock samples a thread at
        // its own ticks, not from when the thread came on (events of
        // whole CPUs), and rounding each sample alone would count the
        // partial periods at each switch up.
        let exact = i128::from(ran) + i128::from(r.carry);
        let period_i = i128::from(period);
        let periods = ((exact + period_i / 2) / period_i).max(1);
        r.carry = i64::try_from(exact - periods * period_i).unwrap_or(0);
        u64::try_from(periods).unwrap_or(1) * period
    }

    /// Thread `tid` was created (a thread id can be used again).
    pub(super) fn born(&mut self, tid: u32) {
        self.exited.remove(&tid);
    }

    /// The recording ends at `time`: threads still away were off their
    /// CPUs until then.
    pub(super) fn finish(&mut self, time: u64, output: &mut Output) {
        let mut away: Vec<(u32, Away)> = self.away.drain().collect();
        away.sort_unstable_by_key(|(tid, a)| (a.since, *tid));
        for (tid, a) in away {
            self.write(tid, a, time.max(a.since), output);
        }
    }

    fn write(&mut self, tid: u32, away: Away, until: u64, output: &mut Output) {
        let record = Record::OffCpu {
            time: output.rel(away.since),
            pid: u64::from(away.pid),
            tid: u64::from(tid),
            cpu: u64::from(away.cpu),
            stack: u64::from(away.stack),
            duration: until.saturating_sub(away.since),
            state: away.state,
        };
        let before = output.off_cpu;
        output.sample(&record);
        if output.off_cpu > before && away.complete {
            self.complete += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> (
        tempfile::TempDir,
        Output,
        std::thread::JoinHandle<super::super::output::WriterResult>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("x.data")).unwrap();
        let (output, writer) = super::super::output::start(file, 0).unwrap();
        (dir, output, writer)
    }

    #[test]
    fn an_interval_runs_from_the_switch_sample_to_the_switch_back() {
        let (_dir, mut out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        assert!(off.is_switch_sample(Some(7)) && !off.is_switch_sample(Some(8)));
        off.left(1, 2, 0, 1_000, 5, true);
        off.left_preempted(2, 1_100, true);
        // A time before it left is no return.
        off.back(2, 900, &mut out);
        assert_eq!(out.off_cpu, 0);
        off.back(2, 4_000, &mut out);
        assert_eq!((out.off_cpu, off.complete), (1, 1));
        assert!(off.away.is_empty());
    }

    #[test]
    fn a_sample_weighs_the_periods_its_thread_ran_since_the_last_one() {
        const MS: u64 = 1_000_000;
        let (_dir, mut out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        // On its CPU from 0; samples a period apart weigh one period.
        off.back(2, 0, &mut out);
        assert_eq!(off.sample_weight(2, MS, MS), MS);
        // The timer came three periods late (the machine's CPU was taken
        // away): the sample stands for the four periods the thread ran.
        assert_eq!(off.sample_weight(2, 5 * MS, MS), 4 * MS);
        // Half a period, off the CPU for 10 ms, half a period more: one.
        off.left_preempted(2, 5 * MS + MS / 2, false);
        off.back(2, 15 * MS, &mut out);
        assert_eq!(off.sample_weight(2, 15 * MS + MS / 2, MS), MS);
        // Running for an hour between samples is a lost switch record,
        // not a late clock: one period.
        assert_eq!(off.sample_weight(2, 3_600_000 * MS, MS), MS);
        // A thread whose switches are not known, and a recording without
        // off-CPU time: one period.
        assert_eq!(off.sample_weight(3, 20 * MS, MS), MS);
        let mut plain = OffCpu::default();
        plain.back(2, 0, &mut out);
        assert_eq!(plain.sample_weight(2, 5 * MS, MS), MS);
    }

    #[test]
    fn partial_periods_carry_to_the_next_sample_instead_of_rounding_up() {
        const MS: u64 = 1_000_000;
        let (_dir, mut out, _writer) = output();
        // A whole CPU's clock samples a thread at the CPU's ticks: runs of
        // 1.5 periods before each of ten samples are 15 periods in all,
        // not the 20 that rounding each would make.
        let mut off = OffCpu::new(vec![7]);
        let mut weight = 0;
        for i in 0..10 {
            let tick = (i * 10 + 2) * MS;
            off.back(2, tick - 3 * MS / 2, &mut out);
            weight += off.sample_weight(2, tick, MS);
            off.left_preempted(2, tick, false);
        }
        assert_eq!(weight, 15 * MS);
        // Each sample counts one at least: runs of 0.3 periods make ten.
        let mut off = OffCpu::new(vec![7]);
        let mut weight = 0;
        for i in 0..10 {
            let tick = (i * 10 + 1) * MS;
            off.back(2, tick - 3 * MS / 10, &mut out);
            weight += off.sample_weight(2, tick, MS);
            off.left_preempted(2, tick, false);
        }
        assert_eq!(weight, 10 * MS);
    }

    #[test]
    fn a_preempt_flag_long_after_the_sample_is_not_its_leaving() {
        let (_dir, _out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        off.left(1, 2, 0, 1_000, 5, false);
        off.left_preempted(2, 1_000 + 2 * SWITCH_RECORD_WITHIN_NS, true);
        assert_eq!(off.away[&2].state, OffCpuState::Waiting);
        off.left_preempted(2, 1_500, true);
        assert_eq!(off.away[&2].state, OffCpuState::Preempted);
    }

    #[test]
    fn an_exited_thread_does_not_wait_until_its_id_is_used_again() {
        let (_dir, mut out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        off.ended(2);
        off.left(1, 2, 0, 1_000, 5, true);
        off.finish(10_000, &mut out);
        assert_eq!(out.off_cpu, 0, "the last switch of a thread that exited");
        off.born(2);
        off.left(1, 2, 0, 20_000, 5, true);
        off.left(1, 2, 0, 30_000, 5, true);
        assert_eq!(off.unended, 1, "left twice: the first return was lost");
        off.finish(40_000, &mut out);
        assert_eq!(out.off_cpu, 1);
    }
}
