//! Anonymous memory for per-thread buffers, fenced.
//!
//! Buffers are mapped rather than allocated from the heap so that the
//! first write of a thread — which may happen inside a signal handler —
//! never enters `malloc`: `mmap` is async-signal-safe.

use std::io;
use std::ptr::NonNull;

/// A private anonymous mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; which thread
// unmaps it does not matter.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes (rounded up to whole pages) of zeroed memory.
    pub(crate) fn anonymous(len: usize) -> io::Result<Mapping> {
        let len = round_to_pages(len.max(1));
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing touches no existing memory.
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
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { ptr, len })
    }

    /// Maps room for `len` bytes that end exactly where an inaccessible
    /// guard page begins. Returns the mapping, the buffer's first byte and
    /// the guard page.
    pub(crate) fn guarded(len: usize) -> io::Result<(Mapping, *mut u8, *mut u8)> {
        let page = crate::page_size();
        let data = round_to_pages(len.max(1));
        let with_guard = data
            .checked_add(page)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let mapping = Mapping::anonymous(with_guard)?;
        let guard = mapping.as_ptr().wrapping_add(data);
        // SAFETY: the last page of our own fresh mapping.
        if unsafe { libc::mprotect(guard.cast(), page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((mapping, guard.wrapping_sub(len), guard))
    }

    /// The first byte of the mapping.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping created in
        // `anonymous`, and nothing refers to it once its owner drops it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

fn round_to_pages(len: usize) -> usize {
    let page = crate::page_size();
    // Saturated at the largest multiple of a page: a length no mapping
    // can have, which the kernel then refuses.
    len.div_ceil(page).saturating_mul(page) & !(page - 1)
}
