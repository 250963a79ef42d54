//! The part of a thread's TLS the write path starts from: the slot of
//! buffer 0, and the address of the thread's table of the other slots.
//!
//! By default the block is a `thread_local!`. In an executable the linker
//! turns its accesses into one load relative to the thread pointer; in a
//! shared object (the C ABI library, the trace runtime) each is a call to
//! `__tls_get_addr`, which a record's stores wait for, and which makes
//! the code the write path is inlined into save registers for the call.
//!
//! A program that is loaded with the process (the trace runtime, which
//! is preloaded) can instead provide the block in its own initial-exec
//! TLS ([`provide_thread_block`]): the write path then reaches it as the
//! thread pointer plus a fixed offset, and [`FillBuffer::write_with_provided`]
//! calls nothing at all (on a traced call the difference measured 2.5 ns,
//! BENCHMARKS.md, issue 16), and buffer 0 may have a writer that makes
//! the rest of its checks once (`block_writer.rs`). This crate declares no initial-exec TLS of
//! its own: a shared object that has any must have all its TLS in the
//! C library's small static reserve when it is loaded with `dlopen`, and
//! the C ABI library's (2 KiB) does not fit there.
//!
//! [`FillBuffer::write_with_provided`]: super::FillBuffer::write_with_provided

use super::slot::Slot;
use super::MAX_BUFFERS;
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// The block.
#[repr(C)]
pub(crate) struct FastTls {
    /// The slot of buffer 0.
    pub(crate) first: Slot,
    /// The thread's table of the slots of buffers 1 and up, once looked
    /// up (null before).
    pub(crate) rest: Cell<*const [Slot; MAX_BUFFERS - 1]>,
}

impl FastTls {
    /// A block as it starts: all zero bytes, as a provided block starts.
    pub(crate) const fn new() -> FastTls {
        FastTls {
            first: Slot::new(),
            rest: Cell::new(std::ptr::null()),
        }
    }
}

/// Bytes of the per-thread block a program may provide.
pub const THREAD_BLOCK_SIZE: usize = std::mem::size_of::<FastTls>();

/// Alignment of the per-thread block a program may provide.
pub const THREAD_BLOCK_ALIGN: usize = std::mem::align_of::<FastTls>();

thread_local! {
    /// The block, where no program provides one.
    static OWN: FastTls = const { FastTls::new() };
}

/// The provided block's offset from the thread pointer; [`NONE`] once
/// the first buffer was made without one; [`UNDECIDED`] before either.
/// One word, so that providing a block and making the first buffer
/// cannot interleave: whichever comes first decides for the process.
static PROVIDED: AtomicIsize = AtomicIsize::new(UNDECIDED);
/// No block is provided (nor will be).
const NONE: isize = 0;
/// Neither a block was provided nor a buffer made yet (odd, so never an
/// aligned offset).
const UNDECIDED: isize = 1;

/// Why a thread block was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProvideError {
    /// A fill buffer exists, or existed: its threads' slots are in the
    /// blocks of `thread_local!`.
    #[error("a fill buffer was made before the thread block was provided")]
    TooLate,
    /// The offset is 0, or not a multiple of [`THREAD_BLOCK_ALIGN`].
    #[error("a thread block at offset {0} from the thread pointer cannot be one")]
    BadOffset(isize),
    /// Only x86-64 with glibc takes one.
    #[error("thread blocks are taken on x86-64 Linux with glibc only")]
    Unsupported,
}

/// Makes the fill buffers keep buffer 0's slot, and the address of each
/// thread's table, in a block the program provides: [`THREAD_BLOCK_SIZE`]
/// bytes of initial-exec TLS, aligned to [`THREAD_BLOCK_ALIGN`], found
/// `offset` bytes from the thread pointer (what the `@gottpoff` GOT entry
/// of its symbol holds). Refused once a fill buffer was made (or while
/// the first one is being made), and after a block was provided.
///
/// # Safety
/// For the life of the process, in every thread (those running now and
/// those to come), the `THREAD_BLOCK_SIZE` bytes at the thread pointer
/// plus `offset` must be that thread's own, zeroed when the thread
/// started, and used by nothing else: the `.tbss` of a module loaded with
/// the program (not by `dlopen`).
pub unsafe fn provide_thread_block(offset: isize) -> Result<(), ProvideError> {
    if !cfg!(all(
        target_arch = "x86_64",
        target_os = "linux",
        target_env = "gnu",
        not(miri)
    )) {
        return Err(ProvideError::Unsupported);
    }
    if offset == NONE || offset.rem_euclid(THREAD_BLOCK_ALIGN.cast_signed()) != 0 {
        return Err(ProvideError::BadOffset(offset));
    }
    PROVIDED
        .compare_exchange(UNDECIDED, offset, Ordering::AcqRel, Ordering::Acquire)
        .map(|_| ())
        .map_err(|_| ProvideError::TooLate)
}

