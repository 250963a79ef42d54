//! Code objects by address: which rows unwind a given instruction address.

use std::sync::Arc;

use crate::cfi::{CfiError, CfiStep};
use crate::jit::JitRows;
use crate::lazy::LazyRows;
use crate::row::{RowTable, UnwindRow};
use crate::unwind::Regs;

/// Where a code object's rows came from: its main source. (A file's rows
/// may come from two: `.eh_frame` fills the gaps of SFrame, which answers
/// first and is named; `.debug_frame` or Go's function table fills those
/// of `.eh_frame`, and the one of the two that describes more of the file
/// is named.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowSource {
    /// An SFrame section.
    Sframe,
    /// `.eh_frame` CFI, converted.
    EhFrame,
    /// `.debug_frame` CFI, converted (with the file's `.eh_frame` first
    /// where it has rows): Go's linker writes its CFI only there, as gcc
    /// does for C built without asynchronous unwind tables.
    DebugFrame,
    /// The stack-pointer tables of a Go program's function table
    /// (`.gopclntab`), in a Go program stripped of `.debug_frame`.
    GoTable,
    /// A JIT unwind table.
    Jit,
    /// No rows: the frame-pointer chain only.
    None,
}

/// The rows of a code object: fixed, made on demand, or a JIT table that
/// grows.
#[derive(Clone, Debug)]
pub enum Rows {
    /// Rows converted once (SFrame, `.eh_frame`), shared per build id.
    Fixed(Arc<RowTable>),
    /// `.eh_frame` converted FDE by FDE as lookups need it, shared per
    /// build id.
    Lazy(Arc<LazyRows>),
    /// A JIT table chain, re-read when an address is not yet covered.
    Jit(Arc<JitRows>),
}

