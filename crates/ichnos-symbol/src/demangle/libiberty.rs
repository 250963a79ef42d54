//! libiberty's C++ demangler, reached through libstdc++'s
//! `__cxa_demangle`; demangling's one foreign call, fenced.
//!
//! c++filt, addr2line, gdb, `nm -C` and perf all print C++ names with
//! libiberty's demangler, so a name ichnos shows should read as theirs
//! does. libstdc++ carries that demangler behind the C++ ABI's
//! `__cxa_demangle` (the Itanium C++ ABI, "Demangler API"), with the
//! options addr2line and perf use: parameters shown, no verbose
//! expansions (`std::string`, not `std::basic_string<char, ...>`, except
//! where a constructor needs the class's whole name).
//!
//! The library is loaded when first needed, never linked: a machine
//! without libstdc++ still runs ichnos, with `cpp_demangle`'s names. It
//! is asked for `libstdc++.so.6` by name so that a process whose C++
//! runtime is LLVM's libc++ (whose demangler spells some names
//! differently) still gets libiberty's spelling.
//!
//! Bounds. libiberty refuses a name longer than [`MAX_NAME`] itself (its
//! parse arrays live on the stack, and it keeps their length within its
//! recursion limit). Its stack is not otherwise bounded: it prints
//! argument lists by recursion, one level an element, and sizes arrays
//! on the stack, 16 bytes times the product of a name's templates and
//! its references to their parameters, each counted at most twice (a
//! valid 1,016-byte name took 1.2 MiB; each template and reference takes
//! 3 bytes of the name, so a 1 KiB name stays under 3 MiB). So it runs
//! on a stack of its own,
//! [`DEMANGLE_STACK`] mapped once a thread (unmapped as it ends),
//! switched to for the call
//! (`psm`), whatever stack the caller is on: the C ABI may be called on a
//! thread of a few hundred KiB, or a coroutine's stack. What it does not
//! bound is the length of what it prints: [`demangle`](super::demangle)
//! asks it only for names whose expansion is known to be small
//! (`libiberty_bounded`).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt::Write;
use std::mem::MaybeUninit;
use std::sync::OnceLock;

/// `char *__cxa_demangle(const char *mangled, char *buffer, size_t
/// *length, int *status)`.
type CxaDemangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

/// The longest name libiberty takes: it answers nothing for a longer one
/// (twice its length must stay within its recursion limit, 2,048).
/// Checked here too, so a longer name costs no copy.
pub(super) const MAX_NAME: usize = 1024;

/// The stack libiberty runs on: far above the most a name of
/// [`MAX_NAME`] bytes can take. Only what is touched takes memory.
const DEMANGLE_STACK: usize = 8 << 20;

/// libstdc++'s demangler, loaded once: the function, and its
/// [`identity`]. `None` where there is no libstdc++ to load.
fn loaded() -> Option<&'static (CxaDemangle, String)> {
    static FOUND: OnceLock<Option<(CxaDemangle, String)>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            // SAFETY: `dlopen` with a NUL-terminated name. Loading
            // libstdc++ runs its initialisers, which set up the C++
            // runtime's own state and touch nothing of ours; if the
            // process has it loaded already, this is the same handle. The
            // handle is never closed, so the function found below stays
            // mapped for the process's life.
            let library = unsafe {
                libc::dlopen(
                    c"libstdc++.so.6".as_ptr(),
                    libc::RTLD_NOW | libc::RTLD_LOCAL,
                )
            };
            if library.is_null() {
                return None;
            }
            // SAFETY: a symbol looked up in the handle just opened, by a
            // NUL-terminated name.
            let symbol = unsafe { libc::dlsym(library, c"__cxa_demangle".as_ptr()) };
            if symbol.is_null() {
                return None;
            }
            // SAFETY: libstdc++'s `__cxa_demangle` has exactly the C++
            // ABI's signature, which `CxaDemangle` spells.
            let function = unsafe { std::mem::transmute::<*mut c_void, CxaDemangle>(symbol) };
            Some((function, identity_of(symbol)))
        })
        .as_ref()
}

