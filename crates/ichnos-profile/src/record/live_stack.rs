//! Stacks deeper than the kernel's copy, read on from the thread's memory.
//!
//! The kernel copies at most 65,528 bytes of a thread's stack per sample
//! (the default where locked memory is not limited; 32 KiB where it is).
//! A compiler's recursive descent or an interpreter's nested calls go
//! deeper, and a walk that runs off the copy ends short of the thread's
//! first frame, as it does in perf and samply. The recorder handles a
//! sample some milliseconds after it was taken: the frames past the copy
//! are still where they were if the
//! thread has not returned from the outermost frame the copy holds since.
//! So the return address that called that frame (the walk found it in
//! the copy) is read from the thread's memory, and the stack past the
//! copy is kept only if that word still holds the same return address,
//! before and after the rest is read; else the stack stays as the copy
//! left it. Where the copy holds no return address (the leaf's own frame
//! is larger than the copy), the copy's last 512 bytes must read the same.
//! The outer frames of a deep stack are the ones that change least, and a
//! thread that waits (a switch sample) does not change them at all. The
//! samples of a process's last tens of milliseconds are handled after it
//! has exited, and can only go on over an earlier read (below).
//!
//! One frame may be larger than the whole copy (rustc's driver keeps over
//! 500 KiB of locals in one, near the base of its thread) and call one
//! function after another (each pass of the compiler): its return slot
//! then holds another return address when the sample is handled. Where
//! that one returns into code of the same object whose frame is exactly
//! as large, the thread is taken to be in the same frame still: no two
//! functions of one object are likely to have the same frame larger than
//! the copy by chance (for ordinary frames they often do, and the return
//! address must read the same).
//!
//! What is read is a window where the walk ran off, not all of the stack
//! past the copy: such a frame leaves its return address far past the
//! copy's end, and the walk reads nothing of the frame's inside, only the
//! words by its return address. The window starts a little below the
//! address the walk could not read and grows (only what it lacks is read)
//! while the walk runs off its end; a walk that needs a word between the
//! copy and the window moves the window's start down to it.
//!
//! This is a check, not a proof: a thread that returned past that frame
//! and came back to the same depth, through the same call site (or into
//! a frame of the same size, for a frame larger than the copy), would
//! pass it.
//!
//! Reads are bounded: at most [`MAX_READ`] bytes past a copy, and
//! [`BYTES_PER_SECOND`], refilled as time goes and never saved up beyond
//! a second's worth. A process whose memory cannot be read (it exited, or
//! does not let the recorder read it) is not tried again.
//!
//! What was read for a thread's last stack completed that way is kept
//! (the anchor and the window, [`Kept`]) until the thread exits: a later
//! sample of it, taken at most [`MAX_KEPT_AGE`] after that one, whose memory
//! cannot be read any more (its process exited before the sample was
//! handled) or no longer holds the sample's own anchor (the thread went
//! on) walks on over it where its walk found a frame whose return slot
//! is the kept anchor, and that slot holds in its copy what it held then
//! (or, where the copy held no return address, where its copy ends where
//! that one did and its last bytes are the same). It is the same check
//! made against an earlier read instead of a later one, so over a longer
//! interval (the kept read's sample, up to [`MAX_KEPT_AGE`] before, to
//! this one's): the thread has not left the frame whose return address
//! the anchor holds, so the frames past it are as they were read.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use ichnos_code::memory::{Bytes, ProcessMemory};
use ichnos_code::{Frame, FrameKind, Regs, StopReason, UnwindOptions};

use super::model::AddressSpace;

/// Bytes below the copy's end that must read the same where the copy
/// holds no return address.
const OVERLAP: usize = 512;

/// Bytes read below the address a walk ran off at: the registers a frame
/// saved lie just below its return address.
const BELOW: u64 = 1 << 10;

/// How far past the address the walk ran off at the window is read, in
/// turn, each time the walk runs off its end (only what the window does
/// not hold yet is read).
const READS: [u64; 5] = [16 << 10, 16 << 10, 64 << 10, 256 << 10, MAX_READ as u64];

/// Walks made over windows for one sample at most (the window grows, or
/// moves down to a word the walk needs between it and the copy).
const MAX_WALKS: usize = 8;

/// The most read past one copy: the window lies within this many bytes
/// of the copy's end.
const MAX_READ: usize = 1 << 20;

/// The most read for each second of the recording, in all.
const BYTES_PER_SECOND: u64 = 64 << 20;

/// Threads whose last read is kept at most, and the bytes kept in all
/// (past either, the oldest is forgotten first).
const MAX_KEPT_THREADS: usize = 256;
const MAX_KEPT_BYTES: usize = 32 << 20;

