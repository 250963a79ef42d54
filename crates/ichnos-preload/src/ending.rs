//! The ends of a program that its `atexit` hooks do not see.
//!
//! `_exit` and `_Exit` run no hook, so the runtime's own wrappers hand the
//! trace over first (the mappings, then every thread's buffer or ring),
//! and then call the C library's. `exit` itself reaches `_exit` inside the
//! C library, past these wrappers, after its hooks have done the same.
//!
//! `exec` replaces the program: the wrappers of `execve`, `execv`,
//! `execvp`, `execvpe` and `fexecve` send the mappings and the calling
//! thread's buffer (every ring, in flight-recorder mode) first. The
//! variadic `execl`, `execlp` and `execle` (which reach the system call
//! inside the C library, past the other wrappers) cannot be defined in
//! stable Rust: on x86-64 they are naked trampolines that keep the
//! argument registers, hand the trace over, and jump to the C library's
//! function with the registers and the stack as the caller left them, so
//! the variadic arguments go on untouched. Other threads end at an exec
//! where they are, with what their buffers held.
//!
//! A child of `vfork` shares its parent's memory until it execs or
//! exits: it must not flush the parent's buffers, so the wrappers do
//! their work only in the process the runtime set up (or a child of
//! `fork`, which the runtime knows).

use std::ffi::{c_char, c_int, CStr};
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
    // Through the saver thread: `_exit` is async-signal-safe, and is
    // called from signal handlers, where saving in place could wait
    // forever for a lock the interrupted code holds.
    if owner() && !crate::crash::save_for_exit() {
        crate::end_of_process();
    }
}

/// Whether this is the process the buffers are of (not a `vfork` child)
/// and tracing is on.
fn owner() -> bool {
    // SAFETY: getpid has no preconditions (a real system call: a vfork
    // child sees its own id).
    crate::tracing() && unsafe { libc::getpid() } == OWNER.load(Ordering::Relaxed)
}

/// The C library's functions wrapped here, by number.
const NAMES: [&CStr; 10] = [
    c"_exit", c"_Exit", c"execve", c"execvpe", c"execv", c"execvp", c"fexecve", c"execl",
    c"execlp", c"execle",
];

/// Their addresses (0: not looked up yet, or not there).
static REAL: [AtomicUsize; 10] = [const { AtomicUsize::new(0) }; 10];

/// Looks every one of them up now, at the start (and after a fork): not
/// at first use, which may be in a signal handler or a `vfork` child,
/// where `dlsym` (which takes the loader's lock) must not run.
pub(crate) fn resolve() {
    for which in 0..NAMES.len() {
        next(which);
    }
}

/// The address of the C library's function `which` (0 if there is none).
fn next(which: usize) -> usize {
    let mut found = REAL[which].load(Ordering::Relaxed);
    if found == 0 {
        // SAFETY: dlsym with a NUL-terminated name.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[which].as_ptr()) } as usize;
        REAL[which].store(found, Ordering::Relaxed);
    }
    found
}

/// The trace handed over before an exec.
fn before_exec() {
    if owner() {
        crate::before_exec();
    }
}

type Execve = extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type Execv = extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type Fexecve = extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;

/// Fails as an exec does when there is nothing to call.
extern "C" fn no_exec() -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// What the variadic exec trampolines call: hands the trace over,
/// answers with the C library's function `which` (0 if there is none).
#[cfg(target_arch = "x86_64")]
extern "C" fn before_variadic_exec(which: usize) -> usize {
    before_exec();
    next(which)
}

#[cfg(target_arch = "x86_64")]
macro_rules! variadic_exec_trampoline {
    ($name:ident, $which:literal) => {
        /// The C library's function of this name, after the trace is
        /// handed over.
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name() {
            // Entered as the C library's would be: the first six
            // arguments in rdi, rsi, rdx, rcx, r8 and r9, the rest on the
            // stack above the return address, and al the vector register
            // count of a variadic call. Seven pushes keep the stack
            // 16-byte aligned at the call; then everything is put back
            // and the real function is jumped to (or the failure, which
            // returns to the caller with -1 and errno ENOSYS).
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                concat!("mov edi, ", $which),
                "call {before}",
                "mov r11, rax",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "test r11, r11",
                "jz {fail}",
                "jmp r11",
                before = sym before_variadic_exec,
                fail = sym no_exec,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
variadic_exec_trampoline!(execl, 7);
#[cfg(target_arch = "x86_64")]
variadic_exec_trampoline!(execlp, 8);
#[cfg(target_arch = "x86_64")]
variadic_exec_trampoline!(execle, 9);

macro_rules! exec_wrapper {
    ($name:ident, $which:literal, $ty:ty, ($($arg:ident: $t:ty),*)) => {
        /// The C library's function of this name, after the trace is
        /// handed over.
        ///
        /// # Safety
        /// As the C library's.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            before_exec();
            let address = next($which);
            if address == 0 {
                return no_exec();
            }
            // SAFETY: dlsym's address of this very function of the C
            // library, which has this signature.
            let real = unsafe { std::mem::transmute::<usize, $ty>(address) };
            real($($arg),*)
        }
    };
}

exec_wrapper!(execve, 2, Execve, (path: *const c_char, argv: *const *const c_char, envp: *const *const c_char));
exec_wrapper!(execvpe, 3, Execve, (file: *const c_char, argv: *const *const c_char, envp: *const *const c_char));
exec_wrapper!(execv, 4, Execv, (path: *const c_char, argv: *const *const c_char));
exec_wrapper!(execvp, 5, Execv, (file: *const c_char, argv: *const *const c_char));
exec_wrapper!(fexecve, 6, Fexecve, (fd: c_int, argv: *const *const c_char, envp: *const *const c_char));

/// The C library's `_exit` (0) or `_Exit` (1).
fn real(which: usize) -> extern "C" fn(c_int) -> ! {
    let found = next(which);
    if found == 0 {
        // SAFETY: without the C library's own, the system call does what
        // it would.
        unsafe { libc::syscall(libc::SYS_exit_group, 1) };
    }
    // SAFETY: dlsym's address of this very function of the C library,
    // which has this signature.
    unsafe { std::mem::transmute::<usize, extern "C" fn(c_int) -> !>(found) }
}

/// The C library's `_exit`, after the trace is handed over.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    hand_over();
    real(0)(status)
}

/// The C library's `_Exit`, after the trace is handed over.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    hand_over();
    real(1)(status)
}