/// A buffer is being made: from now on no block can be provided. The
/// offset of the provided block, or 0, which the buffer keeps.
pub(crate) fn decide() -> isize {
    match PROVIDED.compare_exchange(UNDECIDED, NONE, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => NONE,
        Err(decided) => decided,
    }
}

/// The calling thread's block: the provided one, else its `thread_local!`.
#[inline(always)]
pub(crate) fn block() -> *const FastTls {
    match provided() {
        Some(block) => block,
        None => OWN.with(std::ptr::from_ref),
    }
}

/// The calling thread's provided block, if a program provided one: the
/// thread pointer plus its offset, with no call.
#[inline(always)]
pub(crate) fn provided() -> Option<*const FastTls> {
    provided_at(provided_offset())
}

/// The provided block's offset from the thread pointer (0: none).
pub(crate) fn provided_offset() -> isize {
    match PROVIDED.load(Ordering::Acquire) {
        UNDECIDED => NONE,
        offset => offset,
    }
}

/// The calling thread's block at `offset` from the thread pointer (what
/// [`provided_offset`] gave), if there is one.
#[inline(always)]
pub(crate) fn provided_at(offset: isize) -> Option<*const FastTls> {
    if offset == 0 {
        return None;
    }
    Some(thread_pointer().wrapping_add_signed(offset) as *const FastTls)
}

/// The calling thread's block at `offset` from the thread pointer, where
/// the caller knows `offset` is a provided block's (not 0).
#[inline(always)]
pub(crate) fn provided_at_known(offset: isize) -> *const FastTls {
    thread_pointer().wrapping_add_signed(offset) as *const FastTls
}

/// The thread pointer (x86-64: the word at `%fs:0` is its own address,
/// per the TLS ABI).
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri)))]
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the first word of the thread control block, which
    // every thread has; touches nothing else.
    unsafe {
        core::arch::asm!(
            "mov {tp}, qword ptr fs:[0]",
            tp = out(reg) tp,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    tp
}

/// No thread block is ever provided here.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri))))]
#[inline(always)]
fn thread_pointer() -> usize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// A provided block starts as zero bytes: that must be what
    /// `FastTls::new()` is.
    #[test]
    fn a_zeroed_block_is_a_new_one() {
        // SAFETY: every field of FastTls (atomics, pointers, a bool, a
        // Cell of a pointer) is valid as zero bytes.
        let zeroed: FastTls = unsafe { std::mem::MaybeUninit::zeroed().assume_init() };
        let new = FastTls::new();
        assert_eq!(format!("{:?}", zeroed.first), format!("{:?}", new.first));
        assert_eq!(zeroed.rest.get(), new.rest.get());
    }

    /// Each thread has its own block, starting as new, at an address
    /// that stays put.
    #[test]
    fn each_thread_has_its_own_block() {
        let mine = block();
        assert_eq!(mine, block());
        // SAFETY: this thread's block.
        unsafe { (*mine).first.reserved.store(48, Ordering::Relaxed) };
        let (theirs, reserved) = std::thread::spawn(|| {
            let b = block();
            // SAFETY: that thread's block.
            (b as usize, unsafe {
                (*b).first.reserved.load(Ordering::Relaxed)
            })
        })
        .join()
        .unwrap();
        assert_ne!(theirs, mine as usize);
        assert_eq!(reserved, 0);
        // SAFETY: this thread's block.
        unsafe { (*mine).first.reserved.store(0, Ordering::Relaxed) };
    }

    #[test]
    fn a_block_is_refused_at_offset_0_or_misaligned() {
        // SAFETY: refused before anything is taken.
        unsafe {
            assert_eq!(provide_thread_block(0), Err(ProvideError::BadOffset(0)));
            assert_eq!(provide_thread_block(-3), Err(ProvideError::BadOffset(-3)));
        }
        assert!(provided().is_none());
    }

    /// Once a buffer was made (its threads' slots are in their
    /// `thread_local!` blocks), no block is taken.
    #[test]
    fn a_block_is_refused_once_a_buffer_was_made() {
        let _buffer = super::super::FillBuffer::circular(4096, 16).unwrap();
        // SAFETY: refused (a buffer was made), so nothing is taken.
        let refused = unsafe { provide_thread_block(-64) };
        assert_eq!(refused, Err(ProvideError::TooLate));
        assert!(provided().is_none());
    }
}
