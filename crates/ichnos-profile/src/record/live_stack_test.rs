//! Reading on past a stack copy: the anchor that must still hold, the
//! window read where the walk ran off (and only there), and the frame
//! that is still the same though its callee changed. The "thread" is a
//! block of this process's memory laid out as a stack from its start.

use ichnos_code::memory::Bytes;
use ichnos_code::{Frame, FrameKind, Regs, RowSource, StopReason};

use super::live_stack::{LiveStack, Taken, Walker};

/// A walker that keeps each window it is handed and ends each walk as
/// `next` says; `extent` answers [`Walker::shared_extent`].
pub(super) struct Windows<F> {
    pub next: F,
    pub extent: Option<u64>,
    pub walked: Vec<(u64, Vec<u8>)>,
    /// The frames of the walk of the copy.
    pub frames: Vec<Frame>,
}

impl<F: FnMut(&Bytes<'_>) -> StopReason> Walker for Windows<F> {
    fn walk(&mut self, past: Bytes<'_>) -> StopReason {
        self.walked.push((past.addr, past.data.to_vec()));
        (self.next)(&past)
    }

    fn shared_extent(&self, _then: u64, _now: u64) -> Option<u64> {
        self.extent
    }

    fn frames(&self) -> &[Frame] {
        &self.frames
    }
}

/// [`LiveStack::walk_on`] of sample `taken`, whose walk of the copy ended
/// with `stop` at its outermost frame `outermost` (`walker`'s frames).
pub(super) fn walk_on<F: FnMut(&Bytes<'_>) -> StopReason>(
    live: &mut LiveStack,
    taken: Taken<'_>,
    stop: StopReason,
    outermost: Option<Frame>,
    walker: &mut Windows<F>,
) -> StopReason {
    walker.frames = outermost.into_iter().collect();
    live.walk_on(taken, stop, walker)
}

/// A walker whose first walk reaches the outermost frame.
pub(super) fn ends_at_once() -> Windows<impl FnMut(&Bytes<'_>) -> StopReason> {
    Windows {
        next: |_: &Bytes<'_>| StopReason::Outermost,
        extent: None,
        walked: Vec::new(),
        frames: Vec::new(),
    }
}

/// A sample of `memory` whose copy is its first `copy` bytes.
fn taken<'a>(memory: &[u8], copy: &'a [u8]) -> Taken<'a> {
    Taken {
        pid: std::process::id(),
        tid: 1,
        time: ichnos_perf::monotonic_ns(),
        regs: Regs {
            ip: 0,
            sp: memory.as_ptr() as u64,
            fp: 0,
            bx: None,
        },
        copy,
    }
}

/// Memory standing for a stack (it only has to be this process's):
/// every byte differs from its neighbours'.
fn stack_memory(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3 + i / 251) as u8).collect()
}

/// The frame whose return address the copy holds at `at` (its slot),
/// `word`.
fn frame_above(memory: &[u8], at: usize, word: u64) -> Frame {
    Frame {
        ip: word,
        sp: memory.as_ptr() as u64 + at as u64 + 8,
        kind: FrameKind::Row(RowSource::EhFrame),
    }
}

