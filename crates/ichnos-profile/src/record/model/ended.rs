//! The unwind rows of processes that ended, kept a while.
//!
//! Rows are made once per build id and shared by every process that maps
//! the file, but only while one does: the library's cache does not keep
//! them alive. A build runs one compiler after another, each mapping the
//! same large libraries (rustc's `librustc_driver` has 6 MB of
//! `.eh_frame`), and each would have them converted again, on the
//! recorder's thread, while the kernel's rings fill. So the rows of a
//! process that ends are kept for [`KEEP_NS`] after it: a process that
//! starts meanwhile finds them made. This holds no more than the ended
//! processes held while they ran, and for two seconds.

use std::collections::VecDeque;
use std::sync::Arc;

use ichnos_code::{CodeObject, RowSource, Rows};

/// How long the rows of an ended process are kept.
pub(super) const KEEP_NS: u64 = 2_000_000_000;

/// Row sets kept at most.
pub(super) const MAX_KEPT: usize = 256;

/// Rows of ended processes, oldest first, each with when its last
/// process ended.
#[derive(Debug, Default)]
pub(crate) struct EndedRows {
    kept: VecDeque<(u64, Rows)>,
}

impl EndedRows {
    /// A process whose code was `objects` ended at `time`: their rows
    /// (those of files; a JIT's go with it) are kept from now.
    pub fn keep<'a>(&mut self, objects: impl Iterator<Item = &'a Arc<CodeObject>>, time: u64) {
        self.expire(time);
        for object in objects {
            if object.source == RowSource::Jit || matches!(object.rows, Rows::Jit(_)) {
                continue;
            }
            if let Some(at) = self.kept.iter().position(|(_, r)| r.same(&object.rows)) {
                self.kept.remove(at);
            } else if self.kept.len() >= MAX_KEPT {
                self.kept.pop_front();
            }
            self.kept.push_back((time, object.rows.clone()));
        }
    }

    /// Lets go of rows kept since before `time` less [`KEEP_NS`].
    pub fn expire(&mut self, time: u64) {
        while self
            .kept
            .front()
            .is_some_and(|(ended, _)| ended.saturating_add(KEEP_NS) < time)
        {
            self.kept.pop_front();
        }
    }

    /// Row sets kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ichnos_code::RowTable;

    fn object(rows: Rows, source: RowSource) -> Arc<CodeObject> {
        Arc::new(CodeObject {
            start: 0x1000,
            end: 0x2000,
            bias: 0,
            rows,
            source,
            name: Arc::from("x"),
        })
    }

    #[test]
    fn rows_of_an_ended_process_live_on_for_a_while_then_go() {
        let table = Arc::new(RowTable::new(0));
        let weak = Arc::downgrade(&table);
        let libc = object(Rows::Fixed(table), RowSource::EhFrame);
        let mut ended = EndedRows::default();
        ended.keep([&libc].into_iter(), 1_000);
        // The process's code goes: the rows stay.
        drop(libc);
        assert!(weak.upgrade().is_some());
        // Another process with the same rows ends later: kept once, from
        // then.
        let again = object(Rows::Fixed(weak.upgrade().unwrap()), RowSource::EhFrame);
        ended.keep([&again].into_iter(), 1_500_000_000);
        drop(again);
        assert_eq!(ended.len(), 1);
        ended.expire(1_000 + KEEP_NS + 1);
        assert!(weak.upgrade().is_some(), "kept from the second end");
        ended.expire(1_500_000_000 + KEEP_NS + 1);
        assert_eq!(ended.len(), 0);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn jit_rows_are_not_kept_and_at_most_so_many_sets_are() {
        let mut ended = EndedRows::default();
        let jit = object(Rows::Fixed(Arc::new(RowTable::new(0))), RowSource::Jit);
        ended.keep([&jit].into_iter(), 0);
        assert_eq!(ended.len(), 0);
        let many: Vec<_> = (0..MAX_KEPT + 3)
            .map(|_| object(Rows::Fixed(Arc::new(RowTable::new(0))), RowSource::EhFrame))
            .collect();
        let first = match &many[0].rows {
            Rows::Fixed(t) => Arc::downgrade(t),
            _ => unreachable!(),
        };
        ended.keep(many.iter(), 0);
        drop(many);
        assert_eq!(ended.len(), MAX_KEPT);
        // The oldest went first.
        assert!(first.upgrade().is_none());
    }
}
