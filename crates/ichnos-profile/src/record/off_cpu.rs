//! Off-CPU time: where threads wait.
//!
//! A switch event (`sched:sched_switch`, or the software event
//! `context-switches`) samples a thread as it leaves its CPU, with its
//! user registers and stack as they were when it entered the kernel, and
//! the kernel's frames down to the switch; the sample is unwound like any
//! other. The thread's next switch record
//! that brings it back onto a CPU ends the interval: its length is the
//! time off. The switch record that took it off says whether it was
//! preempted (still runnable) or went to wait. Each interval becomes one
//! `OffCpu` record once it has ended.

use std::collections::{HashMap, HashSet};

use ichnos_data::{OffCpuState, Record};

use super::output::Output;

/// How long after its switch sample a thread's switch record leaving
/// may come and still be that leaving's. The kernel writes both in one
/// pass through the scheduler, microseconds apart, but a virtual
/// machine's CPU stopped between them by its host stretches that; the
/// bound is there only for a leaving whose record was lost, followed by
/// another whose sample was.
const SWITCH_RECORD_WITHIN_NS: u64 = 1_000_000_000;

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
    /// Whether a switch record brought it on a CPU: only then are its
    /// times on them known (a thread running when the recording began
    /// is first seen by a sample).
    known: bool,
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
    /// Whether the switch record of this leaving came (after its sample).
    recorded: bool,
}