#[test]
fn memory_that_no_longer_holds_what_the_copy_does_is_not_read_on() {
    let memory = stack_memory(8192);
    let sp = memory.as_ptr() as u64;
    let copy = memory[..4096].to_vec();
    let past = StopReason::StackEnd {
        addr: sp + 4096 + 8,
    };
    let mut live = LiveStack::default();
    // No return address in the copy: its last 512 bytes must read the
    // same. They do: the walk goes on over what was read from the copy's
    // end (the address it ran off at is just past it).
    let mut walker = ends_at_once();
    let stop = walk_on(&mut live, taken(&memory, &copy), past, None, &mut walker);
    assert_eq!(stop, StopReason::Outermost);
    let [(addr, data)] = &walker.walked[..] else {
        panic!("one walk: {:?}", walker.walked.len());
    };
    assert_eq!(*addr, sp + 4096);
    assert!(data.len() >= 4096 && data[..4096] == memory[4096..]);
    // One byte of them differs: the memory changed since; no walk.
    let mut altered = copy.clone();
    altered[4000] ^= 0xff;
    let mut walker = ends_at_once();
    let stop = walk_on(&mut live, taken(&memory, &altered), past, None, &mut walker);
    assert_eq!(stop, past);
    assert!(walker.walked.is_empty());
    // The outermost frame's return address lies in the copy, at 64: that
    // word alone must still read the same (the rest of the copy may
    // change, as a live frame's locals do).
    let word = u64::from_le_bytes(memory[64..72].try_into().unwrap());
    let mut locals_changed = copy.clone();
    locals_changed[3000] ^= 0xff;
    let mut walker = ends_at_once();
    let outermost = Some(frame_above(&memory, 64, word));
    let stop = walk_on(
        &mut live,
        taken(&memory, &locals_changed),
        past,
        outermost,
        &mut walker,
    );
    assert_eq!(stop, StopReason::Outermost);
    assert_eq!(walker.walked[0].1[..4096], memory[4096..]);
    // The return address slot itself reads otherwise, and the frame it
    // would return into is not one of the same extent: no walk.
    let mut other = copy.clone();
    other[64..72].copy_from_slice(&(word ^ 1).to_le_bytes());
    let mut walker = ends_at_once();
    let outermost = Some(frame_above(&memory, 64, word ^ 1));
    let stop = walk_on(
        &mut live,
        taken(&memory, &other),
        past,
        outermost,
        &mut walker,
    );
    assert_eq!(stop, past);
    assert!(walker.walked.is_empty());
    assert_eq!((live.completed, live.changed, live.unreadable), (2, 2, 0));
}

#[test]
fn a_frame_larger_than_the_copy_still_there_whose_callee_changed_is_read_on() {
    let memory = stack_memory(8192);
    let sp = memory.as_ptr() as u64;
    let word = u64::from_le_bytes(memory[64..72].try_into().unwrap());
    // At the sample, the slot held another return address: the frame has
    // returned from that call and made another since.
    let mut copy = memory[..4096].to_vec();
    copy[64..72].copy_from_slice(&(word ^ 0x40).to_le_bytes());
    let past = StopReason::StackEnd {
        addr: sp + 4096 + 8,
    };
    let outermost = Some(frame_above(&memory, 64, word ^ 0x40));
    // Read on only where the call made now returns into a frame as large
    // as the one called then, and larger than the whole copy (4 KiB).
    for (extent, read_on) in [
        (None, false),
        (Some(512), false),
        (Some(4096), false),
        (Some(4104), true),
    ] {
        let mut live = LiveStack::default();
        let mut walker = Windows {
            next: |_: &Bytes<'_>| StopReason::Outermost,
            extent,
            walked: Vec::new(),
            frames: Vec::new(),
        };
        let stop = walk_on(
            &mut live,
            taken(&memory, &copy),
            past,
            outermost,
            &mut walker,
        );
        assert_eq!(stop == StopReason::Outermost, read_on, "{extent:?}");
        assert_eq!(
            (live.completed, live.changed),
            (u64::from(read_on), u64::from(!read_on))
        );
        assert_eq!(walker.walked.len(), usize::from(read_on));
    }
}

