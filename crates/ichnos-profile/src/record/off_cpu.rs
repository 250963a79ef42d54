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

use std::collections::HashMap;

use ichnos_data::{OffCpuState, Record};

use super::output::Output;

/// A thread that left its CPU and has not come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Away {
    pid: u32,
    cpu: u32,
    /// When it left (the switch sample's time).
    since: u64,
    /// The stack it left in.
    stack: u32,
    state: OffCpuState,
}

/// The threads off their CPUs, and the events whose samples say so.
#[derive(Debug, Default)]
pub(super) struct OffCpu {
    /// The ids of the switch events (samples of inherited events carry
    /// their parent's), sorted.
    ids: Vec<u64>,
    away: HashMap<u32, Away>,
    /// Switch samples whose stacks reached the outermost frame.
    pub complete: u64,
    /// Switch samples without user registers (kernel threads, on the
    /// whole machine): not a wait of a program's.
    pub kernel_threads: u64,
    /// Intervals whose end was never seen (the thread left again first):
    /// a switch record was lost.
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

    /// Whether a sample of event `id` is a thread leaving its CPU.
    pub(super) fn is_switch_sample(&self, id: Option<u64>) -> bool {
        id.is_some_and(|id| self.ids.binary_search(&id).is_ok())
    }

    /// Thread `tid` of `pid` left `cpu` at `time` in `stack`. A thread
    /// already away had its return lost: that interval is dropped.
    pub(super) fn left(&mut self, pid: u32, tid: u32, cpu: u32, time: u64, stack: u32) {
        let away = Away {
            pid,
            cpu,
            since: time,
            stack,
            state: OffCpuState::Waiting,
        };
        if self.away.insert(tid, away).is_some() {
            self.unended += 1;
        }
    }

    /// The switch record of `tid` leaving at `time`: whether it was
    /// preempted. It follows the thread's switch sample.
    pub(super) fn left_preempted(&mut self, tid: u32, time: u64, preempted: bool) {
        if let Some(away) = self.away.get_mut(&tid) {
            if preempted && away.since <= time {
                away.state = OffCpuState::Preempted;
            }
        }
    }

    /// Thread `tid` is on a CPU at `time` (its switch record back, or a
    /// sample of it running): its interval away, if any, ends and is
    /// written.
    pub(super) fn back(&mut self, tid: u32, time: u64, output: &mut Output) {
        if self.away.is_empty() {
            return;
        }
        if let Some(away) = self.away.remove(&tid) {
            write(tid, away, time, output);
        }
    }

    /// Thread `tid` ended: it is not waiting any more.
    pub(super) fn ended(&mut self, tid: u32) {
        self.away.remove(&tid);
    }

    /// The recording ends at `time`: threads still away were off their
    /// CPUs until then.
    pub(super) fn finish(&mut self, time: u64, output: &mut Output) {
        let mut away: Vec<(u32, Away)> = self.away.drain().collect();
        away.sort_unstable_by_key(|(tid, a)| (a.since, *tid));
        for (tid, a) in away {
            write(tid, a, time.max(a.since), output);
        }
    }
}

fn write(tid: u32, away: Away, until: u64, output: &mut Output) {
    let record = Record::OffCpu {
        time: output.rel(away.since),
        pid: u64::from(away.pid),
        tid: u64::from(tid),
        cpu: u64::from(away.cpu),
        stack: u64::from(away.stack),
        duration: until.saturating_sub(away.since),
        state: away.state,
    };
    output.sample(&record);
}
