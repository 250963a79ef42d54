//! Every thread's events in the order they happened: each thread's blocks
//! (found by a first walk in the file's order) read back a block at a
//! time, the thread with the earliest next event first.
//!
//! A thread's block is read only when its time comes: until then the
//! thread waits in the merge under the time its next block counts from,
//! which is at most its first event's. Threads that lived one after
//! another hold one block between them, not one each.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{Read, Seek};

use ichnos_data::{CallEvent, ChunkProblem, OwnedCallEvents, ReadError, Reader, Record};

use super::{step, BlockHead, BlockPlace, RingRead, Thread, Visitor};

/// Where each thread's blocks are in a trace.
#[derive(Default)]
pub struct ThreadBlocks {
    streams: Vec<Stream>,
    /// Each thread's stream, by (pid, tid).
    by_id: rustc_hash::FxHashMap<(u32, u32), usize>,
}

impl std::fmt::Debug for ThreadBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadBlocks")
            .field("threads", &self.streams.len())
            .finish_non_exhaustive()
    }
}

impl ThreadBlocks {
    /// Thread `tid` of `pid` has a block at `place`, after those added
    /// before.
    pub(super) fn add(&mut self, pid: u32, tid: u32, place: BlockPlace) {
        let n = self.streams.len();
        let at = *self.by_id.entry((pid, tid)).or_insert(n);
        if at == n {
            self.streams.push(Stream {
                pid,
                tid,
                places: VecDeque::new(),
                thread: Thread::default(),
                block: None,
            });
        }
        self.streams[at].places.push_back(place);
    }
}

/// Walks the threads' events (their blocks in `blocks`, read through
/// `chunks`) in time order; equal times go to the thread seen first.
pub(super) fn walk<R: Read + Seek>(
    blocks: ThreadBlocks,
    chunks: &mut ChunkCache<R>,
    visitor: &mut dyn Visitor,
) -> Result<(), ReadError> {
    let mut streams = blocks.streams;
    // Each thread under the time of its next event, or a time at most
    // that (its next block's, not read yet).
    let mut next = BinaryHeap::new();
    for (id, stream) in streams.iter().enumerate() {
        if let Some(place) = stream.places.front() {
            next.push(Reverse((place.first, id)));
        }
    }
    while let Some(Reverse((_, id))) = next.pop() {
        // The thread's events up to the next thread's next one.
        let until = next.peek().map(|Reverse(key)| *key);
        if let Some(at) = streams[id].advance(id, until, chunks, visitor)? {
            next.push(Reverse((at, id)));
        }
    }
    Ok(())
}

/// One thread id's blocks, read back in time order.
struct Stream {
    pid: u32,
    tid: u32,
    /// Its blocks not read yet.
    places: VecDeque<BlockPlace>,
    thread: Thread,
    /// The block being read (`None` between blocks: the next is read
    /// when its time comes).
    block: Option<OpenBlock>,
}

/// A block being read: its events still to read (kept encoded, a few
/// bytes each), the next one decoded, and (once its first event is read)
/// how a ring's events are read.
struct OpenBlock {
    head: BlockHead,
    events: OwnedCallEvents,
    next: Option<CallEvent>,
    started: bool,
    ring: Option<RingRead>,
}

impl Stream {
    /// Reads the next block; the time of its first event (of the block
    /// itself, if it has none), or `None` when there are no more.
    fn load<R: Read + Seek>(
        &mut self,
        chunks: &mut ChunkCache<R>,
    ) -> Result<Option<u64>, ReadError> {
        let Some(place) = self.places.pop_front() else {
            return Ok(None);
        };
        let (head, mut events) = chunks.block(place, (self.pid, self.tid))?;
        let next = events.next();
        let at = next.as_ref().map_or(head.first, CallEvent::ticks);
        self.block = Some(OpenBlock {
            head,
            events,
            next,
            started: false,
            ring: None,
        });
        Ok(Some(at))
    }

    /// Walks the stream's events while they come before `until` (the
    /// time and number of another stream's next event, or a time at most
    /// that; ties go to the lower number); the time of the next one
    /// after them (or at most that), or `None` when the thread has no
    /// more.
    fn advance<R: Read + Seek>(
        &mut self,
        id: usize,
        until: Option<(u64, usize)>,
        chunks: &mut ChunkCache<R>,
        visitor: &mut dyn Visitor,
    ) -> Result<Option<u64>, ReadError> {
        loop {
            let Some(at) = self.advance_one(chunks, visitor)? else {
                return Ok(None);
            };
            if until.is_some_and(|until| (at, id) > until) {
                return Ok(Some(at));
            }
        }
    }

