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
//! recursion limit). It prints argument lists by recursion, one level an
//! element, up to 1,024 levels: a 1 KiB name took 212 KiB of stack, one
//! with a pack of 1,000 elements 343 KiB, so it runs only on a thread
//! with [`MIN_STACK`] left (the C ABI may be called from a thread of a
//! few hundred KiB). What it does not bound is the length of what it
//! prints: [`demangle`](super::demangle) asks it only for names whose
//! expansion is known to be small (`libiberty_bounded`).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
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

/// The stack a call must have left: well above the most a name of
/// [`MAX_NAME`] bytes was measured to take (343 KiB).
const MIN_STACK: usize = 1 << 20;

/// libstdc++'s demangler, loaded once: the function, and the file it
/// came from. `None` where there is no libstdc++ to load.
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
            Some((function, file_of(symbol)))
        })
        .as_ref()
}

/// The file (its path resolved) whose mapping holds `symbol`; empty if
/// the dynamic linker cannot say.
fn file_of(symbol: *const c_void) -> String {
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
    std::fs::canonicalize(name)
        .unwrap_or_else(|_| name.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// Which C++ demangler names are made with: the file libiberty's
/// demangler is loaded from, or empty where there is none and
/// `cpp_demangle` alone is used. Symbol indexes hold demangled names, so
/// this is part of what they are made by.
pub(crate) fn identity() -> &'static str {
    loaded().map_or("", |(_, file)| file.as_str())
}

/// `name` demangled by libiberty, or `None`: no libstdc++ here, a name
/// longer than [`MAX_NAME`] or holding a NUL, too little stack left, a
/// name libiberty does not take for a mangled one, or an allocation it
/// could not make.
pub(super) fn demangle(name: &str) -> Option<String> {
    if name.len() > MAX_NAME || stack_left().is_none_or(|left| left < MIN_STACK) {
        return None;
    }
    call(&CString::new(name).ok()?)
}

/// `__cxa_demangle` asked for `name`, no bounds checked.
fn call(name: &CStr) -> Option<String> {
    let (function, _) = loaded()?;
    let mut status: c_int = -4;
    // SAFETY: `name` is NUL-terminated and outlives the call; a null
    // buffer and length ask `__cxa_demangle` to allocate the answer with
    // `malloc`; `status` is a valid `int` to write. It keeps no pointer
    // after it returns, and is safe to call from any thread.
    let demangled = unsafe {
        function(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &raw mut status,
        )
    };
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

thread_local! {
    /// The lowest address of this thread's stack, once asked.
    static STACK_BOTTOM: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The bytes of stack left below this call (stacks grow down on every
/// platform ichnos runs on); `None` if the thread's stack is unknown.
fn stack_left() -> Option<usize> {
    let bottom = STACK_BOTTOM.with(|cached| {
        cached.get().or_else(|| {
            let bottom = stack_bottom()?;
            cached.set(Some(bottom));
            Some(bottom)
        })
    })?;
    let here = 0u8;
    (std::ptr::from_ref(&here) as usize).checked_sub(bottom)
}

/// The lowest address of the calling thread's stack, from its attributes
/// (for the main thread glibc reads them from `/proc/self/maps` and the
/// stack's limit: asked once a thread).
fn stack_bottom() -> Option<usize> {
    let mut attr = MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: fills `attr`, valid for writes, with the calling thread's
    // attributes, initialising it only when it returns 0.
    if unsafe { libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) } != 0 {
        return None;
    }
    let (mut addr, mut size) = (std::ptr::null_mut::<c_void>(), 0usize);
    // SAFETY: `attr` was initialised above; the out-pointers are valid
    // for writes.
    let got = unsafe { libc::pthread_attr_getstack(attr.as_ptr(), &raw mut addr, &raw mut size) };
    // SAFETY: `attr` was initialised above and is destroyed once.
    unsafe { libc::pthread_attr_destroy(attr.as_mut_ptr()) };
    (got == 0 && !addr.is_null()).then_some(addr as usize)
}

#[cfg(test)]
mod tests {
    use super::{call, demangle, identity, stack_left, MAX_NAME, MIN_STACK};

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

    /// A thread with less stack than libiberty may need does not call it;
    /// one with more does.
    #[test]
    fn only_with_stack_to_spare() {
        let small = std::thread::Builder::new()
            .stack_size(MIN_STACK / 2)
            .spawn(|| (stack_left(), demangle("_Z3fooi")))
            .unwrap()
            .join()
            .unwrap();
        assert!(small.0.is_some_and(|left| left < MIN_STACK), "{small:?}");
        assert_eq!(small.1, None);
        let large = std::thread::Builder::new()
            .stack_size(4 * MIN_STACK)
            .spawn(|| (stack_left(), demangle("_Z3fooi")))
            .unwrap()
            .join()
            .unwrap();
        assert!(large.0.is_some_and(|left| left >= MIN_STACK), "{large:?}");
        assert_eq!(large.1.as_deref(), Some("foo(int)"));
    }
}