/// The file whose mapping holds `symbol`: its path resolved, a space
/// and its build id in hex (a library updated in place keeps its path);
/// empty if the dynamic linker cannot say.
fn identity_of(symbol: *const c_void) -> String {
    let mut info = MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: `dladdr` only reads the dynamic linker's tables and fills
    // `info`, which is valid for writes, and returns 0 if it cannot.
    if unsafe { libc::dladdr(symbol, info.as_mut_ptr()) } == 0 {
        return String::new();
    }
    // SAFETY: filled by the successful `dladdr` above.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return String::new();
    }
    // SAFETY: `dli_fname` is the NUL-terminated name of a loaded object,
    // which stays loaded (the handle is never closed).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let name = std::path::Path::new(name.to_str().unwrap_or_default());
    let file = std::fs::canonicalize(name).unwrap_or_else(|_| name.to_path_buf());
    let build_id = crate::object_file::build_id_of(&file).unwrap_or_default();
    let mut identity = format!("{} ", file.display());
    for b in build_id {
        let _ = write!(identity, "{b:02x}");
    }
    identity
}

/// Which C++ demangler names are made with: the file libiberty's
/// demangler is loaded from and its build id
/// (`/usr/lib/.../libstdc++.so.6.0.30 1a2b...`), or empty where there is
/// none and `cpp_demangle` alone is used. Symbol indexes hold demangled
/// names, so this is part of what they are made by.
pub(crate) fn identity() -> &'static str {
    loaded().map_or("", |(_, file)| file.as_str())
}

/// `name` demangled by libiberty, or `None`: no libstdc++ here, a name
/// longer than [`MAX_NAME`] or holding a NUL, no stack to run it on (it
/// cannot be mapped, or is in use: a signal handler demangling while its
/// thread was), a name libiberty does not take for a mangled one, or an
/// allocation it could not make.
pub(super) fn demangle(name: &str) -> Option<String> {
    if name.len() > MAX_NAME {
        return None;
    }
    call(&CString::new(name).ok()?)
}

/// A thread's stack for libiberty: its lowest address once mapped (0
/// before), unmapped when the thread ends.
struct DemangleStack {
    base: Cell<usize>,
}

impl Drop for DemangleStack {
    fn drop(&mut self) {
        let base = self.base.get();
        if base != 0 {
            // SAFETY: the mapping `map_stack` made, guard page and all,
            // unmapped once as its thread ends: nothing runs on it then
            // (a call on it holds the thread until it returns).
            unsafe { libc::munmap((base - GUARD) as *mut c_void, DEMANGLE_STACK + GUARD) };
        }
    }
}

thread_local! {
    /// This thread's stack for libiberty, mapped when first needed.
    static STACK: DemangleStack = const { DemangleStack { base: Cell::new(0) } };
    /// Whether a call is on that stack now.
    static ON_STACK: Cell<bool> = const { Cell::new(false) };
}

/// `f` run on this thread's stack for libiberty, or `None` if it has
/// none (it cannot be mapped, or the thread is ending) or is running on
/// it already.
fn on_demangle_stack<R>(f: impl FnOnce() -> R) -> Option<R> {
    if ON_STACK.try_with(Cell::get).unwrap_or(true) {
        return None;
    }
    let base = STACK
        .try_with(|stack| {
            if stack.base.get() == 0 {
                stack.base.set(map_stack()?);
            }
            Some(stack.base.get())
        })
        .ok()
        .flatten()?;
    ON_STACK.with(|on| on.set(true));
    // SAFETY: `base` is the lowest address of a mapping of
    // `DEMANGLE_STACK` bytes above a guard page, page-aligned (more than
    // the 16 bytes x86-64's stacks need), readable and writable, kept
    // until the thread ends and used by no one else (`ON_STACK`). `f`
    // does not unwind: it calls C code and builds plain values.
    let result = unsafe { psm::on_stack(base as *mut u8, DEMANGLE_STACK, f) };
    ON_STACK.with(|on| on.set(false));
    Some(result)
}

/// The inaccessible page below a stack for libiberty.
const GUARD: usize = 4096;

/// Maps a stack for libiberty, [`DEMANGLE_STACK`] bytes above a
/// [`GUARD`] page, and returns its lowest address.
fn map_stack() -> Option<usize> {
    let (guard, len) = (GUARD, DEMANGLE_STACK + GUARD);
    // SAFETY: a private anonymous mapping where the kernel chooses
    // touches no existing memory.
    let mapped = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping's first page, just made: an overflow of the
    // stack above it faults there rather than writing below.
    if unsafe { libc::mprotect(mapped, guard, libc::PROT_NONE) } != 0 {
        // SAFETY: the mapping made above, unused.
        unsafe { libc::munmap(mapped, len) };
        return None;
    }
    Some(mapped as usize + guard)
}