impl Away {
    /// Whether a switch record at `time` is this leaving's: it has had
    /// none yet, and its sample is not long past.
    fn awaits_record(&self, time: u64) -> bool {
        !self.recorded
            && time
                .checked_sub(self.since)
                .is_some_and(|after| after <= SWITCH_RECORD_WITHIN_NS)
    }
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
    /// Samples of no program's time, left out: kernel threads' on the
    /// whole machine (sampled in the kernel, on their CPUs or leaving
    /// them), programs' between an exec and their first instruction, and
    /// threads' past their exit that the kernel let go of or whose
    /// process ended, without kernel frames to show.
    pub kernel_threads: u64,
    /// Intervals left out because their end was never seen (the thread
    /// left again first): a switch record was lost.
    pub unended: u64,
    /// Intervals whose switch samples were lost (the kernel's ring had
    /// no room for one, or the recorder was behind) while their switch
    /// records came through: written with a stack without frames.
    pub unsampled: u64,
    /// Times a thread came back onto a CPU that it was not known to have
    /// left (its switch sample and record were both lost): its time since
    /// its last sample is not counted as running.
    pub unseen_leavings: u64,
    /// Threads' time on their CPUs since their last samples.
    running: HashMap<u32, Running>,
    /// Threads with user registers in their samples: the threads of
    /// programs, not of the kernel, whose leavings are worth an interval
    /// even when their switch samples are lost.
    user_threads: HashSet<u32>,
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
            recorded: false,
        };
        if self.away.insert(tid, away).is_some() {
            self.unended += 1;
        }
    }

    /// Thread `tid`'s samples have user registers: it is a program's.
    pub(super) fn user_thread(&mut self, tid: u32) {
        // (An event of a whole CPU samples a thread's last switch after
        // its exit record: that is no program's thread any more.)
        if !self.enabled() || self.user_threads.contains(&tid) || self.exited.contains(&tid) {
            return;
        }
        if self.user_threads.len() >= MAX_RUNNING {
            self.user_threads.clear();
        }
        self.user_threads.insert(tid);
    }

    /// Whether the switch record of `tid` leaving at `time` is of a
    /// leaving whose switch sample was lost: a program's thread whose
    /// last leaving's sample (which comes first, in the same pass through
    /// the scheduler) has had its record already, or none. Its interval
    /// is then to be started with a stack without frames, before the
    /// record is told.
    pub(super) fn sample_lost(&self, tid: u32, time: u64) -> bool {
        self.enabled()
            && self.user_threads.contains(&tid)
            && !self.exited.contains(&tid)
            && !self.away.get(&tid).is_some_and(|a| a.awaits_record(time))
    }

    /// The switch record of `tid` leaving at `time`: whether it was
    /// preempted. It follows the thread's switch sample; where that
    /// leaving had its record already, this one's sample was not kept.
    pub(super) fn left_preempted(&mut self, tid: u32, time: u64, preempted: bool) {
        self.stopped_running(tid, time);
        if let Some(away) = self.away.get_mut(&tid) {
            if away.awaits_record(time) {
                away.recorded = true;
                if preempted {
                    away.state = OffCpuState::Preempted;
                }
            }
        }
    }

    /// Thread `tid` is on a CPU at `time` (`switched_in`: its switch
    /// record back; else a sample of it running): its interval away, if
    /// any, ends and is written. A time before it left (records out of
    /// order beyond the sort's margin) says nothing of this interval. A
    /// thread switched back in that was on a CPU, as far as is known,
    /// left it unseen: its time since is not time on the CPU.
    pub(super) fn back(&mut self, tid: u32, time: u64, switched_in: bool, output: &mut Output) {
        if self.enabled() {
            if self.running.len() >= MAX_RUNNING && !self.running.contains_key(&tid) {
                self.running.clear();
            }
            // (Of a program's thread: the idle tasks of all CPUs are
            // thread 0, each on its CPU at once.)
            let unseen =
                switched_in && !self.away.contains_key(&tid) && self.user_threads.contains(&tid);
            let r = self.running.entry(tid).or_default();
            r.known |= switched_in;
            r.since = match r.since {
                Some(since) if unseen && since < time => {
                    self.unseen_leavings += 1;
                    Some(time)
                }
                since => Some(since.unwrap_or(time).min(time)),
            };
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
        self.user_threads.remove(&tid);
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
    /// thread `tid` on its CPU at `time`: the nanoseconds the thread ran
    /// since its last sample, as its switches measure them. The clock's
    /// timer fires late when the machine's CPU was taken away (a
    /// hypervisor that steals time from a virtual machine): it skips the
    /// periods it missed, and the thread's time would be short by them
    /// beside its time off the CPU, which is measured. Not rounded to
    /// periods: a whole CPU's clock samples a thread at the CPU's ticks,
    /// not from when the thread came on, and a sample after a part of a
    /// period stands for that part (counted as a whole period, and the
    /// carry left after it repaid by nothing while the samples after it
    /// count a period each, a thread preempted often was counted 7% over
    /// its CPU time). Without off-CPU time, or where the thread's
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
        if !r.known || ran / period > MAX_PERIODS {
            return period;
        }
        // A weight of nothing would be no sample.
        ran.max(1)
    }

    /// Thread `tid` was created (a thread id can be used again), or took
    /// the id of its process's main thread by executing a program.
    pub(super) fn born(&mut self, tid: u32) {
        self.exited.remove(&tid);
        // Whose it is now, its samples will say.
        self.user_threads.remove(&tid);
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
        off.back(2, 900, true, &mut out);
        assert_eq!(out.off_cpu, 0);
        off.back(2, 4_000, true, &mut out);
        assert_eq!((out.off_cpu, off.complete), (1, 1));
        assert!(off.away.is_empty());
    }

    #[test]
    fn a_sample_weighs_the_time_its_thread_ran_since_the_last_one() {
        const MS: u64 = 1_000_000;
        let (_dir, mut out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        // On its CPU from 0; samples a period apart weigh one period.
        off.back(2, 0, true, &mut out);
        assert_eq!(off.sample_weight(2, MS, MS), MS);
        // The timer came three periods late (the machine's CPU was taken
        // away): the sample stands for the four periods the thread ran.
        assert_eq!(off.sample_weight(2, 5 * MS, MS), 4 * MS);
        // Half a period, off the CPU for 10 ms, a quarter period more.
        off.left_preempted(2, 5 * MS + MS / 2, false);
        off.back(2, 15 * MS, true, &mut out);
        assert_eq!(off.sample_weight(2, 15 * MS + MS / 4, MS), 3 * MS / 4);
        // Running for an hour between samples is a lost switch record,
        // not a late clock: one period.
        assert_eq!(off.sample_weight(2, 3_600_000 * MS, MS), MS);
        // A thread whose switches are not known (running when the
        // recording began: first seen by its samples), and a recording
        // without off-CPU time: one period.
        assert_eq!(off.sample_weight(3, 20 * MS, MS), MS);
        off.back(3, 20 * MS, false, &mut out);
        assert_eq!(off.sample_weight(3, 20 * MS, MS), MS);
        off.back(3, 21 * MS, false, &mut out);
        assert_eq!(off.sample_weight(3, 21 * MS, MS), MS);
        let mut plain = OffCpu::default();
        plain.back(2, 0, true, &mut out);
        assert_eq!(plain.sample_weight(2, 5 * MS, MS), MS);
    }

    #[test]
    fn samples_after_parts_of_periods_weigh_those_parts() {
        const MS: u64 = 1_000_000;
        let (_dir, mut out, _writer) = output();
        // A whole CPU's clock samples a thread at the CPU's ticks: runs of
        // 1.5 periods before each of ten samples are 15 periods in all,
        // and runs of 0.3 periods three, not ten.
        for (run, all) in [(3 * MS / 2, 15 * MS), (3 * MS / 10, 3 * MS)] {
            let mut off = OffCpu::new(vec![7]);
            let mut weight = 0;
            for i in 0..10 {
                let tick = (i * 10 + 2) * MS;
                off.back(2, tick - run, true, &mut out);
                weight += off.sample_weight(2, tick, MS);
                off.left_preempted(2, tick, false);
            }
            assert_eq!(weight, all);
        }
        // A thread preempted after each part period and then sampled at
        // whole periods: the parts count as they are.
        let mut off = OffCpu::new(vec![7]);
        let mut weight = 0;
        for i in 0..10 {
            let on = i * 10 * MS;
            off.back(2, on, true, &mut out);
            weight += off.sample_weight(2, on + MS / 5, MS);
            for k in 1..=3 {
                weight += off.sample_weight(2, on + MS / 5 + k * MS, MS);
            }
            off.left_preempted(2, on + MS / 5 + 3 * MS, true);
        }
        assert_eq!(weight, 10 * (3 * MS + MS / 5));
    }

    #[test]
    fn a_switch_back_unseen_leaving_does_not_count_the_time_away_as_running() {
        const MS: u64 = 1_000_000;
        let (_dir, mut out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        // The idle tasks of all CPUs are thread 0, and a kernel thread's
        // samples have no user registers: neither is a program's thread,
        // whose switches tell when it left.
        off.back(0, 0, true, &mut out);
        off.back(0, 10 * MS, true, &mut out);
        assert_eq!(off.unseen_leavings, 0);
        off.user_thread(2);
        off.back(2, 0, true, &mut out);
        assert_eq!(off.sample_weight(2, MS, MS), MS);
        // Half a period more on the CPU, then it left unseen (sample and
        // switch record lost) and came back at 50 ms: the sample at
        // 50.5 ms stands for the half period it ran, not the 49.5 ms.
        off.back(2, 50 * MS, true, &mut out);
        assert_eq!(off.unseen_leavings, 1);
        assert_eq!(off.sample_weight(2, 50 * MS + MS / 2, MS), MS / 2);
        // A sample is no switch back: it says nothing of a leaving.
        off.back(2, 51 * MS, false, &mut out);
        off.back(2, 60 * MS, false, &mut out);
        assert_eq!(off.unseen_leavings, 1);
        assert_eq!(off.sample_weight(2, 60 * MS, MS), 19 * MS / 2);
    }

    #[test]
    fn a_leaving_without_its_sample_is_a_programs_thread_not_just_away() {
        let (_dir, _out, _writer) = output();
        let mut off = OffCpu::new(vec![7]);
        // Not known to be a program's thread (a kernel thread's samples
        // have no user registers): no interval.
        assert!(!off.sample_lost(2, 1_000));
        off.user_thread(2);
        assert!(off.sample_lost(2, 1_000));
        // Its sample came first: not lost, moments after or 5 ms after
        // (a virtual CPU stopped in between).
        off.left(1, 2, 0, 1_000, 5, true);
        assert!(!off.sample_lost(2, 1_000 + 10_000));
        assert!(!off.sample_lost(2, 1_000 + 5_000_000));
        // Away since long before: that leaving's record was lost, and
        // this one's sample too.
        assert!(off.sample_lost(2, 1_000 + 2 * SWITCH_RECORD_WITHIN_NS));
        // The record of that leaving came (5 ms late): the next record,
        // moments later, is of a leaving whose sample was lost.
        off.left_preempted(2, 1_000 + 5_000_000, true);
        assert!(off.sample_lost(2, 1_000 + 5_010_000));
        // A thread that exited is not waiting; nor is anything without
        // off-CPU time.
        off.ended(2);
        off.user_thread(2);
        assert!(!off.sample_lost(2, 10 * SWITCH_RECORD_WITHIN_NS));
        // Its id used again, by a kernel thread: not a program's until its
        // samples say so.
        off.born(2);
        assert!(!off.sample_lost(2, 20 * SWITCH_RECORD_WITHIN_NS));
        let mut plain = OffCpu::default();
        plain.user_thread(3);
        assert!(!plain.sample_lost(3, 1_000));
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
