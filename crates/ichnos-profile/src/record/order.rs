//! Records from several kernel rings, put back in time order.
//!
//! Each CPU's ring is in time order, but a process's mapping can land in
//! one ring and its thread's next sample in another, read first. Records
//! are gathered from every ring, and handed on in time order only once no
//! ring can still hold an older one: the kernel writes a record within
//! moments of its timestamp, so everything older than the start of the
//! current read, minus a margin, is in hand. Staging memory is reused
//! from round to round: nothing is allocated per record once it has grown.

use ichnos_perf::record::{parse, Record, RecordHeader, Records, SampleFormat, HEADER_LEN};

/// How far behind the start of a read a record must be to be handed on:
/// the kernel writes records within microseconds of their timestamps;
/// this leaves room for a writer preempted in between.
pub const MARGIN_NS: u64 = 10_000_000;

#[derive(Clone, Copy, Debug)]
struct Entry {
    time: u64,
    /// Order of arrival, to keep equal times in ring order.
    seq: u64,
    start: usize,
    len: usize,
    format: u16,
}

/// Staged records waiting for their turn.
#[derive(Debug, Default)]
pub struct Sorter {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    kept_bytes: Vec<u8>,
    kept_entries: Vec<Entry>,
    seq: u64,
    formats: Vec<SampleFormat>,
    /// Records whose framing was broken (dropped with the rest of their
    /// read).
    pub broken: u64,
}

impl Sorter {
    /// A sorter for records of events with these formats (index = the
    /// `format` argument of [`Sorter::stage`]).
    #[must_use]
    pub fn new(formats: Vec<SampleFormat>) -> Self {
        Self {
            formats,
            ..Self::default()
        }
    }

    /// The staging buffer to read a ring into; call [`Sorter::stage`]
    /// with its length before and after.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Indexes the records appended to the buffer since `from` (its
    /// length before the ring was read), of events with format `format`.
    /// A record without a timestamp sorts at `now`.
    pub fn stage(&mut self, from: usize, format: u16, now: u64) {
        let Some(f) = self.formats.get(usize::from(format)).copied() else {
            self.bytes.truncate(from);
            return;
        };
        for r in Records::new(&self.bytes[from..]) {
            let Ok((offset, _, bytes)) = r else {
                self.broken += 1;
                break;
            };
            let time = parse(&f, bytes).ok().and_then(|r| r.time()).unwrap_or(now);
            self.seq += 1;
            self.entries.push(Entry {
                time,
                seq: self.seq,
                start: from + offset,
                len: bytes.len(),
                format,
            });
        }
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

    /// Hands every staged record with a time at or below `up_to` to `f`,
    /// oldest first, parsed; keeps the rest for a later round.
    pub fn release(&mut self, up_to: u64, mut f: impl FnMut(&Record<'_>, RecordHeader)) {
        self.entries.sort_unstable_by_key(|e| (e.time, e.seq));
        let cut = self.entries.partition_point(|e| e.time <= up_to);
        for e in &self.entries[..cut] {
            let bytes = &self.bytes[e.start..e.start + e.len];
            let (Some(format), Some(header)) = (
                self.formats.get(usize::from(e.format)),
                RecordHeader::read(bytes),
            ) else {
                continue;
            };
            if let Ok(record) = parse(format, bytes) {
                f(&record, header);
            }
        }
        // Keep what is left, compacted, in arrival order.
        self.kept_bytes.clear();
        self.kept_entries.clear();
        for e in &self.entries[cut..] {
            let start = self.kept_bytes.len();
            self.kept_bytes
                .extend_from_slice(&self.bytes[e.start..e.start + e.len]);
            self.kept_entries.push(Entry { start, ..*e });
        }
        std::mem::swap(&mut self.bytes, &mut self.kept_bytes);
        std::mem::swap(&mut self.entries, &mut self.kept_entries);
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

    #[test]
    fn two_rings_come_out_in_time_order_and_late_records_wait() {
        let format = SampleFormat {
            sample_type: sample::TIME,
            ..SampleFormat::default()
        };
        let mut s = Sorter::new(vec![format]);
        for ring in [[10u64, 30, 50], [20, 40, 60]] {
            let from = s.buffer().len();
            for t in ring {
                let r = exit_record(t);
                s.buffer().extend_from_slice(&r);
            }
            s.stage(from, 0, 0);
        }
        let mut seen = Vec::new();
        s.release(45, |r, _| seen.push(r.time().unwrap()));
        assert_eq!(seen, [10, 20, 30, 40]);
        assert_eq!(s.len(), 2);
        let from = s.buffer().len();
        let r = exit_record(55);
        s.buffer().extend_from_slice(&r);
        s.stage(from, 0, 0);
        seen.clear();
        s.release(u64::MAX, |r, _| seen.push(r.time().unwrap()));
        assert_eq!(seen, [50, 55, 60]);
        assert!(s.is_empty());
    }
}
