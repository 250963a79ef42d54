//! Stack pages the kernel's copy of a sample stopped at, made present
//! for the samples after it.
//!
//! The kernel copies a sample's user stack from the stack pointer up,
//! in an interrupt, where it cannot fault a page in: it stops at the
//! first page that is not present, and the walk runs off the copy there.
//! A stack page is not present while the thread has never touched it:
//! a function whose large local buffer is used only near its top (a
//! `char path[PATH_MAX]`, a 64 KiB read buffer filled by a short read)
//! leaves the pages below untouched, and every sample taken while such a
//! function runs has its stack cut at the first of them (where that is
//! the page at the stack pointer, nothing is copied), in perf and samply
//! as here, until the thread touches it. (Measured: a thread spinning
//! under an 8 KiB buffer it writes at the top only: every one of perf's
//! samples of it has an empty copy.)
//!
//! Nothing of such a sample can be told: the thread's memory, read when
//! the sample is handled, need not hold its stack any more. But a read of
//! the thread's memory there makes the kernel map the pages read (the
//! shared zero page, where never written), as a debugger's read does, so
//! that later samples can be copied whole. The read is of what the kernel
//! would have copied (from where the copy stopped to the size asked for),
//! and never leaves the mapping the stack pointer lies in, which must be
//! private anonymous memory that may be read and written (a thread's
//! stack: no file, no shared memory, nothing a read could make do I/O or
//! allocate more than zero pages for). It is made for an empty copy as
//! the sample is staged, before it waits its turn to be handled, so that a
//! thread spinning in such a frame loses the samples of one read of the
//! rings, not all of them; for a copy that stopped partway, once its walk
//! is seen to have run off it. The stack is left as it is: a read changes
//! nothing the program can see but pages being mapped.
//!
//! A copy also stops at the end of the stack's mapping, which is no such
//! place (the place where it stopped is not in the mapping). A stack
//! pointer below the main thread's stack mapping (a frame deeper than the
//! stack has grown yet) is in no mapping either: only the program's own
//! touch grows the stack, and the recorder does not read there (a kernel
//! before 6.5 would grow it for the read). Such places, and those whose
//! read fails (a process the recorder may not read), are not tried again
//! until the process executes a program, forks or ends, within a bound.

use std::collections::HashSet;
use std::ops::Range;

use ichnos_code::memory::ProcessMemory;
use ichnos_perf::attr::regs;
use ichnos_perf::record::{Sample, MISC_CPUMODE_MASK, MISC_USER};

use super::model::process_maps;

/// Bytes of a page.
const PAGE: u64 = 4096;

/// Most bytes read at once: the most the kernel copies.
const MAX_READ: u64 = 65_536;

/// Most places remembered as not to be read.
const MAX_FAILED: usize = 4096;

/// Stack memory to read in for a sample's copy that stopped at `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    pid: u32,
    /// The sample's stack pointer: the read stays in its mapping.
    sp: u64,
    /// Where the copy stopped.
    from: u64,
    /// Where the copy asked for would have ended.
    to: u64,
    /// The samples on a CPU that stopped there (counted if it is read).
    samples: u64,
    /// Noted for an empty copy.
    empty: bool,
}

/// Pages to make present, and what came of it.
#[derive(Debug)]
pub(crate) struct UntouchedPages {
    /// Whether the threads' memory is read (else the samples with empty
    /// copies are only counted: `--no-stack-reads`).
    read: bool,
    /// Places noted since the last [`UntouchedPages::make_present`], each
    /// (process, page) once.
    pending: Vec<Pending>,
    /// (process, page) not to be read: out of a stack's mapping, or its
    /// read failed.
    failed: HashSet<(u32, u64)>,
    /// Buffer of the reads.
    scratch: Vec<u8>,
    /// Samples taken on a CPU in user mode whose copy stopped at a page
    /// that a read then made present (without reads: whose copy was
    /// empty).
    pub stopped: u64,
    /// Reads that made pages present.
    pub reads_in: u64,
    /// Samples taken on a CPU in user mode with an empty copy whose place
    /// could not be read in: out of the process's stack mappings (a main
    /// thread's frame deeper than its stack has grown), or in a process
    /// the recorder may not read.
    pub unread: u64,
}

impl UntouchedPages {
    /// Pages made present where `read`, else only counted.
    pub fn new(read: bool) -> UntouchedPages {
        UntouchedPages {
            read,
            pending: Vec::new(),
            failed: HashSet::new(),
            scratch: Vec::new(),
            stopped: 0,
            reads_in: 0,
            unread: 0,
        }
    }

