//! The kernel's frames of samples taken in the kernel: taken from the
//! callchain the kernel gives with each (its own part only), and named by
//! the running kernel's functions.
//!
//! The kernel's addresses move at every boot (KASLR) and its symbol table
//! is only in `/proc/kallsyms` of that boot, so the names are captured
//! by the recorder: each function that the stacks have a frame in is
//! written once (a `KernelSymbol` record). A recording holds the few
//! hundred functions its stacks touch, not the kernel's hundred thousand.
//!
//! The table ([`super::kallsyms`]) is read when the recording ends, as
//! perf reads it: read from the kernel it costs about 50 ms of CPU time
//! here, which at the start would be taken from the program being
//! profiled (1.7% of a two-second run on two CPUs), and which, on the
//! recorder's thread, stalled the draining of the rings long enough for
//! them to overflow. Until then the addresses to name are held, a million
//! at most; that many read the table at once, and it is kept. A recorder
//! killed before its end leaves its kernel frames unnamed. Where the
//! kernel hides its addresses, they stay unnamed and a note says why.

use std::collections::HashSet;

use ichnos_data::Record;

use ichnos_perf::record::{CONTEXT_KERNEL, CONTEXT_MAX};

use super::kallsyms::{Table, KALLSYMS};
use super::output::Output;

/// The least kernel address: the upper half of x86-64's address space.
pub(crate) const KERNEL_HALF: u64 = 1 << 63;

/// The kernel's own frames of a sample's callchain `chain` (taken without
/// its user part: `PERF_CONTEXT_KERNEL`, then kernel addresses, innermost
/// first), up to `max` in `stack`.
pub(crate) fn push_kernel_frames(
    chain: impl Iterator<Item = u64>,
    max: usize,
    stack: &mut Vec<u64>,
) {
    let mut kernel = false;
    for address in chain {
        if address >= CONTEXT_MAX {
            kernel = address == CONTEXT_KERNEL;
            continue;
        }
        // Nothing but kernel addresses: a stack's kernel frames are known
        // by their half of the address space.
        if !kernel || address < KERNEL_HALF || stack.len() >= max {
            break;
        }
        stack.push(address);
    }
}

/// The most distinct kernel addresses held until the end; as many read
/// the table at once.
const MAX_WAITING: usize = 1 << 20;

/// The kernel's functions, once read, and those written so far.
#[derive(Debug, Default)]
pub(crate) struct KernelSymbols {
    /// The table once read, or why there is none.
    table: Option<Result<Table, String>>,
    /// Addresses looked up (a frame's, less one for a caller's) until the
    /// table is read.
    waiting: HashSet<u64>,
    /// Starts of the functions written into the recording.
    written: HashSet<u64>,
    /// Kernel addresses (distinct until the table is read) left unnamed.
    pub(crate) unnamed_frames: u64,
}

impl KernelSymbols {
    /// Holds the addresses to name of the kernel frames of `frames` (a
    /// stack as it is stored: innermost first, the first looked up at
    /// itself, the rest minus one); writes the functions they lie in to
    /// `out` where the table is read.
    pub(crate) fn name_frames(&mut self, frames: &[u64], out: &mut Output) {
        let kernel = frames.iter().take_while(|&&f| f >= KERNEL_HALF).count();
        let pcs =
            frames[..kernel]
                .iter()
                .enumerate()
                .map(|(i, &f)| if i == 0 { f } else { f.wrapping_sub(1) });
        if self.table.is_some() {
            for pc in pcs {
                self.name(pc, out);
            }
            return;
        }
        self.waiting.extend(pcs);
        if self.waiting.len() >= MAX_WAITING {
            self.finish(out);
        }
    }

    /// Reads the table, if any frame waits for it, and names the frames
    /// that did.
    pub(crate) fn finish(&mut self, out: &mut Output) {
        if self.waiting.is_empty() {
            return;
        }
        if self.table.is_none() {
            self.table = Some(super::kallsyms::load(crate::cache_dir().as_deref()));
        }
        for pc in std::mem::take(&mut self.waiting) {
            self.name(pc, out);
        }
    }

    /// Writes the function `pc` lies in, if it is not written yet.
    fn name(&mut self, pc: u64, out: &mut Output) {
        let Some(Ok(table)) = &self.table else {
            self.unnamed_frames += 1;
            return;
        };
        match table.find(pc) {
            Some(f) => {
                if self.written.insert(f.start) {
                    let (name, module) = table.name_of(f);
                    out.meta(&Record::KernelSymbol {
                        start: f.start,
                        end: f.end,
                        module: module.as_bytes(),
                        name: name.as_bytes(),
                    });
                }
            }
            None => self.unnamed_frames += 1,
        }
    }

    /// Why kernel frames went unnamed, if any did.
    pub(crate) fn unnamed_note(&self) -> Option<String> {
        if self.unnamed_frames == 0 {
            return None;
        }
        let why = match &self.table {
            Some(Err(why)) => why.clone(),
            _ => format!("they lie in no function {KALLSYMS} lists"),
        };
        Some(format!(
            "kernel frames at {} addresses are shown by address: {why}",
            self.unnamed_frames
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_kernel_part_of_a_callchain_is_taken() {
        let k = |n: u64| 0xffff_ffff_8100_0000 + n;
        let frames = |chain: &[u64], max: usize| {
            let mut stack = vec![];
            push_kernel_frames(chain.iter().copied(), max, &mut stack);
            stack
        };
        let user = ichnos_perf::record::CONTEXT_USER;
        assert_eq!(
            frames(&[CONTEXT_KERNEL, k(1), k(2), user, 0x4000], 64),
            [k(1), k(2)]
        );
        assert_eq!(frames(&[CONTEXT_KERNEL, k(1), k(2), k(3)], 2), [k(1), k(2)]);
        // A user address after the marker ends them; a user part first
        // has none.
        assert_eq!(frames(&[CONTEXT_KERNEL, k(1), 0x4000, k(2)], 64), [k(1)]);
        assert!(frames(&[user, 0x4000, k(1)], 64).is_empty());
        assert!(frames(&[], 64).is_empty());
    }
}
