//! Guard-page mode: a trace buffer whose write path has no bounds check.
//! The buffer ends where an inaccessible page begins; a record that runs
//! into it faults, and the fault *is* the full check, as in drx_buf.
//!
//! drx_buf can recover because it generated the faulting store and knows
//! its base register. Compiled Rust gives no such knowledge, so the copy is
//! done by one small routine of our own, [`ichnos_guarded_write`], with a
//! fixed register convention: r11 holds the slot, r10 the reservation's
//! offset, r8/r9 the source and length, and rdi/rsi/rcx the copy's cursor.
//! A fault inside that routine, at an address in the guard page of the
//! slot that r11 names, is ours: the handler flushes the committed records,
//! starts the buffer afresh, points r10 at offset 0 and resumes at the
//! start of the copy — a restartable sequence. A fault anywhere else goes
//! to the handler that was installed before ours, or to the default
//! action. A record is thus never torn, unlike drx_buf's (issue 2618).

use super::slot::Slot;
use super::{thread, Shared};
use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::sync::Once;

std::arch::global_asm!(
    ".pushsection .text.ichnos_guarded_write,\"ax\",@progbits",
    ".p2align 4",
    ".globl ichnos_guarded_write",
    ".hidden ichnos_guarded_write",
    ".type ichnos_guarded_write,@function",
    "ichnos_guarded_write:",
    "    mov r11, rdi",
    "    mov r8, rsi",
    "    mov r9, rdx",
    "    mov r10, rdx",
    // Reserve: one instruction, so a signal handler cannot split it.
    "    xadd qword ptr [r11 + {reserved}], r10",
    // Not a full check: only nested signal handlers, each reserving behind
    // the last before any of them stored a byte, can start a record beyond
    // the end of the buffer, where its first store might land past the
    // guard page. Drop such a record (counted).
    "    cmp r10, qword ptr [r11 + {limit}]",
    "    ja 5f",
    ".globl ichnos_guarded_copy_begin",
    ".hidden ichnos_guarded_copy_begin",
    "ichnos_guarded_copy_begin:",
    "    mov rdi, qword ptr [r11 + {base}]",
    "    add rdi, r10",
    "    mov rsi, r8",
    "    mov rcx, r9",
    // Eight bytes at a time, then bytes: `rep movsb` costs tens of cycles
    // to start, more than a whole small record.
    "2:",
    "    cmp rcx, 8",
    "    jb 3f",
    "    mov rax, qword ptr [rsi]",
    "    mov qword ptr [rdi], rax",
    "    add rsi, 8",
    "    add rdi, 8",
    "    sub rcx, 8",
    "    jmp 2b",
    "3:",
    "    test rcx, rcx",
    "    jz 4f",
    "    mov al, byte ptr [rsi]",
    "    mov byte ptr [rdi], al",
    "    inc rsi",
    "    inc rdi",
    "    dec rcx",
    "    jmp 3b",
    "4:",
    ".globl ichnos_guarded_copy_end",
    ".hidden ichnos_guarded_copy_end",
    "ichnos_guarded_copy_end:",
    // Commit.
    "    add qword ptr [r11 + {committed}], r9",
    "    mov rax, r10",
    "    ret",
    "5:",
    "    sub qword ptr [r11 + {reserved}], r9",
    "    add qword ptr [r11 + {lost_records}], 1",
    "    add qword ptr [r11 + {lost_bytes}], r9",
    "    mov rax, -1",
    "    ret",
    ".globl ichnos_guarded_dropped",
    ".hidden ichnos_guarded_dropped",
    "ichnos_guarded_dropped:",
    "    mov rax, -1",
    "    ret",
    ".size ichnos_guarded_write, .-ichnos_guarded_write",
    ".popsection",
    reserved = const offset_of!(Slot, reserved),
    base = const offset_of!(Slot, base),
    committed = const offset_of!(Slot, committed),
    limit = const offset_of!(Slot, limit),
    lost_records = const offset_of!(Slot, lost_records),
    lost_bytes = const offset_of!(Slot, lost_bytes),
);

unsafe extern "C" {
    /// Reserves `len` bytes in `slot`, copies `src` there and commits;
    /// returns the offset written, or `usize::MAX` if the record was
    /// dropped (counted) by the fault handler.
    fn ichnos_guarded_write(slot: *const Slot, src: *const u8, len: usize) -> usize;
    static ichnos_guarded_copy_begin: [u8; 0];
    static ichnos_guarded_copy_end: [u8; 0];
    static ichnos_guarded_dropped: [u8; 0];
}

