//! A zero-copy reader for SFrame sections, versions 1, 2 and 3.
//!
//! SFrame (`.sframe`, segment `PT_GNU_SFRAME`) is GNU binutils' compact
//! unwind format: per function an FDE, per code range in it an FRE saying how
//! to compute the CFA and where the return address and the frame pointer are
//! saved. The versions differ in ways that matter:
//!
//! * v1 (binutils 2.40, Debian 12): 17-byte packed FDEs, function start
//!   relative to the section start, PCMASK FDEs without a repetition size;
//! * v2 (2.41–2.44): 20-byte FDEs with `rep_size`; from 2.45 the
//!   `SFRAME_F_FDE_FUNC_START_PCREL` flag makes the start relative to the
//!   FDE's own field;
//! * v3 (2.46): a 16-byte FDE index with a 64-bit start and a 5-byte
//!   attribute record in front of each function's FREs; FRE with no offsets
//!   marks the outermost frame; FLEX FDEs (reported as unsupported here).
//!
//! [`SframeSection::parse`] checks the header and that every sub-section
//! lies inside the bytes; FDEs and FREs are decoded on demand and every
//! malformed field is a [`SframeError`] naming the field and its offset in
//! the section.

use crate::row::{
    RowTable, UnwindRow, ROW_CFA_BASE_SP, ROW_MANGLED_RA, ROW_OUTERMOST, ROW_UNEXPRESSIBLE,
};

/// `sfp_magic`.
pub const SFRAME_MAGIC: u16 = 0xdee2;
/// `SFRAME_F_FDE_SORTED`.
pub const F_FDE_SORTED: u8 = 0x1;
/// `SFRAME_F_FRAME_POINTER`.
pub const F_FRAME_POINTER: u8 = 0x2;
/// `SFRAME_F_FDE_FUNC_START_PCREL`.
pub const F_FDE_FUNC_START_PCREL: u8 = 0x4;

const HEADER_LEN: usize = 28;
/// The x86-64 `pltN` entry size, the repetition block of v1 PCMASK FDEs
/// (v1 has no `rep_size` field; binutils 2.40 emits PCMASK only for `.plt`).
const V1_AMD64_PLT_ENTRY: u32 = 16;
/// Upper bound on the rows one PCMASK FDE may expand to.
const MAX_MASK_ROWS: u64 = 1 << 20;

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

fn err(offset: usize, field: &'static str, kind: SframeErrorKind) -> SframeError {
    SframeError {
        offset,
        field,
        kind,
    }
}

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
    fn fre_addr_size(&self) -> Result<usize, u8> {
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

/// The result of [`SframeSection::find`]: the FDE and the FRE covering an
/// address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// The function.
    pub fde: Fde,
    /// The row.
    pub fre: Fre,
}

/// A parsed SFrame section borrowing its bytes.
#[derive(Clone, Copy, Debug)]
pub struct SframeSection<'a> {
    data: &'a [u8],
    addr: u64,
    big_endian: bool,
    version: u8,
    flags: u8,
    abi: Abi,
    fixed_fp: i8,
    fixed_ra: i8,
    num_fdes: u32,
    num_fres: u32,
    fde_start: usize,
    fre_start: usize,
    fre_end: usize,
}

