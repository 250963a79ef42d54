//! Read-only file mappings that a truncation cannot turn into SIGBUS.
//!
//! Touching a page of a file mapping that lies past the file's end
//! raises SIGBUS: a file truncated under a mapping (a binary rebuilt in
//! place, a package upgraded while it is profiled) would kill the reader.
//! The bytes are read by code that is not ours (object, gimli, the
//! unwinder), so a guarded copy routine would not cover them. Instead
//! every [`GuardedMap`] registers its range in a table a SIGBUS handler
//! reads: a fault in a registered range is answered by mapping a page of
//! zeros over the faulting page (the access then completes, reading
//! zeros) and marking the mapping as having faulted; its owner checks
//! [`GuardedMap::faulted`] after reading and reports the file as changed
//! instead of trusting what it read. Any other SIGBUS goes to the handler
//! installed before ours, or takes the default action.
//!
//! The handler is installed when the first mapping is made. A program
//! that installs its own SIGBUS handler afterwards, without calling the
//! one it replaced, turns the guard off. Where the table is full (65,536
//! mappings at once), the range is read into memory instead: a copy
//! cannot fault.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Mappings guarded at once at most (the table is 1.5 MiB of zeroed
/// memory, touched as it fills).
const SLOTS: usize = 1 << 16;

/// One registered range. `start` is 0 for a free slot and `usize::MAX`
/// while it is being claimed or released: a range the handler never
/// matches.
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        faulted: AtomicBool::new(false),
    }
}; SLOTS];
/// Where to start looking for a free slot.
static HINT: AtomicUsize = AtomicUsize::new(0);
const CLAIMED: usize = usize::MAX;

/// Claims a slot for `[start, start + len)`.
fn register(start: usize, len: usize) -> Option<usize> {
    let first = HINT.load(Ordering::Relaxed);
    for i in (first..SLOTS).chain(0..first) {
        let slot = &TABLE[i];
        if slot
            .start
            .compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            slot.faulted.store(false, Ordering::Relaxed);
            slot.end.store(start + len, Ordering::Release);
            // The range is complete before the handler can match it.
            slot.start.store(start, Ordering::Release);
            HINT.store((i + 1) % SLOTS, Ordering::Relaxed);
            return Some(i);
        }
    }
    None
}

/// Releases slot `i` (before its range is unmapped: the handler must not
/// claim an address that may be mapped again by someone else).
fn release(i: usize) {
    let slot = &TABLE[i];
    slot.start.store(CLAIMED, Ordering::Release);
    slot.end.store(0, Ordering::Relaxed);
    slot.start.store(0, Ordering::Release);
}

/// The slot whose range holds `addr`. A slot released and claimed again
/// between the loads of its start and end would pair one mapping's start
/// with another's end: the start is read again after the end, and the
/// pair is taken only if both reads agree.
fn find(addr: usize) -> Option<&'static Slot> {
    TABLE.iter().find(|slot| {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || start == CLAIMED || addr < start {
            return false;
        }
        let end = slot.end.load(Ordering::Acquire);
        slot.start.load(Ordering::Acquire) == start && addr < end
    })
}

static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

/// Installs the SIGBUS handler once, remembering the one before it.
fn install_handler() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // Settled here, not first inside the handler.
        let _ = crate::loader::page_size();
        // SAFETY: sigaction with a zeroed, then filled, struct; PREVIOUS is
        // written once here, before the handler can run (it is installed by
        // this very call), and only read afterwards.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&raw mut action.sa_mask);
            libc::sigaction(
                libc::SIGBUS,
                &raw const action,
                (*std::ptr::addr_of_mut!(PREVIOUS)).as_mut_ptr(),
            );
        }
    });
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: errno is this thread's; saved and put back around the
    // handler's system calls.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    // Only a fault the kernel raised (si_code > 0; a signal a process
    // sent has SI_USER or SI_TKILL, 0 or below) carries an address.
    let fault = unsafe { (*info).si_code } > 0;
    let addr = if fault {
        // SAFETY: as above; a fault's siginfo carries its address.
        (unsafe { (*info).si_addr() }) as usize
    } else {
        0
    };
    let handled = fault
        && find(addr).is_some_and(|slot| {
            let page = crate::loader::page_size() as usize;
            let at = addr & !(page - 1);
            // SAFETY: `at` is a page of a registered mapping, which is
            // alive (its owner is reading it: the fault came from that
            // read; `find` matched a consistent range) and read-only:
            // replacing the page by zeros changes bytes nobody writes
            // here, and the mapping's munmap removes it with the rest.
            // mmap is a plain system call, safe in a signal handler.
            let zeros = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if zeros == libc::MAP_FAILED {
                return false;
            }
            slot.faulted.store(true, Ordering::Release);
            true
        });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    if !handled {
        // SAFETY: forwarding with the arguments we were given.
        unsafe { forward(signal, info, context, fault) };
    }
}

