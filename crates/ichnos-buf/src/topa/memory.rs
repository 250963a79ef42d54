//! The memory behind a region-table buffer: one memfd holding a header
//! page and every region, each region mapped on its own so that regions are
//! genuinely non-contiguous, as perf's AUX pages are. Another process that
//! receives the memfd maps the same file and sees the same buffer.

use super::table::{RegionTable, TableError};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Identifies the header ("ICHNTOPA").
const MAGIC: u64 = 0x4150_4f54_4e48_4349;
const VERSION: u32 = 1;
/// Regions a header page can describe.
pub const MAX_REGIONS: usize = 400;
/// Bytes reserved for the header at the start of the memfd.
pub(crate) const HEADER_BYTES: usize = 4096;

/// A 64-byte line of its own, so that producer and consumer words do not
/// share a cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct Line<T>(pub(crate) T);

/// The shared header (first page of the memfd). Layout is fixed (`repr(C)`);
/// docs/topa-buffer.md describes it.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) magic: u64,
    pub(crate) version: u32,
    pub(crate) nr_regions: u32,
    pub(crate) capacity: u64,
    /// 0 stop-on-full, 1 snapshot, 2 block-on-full.
    pub(crate) mode: u32,
    /// bit 0: region-granular stop; bit 1: region-granular notify.
    pub(crate) granularity: u32,
    pub(crate) watermark: u64,
    pub(crate) block_timeout_ns: u64,
    /// Fill byte for abandoned region tails.
    pub(crate) region_pad: u8,
    /// The page size regions are made of (and the header's size).
    pub(crate) page_size: u32,
    /// Producer positions (written by the producer only).
    pub(crate) producer: Line<ProducerWords>,
    /// Consumer position (written by the consumer only).
    pub(crate) tail: Line<AtomicU64>,
    /// Producer-side counters.
    pub(crate) counters: Line<Counters>,
    /// Bumped by the producer at each notification; the consumer waits on it.
    pub(crate) data_futex: Line<AtomicU32>,
    /// Bumped by the consumer at each advance; a blocked producer waits on it.
    pub(crate) space_futex: Line<AtomicU32>,
    pub(crate) consumer_waiting: AtomicU32,
    pub(crate) producer_waiting: AtomicU32,
    pub(crate) producer_gone: AtomicU32,
    pub(crate) consumer_gone: AtomicU32,
    /// Set while a `Producer` exists (anywhere): one producer per buffer.
    pub(crate) producer_claimed: AtomicU32,
    /// Set while a `Consumer` exists: one consumer per buffer.
    pub(crate) consumer_claimed: AtomicU32,
    pub(crate) region_lens: [u64; MAX_REGIONS],
}

/// The producer's published positions.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct ProducerWords {
    /// Bytes below this are written (Release).
    pub(crate) head: AtomicU64,
    /// Snapshot mode: bytes below this may be being written, so data
    /// older than `ahead - capacity` may already be overwritten.
    pub(crate) ahead: AtomicU64,
}

/// What the producer counts (all exact).
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) written: AtomicU64,
    pub(crate) lost_bytes: AtomicU64,
    pub(crate) lost_writes: AtomicU64,
    pub(crate) truncations: AtomicU64,
    pub(crate) notifications: AtomicU64,
    pub(crate) padded_bytes: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// How to allocate the regions (the `gfp` flags of `pt_buffer_init_topa`
/// in user-space terms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocFlags {
    /// Fault every page in now (`MAP_POPULATE`), so the producer never
    /// takes a page fault.
    pub populate: bool,
    /// Lock the pages in memory (`mlock`); subject to `RLIMIT_MEMLOCK`.
    pub lock: bool,
    /// Back the buffer with huge pages (`MFD_HUGETLB`); needs reserved
    /// huge pages (`/proc/sys/vm/nr_hugepages`).
    pub huge_pages: bool,
}

