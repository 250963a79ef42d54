//! Records of a perf.data file put back in time order, as perf does it.
//!
//! perf writes each CPU's ring in time order, one ring after another,
//! and a `FINISHED_ROUND` record after each pass over the rings. No
//! record of a round is older than the newest of the round before the
//! last, so at each round's end everything up to the newest time of the
//! round before is in hand and can be handed on, in order (perf's
//! `ordered_events`, and the `linux-perf-data` crate's sorter). A file
//! without rounds is sorted whole at its end.
//!
//! Only where each record lies is kept (a few words per record), never
//! its bytes: the records are read where they lie, in the mapped file.

/// How records sort: by time (a record without one first), then by where
/// it lies in the file.
pub(super) type Key = (Option<u64>, u64);

/// One record waiting for its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pending {
    /// Its time, and its offset in the data section.
    pub key: Key,
    /// Its length in bytes, header included.
    pub len: u32,
    /// The index of the attr (event) it belongs to.
    pub attr: u32,
}

impl Pending {
    /// Where the record starts in the data section.
    pub fn offset(&self) -> u64 {
        self.key.1
    }
}

/// Records taken in file order, handed on in time order round by round.
#[derive(Debug, Default)]
pub(super) struct Rounds {
    /// Records not yet handed on, in file order.
    incoming: Vec<Pending>,
    /// The newest key of the rounds before the current one.
    prev_max: Key,
    /// The newest key so far.
    cur_max: Key,
    /// How many of `incoming` sort at or below `prev_max`.
    at_or_below_prev: usize,
}

impl Rounds {
    /// Takes one record, in file order.
    pub fn insert(&mut self, record: Pending) {
        if record.key <= self.prev_max {
            self.at_or_below_prev += 1;
        } else if record.key > self.cur_max {
            self.cur_max = record.key;
        }
        self.incoming.push(record);
    }

    /// Ends a round: hands `f` every record no later round can come
    /// before, oldest first, each with those handed on after it in this
    /// batch (which a reader may fetch ahead).
    pub fn finish_round(&mut self, mut f: impl FnMut(&Pending, &[Pending])) {
        let ready = self.at_or_below_prev;
        if ready > 0 {
            self.incoming
                .select_nth_unstable_by_key(ready - 1, |p| p.key);
            self.incoming[..ready].sort_unstable_by_key(|p| p.key);
            each_with_rest(&self.incoming[..ready], &mut f);
            self.incoming.drain(..ready);
        }
        self.prev_max = self.cur_max;
        self.at_or_below_prev = self.incoming.len();
    }

    /// Ends the file: hands `f` every record left, oldest first, as
    /// [`Rounds::finish_round`] does.
    pub fn finish(&mut self, mut f: impl FnMut(&Pending, &[Pending])) {
        self.incoming.sort_unstable_by_key(|p| p.key);
        each_with_rest(&self.incoming, &mut f);
        self.incoming.clear();
        self.prev_max = self.cur_max;
        self.at_or_below_prev = 0;
    }

    /// Where the earliest record still waiting lies, if any: the file
    /// before it will not be read again.
    pub fn first_waiting(&self) -> Option<u64> {
        self.incoming.iter().map(Pending::offset).min()
    }
}

/// Calls `f` on each record of `batch` with those after it.
fn each_with_rest(batch: &[Pending], f: &mut impl FnMut(&Pending, &[Pending])) {
    for (i, p) in batch.iter().enumerate() {
        f(p, &batch[i + 1..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time: u64, offset: u64) -> Pending {
        Pending {
            key: (Some(time), offset),
            len: 8,
            attr: 0,
        }
    }

    /// perf's own example (tools/perf/util/session.c, the comment on
    /// `process_finished_round`): two CPUs, three passes.
    #[test]
    fn rounds_hand_on_what_later_rounds_cannot_precede() {
        let mut rounds = Rounds::default();
        let mut out = Vec::new();
        let mut offset = 0;
        let mut pass = |rounds: &mut Rounds, times: &[u64]| {
            for &t in times {
                offset += 8;
                rounds.insert(at(t, offset));
            }
        };
        pass(&mut rounds, &[1, 2, 3, 2, 4]);
        rounds.finish_round(|p, _| out.push(p.key.0.unwrap()));
        assert!(out.is_empty());
        pass(&mut rounds, &[3, 5, 6, 7, 4, 5]);
        // Each record comes with those after it in its batch.
        let mut rests = Vec::new();
        rounds.finish_round(|p, rest| {
            out.push(p.key.0.unwrap());
            rests.push(rest.iter().map(|r| r.key.0.unwrap()).collect::<Vec<_>>());
        });
        // Up to the first pass's newest record, the 4 at its end: the
        // second pass's 4 lies later in the file, and equal times keep
        // file order, so it waits.
        assert_eq!(out, [1, 2, 2, 3, 3, 4]);
        assert_eq!(rests[0], [2, 2, 3, 3, 4]);
        assert_eq!(rests[4], [4]);
        assert!(rests[5].is_empty());
        assert_eq!(rounds.first_waiting(), Some(8 * 7));
        pass(&mut rounds, &[6, 8, 9, 7, 10]);
        rounds.finish_round(|p, _| out.push(p.key.0.unwrap()));
        assert_eq!(out[6..], [4, 5, 5, 6, 6, 7]);
        rounds.finish(|p, _| out.push(p.key.0.unwrap()));
        assert_eq!(out[12..], [7, 8, 9, 10]);
        assert_eq!(rounds.first_waiting(), None);
    }

    proptest::proptest! {
        /// Whatever the rounds, every record comes out once, and in
        /// order when the file keeps perf's promise (no record older
        /// than the newest of the round before the last).
        #[test]
        fn every_record_comes_out_in_order(
            rounds_of in proptest::collection::vec(
                proptest::collection::vec(0u64..50, 0..20), 0..12),
        ) {
            let mut rounds = Rounds::default();
            let mut out = Vec::new();
            let (mut offset, mut all) = (0, Vec::new());
            // The newest time after each round.
            let mut newest: Vec<u64> = Vec::new();
            for (r, times) in rounds_of.iter().enumerate() {
                // No time older than the newest before the round before
                // this one: perf's promise.
                let base = r.checked_sub(2).map_or(0, |r| newest[r]);
                for &t in times {
                    offset += 8;
                    rounds.insert(at(base + t, offset));
                    all.push((base + t, offset));
                }
                rounds.finish_round(|p, _| out.push((p.key.0.unwrap(), p.key.1)));
                let so_far = newest.last().copied().unwrap_or(0);
                newest.push(times.iter().map(|t| base + t).fold(so_far, u64::max));
            }
            rounds.finish(|p, _| out.push((p.key.0.unwrap(), p.key.1)));
            all.sort_unstable();
            proptest::prop_assert_eq!(out, all);
        }
    }
}