/// Passes a fault that is not ours to the handler installed before ours,
/// or lets the default action (a core dump) happen.
unsafe fn forward(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
    fault: bool,
) {
    // SAFETY: written once at installation, before this handler existed.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init_ref() };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_IGN && !fault {
        // A sent signal the program ignored before: still ignored.
        return;
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default. A fault's access runs again on return and
        // takes the default action; a sent signal is raised again.
        // SAFETY: plain sigaction with a zeroed struct (SIG_DFL = 0), and
        // raise, both safe in a handler.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &raw const action, std::ptr::null_mut());
            if !fault {
                libc::raise(signal);
            }
        }
        return;
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler asked for three arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: a one-argument handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}

/// A private read-only mapping of a file range whose pages past the
/// file's end read as zeros, with [`GuardedMap::faulted`] set, instead of
/// raising SIGBUS.
pub struct GuardedMap {
    ptr: *mut u8,
    len: usize,
    /// The table slot; `None` for an empty mapping or a copy.
    slot: Option<usize>,
    /// The bytes, read into memory where the table was full.
    copy: Option<Vec<u8>>,
    /// The slot's flag (a flag never set, without a slot): read on every
    /// check, so kept at hand.
    faulted: &'static AtomicBool,
}

/// The flag of mappings without a slot: never set.
static NEVER: AtomicBool = AtomicBool::new(false);

// SAFETY: the mapping is read-only memory owned by this value; shared
// borrows of it may cross threads, and the slot is atomics.
unsafe impl Send for GuardedMap {}
// SAFETY: as above.
unsafe impl Sync for GuardedMap {}

impl std::fmt::Debug for GuardedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMap")
            .field("len", &self.len)
            .field("faulted", &self.faulted())
            .finish_non_exhaustive()
    }
}

