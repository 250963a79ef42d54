//! The unwinder: from user registers and a stack copy to return addresses.
//!
//! Each step finds the rule for the current address ([`FindRow`]), computes
//! the CFA from SP or FP, and loads the return address and, where saved,
//! the caller's frame pointer. Caller frames are looked up at their return
//! address minus one, so that a call at the very end of a function is
//! attributed to it. Where no row exists (or the row is unexpressible) the
//! frame-pointer chain is followed instead, if allowed. Every walk ends with
//! a [`StopReason`].
//!
//! This is the x86-64 unwinder: the return address is at CFA−8 unless the
//! row says otherwise, and the frame-pointer chain is `[rbp] = caller's rbp,
//! [rbp+8] = return address`.

use crate::code_map::{FindRow, Lookup, RowSource};
use crate::memory::{Bytes, Memory};
use crate::row::CfaBase;

/// x86-64: the return address sits just below the CFA.
const X86_64_RA_OFFSET: i32 = -8;

/// The registers an unwind starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Instruction pointer (`rip`).
    pub ip: u64,
    /// Stack pointer (`rsp`).
    pub sp: u64,
    /// Frame pointer (`rbp`).
    pub fp: u64,
}

/// How a frame's address was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// The first frame: the instruction pointer from the registers.
    Registers,
    /// Unwound with a row from this source.
    Row(RowSource),
    /// Unwound by following the frame-pointer chain.
    FramePointer,
}

/// One frame of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The instruction pointer (frame 0) or the return address (callers).
    pub ip: u64,
    /// The stack pointer in this frame.
    pub sp: u64,
    /// How this frame was found.
    pub kind: FrameKind,
}

impl Frame {
    /// The address to look up for this frame: a return address minus one
    /// for callers, so the call instruction's function is named.
    #[must_use]
    pub fn lookup_address(&self) -> u64 {
        match self.kind {
            FrameKind::Registers => self.ip,
            _ => self.ip.saturating_sub(1),
        }
    }
}

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The outermost frame was reached (a row says the return address is
    /// undefined, or it is 0).
    Outermost,
    /// The caller's stack pointer did not move up: a loop or corrupt data.
    Loop,
    /// The frame limit was reached.
    DepthLimit,
    /// A value needed lay beyond the stack copy and memory could not supply
    /// it.
    StackEnd {
        /// The address that could not be read.
        addr: u64,
    },
    /// No unwind information for the address and no usable frame pointer.
    NoUnwindInfo {
        /// The address looked up.
        pc: u64,
    },
    /// An address computation overflowed (corrupt registers or rows).
    BadAddress,
}

/// Options of a walk.
#[derive(Clone, Copy, Debug)]
pub struct UnwindOptions {
    /// At most this many frames, the first included.
    pub max_frames: usize,
    /// Follow the frame-pointer chain where no row applies.
    pub frame_pointer_fallback: bool,
}

impl Default for UnwindOptions {
    fn default() -> Self {
        Self {
            max_frames: 256,
            frame_pointer_fallback: true,
        }
    }
}

/// The frames of a walk and why it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwind {
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// Why the walk ended.
    pub stop: StopReason,
}

/// Walks the stack from `regs`. `stack` is a copy of the stack starting at
/// `regs.sp` (as perf delivers it); anything else is read from `memory`.
pub fn unwind<R: FindRow + ?Sized, M: Memory + ?Sized>(
    rules: &R,
    regs: Regs,
    stack: &[u8],
    memory: &mut M,
    options: &UnwindOptions,
) -> Unwind {
    let mut frames = Vec::new();
    let stop = unwind_into(rules, regs, stack, memory, options, &mut frames);
    Unwind { frames, stop }
}

/// As [`unwind`], appending to `frames` (cleared first) so a caller can
/// reuse one allocation for many samples.
pub fn unwind_into<R: FindRow + ?Sized, M: Memory + ?Sized>(
    rules: &R,
    regs: Regs,
    stack: &[u8],
    memory: &mut M,
    options: &UnwindOptions,
    frames: &mut Vec<Frame>,
) -> StopReason {
    frames.clear();
    let stack = Bytes {
        addr: regs.sp,
        data: stack,
    };
    let mut read = |addr: u64| -> Result<u64, StopReason> {
        if let Some(v) = stack.u64_at(addr) {
            return Ok(v);
        }
        memory
            .read_u64(addr)
            .map_err(|_| StopReason::StackEnd { addr })
    };
    let (mut ip, mut sp, mut fp) = (regs.ip, regs.sp, regs.fp);
    let mut kind = FrameKind::Registers;
    loop {
        if frames.len() >= options.max_frames {
            return StopReason::DepthLimit;
        }
        let frame = Frame { ip, sp, kind };
        frames.push(frame);
        let pc = frame.lookup_address();
        let step = match rules.find_row(pc) {
            Lookup::Row(row, source) if !row.is_unexpressible() => {
                if row.is_outermost() {
                    return StopReason::Outermost;
                }
                let base = match row.cfa_base() {
                    CfaBase::Sp => sp,
                    CfaBase::Fp => fp,
                };
                let Some(cfa) = base.checked_add_signed(i64::from(row.cfa_off)) else {
                    return StopReason::BadAddress;
                };
                let ra_off = if row.ra_off == 0 {
                    X86_64_RA_OFFSET
                } else {
                    row.ra_off
                };
                let Some(ra_at) = cfa.checked_add_signed(i64::from(ra_off)) else {
                    return StopReason::BadAddress;
                };
                let ra = match read(ra_at) {
                    Ok(v) => v,
                    Err(stop) => return stop,
                };
                let new_fp = if row.fp_off == 0 {
                    fp
                } else {
                    let Some(fp_at) = cfa.checked_add_signed(i64::from(row.fp_off)) else {
                        return StopReason::BadAddress;
                    };
                    match read(fp_at) {
                        Ok(v) => v,
                        Err(stop) => return stop,
                    }
                };
                Some((ra, cfa, new_fp, FrameKind::Row(source)))
            }
            _ => None,
        };
        let (ra, new_sp, new_fp, new_kind) = match step {
            Some(step) => step,
            None => {
                // The frame-pointer chain: [fp] = caller's fp, [fp+8] = RA.
                if !options.frame_pointer_fallback || fp <= sp || fp % 8 != 0 {
                    return StopReason::NoUnwindInfo { pc };
                }
                let (Some(ra_at), Some(new_sp)) = (fp.checked_add(8), fp.checked_add(16)) else {
                    return StopReason::BadAddress;
                };
                let ra = match read(ra_at) {
                    Ok(v) => v,
                    Err(stop) => return stop,
                };
                let new_fp = match read(fp) {
                    Ok(v) => v,
                    Err(stop) => return stop,
                };
                (ra, new_sp, new_fp, FrameKind::FramePointer)
            }
        };
        if ra == 0 {
            return StopReason::Outermost;
        }
        if new_sp <= sp {
            return StopReason::Loop;
        }
        ip = ra;
        sp = new_sp;
        fp = new_fp;
        kind = new_kind;
    }
}
