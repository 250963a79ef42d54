//! Exit hooks bound to the process rather than to an object.
//!
//! `atexit` ties its hook to the object that calls it (glibc passes that
//! object's `__dso_handle` to `__cxa_atexit`), and the dynamic linker's
//! finalisation runs an object's hooks when it finalises that object
//! (`__cxa_finalize`), which is before the objects that were initialised
//! earlier: for a preloaded runtime, before every library the program
//! links. Their destructors, and the hooks their constructors registered,
//! then run after the runtime's last flush, and what they write is lost.
//! A hook bound to no object runs in `exit`'s own order, last registered
//! first: one registered while the libraries are being initialised (before
//! `__libc_start_main` registers the dynamic linker's finalisation) runs
//! after every object's destructors. It must stay mapped until then: for
//! code never unloaded.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

extern "C" {
    /// glibc's (and every C++ ABI's) registration of exit hooks.
    fn __cxa_atexit(
        hook: extern "C" fn(*mut c_void),
        arg: *mut c_void,
        object: *mut c_void,
    ) -> libc::c_int;
}

/// The last flush's hook is bound to the process
/// ([`bind_exit_flush_to_the_process`]).
static FLUSH_BOUND_TO_PROCESS: AtomicBool = AtomicBool::new(false);

/// Runs `hook` at `exit`, bound to no object (see the module's text).
/// False if the C library refused it (out of memory).
pub fn at_process_exit(hook: extern "C" fn()) -> bool {
    // SAFETY: `run` turns the argument back into the `extern "C" fn()` it
    // was made from (function and data pointers are the same size, and
    // interchangeable, on every target glibc runs on); the hook lives for
    // the whole program, as this module asks of its callers.
    unsafe { __cxa_atexit(run, hook as *mut c_void, std::ptr::null_mut()) == 0 }
}

extern "C" fn run(hook: *mut c_void) {
    // SAFETY: `at_process_exit` made `hook` from an `extern "C" fn()`.
    let hook = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn()>(hook) };
    hook();
}

/// Binds the fill buffers' last flush at `exit` to the process instead of
/// to the object this crate is linked into, so that it runs after every
/// object's destructors (see the module's text): for code that is never
/// unloaded, a preloaded runtime above all. Takes effect if called before
/// the first buffer is made, which registers the hook.
pub fn bind_exit_flush_to_the_process() {
    FLUSH_BOUND_TO_PROCESS.store(true, Ordering::Relaxed);
}

/// Registers the last flush's hook, where it was asked to be bound.
pub(crate) fn register_flush(hook: extern "C" fn()) {
    if FLUSH_BOUND_TO_PROCESS.load(Ordering::Relaxed) {
        at_process_exit(hook);
    } else {
        // SAFETY: registering a hook that lives for the whole program.
        unsafe { libc::atexit(hook) };
    }
}
