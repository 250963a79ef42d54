//! Where each thread's stacks end, so that a sample's stack copy is kept
//! only as far up as its frames reach.
//!
//! The ring holds the whole requested stack size for every sample, and
//! the kernel copies up to the end of the stack's mapping; a thread's
//! frames use a fraction of it, and none lie above its outermost
//! frame. Once a thread has had a complete stack, its later samples are
//! staged with the copy cut a little above that frame's stack pointer.

use std::collections::{HashMap, HashSet};

use ichnos_perf::attr::regs;
use ichnos_perf::record::Sample;

/// Bytes above the outermost frame's stack pointer still kept: the
/// unwinder may read the outermost frame's own return address slot (or
/// a frame pointer's record) above it to see that it is the outermost.
/// Those lie within the outermost function's small frame (`_start`,
/// `clone3`'s child); a thread whose walk needs more is cut short once
/// and never cut again. A page of slack here was the largest part of
/// what the recorder copies for shallow stacks: the copy was 15 to 20%
/// of its time, and the recorder's CPU a sample fell by a fifth with
/// this.
const STACK_TOP_SLACK: u64 = 512;

/// Most threads whose stack tops are remembered at once.
const MAX_STACK_TOPS: usize = 1 << 16;

/// Per thread, where its stacks end: the stack pointer of the outermost
/// frame its complete stacks reached (the highest), or that its samples
/// are never to be cut.
///
/// Learnt as samples are handled, used as later ones are staged, 10 ms
/// or more apart: a thread that ends (exit, exec) is forgotten when its
/// record is staged and learnt again only after that record is handled,
/// and a thread whose cut stack came up short is never cut again.
#[derive(Debug, Default)]
pub(crate) struct StackTops {
    /// `None`: never cut.
    tops: HashMap<u32, Option<u64>>,
    /// Threads whose ending was staged and not yet handled.
    ending: HashSet<u32>,
}

impl StackTops {
    /// A complete stack of `tid` whose outermost frame has stack pointer
    /// `sp`.
    pub fn learn(&mut self, tid: u32, sp: u64) {
        if self.ending.contains(&tid) {
            return;
        }
        if let Some(known) = self.tops.get_mut(&tid) {
            if let Some(top) = known {
                *top = (*top).max(sp);
            }
        } else if self.tops.len() < MAX_STACK_TOPS {
            self.tops.insert(tid, Some(sp));
        }
    }

    /// `tid`'s stacks are not to be cut again.
    pub fn never_cut(&mut self, tid: u32) {
        if self.tops.len() < MAX_STACK_TOPS || self.tops.contains_key(&tid) {
            self.tops.insert(tid, None);
        }
    }

    /// A record ending `tid`'s stack was staged.
    pub fn end(&mut self, tid: u32) {
        self.tops.remove(&tid);
        self.ending.insert(tid);
    }

    /// That record was handled.
    pub fn ended(&mut self, tid: u32) {
        self.tops.remove(&tid);
        self.ending.remove(&tid);
    }

    /// How many bytes of `sample`'s stack copy its frames need: to its
    /// thread's outermost frame and the slack above, when its stack
    /// pointer lies below that frame's (another stack, a signal stack
    /// above, is not cut) and that is less than the copy.
    pub fn needed(&self, sample: &Sample<'_>) -> Option<u64> {
        let top = (*self.tops.get(&sample.id.tid?)?)?;
        let sp = sample.regs_user.as_ref()?.get(regs::SP)?;
        top.checked_sub(sp)?
            .checked_add(STACK_TOP_SLACK)
            .filter(|&need| need < sample.stack_user_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of thread `tid` with stack pointer `sp` and a copy of
    /// `size` bytes, parsed.
    fn with_sample<T>(tid: u32, sp: u64, size: u64, f: impl FnOnce(&Sample<'_>) -> T) -> T {
        super::super::test_sample::with_sample(tid, sp, size, size, f)
    }

    #[test]
    fn a_thread_is_cut_just_above_its_highest_outermost_frame() {
        let mut tops = StackTops::default();
        let top = 0x7000_0000;
        assert_eq!(with_sample(5, top - 0x100, 32768, |s| tops.needed(s)), None);
        tops.learn(5, top - 0x40);
        tops.learn(5, top);
        tops.learn(5, top - 0x80);
        let needed = |tid, sp| with_sample(tid, sp, 32768, |s| tops.needed(s));
        assert_eq!(needed(5, top - 0x100), Some(0x100 + STACK_TOP_SLACK));
        assert_eq!(needed(5, top), Some(STACK_TOP_SLACK));
        // Not other threads; not above the frame (another stack); not
        // where the cut would keep the whole copy.
        assert_eq!(needed(6, top - 0x100), None);
        assert_eq!(needed(5, top + 8), None);
        assert_eq!(needed(5, top - 32768), None);
    }

    #[test]
    fn an_ending_is_forgotten_when_staged_and_not_relearnt_before_it_is_handled() {
        let mut tops = StackTops::default();
        let needed = |tops: &StackTops| with_sample(5, 0x6fff_0000, 32768, |s| tops.needed(s));
        tops.learn(5, 0x6fff_0100);
        assert!(needed(&tops).is_some());
        tops.end(5);
        assert_eq!(needed(&tops), None);
        // A complete stack from before the exit, handled after it was
        // staged, teaches nothing.
        tops.learn(5, 0x6fff_0100);
        assert_eq!(needed(&tops), None);
        tops.ended(5);
        tops.learn(5, 0x6fff_0200);
        assert_eq!(needed(&tops), Some(0x200 + STACK_TOP_SLACK));
    }

    #[test]
    fn a_thread_cut_short_once_is_never_cut_again() {
        let mut tops = StackTops::default();
        tops.learn(5, 0x6fff_0100);
        tops.never_cut(5);
        tops.learn(5, 0x6fff_0200);
        assert_eq!(with_sample(5, 0x6fff_0000, 32768, |s| tops.needed(s)), None);
    }
}
