//! `include/ichnos/buf.h`: per-thread fill buffers for C.

use ichnos_buf::fill::{FillBuffer, FillError, Flush, FlushReason, Kind, WriteError};
use std::ffi::c_void;

/// The opaque `struct ichnos_fill_buf`.
#[derive(Debug)]
pub struct ichnos_fill_buf {
    buf: FillBuffer,
}

/// `struct ichnos_flush_info`.
#[repr(C)]
#[derive(Debug)]
pub struct ichnos_flush_info {
    /// The committed records.
    pub data: *const c_void,
    /// Bytes at `data`.
    pub len: usize,
    /// The writing thread.
    pub tid: i32,
    /// `enum ichnos_flush_reason`.
    pub reason: u32,
    /// Flush sequence number per thread and buffer.
    pub seq: u64,
    /// Records dropped since the previous flush.
    pub lost_records: u64,
    /// Their bytes.
    pub lost_bytes: u64,
}

/// `ichnos_flush_fn`.
pub type ichnos_flush_fn =
    Option<unsafe extern "C" fn(info: *const ichnos_flush_info, arg: *mut c_void)>;

/// `struct ichnos_fill_stats`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ichnos_fill_stats {
    /// Records dropped since the last flush.
    pub lost_records: u64,
    /// Their bytes.
    pub lost_bytes: u64,
    /// Flushes so far.
    pub flushes: u64,
    /// Circular: records written; trace: bytes since the last flush.
    pub position: u64,
}

pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn create(result: Result<FillBuffer, FillError>) -> *mut ichnos_fill_buf {
    match result {
        Ok(buf) => Box::into_raw(Box::new(ichnos_fill_buf { buf })),
        Err(FillError::TooManyBuffers) => {
            set_errno(libc::EMFILE);
            std::ptr::null_mut()
        }
        Err(FillError::Alloc { errno, .. }) => {
            set_errno(errno);
            std::ptr::null_mut()
        }
        Err(_) => {
            set_errno(libc::EINVAL);
            std::ptr::null_mut()
        }
    }
}

/// A pointer the C caller promised is valid for the callback's lifetime.
struct CallbackArg(*mut c_void);
// SAFETY: the C caller passes `arg` to be used from any writing thread;
// thread safety of what it points to is the caller's contract (buf.h).
unsafe impl Send for CallbackArg {}
// SAFETY: as above.
unsafe impl Sync for CallbackArg {}

/// `ichnos_fill_buf_create_trace`.
#[no_mangle]
pub extern "C" fn ichnos_fill_buf_create_trace(
    capacity: usize,
    flush: ichnos_flush_fn,
    arg: *mut c_void,
) -> *mut ichnos_fill_buf {
    let Some(flush) = flush else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let arg = CallbackArg(arg);
    create(FillBuffer::trace(capacity, move |f: &Flush<'_>| {
        let info = ichnos_flush_info {
            data: f.data.as_ptr().cast(),
            len: f.data.len(),
            tid: f.tid,
            reason: match f.reason {
                FlushReason::Full => 0,
                FlushReason::Explicit => 1,
                FlushReason::ThreadExit => 2,
                FlushReason::ProcessExit => 3,
            },
            seq: f.seq,
            lost_records: f.lost_records,
            lost_bytes: f.lost_bytes,
        };
        let arg = &arg;
        // SAFETY: the caller's function with the caller's argument, as
        // buf.h specifies; `info` is valid for the call.
        unsafe { flush(&raw const info, arg.0) };
    }))
}

/// `ichnos_fill_buf_create_circular`.
#[no_mangle]
pub extern "C" fn ichnos_fill_buf_create_circular(
    capacity: usize,
    stride: usize,
) -> *mut ichnos_fill_buf {
    create(FillBuffer::circular(capacity, stride))
}

/// `ichnos_fill_buf_free`.
///
/// # Safety
/// `buf` is NULL or a handle from a create function, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_free(buf: *mut ichnos_fill_buf) {
    if !buf.is_null() {
        // SAFETY: per the contract, `buf` came from Box::into_raw.
        drop(unsafe { Box::from_raw(buf) });
    }
}

