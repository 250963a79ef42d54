//! Stacks into the recording: each interned once per address space
//! (written when new, its kernel frames named, its JIT frames noted), and
//! the address space a renamed JIT's stacks go to.

use ichnos_data::{Record, StackOut, StackStop};

use super::Recorder;

impl Recorder {
    /// The number of the stack in `self.stack` (of `pid`'s address space,
    /// walked at `time`), written first if it is new and its JIT frames
    /// noted for naming.
    pub(super) fn intern_stack(&mut self, pid: u32, time: u64, stop: StackStop) -> Option<u32> {
        // Code named anew where other code was (a look at the process's
        // JIT code while this stack was walked): its stacks from here on
        // belong to a new address space.
        self.spaces.rename(pid, time, &mut self.output);
        let (id, new) = self.intern_in_space(pid, time, stop)?;
        // Its JIT code is named anew where other code was named, from a
        // time before this sample: the stack is written again in the new
        // address space, where that name is.
        if new && self.spaces.rename(pid, time, &mut self.output) {
            return self.intern_in_space(pid, time, stop).map(|(id, _)| id);
        }
        Some(id)
    }

    /// The number of the stack in `self.stack` in `pid`'s address space
    /// as it is, and whether it is new there (then written, and its JIT
    /// frames noted).
    fn intern_in_space(&mut self, pid: u32, time: u64, stop: StackStop) -> Option<(u32, bool)> {
        let asid = self.spaces.by_pid.get(&pid)?.asid;
        let (id, new) = self.intern_in(asid, stop);
        if new {
            let space = self.spaces.by_pid.get_mut(&pid)?;
            space.note_jit_frames(&self.stack, &mut self.output, time);
        }
        Some((id, new))
    }

    /// The number of the stack in `self.stack` in address space `asid`,
    /// and whether it is new there (then written, its kernel frames
    /// named).
    pub(super) fn intern_in(&mut self, asid: u64, stop: StackStop) -> (u32, bool) {
        let (id, new) = self.interner.intern(asid, stop, &self.stack);
        if new {
            if let Some(kernel) = self.kernel_symbols.as_mut() {
                kernel.name_frames(&self.stack, &mut self.output);
            }
            self.output.meta(&Record::StackOut(StackOut {
                id: u64::from(id),
                asid,
                stop,
                frames: &self.stack,
            }));
        }
        (id, new)
    }
}
