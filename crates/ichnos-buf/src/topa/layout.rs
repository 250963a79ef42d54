//! A ToPA-compatible hardware-format view of a [`RegionTable`]: real 64-bit
//! ToPA entries split into linked tables, for hardware or VM back-ends and
//! for golden tests.
//!
//! The software buffer itself never needs this view; it keeps its markers as
//! positions ([`MarkerPlan`]). The view exists so that the same region table
//! can drive real Intel PT output, and so that the SDM's "ToPA errors" rules
//! can be checked in one place ([`TopaLayout::validate`]).
//!
//! Bit layout (Intel SDM Vol. 3C, "Table of Physical Addresses"; the same
//! positions are used by Linux's `struct topa_entry`, simple-pt and
//! WindowsIntelPT): END bit 0, INT bit 2, STOP bit 4, Size bits 9:6 (region
//! = 4 KiB << Size), Base bits `MAXPHYADDR-1:12`; bits 1, 3, 5, 10, 11 and
//! everything from MAXPHYADDR up are reserved. MAXPHYADDR is taken as 52,
//! the architectural maximum.

use std::fmt;

use super::markers::MarkerPlan;
use super::table::RegionTable;

/// MAXPHYADDR assumed for the Base field: the architectural maximum of 52
/// bits (Linux's 36-bit field truncated such addresses until 2024).
pub const MAX_PHYS_ADDR_BITS: u32 = 52;

/// Size and alignment of a ToPA table page; table bases (and therefore END
/// link targets) must be aligned to it.
pub const TABLE_ALIGN: u64 = 4096;

/// Most entries a table can hold: one 4 KiB page of 8-byte entries.
pub const MAX_ENTRIES_PER_TABLE: usize = (TABLE_ALIGN / 8) as usize;

/// Where a [`TopaRuleViolation`] was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntrySite {
    /// An entry being encoded on its own ([`TopaEntry::output`],
    /// [`TopaEntry::link`]), not yet placed in a table.
    Unplaced,
    /// Region `n` of the [`RegionTable`] (while building a layout).
    Region(usize),
    /// The base address given for table `n` (while building a layout).
    Table(usize),
    /// The entry in `slot` of table `table`.
    Slot {
        /// Table index in link order.
        table: usize,
        /// Entry index within the table.
        slot: usize,
    },
}

impl fmt::Display for EntrySite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EntrySite::Unplaced => f.write_str("entry"),
            EntrySite::Region(r) => write!(f, "region {r}"),
            EntrySite::Table(t) => write!(f, "table {t}"),
            EntrySite::Slot { table, slot } => write!(f, "table {table} slot {slot}"),
        }
    }
}

