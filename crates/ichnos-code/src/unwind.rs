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

/// Rules recently found, by address: a profiler unwinds the same return
/// addresses over and over, and a hit costs one load instead of two binary
/// searches. Direct-mapped, 512 entries of 16 bytes; only rows are kept
/// (never "no row", which a JIT may yet fill), and everything is forgotten
/// when the rules' [`FindRow::generation`] changes.
///
/// Each entry also remembers the slot its caller's row was in the last time
/// it was used. Samples repeat the same call chains, so the walk follows
/// those links from entry to entry and only checks each guess against the
/// return address it loads; the hash of a return address, which would have
/// to wait for that load, is computed only when a guess is wrong. Each
/// frame then waits for one load, not three.
#[derive(Clone)]
pub struct UnwindCache {
    entries: Box<[CacheEntry; CACHE_SLOTS]>,
    generation: Option<u64>,
    hits: u64,
    misses: u64,
}

const CACHE_SLOTS: usize = 512;

/// What a step needs of a row (its range is not needed once the address
/// is known to be in it): 16 bytes, four to a cache line. Only rows whose
/// return address is at CFA−8 (every x86-64 row in practice) and whose
/// saved frame pointer lies within 128 bytes of the CFA are cached.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct CacheEntry {
    /// Lookup address + 1 (a caller's return address); 0 marks an empty
    /// slot.
    key: u64,
    cfa_off: i32,
    fp_off: i8,
    /// The row's `info` bits, with the row's source in bits 4–6.
    bits: u8,
    /// The slot the caller's row was found in when this entry was last
    /// used: the guess for the next frame.
    next: u16,
}

const SOURCE_SHIFT: u32 = 4;
const SOURCE_MASK: u8 = 0x70;
const _: () = assert!(crate::row::ROW_KNOWN_BITS & SOURCE_MASK == 0);

/// An empty slot. Its key, 0, is also the key of an instruction pointer of
/// `u64::MAX` (corrupt registers); marked unexpressible, it sends such a
/// frame to the general step, which finds no row there either.
const EMPTY: CacheEntry = CacheEntry {
    key: 0,
    cfa_off: 0,
    fp_off: 0,
    bits: ROW_UNEXPRESSIBLE,
    next: 0,
};

impl std::fmt::Debug for UnwindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnwindCache")
            .field("hits", &self.hits)
            .field("misses", &self.misses)
            .finish_non_exhaustive()
    }
}

impl Default for UnwindCache {
    fn default() -> Self {
        Self::new()
    }
}

impl UnwindCache {
    /// An empty cache (8 KiB).
    #[must_use]
    pub fn new() -> Self {
        Self {
            entries: Box::new([EMPTY; CACHE_SLOTS]),
            generation: None,
            hits: 0,
            misses: 0,
        }
    }

    /// Lookups answered from the cache and not, since it was made.
    #[must_use]
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.misses)
    }

    /// The slot of `key` (a lookup address + 1).
    #[inline]
    fn slot(key: u64) -> usize {
        // Return addresses differ in their low bits; fold in some higher
        // ones so that two libraries' addresses spread too.
        ((key ^ (key >> 9)) as usize) & (CACHE_SLOTS - 1)
    }
}

/// As [`unwind_into`], keeping found rules in `cache` across calls.
pub fn unwind_cached<R: FindRow + ?Sized, M: Memory + ?Sized>(
    rules: &R,
    regs: Regs,
    stack: &[u8],
    memory: &mut M,
    options: &UnwindOptions,
    cache: &mut UnwindCache,
    frames: &mut Vec<Frame>,
) -> StopReason {
    let generation = rules.generation();
    if generation.is_none() || generation != cache.generation {
        cache.entries.fill(EMPTY);
        cache.generation = generation;
    }
    let cacheable = generation.is_some();
    frames.clear();
    // Room for a typical walk, so the fast loop's pushes do not grow it.
    frames.reserve(options.max_frames.min(256));
    let stack = Bytes {
        addr: regs.sp,
        data: stack,
    };
    let mut reader = Reader {
        stack,
        memory,
        cfi_regs: None,
    };
    // The first frame is looked up at its own address, so its key is
    // IP + 1; a caller's is its return address.
    let key = regs.ip.wrapping_add(1);
    let mut walk = Walk {
        frame: Frame {
            ip: regs.ip,
            sp: regs.sp,
            kind: FrameKind::Registers,
        },
        fp: regs.fp,
        key,
        prev: UnwindCache::slot(key),
        guess: UnwindCache::slot(key),
    };
    let mut misses = 0u64;
    let stop = loop {
        let ended;
        (walk, ended) = fast_run(&mut cache.entries, &stack, walk, frames, options.max_frames);
        if let Some(stop) = ended {
            break stop;
        }
        // The general step, through the cache: any frame the fast loop
        // leaves (a miss, an unexpressible row, a slot beyond the stack
        // copy).
        if frames.len() >= options.max_frames {
            break StopReason::DepthLimit;
        }
        let Walk { frame, fp, key, .. } = walk;
        frames.push(frame);
        let pc = frame.lookup_address();
        let index = UnwindCache::slot(key);
        let slot = &mut cache.entries[index];
        let found = if slot.key == key && key != 0 {
            slot.lookup()
        } else {
            misses += 1;
            let found = rules.find_row(pc);
            if let (true, Lookup::Row(row, source)) = (cacheable, found) {
                if let Some(entry) = CacheEntry::new(key, &row, source) {
                    *slot = entry;
                }
            }
            found
        };
        let history = History {
            start: regs,
            frames,
        };
        match general_step(rules, found, frame, fp, &mut reader, options, &history) {
            Ok((caller, caller_fp)) => {
                walk = Walk {
                    frame: caller,
                    fp: caller_fp,
                    // A caller's return address; an interrupted frame's
                    // instruction pointer + 1 (it is looked up as is).
                    key: caller.lookup_address().wrapping_add(1),
                    prev: index,
                    guess: usize::from(cache.entries[index].next) & (CACHE_SLOTS - 1),
                };
            }
            Err(stop) => break stop,
        }
    };
    cache.hits += frames.len() as u64 - misses;
    cache.misses += misses;
    stop
}

