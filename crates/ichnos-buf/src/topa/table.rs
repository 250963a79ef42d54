//! The region table: one logical byte stream laid over several regions.
//!
//! A [`RegionTable`] knows only the lengths of its regions, not their
//! memory. It maps between two ways of naming a byte:
//!
//! * an **absolute position**: a monotonic `u64` that counts every byte ever
//!   written, like perf's `aux_head`. Position `p` lies in lap `p / capacity`
//!   at logical offset `p % capacity`;
//! * a [`Cursor`]: (region index, byte offset within that region), the
//!   software form of the hardware's (table, entry, output offset) triple.
//!
//! Regions are laid out back to back in index order, and a region need not
//! start at a multiple of its own length (lengths `[4096, 8192]` put the
//! 8 KiB region at offset 4 KiB). Offsets are therefore always computed by
//! subtraction or division, never with a mask (the Linux driver's
//! `head & (size - 1)` is correct only for naturally aligned layouts).
//!
//! # Domain
//!
//! The capacity is at most [`MAX_CAPACITY`] (2^62) and absolute positions
//! passed in are below [`MAX_POSITION`] (2^63). Every result is then below
//! 2^63 + 2^62, so no arithmetic here can overflow. Callers that start
//! counting near zero have 2^63 bytes (centuries of tracing at 1 GB/s)
//! before they leave the domain.

/// Largest capacity (sum of region lengths) a [`RegionTable`] accepts: 2^62.
pub const MAX_CAPACITY: u64 = 1 << 62;

/// Absolute positions given to [`RegionTable`] methods must be below this
/// value (2^63) so that results such as [`RegionTable::region_end_after`]
/// stay representable.
pub const MAX_POSITION: u64 = 1 << 63;

/// One region of the logical buffer: `[start, start + len)` in logical
/// offsets within one lap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionDesc {
    /// Logical offset of the region's first byte within a lap.
    pub start: u64,
    /// Length of the region in bytes (never zero).
    pub len: u64,
}

impl RegionDesc {
    /// Logical offset one past the region's last byte within a lap.
    #[must_use]
    pub fn end(self) -> u64 {
        self.start + self.len
    }
}

/// A position as (region index, byte offset within that region).
///
/// `offset` normally lies in `0..len`; `offset == len` names the "one past
/// the end" state the hardware is left in after a STOP (SDM: `OutputOffset`
/// equals the region size), and [`RegionTable::logical`] accepts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// Index of the region.
    pub region: usize,
    /// Byte offset within the region.
    pub offset: u64,
}

/// Why a list of region lengths cannot form a [`RegionTable`].
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
#[non_exhaustive]
pub enum TableError {
    /// The list of region lengths was empty.
    #[error("a region table needs at least one region")]
    NoRegions,
    /// A region had length zero; it would make locating ambiguous.
    #[error("region {index} has length zero")]
    EmptyRegion {
        /// Index of the empty region.
        index: usize,
    },
    /// The sum of lengths up to and including this region exceeds
    /// [`MAX_CAPACITY`] (or `u64`).
    #[error("regions 0..={index} add up to more than 2^62 bytes")]
    TooLarge {
        /// Index of the first region whose length pushes the sum over.
        index: usize,
    },
}

/// The lengths of a buffer's regions, with prefix sums for locating
/// absolute positions.
///
/// Lookups are O(1) within the leading run of equally sized regions (the
/// Linux driver's `z_count` fast path: perf usually allocates one order for
/// most of the buffer) and a binary search over the prefix sums elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionTable {
    /// `starts[i]` is the logical start of region `i`; `starts[len]` is the
    /// capacity, so region `i` is `starts[i]..starts[i + 1]`.
    starts: Vec<u64>,
    /// Length shared by the leading run of equal regions (region 0's length).
    uniform_len: u64,
    /// Logical end of that run: `uniform_len * run length`.
    uniform_end: u64,
}

impl RegionTable {
    /// Builds a table from region lengths, laid out in order.
    pub fn new(lens: &[u64]) -> Result<RegionTable, TableError> {
        let Some(&first) = lens.first() else {
            return Err(TableError::NoRegions);
        };
        let mut starts = Vec::with_capacity(lens.len() + 1);
        let mut sum: u64 = 0;
        for (index, &len) in lens.iter().enumerate() {
            if len == 0 {
                return Err(TableError::EmptyRegion { index });
            }
            starts.push(sum);
            sum = sum
                .checked_add(len)
                .filter(|&s| s <= MAX_CAPACITY)
                .ok_or(TableError::TooLarge { index })?;
        }
        starts.push(sum);
        let run = lens.iter().take_while(|&&len| len == first).count() as u64;
        Ok(RegionTable {
            starts,
            uniform_len: first,
            uniform_end: first * run,
        })
    }

