//! Samples whose stack is a chain the kernel gave rather than a walk of
//! a stack copy: a kernel thread's (its kernel frames alone), and perf
//! record -g's (the kernel's frame-pointer chain, read from perf.data).

use ichnos_data::StackStop;
use ichnos_perf::record::{Sample, CONTEXT_KERNEL, CONTEXT_MAX, CONTEXT_USER};

use super::super::kernel_frames::{push_kernel_frames, KERNEL_HALF};
use super::Recorder;

impl Recorder {
    /// Sample `s` of thread `tid` of `pid`, taken in the kernel with no
    /// user code to walk (a kernel thread's, or a task's that has left
    /// its user memory behind as it exits), whose stack is the kernel's
    /// frames alone: written where the kernel gave them. The kernel walks
    /// its own stack to the thread's start, so the stack is complete
    /// unless it filled the frames asked for. Whether it was written.
    pub(super) fn kernel_only_sample(
        &mut self,
        s: &Sample<'_>,
        pid: u32,
        tid: u32,
        time: u64,
        cpu: u32,
    ) -> bool {
        // (A sample without registers asked for is perf record -g's,
        // whose chain has the user frames too.)
        if self.kernel_symbols.is_none() || s.regs_user.is_none() {
            return false;
        }
        let Some(stop) = self.kernel_stack(s) else {
            return false;
        };
        if !self.has_space_for(s, (pid, tid, time, cpu), true) {
            return true;
        }
        let weight = self.off_cpu.sample_weight(tid, time, s.period.unwrap_or(1));
        self.write_sample(pid, tid, cpu, time, stop, weight);
        self.complete += u64::from(stop == StackStop::Complete);
        true
    }

    /// Sample `s` of thread `tid` of `pid`, taken on its CPU past its exit
    /// record in a process whose last address space `asid` ended moments
    /// before (the kernel letting its memory go): written there with its
    /// kernel frames alone, as perf counts that time to the process (the
    /// user memory is going, and with it the user frames). `false` if it
    /// has no kernel frames to show.
    pub(super) fn sample_past_exit(
        &mut self,
        s: &Sample<'_>,
        asid: u64,
        (pid, tid, time, cpu): (u32, u32, u64, u32),
    ) -> bool {
        if self.kernel_symbols.is_none() {
            return false;
        }
        let Some(stop) = self.kernel_stack(s) else {
            return false;
        };
        let (id, _) = self.intern_in(asid, stop);
        let weight = self.off_cpu.sample_weight(tid, time, s.period.unwrap_or(1));
        self.write_sample_of(id, (pid, tid, time, cpu), weight);
        self.complete += u64::from(stop == StackStop::Complete);
        true
    }

    /// `self.stack` made the kernel frames of `s`'s callchain, and how
    /// that stack ends; `None` if it has none.
    fn kernel_stack(&mut self, s: &Sample<'_>) -> Option<StackStop> {
        let most = usize::from(ichnos_perf::event::KERNEL_STACK_FRAMES);
        self.stack.clear();
        push_kernel_frames(s.callchain(), most, &mut self.stack);
        if self.stack.is_empty() {
            return None;
        }
        Some(if self.stack.len() >= most {
            StackStop::DepthLimit
        } else {
            StackStop::Complete
        })
    }

    /// A sample that carries the kernel's callchain and no registers
    /// (`perf record -g`): its user addresses are the stack as they are.
    /// It is complete only where its outermost frame's unwind row says
    /// that frame is the outermost; a chain that runs into memory no
    /// mapping covers ends before it (rbp was not a frame pointer there).
    /// A sample whose stack is `chain`, a callchain as the kernel gives
    /// it (context markers, then addresses, innermost first), of which the
    /// user part is kept.
    pub(super) fn sample_chain(
        &mut self,
        s: &Sample<'_>,
        chain: impl Iterator<Item = u64>,
        (pid, tid, time, cpu): (u32, u32, u64, u32),
    ) {
        if !self.has_space_for(s, (pid, tid, time, cpu), true) {
            return;
        }
        let space = self.spaces.by_pid.get_mut(&pid).expect("made above");
        self.stack.clear();
        let (mut context, mut kernel, mut user, mut kernel_left_out) = (0, 0, false, false);
        let most_kernel = usize::from(ichnos_perf::event::KERNEL_STACK_FRAMES);
        for address in chain {
            if address >= CONTEXT_MAX {
                context = address;
                user |= address == CONTEXT_USER;
                continue;
            }
            // The kernel's frames, first, where they can be named.
            if context == CONTEXT_KERNEL {
                match self.kernel_symbols {
                    None => kernel_left_out = true,
                    Some(_) if address >= KERNEL_HALF && kernel < most_kernel => {
                        self.stack.push(address);
                        kernel += 1;
                    }
                    Some(_) => {}
                }
                continue;
            }
            if context != CONTEXT_USER || self.stack.len() - kernel >= self.options.max_frames {
                continue;
            }
            // The first is where the thread was, stored as it is (a
            // stack's first frame is looked up at itself), the rest return
            // addresses (looked up minus one); after kernel frames it is
            // stored plus one, as an interrupted frame is.
            let first = self.stack.len() == kernel;
            let lookup = address.wrapping_sub(1);
            if !space.is_mapped(if first { address } else { lookup }) {
                break;
            }
            self.stack.push(if first && kernel > 0 {
                address.wrapping_add(1)
            } else {
                address
            });
        }
        let only_one = self.stack.len() == 1;
        let outermost = self.stack.last().is_some_and(|&a| {
            let pc = if only_one { a } else { a.wrapping_sub(1) };
            space
                .code
                .find(pc)
                .and_then(|o| o.find_row(pc))
                .is_some_and(|row| row.is_outermost())
        });
        self.kernel_frames_left_out += u64::from(kernel_left_out);
        // A chain of kernel frames alone (a kernel thread's) goes down to
        // the thread's start.
        let kernel_only = !user && !self.stack.is_empty() && self.stack.len() < most_kernel;
        let stop = if outermost || kernel_only {
            StackStop::Complete
        } else {
            StackStop::NoUnwindInfo
        };
        self.write_sample(pid, tid, cpu, time, stop, s.period.unwrap_or(1));
        if outermost {
            self.complete += 1;
        }
    }
}