impl Rows {
    /// Whether two are the same rows (one conversion shared).
    #[must_use]
    pub fn same(&self, other: &Rows) -> bool {
        match (self, other) {
            (Rows::Fixed(a), Rows::Fixed(b)) => Arc::ptr_eq(a, b),
            (Rows::Lazy(a), Rows::Lazy(b)) => Arc::ptr_eq(a, b),
            (Rows::Jit(a), Rows::Jit(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A range of code and how to unwind it.
#[derive(Clone, Debug)]
pub struct CodeObject {
    /// First address of the code.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Added to the table's addresses to get run-time addresses (the load
    /// address of the ELF file; 0 for JIT tables, which count from their
    /// text start).
    pub bias: u64,
    /// The rows.
    pub rows: Rows,
    /// Where they came from.
    pub source: RowSource,
    /// A name for people: the file path or "jit".
    pub name: Arc<str>,
}

impl CodeObject {
    /// The row for `pc` and the run-time address where the row's range
    /// starts.
    #[must_use]
    pub fn find_row_at(&self, pc: u64) -> Option<(u64, UnwindRow)> {
        match &self.rows {
            Rows::Fixed(table) => {
                let row = *table.find(pc.wrapping_sub(self.bias))?;
                let start = self
                    .bias
                    .wrapping_add(table.base())
                    .wrapping_add(u64::from(row.ip_off));
                Some((start, row))
            }
            Rows::Lazy(lazy) => {
                let (start, row) = lazy.find_at(pc.wrapping_sub(self.bias))?;
                Some((self.bias.wrapping_add(start), row))
            }
            Rows::Jit(jit) => {
                let row = jit.find(pc)?;
                Some((self.start + u64::from(row.ip_off), row))
            }
        }
    }

    /// The row for `pc`, if the object has one.
    #[inline]
    #[must_use]
    pub fn find_row(&self, pc: u64) -> Option<UnwindRow> {
        match &self.rows {
            Rows::Fixed(table) => table.find(pc.wrapping_sub(self.bias)).copied(),
            Rows::Lazy(lazy) => lazy.find(pc.wrapping_sub(self.bias)),
            Rows::Jit(jit) => jit.find(pc),
        }
    }

    /// Evaluates the call-frame information kept for `pc` (where the row
    /// is unexpressible), for a frame with registers `regs`; `None` when
    /// the object keeps none (JIT tables, SFrame, files whose every rule
    /// is a row).
    pub fn evaluate_cfi(
        &self,
        pc: u64,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Result<CfiStep, CfiError>> {
        match &self.rows {
            Rows::Fixed(table) => {
                table.evaluate_cfi(pc.wrapping_sub(self.bias), self.bias, regs, read)
            }
            Rows::Lazy(lazy) => {
                Some(lazy.evaluate_cfi(pc.wrapping_sub(self.bias), self.bias, regs, read))
            }
            Rows::Jit(_) => None,
        }
    }
}

/// What the unwinder learns about one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A row, and its source.
    Row(UnwindRow, RowSource),
    /// The address is in a known code object without a row for it.
    NoRow,
    /// The address is in no known code object.
    NoCode,
}

impl Lookup {
    /// What `object` (the code object found holding `pc`, if any) says
    /// of `pc`.
    #[inline]
    #[must_use]
    pub fn in_object(object: Option<&CodeObject>, pc: u64) -> Lookup {
        match object {
            None => Lookup::NoCode,
            Some(o) => match o.find_row(pc) {
                Some(row) => Lookup::Row(row, o.source),
                None => Lookup::NoRow,
            },
        }
    }
}

/// Anything that can say how to unwind from an address.
pub trait FindRow {
    /// The rule at `pc`.
    fn find_row(&self, pc: u64) -> Lookup;

    /// A number that changes whenever an answer of [`Self::find_row`] other
    /// than "not yet" could change, so that an [`UnwindCache`] can keep
    /// answers; `None` (the default) when answers must not be cached.
    ///
    /// [`UnwindCache`]: crate::unwind::UnwindCache
    fn generation(&self) -> Option<u64> {
        None
    }

    /// Evaluates the call-frame information at `pc`, where [`Self::find_row`]
    /// found an unexpressible row, for a frame with registers `regs`
    /// (`read` loads a word of the program's memory). `None` (the default)
    /// when no CFI is kept for `pc`.
    fn evaluate_cfi(
        &self,
        pc: u64,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Result<CfiStep, CfiError>> {
        let _ = (pc, regs, read);
        None
    }
}

/// Objects a chunk of a [`CodeMap`] holds before it splits in two (small
/// in unit tests, so that they split and empty).
const CHUNK: usize = if cfg!(test) { 4 } else { 256 };

/// A run of objects sorted by start, shared between copies of a map
/// until one of them changes it.
#[derive(Clone, Debug, Default)]
struct Chunk {
    /// `objects[i].start`, searched without touching the objects.
    starts: Vec<u64>,
    objects: Vec<Arc<CodeObject>>,
}

/// A sorted set of non-overlapping code objects.
///
/// Objects are kept in chunks of up to `2 × 256`, each behind an `Arc`:
/// a copy (every registration makes one, for readers of the old map to
/// keep) shares the chunks and copies only their list, and a change
/// copies only the chunk it touches, so registering the n-th object costs
/// about n / 256 + 512 pointer copies rather than n. A lookup is one
/// binary search over the chunks' first starts and one within a chunk.
#[derive(Debug)]
pub struct CodeMap {
    chunks: Vec<Arc<Chunk>>,
    /// `chunks[i].starts[0]`.
    firsts: Vec<u64>,
    len: usize,
    generation: u64,
}

impl Default for CodeMap {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            firsts: Vec::new(),
            len: 0,
            generation: next_generation(),
        }
    }
}

impl Clone for CodeMap {
    /// A copy with a generation of its own: it will be changed.
    fn clone(&self) -> Self {
        Self {
            chunks: self.chunks.clone(),
            firsts: self.firsts.clone(),
            len: self.len,
            generation: next_generation(),
        }
    }
}

fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A code object overlapping one already in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("code range [{start:#x}, {end:#x}) overlaps a registered range [{other_start:#x}, {other_end:#x})")]
pub struct Overlap {
    /// The new range.
    pub start: u64,
    /// Its end.
    pub end: u64,
    /// The existing range.
    pub other_start: u64,
    /// Its end.
    pub other_end: u64,
}

impl CodeMap {
    /// An empty map.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The objects, sorted by start.
    pub fn objects(&self) -> impl Iterator<Item = &Arc<CodeObject>> + '_ {
        self.chunks.iter().flat_map(|c| c.objects.iter())
    }

    /// How many objects the map holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where an object starting at `start` goes: its chunk, and its index
    /// in it (the first chunk for a start before every object).
    fn slot(&self, start: u64) -> (usize, usize) {
        let c = self
            .firsts
            .partition_point(|&f| f < start)
            .saturating_sub(1);
        let i = self
            .chunks
            .get(c)
            .map_or(0, |chunk| chunk.starts.partition_point(|&s| s < start));
        (c, i)
    }

    /// The object before position `(c, i)` and the one at it.
    fn around(&self, c: usize, i: usize) -> (Option<&Arc<CodeObject>>, Option<&Arc<CodeObject>>) {
        let Some(chunk) = self.chunks.get(c) else {
            return (None, None);
        };
        let before = match i.checked_sub(1) {
            Some(j) => chunk.objects.get(j),
            None => c.checked_sub(1).and_then(|p| self.chunks[p].objects.last()),
        };
        let at = chunk
            .objects
            .get(i)
            .or_else(|| self.chunks.get(c + 1).and_then(|n| n.objects.first()));
        (before, at)
    }

    /// Checks that `[start, end)` overlaps no object in the map.
    pub fn check_free(&self, start: u64, end: u64) -> Result<(), Overlap> {
        let (c, i) = self.slot(start);
        let clash = |o: &CodeObject| Overlap {
            start,
            end,
            other_start: o.start,
            other_end: o.end,
        };
        let (before, at) = self.around(c, i);
        if let Some(prev) = before.filter(|p| p.end > start) {
            return Err(clash(prev));
        }
        if let Some(next) = at.filter(|n| n.start < end) {
            return Err(clash(next));
        }
        Ok(())
    }

    /// Adds `object`; its range must not overlap another.
    pub fn insert(&mut self, object: Arc<CodeObject>) -> Result<(), Overlap> {
        self.check_free(object.start, object.end)?;
        if self.chunks.is_empty() {
            self.chunks.push(Arc::new(Chunk::default()));
            self.firsts.push(object.start);
        }
        let (c, i) = self.slot(object.start);
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        chunk.starts.insert(i, object.start);
        chunk.objects.insert(i, object);
        self.firsts[c] = chunk.starts[0];
        if chunk.objects.len() > 2 * CHUNK {
            let upper = Chunk {
                starts: chunk.starts.split_off(CHUNK),
                objects: chunk.objects.split_off(CHUNK),
            };
            self.firsts.insert(c + 1, upper.starts[0]);
            self.chunks.insert(c + 1, Arc::new(upper));
        }
        self.len += 1;
        self.generation = next_generation();
        Ok(())
    }

    /// Removes the object starting at `start`.
    pub fn remove(&mut self, start: u64) -> Option<Arc<CodeObject>> {
        let c = self
            .firsts
            .partition_point(|&f| f <= start)
            .checked_sub(1)?;
        let i = self.chunks[c].starts.binary_search(&start).ok()?;
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        chunk.starts.remove(i);
        let object = chunk.objects.remove(i);
        if chunk.objects.is_empty() {
            self.chunks.remove(c);
            self.firsts.remove(c);
        } else {
            self.firsts[c] = chunk.starts[0];
            // Chunks that shrank merge, so that the list a copy copies
            // follows how many objects there are, not how many there were.
            if c + 1 < self.chunks.len() {
                self.merge_if_small(c + 1);
            }
            self.merge_if_small(c);
        }
        self.len -= 1;
        self.generation = next_generation();
        Some(object)
    }

    /// Merges chunk `c` into the one before it when the two hold
    /// `CHUNK` objects or fewer. Checked for both neighbours of every
    /// removal, this keeps any two neighbouring chunks above `CHUNK`
    /// objects: at most `2 n / CHUNK + 1` chunks for `n` objects.
    fn merge_if_small(&mut self, c: usize) {
        let Some(p) = c.checked_sub(1) else {
            return;
        };
        if self.chunks[p].objects.len() + self.chunks[c].objects.len() > CHUNK {
            return;
        }
        let merged = self.chunks.remove(c);
        self.firsts.remove(c);
        let previous = Arc::make_mut(&mut self.chunks[p]);
        previous.starts.extend_from_slice(&merged.starts);
        previous.objects.extend(merged.objects.iter().cloned());
    }

    /// The object containing `pc`.
    #[inline]
    #[must_use]
    pub fn find(&self, pc: u64) -> Option<&Arc<CodeObject>> {
        let c = self.firsts.partition_point(|&f| f <= pc).checked_sub(1)?;
        let chunk = &self.chunks[c];
        let i = chunk.starts.partition_point(|&s| s <= pc);
        let o = chunk.objects.get(i.checked_sub(1)?)?;
        (pc < o.end).then_some(o)
    }
}

impl FindRow for CodeMap {
    #[inline]
    fn find_row(&self, pc: u64) -> Lookup {
        Lookup::in_object(self.find(pc).map(Arc::as_ref), pc)
    }

    /// Rows, once found, never change while the map is the same: fixed
    /// tables are immutable and JIT rows are only ever added.
    fn generation(&self) -> Option<u64> {
        Some(self.generation)
    }

    fn evaluate_cfi(
        &self,
        pc: u64,
        regs: Regs,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Result<CfiStep, CfiError>> {
        self.find(pc)?.evaluate_cfi(pc, regs, read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(start: u64, end: u64) -> Arc<CodeObject> {
        Arc::new(CodeObject {
            start,
            end,
            bias: 0,
            rows: Rows::Fixed(Arc::new(RowTable::new(0))),
            source: RowSource::None,
            name: Arc::from(""),
        })
    }

    proptest::proptest! {
        /// Inserts and removals against a list searched linearly.
        #[test]
        fn find_agrees_with_a_model_through_inserts_and_removals(
            ops in proptest::collection::vec((proptest::bool::ANY, 0u64..64, 1u64..4), 1..80),
            probes in proptest::collection::vec(0u64..0x50, 40),
        ) {
            let mut map = CodeMap::new();
            let mut model: Vec<(u64, u64)> = Vec::new();
            for (insert, at, len) in ops {
                let (start, end) = (at, at + len);
                if insert {
                    let free = model.iter().all(|&(s, e)| end <= s || e <= start);
                    let before = map.generation;
                    proptest::prop_assert_eq!(map.insert(object(start, end)).is_ok(), free);
                    if free {
                        model.push((start, end));
                        proptest::prop_assert_ne!(map.generation, before);
                    }
                } else {
                    let present = model.iter().position(|&(s, _)| s == start);
                    proptest::prop_assert_eq!(map.remove(start).is_some(), present.is_some());
                    if let Some(i) = present {
                        model.remove(i);
                    }
                }
                for &pc in &probes {
                    let want = model.iter().find(|&&(s, e)| s <= pc && pc < e).map(|r| r.0);
                    proptest::prop_assert_eq!(map.find(pc).map(|o| o.start), want);
                }
                // Neighbouring chunks that shrank have merged.
                for pair in map.chunks.windows(2) {
                    proptest::prop_assert!(pair[0].objects.len() + pair[1].objects.len() > CHUNK);
                }
                let mut sorted = model.clone();
                sorted.sort_unstable();
                let listed: Vec<(u64, u64)> = map.objects().map(|o| (o.start, o.end)).collect();
                proptest::prop_assert_eq!(listed, sorted);
                proptest::prop_assert_eq!(map.len(), model.len());
            }
        }
    }

    #[test]
    fn chunks_merge_as_objects_go() {
        let mut map = CodeMap::new();
        for i in 0..100 {
            map.insert(object(i * 10, i * 10 + 5)).unwrap();
        }
        let most = map.chunks.len();
        for i in (0..100).filter(|i| i % 10 != 0) {
            map.remove(i * 10).unwrap();
        }
        assert!(
            map.chunks.len() <= 2 * 10 / CHUNK + 1,
            "{} chunks for 10 objects (of {most})",
            map.chunks.len()
        );
        let starts: Vec<u64> = map.objects().map(|o| o.start).collect();
        assert_eq!(starts, (0..10).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(map.find(505).map(|o| o.start), None);
        assert_eq!(map.find(902).map(|o| o.start), Some(900));
    }

    #[test]
    fn a_copy_changed_leaves_the_original_as_it_was() {
        // Enough objects for several chunks (of 4 to 8 in tests).
        let mut map = CodeMap::new();
        for i in 0..40 {
            map.insert(object(i * 10, i * 10 + 5)).unwrap();
        }
        let mut copy = map.clone();
        copy.remove(100).unwrap();
        copy.insert(object(106, 108)).unwrap();
        copy.insert(object(1000, 1010)).unwrap();
        assert_eq!(map.find(101).map(|o| o.start), Some(100));
        assert!(map.find(107).is_none() && map.find(1005).is_none());
        assert_eq!(copy.find(107).map(|o| o.start), Some(106));
        assert!(copy.find(101).is_none());
        assert_eq!((map.len(), copy.len()), (40, 41));
        // Chunks the copy did not change are the original's own.
        let shared = map
            .chunks
            .iter()
            .filter(|c| copy.chunks.iter().any(|d| Arc::ptr_eq(c, d)))
            .count();
        assert!(
            shared + 2 >= map.chunks.len(),
            "{shared} of {}",
            map.chunks.len()
        );
    }
}
