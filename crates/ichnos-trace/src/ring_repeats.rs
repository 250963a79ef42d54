//! The events of a thread's flight-recorder rings that an earlier save of
//! the same ring holds already. A ring saved twice (a snapshot, then the
//! exit) repeats what it held the first time, less what was overwritten
//! since; a reader takes each event once, and the recorder counts each
//! once, by the same rule: per thread, the newest event time taken so
//! far, and how many events taken carry it (a coarse clock gives several
//! events one time: those past the ones taken are new). Events older than
//! it, or at it and among those, are repeats. A block that goes on from
//! the one before (a ring of more events than one block holds) is the same
//! save, read on as it was.

/// What a thread's ring blocks taken so far hold.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RingSeen {
    /// The newest event time taken.
    newest: Option<u64>,
    /// How many events taken carry it.
    at_newest: usize,
    /// How the last block was being read, for one that goes on from it.
    save: Option<SaveRead>,
}

/// How one save's events are told new: against what the saves before it
/// held.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SaveRead {
    /// The newest event time taken before this save.
    seen: Option<u64>,
    /// Of the events at that time, those still to skip.
    repeated_at_seen: usize,
}

impl RingSeen {
    /// At the start of a ring block (`continued`: it goes on from the
    /// block before): how its events are told new.
    pub(crate) fn begin(&mut self, continued: bool) -> SaveRead {
        let read_on = self.save.take();
        if continued {
            if let Some(read) = read_on {
                return read;
            }
        }
        SaveRead {
            seen: self.newest,
            repeated_at_seen: if self.newest.is_some() {
                self.at_newest
            } else {
                0
            },
        }
    }

    /// After a ring block read as `read`.
    pub(crate) fn end(&mut self, read: SaveRead) {
        self.save = Some(read);
    }

    /// After a block that is not a ring's.
    pub(crate) fn not_a_ring(&mut self) {
        self.save = None;
    }

    /// The newest event time taken, if any.
    pub(crate) fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// Whether the block's next event, at `ticks`, is new (and taken).
    pub(crate) fn take(&mut self, read: &mut SaveRead, ticks: u64) -> bool {
        if let Some(s) = read.seen {
            if ticks < s {
                return false;
            }
            if ticks == s && read.repeated_at_seen > 0 {
                read.repeated_at_seen -= 1;
                return false;
            }
        }
        match self.newest {
            Some(n) if n == ticks => self.at_newest += 1,
            Some(n) if n > ticks => {}
            _ => {
                self.newest = Some(ticks);
                self.at_newest = 1;
            }
        }
        true
    }
}