/// How much later than the sample whose read is kept a sample may be to
/// go on over it (in nanoseconds). The samples handled after their
/// process exited are those of its last tens of milliseconds; the older
/// a read, the likelier its thread has left the anchor's frame and come
/// back to it through the same call.
const MAX_KEPT_AGE: u64 = 100_000_000;

/// What [`LiveStack::walk_on`] asks of the sample's address space.
pub(super) trait Walker {
    /// Walks the sample's stack again, over its copy and then `past`,
    /// stack bytes read on from the thread: how the walk ended.
    fn walk(&mut self, past: Bytes<'_>) -> StopReason;

    /// The size of the frames return addresses `then` and `now` return
    /// into (the offset of their CFA from the stack pointer), if it is
    /// the same and they lie in one code object.
    fn shared_extent(&self, then: u64, now: u64) -> Option<u64>;

    /// The frames of the last walk: before [`Walker::walk`] is called,
    /// the walk of the copy alone.
    fn frames(&self) -> &[Frame];
}

/// A sample's walk, made again over what was read on past its copy.
pub(super) struct SampleWalk<'a> {
    pub space: &'a mut AddressSpace,
    pub time: u64,
    pub regs: Regs,
    pub stack: &'a [u8],
    pub options: &'a UnwindOptions,
    pub frames: &'a mut Vec<Frame>,
}

impl Walker for SampleWalk<'_> {
    fn walk(&mut self, past: Bytes<'_>) -> StopReason {
        self.space.walk(
            self.time,
            self.regs,
            self.stack,
            past,
            self.options,
            self.frames,
        )
    }

    fn shared_extent(&self, then: u64, now: u64) -> Option<u64> {
        self.space.shared_extent(self.time, then, now)
    }

    fn frames(&self) -> &[Frame] {
        self.frames
    }
}

/// A sample whose walk ran off its stack copy: thread `tid` of process
/// `pid`'s, at `time`, with registers `regs` and stack copy `copy`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Taken<'a> {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub regs: Regs,
    pub copy: &'a [u8],
}

/// Reads past the stacks' copies, and what came of them.
#[derive(Debug, Default)]
pub(super) struct LiveStack {
    /// The window read past the copy.
    read: Vec<u8>,
    /// The bytes that may still be read, and when that was worked out.
    allowance: u64,
    as_of: Option<u64>,
    /// Processes whose memory could not be read (gone, or not readable by
    /// the recorder): not tried again.
    unreadable_pids: HashSet<u32>,
    /// Each thread's last read that completed a stack, their bytes, and
    /// the number the next one kept gets (the oldest goes first).
    kept: HashMap<u32, Kept>,
    kept_bytes: usize,
    kept_count: u64,
    /// What the last walk of [`LiveStack::walk_on`] went on over.
    last: Option<Last>,
    /// Stacks completed from the threads' memory.
    pub completed: u64,
    /// Stacks whose memory no longer held what the copy did.
    pub changed: u64,
    /// Stacks whose memory could not be read: the process had exited by
    /// the time the sample was handled (the last tens of milliseconds of
    /// its samples), or does not let the recorder read it.
    pub unreadable: u64,
    /// Of the stacks unreadable or changed, those completed over an
    /// earlier sample's read, kept.
    pub from_kept: u64,
}

/// A thread's last read past a copy that completed its stack.
#[derive(Debug)]
struct Kept {
    /// The thread's process.
    pid: u32,
    /// Where the anchor lies, and what it held.
    anchor: u64,
    expect: Vec<u8>,
    /// Where the window starts, and its bytes.
    start: u64,
    bytes: Vec<u8>,
    /// The sample's time.
    time: u64,
    /// Kept in this order.
    number: u64,
}

/// What a walk went on over past a copy.
#[derive(Clone, Copy, Debug)]
enum Last {
    /// The window read (`LiveStack::read`), starting at `start`, checked
    /// by the `len` bytes of the copy at `anchor`.
    Window { start: u64, anchor: u64, len: usize },
    /// What was kept of the thread's earlier read.
    Kept,
}

/// Processes remembered as unreadable at most (past it, forgotten).
const MAX_UNREADABLE: usize = 4096;

impl LiveStack {
    /// A new process has the id `pid` (a fork, or an exec, after which
    /// the program may be readable where the one before was not): one
    /// found unreadable under that id before is forgotten.
    pub(super) fn new_process(&mut self, pid: u32) {
        self.unreadable_pids.remove(&pid);
        self.thread_ended(pid);
    }