    /// Reads the next block if none is open (its time has come), or
    /// walks the next event (starting its block, ending the block after
    /// its last); the time of the event after it, or the time its next
    /// block counts from, or `None` when the thread has no more.
    fn advance_one<R: Read + Seek>(
        &mut self,
        chunks: &mut ChunkCache<R>,
        visitor: &mut dyn Visitor,
    ) -> Result<Option<u64>, ReadError> {
        let (pid, tid) = (self.pid, self.tid);
        let Some(block) = self.block.as_mut() else {
            return self.load(chunks);
        };
        if !block.started {
            block.started = true;
            let first = block.next.as_ref().map(CallEvent::ticks);
            block.ring = block.head.start(&mut self.thread, pid, tid, first, visitor);
        }
        if let Some(event) = block.next.take() {
            block.next = block.events.next();
            let take = block
                .ring
                .as_mut()
                .is_none_or(|r| r.take(&mut self.thread, event.ticks()));
            if take {
                step(&mut self.thread, pid, tid, event, visitor);
            }
        }
        if let Some(event) = block.next {
            return Ok(Some(event.ticks()));
        }
        // For a block that goes on from this one, as in the file's order.
        if let Some(ring) = block.ring.take() {
            ring.end(&mut self.thread);
        }
        block.head.end(&mut self.thread, pid, tid, visitor);
        self.block = None;
        chunks.closed();
        if let Some(place) = self.places.front() {
            return Ok(Some(place.first));
        }
        if std::mem::take(&mut self.thread.at_exec) {
            // As at the end of a walk in the file's order.
            self.thread.end_program(pid, tid, visitor);
        } else if !self.thread.stack.is_empty() {
            // Calls still open where the trace ends, as there too.
            self.thread.unfinished(pid, tid, visitor);
        }
        Ok(None)
    }
}

/// Chunks read back for their blocks, the few used last kept: threads
/// read at about the same pace read blocks of about the same chunks.
pub(super) struct ChunkCache<R: Read> {
    reader: Reader<R>,
    kept: Vec<ichnos_data::Chunk>,
    /// Chunks read from the file (for the tests of what is kept).
    #[cfg_attr(not(test), allow(dead_code))]
    reads: u64,
    /// Blocks handed out and not yet closed, and the most at once (for
    /// the tests of the memory a walk holds).
    open: usize,
    #[cfg_attr(not(test), allow(dead_code))]
    most_open: usize,
}

/// Chunks [`ChunkCache`] keeps.
const CHUNKS_KEPT: usize = 4;

impl<R: Read + Seek> ChunkCache<R> {
    /// A cache over the chunks `reader` reads.
    pub(super) fn new(reader: Reader<R>) -> Self {
        Self {
            reader,
            kept: Vec::new(),
            reads: 0,
            open: 0,
            most_open: 0,
        }
    }

    /// The block at `place`, of thread `(pid, tid)`: its head and events
    /// (open until [`ChunkCache::closed`]).
    fn block(
        &mut self,
        place: BlockPlace,
        (pid, tid): (u32, u32),
    ) -> Result<(BlockHead, OwnedCallEvents), ReadError> {
        let at = if let Some(at) = self.kept.iter().position(|c| c.offset() == place.chunk) {
            // The least recently used goes first: this one is the newest.
            let chunk = self.kept.remove(at);
            self.kept.push(chunk);
            self.kept.len() - 1
        } else {
            self.reader.seek_chunk(place.chunk)?;
            // The first pass read this chunk whole: a file that ends
            // before it gives an error here.
            let Some(chunk) = self.reader.next_chunk()? else {
                return Err(changed(place));
            };
            self.reads += 1;
            if self.kept.len() == CHUNKS_KEPT {
                self.kept.remove(0);
            }
            self.kept.push(chunk);
            self.kept.len() - 1
        };
        let chunk = &self.kept[at];
        match chunk.records().nth(place.record as usize).transpose()? {
            // The first pass's block, of its thread: the file is as it
            // was read.
            Some(Record::Calls(calls))
                if calls.first == place.first
                    && (calls.pid as u32, calls.tid as u32) == (pid, tid) =>
            {
                self.open += 1;
                self.most_open = self.most_open.max(self.open);
                Ok((BlockHead::of(&calls), calls.events.to_owned_iter()))
            }
            // The first pass found another record here.
            _ => Err(changed(place)),
        }
    }