impl<'a> SframeSection<'a> {
    /// Parses the header of `data`, an SFrame section loaded at `addr` (the
    /// address its first byte has in the address space where FDE start
    /// addresses are meant: link-time or run-time).
    pub fn parse(data: &'a [u8], addr: u64) -> Result<Self, SframeError> {
        use SframeErrorKind as K;
        if data.len() < 4 {
            return Err(err(0, "sfp_magic", K::Truncated));
        }
        let magic_le = u16::from_le_bytes([data[0], data[1]]);
        let big_endian = match magic_le {
            SFRAME_MAGIC => false,
            m if m.swap_bytes() == SFRAME_MAGIC => true,
            m => return Err(err(0, "sfp_magic", K::BadMagic(m))),
        };
        let version = data[2];
        let known_flags = match version {
            1 => F_FDE_SORTED | F_FRAME_POINTER,
            2 | 3 => F_FDE_SORTED | F_FRAME_POINTER | F_FDE_FUNC_START_PCREL,
            v => return Err(err(2, "sfp_version", K::UnsupportedVersion(v))),
        };
        let flags = data[3];
        if flags & !known_flags != 0 {
            return Err(err(3, "sfp_flags", K::UnknownFlags(flags & !known_flags)));
        }
        if data.len() < HEADER_LEN {
            return Err(err(4, "sfh_abi_arch", K::Truncated));
        }
        let abi = match data[4] {
            1 => Abi::Aarch64BigEndian,
            2 => Abi::Aarch64LittleEndian,
            3 => Abi::Amd64,
            4 if version >= 2 => Abi::S390x,
            a => return Err(err(4, "sfh_abi_arch", K::UnknownAbi(a))),
        };
        let mut s = Self {
            data,
            addr,
            big_endian,
            version,
            flags,
            abi,
            fixed_fp: data[5].cast_signed(),
            fixed_ra: data[6].cast_signed(),
            num_fdes: 0,
            num_fres: 0,
            fde_start: 0,
            fre_start: 0,
            fre_end: 0,
        };
        let auxhdr_len = usize::from(data[7]);
        s.num_fdes = s.u32_at(8, "sfh_num_fdes")?;
        s.num_fres = s.u32_at(12, "sfh_num_fres")?;
        let fre_len = s.u32_at(16, "sfh_fre_len")?;
        let fdeoff = s.u32_at(20, "sfh_fdeoff")?;
        let fre_sub_off = s.u32_at(24, "sfh_freoff")?;
        let end_of_header = HEADER_LEN + auxhdr_len;
        if end_of_header > data.len() {
            return Err(err(7, "sfh_auxhdr_len", K::OutOfBounds(auxhdr_len as u64)));
        }
        let fde_start = end_of_header as u64 + u64::from(fdeoff);
        let fde_end = fde_start + u64::from(s.num_fdes) * s.fde_entry_size() as u64;
        if fde_end > data.len() as u64 {
            return Err(err(20, "sfh_fdeoff", K::OutOfBounds(fde_end)));
        }
        let fres_begin = end_of_header as u64 + u64::from(fre_sub_off);
        let fres_finish = fres_begin + u64::from(fre_len);
        if fres_finish > data.len() as u64 {
            return Err(err(16, "sfh_fre_len", K::OutOfBounds(fres_finish)));
        }
        s.fde_start = fde_start as usize;
        s.fre_start = fres_begin as usize;
        s.fre_end = fres_finish as usize;
        Ok(s)
    }

    /// The format version (1, 2 or 3).
    #[must_use]
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The header flags.
    #[must_use]
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// The ABI/arch.
    #[must_use]
    pub fn abi(&self) -> Abi {
        self.abi
    }

    /// `sfh_cfa_fixed_ra_offset` (−8 on x86-64, 0 where FREs carry it).
    #[must_use]
    pub fn fixed_ra_offset(&self) -> i8 {
        self.fixed_ra
    }

    /// `sfh_cfa_fixed_fp_offset`.
    #[must_use]
    pub fn fixed_fp_offset(&self) -> i8 {
        self.fixed_fp
    }

    /// Number of FDEs.
    #[must_use]
    pub fn num_fdes(&self) -> u32 {
        self.num_fdes
    }

    /// Number of FREs, as the header says.
    #[must_use]
    pub fn num_fres(&self) -> u32 {
        self.num_fres
    }

    /// The address of the section's first byte.
    #[must_use]
    pub fn address(&self) -> u64 {
        self.addr
    }

    fn fde_entry_size(&self) -> usize {
        match self.version {
            1 => 17,
            2 => 20,
            _ => 16,
        }
    }

