//! Executable memory for the demo's JIT, fenced.

use std::io;
use std::ops::Range;

/// An anonymous mapping holding code, read-execute.
pub struct ExecMemory {
    ptr: *mut u8,
    len: usize,
}

impl ExecMemory {
    /// Maps a page, copies `code` in, and makes it read-execute.
    pub fn with_code(code: &[u8]) -> io::Result<ExecMemory> {
        let len = code.len().div_ceil(4096) * 4096;
        // SAFETY: a new private anonymous mapping; nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let memory = ExecMemory {
            ptr: ptr.cast(),
            len,
        };
        // SAFETY: `code` fits the fresh writable mapping; then the
        // mapping becomes read-execute (no longer written).
        unsafe {
            std::ptr::copy_nonoverlapping(code.as_ptr(), memory.ptr, code.len());
            if libc::mprotect(ptr, len, libc::PROT_READ | libc::PROT_EXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(memory)
    }

    /// The first byte.
    pub fn ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The addresses of the code (the whole mapping).
    pub fn range(&self) -> Range<u64> {
        let start = self.ptr as u64;
        start..start + self.len as u64
    }
}

impl Drop for ExecMemory {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made above, no longer executed.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

// SAFETY: the mapping is owned by this value and never written after
// construction.
unsafe impl Send for ExecMemory {}
// SAFETY: as for Send: shared access only executes or reads it.
unsafe impl Sync for ExecMemory {}