/// Why a buffer's memory could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AllocError {
    /// The region lengths do not form a table.
    #[error("bad region table: {0}")]
    Table(#[from] TableError),
    /// Regions must be whole pages (huge pages with `huge_pages`).
    #[error("region {index} is {len} bytes, not a multiple of the {page}-byte page")]
    NotPageSized {
        /// The region.
        index: usize,
        /// Its length.
        len: u64,
        /// The page size that applies.
        page: u64,
    },
    /// More regions than the header can describe.
    #[error("{0} regions; at most {MAX_REGIONS} are supported")]
    TooManyRegions(usize),
    /// `nr_pages` of 0, or a CPU that does not exist.
    #[error("{0}")]
    Invalid(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// Which step.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The buffer already has a producer (or a consumer).
    #[error("the buffer's {0} is taken (one producer and one consumer per buffer)")]
    Taken(&'static str),
    /// A memfd handed to [`Mapped::open`] is not a region-table buffer.
    #[error("not a region-table buffer: {0}")]
    BadHeader(String),
}

fn os(what: &'static str) -> impl FnOnce(io::Error) -> AllocError {
    move |source| AllocError::Os { what, source }
}

/// A mapping of part of the memfd, unmapped on drop.
#[derive(Debug)]
struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

impl Map {
    fn new(fd: &OwnedFd, offset: u64, len: usize, populate: bool) -> io::Result<Map> {
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a new shared mapping of our own memfd at a kernel-chosen
        // address; it aliases no Rust object.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.as_raw_fd(),
                libc::off_t::try_from(offset)
                    .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(ptr.cast())
            .map(|ptr| Map { ptr, len })
            .ok_or_else(|| io::Error::other("mmap returned NULL"))
    }
}

/// The header at the start of a header mapping.
#[allow(clippy::cast_ptr_alignment)] // mmap returns page-aligned memory
fn header_ptr(map: &Map) -> *mut Header {
    map.ptr.as_ptr().cast::<Header>()
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `Map::new`; its users are
        // gone (it is dropped with the `Mapped` that owns it).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The mapped buffer: header and regions.
#[derive(Debug)]
pub struct Mapped {
    fd: OwnedFd,
    header: Map,
    regions: Vec<Map>,
    table: RegionTable,
}

// SAFETY: the mappings are shared memory whose concurrent use goes through
// the header's atomics (see ring.rs); the pointers do not tie the value to
// a thread.
unsafe impl Send for Mapped {}
// SAFETY: as above; `&Mapped` gives out only the header (atomics) and raw
// region pointers whose use the ring protocol orders.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Creates a memfd with a header and regions of `lens` bytes.
    pub(crate) fn create(
        lens: &[u64],
        flags: AllocFlags,
        init: impl FnOnce(&mut Header),
    ) -> Result<Mapped, AllocError> {
        let table = RegionTable::new(lens)?;
        if lens.len() > MAX_REGIONS {
            return Err(AllocError::TooManyRegions(lens.len()));
        }
        let page = if flags.huge_pages {
            2 << 20
        } else {
            crate::page_size() as u64
        };
        for (index, &len) in lens.iter().enumerate() {
            if len % page != 0 {
                return Err(AllocError::NotPageSized { index, len, page });
            }
        }
        let header_bytes = if flags.huge_pages {
            page
        } else {
            HEADER_BYTES as u64
        };
        let total = header_bytes + table.capacity();
        let mut mfd_flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        if flags.huge_pages {
            mfd_flags |= libc::MFD_HUGETLB;
        }
        // SAFETY: the name is a valid C string; memfd_create has no other
        // preconditions.
        let raw = unsafe { libc::memfd_create(c"ichnos-topa".as_ptr(), mfd_flags) };
        if raw < 0 {
            return Err(os("memfd_create")(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor that we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(total)
            .map_err(|_| AllocError::Invalid(format!("{total} bytes is too large")))?;
        // SAFETY: ftruncate on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(os("ftruncate")(io::Error::last_os_error()));
        }
        // Sealed against shrinking: a process that maps the buffer must not
        // be killed by SIGBUS because another truncated the file.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our own descriptor.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os("F_ADD_SEALS")(io::Error::last_os_error()));
        }
        let header = Map::new(&fd, 0, header_bytes as usize, true).map_err(os("mmap header"))?;
        {
            // SAFETY: the header mapping is fresh, zeroed, page-aligned and
            // at least size_of::<Header>() bytes; no one else sees it yet.
            let h = unsafe { &mut *header_ptr(&header) };
            h.magic = MAGIC;
            h.version = VERSION;
            h.nr_regions = lens.len() as u32;
            h.capacity = table.capacity();
            h.page_size = page as u32;
            h.region_lens[..lens.len()].copy_from_slice(lens);
            init(h);
        }
        let regions = Self::map_regions(&fd, &table, header_bytes, flags)?;
        Ok(Mapped {
            fd,
            header,
            regions,
            table,
        })
    }

    fn map_regions(
        fd: &OwnedFd,
        table: &RegionTable,
        header_bytes: u64,
        flags: AllocFlags,
    ) -> Result<Vec<Map>, AllocError> {
        let mut regions = Vec::with_capacity(table.len());
        for region in table.regions() {
            let len = usize::try_from(region.len)
                .map_err(|_| AllocError::Invalid("region too large".into()))?;
            let map = Map::new(fd, header_bytes + region.start, len, flags.populate)
                .map_err(os("mmap region"))?;
            if flags.lock {
                // SAFETY: locks pages of a mapping we own.
                if unsafe { libc::mlock(map.ptr.as_ptr().cast(), len) } != 0 {
                    return Err(os("mlock (see RLIMIT_MEMLOCK)")(io::Error::last_os_error()));
                }
            }
            regions.push(map);
        }
        Ok(regions)
    }

    /// Maps a buffer created by another process (or another part of this
    /// one) from its memfd, checking the header.
    pub fn open(fd: OwnedFd) -> Result<Mapped, AllocError> {
        // SAFETY: fstat into a zeroed struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) } != 0 {
            return Err(os("fstat")(io::Error::last_os_error()));
        }
        let file_size = u64::try_from(st.st_size).unwrap_or(0);
        // SAFETY: fcntl on a valid descriptor.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(AllocError::BadHeader(
                "the memfd is not sealed against shrinking".into(),
            ));
        }
        if file_size < HEADER_BYTES as u64 {
            return Err(AllocError::BadHeader(format!(
                "file of {file_size} bytes has no header page"
            )));
        }
        let header = Map::new(&fd, 0, HEADER_BYTES, false).map_err(os("mmap header"))?;
        // SAFETY: the mapping is HEADER_BYTES >= size_of::<Header>() and
        // page-aligned; its plain fields are read once here, the atomics
        // only through atomic operations later.
        let h = unsafe { &*header_ptr(&header) };
        if h.magic != MAGIC || h.version != VERSION {
            return Err(AllocError::BadHeader(format!(
                "magic {:#x} version {}",
                h.magic, h.version
            )));
        }
        if h.page_size as usize != crate::page_size() {
            return Err(AllocError::BadHeader(format!(
                "page size {} (huge-page buffers cannot be opened from another process yet)",
                h.page_size
            )));
        }
        let n = h.nr_regions as usize;
        if n == 0 || n > MAX_REGIONS {
            return Err(AllocError::BadHeader(format!("nr_regions {n}")));
        }
        let lens = h.region_lens[..n].to_vec();
        let table = RegionTable::new(&lens)?;
        if table.capacity() != h.capacity || HEADER_BYTES as u64 + table.capacity() > file_size {
            return Err(AllocError::BadHeader(format!(
                "capacity {} does not match regions ({}) or file size {file_size}",
                h.capacity,
                table.capacity()
            )));
        }
        let page = crate::page_size() as u64;
        if let Some((index, &len)) = lens.iter().enumerate().find(|(_, &l)| l % page != 0) {
            return Err(AllocError::NotPageSized { index, len, page });
        }
        let regions = Self::map_regions(&fd, &table, HEADER_BYTES as u64, AllocFlags::default())?;
        Ok(Mapped {
            fd,
            header,
            regions,
            table,
        })
    }

    /// The shared header.
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping holds an initialised Header (written by
        // `create`, checked by `open`); after set-up it is only accessed
        // through atomics and immutable fields.
        unsafe { &*header_ptr(&self.header) }
    }

    /// Start of region `index`.
    pub(crate) fn region_ptr(&self, index: usize) -> *mut u8 {
        self.regions[index].ptr.as_ptr()
    }

    /// The region table.
    #[must_use]
    pub fn table(&self) -> &RegionTable {
        &self.table
    }

    /// The memfd, to pass to another process (e.g. over a Unix socket, or
    /// by inheritance after clearing `FD_CLOEXEC`).
    #[must_use]
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// The layout docs/topa-buffer.md specifies, so another implementation
    /// can share a buffer with this one.
    #[test]
    fn header_layout_is_the_documented_one() {
        assert_eq!(offset_of!(Header, magic), 0);
        assert_eq!(offset_of!(Header, version), 8);
        assert_eq!(offset_of!(Header, nr_regions), 12);
        assert_eq!(offset_of!(Header, capacity), 16);
        assert_eq!(offset_of!(Header, mode), 24);
        assert_eq!(offset_of!(Header, granularity), 28);
        assert_eq!(offset_of!(Header, watermark), 32);
        assert_eq!(offset_of!(Header, block_timeout_ns), 40);
        assert_eq!(offset_of!(Header, region_pad), 48);
        assert_eq!(offset_of!(Header, page_size), 52);
        assert_eq!(offset_of!(Header, producer), 64);
        assert_eq!(offset_of!(ProducerWords, ahead), 8);
        assert_eq!(offset_of!(Header, tail), 128);
        assert_eq!(offset_of!(Header, counters), 192);
        assert_eq!(offset_of!(Counters, written), 0);
        assert_eq!(offset_of!(Counters, padded_bytes), 40);
        assert_eq!(offset_of!(Header, data_futex), 256);
        assert_eq!(offset_of!(Header, space_futex), 320);
        assert_eq!(offset_of!(Header, consumer_waiting), 384);
        assert_eq!(offset_of!(Header, producer_waiting), 388);
        assert_eq!(offset_of!(Header, producer_gone), 392);
        assert_eq!(offset_of!(Header, consumer_gone), 396);
        assert_eq!(offset_of!(Header, producer_claimed), 400);
        assert_eq!(offset_of!(Header, consumer_claimed), 404);
        assert_eq!(offset_of!(Header, region_lens), 408);
        assert_eq!(MAGIC.to_le_bytes(), *b"ICHNTOPA");
    }
}