    /// A block handed out was read to its end.
    fn closed(&mut self) {
        self.open = self.open.saturating_sub(1);
    }
}

/// The error for a block the first pass found and a second reading does
/// not.
fn changed(place: BlockPlace) -> ReadError {
    ReadError::BadChunk {
        offset: place.chunk,
        problem: ChunkProblem::Changed {
            record: place.record,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use ichnos_data::{CallsOut, Writer};

    use super::super::{located_blocks, Call};
    use super::*;

    /// Entries seen, as (tid, ticks), in the order seen.
    #[derive(Default)]
    struct Entries(Vec<(u32, u64)>);

    impl Visitor for Entries {
        fn enter(&mut self, _: u32, tid: u32, _: u64, ticks: u64, _: usize, _: u64) {
            self.0.push((tid, ticks));
        }
        fn exit(&mut self, _: u32, _: u32, _: &Call) {}
    }

    /// A recording of blocks `(tid, entry times)` (each entry exits a
    /// tick later), a chunk each.
    fn recording(blocks: &[(u32, &[u64])]) -> Vec<u8> {
        let mut w = Writer::with_chunk_target(Vec::new(), 1).unwrap();
        for (tid, times) in blocks {
            let events: Vec<CallEvent> = times
                .iter()
                .flat_map(|&t| {
                    [
                        CallEvent::Enter {
                            ticks: t,
                            function: 1,
                        },
                        CallEvent::Exit {
                            ticks: t + 1,
                            function: 1,
                        },
                    ]
                })
                .collect();
            w.push(&Record::CallsOut(CallsOut {
                pid: 1,
                tid: u64::from(*tid),
                lost: 0,
                flags: 0,
                first: times.first().copied().unwrap_or(0),
                events: &events,
            }))
            .unwrap();
            w.flush_chunk().unwrap();
        }
        w.finish().unwrap()
    }

    fn reader(bytes: &[u8]) -> Reader<Cursor<&[u8]>> {
        Reader::new(Cursor::new(bytes)).unwrap()
    }

    fn blocks_of(bytes: &[u8]) -> ThreadBlocks {
        let mut blocks = ThreadBlocks::default();
        located_blocks(&mut reader(bytes), |place, calls| {
            blocks.add(calls.pid as u32, calls.tid as u32, place);
        })
        .unwrap();
        blocks
    }

    /// Walks `bytes` by time: the entries seen, and the most blocks open
    /// at once.
    fn walked(bytes: &[u8]) -> (Vec<(u32, u64)>, usize) {
        let mut chunks = ChunkCache::new(reader(bytes));
        let mut seen = Entries::default();
        walk(blocks_of(bytes), &mut chunks, &mut seen).unwrap();
        (seen.0, chunks.most_open)
    }

    /// Calls reported unfinished, as (tid, entered, taken to end at).
    #[derive(Default)]
    struct Unfinished(Vec<(u32, u64, u64)>);

    impl Visitor for Unfinished {
        fn enter(&mut self, _: u32, _: u32, _: u64, _: u64, _: usize, _: u64) {}
        fn exit(&mut self, _: u32, _: u32, _: &Call) {}
        fn unfinished(&mut self, _: u32, tid: u32, call: &Call) {
            self.0.push((tid, call.enter, call.exit));
        }
    }

    #[test]
    fn calls_open_where_the_trace_ends_are_reported_unfinished() {
        // Thread 5 enters at 10 and 20 and leaves the inner call at 30;
        // its recording ends there, with the outer call open.
        let mut w = Writer::with_chunk_target(Vec::new(), 1).unwrap();
        let events = [
            CallEvent::Enter {
                ticks: 10,
                function: 1,
            },
            CallEvent::Enter {
                ticks: 20,
                function: 2,
            },
            CallEvent::Exit {
                ticks: 30,
                function: 2,
            },
        ];
        w.push(&Record::CallsOut(CallsOut {
            pid: 1,
            tid: 5,
            lost: 0,
            flags: 0,
            first: 10,
            events: &events,
        }))
        .unwrap();
        let bytes = w.finish().unwrap();
        let mut chunks = ChunkCache::new(reader(&bytes));
        let mut seen = Unfinished::default();
        walk(blocks_of(&bytes), &mut chunks, &mut seen).unwrap();
        assert_eq!(seen.0, [(5, 10, 30)], "to the thread's last event");
    }

    #[test]
    fn threads_taking_turns_are_merged_by_time() {
        // In the file, each thread's blocks come together.
        let bytes = recording(&[
            (7, &[10, 30]),
            (7, &[50, 70]),
            (8, &[20, 40]),
            (8, &[60, 80]),
        ]);
        let (seen, most_open) = walked(&bytes);
        assert_eq!(
            seen,
            [
                (7, 10),
                (8, 20),
                (7, 30),
                (8, 40),
                (7, 50),
                (8, 60),
                (7, 70),
                (8, 80)
            ]
        );
        assert_eq!(most_open, 2, "both threads run at once");
    }

    #[test]
    fn threads_that_lived_one_after_another_hold_one_block_between_them() {
        let times: Vec<[u64; 2]> = (0..50u64).map(|i| [i * 100, i * 100 + 50]).collect();
        let blocks: Vec<(u32, &[u64])> = times
            .iter()
            .zip(100u32..)
            .map(|(t, tid)| (tid, &t[..]))
            .collect();
        let bytes = recording(&blocks);
        let (seen, most_open) = walked(&bytes);
        assert_eq!(seen.len(), 100);
        assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "{seen:?}");
        // Each thread's block is read when its time comes, after the one
        // before has ended: not all 50 at the start.
        assert_eq!(most_open, 1);
    }

    #[test]
    fn equal_times_go_to_the_thread_seen_first() {
        let bytes = recording(&[(9, &[5, 6]), (3, &[5, 6])]);
        let (seen, _) = walked(&bytes);
        // tid 9's stream is the first found.
        assert_eq!(seen, [(9, 5), (3, 5), (9, 6), (3, 6)]);
    }

    #[test]
    fn the_chunk_used_least_recently_is_the_one_given_up() {
        let times: Vec<[u64; 1]> = (0..6u64).map(|i| [i]).collect();
        let blocks: Vec<(u32, &[u64])> = times.iter().map(|t| (1, &t[..])).collect();
        let bytes = recording(&blocks);
        let mut places = Vec::new();
        located_blocks(&mut reader(&bytes), |place, _| places.push(place)).unwrap();
        assert_eq!(places.len(), 6, "a chunk a block");
        let mut cache = ChunkCache::new(reader(&bytes));
        let read = |cache: &mut ChunkCache<_>, i: usize| {
            let (head, _) = cache.block(places[i], (1, 1)).unwrap();
            cache.closed();
            assert_eq!(head.first, i as u64, "block {i}");
            cache.reads
        };
        for i in 0..CHUNKS_KEPT {
            assert_eq!(read(&mut cache, i), i as u64 + 1);
        }
        // Block 0's chunk is used again: block 1's is now the oldest used.
        assert_eq!(read(&mut cache, 0), 4, "a kept chunk is not read again");
        assert_eq!(read(&mut cache, 4), 5);
        assert_eq!(read(&mut cache, 0), 5, "the chunk used again is kept");
        assert_eq!(
            read(&mut cache, 1),
            6,
            "the chunk used least recently is not"
        );
    }

    #[test]
    fn a_block_gone_from_the_file_since_the_first_pass_is_an_error_naming_its_chunk() {
        let bytes = recording(&[(1, &[1]), (1, &[2])]);
        let blocks = blocks_of(&bytes);
        let second = blocks.streams[0].places[1];
        // The file as a second reading finds it: cut before the second
        // block's chunk.
        let cut = &bytes[..second.chunk as usize];
        let mut chunks = ChunkCache::new(reader(cut));
        match walk(blocks, &mut chunks, &mut Entries::default()) {
            Err(ReadError::Truncated { offset, .. }) => assert_eq!(offset, second.chunk),
            other => panic!("{other:?}"),
        }
        // A place with no `Calls` record.
        let mut chunks = ChunkCache::new(reader(&bytes));
        let nowhere = BlockPlace {
            record: 5,
            ..second
        };
        match chunks.block(nowhere, (1, 1)) {
            Err(ReadError::BadChunk {
                offset,
                problem: ChunkProblem::Changed { record: 5 },
            }) => assert_eq!(offset, second.chunk),
            other => panic!("{:?}", other.map(|(h, _)| h)),
        }
        // Another thread's block, or one that starts elsewhere, where the
        // first pass found this one: the file was written over since.
        let elsewhere = BlockPlace { first: 7, ..second };
        for (place, thread) in [(second, (1, 2)), (elsewhere, (1, 1))] {
            match chunks.block(place, thread) {
                Err(ReadError::BadChunk {
                    problem: ChunkProblem::Changed { record: 0 },
                    ..
                }) => {}
                other => panic!("{:?}", other.map(|(h, _)| h)),
            }
        }
    }
}