/// `ichnos_fill_buf_reserve`.
///
/// # Safety
/// `buf` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_reserve(
    buf: *mut ichnos_fill_buf,
    len: usize,
) -> *mut c_void {
    // SAFETY: per the contract.
    let Some(buf) = (unsafe { buf.as_ref() }) else {
        return std::ptr::null_mut();
    };
    buf.buf
        .reserve_raw(len)
        .map_or(std::ptr::null_mut(), <*mut u8>::cast)
}

/// `ichnos_fill_buf_commit`.
///
/// # Safety
/// `buf` is a live handle; `len` bytes were reserved last on this thread.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_commit(buf: *mut ichnos_fill_buf, len: usize) {
    // SAFETY: per the contract.
    if let Some(buf) = unsafe { buf.as_ref() } {
        buf.buf.commit_raw(len);
    }
}

/// `ichnos_fill_buf_write`.
///
/// # Safety
/// `buf` is a live handle; `record` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_write(
    buf: *mut ichnos_fill_buf,
    record: *const c_void,
    len: usize,
) -> i32 {
    // SAFETY: per the contract.
    let Some(buf) = (unsafe { buf.as_ref() }) else {
        return -libc::EINVAL;
    };
    if record.is_null() && len > 0 {
        return -libc::EINVAL;
    }
    let bytes = if len == 0 {
        &[][..]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(record.cast::<u8>(), len) }
    };
    match buf.buf.write(bytes) {
        Ok(()) => 0,
        Err(WriteError::Size { .. }) => -libc::EMSGSIZE,
        Err(WriteError::Dropped) => -libc::ENOBUFS,
    }
}

/// `ichnos_fill_buf_flush`.
///
/// # Safety
/// `buf` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_flush(buf: *mut ichnos_fill_buf) -> i32 {
    // SAFETY: per the contract.
    unsafe { buf.as_ref() }
        .is_some_and(|b| b.buf.flush())
        .into()
}

/// `ichnos_fill_buf_stats`.
///
/// # Safety
/// `buf` is a live handle; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_stats(
    buf: *const ichnos_fill_buf,
    out: *mut ichnos_fill_stats,
) -> i32 {
    // SAFETY: per the contract.
    let (Some(buf), false) = (unsafe { buf.as_ref() }, out.is_null()) else {
        return -libc::EINVAL;
    };
    let s = buf.buf.stats();
    // SAFETY: `out` is writable per the contract.
    unsafe {
        out.write(ichnos_fill_stats {
            lost_records: s.lost_records,
            lost_bytes: s.lost_bytes,
            flushes: s.flushes,
            position: s.position,
        });
    }
    0
}

/// `ichnos_fill_buf_newest_first`.
///
/// # Safety
/// `buf` is a live handle; `out` points to `out_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ichnos_fill_buf_newest_first(
    buf: *const ichnos_fill_buf,
    out: *mut c_void,
    out_len: usize,
) -> i64 {
    // SAFETY: per the contract.
    let Some(buf) = (unsafe { buf.as_ref() }) else {
        return (-libc::EINVAL).into();
    };
    let Kind::Circular { stride, .. } = buf.buf.kind() else {
        return (-libc::EINVAL).into();
    };
    if out.is_null() && out_len > 0 {
        return (-libc::EINVAL).into();
    }
    let Some(records) = buf.buf.newest_first() else {
        return (-libc::EBUSY).into();
    };
    let n = records.len().min(out_len / stride);
    for (i, record) in records.iter().take(n).enumerate() {
        // SAFETY: i * stride + stride <= out_len by the choice of n.
        unsafe {
            std::ptr::copy_nonoverlapping(
                record.as_ptr(),
                out.cast::<u8>().add(i * stride),
                stride,
            );
        };
    }
    i64::try_from(n).unwrap_or(i64::MAX)
}