/// A rule of the ToPA format (SDM "ToPA errors") or of this layout that an
/// entry, region or table breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopaRuleViolation {
    /// A table needs at least one data entry plus the END link, and must
    /// fit in one 4 KiB page.
    #[error("{entries_per_table} entries per table: must be 2..=512")]
    BadEntriesPerTable {
        /// The value that was asked for.
        entries_per_table: usize,
    },
    /// `region_bases` does not give exactly one address per region.
    #[error("{given} region bases given for {regions} regions")]
    RegionBaseCount {
        /// Regions in the table.
        regions: usize,
        /// Addresses given.
        given: usize,
    },
    /// Fewer table addresses than tables needed.
    #[error("{needed} tables needed, {given} table bases given")]
    NotEnoughTables {
        /// Tables the layout needs.
        needed: usize,
        /// Addresses given.
        given: usize,
    },
    /// An output region's size is not a power of two in 4 KiB..=128 MiB,
    /// so no Size field encodes it.
    #[error("{at}: size {size:#x} is not a power of two in 4 KiB..=128 MiB")]
    BadRegionSize {
        /// Where.
        at: EntrySite,
        /// The size in bytes.
        size: u64,
    },
    /// An output region's base is not aligned to its size.
    #[error("{at}: output base {base:#x} is not aligned to its size {size:#x}")]
    MisalignedOutputBase {
        /// Where.
        at: EntrySite,
        /// The base address.
        base: u64,
        /// The region size.
        size: u64,
    },
    /// An address does not fit below MAXPHYADDR (2^52).
    #[error("{at}: address {base:#x} is at or above 2^52 (MAXPHYADDR)")]
    BaseAboveMaxPhyAddr {
        /// Where.
        at: EntrySite,
        /// The address.
        base: u64,
    },
    /// A table base (or END link target) is not 4 KiB aligned.
    #[error("{at}: table base {base:#x} is not 4 KiB aligned")]
    MisalignedTableBase {
        /// Where.
        at: EntrySite,
        /// The address.
        base: u64,
    },
    /// Two tables were given the same address, so links are ambiguous.
    #[error("table {table}: base {base:#x} is also used by an earlier table")]
    DuplicateTableBase {
        /// The later table.
        table: usize,
        /// The shared address.
        base: u64,
    },
    /// Reserved bits (1, 3, 5, 10, 11, or 52 and up) are set.
    #[error("{at}: reserved bits {bits:#x} set")]
    ReservedBits {
        /// Where.
        at: EntrySite,
        /// The offending bits.
        bits: u64,
    },
    /// INT or STOP is set on an END (link) entry.
    #[error("{at}: INT/STOP bits {flags:#x} set on an END entry")]
    MarkerOnEnd {
        /// Where.
        at: EntrySite,
        /// The INT and STOP bits that are set.
        flags: u64,
    },
    /// Entry 0 of a table is an END entry.
    #[error("table {table}: END in entry 0")]
    EndInFirstSlot {
        /// The table.
        table: usize,
    },
    /// An END entry links to an address that is not one of the layout's
    /// table bases.
    #[error("{at}: END links to {target:#x}, which is not a table of this layout")]
    UnknownLinkTarget {
        /// Where.
        at: EntrySite,
        /// The link target.
        target: u64,
    },
    /// An END entry links to a table of this layout, but not to the next one
    /// in order (the last table must link to the first); the hardware would
    /// then visit regions in a different order than the [`RegionTable`].
    #[error("{at}: END links to {target:#x}, expected the next table at {expected:#x}")]
    LinkOutOfOrder {
        /// Where.
        at: EntrySite,
        /// The link target.
        target: u64,
        /// The next table's base.
        expected: u64,
    },
    /// The last entry of a table is not an END link, so the hardware would
    /// run past the table.
    #[error("table {table}: last entry is not an END link")]
    MissingLink {
        /// The table.
        table: usize,
    },
    /// An END entry before the last entry of a table: the entries after it
    /// would never be used.
    #[error("{at}: END before the last entry of the table")]
    EarlyEnd {
        /// Where.
        at: EntrySite,
    },
}

impl TopaRuleViolation {
    /// The same violation, reported at `site` instead of where it was first
    /// found (used to name the region when an entry fails to encode).
    fn at(self, site: EntrySite) -> Self {
        use TopaRuleViolation as V;
        match self {
            V::BadRegionSize { size, .. } => V::BadRegionSize { at: site, size },
            V::MisalignedOutputBase { base, size, .. } => V::MisalignedOutputBase {
                at: site,
                base,
                size,
            },
            V::BaseAboveMaxPhyAddr { base, .. } => V::BaseAboveMaxPhyAddr { at: site, base },
            V::MisalignedTableBase { base, .. } => V::MisalignedTableBase { at: site, base },
            other => other,
        }
    }
}

/// One 64-bit ToPA entry: END bit 0, INT bit 2, STOP bit 4, Size bits 9:6
/// (region = 4 KiB << Size, 4 KiB..128 MiB), Base bits 12..52.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TopaEntry(pub u64);