    /// Thread `tid` exited (or its process ran a new program): what was
    /// kept of its stack is forgotten.
    pub(super) fn thread_ended(&mut self, tid: u32) {
        if let Some(k) = self.kept.remove(&tid) {
            self.kept_bytes -= k.bytes.len() + k.expect.len();
        }
    }

    /// Takes process `pid`'s memory to be unreadable from now on, as if it
    /// had exited.
    #[cfg(test)]
    pub(super) fn forget_readable(&mut self, pid: u32) {
        self.unreadable_pids.insert(pid);
    }

    /// Whether samples of `pid` are not read on (its memory could not
    /// be read before).
    #[cfg(test)]
    pub(super) fn skips(&self, pid: u32) -> bool {
        self.unreadable_pids.contains(&pid)
    }

    /// The walk of sample `taken` ended with `stop`, past the copy (its
    /// frames are `walker`'s): reads on from the thread's memory and walks
    /// again (`walker`, over the copy and a window of stack bytes read
    /// past it) while the walk runs off what was read. Returns how the
    /// last walk ended (`stop` if none was made).
    pub(super) fn walk_on(
        &mut self,
        taken: Taken<'_>,
        stop: StopReason,
        walker: &mut dyn Walker,
    ) -> StopReason {
        self.last = None;
        let outermost = walker.frames().last().copied();
        let Taken {
            pid,
            tid: _,
            time,
            regs,
            copy,
        } = taken;
        let end = regs.sp.saturating_add(copy.len() as u64);
        // The window lies within this.
        let limit = end.saturating_add(MAX_READ as u64);
        let StopReason::StackEnd { addr } = stop else {
            return stop;
        };
        // Past the copy, and not so far past it that no read would reach
        // it (a bad address, not the stack).
        if addr < end || addr >= limit {
            return stop;
        }
        if self.unreadable_pids.contains(&pid) {
            self.unreadable += 1;
            return self.walk_kept(taken, stop, walker);
        }
        let Some((from, expect)) = anchor(regs.sp, copy, outermost) else {
            return stop;
        };
        let memory = ProcessMemory::new(pid);
        // The anchor, first: if the thread's memory no longer holds it,
        // nothing past the copy is read.
        let mut word = [0u8; OVERLAP];
        let word = &mut word[..expect.len()];
        if !self.allowed(time, expect.len()) {
            return stop;
        }
        let n = memory.read_up_to(from, word);
        if n == 0 {
            self.unreadable += 1;
            if self.unreadable_pids.len() >= MAX_UNREADABLE {
                self.unreadable_pids.clear();
            }
            self.unreadable_pids.insert(pid);
            return self.walk_kept(taken, stop, walker);
        }
        // The anchor holds what it did, or (below a frame larger than the
        // copy) another call's return address into that frame.
        let holds = |word: &[u8], walker: &dyn Walker| {
            word == expect || still_in_frame(expect, word, copy.len(), walker)
        };
        if !holds(word, &*walker) {
            self.changed += 1;
            return self.walk_kept(taken, stop, walker);
        }
        let mut stop = stop;
        // The window read so far; `self.read` holds its bytes.
        let first = addr.saturating_sub(BELOW).max(end);
        let mut window = first..first;
        self.read.clear();
        let mut reads = READS.iter();
        // Whether the last read past the window's end ended where the
        // memory did.
        let mut short = false;
        let mut walks = 0;
        while walks < MAX_WALKS {
            let StopReason::StackEnd { addr } = stop else {
                break;
            };
            let Some(piece) = next_piece(addr, &window, end..limit, &mut reads, short) else {
                break;
            };
            let len = (piece.end - piece.start) as usize;
            if !self.allowed(time, len + expect.len()) {
                break;
            }
            if !self.read_piece(memory, &mut window, piece, &mut short) {
                break;
            }
            // The anchor read again after the window: a thread that left
            // the frame while its stack was read is seen to (one that made
            // another call from it, as it may between two reads, is not).
            let still = memory.read_up_to(from, word) == expect.len() && holds(word, &*walker);
            if !still {
                // (A walk made before stands.)
                if walks == 0 {
                    self.changed += 1;
                    return self.walk_kept(taken, stop, walker);
                }
                // What it walked over is not what was read since.
                self.last = None;
                break;
            }
            walks += 1;
            self.last = Some(Last::Window {
                start: window.start,
                anchor: from,
                len: expect.len(),
            });
            stop = walker.walk(Bytes {
                addr: window.start,
                data: &self.read,
            });
            if stop == StopReason::Outermost {
                self.completed += 1;
                self.keep(taken, from, expect, window.start);
                break;
            }
        }
        stop
    }

