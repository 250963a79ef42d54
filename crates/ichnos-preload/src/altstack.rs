//! Alternate signal stacks, so that the crash handlers run when the crash
//! is the thread's stack overflowing.
//!
//! A thread that runs off the end of its stack faults on the guard page
//! below it; the kernel delivers SIGSEGV on the same stack, finds no room
//! to put the handler's frame there, and kills the process at once: the
//! flight recorder's rings, the ones that would show the runaway
//! recursion, were never saved. The crash handlers are installed with
//! `SA_ONSTACK`, so a thread with an alternate stack runs them there.
//! Threads have none unless their program makes one (a C program rarely
//! does), so the runtime gives one to the main thread at the start and to
//! every thread `pthread_create` starts: its wrapper starts the thread in
//! [`begin`], which sets the stack up before calling the program's start
//! routine. A thread that has an alternate stack of its own already keeps
//! it. A thread's stack is unmapped when the thread exits (a TLS
//! destructor, which `pthread_exit` runs too); the main thread's stays
//! for the life of the process, since `exit` runs TLS destructors before
//! the `atexit` handlers and static destructors, which may overflow too.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Bytes of each alternate stack: the handlers only write to a pipe,
/// sleep and put a signal action back, but the kernel's signal frame
/// holds the CPU's whole vector state (a few KiB with AVX-512).
const STACK_BYTES: usize = 64 << 10;

/// Threads get alternate stacks (the crash handlers are installed).
static WANTED: AtomicBool = AtomicBool::new(false);

/// The C library's `pthread_create` (0: not looked up yet).
static REAL_CREATE: AtomicUsize = AtomicUsize::new(0);

/// An alternate stack this thread uses, and unmaps at its exit.
struct AltStack {
    /// The mapping: a guard page, then the stack.
    mapping: *mut c_void,
    len: usize,
    /// The stack's lowest address (`ss_sp`).
    stack: *mut c_void,
}

impl AltStack {
    /// Maps a stack and makes it this thread's alternate stack; `None`
    /// if the thread has one already, or it cannot be done.
    fn install() -> Option<AltStack> {
        // SAFETY: stack_t is plain data; sigaltstack only reads the
        // current setting into it.
        let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaltstack(std::ptr::null(), &raw mut current) } != 0
            || current.ss_flags & libc::SS_DISABLE == 0
        {
            return None;
        }
        let page = crate::page_size();
        let len = STACK_BYTES + page;
        // SAFETY: a new private anonymous mapping; nothing else is touched.
        let mapping = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if mapping == libc::MAP_FAILED {
            return None;
        }
        // The lowest page is a guard: a handler that overflowed the
        // alternate stack faults there instead of writing below it.
        // SAFETY: the first page of our own mapping.
        unsafe { libc::mprotect(mapping, page, libc::PROT_NONE) };
        // SAFETY: one page into our mapping of `len` bytes.
        let stack = unsafe { mapping.cast::<u8>().add(page).cast::<c_void>() };
        let setting = libc::stack_t {
            ss_sp: stack,
            ss_flags: 0,
            ss_size: STACK_BYTES,
        };
        // SAFETY: the stack lies in our mapping, which lives until this
        // thread disables it again (in `drop`).
        if unsafe { libc::sigaltstack(&raw const setting, std::ptr::null_mut()) } != 0 {
            // SAFETY: our own mapping, not in use.
            unsafe { libc::munmap(mapping, len) };
            return None;
        }
        Some(AltStack {
            mapping,
            len,
            stack,
        })
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: stack_t is plain data; sigaltstack reads the setting.
        let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let ours = unsafe { libc::sigaltstack(std::ptr::null(), &raw mut current) } == 0
            && current.ss_sp == self.stack
            && current.ss_flags & libc::SS_DISABLE == 0;
        if !ours {
            // The program put a stack of its own in place since: ours may
            // still be in use, and stays mapped.
            return;
        }
        let off = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: disabling this thread's alternate stack (it is not on
        // it: a TLS destructor does not run in a signal handler), then
        // unmapping our own mapping, no longer in use.
        unsafe {
            if libc::sigaltstack(&raw const off, std::ptr::null_mut()) == 0 {
                libc::munmap(self.mapping, self.len);
            }
        }
    }
}

thread_local! {
    static STACK: Cell<Option<AltStack>> = const { Cell::new(None) };
}

/// Gives the calling thread an alternate stack if it has none.
fn ensure() {
    let _ = STACK.try_with(|stack| {
        let mine = stack.take();
        stack.set(mine.or_else(AltStack::install));
    });
}

/// From now on, threads get alternate stacks; the calling thread (the
/// main thread, at the start) one now, for good.
pub(crate) fn install() {
    real_create();
    WANTED.store(true, Ordering::Relaxed);
    // Never unmapped: the process's exit ends it.
    std::mem::forget(AltStack::install());
}

/// A thread's start routine. `pthread_exit` and cancellation unwind
/// through it (a forced unwind), hence "C-unwind".
type Start = extern "C-unwind" fn(*mut c_void) -> *mut c_void;
type Create = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    Option<Start>,
    *mut c_void,
) -> c_int;

/// The C library's `pthread_create`'s address (0 if there is none).
fn real_create() -> usize {
    let mut found = REAL_CREATE.load(Ordering::Relaxed);
    if found == 0 {
        // SAFETY: dlsym with a NUL-terminated name.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
        REAL_CREATE.store(found, Ordering::Relaxed);
    }
    found
}

/// A thread's start routine and its argument, on their way to [`begin`].
struct Routine {
    start: Start,
    arg: *mut c_void,
}

/// Where a thread the program creates starts: its alternate stack, then
/// the program's start routine (through which `pthread_exit` unwinds).
extern "C-unwind" fn begin(routine: *mut c_void) -> *mut c_void {
    // SAFETY: the box `pthread_create` made for this thread, handed to
    // this thread alone.
    let Routine { start, arg } = *unsafe { Box::from_raw(routine.cast::<Routine>()) };
    ensure();
    crate::set_up_thread();
    start(arg)
}

/// The C library's `pthread_create`, the thread started through
/// [`begin`] while threads get alternate stacks.
///
/// # Safety
/// As the C library's.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: Option<Start>,
    arg: *mut c_void,
) -> c_int {
    let address = real_create();
    if address == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: dlsym's address of the C library's pthread_create, which
    // has this signature.
    let real = unsafe { std::mem::transmute::<usize, Create>(address) };
    // Without a start routine there is nothing to wrap: what the C
    // library makes of that is the caller's to answer for.
    let Some(start) = start.filter(|_| WANTED.load(Ordering::Relaxed)) else {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real(thread, attr, start, arg) };
    };
    let routine = Box::into_raw(Box::new(Routine { start, arg }));
    // SAFETY: the caller's arguments, with our start routine, whose
    // argument is the box it takes back.
    let created = unsafe { real(thread, attr, Some(begin), routine.cast()) };
    if created != 0 {
        // SAFETY: no thread was started: the box is still ours.
        drop(unsafe { Box::from_raw(routine) });
    }
    created
}