impl TopaEntry {
    /// END: the base is the next table, not an output region.
    pub const END: u64 = 1 << 0;
    /// INT: signal a PMI when this region has been filled.
    pub const INT: u64 = 1 << 2;
    /// STOP: stop tracing when this region has been filled.
    pub const STOP: u64 = 1 << 4;
    /// Shift of the 4-bit Size field.
    pub const SIZE_SHIFT: u32 = 6;
    /// The Size field, bits 9:6.
    pub const SIZE_MASK: u64 = 0xf << Self::SIZE_SHIFT;
    /// The Base field, bits 51:12.
    pub const BASE_MASK: u64 = ((1 << MAX_PHYS_ADDR_BITS) - 1) & !(TABLE_ALIGN - 1);
    /// Reserved bits: 1, 3, 5, 10, 11, and 52..=63.
    pub const RESERVED_MASK: u64 =
        (1 << 1) | (1 << 3) | (1 << 5) | (1 << 10) | (1 << 11) | !((1 << MAX_PHYS_ADDR_BITS) - 1);
    /// Smallest output region: 4 KiB (Size = 0).
    pub const MIN_REGION: u64 = 4096;
    /// Largest output region: 128 MiB (Size = 15).
    pub const MAX_REGION: u64 = Self::MIN_REGION << 15;

    /// An output entry for a region of `size_bytes` at `base`, with no
    /// markers.
    ///
    /// `size_bytes` must be a power of two in 4 KiB..=128 MiB, `base` must
    /// be aligned to it and below 2^52.
    pub fn output(base: u64, size_bytes: u64) -> Result<TopaEntry, TopaRuleViolation> {
        let at = EntrySite::Unplaced;
        if !size_bytes.is_power_of_two()
            || !(Self::MIN_REGION..=Self::MAX_REGION).contains(&size_bytes)
        {
            return Err(TopaRuleViolation::BadRegionSize {
                at,
                size: size_bytes,
            });
        }
        if base >> MAX_PHYS_ADDR_BITS != 0 {
            return Err(TopaRuleViolation::BaseAboveMaxPhyAddr { at, base });
        }
        if !base.is_multiple_of(size_bytes) {
            return Err(TopaRuleViolation::MisalignedOutputBase {
                at,
                base,
                size: size_bytes,
            });
        }
        let order = u64::from(size_bytes.trailing_zeros() - Self::MIN_REGION.trailing_zeros());
        Ok(TopaEntry(base | (order << Self::SIZE_SHIFT)))
    }

    /// An END entry linking to the table at `next_table` (4 KiB aligned,
    /// below 2^52).
    pub fn link(next_table: u64) -> Result<TopaEntry, TopaRuleViolation> {
        let at = EntrySite::Unplaced;
        if next_table >> MAX_PHYS_ADDR_BITS != 0 {
            return Err(TopaRuleViolation::BaseAboveMaxPhyAddr {
                at,
                base: next_table,
            });
        }
        if !next_table.is_multiple_of(TABLE_ALIGN) {
            return Err(TopaRuleViolation::MisalignedTableBase {
                at,
                base: next_table,
            });
        }
        Ok(TopaEntry(next_table | Self::END))
    }

    /// Whether END is set.
    #[must_use]
    pub fn end(self) -> bool {
        self.0 & Self::END != 0
    }

    /// Whether INT is set.
    #[must_use]
    pub fn int(self) -> bool {
        self.0 & Self::INT != 0
    }

    /// Whether STOP is set.
    #[must_use]
    pub fn stop(self) -> bool {
        self.0 & Self::STOP != 0
    }

    /// The region size the Size field encodes: `4096 << Size`. Meaningless
    /// for END entries.
    #[must_use]
    pub fn size_bytes(self) -> u64 {
        Self::MIN_REGION << ((self.0 & Self::SIZE_MASK) >> Self::SIZE_SHIFT)
    }

    /// The address in the Base field (region, or next table for END).
    #[must_use]
    pub fn base(self) -> u64 {
        self.0 & Self::BASE_MASK
    }

    /// The reserved bits that are set (zero in a valid entry).
    #[must_use]
    pub fn reserved_bits(self) -> u64 {
        self.0 & Self::RESERVED_MASK
    }

    /// The entry with INT set or cleared.
    #[must_use]
    pub fn with_int(self, on: bool) -> TopaEntry {
        self.with_bit(Self::INT, on)
    }

    /// The entry with STOP set or cleared.
    #[must_use]
    pub fn with_stop(self, on: bool) -> TopaEntry {
        self.with_bit(Self::STOP, on)
    }

