//! Which compiler built the code: clang's `-finstrument-functions` gives
//! the calls an exception unwinds no exits, gcc's does (`catch.rs`).
//!
//! Both write their name and version into the `.comment` section of
//! every object they build ("clang version 14.0.6", "GCC: (Debian
//! 12.2.0-14) 12.2.0"); the linker merges them, so an executable or
//! library linked from clang's objects names clang (and GCC, for the C
//! library's start files). A `.comment` stripped away reads as not clang.
//! The runtime notes each loaded object's at the start and any loaded
//! later at the first catch in it, by address range.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use object::{Object, ObjectSection};

/// Objects noted at most (past it, code in others reads as not clang's).
const MAX_OBJECTS: usize = 256;

/// The objects noted: each one's address range and whether clang built
/// it, written once before [`NOTED`] counts it, so that a catch reads
/// them without a lock.
static STARTS: [AtomicUsize; MAX_OBJECTS] = [const { AtomicUsize::new(0) }; MAX_OBJECTS];
static ENDS: [AtomicUsize; MAX_OBJECTS] = [const { AtomicUsize::new(0) }; MAX_OBJECTS];
static CLANG: [AtomicBool; MAX_OBJECTS] = [const { AtomicBool::new(false) }; MAX_OBJECTS];
static NOTED: AtomicUsize = AtomicUsize::new(0);
/// Held while objects are noted (tried at a catch, never waited for: a
/// catch in a signal handler may have interrupted its holder).
static NOTING: Mutex<()> = Mutex::new(());

/// Notes the loaded objects not noted yet (at the start).
pub(crate) fn note_loaded_objects() {
    let _noting = NOTING.lock();
    note_new();
}

/// Whether clang built the loaded object whose code holds `address`
/// (false where that is not known). An object loaded since the last look
/// is noted now (its `.comment` read once); one unloaded keeps its entry,
/// which code loaded later at the same addresses would be taken for.
pub(crate) fn clang_built(address: usize) -> bool {
    if let Some(clang) = find(address) {
        return clang;
    }
    if let Ok(_noting) = NOTING.try_lock() {
        note_new();
    }
    find(address).unwrap_or(false)
}

/// The noted object that holds `address`: whether clang built it.
fn find(address: usize) -> Option<bool> {
    let noted = NOTED.load(Ordering::Acquire);
    (0..noted)
        .find(|&i| {
            (STARTS[i].load(Ordering::Relaxed)..ENDS[i].load(Ordering::Relaxed)).contains(&address)
        })
        .map(|i| CLANG[i].load(Ordering::Relaxed))
}

/// Notes the loaded objects not noted yet (with [`NOTING`] held).
fn note_new() {
    for (name, start, end) in loaded_objects() {
        let noted = NOTED.load(Ordering::Relaxed);
        if noted >= MAX_OBJECTS {
            break;
        }
        if (0..noted).any(|i| STARTS[i].load(Ordering::Relaxed) == start) {
            continue;
        }
        // The program itself has no name here.
        let path = if name.is_empty() {
            c"/proc/self/exe"
        } else {
            name.as_c_str()
        };
        STARTS[noted].store(start, Ordering::Relaxed);
        ENDS[noted].store(end, Ordering::Relaxed);
        CLANG[noted].store(built_by_clang(path), Ordering::Relaxed);
        NOTED.store(noted + 1, Ordering::Release);
    }
}

/// The loaded objects: each one's name (empty for the program) and the
/// range its loaded segments span.
fn loaded_objects() -> Vec<(CString, usize, usize)> {
    extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        found: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `found` is the vector passed below; `info` the loader's
        // description of one object, whose program headers it points to.
        let (found, info) = unsafe { (&mut *found.cast::<Vec<(CString, usize, usize)>>(), &*info) };
        let headers: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
            &[]
        } else {
            // SAFETY: the loader's `dlpi_phnum` headers at `dlpi_phdr`.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let base = info.dlpi_addr as usize;
        let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let start = loads
            .clone()
            .map(|h| base.wrapping_add(h.p_vaddr as usize))
            .min();
        let end = loads
            .map(|h| base.wrapping_add(h.p_vaddr.wrapping_add(h.p_memsz) as usize))
            .max();
        let name = if info.dlpi_name.is_null() {
            CString::default()
        } else {
            // SAFETY: the loader's NUL-terminated name of the object.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_owned()
        };
        if let (Some(start), Some(end)) = (start, end) {
            found.push((name, start, end));
        }
        0
    }
    let mut found: Vec<(CString, usize, usize)> = Vec::new();
    // SAFETY: the callback touches only `found` and what the loader gives.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut found).cast()) };
    found
}

/// Whether the object at `path` names clang in its `.comment` (false when
/// it cannot be read or parsed). Only its headers and that section are
/// read.
pub(crate) fn built_by_clang(path: &CStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let cache = object::ReadCache::new(file);
    let Ok(object) = object::File::parse(&cache) else {
        return false;
    };
    object
        .section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .is_some_and(|comment| comment.windows(14).any(|w| w == b"clang version "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The compilers' own `.comment`s, against binutils' reading of it:
    /// an executable built by clang names it, one built by gcc does not,
    /// and one whose `.comment` was removed does not.
    #[test]
    fn tells_clang_from_gcc_as_readelf_does() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let source = dir.join("main.c");
        std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
        let mut seen = Vec::new();
        for compiler in ["gcc", "clang"] {
            let exe = dir.join(compiler);
            let built = Command::new(compiler)
                .arg("-o")
                .arg(&exe)
                .arg(&source)
                .status()
                .unwrap_or_else(|e| {
                    panic!("{compiler}: {e} (install it: apt-get install {compiler})")
                });
            assert!(built.success(), "{compiler} failed");
            let readelf = Command::new("readelf")
                .args(["-p", ".comment"])
                .arg(&exe)
                .output()
                .unwrap();
            let says_clang = String::from_utf8_lossy(&readelf.stdout).contains("clang version");
            let path = std::ffi::CString::new(exe.as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(built_by_clang(&path), says_clang, "{compiler}");
            seen.push(says_clang);
            let stripped = dir.join(format!("{compiler}-stripped"));
            let strip = Command::new("objcopy")
                .args(["--remove-section", ".comment"])
                .arg(&exe)
                .arg(&stripped)
                .status()
                .unwrap();
            assert!(strip.success());
            let path = std::ffi::CString::new(stripped.as_os_str().as_encoded_bytes()).unwrap();
            assert!(!built_by_clang(&path), "{compiler}, no .comment");
        }
        assert_eq!(
            seen,
            [false, true],
            "readelf: gcc's names no clang, clang's does"
        );
        assert!(!built_by_clang(c"/nonexistent/ichnos"));
    }
}
