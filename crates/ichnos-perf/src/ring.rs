//! An event's ring buffer: one header page and `2^n` data pages the
//! kernel writes records into.
//!
//! The kernel advances `data_head` (we load it with Acquire: the bytes
//! below it are written) and never overwrites bytes we have not released
//! by storing `data_tail` (Release, after we copied them out). Positions
//! are byte counts that only grow; a record that wraps past the end of the
//! data area is copied out in two pieces, so the caller always sees whole
//! records in one buffer.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::PerfEvent;
use crate::record::HEADER_LEN;
use crate::sys::Mapping;

/// Offsets in the header page (`struct perf_event_mmap_page`).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

/// A mapped ring.
pub struct Ring {
    map: Mapping,
    data_offset: usize,
    data_size: usize,
    tail: u64,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("data_size", &self.data_size)
            .field("tail", &self.tail)
            .finish_non_exhaustive()
    }
}

/// Why a ring could not be mapped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// The size is not one page plus a power of two of pages.
    #[error("{data_pages} data pages: a ring needs a power of two of them")]
    BadSize {
        /// Asked for.
        data_pages: usize,
    },
    /// The kernel refused to lock that much memory.
    #[error("cannot map a {kib} KiB perf ring buffer: {source} (locked memory is limited by kernel.perf_event_mlock_kb, {} KiB per CPU, and beyond it by ulimit -l; raise them with sysctl kernel.perf_event_mlock_kb=N or ulimit -l, or profile at a lower frequency)", mlock_text())]
    Locked {
        /// The ring's size.
        kib: usize,
        /// The error.
        source: io::Error,
    },
    /// Any other failure.
    #[error("cannot map a {kib} KiB perf ring buffer: {source}")]
    Other {
        /// The ring's size.
        kib: usize,
        /// The error.
        source: io::Error,
    },
}

fn mlock_text() -> String {
    crate::event::mlock_kb().map_or_else(|| "?".to_owned(), |kb| kb.to_string())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// What one [`Ring::read_records`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingRead {
    /// Records handed on.
    pub records: usize,
    /// Bytes released to the kernel (all that was written).
    pub bytes: usize,
    /// The framing broke: the bytes after the last record were not read.
    pub broken: bool,
}

impl Ring {
    /// Maps a ring of `data_pages` pages (a power of two) for `event`.
    pub fn new(event: &PerfEvent, data_pages: usize) -> Result<Ring, RingError> {
        if !data_pages.is_power_of_two() {
            return Err(RingError::BadSize { data_pages });
        }
        let page = page_size();
        let len = (data_pages + 1) * page;
        let map = Mapping::new(event.owned_fd(), len).map_err(|source| {
            let kib = data_pages * page / 1024;
            if source.raw_os_error() == Some(libc::EPERM) {
                RingError::Locked { kib, source }
            } else {
                RingError::Other { kib, source }
            }
        })?;
        let mut ring = Ring {
            map,
            data_offset: page,
            data_size: data_pages * page,
            tail: 0,
        };
        // Kernels since 4.1 say where the data area is; trust them only
        // where it fits the mapping.
        let (offset, size) = (ring.word(DATA_OFFSET), ring.word(DATA_SIZE));
        if let (Ok(offset), Ok(size)) = (usize::try_from(offset), usize::try_from(size)) {
            if offset >= 4096
                && size.is_power_of_two()
                && offset
                    .checked_add(size)
                    .is_some_and(|end| end <= ring.map.len())
            {
                (ring.data_offset, ring.data_size) = (offset, size);
            }
        }
        ring.tail = ring.header_word(DATA_TAIL).load(Ordering::Acquire);
        Ok(ring)
    }

    // The mapping is page aligned and every offset used is a multiple of 8.
    #[allow(clippy::cast_ptr_alignment)]
    fn header_word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the header page is mapped for as long as `self`, 8-byte
        // aligned (the mapping is page aligned), and the kernel accesses
        // these words atomically too.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn word(&self, offset: usize) -> u64 {
        self.header_word(offset).load(Ordering::Relaxed)
    }

    /// Bytes of the data area.
    #[must_use]
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Bytes written and not yet read.
    #[must_use]
    pub fn available(&self) -> u64 {
        let head = self.header_word(DATA_HEAD).load(Ordering::Acquire);
        head.wrapping_sub(self.tail).min(self.data_size as u64)
    }

    /// Appends every record in the ring to `out` and releases them to the
    /// kernel. Returns the number of bytes appended.
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> usize {
        let head = self.header_word(DATA_HEAD).load(Ordering::Acquire);
        // The kernel never gets more than the ring ahead of the tail; a
        // head that says otherwise is read as a full ring.
        let n = usize::try_from(head.wrapping_sub(self.tail))
            .unwrap_or(usize::MAX)
            .min(self.data_size);
        if n == 0 {
            return 0;
        }
        let start = (head.wrapping_sub(n as u64) % self.data_size as u64) as usize;
        let first = n.min(self.data_size - start);
        out.reserve(n);
        out.extend_from_slice(self.data(start, first));
        out.extend_from_slice(self.data(0, n - first));
        self.tail = head;
        self.header_word(DATA_TAIL).store(head, Ordering::Release);
        n
    }

    /// Hands every record in the ring to `f`, in ring order, where it lies
    /// (a record that wraps past the end of the data area is put together
    /// in `scratch` first), then releases them all to the kernel. Stops at
    /// a header whose size is under 8 bytes or runs past what was written:
    /// what follows cannot be framed, and is released unread.
    ///
    /// Unlike [`Ring::read_into`], nothing is copied that `f` does not
    /// copy: a consumer that keeps only part of each record (the stack a
    /// sample needs, not all the kernel copied) saves the rest.
    pub fn read_records(&mut self, scratch: &mut Vec<u8>, mut f: impl FnMut(&[u8])) -> RingRead {
        let head = self.header_word(DATA_HEAD).load(Ordering::Acquire);
        let n = usize::try_from(head.wrapping_sub(self.tail))
            .unwrap_or(usize::MAX)
            .min(self.data_size);
        let mut read = RingRead::default();
        let start = (head.wrapping_sub(n as u64) % self.data_size as u64) as usize;
        let mut done = 0;
        while n - done >= HEADER_LEN {
            let at = (start + done) % self.data_size;
            // Records are 8-byte aligned and the data area a power of two
            // pages: a header never wraps.
            let mut header = [0u8; HEADER_LEN];
            if at + HEADER_LEN <= self.data_size {
                header.copy_from_slice(self.data(at, HEADER_LEN));
            } else {
                read.broken = true;
                break;
            }
            let size = usize::from(u16::from_le_bytes([header[6], header[7]]));
            if size < HEADER_LEN || size > n - done {
                read.broken = true;
                break;
            }
            if at + size <= self.data_size {
                f(self.data(at, size));
            } else {
                let first = self.data_size - at;
                scratch.clear();
                scratch.extend_from_slice(self.data(at, first));
                scratch.extend_from_slice(self.data(0, size - first));
                f(scratch);
            }
            read.records += 1;
            done += size;
        }
        if n - done > 0 && !read.broken {
            // A tail shorter than a header.
            read.broken = true;
        }
        read.bytes = n;
        self.tail = head;
        self.header_word(DATA_TAIL).store(head, Ordering::Release);
        read
    }

    fn data(&self, offset: usize, len: usize) -> &[u8] {
        debug_assert!(offset + len <= self.data_size);
        // SAFETY: the range is inside the data area of our mapping; the
        // kernel does not write bytes between our tail and its head, which
        // is all we read, until we store a tail past them.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset + offset), len) }
    }
}