/// Writes `record` through the guarded routine. The caller has checked
/// that `slot` serves a guarded buffer of this thread and that the record
/// is no longer than the buffer or a page.
#[inline]
pub(crate) fn write(slot: &Slot, record: &[u8]) -> Option<usize> {
    // SAFETY: `slot` is this thread's, attached to guarded memory; the
    // routine writes only [base + offset, base + offset + len), and where
    // that reaches the guard page the handler restarts it at offset 0.
    let at = unsafe { ichnos_guarded_write(slot, record.as_ptr(), record.len()) };
    (at != usize::MAX).then_some(at)
}

static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

/// Installs the SIGSEGV handler once, remembering the one before it.
pub(crate) fn install_handler() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: sigaction with a zeroed, then filled, struct; PREVIOUS is
        // written once here, before the handler can run (it is installed by
        // this very call), and only read afterwards.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_segv as *const () as usize;
            // NODEFER: a flush function may itself write to a guarded
            // buffer and fault again inside this handler.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(
                libc::SIGSEGV,
                &raw const action,
                (*std::ptr::addr_of_mut!(PREVIOUS)).as_mut_ptr(),
            );
        }
    });
}

extern "C" fn on_segv(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let _errno = super::ErrnoGuard::save();
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler.
    let handled = unsafe { handle_own_fault(info, context.cast()) };
    if !handled {
        // SAFETY: forwarding with the arguments we were given.
        unsafe { forward(signal, info, context) };
    }
}

/// Handles the fault if it is a guarded write running into its own guard
/// page; returns false for every other fault.
unsafe fn handle_own_fault(info: *mut libc::siginfo_t, context: *mut libc::ucontext_t) -> bool {
    // SAFETY: valid for the handler's duration (see on_segv).
    let gregs = unsafe { &mut (*context).uc_mcontext.gregs };
    let rip = gregs[libc::REG_RIP as usize].cast_unsigned() as usize;
    let begin = (&raw const ichnos_guarded_copy_begin) as usize;
    let end = (&raw const ichnos_guarded_copy_end) as usize;
    if rip < begin || rip >= end {
        return false;
    }
    let slot_addr = gregs[libc::REG_R11 as usize].cast_unsigned() as usize;
    if !thread::is_own_slot(slot_addr) {
        return false;
    }
    // SAFETY: checked just above to be one of this thread's slots.
    let slot = unsafe { &*(slot_addr as *const Slot) };
    let guard = slot.guard.load(Ordering::Relaxed) as usize;
    // SAFETY: siginfo of a SIGSEGV carries the fault address.
    let addr = unsafe { (*info).si_addr() } as usize;
    // An 8-byte store that straddles into the guard page may be reported
    // at its first byte, up to 7 bytes before the page.
    if guard == 0 || addr < guard.saturating_sub(7) || addr >= guard + crate::page_size() {
        return false;
    }
    let old = gregs[libc::REG_R10 as usize].cast_unsigned() as usize;
    let len = gregs[libc::REG_R9 as usize].cast_unsigned() as usize;
    let base = slot.base.load(Ordering::Relaxed) as usize;
    if old.saturating_add(len) <= guard.wrapping_sub(base) {
        // The record fits: this fault is not the end of the buffer.
        return false;
    }
    let shared = slot
        .handle
        .load(Ordering::Relaxed)
        .cast::<Shared>()
        .cast_const();
    // The handle is alive: the routine runs only inside FillBuffer::write,
    // which holds it.
    // SAFETY: see above.
    let shared = unsafe { &*shared };
    // The slow path every trace write takes when full: flush the
    // committed records and start afresh with ours at 0, or drop ours
    // (counted) when a write below it is open or the process is exiting.
    let restarted = shared.overflow(slot, old, len, shared.capacity()).is_ok();
    if restarted {
        gregs[libc::REG_R10 as usize] = 0;
        gregs[libc::REG_RIP as usize] = (begin as u64).cast_signed();
    } else {
        gregs[libc::REG_RIP as usize] = ((&raw const ichnos_guarded_dropped) as u64).cast_signed();
    }
    true
}

/// Passes a fault that is not ours to the handler installed before ours,
/// or lets the default action (a core dump) happen.
unsafe fn forward(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: written once at installation, before this handler existed.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init_ref() };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default and return: the faulting instruction runs
        // again and the fault now takes the default action, with the
        // right address in the core dump.
        // SAFETY: plain sigaction with a zeroed struct (SIG_DFL = 0).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
        }
        return;
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler asked for three arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: a one-argument handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}
