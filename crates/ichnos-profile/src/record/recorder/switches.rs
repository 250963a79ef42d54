//! Context switches: a thread leaving its CPU (an interval off the CPU
//! begins, with its stack, or without one if its switch sample was
//! lost) or coming back to it.

use ichnos_data::StackStop;
use ichnos_perf::record::Switch;

use super::{let_go, Recorder};

impl Recorder {
    /// A thread switched off its CPU or back on.
    pub(super) fn switch(&mut self, sw: &Switch) {
        let (Some(tid), Some(time)) = (sw.sample_id.tid, sw.sample_id.time) else {
            return;
        };
        if let_go(sw.sample_id.pid.unwrap_or(0), tid) {
            return;
        }
        if sw.out {
            if self.off_cpu.sample_lost(tid, time) {
                self.left_unsampled(sw.sample_id.pid, tid, sw.sample_id.cpu, time);
            }
            self.off_cpu.left_preempted(tid, time, sw.preempted);
        } else {
            self.off_cpu.back(tid, time, true, &mut self.output);
        }
    }

    /// Thread `tid` of `pid` left `cpu` at `time` and its switch sample
    /// was lost: its interval starts with a stack without frames.
    fn left_unsampled(&mut self, pid: Option<u32>, tid: u32, cpu: Option<u32>, time: u64) {
        let Some(pid) = pid else { return };
        self.stack.clear();
        if let Some(stack) = self.intern_stack(pid, time, StackStop::SampleLost) {
            self.off_cpu
                .left(pid, tid, cpu.unwrap_or(0), time, stack, false);
            self.off_cpu.unsampled += 1;
        }
    }
}
