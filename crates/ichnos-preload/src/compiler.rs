//! Which compiler built the program: clang's `-finstrument-functions`
//! gives the calls an exception unwinds no exits, gcc's does (`catch.rs`).
//!
//! Both write their name and version into the `.comment` section of
//! every object they build ("clang version 14.0.6", "GCC: (Debian
//! 12.2.0-14) 12.2.0"); the linker merges them, so an executable linked
//! from clang's objects names clang (and GCC, for the C library's start
//! files). A `.comment` stripped away reads as not clang.

use std::ffi::CStr;

use object::{Object, ObjectSection};

/// Bytes of an executable looked at, at most (its section headers and
/// `.comment` are read from a mapping, so this bounds only the mapping).
const MAX_EXECUTABLE: u64 = 1 << 36;

/// Whether the object at `path` names clang in its `.comment` (false when
/// it cannot be read or parsed).
pub(crate) fn built_by_clang(path: &CStr) -> bool {
    let Some(map) = Mapping::open(path) else {
        return false;
    };
    let Ok(file) = object::File::parse(map.bytes()) else {
        return false;
    };
    file.section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .is_some_and(|comment| comment.windows(14).any(|w| w == b"clang version "))
}

/// A file mapped read-only, whole.
struct Mapping {
    start: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn open(path: &CStr) -> Option<Mapping> {
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `stat` is plain data, filled by fstat.
        let mut status: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a stat buffer.
        let ok = unsafe { libc::fstat(fd, &raw mut status) } == 0;
        let size = u64::try_from(status.st_size).unwrap_or(0);
        let mapping = if ok && size > 0 && size <= MAX_EXECUTABLE {
            let len = size as usize;
            // SAFETY: a new private read-only mapping of the open file;
            // nothing else is touched.
            let start = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    fd,
                    0,
                )
            };
            (start != libc::MAP_FAILED).then_some(Mapping { start, len })
        } else {
            None
        };
        // SAFETY: closes the descriptor opened above (the mapping stays).
        unsafe { libc::close(fd) };
        mapping
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes mapped at `start` until drop. (An
        // executable that runs cannot be written to, ETXTBSY, so the file
        // does not shrink under the mapping.)
        unsafe { std::slice::from_raw_parts(self.start.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, no longer borrowed.
        unsafe { libc::munmap(self.start, self.len) };
    }
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