    /// Whether the pages are read.
    pub fn reads(&self) -> bool {
        self.read
    }

    /// A sample as it is staged: one whose stack copy is empty where one
    /// was asked for has its stack noted. Counted if it was taken in user
    /// mode (a sample in the kernel may be a switch, off the CPU, or an
    /// exit's, whose memory is going).
    pub fn see(&mut self, sample: &Sample<'_>) {
        if sample.stack_user_size == 0 || !sample.stack_user.is_some_and(<[u8]>::is_empty) {
            return;
        }
        let (Some(pid), Some(sp)) = (
            sample.id.pid,
            sample.regs_user.as_ref().and_then(|r| r.get(regs::SP)),
        ) else {
            return;
        };
        let on_cpu = sample.misc & MISC_CPUMODE_MASK == MISC_USER;
        if !self.read {
            self.stopped += u64::from(on_cpu);
            return;
        }
        let to = sp.saturating_add(sample.stack_user_size);
        if !self.note(pid, sp, sp, to, on_cpu, true) {
            self.unread += u64::from(on_cpu);
        }
    }

    /// A sample of `pid` with stack pointer `sp` whose walk ran off its
    /// copy at `from`, short of the `to` the copy asked for would have
    /// reached; `on_cpu`: a sample on a CPU, to be counted.
    pub fn ran_off(&mut self, pid: u32, sp: u64, from: u64, to: u64, on_cpu: bool) {
        if self.read && sp <= from && from < to {
            self.note(pid, sp, from, to, on_cpu, false);
        }
    }

    /// Process `pid` executes a program, is made by a fork, or ended:
    /// its places are tried afresh.
    pub fn forget(&mut self, pid: u32) {
        if self.failed.iter().any(|&(p, _)| p == pid) {
            self.failed.retain(|&(p, _)| p != pid);
        }
    }

    /// Notes the place, unless it is known not to be read: whether it
    /// is to be read.
    fn note(&mut self, pid: u32, sp: u64, from: u64, to: u64, on_cpu: bool, empty: bool) -> bool {
        let page = from & !(PAGE - 1);
        if self.failed.contains(&(pid, page)) {
            return false;
        }
        // Samples of one thread come in a run: the last one noted is the
        // one most likely noted again.
        if let Some(p) = self
            .pending
            .iter_mut()
            .rev()
            .find(|p| p.pid == pid && p.from & !(PAGE - 1) == page)
        {
            p.samples += u64::from(on_cpu);
            p.to = p.to.max(to);
            return true;
        }
        self.pending.push(Pending {
            pid,
            sp,
            from,
            to,
            samples: u64::from(on_cpu),
            empty,
        });
        true
    }

    /// Reads the stack memory noted since the last call from each
    /// process, which maps its pages: within the mapping its stack
    /// pointer lies in, a private anonymous one that may be read and
    /// written.
    pub fn make_present(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // Each process's mappings read once a call.
        self.pending.sort_unstable_by_key(|p| p.pid);
        let mut maps: Option<(u32, Vec<Range<u64>>)> = None;
        // By index, and cleared after: the list keeps its room.
        for i in 0..self.pending.len() {
            let p = self.pending[i];
            if maps.as_ref().is_none_or(|(pid, _)| *pid != p.pid) {
                maps = Some((p.pid, stack_like_mappings(p.pid)));
            }
            let stacks = maps.as_ref().map_or(&[][..], |(_, m)| m.as_slice());
            let within = stacks
                .iter()
                .find(|m| m.contains(&p.sp) && m.contains(&p.from));
            let read = within.is_some_and(|m| {
                let end = p.to.min(m.end).min(p.from.saturating_add(MAX_READ));
                let len = usize::try_from(end - p.from).unwrap_or(0);
                self.scratch.resize(len, 0);
                ProcessMemory::new(p.pid).read_up_to(p.from, &mut self.scratch) > 0
            });
            if read {
                self.stopped += p.samples;
                self.reads_in += 1;
            } else {
                self.unread += if p.empty { p.samples } else { 0 };
                if self.failed.len() < MAX_FAILED {
                    self.failed.insert((p.pid, p.from & !(PAGE - 1)));
                }
            }
        }
        self.pending.clear();
    }
}

