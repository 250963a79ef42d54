//! The fill buffers' per-thread block in this library's initial-exec TLS
//! (`ichnos_buf::fill::provide_thread_block`): the trace hooks' write
//! path then reaches its slot as the thread pointer plus a fixed offset,
//! and calls nothing. The library is preloaded, so it is loaded with the
//! program and its TLS is in every thread's static block, as initial-exec
//! TLS requires. Stable Rust cannot choose a TLS model, so the block is
//! declared in assembly (its `.tbss` starts zeroed, which is an empty
//! block).

#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
mod imp {
    use ichnos_buf::fill::{THREAD_BLOCK_ALIGN, THREAD_BLOCK_SIZE};

    // The block: global so that the code of every codegen unit links to
    // it, hidden so that the library does not export it.
    core::arch::global_asm!(
        ".pushsection .tbss.ichnos_preload_thread_block,\"awT\",@nobits",
        ".p2align {align}",
        ".globl ichnos_preload_thread_block",
        ".hidden ichnos_preload_thread_block",
        ".type ichnos_preload_thread_block,@object",
        ".size ichnos_preload_thread_block,{size}",
        "ichnos_preload_thread_block:",
        ".zero {size}",
        ".popsection",
        size = const THREAD_BLOCK_SIZE,
        align = const THREAD_BLOCK_ALIGN.trailing_zeros(),
    );

    /// Hands the block to the fill buffers; false if they do not take it
    /// (every record then takes the buffers' slow path, which finds the
    /// slot through `thread_local!`).
    #[must_use]
    pub(crate) fn provide() -> bool {
        let offset: isize;
        // SAFETY: reads the GOT entry the dynamic linker filled with the
        // block's offset from the thread pointer (the initial-exec model).
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + ichnos_preload_thread_block@GOTTPOFF]",
                o = out(reg) offset,
                options(nostack, preserves_flags, readonly, pure),
            );
        }
        // SAFETY: the block is this library's own initial-exec TLS,
        // THREAD_BLOCK_SIZE zeroed bytes aligned as asked in every
        // thread, used by nothing else, for the life of the process (the
        // library is never unloaded: it is preloaded).
        unsafe { ichnos_buf::fill::provide_thread_block(offset) }.is_ok()
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
mod imp {
    /// No block here (the hooks write through `write_with`): nothing to
    /// refuse.
    pub(crate) fn provide() -> bool {
        true
    }
}

pub(crate) use imp::provide;
