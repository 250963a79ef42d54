//! Records from several kernel rings, put back in time order.
//!
//! Each CPU's ring is in time order, but a process's mapping can land in
//! one ring and its thread's next sample in another, read first. Records
//! are gathered from every ring, and handed on in time order only once no
//! ring can still hold an older one: the kernel writes a record within
//! moments of its timestamp, so everything older than the start of the
//! current read, minus a margin, is in hand. Staging memory is reused
//! from round to round: nothing is allocated per record once it has grown.

use ichnos_perf::record::{
    append_sample_with_stack_cut, parse, Record, RecordHeader, Sample, SampleFormat, HEADER_LEN,
};

/// How far behind the start of a read a record must be to be handed on:
/// the kernel writes records within microseconds of their timestamps;
/// this leaves room for a writer preempted in between.
pub const MARGIN_NS: u64 = 10_000_000;

/// Bytes a staging block grows to before records go to a fresh one.
const BLOCK_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Debug)]
struct Entry {
    time: u64,
    /// Order of arrival, to keep equal times in ring order.
    seq: u64,
    block: u32,
    start: usize,
    len: usize,
    format: u16,
    /// A sample staged with its stack cut.
    stack_cut: bool,
}

/// How a record handed on was staged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    /// Its header (with its size as staged).
    pub header: RecordHeader,
    /// A sample whose stack was cut where its thread's frames were seen
    /// to end: a walk that runs off it ran off the cut, not the kernel's
    /// copy.
    pub stack_cut: bool,
}

/// Staged bytes: records stay where they were copied until handed on, and
/// a block is reused once none of its records is waiting.
#[derive(Debug, Default)]
struct Block {
    bytes: Vec<u8>,
    waiting: usize,
}

/// Staged records waiting for their turn.
///
/// Each record is copied once, from its ring into a block, and never
/// moved again: with stack copies of tens of kilobytes per sample,
/// compacting the records still waiting after every round cost more
/// than everything else the recorder does. A sample's stack is copied
/// only as far as its thread's frames reach, where that is known.
#[derive(Debug, Default)]
pub struct Sorter {
    blocks: Vec<Block>,
    /// The block rings are read into.
    current: usize,
    /// Blocks with nothing waiting, ready for reuse.
    free: Vec<usize>,
    entries: Vec<Entry>,
    seq: u64,
    formats: Vec<SampleFormat>,
}

impl Sorter {
    /// A sorter for records of events with these formats (index = the
    /// `format` argument of [`Sorter::stage`]).
    #[must_use]
    pub fn new(formats: Vec<SampleFormat>) -> Self {
        Self {
            blocks: vec![Block::default()],
            formats,
            ..Self::default()
        }
    }