#[test]
fn only_a_window_where_the_walk_ran_off_is_read_and_it_moves_and_grows_as_the_walk_needs() {
    // 1 MiB of "stack", the copy its first 4 KiB; a frame larger than
    // the copy whose return address lies at 600 KiB.
    let memory = stack_memory(1 << 20);
    let sp = memory.as_ptr() as u64;
    let copy = memory[..4096].to_vec();
    let ran_off: u64 = 600 << 10;
    let past = StopReason::StackEnd { addr: sp + ran_off };
    let mut live = LiveStack::default();
    // Three walks: the first runs off the window's end, the second needs
    // a word between the copy and the window, the third reaches the end.
    let needs = [sp + (600 << 10) + (20 << 10), sp + (300 << 10)];
    let mut walks = 0;
    let mut walker = Windows {
        next: |_: &Bytes<'_>| {
            walks += 1;
            match needs.get(walks - 1) {
                Some(&addr) => StopReason::StackEnd { addr },
                None => StopReason::Outermost,
            }
        },
        extent: None,
        walked: Vec::new(),
        frames: Vec::new(),
    };
    let stop = walk_on(&mut live, taken(&memory, &copy), past, None, &mut walker);
    assert_eq!(stop, StopReason::Outermost);
    let windows: Vec<(u64, usize)> = walker
        .walked
        .iter()
        .map(|(addr, data)| (addr - sp, data.len()))
        .collect();
    // The first window: 1 KiB below where the walk ran off, 16 KiB past
    // it; nothing of the 590 KiB between it and the copy.
    let first = ran_off - 1024;
    assert_eq!(windows[0], (first, 1024 + (16 << 10)));
    // Grown to 16 KiB past the word the second walk needed.
    assert_eq!(windows[1], (first, 1024 + (20 << 10) + (16 << 10)));
    // Moved down to 1 KiB below the word the third needed, its end kept.
    let lower = (300 << 10) - 1024;
    assert_eq!(
        windows[2],
        (lower, (first as usize - lower as usize) + windows[1].1)
    );
    // Each window holds the thread's bytes at its address.
    for (addr, data) in &walker.walked {
        let at = (addr - sp) as usize;
        assert_eq!(data[..], memory[at..at + data.len()]);
    }
    assert_eq!((live.completed, live.changed), (1, 0));
}

#[test]
fn a_walk_that_needs_more_than_can_be_read_past_a_copy_reads_nothing() {
    let memory = stack_memory(8192);
    let sp = memory.as_ptr() as u64;
    let copy = memory[..4096].to_vec();
    let mut live = LiveStack::default();
    // 1 MiB past the copy's end or more: not the stack.
    let far = StopReason::StackEnd {
        addr: sp + 4096 + (1 << 20),
    };
    let mut walker = ends_at_once();
    assert_eq!(
        walk_on(&mut live, taken(&memory, &copy), far, None, &mut walker),
        far
    );
    assert!(walker.walked.is_empty());
    // Below the copy's end: a value the copy held that could not be used.
    let inside = StopReason::StackEnd { addr: sp + 100 };
    assert_eq!(
        walk_on(&mut live, taken(&memory, &copy), inside, None, &mut walker),
        inside
    );
    assert!(walker.walked.is_empty());
    assert_eq!((live.completed, live.changed, live.unreadable), (0, 0, 0));
}

#[test]
fn a_frame_larger_than_the_copy_that_makes_another_call_while_it_is_read_is_read_on() {
    for (extent, completed) in [(None, 0), (Some(8192), 1)] {
        let mut memory = stack_memory(64 << 10);
        let sp = memory.as_ptr() as u64;
        let copy = memory[..4096].to_vec();
        let word = u64::from_le_bytes(memory[64..72].try_into().unwrap());
        let outermost = Some(frame_above(&memory, 64, word));
        let taken = taken(&memory, &copy);
        let past = StopReason::StackEnd {
            addr: sp + (16 << 10),
        };
        let mut live = LiveStack::default();
        let slot = memory[64..72].as_mut_ptr();
        let mut walks = 0;
        let mut walker = Windows {
            next: |_: &Bytes<'_>| {
                walks += 1;
                if walks == 1 {
                    // Between this walk's window and the next: the frame
                    // returns from its call and makes another.
                    for (i, b) in (word ^ 0x40).to_le_bytes().into_iter().enumerate() {
                        // SAFETY: `slot` points at 8 bytes of `memory`,
                        // which outlives the walk and is not otherwise
                        // borrowed while it runs.
                        unsafe { slot.add(i).write_volatile(b) };
                    }
                    StopReason::StackEnd {
                        addr: sp + (40 << 10),
                    }
                } else {
                    StopReason::Outermost
                }
            },
            extent,
            walked: Vec::new(),
            frames: Vec::new(),
        };
        let stop = walk_on(&mut live, taken, past, outermost, &mut walker);
        // Below a frame larger than the copy (8 KiB here), the new call's
        // return address is taken; else the first walk stands.
        assert_eq!(walker.walked.len(), 1 + completed, "{extent:?}");
        assert_eq!(stop == StopReason::Outermost, completed == 1, "{extent:?}");
        assert_eq!((live.completed, live.changed), (completed as u64, 0));
        // The window was read on after the first walk, then found changed:
        // what was read is not what that walk went over, and a walk
        // made again (after a look for JIT code) has nothing to go on over.
        if completed == 0 {
            assert_eq!(live.walk_again(taken, past, &mut walker), past);
            assert_eq!(walker.walked.len(), 1);
        }
        drop(walker);
        assert_eq!(memory[64..72], (word ^ 0x40).to_le_bytes());
    }
}

