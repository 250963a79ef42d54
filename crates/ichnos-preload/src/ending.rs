//! The ends of a program that its `atexit` hooks do not see.
//!
//! `_exit` and `_Exit` run no hook, so the runtime's own wrappers hand the
//! trace over first (the mappings, then every thread's buffer or ring),
//! and then call the C library's. `quick_exit` runs only the
//! `at_quick_exit` hooks, then the C library's own `_exit`, past the
//! wrapper: the runtime's hook, registered at the start (so run after the
//! program's), hands the trace over there. `exit` itself reaches `_exit` inside the
//! C library, past these wrappers, after its hooks have done the same.
//! Its wrapper only says which thread calls it: `exit` runs that
//! thread's TLS destructors before its `atexit` hooks and static
//! destructors, and the calls those make on it must find its buffer
//! still there (a thread other than the main one would hand it over and
//! unmap it as a thread that ends does).
//!
//! `exec` replaces the program: the wrappers of `execve`, `execv`,
//! `execvp`, `execvpe` and `fexecve` send the mappings and the calling
//! thread's buffer (every ring, in flight-recorder mode) first. The
//! variadic `execl`, `execlp` and `execle` (the C library's reach the
//! system call inside it, past the other wrappers) cannot be defined in
//! stable Rust: on x86-64 they are naked trampolines that hand their
//! arguments (in registers and on the stack) to a function that builds
//! the argument vector, as the C library's do, and calls the `execv`,
//! `execvp` or `execve` wrapper. When an exec fails, the wrappers tell
//! the recorder the program goes on. Other threads end at an exec where
//! they are, with what their buffers held.
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
    // forever for a lock the interrupted code holds. Where this thread
    // holds the channel (a handler interrupted its hand-over), the saver
    // would wait on it in vain: nothing is saved, at once.
    if crate::channel::Channel::held_here() {
        return;
    }
    // From inside handlers (a timeout's handler that ends the process),
    // the writes they interrupted are closed here, on this thread: the
    // saver can hand its buffer over only with no write open.
    #[cfg(target_arch = "x86_64")]
    crate::handlers::leave_all();
    if owner() && !crate::crash::save_for_exit() {
        crate::end_of_process();
    }
}

/// Whether this is the process the buffers are of (not a `vfork` child)
/// and tracing is on.
fn owner() -> bool {
    crate::tracing() && owning_process()
}

/// Whether this is the process the buffers and the channel are of: not a
/// child of `vfork`, nor one made without `fork`'s handlers (`_Fork`, a
/// raw `clone`), whose copies of them are its parent's.
/// Async-signal-safe.
pub(crate) fn owning_process() -> bool {
    // SAFETY: getpid has no preconditions (a real system call: a vfork
    // child sees its own id).
    let pid = unsafe { libc::getpid() };
    pid == OWNER.load(Ordering::Relaxed)
}

/// In a process that is not the buffers' owner: whether it shares the
/// owner's memory (a child of `vfork` or of `clone(CLONE_VM)`, which
/// writes into the owner's buffers and takes the owner's locks), as the
/// kernel's `kcmp` says; where it cannot say, as if it did (nothing is
/// then written to memory that may be the owner's). Async-signal-safe.
pub(crate) fn shares_owners_memory() -> bool {
    // SAFETY: getpid has no preconditions; kcmp only compares the two
    // processes' memory.
    let same = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            libc::getpid(),
            OWNER.load(Ordering::Relaxed),
            KCMP_VM,
            0,
            0,
        )
    };
    same != 1 && same != 2
}

/// Whether this process shares its parent's memory (a child of `vfork`
/// or of `clone(CLONE_VM)`): `Some(true)` or `Some(false)` as the
/// kernel's `kcmp` says, `None` where it cannot say. Async-signal-safe.
pub(crate) fn shares_parents_memory() -> Option<bool> {
    // SAFETY: getpid and getppid have no preconditions; kcmp only
    // compares the two processes' memory.
    let order = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            libc::getpid(),
            libc::getppid(),
            KCMP_VM,
            0,
            0,
        )
    };
    match order {
        0 => Some(true),
        1..=2 => Some(false),
        _ => None,
    }
}

