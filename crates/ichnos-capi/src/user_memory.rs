//! Reading what a C caller's pointers point at as the kernel's
//! `copy_from_user` does: a pointer into unmapped or unreadable memory is
//! an error (`-EFAULT`), not a crash, and every string is bounded.
//!
//! The reads go through `process_vm_readv` on this very process: the
//! kernel copies, and reports a fault as a short read instead of raising
//! SIGSEGV. A caller's struct, byte string or C string is copied out
//! whole before anything looks at it.

use std::ffi::c_int;

use crate::error::set_last_error;

/// Longest C string read (the kernel's `PATH_MAX`).
pub(crate) const MAX_STRING: usize = 4096;

/// Copies `buf.len()` bytes from the caller's address `addr`, or fails
/// with `-EFAULT` (the message naming `what`) where any of them cannot be
/// read.
pub(crate) fn read(addr: usize, buf: &mut [u8], what: &str) -> Result<(), c_int> {
    let mut done = 0;
    while done < buf.len() {
        let local = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: buf.len() - done,
        };
        let remote = libc::iovec {
            iov_base: addr.wrapping_add(done) as *mut libc::c_void,
            iov_len: buf.len() - done,
        };
        // SAFETY: `local` describes our own writable buffer; `remote` is
        // only read, by the kernel, which checks it and fails instead of
        // faulting.
        let n = unsafe {
            libc::process_vm_readv(libc::getpid(), &raw const local, 1, &raw const remote, 1, 0)
        };
        match usize::try_from(n) {
            Ok(n) if n > 0 => done += n,
            _ => {
                let errno = std::io::Error::last_os_error().raw_os_error();
                if n < 0 && errno == Some(libc::EINTR) {
                    continue;
                }
                set_last_error(&format!(
                    "{what}: {} bytes at {:#x} cannot be read",
                    buf.len() - done,
                    addr.wrapping_add(done)
                ));
                return Err(-libc::EFAULT);
            }
        }
    }
    Ok(())
}

/// A plain-old-data value copied from the caller's address `addr`.
pub(crate) fn read_value<T: Copy + Default>(addr: usize, what: &str) -> Result<T, c_int> {
    let mut out = T::default();
    // SAFETY: `out` is a plain-old-data value of `size_of::<T>()` bytes,
    // written whole by `read` or left as it was.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut((&raw mut out).cast::<u8>(), std::mem::size_of::<T>())
    };
    read(addr, bytes, what)?;
    Ok(out)
}

/// The NUL-terminated string at the caller's address `addr`, without its
/// NUL: `-EFAULT` where it cannot be read, `-ENAMETOOLONG` where no NUL
/// comes within [`MAX_STRING`] bytes.
pub(crate) fn read_cstr(addr: usize, what: &str) -> Result<Vec<u8>, c_int> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < MAX_STRING {
        // Up to the end of the page at most: the next one may not be
        // mapped, and the string may end before it.
        let at = addr.wrapping_add(out.len());
        let to_page_end = 4096 - (at % 4096);
        let n = chunk.len().min(to_page_end).min(MAX_STRING - out.len());
        read(at, &mut chunk[..n], what)?;
        if let Some(nul) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
    }
    set_last_error(&format!(
        "{what}: no NUL within {MAX_STRING} bytes at {addr:#x}"
    ));
    Err(-libc::ENAMETOOLONG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_memory_is_copied_and_unmapped_memory_is_efault() {
        let source = *b"hello\0world";
        let mut out = [0u8; 5];
        read(source.as_ptr() as usize, &mut out, "test").unwrap();
        assert_eq!(&out, b"hello");
        assert_eq!(read(8, &mut out, "test"), Err(-libc::EFAULT));
        assert_eq!(read_cstr(source.as_ptr() as usize, "s").unwrap(), b"hello");
        assert_eq!(read_cstr(16, "s"), Err(-libc::EFAULT));
        let long = vec![b'x'; MAX_STRING + 10];
        assert_eq!(
            read_cstr(long.as_ptr() as usize, "s"),
            Err(-libc::ENAMETOOLONG)
        );
        assert_eq!(read_value::<u64>(0, "v"), Err(-libc::EFAULT));
        let v: u64 = 0x1122_3344;
        assert_eq!(
            read_value::<u64>(std::ptr::from_ref(&v) as usize, "v"),
            Ok(v)
        );
    }
}