impl GuardedMap {
    /// Maps `len` bytes of `file` from `offset` (a multiple of the page
    /// size); where the table of guarded mappings is full, or the kernel
    /// has no room for another mapping, reads them.
    ///
    /// # Safety
    ///
    /// The bytes are handed out as `&[u8]`, which Rust takes to be
    /// unchanging while borrowed. A file changed in place by another
    /// process changes them, and a truncation turns pages into zeros
    /// under a borrow: the caller must treat the bytes as untrusted input
    /// that may change (parse them with bounds checks, never rely on two
    /// reads agreeing) and check [`GuardedMap::faulted`] before using what
    /// it read, as with any mapping of a file others can write.
    pub unsafe fn map(file: &File, offset: u64, len: usize) -> io::Result<GuardedMap> {
        if len == 0 {
            return Ok(GuardedMap {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
                slot: None,
                copy: None,
                faulted: &NEVER,
            });
        }
        install_handler();
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))?;
        // SAFETY: a new private read-only mapping at an address of the
        // kernel's choosing; it aliases nothing until registered below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // Out of mappings (vm.max_map_count): a copy needs none.
            if e.raw_os_error() == Some(libc::ENOMEM) {
                return Self::read(file, offset, len);
            }
            return Err(e);
        }
        let Some(slot) = register(ptr as usize, len) else {
            // SAFETY: unmapping what was mapped just above.
            unsafe { libc::munmap(ptr, len) };
            return Self::read(file, offset, len);
        };
        Ok(GuardedMap {
            ptr: ptr.cast(),
            len,
            slot: Some(slot),
            copy: None,
            faulted: &TABLE[slot].faulted,
        })
    }

    /// The range read into memory.
    fn read(file: &File, offset: libc::off_t, len: usize) -> io::Result<GuardedMap> {
        // Where mapping failed for want of memory, so may this: an error,
        // not an abort.
        let mut copy = Vec::new();
        copy.try_reserve_exact(len)
            .map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        copy.resize(len, 0);
        let offset = u64::try_from(offset).unwrap_or(0);
        let mut done = 0;
        while done < len {
            match std::os::unix::fs::FileExt::read_at(file, &mut copy[done..], offset + done as u64)
            {
                // The file is shorter than the range: cut short since it
                // was examined.
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file ends before the range (cut short while read)",
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let ptr = copy.as_mut_ptr();
        Ok(GuardedMap {
            ptr,
            len,
            slot: None,
            copy: Some(copy),
            faulted: &NEVER,
        })
    }

    /// The mapped bytes. Pages past the file's end (it was truncated)
    /// read as zeros; check [`GuardedMap::faulted`] after reading.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        if let Some(copy) = &self.copy {
            return copy;
        }
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self`
        // lives (or is dangling with len 0). This process never writes
        // them; others may change the file under them, and truncation
        // zeros pages, which the contract of `map` leaves to its caller.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether a read ran past the file's end since the mapping was made:
    /// what was read there was zeros, not the file.
    #[must_use]
    #[inline]
    pub fn faulted(&self) -> bool {
        // The handler runs on the reading thread itself: keep the reads
        // of the bytes before this load.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        self.faulted.load(Ordering::Acquire)
    }

    /// Lets the kernel take back the pages that hold bytes `range` (those
    /// wholly inside it): a reader done with part of a large file keeps
    /// its resident memory to what it still reads. The bytes stay
    /// readable, from the file again, if read later. A range past the end
    /// is cut to it; a copy (see [`GuardedMap::map`]) keeps its bytes.
    pub fn release(&self, range: std::ops::Range<usize>) {
        let page = crate::loader::page_size() as usize;
        let Some(start) = range.start.checked_next_multiple_of(page) else {
            return;
        };
        let end = range.end.min(self.len) / page * page;
        if self.copy.is_some() || self.slot.is_none() || start >= end {
            return;
        }
        // SAFETY: whole pages inside our own private, read-only, never
        // written mapping: MADV_DONTNEED drops them from this process, and
        // the next read maps the file's page again (or the zero page the
        // SIGBUS handler put there, which reads as zeros again). Borrows
        // of the bytes see the same file bytes, under the same contract
        // as any read of the mapping.
        unsafe {
            libc::madvise(self.ptr.add(start).cast(), end - start, libc::MADV_DONTNEED);
        }
    }

    /// Bytes mapped.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for GuardedMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            release(slot);
            // SAFETY: unmapping our own mapping (its zero pages included),
            // after its slot was released; no borrow of it outlives self.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_page_past_a_truncated_end_reads_zeros_and_is_told() {
        let mut file = tempfile::tempfile().unwrap();
        let page = crate::loader::page_size() as usize;
        file.write_all(&vec![0xabu8; 3 * page]).unwrap();
        // SAFETY: the test reads the bytes only through checked indexing.
        let map = unsafe { GuardedMap::map(&file, 0, 3 * page) }.unwrap();
        assert_eq!(map[2 * page + 1], 0xab);
        assert!(!map.faulted());
        file.set_len(page as u64).unwrap();
        // Below the new end: the file's bytes; past it: zeros, no SIGBUS.
        assert_eq!(map[10], 0xab);
        assert!(!map.faulted());
        assert_eq!(map[2 * page + 1], 0);
        assert!(map.faulted());
        assert_eq!(map[page + 5], 0);
    }

    /// The resident kilobytes of the mapping that starts at `at`, from
    /// `/proc/self/smaps`.
    fn resident_kib(at: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let block = smaps
            .split_once(&format!("{at:x}-"))
            .map(|(_, rest)| rest)
            .unwrap();
        let line = block.lines().find(|l| l.starts_with("Rss:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn released_pages_leave_the_process_and_read_the_file_again() {
        let mut file = tempfile::tempfile().unwrap();
        let page = crate::loader::page_size() as usize;
        let bytes: Vec<u8> = (0..16 * page).map(|i| (i / 7) as u8).collect();
        file.write_all(&bytes).unwrap();
        // SAFETY: the test reads the bytes only through checked indexing.
        let map = unsafe { GuardedMap::map(&file, 0, bytes.len()) }.unwrap();
        assert!(map.bytes() == bytes);
        let at = map.bytes().as_ptr() as usize;
        assert_eq!(resident_kib(at), (16 * page / 1024) as u64);
        // Half a page in: that page is kept, the next eleven go.
        map.release(page / 2..12 * page + 3);
        assert_eq!(resident_kib(at), (5 * page / 1024) as u64);
        map.release(0..usize::MAX);
        assert_eq!(resident_kib(at), 0);
        assert!(map.bytes() == bytes);
        assert!(!map.faulted());
    }

    #[test]
    fn a_released_range_is_claimed_no_more() {
        // A range no mapping can have: this static's own bytes.
        static HERE: [u8; 64] = [0; 64];
        let at = HERE.as_ptr() as usize;
        let slot = register(at, HERE.len()).unwrap();
        assert!(find(at + 10).is_some_and(|s| std::ptr::eq(s, &raw const TABLE[slot])));
        assert!(find(at + HERE.len()).is_none_or(|s| !std::ptr::eq(s, &raw const TABLE[slot])));
        release(slot);
        assert!(find(at + 10).is_none());
        let file = tempfile::tempfile().unwrap();
        // SAFETY: an empty mapping has no bytes to change.
        let empty = unsafe { GuardedMap::map(&file, 0, 0) }.unwrap();
        assert!(empty.is_empty() && !empty.faulted());
    }

    #[test]
    fn a_range_read_into_memory_is_the_file_or_an_error() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"0123456789").unwrap();
        let copy = GuardedMap::read(&file, 2, 4).unwrap();
        assert_eq!(copy.bytes(), b"2345");
        assert!(!copy.faulted());
        // Past the end: the file was cut short since it was examined.
        let e = GuardedMap::read(&file, 8, 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