    fn with_bit(self, bit: u64, on: bool) -> TopaEntry {
        if on {
            TopaEntry(self.0 | bit)
        } else {
            TopaEntry(self.0 & !bit)
        }
    }
}

/// Tables of encoded ToPA entries for a [`RegionTable`].
///
/// Each table has `entries_per_table` slots. As in Linux (`TENTS_PER_PAGE -
/// 1` data entries), the last slot of every table is reserved for the END
/// link, so a full table holds `entries_per_table - 1` regions; the link of
/// the last table points back to the first, making the buffer circular. The
/// last table may hold fewer regions: its END entry then directly follows its
/// last data entry (an unused slot left in between would be read as a 4 KiB
/// region at address 0), and [`tables`](Self::tables) holds only the entries
/// in use. Regions are placed in order, so region `r` is in table `r / (N -
/// 1)`, slot `r % (N - 1)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopaLayout {
    tables: Vec<Vec<TopaEntry>>,
    table_bases: Vec<u64>,
    entries_per_table: usize,
    regions: usize,
}

impl TopaLayout {
    /// Encodes `table` into linked ToPA tables.
    ///
    /// `region_bases[i]` is the (physical, or for tests any) address of
    /// region `i`; `table_bases[t]` the address of table `t` (4 KiB
    /// aligned); extra table bases beyond
    /// [`tables_needed`](Self::tables_needed) are ignored.
    /// `entries_per_table` must be in 2..=512.
    ///
    /// Fails with every violation found: regions that are not
    /// ToPA-expressible (size not a power of two in 4 KiB..=128 MiB, base
    /// misaligned or above 2^52), a wrong number of region bases, too few
    /// table bases, and misaligned or duplicate table bases.
    pub fn build(
        table: &RegionTable,
        region_bases: &[u64],
        table_bases: &[u64],
        entries_per_table: usize,
    ) -> Result<TopaLayout, Vec<TopaRuleViolation>> {
        let mut violations = Vec::new();
        if !(2..=MAX_ENTRIES_PER_TABLE).contains(&entries_per_table) {
            violations.push(TopaRuleViolation::BadEntriesPerTable { entries_per_table });
        }
        if region_bases.len() != table.len() {
            violations.push(TopaRuleViolation::RegionBaseCount {
                regions: table.len(),
                given: region_bases.len(),
            });
        }
        let needed = Self::tables_needed(table.len(), entries_per_table);
        if needed != usize::MAX && table_bases.len() < needed {
            violations.push(TopaRuleViolation::NotEnoughTables {
                needed,
                given: table_bases.len(),
            });
        }
        let used_bases = &table_bases[..needed.min(table_bases.len())];
        for (t, &base) in used_bases.iter().enumerate() {
            if let Err(v) = TopaEntry::link(base) {
                violations.push(v.at(EntrySite::Table(t)));
            }
            if used_bases[..t].contains(&base) {
                violations.push(TopaRuleViolation::DuplicateTableBase { table: t, base });
            }
        }
        let mut outputs = Vec::with_capacity(table.len());
        for (r, (region, &base)) in table.regions().zip(region_bases).enumerate() {
            match TopaEntry::output(base, region.len) {
                Ok(e) => outputs.push(e),
                Err(v) => violations.push(v.at(EntrySite::Region(r))),
            }
        }
        if !violations.is_empty() {
            return Err(violations);
        }

        let tables = outputs
            .chunks(entries_per_table - 1)
            .enumerate()
            .map(|(t, chunk)| {
                let next = used_bases[(t + 1) % needed];
                let mut entries = chunk.to_vec();
                // Validated above, so encoding cannot fail.
                entries.push(TopaEntry(next | TopaEntry::END));
                entries
            })
            .collect();
        Ok(TopaLayout {
            tables,
            table_bases: used_bases.to_vec(),
            entries_per_table,
            regions: table.len(),
        })
    }