    fn bytes<const N: usize>(
        &self,
        at: usize,
        field: &'static str,
    ) -> Result<[u8; N], SframeError> {
        self.data
            .get(at..at.wrapping_add(N))
            .and_then(|b| b.try_into().ok())
            .ok_or(err(at, field, SframeErrorKind::Truncated))
    }

    fn u8_at(&self, at: usize, field: &'static str) -> Result<u8, SframeError> {
        Ok(self.bytes::<1>(at, field)?[0])
    }

    fn u16_at(&self, at: usize, field: &'static str) -> Result<u16, SframeError> {
        let b = self.bytes(at, field)?;
        Ok(if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    fn u32_at(&self, at: usize, field: &'static str) -> Result<u32, SframeError> {
        let b = self.bytes(at, field)?;
        Ok(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64_at(&self, at: usize, field: &'static str) -> Result<u64, SframeError> {
        let b = self.bytes(at, field)?;
        Ok(if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// The start address of FDE `index` alone (cheaper than [`Self::fde`]
    /// for the binary search).
    fn fde_start_addr(&self, index: u32) -> Result<u64, SframeError> {
        let at = self.fde_start + index as usize * self.fde_entry_size();
        let value = if self.version == 3 {
            self.u64_at(at, "sfdi_func_start_offset")?.cast_signed()
        } else {
            i64::from(self.u32_at(at, "sfde_func_start_address")?.cast_signed())
        };
        let base = if self.flags & F_FDE_FUNC_START_PCREL != 0 {
            self.addr.wrapping_add(at as u64)
        } else {
            self.addr
        };
        Ok(base.wrapping_add_signed(value))
    }

    /// Decodes FDE `index`.
    pub fn fde(&self, index: u32) -> Result<Fde, SframeError> {
        use SframeErrorKind as K;
        if index >= self.num_fdes {
            return Err(err(8, "sfh_num_fdes", K::OutOfBounds(u64::from(index))));
        }
        let at = self.fde_start + index as usize * self.fde_entry_size();
        let start = self.fde_start_addr(index)?;
        let (size, fre_off, num_fres, info, info2, rep_size, fres_at);
        if self.version == 3 {
            size = self.u32_at(at + 8, "sfdi_func_size")?;
            fre_off = self.u32_at(at + 12, "sfdi_func_start_fre_off")?;
            let attr = self.fre_start as u64 + u64::from(fre_off);
            if attr + 5 > self.fre_end as u64 {
                return Err(err(
                    at + 12,
                    "sfdi_func_start_fre_off",
                    K::OutOfBounds(attr),
                ));
            }
            let attr = attr as usize;
            num_fres = u32::from(self.u16_at(attr, "sfda_func_num_fres")?);
            info = self.u8_at(attr + 2, "sfda_func_info")?;
            info2 = self.u8_at(attr + 3, "sfda_func_info2")?;
            rep_size = self.u8_at(attr + 4, "sfda_func_rep_size")?;
            fres_at = attr + 5;
        } else {
            size = self.u32_at(at + 4, "sfde_func_size")?;
            fre_off = self.u32_at(at + 8, "sfde_func_start_fre_off")?;
            num_fres = self.u32_at(at + 12, "sfde_func_num_fres")?;
            info = self.u8_at(at + 16, "sfde_func_info")?;
            info2 = 0;
            rep_size = if self.version == 2 {
                self.u8_at(at + 17, "sfde_func_rep_size")?
            } else {
                0
            };
            let first = self.fre_start as u64 + u64::from(fre_off);
            if first > self.fre_end as u64 {
                return Err(err(
                    at + 8,
                    "sfde_func_start_fre_off",
                    K::OutOfBounds(first),
                ));
            }
            fres_at = first as usize;
        }
        Ok(Fde {
            index,
            offset: at,
            start,
            size,
            fre_offset: fres_at,
            num_fres,
            info,
            info2,
            rep_size,
        })
    }

    /// All FDEs in section order.
    pub fn fdes(&self) -> impl Iterator<Item = Result<Fde, SframeError>> + '_ {
        (0..self.num_fdes).map(|i| self.fde(i))
    }

    /// The FREs of `fde`, decoded one by one.
    #[must_use]
    pub fn fres(&self, fde: &Fde) -> FreIter<'_, 'a> {
        FreIter {
            section: self,
            fde: *fde,
            at: fde.fre_offset,
            left: fde.num_fres,
            prev_start: None,
        }
    }

    fn check_fde_kind(&self, fde: &Fde) -> Result<(), SframeError> {
        use SframeErrorKind as K;
        let field_at = if self.version == 3 {
            fde.fre_offset - 2
        } else {
            fde.offset + 16
        };
        if self.version == 3 && fde.info2 & 0x1f != 0 {
            return Err(err(
                field_at,
                "sfda_func_info2",
                K::Unsupported(Unsupported::FlexFde),
            ));
        }
        if self.abi == Abi::S390x {
            return Err(err(4, "sfh_abi_arch", K::Unsupported(Unsupported::S390x)));
        }
        if let Err(t) = fde.fre_addr_size() {
            let (at, field) = if self.version == 3 {
                (fde.fre_offset - 3, "sfda_func_info")
            } else {
                (field_at, "sfde_func_info")
            };
            return Err(err(at, field, K::BadFreType(t)));
        }
        Ok(())
    }

    /// The repetition block size of a PCMASK FDE.
    fn mask_block(&self, fde: &Fde) -> Result<u32, SframeError> {
        if fde.rep_size != 0 {
            return Ok(u32::from(fde.rep_size));
        }
        if self.version == 1 && self.abi == Abi::Amd64 {
            return Ok(V1_AMD64_PLT_ENTRY);
        }
        Err(err(
            fde.offset,
            "sfde_func_rep_size",
            SframeErrorKind::Unsupported(Unsupported::PcmaskWithoutRepetition),
        ))
    }

    /// The FDE covering `pc`: a binary search when the section says its FDEs
    /// are sorted, else a linear scan.
    pub fn find_fde(&self, pc: u64) -> Result<Option<Fde>, SframeError> {
        if self.num_fdes == 0 {
            return Ok(None);
        }
        let index = if self.flags & F_FDE_SORTED != 0 {
            // Last FDE whose start is <= pc.
            let (mut lo, mut hi) = (0u32, self.num_fdes);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.fde_start_addr(mid)? <= pc {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            match lo.checked_sub(1) {
                Some(i) => i,
                None => return Ok(None),
            }
        } else {
            let mut found = None;
            for i in 0..self.num_fdes {
                let start = self.fde_start_addr(i)?;
                let fde = self.fde(i)?;
                if start <= pc && pc < fde.end() {
                    found = Some(i);
                    break;
                }
            }
            match found {
                Some(i) => i,
                None => return Ok(None),
            }
        };
        let fde = self.fde(index)?;
        Ok((fde.start <= pc && pc < fde.end()).then_some(fde))
    }

    /// The row covering `pc`: binary search over the FDEs, then a scan of
    /// that function's FREs.
    pub fn find(&self, pc: u64) -> Result<Option<Found>, SframeError> {
        let Some(fde) = self.find_fde(pc)? else {
            return Ok(None);
        };
        self.check_fde_kind(&fde)?;
        let mut off = (pc - fde.start) as u32;
        if fde.pc_type() == PcType::Mask {
            off %= self.mask_block(&fde)?;
        }
        let mut best = None;
        for fre in self.fres(&fde) {
            let fre = fre?;
            if fre.start > off {
                break;
            }
            best = Some(fre);
        }
        Ok(best.map(|fre| Found { fde, fre }))
    }

    /// Every row of the section, in the one row format. Rows count from the
    /// lowest function start. FDEs that cannot be read are skipped and
    /// counted in [`Conversion::skipped_fdes`], with the first error kept.
    #[must_use]
    pub fn to_rows(&self) -> Conversion {
        let base = (0..self.num_fdes)
            .filter_map(|i| self.fde_start_addr(i).ok())
            .min()
            .unwrap_or(0);
        self.to_rows_from(base)
    }

    /// As [`Self::to_rows`], with rows counting from `base`: functions that
    /// start below it, or end more than 4 GiB above it, are skipped (an FDE
    /// with a wild start address cannot drag the table away from the code).
    ///
    /// The rows made are bounded by the section's size: FDEs that share FRE
    /// bytes or overlap cannot multiply them beyond `sfh_fre_len` plus one
    /// million (room for PLT expansions); see [`Conversion::truncated`].
    #[must_use]
    pub fn to_rows_from(&self, base: u64) -> Conversion {
        let mut rows = Vec::new();
        let mut skipped = 0;
        let mut first_error = None;
        let budget = (self.fre_end - self.fre_start) as u64 + MAX_MASK_ROWS;
        let mut truncated = false;
        for fde in self.fdes() {
            let result = fde.and_then(|fde| self.fde_rows(&fde, base, &mut rows));
            if let Err(e) = result {
                skipped += 1;
                first_error.get_or_insert(e);
            }
            if rows.len() as u64 > budget {
                rows.truncate(budget as usize);
                truncated = true;
                break;
            }
        }
        let (table, overlapping) = RowTable::from_unsorted(base, rows);
        Conversion {
            table,
            skipped_fdes: skipped,
            overlapping_rows: overlapping,
            first_error,
            truncated,
        }
    }

    fn fde_rows(&self, fde: &Fde, base: u64, out: &mut Vec<UnwindRow>) -> Result<(), SframeError> {
        use SframeErrorKind as K;
        self.check_fde_kind(fde)?;
        let func_off = fde
            .start
            .checked_sub(base)
            .filter(|o| {
                o.checked_add(u64::from(fde.size))
                    .is_some_and(|end| u32::try_from(end).is_ok())
            })
            .ok_or(err(
                fde.offset,
                "sfde_func_start_address",
                K::OutOfBounds(fde.start),
            ))?;
        let fres: Vec<Fre> = self.fres(fde).collect::<Result<_, _>>()?;
        // A v3 signal frame's caller is found through the signal context,
        // which no row describes: mark its rows for the fallback.
        let signal_frame = self.version == 3 && fde.info & 0x80 != 0;
        let mut emit = |block_off: u64, limit: u64| {
            for (i, fre) in fres.iter().enumerate() {
                let start = block_off + u64::from(fre.start);
                let end = fres
                    .get(i + 1)
                    .map_or(limit, |next| block_off + u64::from(next.start))
                    .min(u64::from(fde.size));
                if start < end {
                    let mut row = fre.to_row((func_off + start) as u32, (end - start) as u32);
                    if signal_frame {
                        row.info |= ROW_UNEXPRESSIBLE;
                    }
                    out.push(row);
                }
            }
        };
        match fde.pc_type() {
            PcType::Inc => emit(0, u64::from(fde.size)),
            PcType::Mask => {
                let block = u64::from(self.mask_block(fde)?);
                let blocks = u64::from(fde.size).div_ceil(block);
                if blocks * fres.len() as u64 > MAX_MASK_ROWS {
                    return Err(err(
                        fde.offset,
                        "sfde_func_size",
                        K::OutOfBounds(u64::from(fde.size)),
                    ));
                }
                for b in 0..blocks {
                    emit(b * block, (b + 1) * block);
                }
            }
        }
        Ok(())
    }
}

/// The result of converting a section to rows.
#[derive(Clone, Debug)]
pub struct Conversion {
    /// The rows.
    pub table: RowTable,
    /// FDEs that could not be read.
    pub skipped_fdes: usize,
    /// Rows dropped or cut because they overlapped another function's.
    pub overlapping_rows: usize,
    /// Whether conversion stopped at its row budget (a section whose FDEs
    /// share or overlap their FREs many times over).
    pub truncated: bool,
    /// The first error met, if any.
    pub first_error: Option<SframeError>,
}

/// Iterator over one FDE's FREs; see [`SframeSection::fres`].
#[derive(Debug)]
pub struct FreIter<'s, 'a> {
    section: &'s SframeSection<'a>,
    fde: Fde,
    at: usize,
    left: u32,
    prev_start: Option<u32>,
}

impl FreIter<'_, '_> {
    fn decode(&mut self) -> Result<Fre, SframeError> {
        use SframeErrorKind as K;
        let s = self.section;
        let at = self.at;
        if at >= s.fre_end {
            return Err(err(at, "sfre_start_address", K::Truncated));
        }
        let addr_size = self
            .fde
            .fre_addr_size()
            .map_err(|t| err(self.fde.offset, "sfde_func_info", K::BadFreType(t)))?;
        let start = match addr_size {
            1 => u32::from(s.u8_at(at, "sfre_start_address")?),
            2 => u32::from(s.u16_at(at, "sfre_start_address")?),
            _ => s.u32_at(at, "sfre_start_address")?,
        };
        let limit = match self.fde.pc_type() {
            PcType::Inc => self.fde.size,
            PcType::Mask => s.mask_block(&self.fde)?,
        };
        let ordered = self.prev_start.is_none_or(|p| start > p);
        if !ordered || (start >= limit && limit != 0) {
            return Err(err(
                at,
                "sfre_start_address",
                K::FreOrder { start, size: limit },
            ));
        }
        let info_at = at + addr_size;
        let info = s.u8_at(info_at, "sfre_info")?;
        let offset_size = match (info >> 5) & 3 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => return Err(err(info_at, "sfre_info", K::BadOffsetSize)),
        };
        let count = (info >> 1) & 0xf;
        let mut offsets = [0i32; 3];
        // CFA, then RA and FP unless the header fixes them.
        let max = 3 - u8::from(s.fixed_ra != 0) - u8::from(s.fixed_fp != 0);
        // FREs without offsets mark the outermost frame in v3, and in v2 as
        // binutils writes it since the kernel's "outermost frame indication";
        // v1 never had them.
        let min = u8::from(s.version == 1);
        if count > max || count < min {
            return Err(err(info_at, "sfre_info", K::BadOffsetCount(count)));
        }
        let mut p = info_at + 1;
        for slot in offsets.iter_mut().take(usize::from(count)) {
            *slot = match offset_size {
                1 => i32::from(s.u8_at(p, "sfre_offset")?.cast_signed()),
                2 => i32::from(s.u16_at(p, "sfre_offset")?.cast_signed()),
                _ => s.u32_at(p, "sfre_offset")?.cast_signed(),
            };
            p += offset_size;
        }
        if p > s.fre_end {
            return Err(err(at, "sfre_offset", K::Truncated));
        }
        // offset1 is the CFA; then the RA unless the header fixes it; then
        // the FP unless the header fixes it.
        let mut next = 1;
        let mut take = |fixed: i8| {
            if fixed != 0 {
                Some(i32::from(fixed))
            } else if next < usize::from(count) {
                next += 1;
                Some(offsets[next - 1])
            } else {
                None
            }
        };
        let (ra_off, fp_off) = if count == 0 {
            (None, None)
        } else {
            let ra = take(s.fixed_ra);
            let fp = take(s.fixed_fp);
            (ra, fp)
        };
        self.at = p;
        self.prev_start = Some(start);
        Ok(Fre {
            offset: at,
            start,
            info,
            cfa_off: offsets[0],
            ra_off,
            fp_off,
            outermost: count == 0,
        })
    }
}

impl Iterator for FreIter<'_, '_> {
    type Item = Result<Fre, SframeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let result = self.decode();
        if result.is_err() {
            self.left = 0;
        }
        Some(result)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}