/// After a walk over a window that did not reach the outermost frame,
/// the copy walked again (JIT code was found) goes on over the same
/// window, read once, where it is anchored as the first walk was; a walk
/// that completes there is counted and kept.
#[test]
fn a_walk_made_again_goes_on_over_the_window_already_read() {
    let memory = stack_memory(8192);
    let copy = memory[..4096].to_vec();
    let sp = memory.as_ptr() as u64;
    let word = u64::from_le_bytes(memory[64..72].try_into().unwrap());
    let outermost = frame_above(&memory, 64, word);
    let past = StopReason::StackEnd {
        addr: sp + 4096 + 8,
    };
    let unknown = StopReason::NoUnwindInfo { pc: 0x1234 };
    for (frames, walked_again) in [
        (vec![outermost], true),
        // Anchored elsewhere: no walk.
        (
            vec![
                outermost,
                frame_above(
                    &memory,
                    96,
                    u64::from_le_bytes(memory[96..104].try_into().unwrap()),
                ),
            ],
            false,
        ),
    ] {
        let mut live = LiveStack::default();
        let mut walks = 0;
        let mut walker = Windows {
            next: |_: &Bytes<'_>| {
                walks += 1;
                if walks == 1 {
                    unknown
                } else {
                    StopReason::Outermost
                }
            },
            extent: None,
            walked: Vec::new(),
            frames: Vec::new(),
        };
        let taken = Taken {
            tid: 3,
            ..taken(&memory, &copy)
        };
        let stop = walk_on(&mut live, taken, past, Some(outermost), &mut walker);
        assert_eq!(stop, unknown);
        assert_eq!(live.completed, 0);
        walker.frames = frames;
        let again = live.walk_again(taken, past, &mut walker);
        assert_eq!(again == StopReason::Outermost, walked_again);
        assert_eq!(walker.walked.len(), 1 + usize::from(walked_again));
        if walked_again {
            assert_eq!(walker.walked[0], walker.walked[1], "the same window");
            assert_eq!(live.completed, 1);
            // Kept: the thread's next sample, its process gone, goes on
            // over it.
            live.forget_readable(std::process::id());
            let mut walker = ends_at_once();
            walker.frames = vec![outermost];
            let next = Taken {
                time: taken.time + 1,
                ..taken
            };
            assert_eq!(live.walk_on(next, past, &mut walker), StopReason::Outermost);
            assert_eq!(live.from_kept, 1);
        } else {
            assert_eq!(again, past);
        }
    }
}

/// The id of a process that has exited: its memory reads nothing.
fn exited_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A sample of `memory` by thread `tid` of process `pid`, taken at `at`
/// bytes into it, whose copy is `copy`.
fn taken_by<'a>(pid: u32, tid: u32, memory: &[u8], at: usize, copy: &'a [u8]) -> Taken<'a> {
    Taken {
        pid,
        tid,
        regs: Regs {
            ip: 0,
            sp: memory.as_ptr() as u64 + at as u64,
            fp: 0,
            bx: None,
        },
        ..taken(memory, copy)
    }
}