    /// Number of tables needed for `regions` regions with
    /// `entries_per_table` slots each (one of them the END link):
    /// `ceil(regions / (entries_per_table - 1))`. Returns `usize::MAX` when
    /// `entries_per_table < 2`, since no number of such tables suffices.
    #[must_use]
    pub fn tables_needed(regions: usize, entries_per_table: usize) -> usize {
        if entries_per_table < 2 {
            usize::MAX
        } else {
            regions.div_ceil(entries_per_table - 1)
        }
    }

    /// The tables in link order; each holds its data entries followed by its
    /// END link.
    #[must_use]
    pub fn tables(&self) -> &[Vec<TopaEntry>] {
        &self.tables
    }

    /// The address of each table, in link order.
    #[must_use]
    pub fn table_bases(&self) -> &[u64] {
        &self.table_bases
    }

    /// Slots per table, including the END slot.
    #[must_use]
    pub fn entries_per_table(&self) -> usize {
        self.entries_per_table
    }

    /// The (table, slot) holding region `region`.
    ///
    /// # Panics
    ///
    /// If `region` is not a region of the layout.
    #[must_use]
    pub fn entry_for_region(&self, region: usize) -> (usize, usize) {
        assert!(
            region < self.regions,
            "region {region} out of range for a layout of {} regions",
            self.regions
        );
        let per_table = self.entries_per_table - 1;
        (region / per_table, region % per_table)
    }

    /// Replaces the entry at (`table`, `slot`) and returns the old one.
    /// Meant for back-ends that patch entries and for tests that inject
    /// faults; run [`validate`](Self::validate) afterwards.
    ///
    /// # Panics
    ///
    /// If (`table`, `slot`) is not an entry of the layout.
    pub fn set_entry(&mut self, table: usize, slot: usize, entry: TopaEntry) -> TopaEntry {
        std::mem::replace(&mut self.tables[table][slot], entry)
    }

