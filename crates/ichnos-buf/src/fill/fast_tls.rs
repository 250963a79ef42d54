//! The part of a thread's TLS that the write path reaches at a fixed
//! offset from the thread pointer: the slot of buffer 0, and the address
//! of the thread's table of the other slots.
//!
//! Rust's `thread_local!` in a shared object (the trace runtime
//! `libichnos_preload.so`, the C ABI library) takes the general-dynamic
//! model: every access calls `__tls_get_addr`, and reaching a slot
//! through a pointer kept in TLS is one more load that the record's
//! stores wait for. Stable Rust cannot ask for another model, so this
//! block is declared in assembly and its address taken with the
//! initial-exec sequence: the thread pointer plus the block's offset from
//! it, which the dynamic linker writes into a GOT entry. On a traced call
//! the difference measured 2.5 ns (BENCHMARKS.md, issue 16).
//!
//! The block is small (one slot and a pointer, under 100 bytes): a
//! shared object loaded by `dlopen` takes it from the C library's reserve
//! of static TLS, which is there for such blocks but is not large
//! (glibc's optional part is 512 bytes). That is why only buffer 0's slot
//! lives here and not the whole table.
//!
//! The block starts zeroed in every thread, which is a valid [`FastTls`]
//! (an unused slot, no table yet). A forked child's thread has the same
//! TLS at the same addresses.
//!
//! Elsewhere (another architecture, a C library other than glibc, Miri)
//! the block is a `thread_local!`. musl's `dlopen` refuses a library
//! with initial-exec TLS outright, so the C ABI library could not be
//! loaded there.

use super::slot::Slot;
use super::MAX_BUFFERS;
use std::cell::Cell;

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
    /// A block as it starts: all zero bytes, as the assembly declares it.
    #[cfg_attr(
        all(
            target_arch = "x86_64",
            target_os = "linux",
            target_env = "gnu",
            not(miri)
        ),
        allow(dead_code)
    )]
    pub(crate) const fn new() -> FastTls {
        FastTls {
            first: Slot::new(),
            rest: Cell::new(std::ptr::null()),
        }
    }
}

#[cfg(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(miri)
))]
mod imp {
    use super::FastTls;

    // The block, in this object's TLS: global so that the code of every
    // codegen unit links to it, hidden so that a shared object does not
    // export it. The name carries a version: two copies of this crate
    // linked into one object clash on it at link time rather than share
    // it. `.tbss` is zero-filled, which is `FastTls::new()`.
    core::arch::global_asm!(
        ".pushsection .tbss.ichnos_buf_fill_fast_tls,\"awT\",@nobits",
        ".p2align {align}",
        ".globl ichnos_buf_fill_fast_tls_v1",
        ".hidden ichnos_buf_fill_fast_tls_v1",
        ".type ichnos_buf_fill_fast_tls_v1,@object",
        ".size ichnos_buf_fill_fast_tls_v1,{size}",
        "ichnos_buf_fill_fast_tls_v1:",
        ".zero {size}",
        ".popsection",
        size = const std::mem::size_of::<FastTls>(),
        align = const std::mem::align_of::<FastTls>().trailing_zeros(),
    );

    /// The calling thread's block.
    #[inline(always)]
    pub(crate) fn block() -> *const FastTls {
        let block: *const FastTls;
        // SAFETY: the initial-exec address of the TLS block declared
        // above: the thread pointer (the word at %fs:0 is its own
        // address, per the x86-64 TLS ABI) plus the block's offset from
        // it, from the GOT. Reads two words, writes none.
        unsafe {
            core::arch::asm!(
                "mov {b}, qword ptr [rip + ichnos_buf_fill_fast_tls_v1@GOTTPOFF]",
                "add {b}, qword ptr fs:[0]",
                b = out(reg) block,
                options(nostack, readonly, pure),
            );
        }
        block
    }
}

#[cfg(not(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(miri)
)))]
mod imp {
    use super::FastTls;

    thread_local! {
        static BLOCK: FastTls = const { FastTls::new() };
    }

    /// The calling thread's block.
    #[inline(always)]
    pub(crate) fn block() -> *const FastTls {
        BLOCK.with(std::ptr::from_ref)
    }
}

pub(crate) use imp::block;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    /// The assembly declares the block as zero bytes: a zeroed block must
    /// be what `FastTls::new()` makes.
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
}
