//! `setjmp` and `longjmp` followed: each `setjmp` records the `jmp_buf`
//! it fills and each `longjmp` the one it goes back to, so that a reader
//! ends the calls a `longjmp` left without exits at once, where it
//! happened, instead of when a caller further out returns.
//!
//! `longjmp` never returns, so its wrappers are plain functions that
//! record and call the real one. `setjmp` returns twice: a wrapper with a
//! frame of its own would leave the `jmp_buf` pointing into a frame that
//! is gone by the time `longjmp` comes back to it. Its wrappers are naked
//! trampolines instead: they keep the arguments, call the recorder (which
//! answers with the real function's address) and jump to the real
//! function with the caller's return address on the stack, as if the
//! program had called it directly.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use ichnos_data::wire::{event, MAX_ADDRESS};

/// The functions wrapped, by number.
const NAMES: [&CStr; 7] = [
    c"_setjmp",
    c"setjmp",
    c"__sigsetjmp",
    c"longjmp",
    c"_longjmp",
    c"siglongjmp",
    c"__longjmp_chk",
];

/// The real functions' addresses, found on first use.
static REAL: [AtomicUsize; 7] = [const { AtomicUsize::new(0) }; 7];

/// Looks every real function up now, at the start: not at first use,
/// which is often a `siglongjmp` inside a signal handler, where `dlsym`
/// (which takes the loader's lock) must not run.
pub(crate) fn resolve() {
    for which in 0..NAMES.len() {
        real(which);
    }
}

/// The real function `which` (the next definition after this library).
fn real(which: usize) -> usize {
    let found = REAL[which].load(Ordering::Relaxed);
    if found != 0 {
        return found;
    }
    // SAFETY: dlsym with a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[which].as_ptr()) } as usize;
    if p == 0 {
        // Without the C library's own there is nothing to go on with.
        // SAFETY: abort is always safe to call.
        unsafe { libc::abort() };
    }
    REAL[which].store(p, Ordering::Relaxed);
    p
}

/// A `setjmp` filled `buffer`: its marker, when tracing is on, held back
/// with the entries the time filter holds ([`crate::short::setjmp`]).
fn record_setjmp(buffer: u64) {
    if crate::ACTIVE.load(Ordering::Relaxed) {
        if crate::short::holding() {
            crate::short::setjmp(buffer);
        } else {
            crate::record(event::SETJMP, buffer);
        }
    }
}

/// A `longjmp` goes back to `buffer`: its marker, when tracing is on,
/// unless the time filter left out every call it ends and the `setjmp`
/// ([`crate::short::longjmp`]).
fn record_longjmp(buffer: u64) {
    if !crate::ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    if !crate::short::holding() {
        crate::record(event::LONGJMP, buffer);
        return;
    }
    if let Some((target, busy_then)) = crate::scope::jump_target(buffer) {
        if !busy_then {
            // Out of a signal handler that interrupted the time filter's
            // bookkeeping, back to a place outside it: it is left for good.
            crate::short::leave_interrupted();
        }
        if crate::short::longjmp(buffer, target) {
            crate::record(event::LONGJMP, buffer);
        }
    } else if let Some(target) = crate::short::held_jump_level(buffer) {
        // The table of places lost it, but its setjmp is held back here
        // (made outside the bookkeeping, as every one held is): the same,
        // and the time filter's stack put back here, as back_to_jump would.
        crate::short::leave_interrupted();
        if crate::short::longjmp(buffer, target) {
            crate::record(event::LONGJMP, buffer);
        }
        crate::short::back_to(target);
    } else {
        crate::short::before_marker();
        crate::record(event::LONGJMP, buffer);
    }
}

/// What the `setjmp` trampolines call: records the place, answers with
/// the real function.
extern "C" fn on_setjmp(env: *mut c_void, which: usize) -> usize {
    let buffer = env as u64 & MAX_ADDRESS;
    crate::scope::note_jump(buffer);
    crate::handlers::note_setjmp(buffer);
    record_setjmp(buffer);
    real(which)
}

macro_rules! setjmp_trampoline {
    ($name:ident, $which:literal) => {
        /// The C library's function of this name, after the place it
        /// saves is recorded.
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name() {
            // Entered as the C library's would be: env in rdi (and the
            // signal-mask flag in rsi for __sigsetjmp), the caller's
            // return address at rsp. Two pushes and 8 bytes keep the
            // stack 16-byte aligned at the call; the real function is
            // jumped to with everything as it was on entry.
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "sub rsp, 8",
                concat!("mov esi, ", $which),
                "call {on_setjmp}",
                "add rsp, 8",
                "pop rsi",
                "pop rdi",
                "jmp rax",
                on_setjmp = sym on_setjmp,
            )
        }
    };
}

setjmp_trampoline!(_setjmp, 0);
setjmp_trampoline!(setjmp, 1);
setjmp_trampoline!(__sigsetjmp, 2);

macro_rules! longjmp_wrapper {
    ($name:ident, $which:literal) => {
        /// The C library's function of this name, after the place it goes
        /// back to is recorded.
        ///
        /// # Safety
        /// As the C library's: `env` was filled by a `setjmp` whose
        /// caller has not returned.
        #[no_mangle]
        pub unsafe extern "C" fn $name(env: *mut c_void, value: c_int) -> ! {
            let buffer = env as u64 & MAX_ADDRESS;
            // Out of signal handlers, the writes they interrupted are
            // closed first: the event may need the buffer handed over.
            crate::handlers::before_longjmp(buffer);
            // The event next: the entries the time filter holds of the
            // calls it ends that are kept are written before it, and the
            // reader closes them at it.
            record_longjmp(buffer);
            crate::scope::back_to_jump(buffer);
            let address = real($which);
            // SAFETY: the address dlsym gave for this very function of
            // the C library, which has this signature.
            let real: unsafe extern "C" fn(*mut c_void, c_int) -> ! = unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, c_int) -> !>(address)
            };
            // SAFETY: the caller's contract, passed on.
            unsafe { real(env, value) }
        }
    };
}

longjmp_wrapper!(longjmp, 3);
longjmp_wrapper!(_longjmp, 4);
longjmp_wrapper!(siglongjmp, 5);
longjmp_wrapper!(__longjmp_chk, 6);
