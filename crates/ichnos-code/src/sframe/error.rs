//! What can be wrong with an SFrame section: each error names the field
//! and its offset in the section.

/// What was wrong with an SFrame section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("SFrame section: {kind} (field {field} at offset {offset:#x})")]
pub struct SframeError {
    /// Byte offset of the field in the section.
    pub offset: usize,
    /// The field's name in the SFrame specification.
    pub field: &'static str,
    /// What is wrong with it.
    pub kind: SframeErrorKind,
}

/// The kinds of [`SframeError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SframeErrorKind {
    /// The field runs past the end of the section.
    #[error("truncated")]
    Truncated,
    /// The magic number is not 0xdee2 in either byte order.
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    /// A version other than 1, 2 or 3.
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// Flag bits this version does not define.
    #[error("unknown flag bits {0:#04x}")]
    UnknownFlags(u8),
    /// An ABI/arch identifier other than 1–4.
    #[error("unknown ABI/arch {0}")]
    UnknownAbi(u8),
    /// A value that points outside the section or its sub-section.
    #[error("value {0:#x} points outside the section")]
    OutOfBounds(u64),
    /// An FRE start-address type other than ADDR1/2/4.
    #[error("unknown FRE type {0}")]
    BadFreType(u8),
    /// An FRE offset size of 3 (reserved).
    #[error("reserved FRE offset size")]
    BadOffsetSize,
    /// An FRE with more offsets than the ABI allows, or too few.
    #[error("FRE offset count {0} is not valid here")]
    BadOffsetCount(u8),
    /// FRE start addresses that do not increase, or lie past the function.
    #[error(
        "FRE start {start:#x} is not above the previous one and below the function size {size:#x}"
    )]
    FreOrder {
        /// The FRE's start offset.
        start: u32,
        /// The function's size.
        size: u32,
    },
    /// Something valid that this reader does not handle.
    #[error("unsupported: {0}")]
    Unsupported(Unsupported),
}

/// What valid SFrame this reader does not handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// A version 3 FLEX FDE (only default FDEs are read).
    #[error("FLEX FDE (only default FDEs are read)")]
    FlexFde,
    /// s390x, whose offsets are encoded and may name registers.
    #[error("s390x (its offsets are encoded and may name registers)")]
    S390x,
    /// A PCMASK FDE without a repetition size.
    #[error("PCMASK FDE without a repetition size")]
    PcmaskWithoutRepetition,
}

pub(super) fn err(offset: usize, field: &'static str, kind: SframeErrorKind) -> SframeError {
    SframeError {
        offset,
        field,
        kind,
    }
}