    /// Stages one record of an event with format `format`, copying it (a
    /// sample's stack cut to what `stack_needs` says the thread's frames
    /// need, when it says) into the current block. A record without a
    /// timestamp sorts at `now`. Returns the thread whose stack this
    /// record ends (it exits, or its process execs), so that no sample
    /// staged after it is cut by what was learnt before.
    pub fn stage_record(
        &mut self,
        record: &[u8],
        format: u16,
        now: u64,
        stack_needs: impl FnOnce(&Sample<'_>) -> Option<u64>,
    ) -> Option<u32> {
        let f = self.formats.get(usize::from(format)).copied()?;
        if self.blocks.is_empty() {
            self.blocks.push(Block::default());
        }
        // A full block that still holds waiting records gives way.
        if self.blocks[self.current].bytes.len() >= BLOCK_BYTES {
            self.current = self.free.pop().unwrap_or_else(|| {
                self.blocks.push(Block::default());
                self.blocks.len() - 1
            });
        }
        let block_number = u32::try_from(self.current).ok()?;
        let parsed = parse(&f, record).ok();
        let time = parsed.as_ref().and_then(Record::time).unwrap_or(now);
        let block = &mut self.blocks[self.current];
        let start = block.bytes.len();
        let mut ended = None;
        let mut keep = None;
        match &parsed {
            Some(Record::Sample(sample)) => keep = stack_needs(sample).map(|k| (sample, k)),
            Some(Record::Exit(e)) => ended = Some(e.tid),
            Some(Record::Comm(c)) if c.exec => ended = Some(c.tid),
            _ => {}
        }
        let len = if let Some((sample, keep)) = keep {
            append_sample_with_stack_cut(record, sample, keep, &mut block.bytes)
        } else {
            block.bytes.extend_from_slice(record);
            record.len()
        };
        let stack_cut = len < record.len();
        block.waiting += 1;
        self.seq += 1;
        self.entries.push(Entry {
            time,
            seq: self.seq,
            block: block_number,
            start,
            len,
            format,
            stack_cut,
        });
        ended
    }

    /// Records staged and not yet handed on.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is staged.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Staging blocks held (for tests of reuse).
    #[cfg(test)]
    fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Hands every staged record with a time at or below `up_to` to `f`,
    /// oldest first, parsed; keeps the rest for a later round.
    pub fn release(&mut self, up_to: u64, mut f: impl FnMut(&Record<'_>, Staged)) {
        self.entries.sort_unstable_by_key(|e| (e.time, e.seq));
        let cut = self.entries.partition_point(|e| e.time <= up_to);
        for e in &self.entries[..cut] {
            let block = &mut self.blocks[e.block as usize];
            block.waiting -= 1;
            let bytes = &block.bytes[e.start..e.start + e.len];
            let (Some(format), Some(header)) = (
                self.formats.get(usize::from(e.format)),
                RecordHeader::read(bytes),
            ) else {
                continue;
            };
            if let Ok(record) = parse(format, bytes) {
                f(
                    &record,
                    Staged {
                        header,
                        stack_cut: e.stack_cut,
                    },
                );
            }
        }
        self.entries.drain(..cut);
        // Blocks with nothing waiting are emptied for reuse; a full
        // current block gives way to one of them (or a new one).
        for (i, block) in self.blocks.iter_mut().enumerate() {
            if block.waiting == 0 && !block.bytes.is_empty() {
                block.bytes.clear();
                // What a burst grew is given back.
                if block.bytes.capacity() > 2 * BLOCK_BYTES {
                    block.bytes.shrink_to(BLOCK_BYTES);
                }
                if i != self.current {
                    self.free.push(i);
                }
            }
        }
        if self
            .blocks
            .get(self.current)
            .is_some_and(|b| b.bytes.len() >= BLOCK_BYTES)
        {
            self.current = self.free.pop().unwrap_or_else(|| {
                self.blocks.push(Block::default());
                self.blocks.len() - 1
            });
        }
        debug_assert!(self.entries.iter().all(|e| e.len >= HEADER_LEN));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ichnos_perf::attr::sample;

    fn exit_record(time: u64) -> Vec<u8> {
        let mut r = vec![4, 0, 0, 0, 0, 0, 32, 0];
        for v in [1u32, 1, 2, 1] {
            r.extend_from_slice(&v.to_le_bytes());
        }
        r.extend_from_slice(&time.to_le_bytes());
        r
    }

    fn time_only() -> SampleFormat {
        SampleFormat {
            sample_type: sample::TIME,
            ..SampleFormat::default()
        }
    }

    #[test]
    fn records_stay_put_while_they_wait_and_blocks_are_reused() {
        let mut s = Sorter::new(vec![time_only()]);
        let record_len = exit_record(0).len();
        let per_block = BLOCK_BYTES / record_len + 1;
        let mut seen = Vec::new();
        // Rounds of records, each round's newest held back one round:
        // the blocks in use stay few however many records pass.
        let mut t = 0;
        for _ in 0..20 {
            for _ in 0..per_block {
                t += 1;
                assert_eq!(s.stage_record(&exit_record(t), 0, 0, |_| None), Some(2));
            }
            s.release(t - 10, |r, _| seen.push(r.time().unwrap()));
        }
        s.release(u64::MAX, |r, _| seen.push(r.time().unwrap()));
        assert_eq!(seen, (1..=t).collect::<Vec<_>>());
        assert!(s.blocks() <= 3, "{} blocks", s.blocks());
        assert!(s.is_empty());
    }

    #[test]
    fn a_samples_stack_is_staged_only_as_far_as_it_is_needed() {
        let format = SampleFormat {
            sample_type: sample::TID | sample::TIME | sample::REGS_USER | sample::STACK_USER,
            regs_user: 1 << 7,
            ..SampleFormat::default()
        };
        let mut record = vec![9, 0, 0, 0, 2, 0, 0, 0];
        for v in [7u32, 8] {
            record.extend_from_slice(&v.to_le_bytes());
        }
        let stack: Vec<u8> = (0..64).collect();
        for v in [33u64, 2, 0x7000, 64] {
            record.extend_from_slice(&v.to_le_bytes());
        }
        record.extend_from_slice(&stack);
        record.extend_from_slice(&64u64.to_le_bytes());
        let len = u16::try_from(record.len()).unwrap();
        record[6..8].copy_from_slice(&len.to_le_bytes());
        let mut s = Sorter::new(vec![format]);
        s.stage_record(&record, 0, 0, |sample| {
            assert_eq!(sample.id.tid, Some(8));
            Some(16)
        });
        s.stage_record(&record, 0, 0, |_| None);
        let mut stacks = Vec::new();
        s.release(u64::MAX, |r, staged| {
            let Record::Sample(sample) = r else {
                panic!("not a sample")
            };
            stacks.push((
                sample.stack_user.unwrap().to_vec(),
                staged.header.size,
                staged.stack_cut,
            ));
        });
        assert_eq!(stacks[0], (stack[..16].to_vec(), len - 48, true));
        assert_eq!(stacks[1], (stack, len, false));
    }

    #[test]
    fn two_rings_come_out_in_time_order_and_late_records_wait() {
        let mut s = Sorter::new(vec![time_only()]);
        for ring in [[10u64, 30, 50], [20, 40, 60]] {
            for t in ring {
                s.stage_record(&exit_record(t), 0, 0, |_| None);
            }
        }
        let mut seen = Vec::new();
        s.release(45, |r, _| seen.push(r.time().unwrap()));
        assert_eq!(seen, [10, 20, 30, 40]);
        assert_eq!(s.len(), 2);
        s.stage_record(&exit_record(55), 0, 0, |_| None);
        seen.clear();
        s.release(u64::MAX, |r, _| seen.push(r.time().unwrap()));
        assert_eq!(seen, [50, 55, 60]);
        assert!(s.is_empty());
    }
}
