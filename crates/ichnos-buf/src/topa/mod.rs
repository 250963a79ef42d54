//! Region-table buffers in the manner of Intel PT's Table of Physical
//! Addresses (ToPA): one logical byte stream laid over several
//! non-contiguous regions of different sizes.

pub mod consumer;
mod futex;
pub mod layout;
pub mod markers;
pub mod memory;
pub mod producer;
pub mod ring;
pub mod table;

pub use consumer::{Armed, Consumer, Segments, SnapshotInfo, TailError, WaitOutcome};
pub use layout::{TopaEntry, TopaLayout, TopaRuleViolation};
pub use markers::{plan_markers, Granularity, MarkerError, MarkerPlan};
pub use memory::{AllocError, AllocFlags};
pub use producer::{Producer, RecordError, Status, WriteOutcome};
pub use ring::{Config, Mode, Stats, TopaBuffer};
pub use table::{Cursor, RegionDesc, RegionTable, TableError};