    /// Number of regions (at least one).
    #[must_use]
    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// Always `false`: a table has at least one region.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sum of all region lengths: the number of bytes in one lap.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.starts[self.len()]
    }

    /// The region at `idx`.
    ///
    /// # Panics
    ///
    /// If `idx >= self.len()`.
    #[must_use]
    pub fn region(&self, idx: usize) -> RegionDesc {
        assert!(
            idx < self.len(),
            "region index {idx} out of range for a table of {} regions",
            self.len()
        );
        RegionDesc {
            start: self.starts[idx],
            len: self.starts[idx + 1] - self.starts[idx],
        }
    }

    /// All regions in logical order.
    pub fn regions(&self) -> impl Iterator<Item = RegionDesc> + '_ {
        self.starts.windows(2).map(|w| RegionDesc {
            start: w[0],
            len: w[1] - w[0],
        })
    }

    /// The lap an absolute position falls in: `pos / capacity`.
    #[must_use]
    pub fn lap(&self, pos: u64) -> u64 {
        pos / self.capacity()
    }

    /// The region and in-region offset of absolute position `pos`, taken
    /// modulo the capacity (the `pt_topa_entry_for_page` analogue).
    ///
    /// O(1) inside the leading run of equal regions, otherwise a binary
    /// search. Works for every `u64`.
    #[must_use]
    pub fn locate(&self, pos: u64) -> Cursor {
        let r = pos % self.capacity();
        if r < self.uniform_end {
            // Division, not a mask: the uniform length need not be a power
            // of two.
            let region = r / self.uniform_len;
            return Cursor {
                region: region as usize,
                offset: r - region * self.uniform_len,
            };
        }
        // `starts[0] == 0 <= r`, so at least one start qualifies and the
        // subtraction cannot underflow; `r < capacity == starts[len]`, so
        // the sentinel never qualifies.
        let region = self.starts.partition_point(|&s| s <= r) - 1;
        Cursor {
            region,
            offset: r - self.starts[region],
        }
    }

    /// The inverse of [`locate`](Self::locate): `lap * capacity + region
    /// start + offset` (the `pt_update_head` analogue).
    ///
    /// The result must stay below 2^64; within the documented domain
    /// (`lap * capacity < 2^63`) it always does.
    ///
    /// # Panics
    ///
    /// If `c.region` is out of range or `c.offset` exceeds the region's
    /// length (`offset == len` is accepted, see [`Cursor`]).
    #[must_use]
    pub fn logical(&self, c: Cursor, lap: u64) -> u64 {
        let region = self.region(c.region);
        assert!(
            c.offset <= region.len,
            "offset {} beyond the end of region {} (length {})",
            c.offset,
            c.region,
            region.len
        );
        lap * self.capacity() + region.start + c.offset
    }

    /// The largest absolute region boundary `<= pos`.
    ///
    /// A boundary is any `lap * capacity + region start`; `lap * capacity`
    /// itself (the start of region 0) counts. Works for every `u64`.
    #[must_use]
    pub fn region_end_at_or_before(&self, pos: u64) -> u64 {
        let c = self.locate(pos);
        pos - c.offset
    }

    /// The smallest absolute region boundary `> pos`.
    ///
    /// `pos` must be below [`MAX_POSITION`] so that the result fits.
    #[must_use]
    pub fn region_end_after(&self, pos: u64) -> u64 {
        debug_assert!(pos < MAX_POSITION, "position {pos} outside the domain");
        let c = self.locate(pos);
        let len = self.starts[c.region + 1] - self.starts[c.region];
        pos - c.offset + len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_fast_path_and_tail_agree() {
        // Three 4K regions (fast path), then 8K and 12K (binary search).
        let t = RegionTable::new(&[4096, 4096, 4096, 8192, 12288]).unwrap();
        assert_eq!(t.uniform_end, 3 * 4096);
        assert_eq!(
            t.locate(4096 * 2 + 5),
            Cursor {
                region: 2,
                offset: 5
            }
        );
        assert_eq!(
            t.locate(4096 * 3),
            Cursor {
                region: 3,
                offset: 0
            }
        );
        assert_eq!(
            t.locate(4096 * 5 + 1),
            Cursor {
                region: 4,
                offset: 1
            }
        );
        assert_eq!(
            t.locate(t.capacity() + 1),
            Cursor {
                region: 0,
                offset: 1
            }
        );
    }

    #[test]
    fn unaligned_region_is_not_masked() {
        // The 8K region starts at 4K: a mask would give offset 4096 + 1.
        let t = RegionTable::new(&[4096, 8192]).unwrap();
        assert_eq!(
            t.locate(4097),
            Cursor {
                region: 1,
                offset: 1
            }
        );
        assert_eq!(
            t.locate(8193),
            Cursor {
                region: 1,
                offset: 4097
            }
        );
    }

    #[test]
    fn constructor_errors() {
        assert_eq!(RegionTable::new(&[]), Err(TableError::NoRegions));
        assert_eq!(
            RegionTable::new(&[1, 0, 2]),
            Err(TableError::EmptyRegion { index: 1 })
        );
        assert_eq!(
            RegionTable::new(&[MAX_CAPACITY, 1]),
            Err(TableError::TooLarge { index: 1 })
        );
        assert_eq!(
            RegionTable::new(&[u64::MAX, u64::MAX]),
            Err(TableError::TooLarge { index: 0 })
        );
        assert!(RegionTable::new(&[MAX_CAPACITY]).is_ok());
    }
}