/// `__cxa_demangle` asked for `name` on this thread's stack for
/// libiberty, the name's length unchecked.
fn call(name: &CStr) -> Option<String> {
    let (function, _) = loaded()?;
    let mut status: c_int = -4;
    let demangled = on_demangle_stack(|| {
        // SAFETY: `name` is NUL-terminated and outlives the call; a null
        // buffer and length ask `__cxa_demangle` to allocate the answer
        // with `malloc`; `status` is a valid `int` to write. It keeps no
        // pointer after it returns, and is safe to call from any thread.
        unsafe {
            function(
                name.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &raw mut status,
            )
        }
    })?;
    if demangled.is_null() {
        return None;
    }
    let text = if status == 0 {
        // SAFETY: a non-null answer is a NUL-terminated string of its
        // own, read before it is freed.
        let answer = unsafe { CStr::from_ptr(demangled) };
        answer.to_str().ok().map(str::to_owned)
    } else {
        None
    };
    // SAFETY: the answer was allocated with `malloc` (the ABI says so)
    // and is freed once, after the last read of it above.
    unsafe { libc::free(demangled.cast()) };
    text
}

#[cfg(test)]
mod tests {
    use super::{call, demangle, identity, MAX_NAME};

    /// libstdc++ is on every machine the tests run on (g++ builds their
    /// fixtures): its demangler is found and answers as c++filt does.
    #[test]
    fn libstdcxx_demangles() {
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi").as_deref(),
            Some("std::vector<int, std::allocator<int> >::push_back(int const&)")
        );
        assert!(identity().contains("libstdc++"), "{}", identity());
    }

    /// `f(A, A, ...)`, `bytes` long.
    fn name_of(bytes: usize) -> String {
        assert!(bytes >= 6 && bytes.is_multiple_of(2));
        format!("_Z1f{}", "1A".repeat((bytes - 4) / 2))
    }

    /// What is not a mangled name gives no answer (and no crash); a name
    /// of [`MAX_NAME`] bytes is libiberty's longest: it answers it and
    /// refuses one a byte longer.
    #[test]
    fn refusals_and_the_longest_name() {
        assert_eq!(demangle("main"), None);
        assert_eq!(demangle("_Z"), None);
        assert_eq!(demangle("_ZN3foo"), None);
        assert_eq!(demangle("_Z3f\0oi"), None);
        assert_eq!(
            demangle(&name_of(8)).as_deref(),
            Some("f(A, A)"),
            "{}",
            name_of(8)
        );
        let longest = demangle(&name_of(MAX_NAME)).expect("libiberty takes 1,024 bytes");
        assert_eq!(longest.matches('A').count(), (MAX_NAME - 4) / 2);
        // One more byte, the last parameter `AB`: refused by libiberty
        // itself, not only by the check before it.
        let longer = format!("{}2AB", name_of(MAX_NAME - 2));
        assert_eq!(longer.len(), MAX_NAME + 1);
        assert_eq!(
            call(&std::ffi::CString::new(name_of(MAX_NAME)).unwrap()).as_deref(),
            Some(longest.as_str())
        );
        assert_eq!(
            call(&std::ffi::CString::new(longer.as_str()).unwrap()),
            None
        );
        let shorter = &format!("{}2AB", name_of(MAX_NAME - 4));
        assert!(demangle(shorter).is_some_and(|d| d.ends_with("A, AB)")));
        assert_eq!(demangle(&longer), None);
    }

    /// `f<int>(void (*)(int&, ..., A<int>, ...))` with `refs` references
    /// to the template's parameter and `templates` uses of `A<int>`:
    /// libiberty sizes arrays on its stack by the product of the two.
    fn stack_hungry(refs: usize, templates: usize) -> String {
        format!(
            "_Z1fIiEvPFv{}{}E{}",
            "RT_".repeat(refs),
            "1AIiE".repeat(templates),
            super::super::tests::substitution((2 * refs + 2 * templates).try_into().unwrap())
        )
    }

    /// A name libiberty needs 1.2 MiB of stack for, asked from a thread
    /// of 256 KiB (whose own stack libiberty would overflow), is
    /// demangled, on the stack for libiberty, as c++filt prints it.
    #[test]
    fn a_small_stack_is_not_libibertys() {
        let name = stack_hungry(170, 98);
        assert_eq!(name.len(), 1016, "{name}");
        let cxxfilt = std::process::Command::new("c++filt")
            .args(["-i", &name])
            .output()
            .expect("c++filt runs");
        let theirs = String::from_utf8(cxxfilt.stdout).unwrap();
        let theirs = theirs.trim();
        assert!(theirs.starts_with("void f<int>(void (*)(int&"), "{theirs}");
        let asked = name.clone();
        let ours = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || demangle(&asked))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(ours.as_deref(), Some(theirs));
    }
}