    /// Walks sample `taken`, whose walk ended with `stop` past its copy and
    /// whose thread's memory could not be read or no longer holds its
    /// anchor, over what was kept of its thread's last read, where that
    /// read is recent and anchored in this sample's walk and copy (see the
    /// module's notes; below a frame larger than the copy, the slot may
    /// hold another call's return address into that frame). Returns how
    /// that walk ended, else `stop`.
    fn walk_kept(
        &mut self,
        taken: Taken<'_>,
        stop: StopReason,
        walker: &mut dyn Walker,
    ) -> StopReason {
        let Taken {
            pid,
            tid,
            time,
            regs,
            copy,
        } = taken;
        let Some(kept) = self.kept.get(&tid).filter(|k| {
            k.pid == pid
                && time
                    .checked_sub(k.time)
                    .is_some_and(|age| age <= MAX_KEPT_AGE)
        }) else {
            return stop;
        };
        // The copy's bytes at the kept anchor, where this sample's walk is
        // anchored there too.
        let frames = walker.frames();
        let now = if kept.expect.len() == 8 {
            frames.iter().find_map(|&f| {
                return_slot(regs.sp, copy, f)
                    .filter(|&(slot, _)| slot == kept.anchor)
                    .map(|(_, word)| word)
            })
        } else {
            anchor(regs.sp, copy, frames.last().copied())
                .filter(|&(from, own)| from == kept.anchor && own.len() == kept.expect.len())
                .map(|(_, own)| own)
        };
        let Some(now) = now else {
            return stop;
        };
        if now != kept.expect.as_slice() && !still_in_frame(&kept.expect, now, copy.len(), &*walker)
        {
            return stop;
        }
        self.last = Some(Last::Kept);
        let end = walker.walk(Bytes {
            addr: kept.start,
            data: &kept.bytes,
        });
        self.from_kept += u64::from(end == StopReason::Outermost);
        end
    }

    /// Walks sample `taken` again over what its last walk in
    /// [`LiveStack::walk_on`] went on over (nothing is read again), after
    /// its copy was walked again and ended with `stop` (JIT code was
    /// found in the frames that walk reached), where the new walk of the
    /// copy is anchored as the first was. Returns how the walk ended
    /// (`stop` if none was made).
    pub(super) fn walk_again(
        &mut self,
        taken: Taken<'_>,
        stop: StopReason,
        walker: &mut dyn Walker,
    ) -> StopReason {
        match self.last.take() {
            Some(Last::Window {
                start,
                anchor: from,
                len,
            }) => {
                let (sp, copy) = (taken.regs.sp, taken.copy);
                let Some((now, expect)) = anchor(sp, copy, walker.frames().last().copied()) else {
                    return stop;
                };
                if (now, expect.len()) != (from, len) {
                    return stop;
                }
                let end = walker.walk(Bytes {
                    addr: start,
                    data: &self.read,
                });
                if end == StopReason::Outermost {
                    self.completed += 1;
                    self.keep(taken, from, expect, start);
                }
                end
            }
            Some(Last::Kept) => self.walk_kept(taken, stop, walker),
            None => stop,
        }
    }

    /// Keeps what was read for sample `taken` (the anchor at `anchor`,
    /// holding `expect`, and the window at `start`, `self.read`) in place
    /// of what was kept for its thread before, forgetting the threads
    /// kept first past the bounds.
    fn keep(&mut self, taken: Taken<'_>, anchor: u64, expect: &[u8], start: u64) {
        let size = self.read.len() + expect.len();
        let mut kept = match self.kept.remove(&taken.tid) {
            Some(k) => {
                self.kept_bytes -= k.bytes.len() + k.expect.len();
                k
            }
            None => Kept {
                pid: 0,
                anchor: 0,
                expect: Vec::new(),
                start: 0,
                bytes: Vec::new(),
                time: 0,
                number: 0,
            },
        };
        if size > MAX_KEPT_BYTES {
            return;
        }
        while self.kept.len() >= MAX_KEPT_THREADS || self.kept_bytes + size > MAX_KEPT_BYTES {
            let Some(first) = self
                .kept
                .iter()
                .min_by_key(|(_, k)| k.number)
                .map(|(&t, _)| t)
            else {
                break;
            };
            self.thread_ended(first);
        }
        kept.pid = taken.pid;
        kept.anchor = anchor;
        kept.expect.clear();
        kept.expect.extend_from_slice(expect);
        kept.start = start;
        kept.bytes.clear();
        kept.bytes.extend_from_slice(&self.read);
        kept.time = taken.time;
        kept.number = self.kept_count;
        self.kept_count += 1;
        self.kept_bytes += size;
        self.kept.insert(taken.tid, kept);
    }

