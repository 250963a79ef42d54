//! Code objects by address: which rows unwind a given instruction address.

use std::sync::Arc;

use crate::cfi::{CfiError, CfiStep};
use crate::jit::JitRows;
use crate::lazy::LazyRows;
use crate::row::{RowTable, UnwindRow};
use crate::unwind::Regs;

/// Where a code object's rows came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowSource {
    /// An SFrame section.
    Sframe,
    /// `.eh_frame` CFI, converted.
    EhFrame,
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

/// A sorted set of non-overlapping code objects.
#[derive(Debug)]
pub struct CodeMap {
    objects: Vec<Arc<CodeObject>>,
    /// `objects[i].start`, searched without touching the objects.
    starts: Vec<u64>,
    generation: u64,
}

impl Default for CodeMap {
    fn default() -> Self {
        Self {
            objects: Vec::new(),
            starts: Vec::new(),
            generation: next_generation(),
        }
    }
}

impl Clone for CodeMap {
    /// A copy with a generation of its own: it will be changed.
    fn clone(&self) -> Self {
        Self {
            objects: self.objects.clone(),
            starts: self.starts.clone(),
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
    #[must_use]
    pub fn objects(&self) -> &[Arc<CodeObject>] {
        &self.objects
    }

    /// Checks that `[start, end)` overlaps no object in the map.
    pub fn check_free(&self, start: u64, end: u64) -> Result<usize, Overlap> {
        let i = self.objects.partition_point(|o| o.start < start);
        let clash = |o: &CodeObject| Overlap {
            start,
            end,
            other_start: o.start,
            other_end: o.end,
        };
        if let Some(prev) = i.checked_sub(1).map(|j| &self.objects[j]) {
            if prev.end > start {
                return Err(clash(prev));
            }
        }
        if let Some(next) = self.objects.get(i) {
            if next.start < end {
                return Err(clash(next));
            }
        }
        Ok(i)
    }

    /// Adds `object`; its range must not overlap another.
    pub fn insert(&mut self, object: Arc<CodeObject>) -> Result<(), Overlap> {
        let i = self.check_free(object.start, object.end)?;
        self.starts.insert(i, object.start);
        self.objects.insert(i, object);
        self.generation = next_generation();
        Ok(())
    }

    /// Removes the object starting at `start`.
    pub fn remove(&mut self, start: u64) -> Option<Arc<CodeObject>> {
        let i = self.starts.binary_search(&start).ok()?;
        self.starts.remove(i);
        self.generation = next_generation();
        Some(self.objects.remove(i))
    }

    /// The object containing `pc`.
    #[inline]
    #[must_use]
    pub fn find(&self, pc: u64) -> Option<&Arc<CodeObject>> {
        let i = self.starts.partition_point(|&s| s <= pc);
        let o = self.objects.get(i.checked_sub(1)?)?;
        (pc < o.end).then_some(o)
    }
}

impl FindRow for CodeMap {
    #[inline]
    fn find_row(&self, pc: u64) -> Lookup {
        match self.find(pc) {
            None => Lookup::NoCode,
            Some(o) => match o.find_row(pc) {
                Some(row) => Lookup::Row(row, o.source),
                None => Lookup::NoRow,
            },
        }
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
            }
        }
    }
}
