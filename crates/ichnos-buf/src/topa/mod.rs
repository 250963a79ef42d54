//! Region-table buffers in the manner of Intel PT's Table of Physical
//! Addresses (ToPA): one logical byte stream laid over several
//! non-contiguous regions of different sizes.

pub mod layout;
pub mod markers;
pub mod memory;
pub mod ring;
pub mod table;

pub use layout::{TopaEntry, TopaLayout, TopaRuleViolation};
pub use markers::{plan_markers, Granularity, MarkerError, MarkerPlan};
pub use memory::{AllocError, AllocFlags};
pub use ring::{
    Config, Consumer, Mode, Producer, RecordError, SnapshotInfo, Stats, Status, TailError,
    TopaBuffer, WaitOutcome, WriteOutcome,
};
pub use table::{Cursor, RegionDesc, RegionTable, TableError};
