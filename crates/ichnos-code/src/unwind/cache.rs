//! The unwinder's cache of rows by address, and the walk that follows it
//! frame to frame ([`unwind_cached`]), stepping through the general step
//! of `unwind.rs` where the cache cannot answer.

use super::{
    general_step, saved_below_sp, Bytes, FindRow, Frame, FrameKind, History, Lookup, Memory,
    Reader, Regs, RowSource, StopReason, UnwindOptions, ROW_CFA_BASE_SP, ROW_OUTERMOST,
    ROW_UNEXPRESSIBLE, X86_64_RA_OFFSET,
};

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
pub(super) struct CacheEntry {
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
    pub(super) fn new(key: u64, row: &crate::row::UnwindRow, source: RowSource) -> Option<Self> {
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

    pub(super) fn lookup(&self) -> Lookup {
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
