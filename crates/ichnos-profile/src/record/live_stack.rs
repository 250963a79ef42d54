//! Stacks deeper than the kernel's copy, read on from the thread's memory.
//!
//! The kernel copies at most 65,528 bytes of a thread's stack per sample
//! (32 KiB by default). A compiler's recursive descent or an
//! interpreter's nested calls go deeper, and a walk that runs off the
//! copy ends short of the thread's first frame, as it does in perf and
//! samply. The recorder handles a sample some milliseconds after it was
//! taken: the frames past the copy are still where they were if the
//! thread has not returned from the outermost frame the copy holds since.
//! So the thread's memory is read from the return address that called
//! that frame (the walk found it in the copy), and kept only if that word
//! still holds the same return address; else the stack stays as the copy
//! left it. Where the copy holds no return address (the leaf's own frame
//! is larger than the copy), the copy's last 512 bytes must read the same.
//! The outer frames of a deep stack are the ones that change least, and a
//! thread that waits (a switch sample) does not change them at all. The
//! samples of a process's last tens of milliseconds are handled after it
//! has exited: their stacks end at the copy.
//!
//! This is a check, not a proof: a thread that returned past that frame
//! and came back to the same depth through the same call site would pass
//! it. The word is read again after the rest, so a thread that moves
//! while its stack is read is seen to.
//!
//! Reads are bounded: at most [`MAX_READ`] bytes past a copy, and
//! [`BYTES_PER_SECOND`], refilled as time goes and never saved up beyond
//! a second's worth. A process whose memory cannot be read (it exited, or
//! does not let the recorder read it) is not tried again.

use std::collections::HashSet;

use ichnos_code::memory::ProcessMemory;
use ichnos_code::{Frame, FrameKind, Regs, StopReason};

/// Bytes below the copy's end that must read the same where the copy
/// holds no return address.
const OVERLAP: usize = 512;

/// Bytes read past the copy, in turn, while the walk runs off what was
/// read.
const READS: [usize; 3] = [64 << 10, 256 << 10, MAX_READ];

/// The most read past one copy.
const MAX_READ: usize = 1 << 20;

/// The most read for each second of the recording, in all.
const BYTES_PER_SECOND: u64 = 64 << 20;

/// A sample whose walk ran off its stack copy: process `pid`'s, at
/// `time`, with registers `regs` and stack copy `copy`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Taken<'a> {
    pub pid: u32,
    pub time: u64,
    pub regs: Regs,
    pub copy: &'a [u8],
}

/// Reads past the stacks' copies, and what came of them.
#[derive(Debug, Default)]
pub(super) struct LiveStack {
    /// The copy and what was read after it.
    stack: Vec<u8>,
    /// What was read.
    read: Vec<u8>,
    /// The bytes that may still be read, and when that was worked out.
    allowance: u64,
    as_of: Option<u64>,
    /// Processes whose memory could not be read (gone, or not readable by
    /// the recorder): not tried again.
    unreadable_pids: HashSet<u32>,
    /// Stacks completed from the threads' memory.
    pub completed: u64,
    /// Stacks whose memory no longer held what the copy did.
    pub changed: u64,
    /// Stacks whose memory could not be read: the process had exited by
    /// the time the sample was handled (the last tens of milliseconds of
    /// its samples), or does not let the recorder read it.
    pub unreadable: u64,
}

/// Processes remembered as unreadable at most (past it, forgotten).
const MAX_UNREADABLE: usize = 4096;

impl LiveStack {
    /// A new process has the id `pid` (a fork, or an exec, after which
    /// the program may be readable where the one before was not): one
    /// found unreadable under that id before is forgotten.
    pub(super) fn new_process(&mut self, pid: u32) {
        self.unreadable_pids.remove(&pid);
    }

    /// Whether samples of `pid` are not read on (its memory could not
    /// be read before).
    #[cfg(test)]
    pub(super) fn skips(&self, pid: u32) -> bool {
        self.unreadable_pids.contains(&pid)
    }