/// The mappings of process `pid` a stack may lie in and a read may make
/// present: private anonymous memory that may be read and written (the
/// main thread's `[stack]`, a thread's mapped stack, named or not, the
/// heap).
fn stack_like_mappings(pid: u32) -> Vec<Range<u64>> {
    let Some(text) = process_maps(pid) else {
        return Vec::new();
    };
    let Ok(entries) = ichnos_image::parse_maps(pid, &text) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .filter(stack_like)
        .map(|m| m.range)
        .collect()
}

/// Whether a stack may lie in mapping `m` and a read may make its pages
/// present: private anonymous memory that may be read and written.
fn stack_like(m: &ichnos_image::MapsEntry) -> bool {
    m.perms.starts_with("rw")
        && m.perms.ends_with('p')
        && m.inode == 0
        // No file's: `[stack]`, `[heap]` (a coroutine's stack may be in
        // it), a thread's stack as a kernel before 4.5 named it
        // (`[stack:TID]`), one its program named (`[anon:NAME]`: glibc's
        // `glibc.mem.decorate_maps` names its threads' stacks).
        && (m.name.is_empty() || m.name.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of this process with stack pointer `sp`, a copy of
    /// `copied` bytes of the `asked` asked for, parsed, handed to `f`.
    fn with_sample<T>(sp: u64, asked: u64, copied: usize, f: impl FnOnce(&Sample<'_>) -> T) -> T {
        let pid = std::process::id();
        super::super::test_sample::with_sample(pid, sp, asked, copied as u64, f)
    }

    /// Whether the page at `addr` of this process is present, from
    /// /proc/self/pagemap (bit 63 of its entry).
    fn present(addr: u64) -> bool {
        use std::os::unix::fs::FileExt;
        let mut entry = [0u8; 8];
        std::fs::File::open("/proc/self/pagemap")
            .unwrap()
            .read_exact_at(&mut entry, addr / PAGE * 8)
            .unwrap();
        u64::from_le_bytes(entry) >> 63 == 1
    }

    /// A fresh anonymous mapping of `pages` pages, never touched.
    struct Fresh {
        at: *mut libc::c_void,
        len: usize,
    }

    impl Fresh {
        fn new(pages: usize) -> Fresh {
            let len = pages * PAGE as usize;
            // SAFETY: a new private anonymous mapping, no address asked.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            Fresh { at, len }
        }

        fn page(&self, n: u64) -> u64 {
            self.at as u64 + n * PAGE
        }
    }

    impl Drop for Fresh {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.at, self.len) };
        }
    }

    #[test]
    fn an_empty_copy_makes_what_the_copy_would_hold_present_once() {
        let fresh = Fresh::new(5);
        assert!((0..5).all(|n| !present(fresh.page(n))));
        let mut pages = UntouchedPages::new(true);
        // Two samples in page 1 (one at its end), nothing copied of the
        // 8 KiB asked for.
        for sp in [fresh.page(1) + 8, fresh.page(1) + 0xff0] {
            with_sample(sp, 8192, 0, |s| pages.see(s));
        }
        assert_eq!(pages.pending.len(), 1, "one place, once");
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in), (2, 1));
        // From the first stack pointer to 8 KiB past the last.
        assert!((1..=3).all(|n| present(fresh.page(n))));
        assert!(!present(fresh.page(0)) && !present(fresh.page(4)));
        // Nothing left to read.
        pages.make_present();
        assert_eq!(pages.reads_in, 1);
    }

    #[test]
    fn a_walk_that_ran_off_a_partial_copy_has_the_rest_read_in() {
        let fresh = Fresh::new(3);
        let mut pages = UntouchedPages::new(true);
        pages.ran_off(
            std::process::id(),
            fresh.page(1),
            fresh.page(1),
            fresh.page(2),
            true,
        );
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in), (1, 1));
        assert!(present(fresh.page(1)));
        assert!(!present(fresh.page(0)) && !present(fresh.page(2)));
    }

    /// The stack's mapping here is the first two pages, and read-only
    /// memory follows it at once: the read stops at the mapping's end,
    /// and a copy that stopped there (the stack's end) is not read.
    #[test]
    fn a_read_never_leaves_the_stack_mapping() {
        let fresh = Fresh::new(4);
        // SAFETY: pages 2 and 3 of the mapping `fresh` owns.
        let protected = unsafe {
            libc::mprotect(
                fresh.page(2) as *mut libc::c_void,
                2 * PAGE as usize,
                libc::PROT_READ,
            )
        };
        assert_eq!(protected, 0);
        let mut pages = UntouchedPages::new(true);
        with_sample(fresh.page(1) + 8, 8192, 0, |s| pages.see(s));
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in), (1, 1));
        assert!(present(fresh.page(1)));
        assert!(!present(fresh.page(2)) && !present(fresh.page(3)));
        let pid = std::process::id();
        pages.ran_off(pid, fresh.page(0) + 8, fresh.page(2), fresh.page(3), true);
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in), (1, 1));
        assert!(!present(fresh.page(2)));
        // Not tried again, until the process is forgotten.
        pages.ran_off(pid, fresh.page(0) + 8, fresh.page(2), fresh.page(3), true);
        assert!(pages.pending.is_empty());
        pages.forget(pid);
        pages.ran_off(pid, fresh.page(0) + 8, fresh.page(2), fresh.page(3), true);
        assert_eq!(pages.pending.len(), 1);
    }

    /// Which mappings a stack may lie in, as `/proc/PID/maps` shows
    /// them: private anonymous memory that may be read and written,
    /// named or not.
    #[test]
    fn stacks_are_private_anonymous_writable_mappings() {
        let maps = "\
7ffd0000-7ffd1000 rw-p 00000000 00:00 0                          [stack]
7f000000-7f001000 rw-p 00000000 00:00 0 \n\
7f001000-7f002000 rw-p 00000000 00:00 0                          [anon:glibc: pthread stack: 42]
7f002000-7f003000 rw-p 00000000 00:00 0                          [stack:42]
7f003000-7f004000 rw-s 00000000 00:01 7                          /dev/zero (deleted)
7f004000-7f005000 rw-p 00001000 08:01 99                         /usr/lib/libc.so.6
7f005000-7f006000 r--p 00000000 00:00 0 \n\
7f006000-7f007000 ---p 00000000 00:00 0 \n\
7f007000-7f008000 rw-p 00000000 00:00 0                          [heap]
7f008000-7f009000 r--p 00000000 00:00 0                          [vvar]
";
        let stacks: Vec<u64> = ichnos_image::parse_maps(1, maps)
            .unwrap()
            .iter()
            .filter(|m| stack_like(m))
            .map(|m| m.range.start)
            .collect();
        assert_eq!(
            stacks,
            [
                0x7ffd_0000,
                0x7f00_0000,
                0x7f00_1000,
                0x7f00_2000,
                0x7f00_7000
            ]
        );
    }

    #[test]
    fn copied_stacks_and_samples_without_a_copy_asked_are_left_alone() {
        let fresh = Fresh::new(2);
        let mut pages = UntouchedPages::new(true);
        // Some of the stack copied: the page at the stack pointer is there.
        with_sample(fresh.page(0) + 16, 4096, 64, |s| pages.see(s));
        // No copy asked for (perf record without a dwarf call graph).
        with_sample(fresh.page(1) + 16, 0, 0, |s| pages.see(s));
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in), (0, 0));
        assert!(!present(fresh.page(0)) && !present(fresh.page(1)));
    }

    #[test]
    fn without_reads_empty_copies_are_only_counted() {
        let fresh = Fresh::new(1);
        let mut pages = UntouchedPages::new(false);
        with_sample(fresh.page(0) + 16, 4096, 0, |s| pages.see(s));
        pages.ran_off(
            std::process::id(),
            fresh.page(0),
            fresh.page(0),
            fresh.page(1),
            true,
        );
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in), (1, 0));
        assert!(!present(fresh.page(0)));
    }

    #[test]
    fn a_place_that_cannot_be_read_is_not_tried_again() {
        // A page nothing may read (unmapped, another test's mapping
        // could take its place).
        let fresh = Fresh::new(1);
        let gone = fresh.page(0);
        // SAFETY: the mapping `fresh` made and owns.
        let protected = unsafe { libc::mprotect(fresh.at, fresh.len, libc::PROT_NONE) };
        assert_eq!(protected, 0);
        let mut pages = UntouchedPages::new(true);
        with_sample(gone + 16, 4096, 0, |s| pages.see(s));
        pages.make_present();
        assert_eq!((pages.stopped, pages.reads_in, pages.unread), (0, 0, 1));
        with_sample(gone + 32, 4096, 0, |s| pages.see(s));
        assert_eq!(pages.unread, 2, "counted, not noted");
        pages.ran_off(std::process::id(), gone + 16, gone + 64, gone + 4096, true);
        assert!(pages.pending.is_empty(), "{:?}", pages.pending);
    }
}
