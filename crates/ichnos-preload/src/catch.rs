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
//! That alone is wrong where the catching function is not traced (no
//! open call matches it) or is open more than once (recursion). Where
//! clang built the code that catches, the catch therefore also walks the
//! stack it leaves (the unwinder's `_Unwind_Backtrace`, from the landing
//! pad out) and records the function of each frame, outermost first,
//! before the catch: a reader keeps the open calls those frames account
//! for and ends the rest. The walk costs about 0.1 µs a frame, so it is
//! made only where it is needed: gcc's exits have closed the unwound
//! calls, and gcc puts landing pads in `.cold` parts whose frames would
//! match no call. Which compiler built the object holding the landing
//! pad its `.comment` says (`compiler.rs`).
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

/// Frames of a catch's stack recorded at most: past it, the catch is
/// recorded by its function alone.
pub(crate) const MAX_LIVE: usize = 512;

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

/// At the start, for a C++ program (its C++ library is loaded by then):
/// notes which of the loaded objects clang built, so that the first
/// catches do not read their `.comment`s.
pub(crate) fn note_objects() {
    if REAL.load(Ordering::Relaxed) != 0 {
        crate::compiler::note_loaded_objects();
    }
}

/// Whether a catch whose landing pad is at `landing` walks the stack it
/// leaves: clang built the code that catches.
pub(crate) fn walks(landing: usize) -> bool {
    crate::compiler::clang_built(landing)
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

/// The start of the function a return address `code` returns into, by
/// its unwind entry.
fn function_at(code: usize) -> Option<u64> {
    // A return address may be one past its function's last byte (a call
    // that does not return): the address before it is in the function.
    function_holding(code.checked_sub(1)?)
}

/// The start of the function that holds the instruction at `pc`, by its
/// unwind entry.
fn function_holding(pc: usize) -> Option<u64> {
    let find = FIND_FDE.load(Ordering::Relaxed);
    if find == 0 {
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
    // SAFETY: `_Unwind_Find_FDE` only looks `pc` up and fills `bases`.
    let fde = unsafe { find(pc as *mut c_void, &raw mut bases) };
    (!fde.is_null() && !bases.function.is_null()).then_some(bases.function as u64 & MAX_ADDRESS)
}

/// What the trampoline calls with the landing pad's address and stack
/// pointer: records the catch, answers with the real function.
extern "C" fn on_catch(landing: usize, sp: u64) -> usize {
    // Noting an object loaded since (a file read) must not change what
    // the program sees.
    let _errno = ichnos_buf::fill::ErrnoGuard::save();
    if crate::tracing() {
        crate::scope::caught(function_at(landing), sp, landing);
    }
    real()
}

/// The unwinder's context of one frame (opaque).
#[repr(C)]
struct UnwindContext {
    _opaque: [u8; 0],
}

/// `_URC_NO_REASON`: go on with the walk.
const URC_NO_REASON: i32 = 0;
/// `_URC_NORMAL_STOP`: what the callback answers to stop the walk.
const URC_NORMAL_STOP: i32 = 4;
/// `_URC_END_OF_STACK`: the walk reached the outermost frame (or a frame
/// without an unwind entry, which `each_frame` tells apart).
const URC_END_OF_STACK: i32 = 5;

type TraceFn = extern "C" fn(*mut UnwindContext, *mut c_void) -> i32;

unsafe extern "C" {
    // The unwinder Rust's standard library links (libgcc_s), which finds
    // the unwind entries of every loaded object itself.
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> i32;
    fn _Unwind_GetIPInfo(context: *mut UnwindContext, ip_before_insn: *mut i32) -> usize;
}

/// A walk's frames as they come, innermost first.
struct Walk<'a> {
    /// The landing pad: the frames before its are the runtime's own.
    landing: usize,
    found_landing: bool,
    frames: &'a mut Vec<u64>,
    /// The walk ended before the outermost frame.
    cut: bool,
}

extern "C" fn each_frame(context: *mut UnwindContext, arg: *mut c_void) -> i32 {
    // SAFETY: `arg` is the `Walk` that `live_frames` passed, borrowed
    // for the walk alone.
    let walk = unsafe { &mut *arg.cast::<Walk<'_>>() };
    let mut before = 0;
    // SAFETY: the unwinder's context of this frame.
    let ip = unsafe { _Unwind_GetIPInfo(context, &raw mut before) };
    if !walk.found_landing {
        walk.found_landing = ip == walk.landing;
        if !walk.found_landing {
            return URC_NO_REASON;
        }
    }
    if ip == 0 {
        // Past the outermost frame, whose unwind entry leaves the return
        // address undefined (`_start`'s, `clone3`'s): the unwinder ends
        // the walk here itself.
        return URC_NO_REASON;
    }
    // A signal frame's address is the instruction's own; a call's
    // return address may lie past its function.
    let function = if before != 0 {
        function_holding(ip)
    } else {
        function_at(ip)
    };
    // A frame without an unwind entry is where the unwinder stops too,
    // answering as past the outermost frame: the walk is cut there.
    match function {
        Some(function) if walk.frames.len() < MAX_LIVE => {
            walk.frames.push(function);
            URC_NO_REASON
        }
        _ => {
            walk.cut = true;
            // Any answer but "go on" ends the walk.
            URC_NORMAL_STOP
        }
    }
}

/// The functions of the frames a catch at `landing` (its landing pad's
/// address) leaves, innermost first, into `frames` (cleared first):
/// whether the walk reached the outermost frame (not where a frame has no
/// unwind entry or more than [`MAX_LIVE`] are on the stack).
pub(crate) fn live_frames(landing: usize, frames: &mut Vec<u64>) -> bool {
    frames.clear();
    let mut walk = Walk {
        landing,
        found_landing: false,
        frames,
        cut: false,
    };
    // SAFETY: the callback reads only the context and the `Walk`, which
    // lives across the call.
    let end = unsafe { _Unwind_Backtrace(each_frame, (&raw mut walk).cast()) };
    end == URC_END_OF_STACK && walk.found_landing && !walk.cut
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
    // Its unwind entry (the CFI directives) lets the unwinder walk
    // through it from `on_catch` to the landing pad (`live_frames`).
    core::arch::naked_asm!(
        ".cfi_startproc",
        "push rdi",
        ".cfi_adjust_cfa_offset 8",
        "mov rdi, [rsp + 8]",
        "lea rsi, [rsp + 16]",
        "call {on_catch}",
        "pop rdi",
        ".cfi_adjust_cfa_offset -8",
        "jmp rax",
        ".cfi_endproc",
        on_catch = sym on_catch,
    )
}