    /// Checks every SDM "ToPA errors" rule and the layout's own invariants,
    /// returning every violation found.
    ///
    /// SDM rules: reserved bits set (1, 3, 5, 10, 11, and 52 and up, which
    /// covers bases above MAXPHYADDR); INT or STOP on an END entry; END in
    /// entry 0 of a table; an output base not aligned to its size; a link to
    /// an address that is not a table of the layout. (A link base cannot be
    /// misaligned once encoded: the Base field starts at bit 12, and the
    /// table bases were checked by [`build`](Self::build).)
    ///
    /// Layout invariants: each table ends with an END entry and has no
    /// earlier one, and each END links to the next table in order (the last
    /// to the first).
    pub fn validate(&self) -> Result<(), Vec<TopaRuleViolation>> {
        let mut violations = Vec::new();
        for (t, entries) in self.tables.iter().enumerate() {
            let last = entries.len().saturating_sub(1);
            for (slot, &e) in entries.iter().enumerate() {
                let at = EntrySite::Slot { table: t, slot };
                if e.reserved_bits() != 0 {
                    violations.push(TopaRuleViolation::ReservedBits {
                        at,
                        bits: e.reserved_bits(),
                    });
                }
                if !e.end() {
                    if !e.base().is_multiple_of(e.size_bytes()) {
                        violations.push(TopaRuleViolation::MisalignedOutputBase {
                            at,
                            base: e.base(),
                            size: e.size_bytes(),
                        });
                    }
                    if slot == last {
                        violations.push(TopaRuleViolation::MissingLink { table: t });
                    }
                    continue;
                }
                if slot == 0 {
                    violations.push(TopaRuleViolation::EndInFirstSlot { table: t });
                } else if slot != last {
                    violations.push(TopaRuleViolation::EarlyEnd { at });
                }
                let flags = e.0 & (TopaEntry::INT | TopaEntry::STOP);
                if flags != 0 {
                    violations.push(TopaRuleViolation::MarkerOnEnd { at, flags });
                }
                let target = e.base();
                let expected = self.table_bases[(t + 1) % self.table_bases.len()];
                if !self.table_bases.contains(&target) {
                    violations.push(TopaRuleViolation::UnknownLinkTarget { at, target });
                } else if target != expected {
                    violations.push(TopaRuleViolation::LinkOutOfOrder {
                        at,
                        target,
                        expected,
                    });
                }
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// Renders `plan` as INT/STOP bits: clears every INT and STOP bit, then
    /// sets STOP and INT on the stop region (INT too, as Linux does, so that
    /// whoever drives the hardware is interrupted when it stops) and INT on
    /// the notify region.
    ///
    /// The hardware acts only at region ends, so positions are mapped to
    /// the region that *ends* at a boundary:
    /// * stop region: the one ending at
    ///   `table.region_end_at_or_before(plan.stop_at)`. For a
    ///   region-granular plan that is `stop_at` itself; a byte-granular
    ///   `stop_at` inside a region is rounded *down*, because stopping at
    ///   the end of the containing region would overwrite unread data;
    /// * notify region: the one ending at the first region end `>=
    ///   plan.notify_at` (rounded *up*, so the interrupt is never raised
    ///   before the producer reaches `notify_at`), but never after the stop
    ///   region's end (the stop region carries INT anyway).
    ///
    /// `table` must be the table the layout was built from, and the plan's
    /// positions must be below 2^63 (as [`plan_markers`] produces them).
    ///
    /// [`plan_markers`]: super::plan_markers
    ///
    /// # Panics
    ///
    /// If `table` has a different number of regions than the layout.
    pub fn apply_markers(&mut self, table: &RegionTable, plan: &MarkerPlan) {
        assert_eq!(
            table.len(),
            self.regions,
            "the layout was built from a table of {} regions",
            self.regions
        );
        for entries in &mut self.tables {
            for e in entries.iter_mut() {
                *e = e.with_int(false).with_stop(false);
            }
        }
        let stop_end = table.region_end_at_or_before(plan.stop_at);
        let floor = table.region_end_at_or_before(plan.notify_at);
        let notify_ceil = if floor == plan.notify_at {
            floor
        } else {
            table.region_end_after(plan.notify_at)
        };
        let notify_end = notify_ceil.min(stop_end);

        let (t, s) = self.entry_for_region(region_ending_at(table, stop_end));
        self.tables[t][s] = self.tables[t][s].with_stop(true).with_int(true);
        let (t, s) = self.entry_for_region(region_ending_at(table, notify_end));
        self.tables[t][s] = self.tables[t][s].with_int(true);
    }

    /// Writes a readable dump like the kernel's `pt_topa_dump`: per table a
    /// header with its index and address, then one line per entry with its
    /// slot, base, size (output entries) and `E`/`I`/`S` flags (`-` when
    /// clear), and the raw value.
    ///
    /// ```text
    /// table 0 @ 0x100000 (3 entries)
    ///   [  0] base 0x200000 size 0x4000 -IS raw 0x0000000000200094
    ///   [  1] base 0x204000 size 0x1000 --- raw 0x0000000000204000
    ///   [  2] link 0x100000 E-- raw 0x0000000000100001
    /// ```
    pub fn dump(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        for (t, entries) in self.tables.iter().enumerate() {
            writeln!(
                out,
                "table {t} @ {:#x} ({} entries)",
                self.table_bases[t],
                entries.len()
            )?;
            for (slot, &e) in entries.iter().enumerate() {
                let flags = [
                    if e.end() { 'E' } else { '-' },
                    if e.int() { 'I' } else { '-' },
                    if e.stop() { 'S' } else { '-' },
                ];
                let flags: String = flags.iter().collect();
                if e.end() {
                    writeln!(
                        out,
                        "  [{slot:>3}] link {:#x} {flags} raw {:#018x}",
                        e.base(),
                        e.0
                    )?;
                } else {
                    writeln!(
                        out,
                        "  [{slot:>3}] base {:#x} size {:#x} {flags} raw {:#018x}",
                        e.base(),
                        e.size_bytes(),
                        e.0
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// The index of the region that ends at the absolute boundary `boundary`:
/// the one before the region that starts there (wrapping to the last region
/// at a lap boundary).
fn region_ending_at(table: &RegionTable, boundary: u64) -> usize {
    let starting = table.locate(boundary).region;
    (starting + table.len() - 1) % table.len()
}
