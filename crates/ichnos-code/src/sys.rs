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