#[test]
fn a_sample_handled_after_its_process_exited_walks_on_over_its_threads_last_read() {
    let memory = stack_memory(8192);
    let sp = memory.as_ptr() as u64;
    let word_at = |at: usize| u64::from_le_bytes(memory[at..at + 8].try_into().unwrap());
    let word = word_at(64);
    let past = |at: usize| StopReason::StackEnd {
        addr: sp + at as u64 + 4096 + 8,
    };
    let me = std::process::id();
    let mut live = LiveStack::default();
    // Thread 7's stack completed from this process's memory, its
    // outermost frame's return address at 64: what was read is kept.
    let copy = memory[..4096].to_vec();
    let mut walker = ends_at_once();
    let first = taken_by(me, 7, &memory, 0, &copy);
    let stop = walk_on(
        &mut live,
        first,
        past(0),
        Some(frame_above(&memory, 64, word)),
        &mut walker,
    );
    assert_eq!(stop, StopReason::Outermost);
    let read = walker.walked[0].clone();
    // A later sample of thread 7, 32 bytes shallower, whose walk found
    // the frame that returns through the slot at 64 and an outer one
    // (at 96) whose slot no longer holds what it did (the thread went on
    // calling from there): the memory fails its own anchor, and the walk
    // goes on over the kept window instead.
    let later = memory[32..32 + 4096].to_vec();
    let through_kept = [
        frame_above(&memory, 64, word),
        frame_above(&memory, 96, word_at(96)),
    ];
    let mut moved = later.clone();
    moved[64..72].copy_from_slice(&(word_at(96) ^ 2).to_le_bytes());
    let moved_frames = [through_kept[0], frame_above(&memory, 96, word_at(96) ^ 2)];
    let sample = |copy, time_after: u64| Taken {
        time: first.time + time_after,
        ..taken_by(me, 7, &memory, 32, copy)
    };
    let mut walker = ends_at_once();
    walker.frames = moved_frames.to_vec();
    let stop = live.walk_on(sample(&moved, 1_000_000), past(32), &mut walker);
    assert_eq!(stop, StopReason::Outermost);
    assert_eq!(walker.walked, std::slice::from_ref(&read));
    assert_eq!((live.changed, live.from_kept), (1, 1));
    // Its process exited before the sample was handled (its memory is
    // unreadable): the same.
    live.forget_readable(me);
    let mut walker = ends_at_once();
    walker.frames = through_kept.to_vec();
    let stop = live.walk_on(sample(&later, 2_000_000), past(32), &mut walker);
    assert_eq!(stop, StopReason::Outermost, "the kept window, as read");
    assert_eq!(walker.walked, std::slice::from_ref(&read));
    assert_eq!((live.unreadable, live.from_kept), (1, 2));
    // Not: where the copy holds another return address in the kept
    // slot (the thread left that frame); where no frame of the walk
    // returns through the kept slot, though the copy holds the word
    // there (stale bytes in a frame's locals); for another thread, or a
    // thread of that id in another process; for a sample taken more
    // than a quarter second after the kept one, or before it.
    let mut left = later.clone();
    left[32..40].copy_from_slice(&(word ^ 1).to_le_bytes());
    let left_frames = [frame_above(&memory, 64, word ^ 1), through_kept[1]];
    let cases: [(&str, Taken<'_>, &[Frame]); 6] = [
        ("left", sample(&left, 3_000_000), &left_frames),
        ("unanchored", sample(&later, 3_000_000), &through_kept[1..]),
        (
            "thread",
            Taken {
                tid: 8,
                ..sample(&later, 3_000_000)
            },
            &through_kept,
        ),
        (
            "process",
            Taken {
                pid: exited_pid(),
                ..sample(&later, 3_000_000)
            },
            &through_kept,
        ),
        ("late", sample(&later, 250_000_001), &through_kept),
        (
            "early",
            Taken {
                time: first.time - 1,
                ..sample(&later, 0)
            },
            &through_kept,
        ),
    ];
    // (And where the copy starts above the kept slot: the thread
    // returned past that frame.)
    let above = memory[72..72 + 4096].to_vec();
    let above_sample = Taken {
        time: first.time + 3_000_000,
        ..taken_by(me, 7, &memory, 72, &above)
    };
    let mut walker = ends_at_once();
    walker.frames = through_kept[1..].to_vec();
    assert_eq!(live.walk_on(above_sample, past(72), &mut walker), past(72));
    assert!(walker.walked.is_empty());
    // Once the thread has ended, nothing of it is kept.
    let ended = ("ended", sample(&later, 4_000_000), through_kept.as_slice());
    for (case, taken, frames) in cases.into_iter().chain([ended]) {
        if case == "ended" {
            live.thread_ended(7);
        }
        let mut walker = ends_at_once();
        walker.frames = frames.to_vec();
        let stop = live.walk_on(taken, past(32), &mut walker);
        assert_eq!(stop, past(32), "{case}");
        assert!(walker.walked.is_empty(), "{case}");
    }
    assert_eq!(live.from_kept, 2);
}

#[test]
fn what_is_kept_of_threads_reads_is_bounded_and_the_oldest_goes_first() {
    let memory = stack_memory(8192);
    let sp = memory.as_ptr() as u64;
    let copy = memory[..4096].to_vec();
    let past = StopReason::StackEnd {
        addr: sp + 4096 + 8,
    };
    let me = std::process::id();
    let mut live = LiveStack::default();
    // Threads 1 to 257 read in turn: 256 are kept, thread 1's is not.
    let time = ichnos_perf::monotonic_ns();
    for tid in 1..=257 {
        let taken = Taken {
            time,
            ..taken_by(me, tid, &memory, 0, &copy)
        };
        let stop = walk_on(&mut live, taken, past, None, &mut ends_at_once());
        assert_eq!(stop, StopReason::Outermost);
    }
    live.forget_readable(me);
    for (tid, kept) in [(1, false), (2, true), (257, true)] {
        let taken = Taken {
            time,
            ..taken_by(me, tid, &memory, 0, &copy)
        };
        let stop = walk_on(&mut live, taken, past, None, &mut ends_at_once());
        assert_eq!(stop == StopReason::Outermost, kept, "thread {tid}");
    }
}

#[test]
fn a_kept_read_serves_below_a_frame_larger_than_the_copy_and_where_the_copy_ends_as_it_did() {
    let memory = stack_memory(16384);
    let sp = memory.as_ptr() as u64;
    let me = std::process::id();
    let word = u64::from_le_bytes(memory[64..72].try_into().unwrap());
    let copy = memory[..4096].to_vec();
    let past = |at: u64| StopReason::StackEnd {
        addr: sp + at + 4096 + 8,
    };
    // Below a frame larger than the copy, whose return slot at 64 now
    // holds another call's return address: served where that call
    // returns into a frame as large, larger than the copy.
    for (extent, served) in [(None, false), (Some(8192), true)] {
        let mut live = LiveStack::default();
        let first = taken_by(me, 5, &memory, 0, &copy);
        let stop = walk_on(
            &mut live,
            first,
            past(0),
            Some(frame_above(&memory, 64, word)),
            &mut ends_at_once(),
        );
        assert_eq!(stop, StopReason::Outermost);
        live.forget_readable(me);
        let mut other = copy.clone();
        other[64..72].copy_from_slice(&(word ^ 0x40).to_le_bytes());
        let mut walker = ends_at_once();
        walker.extent = extent;
        walker.frames = vec![frame_above(&memory, 64, word ^ 0x40)];
        let next = Taken {
            time: first.time + 1,
            ..taken_by(me, 5, &memory, 0, &other)
        };
        let stop = live.walk_on(next, past(0), &mut walker);
        assert_eq!(stop == StopReason::Outermost, served, "{extent:?}");
        assert_eq!(live.from_kept, u64::from(served));
    }
    // A read anchored by the copy's last bytes (no return address in
    // it) serves a sample whose copy ends where that one did and holds
    // the same bytes there, not one whose copy ends elsewhere.
    let mut live = LiveStack::default();
    let first = taken_by(me, 6, &memory, 0, &copy);
    let stop = walk_on(&mut live, first, past(0), None, &mut ends_at_once());
    assert_eq!(stop, StopReason::Outermost);
    live.forget_readable(me);
    let shifted = memory[8..8 + 4096].to_vec();
    for (at, copy, served) in [(8, &shifted, false), (0, &copy, true)] {
        let mut walker = ends_at_once();
        let next = Taken {
            time: first.time + 1,
            ..taken_by(me, 6, &memory, at, copy)
        };
        let stop = live.walk_on(next, past(at as u64), &mut walker);
        assert_eq!(stop == StopReason::Outermost, served, "at {at}");
    }
}