/// `kcmp`'s type for comparing address spaces.
const KCMP_VM: libc::c_long = 1;

/// The C library's functions wrapped here, by number.
const NAMES: [&CStr; 8] = [
    c"_exit", c"_Exit", c"execve", c"execvpe", c"execv", c"execvp", c"fexecve", c"exit",
];

/// Their addresses (0: not looked up yet, or not there).
static REAL: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

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

/// An exec failed: the trace goes on (`errno` kept, the exec's answer).
fn after_failed_exec() {
    if owner() {
        let _errno = ichnos_buf::fill::ErrnoGuard::save();
        crate::after_failed_exec();
    }
}

type Execve = extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type Execv = extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type Fexecve = extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;

/// Fails as an exec does when there is nothing to call.
fn no_exec() -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// Arguments of a variadic exec at most (a caller that left out the
/// closing null would have the C library read on as far).
#[cfg(target_arch = "x86_64")]
const MAX_VARIADIC_ARGS: usize = 1 << 20;
/// Arguments a variadic exec's argument vector holds on the stack; more
/// are put in a mapping of their own (`mmap`, which is
/// async-signal-safe, as `execl` is).
#[cfg(target_arch = "x86_64")]
const ARGS_ON_STACK: usize = 256;

/// What the variadic exec trampolines call: `execl` (`which` 0),
/// `execlp` (1) or `execle` (2) of `path`, whose variadic arguments (the
/// argument strings, a null, and for `execle` the environment) are
/// `registers` (the five passed in registers, in order) and then
/// `stack` (the caller's, above its return address). The strings go
/// into an argument vector and through the `execv`, `execvp` or `execve`
/// wrapper: the trace is handed over, and taken up again if the exec
/// fails.
///
/// # Safety
/// As the C library's `execl`: the arguments end with a null pointer
/// (then, for `execle`, the environment), which the caller passed.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn variadic_exec(
    path: *const c_char,
    registers: *const usize,
    stack: *const usize,
    which: usize,
) -> c_int {
    // SAFETY: the caller passed the arguments up to the null (and the
    // environment after it for execle): registers first, then its stack.
    let arg = |i: usize| unsafe {
        if i < 5 {
            *registers.add(i)
        } else {
            *stack.add(i - 5)
        }
    };
    let Some(count) = (0..MAX_VARIADIC_ARGS).find(|&i| arg(i) == 0) else {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::E2BIG };
        return -1;
    };
    let mut on_stack = [std::ptr::null::<c_char>(); ARGS_ON_STACK];
    let bytes = (count + 1) * std::mem::size_of::<usize>();
    let mapped = if count < ARGS_ON_STACK {
        None
    } else {
        // SAFETY: a new private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return -1;
        }
        Some(p)
    };
    let argv: &mut [*const c_char] = match mapped {
        // SAFETY: our mapping of `count + 1` pointers, zeroed.
        Some(p) => unsafe { std::slice::from_raw_parts_mut(p.cast(), count + 1) },
        None => &mut on_stack[..=count],
    };
    for (i, slot) in argv.iter_mut().take(count).enumerate() {
        *slot = arg(i) as *const c_char;
    }
    let argv_ptr = argv.as_ptr();
    // SAFETY: the caller's path and strings, in a vector ending with a
    // null, and (execle) its environment: as the C library's would pass.
    let result = unsafe {
        match which {
            0 => execv(path, argv_ptr),
            1 => execvp(path, argv_ptr),
            _ => execve(path, argv_ptr, arg(count + 1) as *const *const c_char),
        }
    };
    if let Some(p) = mapped {
        let _errno = ichnos_buf::fill::ErrnoGuard::save();
        // SAFETY: our own mapping, no longer used.
        unsafe { libc::munmap(p, bytes) };
    }
    result
}

