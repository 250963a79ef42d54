//! Structs passed with their size, so that old callers and new libraries
//! (and new callers and old libraries) keep working as the struct grows.

use std::ffi::{c_int, c_void};

use crate::error::set_last_error;

/// Largest size accepted, as the kernel's `copy_struct_from_user` callers
/// bound it.
const MAX_STRUCT_SIZE: usize = 4096;

/// Copies a caller's struct of `size` bytes into `T` the way the kernel's
/// `copy_struct_from_user` does: a shorter (older) struct is zero-extended;
/// a longer (newer) one is accepted only if the bytes we do not know are 0.
/// Errors are `-EINVAL` (NULL), `-EFAULT` (the bytes cannot be read) and
/// `-E2BIG`, with the message set. `T` is plain old data (`Pod`: any
/// bytes are a value of it, and it has no padding), and the caller's
/// memory is read as the kernel reads user memory, so nothing the caller
/// passes is undefined behaviour here.
pub(crate) fn copy_struct<T: bytemuck::Pod>(info: *const c_void, size: usize) -> Result<T, c_int> {
    if info.is_null() {
        set_last_error("info is NULL");
        return Err(-libc::EINVAL);
    }
    if size > MAX_STRUCT_SIZE {
        set_last_error(&format!("size {size} is larger than {MAX_STRUCT_SIZE}"));
        return Err(-libc::E2BIG);
    }
    // Copied as the kernel copies from user space: memory that cannot be
    // read is -EFAULT, not a crash.
    let mut bytes = vec![0u8; size];
    crate::user_memory::read(info as usize, &mut bytes, "info")?;
    let known = std::mem::size_of::<T>();
    if let Some(extra) = bytes.get(known..) {
        if let Some(i) = extra.iter().position(|&b| b != 0) {
            set_last_error(&format!(
                "size {size} is larger than the {known} bytes this library knows, and byte {} is not 0",
                known + i
            ));
            return Err(-libc::E2BIG);
        }
    }
    let mut out = T::zeroed();
    let n = size.min(known);
    bytemuck::bytes_of_mut(&mut out)[..n].copy_from_slice(&bytes[..n]);
    Ok(out)
}
