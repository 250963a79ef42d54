//! `_exit` and `_Exit`: a process that ends through them runs no `atexit`
//! hook, so the runtime's own wrappers hand the trace over first (the
//! mappings, then every thread's buffer or ring), and then call the C
//! library's. `exit` itself reaches `_exit` inside the C library, past
//! these wrappers, after its hooks have done the same.
//!
//! A child of `vfork` shares its parent's memory until it execs or
//! exits: its `_exit` must not flush the parent's buffers, so the
//! wrappers do their work only in the process the runtime set up (or a
//! child of `fork`, which the runtime knows).

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The process the runtime's buffers are of.
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Notes the calling process as the buffers' owner (at the start, and in
/// the child of a fork).
pub(crate) fn own() {
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::Relaxed);
}

/// The trace, handed over before the process ends without its hooks.
fn hand_over() {
    // SAFETY: getpid has no preconditions (a real system call: a vfork
    // child sees its own id).
    if !crate::tracing() || unsafe { libc::getpid() } != OWNER.load(Ordering::Relaxed) {
        return;
    }
    crate::end_of_process();
}

/// The C library's function `name`, found on first use.
fn real(cache: &AtomicUsize, name: &std::ffi::CStr) -> extern "C" fn(c_int) -> ! {
    let mut found = cache.load(Ordering::Relaxed);
    if found == 0 {
        // SAFETY: dlsym with a NUL-terminated name.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if found == 0 {
            // SAFETY: without the C library's own, the system call does
            // what it would.
            unsafe { libc::syscall(libc::SYS_exit_group, 1) };
        }
        cache.store(found, Ordering::Relaxed);
    }
    // SAFETY: dlsym's address of this very function of the C library,
    // which has this signature.
    unsafe { std::mem::transmute::<usize, extern "C" fn(c_int) -> !>(found) }
}

/// The C library's `_exit`, after the trace is handed over.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    hand_over();
    real(&REAL, c"_exit")(status)
}

/// The C library's `_Exit`, after the trace is handed over.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    hand_over();
    real(&REAL, c"_Exit")(status)
}