    /// The walk of sample `taken` ended with `stop`, past the copy, at its
    /// frame `outermost`: reads on from the thread's memory and walks
    /// again (`walk` over the longer stack) while the walk runs off what
    /// was read. Returns how the last walk ended (`stop` if none was
    /// made).
    pub(super) fn walk_on(
        &mut self,
        taken: Taken<'_>,
        stop: StopReason,
        outermost: Option<Frame>,
        walk: &mut dyn FnMut(&[u8]) -> StopReason,
    ) -> StopReason {
        let Taken {
            pid,
            time,
            regs,
            copy,
        } = taken;
        let end = regs.sp.saturating_add(copy.len() as u64);
        let StopReason::StackEnd { addr } = stop else {
            return stop;
        };
        // Past the copy, and not so far past it that no read would reach
        // it (a bad address, not the stack).
        let Some(needed) = addr.checked_sub(end).and_then(|d| usize::try_from(d).ok()) else {
            return stop;
        };
        if needed >= MAX_READ {
            return stop;
        }
        if self.unreadable_pids.contains(&pid) {
            self.unreadable += 1;
            return stop;
        }
        let Some((from, expect)) = anchor(regs.sp, copy, outermost) else {
            return stop;
        };
        // Bytes of the copy that are read again.
        let Ok(again) = usize::try_from(end - from) else {
            return stop;
        };
        let memory = ProcessMemory::new(pid);
        let mut stop = stop;
        let mut first = true;
        for more in READS {
            if more <= needed {
                continue;
            }
            if !self.allowed(time, again + more) {
                return stop;
            }
            self.read.clear();
            self.read.resize(again + more, 0);
            let n = memory.read_up_to(from, &mut self.read);
            // The anchor read again after the rest: a thread that moved
            // while its stack was read is seen to.
            let mut word = [0u8; 8];
            let still =
                expect.len() != 8 || (memory.read_up_to(from, &mut word) == 8 && word == *expect);
            if n <= again || !self.read.starts_with(expect) || !still {
                // (A later read that fails leaves the longer walk made.)
                if first {
                    if n == 0 {
                        self.unreadable += 1;
                        if self.unreadable_pids.len() >= MAX_UNREADABLE {
                            self.unreadable_pids.clear();
                        }
                        self.unreadable_pids.insert(pid);
                    } else {
                        self.changed += 1;
                    }
                }
                return stop;
            }
            first = false;
            self.stack.clear();
            self.stack.extend_from_slice(copy);
            self.stack.extend_from_slice(&self.read[again..n]);
            stop = walk(&self.stack);
            match stop {
                StopReason::Outermost => {
                    self.completed += 1;
                    return stop;
                }
                // It ran off all that could be read this time: more.
                StopReason::StackEnd { addr } if n == again + more && addr >= end + more as u64 => {
                }
                _ => return stop,
            }
        }
        stop
    }

    /// Whether `bytes` may be read at `time`: an allowance of
    /// [`BYTES_PER_SECOND`] that refills as time goes and holds at most a
    /// second's worth (a quiet spell does not save up for a burst).
    fn allowed(&mut self, time: u64, bytes: usize) -> bool {
        let as_of = *self.as_of.get_or_insert_with(|| {
            self.allowance = BYTES_PER_SECOND;
            time
        });
        if time > as_of {
            let refill = u128::from(time - as_of) * u128::from(BYTES_PER_SECOND) / 1_000_000_000;
            self.allowance = u64::try_from(u128::from(self.allowance) + refill)
                .unwrap_or(u64::MAX)
                .min(BYTES_PER_SECOND);
            self.as_of = Some(time);
        }
        let bytes = bytes as u64;
        if bytes > self.allowance {
            return false;
        }
        self.allowance -= bytes;
        true
    }
}

/// Where in the copy (taken at `sp`) the thread's memory is read from,
/// and the bytes that must still be there: the return address into the
/// outermost frame the walk found, `outermost`, in its slot below that
/// frame's stack pointer; for a walk that found none (the leaf's frame
/// is larger than the copy, or the frame was reached through a signal),
/// the copy's last [`OVERLAP`] bytes.
fn anchor(sp: u64, copy: &[u8], outermost: Option<Frame>) -> Option<(u64, &[u8])> {
    let end = sp + copy.len() as u64;
    let return_slot = outermost
        .filter(|f| matches!(f.kind, FrameKind::Row(_) | FrameKind::Cfi))
        .and_then(|f| {
            let slot = f.sp.checked_sub(8)?;
            let at = usize::try_from(slot.checked_sub(sp)?).ok()?;
            let word = copy.get(at..at + 8)?;
            // The slot holds the frame's return address: a frame found by
            // its caller's rules, not by a guess.
            (u64::from_le_bytes(word.try_into().ok()?) == f.ip).then_some((slot, word))
        });
    return_slot.or_else(|| {
        let at = copy.len().checked_sub(OVERLAP)?;
        Some((end - OVERLAP as u64, &copy[at..]))
    })
}
