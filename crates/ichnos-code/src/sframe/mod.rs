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

mod entries;
mod error;
mod fre_iter;

pub use entries::{Abi, Fde, Fre, PcType};
pub use error::{SframeError, SframeErrorKind, Unsupported};
pub use fre_iter::FreIter;

use crate::row::{RowTable, UnwindRow, ROW_UNEXPRESSIBLE};
use error::err;

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