#[cfg(target_arch = "x86_64")]
macro_rules! variadic_exec_trampoline {
    ($name:ident, $which:literal) => {
        /// The C library's function of this name, through the `execv`,
        /// `execvp` or `execve` wrapper.
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $name() {
            // Entered as the C library's would be: the path in rdi, the
            // first five variadic arguments in rsi, rdx, rcx, r8 and r9,
            // the rest on the stack above the return address. Pushed in
            // reverse, the five lie in order at rsp; the caller's stack
            // arguments start 48 bytes up (past them and the return
            // address). Five pushes keep the stack 16-byte aligned at
            // the call.
            core::arch::naked_asm!(
                "push r9",
                "push r8",
                "push rcx",
                "push rdx",
                "push rsi",
                "mov rsi, rsp",
                "lea rdx, [rsp + 48]",
                concat!("mov ecx, ", $which),
                "call {exec}",
                "add rsp, 40",
                "ret",
                exec = sym variadic_exec,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
variadic_exec_trampoline!(execl, 0);
#[cfg(target_arch = "x86_64")]
variadic_exec_trampoline!(execlp, 1);
#[cfg(target_arch = "x86_64")]
variadic_exec_trampoline!(execle, 2);

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
            let failed = real($($arg),*);
            // Back here, the exec failed: the program goes on.
            after_failed_exec();
            failed
        }
    };
}

exec_wrapper!(execve, 2, Execve, (path: *const c_char, argv: *const *const c_char, envp: *const *const c_char));
exec_wrapper!(execvpe, 3, Execve, (file: *const c_char, argv: *const *const c_char, envp: *const *const c_char));
exec_wrapper!(execv, 4, Execv, (path: *const c_char, argv: *const *const c_char));
exec_wrapper!(execvp, 5, Execv, (file: *const c_char, argv: *const *const c_char));
exec_wrapper!(fexecve, 6, Fexecve, (fd: c_int, argv: *const *const c_char, envp: *const *const c_char));

/// Ends the process through the C library's `_exit` (0), `_Exit` (1)
/// or `exit` (7).
fn end_with(which: usize, status: c_int) -> ! {
    let found = next(which);
    if found == 0 {
        // Without the C library's own, the system call ends the process
        // as `_exit` would, with no hook run: `exit`'s hand the trace over
        // first.
        if which == 7 {
            hand_over();
        }
        // SAFETY: the system call that ends the process.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
    // SAFETY: dlsym's address of this very function of the C library,
    // which has this signature.
    let real = unsafe { std::mem::transmute::<usize, extern "C" fn(c_int) -> !>(found) };
    real(status)
}

unsafe extern "C" {
    /// Registers a hook `quick_exit` runs (C11; glibc 2.18 and later).
    fn at_quick_exit(hook: extern "C" fn()) -> c_int;
}

/// Registers the hook that hands the trace over at `quick_exit`.
pub(crate) fn hook_quick_exit() {
    extern "C" fn at_quick_exit_hook() {
        hand_over();
    }
    // SAFETY: registering a hook, a function of ours that lives as long
    // as the process.
    unsafe { at_quick_exit(at_quick_exit_hook) };
}

/// The C library's `_exit`, after the trace is handed over.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    exit_without_hooks(status)
}

/// Ends the process as `_exit` does (no `atexit` hook run), the trace
/// handed over first.
pub(crate) fn exit_without_hooks(status: c_int) -> ! {
    hand_over();
    end_with(0, status)
}

/// The C library's `_Exit`, after the trace is handed over.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    hand_over();
    end_with(1, status)
}

/// The C library's `exit`, with the calling thread's buffer kept for
/// the `atexit` hooks and static destructors it runs.
#[no_mangle]
pub extern "C" fn exit(status: c_int) -> ! {
    if owner() {
        ichnos_buf::fill::before_exit();
    }
    end_with(7, status)
}
