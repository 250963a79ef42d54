//! C++ exceptions caught: each `__cxa_begin_catch` (which the landing
//! pad of every `catch` calls, in the function that catches) records the
//! catching function, so that a reader ends the calls the exception
//! unwound at once, where it was caught.
//!
//! gcc's instrumentation calls the exit hook as an exception unwinds a
//! traced function; clang's does not (its exits are put before returns
//! only), so under clang the calls between the throw and the catch never
//! exit. uftrace's libmcount follows `__cxa_begin_catch` for the same
//! reason. The catching function is the one whose unwind entry (FDE)
//! holds the landing pad: the unwinder's own `_Unwind_Find_FDE` says
//! where it starts, which is the address `-finstrument-functions` passes
//! for it. Where the landing pad is in a part of a function of its own
//! (gcc's `.cold` parts) no open call matches it, and nothing changes:
//! gcc's exits have closed those calls already.
//!
//! Under a depth limit, a filter or the time filter the runtime keeps
//! its own count of open calls, and there the landing pad's stack
//! pointer decides instead (`scope::caught`): the calls unwound are those
//! whose frames lay below the catching frame's, which is right also where
//! the catching function is not traced or is open more than once
//! (recursion).
//!
//! The wrapper is a naked trampoline: it needs its caller's return
//! address (the landing pad), and it goes on to the real function with
//! the stack as the caller left it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use ichnos_data::wire::MAX_ADDRESS;

/// The C++ library's `__cxa_begin_catch`, found at the start or first use.
static REAL: AtomicUsize = AtomicUsize::new(0);
/// The unwinder's `_Unwind_Find_FDE`, found at the start (0: none).
static FIND_FDE: AtomicUsize = AtomicUsize::new(0);

/// What `_Unwind_Find_FDE` fills in (libgcc's `struct dwarf_eh_bases`,
/// which LLVM's libunwind keeps too).
#[repr(C)]
struct EhBases {
    text: *mut c_void,
    data: *mut c_void,
    /// The start of the function the FDE covers.
    function: *mut c_void,
}

type FindFde = unsafe extern "C" fn(*mut c_void, *mut EhBases) -> *const c_void;

/// Looks both functions up now, at the start (a C++ program has loaded
/// its C++ library and unwinder by then), so that a catch in a signal
/// handler does not have to.
pub(crate) fn resolve() {
    // SAFETY: dlsym with NUL-terminated names.
    unsafe {
        let real = libc::dlsym(libc::RTLD_NEXT, c"__cxa_begin_catch".as_ptr()) as usize;
        REAL.store(real, Ordering::Relaxed);
        let find = libc::dlsym(libc::RTLD_DEFAULT, c"_Unwind_Find_FDE".as_ptr()) as usize;
        FIND_FDE.store(find, Ordering::Relaxed);
    }
}

/// The real `__cxa_begin_catch`: looked up now if the C++ library came
/// later (a `dlopen`).
fn real() -> usize {
    let mut found = REAL.load(Ordering::Relaxed);
    if found == 0 {
        resolve();
        found = REAL.load(Ordering::Relaxed);
    }
    if found == 0 {
        // Called from a landing pad, so a C++ library is there; without
        // its function there is nothing to go on with.
        // SAFETY: abort is always safe to call.
        unsafe { libc::abort() };
    }
    found
}

/// The start of the function that holds `code`, by its unwind entry.
fn function_at(code: usize) -> Option<u64> {
    let find = FIND_FDE.load(Ordering::Relaxed);
    if find == 0 || code == 0 {
        return None;
    }
    // SAFETY: the address dlsym gave for the unwinder's
    // `_Unwind_Find_FDE`, which has this signature.
    let find: FindFde = unsafe { std::mem::transmute::<usize, FindFde>(find) };
    let mut bases = EhBases {
        text: std::ptr::null_mut(),
        data: std::ptr::null_mut(),
        function: std::ptr::null_mut(),
    };
    // A return address may be one past its function's last byte (a call
    // that does not return): the address before it is in the function.
    // SAFETY: `_Unwind_Find_FDE` only looks `code` up and fills `bases`.
    let fde = unsafe { find((code - 1) as *mut c_void, &raw mut bases) };
    (!fde.is_null() && !bases.function.is_null()).then_some(bases.function as u64 & MAX_ADDRESS)
}

/// What the trampoline calls with the landing pad's address and stack
/// pointer: records the catch, answers with the real function.
extern "C" fn on_catch(landing: usize, sp: u64) -> usize {
    if crate::tracing() {
        crate::scope::caught(function_at(landing), sp);
    }
    real()
}

/// The C++ library's `__cxa_begin_catch`, after the catch is recorded.
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn __cxa_begin_catch() {
    // Entered as the C++ library's would be: the exception in rdi, the
    // landing pad's return address at rsp, so the catching frame's stack
    // pointer is rsp + 8 on entry. One push keeps the stack 16-byte
    // aligned at the call; the real function is jumped to with
    // everything as it was on entry.
    core::arch::naked_asm!(
        "push rdi",
        "mov rdi, [rsp + 8]",
        "lea rsi, [rsp + 16]",
        "call {on_catch}",
        "pop rdi",
        "jmp rax",
        on_catch = sym on_catch,
    )
}
