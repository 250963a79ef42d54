//! The system calls of capture, fenced: `perf_event_open`, the event
//! ioctls, and the ring buffer's mapping. Everything above this module is
//! safe Rust.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::attr::PerfEventAttr;

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_EVENT_IOC_ENABLE`: `_IO('$', 0)`.
const IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_EVENT_IOC_DISABLE`: `_IO('$', 1)`.
const IOC_DISABLE: libc::c_ulong = 0x2401;
/// `PERF_EVENT_IOC_SET_OUTPUT`: `_IO('$', 5)`.
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// `PERF_EVENT_IOC_ID`: `_IOR('$', 7, __u64 *)`.
const IOC_ID: libc::c_ulong = 0x8008_2407;

/// `perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)`.
pub(crate) fn perf_event_open(attr: &mut PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` points at a live, initialised struct of the size its
    // `size` field gives, which we hold mutably: the kernel reads it, and
    // on E2BIG writes the size it wants into `size`, within the struct.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            std::ptr::from_mut(attr),
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else
    // owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn ioctl(fd: &OwnedFd, request: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: perf event ioctls with integer arguments; `fd` is open.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Enables a counter.
pub(crate) fn enable(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, IOC_ENABLE, 0)
}

/// Disables a counter.
pub(crate) fn disable(fd: &OwnedFd) -> io::Result<()> {
    ioctl(fd, IOC_DISABLE, 0)
}

/// Sends `fd`'s records to `output`'s ring buffer.
pub(crate) fn set_output(fd: &OwnedFd, output: &OwnedFd) -> io::Result<()> {
    ioctl(
        fd,
        IOC_SET_OUTPUT,
        libc::c_ulong::from(output.as_raw_fd().cast_unsigned()),
    )
}

/// The event's id.
pub(crate) fn id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64 through its pointer
    // argument, which points at `id`, live and writable for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), IOC_ID, std::ptr::from_mut(&mut id)) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(id)
    }
}

/// A shared, writable mapping of an event's ring buffer.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; the
// kernel writes the data area and the head, we write the tail, and every
// access goes through the ring's atomic or bounds-checked reads.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes of the event `fd` (one header page and a power of
    /// two of data pages).
    pub(crate) fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of an fd we hold; the kernel picks
        // the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping { ptr, len })
    }

    /// The mapping's bytes as a raw pointer; valid while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapping's length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range and nothing refers to it
        // once the ring is dropped.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of every timestamp.
#[must_use]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` now, in nanoseconds since the Unix epoch.
#[must_use]
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe {
        libc::clock_gettime(clock, &raw mut ts);
    }
    ts.tv_sec
        .cast_unsigned()
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec.cast_unsigned())
}

/// The number of the CPUs the kernel may schedule on (`/sys` view:
/// possible CPUs are `0..n`).
#[must_use]
pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = parse_cpu_list(&text);
    if cpus.is_empty() {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        cpus = (0..u32::try_from(n).unwrap_or(1).max(1)).collect();
    }
    cpus
}

/// Parses a CPU list such as `0-3,8,10-11`.
pub(crate) fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>(), hi.parse::<u32>()),
            None => (part.parse(), part.parse()),
        };
        if let (Ok(lo), Ok(hi)) = (lo, hi) {
            if hi >= lo && hi - lo < 65_536 {
                out.extend(lo..=hi);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_parse() {
        assert_eq!(
            super::parse_cpu_list("0-3,8,10-11\n"),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(super::parse_cpu_list("0"), [0]);
        assert!(super::parse_cpu_list("x").is_empty());
        assert!(super::parse_cpu_list("5-2").is_empty());
    }
}