    /// Reads `piece` of the thread's stack (`memory`) into the window
    /// (`self.read` holds `window`'s bytes): on past its end, as far as
    /// the memory goes (`short` says whether it ended first), or down to
    /// below its start, wholly. Whether anything was read.
    fn read_piece(
        &mut self,
        memory: ProcessMemory,
        window: &mut Range<u64>,
        piece: Range<u64>,
        short: &mut bool,
    ) -> bool {
        let len = (piece.end - piece.start) as usize;
        if piece.start == window.end {
            let at = self.read.len();
            self.read.resize(at + len, 0);
            let n = memory.read_up_to(piece.start, &mut self.read[at..]);
            // What could not be read is not there to walk: the window
            // ends at it.
            self.read.truncate(at + n);
            *short = n < len;
            window.end += n as u64;
            n > 0
        } else {
            let mut below = vec![0u8; len];
            if memory.read_up_to(piece.start, &mut below) < len {
                // A hole between the copy and the window: not a stack.
                return false;
            }
            below.extend_from_slice(&self.read);
            self.read = below;
            window.start = piece.start;
            true
        }
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

/// What to read when a walk over `window` (past the copy, within
/// `bounds`: from the copy's end to the most read past it) needed the word
/// at `addr`: on past the window's end (or the first window), by the next
/// of `reads` unless the last read there ended where the memory did
/// (`short`), or down to a word the walk needs between it and the copy;
/// `None` where nothing more is read.
fn next_piece(
    addr: u64,
    window: &Range<u64>,
    bounds: Range<u64>,
    reads: &mut std::slice::Iter<'_, u64>,
    short: bool,
) -> Option<Range<u64>> {
    if addr >= bounds.end {
        None
    } else if addr >= window.end {
        let &more = reads.next()?;
        (!short).then(|| window.end..addr.saturating_add(more).min(bounds.end))
    } else if addr >= bounds.start && addr < window.start {
        Some(addr.saturating_sub(BELOW).max(bounds.start)..window.start)
    } else {
        None
    }
}

/// Whether the thread is still in the outermost frame its copy (of
/// `copy_len` bytes) holds, though its return slot below that frame reads
/// `now` where the copy read `then` (`then` 8 bytes, a return address):
/// it returned from the call it was making then and has made another,
/// from the same frame (a compiler's driver runs its passes one after
/// another, each called from the frame that holds its session). `now`
/// must return into code of the same object whose frame is as large as
/// the one `then` returned into, and larger than the whole copy (see the
/// module's notes).
fn still_in_frame(then: &[u8], now: &[u8], copy_len: usize, walker: &dyn Walker) -> bool {
    let (Ok(then), Ok(now)) = (<[u8; 8]>::try_from(then), <[u8; 8]>::try_from(now)) else {
        return false;
    };
    walker
        .shared_extent(u64::from_le_bytes(then), u64::from_le_bytes(now))
        .is_some_and(|extent| extent > copy_len as u64)
}

/// Where in the copy (taken at `sp`) the thread's memory is read from,
/// and the bytes that must still be there: the return address into the
/// outermost frame the walk found, `outermost`, in its slot below that
/// frame's stack pointer; for a walk that found none (the leaf's frame
/// is larger than the copy, or the frame was reached through a signal),
/// the copy's last [`OVERLAP`] bytes.
fn anchor(sp: u64, copy: &[u8], outermost: Option<Frame>) -> Option<(u64, &[u8])> {
    let end = sp + copy.len() as u64;
    outermost
        .and_then(|f| return_slot(sp, copy, f))
        .or_else(|| {
            let at = copy.len().checked_sub(OVERLAP)?;
            Some((end - OVERLAP as u64, &copy[at..]))
        })
}

/// The slot in the copy (taken at `sp`) that holds frame `f`'s return
/// address, below its stack pointer, and those bytes: for a frame found
/// by its caller's rules, not by a guess, whose slot the copy holds.
fn return_slot(sp: u64, copy: &[u8], f: Frame) -> Option<(u64, &[u8])> {
    if !matches!(f.kind, FrameKind::Row(_) | FrameKind::Cfi) {
        return None;
    }
    let slot = f.sp.checked_sub(8)?;
    let at = usize::try_from(slot.checked_sub(sp)?).ok()?;
    let word = copy.get(at..at.checked_add(8)?)?;
    (u64::from_le_bytes(word.try_into().ok()?) == f.ip).then_some((slot, word))
}