/// Where the fast loop stands: a frame not yet pushed, its frame pointer
/// and cache key, the slot of the frame it was found from, and the guess
/// at its own slot (the other's `next`).
#[derive(Clone, Copy)]
struct Walk {
    frame: Frame,
    fp: u64,
    key: u64,
    prev: usize,
    guess: usize,
}

/// Steps while rows are cached and expressible and their slots lie in the
/// stack copy; returns at the first frame that needs the general step (not
/// yet pushed), or with the reason the walk ended at a cached row (the
/// last frame pushed), decided as the general step decides it.
#[inline]
fn fast_run(
    entries: &mut [CacheEntry; CACHE_SLOTS],
    stack: &Bytes<'_>,
    mut walk: Walk,
    frames: &mut Vec<Frame>,
    max_frames: usize,
) -> (Walk, Option<StopReason>) {
    let mut index = walk.guess;
    while frames.len() < max_frames {
        let mut e = entries[index];
        if e.key != walk.key {
            // A wrong guess: look the address up and remember where it was.
            index = UnwindCache::slot(walk.key);
            e = entries[index];
            if e.key != walk.key {
                break;
            }
            entries[walk.prev].next = index as u16;
        }
        if e.bits & ROW_UNEXPRESSIBLE != 0 {
            break;
        }
        if e.bits & ROW_OUTERMOST != 0 {
            frames.push(walk.frame);
            return (walk, Some(StopReason::Outermost));
        }
        let base = if e.bits & ROW_CFA_BASE_SP != 0 {
            walk.frame.sp
        } else {
            walk.fp
        };
        let cfa = base.wrapping_add_signed(i64::from(e.cfa_off));
        let Some(ra) = stack.u64_at(cfa.wrapping_add_signed(i64::from(X86_64_RA_OFFSET))) else {
            break;
        };
        let fp_slot = cfa.wrapping_add_signed(i64::from(e.fp_off));
        let caller_fp = if e.fp_off == 0 || saved_below_sp(fp_slot, walk.frame.sp) {
            walk.fp
        } else {
            match stack.u64_at(fp_slot) {
                Some(value) => value,
                None => break,
            }
        };
        frames.push(walk.frame);
        if ra == 0 {
            return (walk, Some(StopReason::Outermost));
        }
        if cfa <= walk.frame.sp {
            return (walk, Some(StopReason::Loop));
        }
        walk.frame = Frame {
            ip: ra,
            sp: cfa,
            kind: FrameKind::Row(e.source()),
        };
        walk.fp = caller_fp;
        walk.key = ra;
        walk.prev = index;
        index = usize::from(e.next) & (CACHE_SLOTS - 1);
    }
    walk.guess = index;
    (walk, None)
}

impl CacheEntry {
    /// The entry for `row`, if the cache can hold it.
    fn new(key: u64, row: &crate::row::UnwindRow, source: RowSource) -> Option<Self> {
        if row.ra_off != 0 && row.ra_off != X86_64_RA_OFFSET {
            return None;
        }
        let source = match source {
            RowSource::Sframe => 0,
            RowSource::EhFrame => 1,
            RowSource::Jit => 2,
            RowSource::None => 3,
            RowSource::DebugFrame => 4,
            RowSource::GoTable => 5,
        };
        Some(Self {
            key,
            cfa_off: row.cfa_off,
            fp_off: i8::try_from(row.fp_off).ok()?,
            bits: (row.info & crate::row::ROW_KNOWN_BITS) | (source << SOURCE_SHIFT),
            next: 0,
        })
    }

    fn source(&self) -> RowSource {
        match (self.bits & SOURCE_MASK) >> SOURCE_SHIFT {
            0 => RowSource::Sframe,
            1 => RowSource::EhFrame,
            2 => RowSource::Jit,
            4 => RowSource::DebugFrame,
            5 => RowSource::GoTable,
            _ => RowSource::None,
        }
    }

    fn lookup(&self) -> Lookup {
        let row = crate::row::UnwindRow {
            size: 0,
            ip_off: 0,
            cfa_off: self.cfa_off,
            ra_off: X86_64_RA_OFFSET,
            fp_off: i32::from(self.fp_off),
            info: self.bits & crate::row::ROW_KNOWN_BITS,
        };
        Lookup::Row(row, self.source())
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

#[cfg(test)]
mod tests;
