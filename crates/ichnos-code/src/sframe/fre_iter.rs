//! Decoding one FDE's FREs in order, each checked.

use super::error::err;
use super::{Fde, Fre, PcType, SframeError, SframeErrorKind, SframeSection};

/// Iterator over one FDE's FREs; see [`SframeSection::fres`].
#[derive(Debug)]
pub struct FreIter<'s, 'a> {
    pub(super) section: &'s SframeSection<'a>,
    pub(super) fde: Fde,
    pub(super) at: usize,
    pub(super) left: u32,
    pub(super) prev_start: Option<u32>,
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
