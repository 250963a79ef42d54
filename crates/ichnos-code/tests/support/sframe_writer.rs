//! A test-only SFrame encoder written from the specification (binutils
//! sframe-spec, versions 1, 2 and 3), independent of the reader under test:
//! it turns a model of functions and rows into section bytes.

#![allow(dead_code)]

/// One row of the model.
#[derive(Clone, Debug)]
pub struct ModelFre {
    pub start: u32,
    pub sp_base: bool,
    pub cfa: i32,
    /// AArch64 only: the RA slot (AMD64 uses the fixed −8).
    pub ra: Option<i32>,
    pub fp: Option<i32>,
    /// An FRE without offsets: the outermost frame (v2 and v3 only).
    pub outermost: bool,
}

/// One function of the model.
#[derive(Clone, Debug)]
pub struct ModelFunc {
    pub start: u64,
    pub size: u32,
    /// PCMASK with this repetition size.
    pub mask: Option<u8>,
    pub fres: Vec<ModelFre>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    V1,
    V2,
    V2Pcrel,
    V3,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Aarch64,
}

fn offsets(arch: Arch, f: &ModelFre) -> Vec<i32> {
    if f.outermost {
        return Vec::new();
    }
    let mut v = vec![f.cfa];
    match arch {
        Arch::Amd64 => v.extend(f.fp),
        Arch::Aarch64 => {
            if let Some(ra) = f.ra {
                v.push(ra);
                v.extend(f.fp);
            }
        }
    }
    v
}

/// Encodes `funcs` (sorted by start) as an SFrame section that will be
/// loaded at `section_addr`.
pub fn encode(funcs: &[ModelFunc], flavour: Flavour, arch: Arch, section_addr: u64) -> Vec<u8> {
    let version: u8 = match flavour {
        Flavour::V1 => 1,
        Flavour::V2 | Flavour::V2Pcrel => 2,
        Flavour::V3 => 3,
    };
    let pcrel = matches!(flavour, Flavour::V2Pcrel | Flavour::V3);
    let fde_size = match version {
        1 => 17,
        2 => 20,
        _ => 16,
    };
    // The FRE sub-section, and where each function's data starts in it.
    let mut fre_bytes = Vec::new();
    let mut fre_offsets = Vec::new();
    let mut infos = Vec::new();
    let mut num_fres = 0u32;
    for f in funcs {
        fre_offsets.push(fre_bytes.len() as u32);
        let max_start = f.fres.iter().map(|r| r.start).max().unwrap_or(0);
        let (fre_type, addr_size) = if max_start <= 0xff {
            (0u8, 1)
        } else if max_start <= 0xffff {
            (1, 2)
        } else {
            (2, 4)
        };
        let info = fre_type | (u8::from(f.mask.is_some()) << 4);
        infos.push(info);
        if version == 3 {
            fre_bytes.extend_from_slice(&(f.fres.len() as u16).to_le_bytes());
            fre_bytes.push(info);
            fre_bytes.push(0); // info2: default FDE
            fre_bytes.push(f.mask.unwrap_or(0));
        }
        for r in &f.fres {
            num_fres += 1;
            fre_bytes.extend_from_slice(&r.start.to_le_bytes()[..addr_size]);
            let offs = offsets(arch, r);
            let (size_code, width) = if offs.iter().all(|o| i8::try_from(*o).is_ok()) {
                (0u8, 1)
            } else if offs.iter().all(|o| i16::try_from(*o).is_ok()) {
                (1, 2)
            } else {
                (2, 4)
            };
            fre_bytes.push(u8::from(r.sp_base) | ((offs.len() as u8) << 1) | (size_code << 5));
            for o in offs {
                fre_bytes.extend_from_slice(&o.to_le_bytes()[..width]);
            }
        }
    }
    let header_len = 28u64;
    let fde_area = funcs.len() as u64 * fde_size;
    let mut out = Vec::new();
    out.extend_from_slice(&0xdee2u16.to_le_bytes());
    out.push(version);
    out.push(0x1 | if pcrel { 0x4 } else { 0 });
    out.push(match arch {
        Arch::Amd64 => 3,
        Arch::Aarch64 => 2,
    });
    out.push(0);
    out.push(match arch {
        Arch::Amd64 => (-8i8).cast_unsigned(),
        Arch::Aarch64 => 0,
    });
    out.push(0);
    out.extend_from_slice(&(funcs.len() as u32).to_le_bytes());
    out.extend_from_slice(&num_fres.to_le_bytes());
    out.extend_from_slice(&(fre_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(fde_area as u32).to_le_bytes());
    for (i, f) in funcs.iter().enumerate() {
        let field_addr = section_addr + header_len + i as u64 * fde_size;
        let start = if pcrel {
            f.start.wrapping_sub(field_addr).cast_signed()
        } else {
            f.start.wrapping_sub(section_addr).cast_signed()
        };
        if version == 3 {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&f.size.to_le_bytes());
            out.extend_from_slice(&fre_offsets[i].to_le_bytes());
        } else {
            out.extend_from_slice(&(start as i32).to_le_bytes());
            out.extend_from_slice(&f.size.to_le_bytes());
            out.extend_from_slice(&fre_offsets[i].to_le_bytes());
            out.extend_from_slice(&(f.fres.len() as u32).to_le_bytes());
            out.push(infos[i]);
            if version == 2 {
                out.push(f.mask.unwrap_or(0));
                out.extend_from_slice(&[0, 0]);
            }
        }
    }
    out.extend_from_slice(&fre_bytes);
    out
}

/// The model's answer for `pc`: (function start, row) by a linear scan.
pub fn model_find(funcs: &[ModelFunc], pc: u64, v1_block: u32) -> Option<(u64, ModelFre)> {
    let f = funcs
        .iter()
        .find(|f| f.start <= pc && pc < f.start + u64::from(f.size))?;
    let mut off = (pc - f.start) as u32;
    if let Some(rep) = f.mask {
        let block = if rep == 0 { v1_block } else { u32::from(rep) };
        off %= block;
    }
    f.fres
        .iter()
        .rev()
        .find(|r| r.start <= off)
        .map(|r| (f.start, r.clone()))
}
