//! Where the unwinder reads memory it was not handed in the stack copy.

use ichnos_image::{Asid, Image};

/// A read that could not be satisfied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {len} bytes at {addr:#x}")]
pub struct MemoryError {
    /// First address of the read.
    pub addr: u64,
    /// Bytes asked for.
    pub len: usize,
}

/// Memory of the unwound program: an image of its files, the live process,
/// or a copy of bytes.
pub trait Memory {
    /// Fills `buf` with the bytes at `addr`, entirely or not at all.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;

    /// Reads a little-endian `u64`.
    fn read_u64(&mut self, addr: u64) -> Result<u64, MemoryError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// No memory beyond the stack copy.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMemory;

impl Memory for NoMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        Err(MemoryError {
            addr,
            len: buf.len(),
        })
    }
}

/// A block of bytes that was at `addr` (a core, a captured stack).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bytes<'a> {
    /// Address of `data[0]`.
    pub addr: u64,
    /// The bytes.
    pub data: &'a [u8],
}

impl Bytes<'_> {
    /// The bytes at `[addr, addr + len)` if all of them are held.
    #[inline]
    #[must_use]
    pub fn get(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(self.addr)?).ok()?;
        self.data.get(off..off.checked_add(len)?)
    }

    /// The little-endian `u64` at `addr` if held.
    #[inline]
    #[must_use]
    pub fn u64_at(&self, addr: u64) -> Option<u64> {
        // One subtraction and one comparison: the unwinder's hot load.
        let off = addr.wrapping_sub(self.addr);
        let last = (self.data.len() as u64).checked_sub(8)?;
        if off > last {
            return None;
        }
        let off = off as usize;
        let bytes: [u8; 8] = self.data[off..off + 8].try_into().ok()?;
        Some(u64::from_le_bytes(bytes))
    }
}

impl Memory for Bytes<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let src = self.get(addr, buf.len()).ok_or(MemoryError {
            addr,
            len: buf.len(),
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Bytes laid over another memory: a read they hold whole comes from
/// them, any other from the memory under them. A walk that ran off its
/// stack copy goes on over stack bytes read later from the thread, with
/// the program's files (an [`Image`]) under them; a read that straddles
/// the bytes' edge is not pieced together (stack words lie in one or the
/// other).
#[derive(Debug)]
pub struct Overlay<'a, M: ?Sized> {
    /// The bytes laid over.
    pub bytes: Bytes<'a>,
    /// The memory under them.
    pub under: &'a mut M,
}

impl<M: Memory + ?Sized> Memory for Overlay<'_, M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        match self.bytes.get(addr, buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => self.under.read(addr, buf),
        }
    }
}

/// The memory of a live process, read with `process_vm_readv` (our own
/// process too: a bad address is an error, never a fault).
#[derive(Clone, Copy, Debug)]
pub struct ProcessMemory {
    pid: libc::pid_t,
}

impl ProcessMemory {
    /// The process `pid`.
    #[must_use]
    pub fn new(pid: u32) -> Self {
        Self {
            pid: pid.cast_signed(),
        }
    }

    /// The calling process.
    #[must_use]
    pub fn current() -> Self {
        Self::new(std::process::id())
    }

    /// Reads as much of `buf.len()` bytes at `addr` as lies in readable
    /// memory, up to the first page that does not: the bytes read.
    pub fn read_up_to(&self, addr: u64, buf: &mut [u8]) -> usize {
        crate::sys::process_vm_read(self.pid, addr, buf).unwrap_or(0)
    }
}

impl Memory for ProcessMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let error = MemoryError {
            addr,
            len: buf.len(),
        };
        match crate::sys::process_vm_read(self.pid, addr, buf) {
            Ok(n) if n == buf.len() => Ok(()),
            _ => Err(error),
        }
    }
}

/// An [`Image`] of the program's files: code and read-only data, as a
/// decoder sees it (no stack, no heap).
impl Memory for Image {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let error = MemoryError {
            addr,
            len: buf.len(),
        };
        let mut done = 0;
        while done < buf.len() {
            let at = addr.checked_add(done as u64).ok_or(error)?;
            match Image::read(self, &Asid::ANY, at, &mut buf[done..]) {
                Ok(r) if r.len > 0 => done += r.len,
                _ => return Err(error),
            }
        }
        Ok(())
    }
}
