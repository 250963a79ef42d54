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
        if self.ids.is_empty() {
            return;
        }
        if self.exited.len() >= MAX_EXITED {
            self.exited.clear();
        }
        self.exited.insert(tid);
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
