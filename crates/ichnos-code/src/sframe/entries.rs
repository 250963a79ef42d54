//! The entries of an SFrame section as this reader hands them out: FDEs
//! (per function) and FREs (per code range), decoded.

use crate::row::{UnwindRow, ROW_CFA_BASE_SP, ROW_MANGLED_RA, ROW_OUTERMOST};

/// The ABI/arch identifier (`sfh_abi_arch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abi {
    /// `SFRAME_ABI_AARCH64_ENDIAN_BIG`
    Aarch64BigEndian,
    /// `SFRAME_ABI_AARCH64_ENDIAN_LITTLE`
    Aarch64LittleEndian,
    /// `SFRAME_ABI_AMD64_ENDIAN_LITTLE`
    Amd64,
    /// `SFRAME_ABI_S390X_ENDIAN_BIG`
    S390x,
}

/// How an FDE's FRE start addresses are matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcType {
    /// Start offsets count from the function start (`SFRAME_FDE_TYPE_PCINC`).
    Inc,
    /// The function is a repeated block (PLT entries); start offsets count
    /// from the start of a block (`SFRAME_FDE_TYPE_PCMASK`).
    Mask,
}

/// A function descriptor entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fde {
    /// Index in the FDE sub-section.
    pub index: u32,
    /// Offset of the FDE in the section.
    pub offset: usize,
    /// The function's first address.
    pub start: u64,
    /// The function's size in bytes.
    pub size: u32,
    /// Offset in the section of the function's first FRE.
    pub fre_offset: usize,
    /// Number of FREs.
    pub num_fres: u32,
    /// The info byte.
    pub info: u8,
    /// v3 `info2` byte (0 before v3).
    pub info2: u8,
    /// Size of the repeated block for PCMASK FDEs (0 when not given).
    pub rep_size: u8,
}

impl Fde {
    /// How FRE start addresses are matched.
    #[must_use]
    pub fn pc_type(&self) -> PcType {
        if self.info & 0x10 != 0 {
            PcType::Mask
        } else {
            PcType::Inc
        }
    }

    /// Byte width of FRE start addresses (1, 2 or 4), or the bad type.
    pub(super) fn fre_addr_size(&self) -> Result<usize, u8> {
        match self.info & 0xf {
            0 => Ok(1),
            1 => Ok(2),
            2 => Ok(4),
            t => Err(t),
        }
    }

    /// AArch64: the B key signs return addresses (else the A key).
    #[must_use]
    pub fn pauth_key_b(&self) -> bool {
        self.info & 0x20 != 0
    }

    /// One past the function's last address.
    #[must_use]
    pub fn end(&self) -> u64 {
        self.start.wrapping_add(u64::from(self.size))
    }
}

/// A frame row entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fre {
    /// Offset in the section.
    pub offset: usize,
    /// Start offset within the function (PCINC) or the repeated block
    /// (PCMASK).
    pub start: u32,
    /// The info byte.
    pub info: u8,
    /// CFA = base + `cfa_off`.
    pub cfa_off: i32,
    /// Where the RA is saved relative to the CFA (the header's fixed
    /// offset on x86-64), `None` when not saved (AArch64 leaf: still in LR).
    pub ra_off: Option<i32>,
    /// Where the caller's FP is saved relative to the CFA, `None` when not
    /// saved.
    pub fp_off: Option<i32>,
    /// v2/v3: the FRE has no offsets, so the return address is undefined.
    pub outermost: bool,
}

impl Fre {
    /// Whether the CFA is computed from SP (else FP).
    #[must_use]
    pub fn cfa_base_is_sp(&self) -> bool {
        self.info & 1 != 0
    }

    /// Whether the saved RA is signed (AArch64).
    #[must_use]
    pub fn mangled_ra(&self) -> bool {
        self.info & 0x80 != 0
    }

    /// The FRE as an unwind row covering `[ip_off, ip_off + size)`.
    #[must_use]
    pub fn to_row(&self, ip_off: u32, size: u32) -> UnwindRow {
        let mut info = 0;
        if self.cfa_base_is_sp() {
            info |= ROW_CFA_BASE_SP;
        }
        if self.mangled_ra() {
            info |= ROW_MANGLED_RA;
        }
        if self.outermost {
            info |= ROW_OUTERMOST;
        }
        UnwindRow {
            size,
            ip_off,
            cfa_off: self.cfa_off,
            ra_off: self.ra_off.unwrap_or(0),
            fp_off: self.fp_off.unwrap_or(0),
            info,
        }
    }
}
