//! The system calls this crate makes, fenced: reading another address
//! space (or our own, checked) with `process_vm_readv`, and walking the
//! loaded objects with `dl_iterate_phdr`.

use std::io;

/// Reads `buf.len()` bytes at `addr` in process `pid` (our own process
/// included). Returns the number of bytes read, which is short when the
/// range runs into unmapped memory.
pub(crate) fn process_vm_read(pid: libc::pid_t, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which we own mutably for the call;
    // the kernel checks `remote` against the target's mappings and never
    // dereferences it in our address space.
    let n = unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.cast_unsigned())
    }
}

/// One loaded object as `dl_iterate_phdr` reports it.
#[derive(Clone, Debug)]
pub(crate) struct LoadedObject {
    /// `dlpi_name`; empty for the main program.
    pub name: Vec<u8>,
    /// `dlpi_addr`: the load bias.
    pub bias: u64,
    /// The program headers, copied.
    pub phdrs: Vec<libc::Elf64_Phdr>,
}

/// Lists the objects loaded in this process.
pub(crate) fn loaded_objects() -> Vec<LoadedObject> {
    unsafe extern "C" fn callback(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `&mut Vec` passed below, alive for the call;
        // `info` is valid for the duration of the callback, and its
        // `dlpi_phdr` points at `dlpi_phnum` program headers (glibc's
        // contract for dl_iterate_phdr).
        unsafe {
            let out = &mut *data.cast::<Vec<LoadedObject>>();
            let info = &*info;
            let name = if info.dlpi_name.is_null() {
                Vec::new()
            } else {
                std::ffi::CStr::from_ptr(info.dlpi_name).to_bytes().to_vec()
            };
            let phdrs = if info.dlpi_phdr.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)).to_vec()
            };
            out.push(LoadedObject {
                name,
                bias: info.dlpi_addr,
                phdrs,
            });
        }
        0
    }
    let mut out: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback only touches `out` through the pointer we pass,
    // and dl_iterate_phdr does not keep it after returning.
    unsafe {
        libc::dl_iterate_phdr(Some(callback), (&raw mut out).cast());
    }
    out
}

/// The registers of a stopped thread.
pub(crate) struct ThreadRegs {
    pub ip: u64,
    pub sp: u64,
    pub fp: u64,
    pub bx: u64,
}

/// Stops thread `tid` with `PTRACE_SEIZE` + `PTRACE_INTERRUPT`, calls `f`
/// with its registers while it is stopped, and detaches (the thread then
/// continues as if nothing happened).
#[cfg(target_arch = "x86_64")]
pub(crate) fn with_stopped_thread<T>(
    tid: libc::pid_t,
    f: impl FnOnce(ThreadRegs) -> T,
) -> io::Result<T> {
    let last = || io::Error::last_os_error();
    // SAFETY: ptrace requests on a thread id with null address/data
    // arguments, as PTRACE_SEIZE and PTRACE_INTERRUPT take them.
    unsafe {
        if libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) != 0 {
            return Err(last());
        }
        if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) != 0 {
            let e = last();
            libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, 0usize);
            return Err(e);
        }
    }
    let mut status = 0;
    let waited = loop {
        // SAFETY: waits for the thread we just interrupted; `status` is ours.
        let w = unsafe { libc::waitpid(tid, &raw mut status, libc::__WALL) };
        if w >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break w;
        }
    };
    if waited != tid {
        let e = last();
        // SAFETY: detaching the thread we seized.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, 0usize) };
        return Err(e);
    }
    // A signal that arrived before our interrupt stops the thread first
    // (a signal-delivery-stop): it is handed back on detach, not lost. Our
    // own interrupt shows as PTRACE_EVENT_STOP.
    let pending_signal = if libc::WIFSTOPPED(status) && status >> 16 != libc::PTRACE_EVENT_STOP {
        libc::WSTOPSIG(status)
    } else {
        0
    };
    let mut regs = std::mem::MaybeUninit::<libc::user_regs_struct>::zeroed();
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct to `regs`.
    let got = unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0usize, regs.as_mut_ptr()) };
    let result = if got == 0 {
        // SAFETY: zero-initialised and filled by the kernel.
        let regs = unsafe { regs.assume_init() };
        Ok(f(ThreadRegs {
            ip: regs.rip,
            sp: regs.rsp,
            fp: regs.rbp,
            bx: regs.rbx,
        }))
    } else {
        Err(last())
    };
    // SAFETY: detaching the thread we seized; it resumes, with the signal
    // it was about to receive, if any.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid,
            0usize,
            pending_signal.cast_unsigned() as usize,
        )
    };
    result
}

/// Maps the first page of `file` readable and executable, privately: the
/// mapping perf sees (a `MMAP` record of the file) and takes for the
/// process's jitdump file. The mapping is never read and never unmapped.
pub(crate) fn map_jitdump_marker(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let len = usize::try_from(page).unwrap_or(4096);
    // SAFETY: a new mapping at an address of the kernel's choosing, of an
    // open file descriptor; it aliases no Rust object, is never
    // dereferenced, and lives until the process ends.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock jitdump records use (perf
/// records with `-k mono` to match them).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// The calling thread's id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    tid.cast_unsigned()
}
