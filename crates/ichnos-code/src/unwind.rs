//! The unwinder: from user registers and a stack copy to return addresses.
//!
//! Each step finds the rule for the current address ([`FindRow`]), computes
//! the CFA from SP or FP, and loads the return address and, where saved,
//! the caller's frame pointer. Caller frames are looked up at their return
//! address minus one, so that a call at the very end of a function is
//! attributed to it. Where the row is unexpressible, the call-frame
//! information kept for it is evaluated ([`crate::cfi`]: signal
//! trampolines, CFAs read from memory); where there is no row, or that
//! evaluation fails, the frame-pointer chain is followed instead, if
//! allowed. Every walk ends with a [`StopReason`].
//!
//! This is the x86-64 unwinder: the return address is at CFA−8 unless the
//! row says otherwise, and the frame-pointer chain is `[rbp] = caller's rbp,
//! [rbp+8] = return address`.

use crate::cfi::{CfiError, CfiStep};
use crate::code_map::{FindRow, Lookup, RowSource};
use crate::memory::{Bytes, Memory};
use crate::row::{CfaBase, ROW_CFA_BASE_SP, ROW_OUTERMOST, ROW_UNEXPRESSIBLE};

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
    /// `rbx`, where known: the innermost frame's, from the sample. No row
    /// says where a frame saved it; a frame whose CFA lies at an offset
    /// from it (the dynamic loader's lazy-binding trampoline) has it
    /// found by evaluating the CFI of each frame below.
    pub bx: Option<u64>,
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
    /// Unwound by evaluating call-frame information no row could express
    /// (a CFA read from memory, a register restored by an expression).
    Cfi,
    /// The frame a signal interrupted, found through the signal
    /// trampoline's call-frame information: its `ip` is the interrupted
    /// instruction, not a return address.
    Interrupted,
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
    /// for callers, so the call instruction's function is named; the
    /// instruction pointer itself for the first frame and for a frame a
    /// signal interrupted.
    #[must_use]
    pub fn lookup_address(&self) -> u64 {
        match self.kind {
            FrameKind::Registers | FrameKind::Interrupted => self.ip,
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
    /// The frame pointer is too close to the top of the address space to
    /// hold a frame (corrupt registers). Rows whose addresses wrap stop the
    /// walk as [`StopReason::StackEnd`] or [`StopReason::Loop`] instead.
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
    let mut reader = Reader {
        stack: Bytes {
            addr: regs.sp,
            data: stack,
        },
        memory,
        cfi_regs: None,
    };
    let mut frame = Frame {
        ip: regs.ip,
        sp: regs.sp,
        kind: FrameKind::Registers,
    };
    let mut fp = regs.fp;
    loop {
        if frames.len() >= options.max_frames {
            return StopReason::DepthLimit;
        }
        frames.push(frame);
        let pc = frame.lookup_address();
        let history = History {
            start: regs,
            frames,
        };
        match general_step(
            rules,
            rules.find_row(pc),
            frame,
            fp,
            &mut reader,
            options,
            &history,
        ) {
            Ok((caller, caller_fp)) => {
                frame = caller;
                fp = caller_fp;
            }
            Err(stop) => return stop,
        }
    }
}

/// One step from `frame` given what is known at its lookup address
/// (`found`): the caller's frame and frame pointer, or why the walk ends.
#[inline]
fn general_step<R: FindRow + ?Sized, M: Memory + ?Sized>(
    rules: &R,
    found: Lookup,
    frame: Frame,
    fp: u64,
    reader: &mut Reader<'_, M>,
    options: &UnwindOptions,
    history: &History<'_>,
) -> Result<(Frame, u64), StopReason> {
    let pc = frame.lookup_address();
    let caller = match found {
        Lookup::Row(row, source) if !row.is_unexpressible() => {
            if row.is_outermost() {
                return Err(StopReason::Outermost);
            }
            step_by_row(&row, source, frame.sp, fp, reader)?
        }
        Lookup::Row(..) => match step_by_cfi(rules, pc, frame, fp, reader, history) {
            Some(step) => step?,
            None if options.frame_pointer_fallback => {
                step_by_frame_pointer(pc, frame.sp, fp, reader)?
            }
            None => return Err(StopReason::NoUnwindInfo { pc }),
        },
        _ if options.frame_pointer_fallback => step_by_frame_pointer(pc, frame.sp, fp, reader)?,
        _ => return Err(StopReason::NoUnwindInfo { pc }),
    };
    if caller.ra == 0 {
        return Err(StopReason::Outermost);
    }
    if caller.cfa <= frame.sp {
        return Err(StopReason::Loop);
    }
    let next = Frame {
        ip: caller.ra,
        sp: caller.cfa,
        kind: caller.kind,
    };
    Ok((next, caller.fp))
}

/// What one step learns about the caller.
struct Caller {
    /// The return address: the caller's instruction pointer.
    ra: u64,
    /// The CFA: the caller's stack pointer.
    cfa: u64,
    /// The caller's frame pointer.
    fp: u64,
    kind: FrameKind,
}

/// Reads from the stack copy first, then from memory.
struct Reader<'a, M: ?Sized> {
    stack: Bytes<'a>,
    memory: &'a mut M,
    /// The registers [`bx_by_cfi`] last found, and the frame (by its
    /// place in the walk) they are of: the next search goes on from
    /// there, not from the sample.
    cfi_regs: Option<(usize, Regs)>,
}

