//! A sample's walk: over its stack copy, on past it in the thread's
//! memory (`live_stack.rs`), and again after a look for JIT code.

use ichnos_code::memory::Bytes;
use ichnos_code::{Regs, StopReason};

use super::super::live_stack::{SampleWalk, Taken};
use super::Recorder;

impl Recorder {
    /// Walks the stack of a sample of thread `tid` of process `pid` at
    /// `time` from `regs` through its copy `stack` into `self.frames`
    /// (`whole_copy`: the copy is all the kernel was asked for, not cut
    /// short by it or in staging): why the walk ended.
    pub(super) fn walk_sample(
        &mut self,
        pid: u32,
        tid: u32,
        time: u64,
        regs: Regs,
        stack: &[u8],
        whole_copy: bool,
    ) -> StopReason {
        // The copy walked, and on in the thread's memory. Once, after a
        // look for code no record told of (JIT code), walked again: if the
        // walk of the copy ran into memory a JIT may fill (before reading
        // on, so that nothing is read twice for it), or the walk on past
        // the copy did (then over what was read, not read again).
        // Registrations made, and names written, before the sample was
        // taken are known before it is walked.
        let space = self.spaces.by_pid.get_mut(&pid).expect("made above");
        space.refresh_registry_for(time, &mut self.output);
        space.capture_jit_names_for(time, &mut self.output);
        let mut stop = self.walk_copy(pid, time, regs, stack);
        let mut refreshed = false;
        if self.refresh_for(pid, time, stop, 0) {
            refreshed = true;
            stop = self.walk_copy(pid, time, regs, stack);
        }
        // A walk that ran off a whole copy (not one the kernel cut at the
        // stack's end, nor one cut in staging) goes on in the thread's
        // memory, if that still holds what the copy did.
        let ran_off = |stop| matches!(stop, StopReason::StackEnd { .. });
        if !ran_off(stop) || !whole_copy || self.live_stack.is_none() {
            return stop;
        }
        let taken = Taken {
            pid,
            tid,
            time,
            regs,
            copy: stack,
        };
        let in_copy = self.frames.len();
        stop = self.go_on(taken, stop, false);
        if refreshed || !self.refresh_for(pid, time, stop, in_copy) {
            return stop;
        }
        let stop = self.walk_copy(pid, time, regs, stack);
        if !ran_off(stop) {
            return stop;
        }
        self.go_on(taken, stop, true)
    }

    /// Goes on past the copy of sample `taken`, whose walk of the copy
    /// ended with `stop`: reading on from the thread's memory, or, `again`,
    /// over what the last read went over (see `LiveStack::walk_again`).
    fn go_on(&mut self, taken: Taken<'_>, stop: StopReason, again: bool) -> StopReason {
        let Some(live) = self.live_stack.as_mut() else {
            return stop;
        };
        let mut walker = SampleWalk {
            space: self.spaces.by_pid.get_mut(&taken.pid).expect("made above"),
            time: taken.time,
            regs: taken.regs,
            stack: taken.copy,
            options: &self.options,
            frames: &mut self.frames,
        };
        if again {
            live.walk_again(taken, stop, &mut walker)
        } else {
            live.walk_on(taken, stop, &mut walker)
        }
    }

    /// Walks the copy `stack` of a sample of `pid` at `time` from `regs`
    /// into `self.frames`.
    fn walk_copy(&mut self, pid: u32, time: u64, regs: Regs, stack: &[u8]) -> StopReason {
        let space = self.spaces.by_pid.get_mut(&pid).expect("made above");
        space.walk(
            time,
            regs,
            stack,
            Bytes::default(),
            &self.options,
            &mut self.frames,
        )
    }

    /// Whether a walk of a sample of `pid` at `time` that ended with
    /// `stop` ran into memory a JIT may fill (in its frames from `from`
    /// on) and a look for code no record told of (where one is due)
    /// found any: then it is walked again.
    fn refresh_for(&mut self, pid: u32, time: u64, stop: StopReason, from: usize) -> bool {
        let space = self.spaces.by_pid.get_mut(&pid).expect("made above");
        if stop == StopReason::Outermost
            || !self.frames[from.min(self.frames.len())..]
                .iter()
                .any(|f| space.may_be_jit(f.lookup_address()))
            || !space.take_refresh(time)
        {
            return false;
        }
        let jit = space.refresh_jit(time, &mut self.output);
        let mapped = self.spaces.resync(pid, time, &mut self.output);
        jit || mapped
    }
}
