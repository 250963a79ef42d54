//! Exit and fork hooks bound to the process rather than to an object.
//!
//! `atexit` and `pthread_atfork` tie their hooks to the object that calls
//! them (glibc passes that object's `__dso_handle`), and the dynamic
//! linker's finalisation runs an object's exit hooks, and drops its fork
//! hooks, when it finalises that object (`__cxa_finalize`): before the
//! objects that were initialised earlier. For a preloaded runtime that is
//! before every library the program links. Their destructors, and the
//! exit hooks their constructors registered, then run after the runtime's
//! last flush, and what they write is lost; a `fork` among them runs
//! without the runtime's fork hooks.
//!
//! A hook bound to no object stays to the end. An exit hook so bound
//! runs in `exit`'s own order, last registered first: one registered
//! while the objects are initialised (in a constructor, before
//! `__libc_start_main` registers the dynamic linker's finalisation) runs
//! after every object's destructors; one registered later runs before
//! them. Its code must stay mapped until then: for code never unloaded.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

extern "C" {
    /// glibc's (and every C++ ABI's) registration of exit hooks.
    fn __cxa_atexit(
        hook: extern "C" fn(*mut c_void),
        arg: *mut c_void,
        object: *mut c_void,
    ) -> libc::c_int;
    /// glibc's registration of fork hooks, which `pthread_atfork` makes
    /// with the calling object's handle (exported since glibc 2.3.2).
    fn __register_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
        object: *mut c_void,
    ) -> libc::c_int;
}

/// The fill buffers' own exit and fork hooks are bound to the process
/// ([`bind_hooks_to_the_process`]).
static BOUND_TO_PROCESS: AtomicBool = AtomicBool::new(false);

/// Runs `hook` at `exit`, bound to no object (see the module's text).
/// False if the C library refused it (out of memory).
#[must_use]
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

/// Runs the hooks around every `fork`, as `pthread_atfork` does, bound to
/// no object: they stay through the dynamic linker's finalisation (see
/// the module's text). False if the C library refused them.
#[must_use]
pub fn at_process_fork(
    prepare: Option<extern "C" fn()>,
    parent: Option<extern "C" fn()>,
    child: Option<extern "C" fn()>,
) -> bool {
    // SAFETY: the hooks live for the whole program, as this module asks
    // of its callers; no object handle.
    unsafe { __register_atfork(prepare, parent, child, std::ptr::null_mut()) == 0 }
}

/// Binds the fill buffers' own hooks — the last flush at `exit`, and the
/// fork hooks — to the process instead of to the object this crate is
/// linked into (see the module's text): for code that is never unloaded,
/// a preloaded runtime above all, which calls it in its constructor so
/// that the last flush follows every object's destructors. Takes effect
/// only before the first buffer is made, which registers the hooks: false
/// if they are registered already (bound as they were).
#[must_use]
pub fn bind_hooks_to_the_process() -> bool {
    BOUND_TO_PROCESS.store(true, Ordering::Relaxed);
    !super::thread::hooks_installed()
}

/// Registers the fill buffers' exit and fork hooks, bound where asked.
pub(crate) fn register(
    at_exit: extern "C" fn(),
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) {
    if BOUND_TO_PROCESS.load(Ordering::Relaxed) {
        // Refused only out of memory, as `atexit` and `pthread_atfork`
        // are (whose results are not looked at either).
        let _ = at_process_exit(at_exit);
        let _ = at_process_fork(Some(prepare), Some(parent), Some(child));
    } else {
        // SAFETY: registering hooks that live for the whole program.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    }
}