impl<M: Memory + ?Sized> Reader<'_, M> {
    #[inline]
    fn u64_at(&mut self, addr: u64) -> Result<u64, StopReason> {
        // One compare for the common case: the word lies in the stack copy.
        let off = addr.wrapping_sub(self.stack.addr);
        if let Some(word) = usize::try_from(off)
            .ok()
            .and_then(|off| self.stack.data.get(off..)?.first_chunk::<8>())
        {
            return Ok(u64::from_le_bytes(*word));
        }
        self.memory
            .read_u64(addr)
            .map_err(|_| StopReason::StackEnd { addr })
    }
}

/// Whether a register's save slot at `slot` lies below the frame's stack
/// pointer `sp`: the epilogue has popped it, so the register holds the
/// caller's value again. Unwind rows say where a register was saved from
/// the prologue to the end of the function (gcc notes no restore as an
/// epilogue pops), and a sample between the pop and the return would
/// read a slot the kernel's stack copy, which starts at `sp`, does not
/// hold.
#[inline]
pub(crate) fn saved_below_sp(slot: u64, sp: u64) -> bool {
    slot < sp
}

fn offset(base: u64, off: i32) -> Result<u64, StopReason> {
    base.checked_add_signed(i64::from(off))
        .ok_or(StopReason::BadAddress)
}

#[inline]
fn step_by_row<M: Memory + ?Sized>(
    row: &crate::row::UnwindRow,
    source: crate::code_map::RowSource,
    sp: u64,
    fp: u64,
    reader: &mut Reader<'_, M>,
) -> Result<Caller, StopReason> {
    let base = match row.cfa_base() {
        CfaBase::Sp => sp,
        CfaBase::Fp => fp,
    };
    // Wrapping arithmetic: an address that wrapped is caught where it is
    // used (it lies in no stack copy, no memory serves it, and a CFA that
    // wrapped below SP stops the walk as a loop), so the hot path carries
    // no overflow branches.
    let cfa = base.wrapping_add_signed(i64::from(row.cfa_off));
    let ra_off = if row.ra_off == 0 {
        X86_64_RA_OFFSET
    } else {
        row.ra_off
    };
    let ra = reader.u64_at(cfa.wrapping_add_signed(i64::from(ra_off)))?;
    let fp_slot = cfa.wrapping_add_signed(i64::from(row.fp_off));
    let caller_fp = if row.fp_off == 0 || saved_below_sp(fp_slot, sp) {
        fp
    } else {
        reader.u64_at(fp_slot)?
    };
    Ok(Caller {
        ra,
        cfa,
        fp: caller_fp,
        kind: FrameKind::Row(source),
    })
}

