//! Anonymous memory for per-thread buffers, fenced.
//!
//! Buffers are mapped rather than allocated from the heap so that the
//! first write of a thread — which may happen inside a signal handler —
//! never enters `malloc`: `mmap` is async-signal-safe.
//!
//! The page a thread's first records go to is made present when the
//! buffer is mapped ([`Mapping::populate`]), so that the thread's first
//! write does not fault: a fault costs about a microsecond (a virtual
//! machine's zeroed page), after the first event's clock reading, and so
//! fell inside the first call a tracer records (a traced program's `main`
//! looked 2 us longer than it was). Every thread that writes touches that
//! page, so this costs none of them anything. The later pages fault in
//! as a thread's first pass through its buffer reaches them (a
//! microsecond in one event of each 256 of a trace's), as a timer
//! interrupt takes one: making the whole buffer present up front costs a
//! thread that writes little 25 us and its whole buffer's memory
//! (2,000 threads of one traced call each: 20 us a thread, 45 us with
//! 128 KiB populated).

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

    /// Makes the pages of this mapping that hold `len` bytes from `start`
    /// present and writable now rather than at their first write. Best
    /// effort: a kernel that cannot (short of memory) leaves them to fault
    /// in later, as they would have without this. `errno` is kept: a
    /// thread's first write may come between a failed call of the
    /// program's and its look at `errno`.
    pub(crate) fn populate(&self, start: *const u8, len: usize) {
        let page = crate::page_size();
        let base = self.as_ptr() as usize;
        let from = (start as usize).max(base) & !(page - 1);
        let to = (start as usize)
            .saturating_add(len)
            .min(base + self.len)
            .next_multiple_of(page)
            .min(base + self.len);
        if from >= to {
            return;
        }
        // SAFETY: whole pages of this mapping (clamped above), writable.
        unsafe { make_present(from, to) };
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

/// Makes the pages from `from` to `to` present and writable now (each
/// page's copy made, where `fork` shares it) rather than at their next
/// write, changing no byte of them. Best effort: a kernel that cannot
/// (short of memory) leaves them to fault in later. `errno` is kept: this
/// may run between a failed call of the program's and its look at
/// `errno`.
///
/// # Safety
/// `from` and `to` are page-aligned and the pages between them are
/// mapped writable memory of the caller's, which nothing else writes
/// meanwhile.
pub(crate) unsafe fn make_present(from: usize, to: usize) {
    if from >= to {
        return;
    }
    let _errno = super::ErrnoGuard::save();
    // SAFETY: the caller's writable pages; populating them changes no
    // byte of them.
    let done = unsafe {
        libc::madvise(
            from as *mut libc::c_void,
            to - from,
            libc::MADV_POPULATE_WRITE,
        )
    } == 0;
    if done || io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
        return;
    }
    // A kernel before 5.14 does not know the advice: a byte of each page
    // read and written back faults it in, as the advice would.
    for address in (from..to).step_by(crate::page_size()) {
        let byte = address as *mut u8;
        // SAFETY: a byte of the caller's writable pages, which nothing
        // else writes meanwhile: it keeps its value.
        unsafe { byte.write_volatile(byte.read_volatile()) };
    }
}

fn round_to_pages(len: usize) -> usize {
    let page = crate::page_size();
    // Saturated at the largest multiple of a page: a length no mapping
    // can have, which the kernel then refuses.
    len.div_ceil(page).saturating_mul(page) & !(page - 1)
}