/// A step by the call-frame information kept for an unexpressible row:
/// `None` when there is none or it cannot be evaluated here (the caller
/// falls back to frame pointers), `Some(Err)` at the outermost frame.
#[cold]
fn step_by_cfi<R: FindRow + ?Sized, M: Memory + ?Sized>(
    rules: &R,
    pc: u64,
    frame: Frame,
    fp: u64,
    reader: &mut Reader<'_, M>,
    history: &History<'_>,
) -> Option<Result<Caller, StopReason>> {
    let mut regs = Regs {
        ip: frame.ip,
        sp: frame.sp,
        fp,
        // The innermost frame's is the sample's; a caller's is found
        // below if its rules need it.
        bx: if history.frames.len() <= 1 {
            history.start.bx
        } else {
            None
        },
    };
    let copy_end = reader
        .stack
        .addr
        .saturating_add(reader.stack.data.len() as u64);
    let mut evaluated = {
        let mut read = |addr| reader.u64_at(addr).ok();
        rules.evaluate_cfi(pc, regs, &mut read)?
    };
    if let Err(CfiError::UnknownRegister { register, .. }) = evaluated {
        if register == gimli::X86_64::RBX.0 && regs.bx.is_none() {
            regs.bx = bx_by_cfi(rules, history, reader);
            if regs.bx.is_some() {
                let mut read = |addr| reader.u64_at(addr).ok();
                evaluated = rules.evaluate_cfi(pc, regs, &mut read)?;
            }
        }
    }
    match evaluated {
        // A read just past the stack copy's end is the walk running off
        // the copy, as a row's would be: not a reason to guess by frame
        // pointers (a copy cut short is then known to be too short). One
        // far beyond is a bad pointer, not the stack.
        Err(CfiError::Unreadable { addr, .. })
            if copy_end > frame.sp
                && (copy_end..copy_end.saturating_add(PAST_COPY)).contains(&addr) =>
        {
            Some(Err(StopReason::StackEnd { addr }))
        }
        Ok(CfiStep::Outermost) => Some(Err(StopReason::Outermost)),
        Ok(CfiStep::Caller { regs, interrupted }) => Some(Ok(Caller {
            ra: regs.ip,
            cfa: regs.sp,
            fp: regs.fp,
            kind: if interrupted {
                FrameKind::Interrupted
            } else {
                FrameKind::Cfi
            },
        })),
        Err(_) => None,
    }
}

/// How far past the stack copy a read the CFI asks for is still taken
/// for the stack's (the kernel copies at most 64 KiB; stacks are read on
/// up to 1 MiB past it).
const PAST_COPY: u64 = 2 << 20;

/// The walk so far, for a step whose rules need more than it carries: the
/// sample's registers and the frames found (the last is the one being
/// stepped from).
struct History<'a> {
    start: Regs,
    frames: &'a [Frame],
}

/// `rbx` in the last of the walk's frames, found by evaluating the CFI of
/// each frame below it from the sample's registers (rows say nothing of
/// `rbx`): `None` where a frame has no CFI (SFrame, JIT code), its CFI
/// does not lead to the frame the walk found next, or it loses `rbx`.
#[cold]
fn bx_by_cfi<R: FindRow + ?Sized, M: Memory + ?Sized>(
    rules: &R,
    history: &History<'_>,
    reader: &mut Reader<'_, M>,
) -> Option<u64> {
    // From the last frame found before, in this walk.
    let (first, mut regs) = match reader.cfi_regs {
        Some((at, regs)) if at < history.frames.len() => (at, regs),
        _ => (0, history.start),
    };
    for pair in history.frames[first..].windows(2) {
        let (frame, next) = (pair[0], pair[1]);
        regs.bx?;
        let here = Regs {
            ip: frame.ip,
            sp: frame.sp,
            ..regs
        };
        let mut read = |addr| reader.u64_at(addr).ok();
        let Ok(CfiStep::Caller { regs: caller, .. }) =
            rules.evaluate_cfi(frame.lookup_address(), here, &mut read)?
        else {
            return None;
        };
        if (caller.ip, caller.sp) != (next.ip, next.sp) {
            return None;
        }
        regs = caller;
    }
    reader.cfi_regs = Some((history.frames.len().saturating_sub(1), regs));
    regs.bx
}

/// The frame-pointer chain: `[fp]` is the caller's FP, `[fp + 8]` the
/// return address, and the caller's SP is `fp + 16`.
fn step_by_frame_pointer<M: Memory + ?Sized>(
    pc: u64,
    sp: u64,
    fp: u64,
    reader: &mut Reader<'_, M>,
) -> Result<Caller, StopReason> {
    if fp <= sp || !fp.is_multiple_of(8) {
        return Err(StopReason::NoUnwindInfo { pc });
    }
    let ra = reader.u64_at(offset(fp, 8)?)?;
    let caller_fp = reader.u64_at(fp)?;
    Ok(Caller {
        ra,
        cfa: offset(fp, 16)?,
        fp: caller_fp,
        kind: FrameKind::FramePointer,
    })
}

mod cache;
#[cfg(test)]
mod tests;

pub use cache::{unwind_cached, UnwindCache};
