//! `pt_iscache_*`: the image section cache.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ichnos_image::{Isid, SectionCache};

use crate::error::{fail, pte, status};

/// libipt's `struct pt_image_section_cache`, opaque to C.
#[derive(Debug)]
pub struct pt_image_section_cache {
    pub(crate) cache: SectionCache,
    name: Option<CString>,
}

/// Converts a C string to a path, byte for byte.
///
/// # Safety
/// `name` must be NULL or point to a NUL-terminated string.
pub(crate) unsafe fn c_path<'a>(name: *const c_char) -> Option<&'a Path> {
    if name.is_null() {
        return None;
    }
    // SAFETY: not NULL, and the caller guarantees a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    Some(Path::new(std::ffi::OsStr::from_bytes(bytes)))
}

/// Converts an isid from C: libipt reports a non-positive isid as `pte_bad_image`.
pub(crate) fn c_isid(isid: c_int) -> Result<Isid, c_int> {
    u32::try_from(isid).ok().and_then(Isid::new).ok_or_else(|| {
        fail(
            pte::BAD_IMAGE,
            &format!("isid {isid} is not a valid isid (isids count from 1)"),
        )
    })
}

/// `pt_iscache_alloc`: a new, empty cache. The name is copied; NULL means none.
///
/// # Safety
/// `name` must be NULL or point to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pt_iscache_alloc(name: *const c_char) -> *mut pt_image_section_cache {
    // SAFETY: the caller guarantees a NUL-terminated string when not NULL.
    let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_owned());
    let text = name.as_ref().map(|n| n.to_string_lossy().into_owned());
    Box::into_raw(Box::new(pt_image_section_cache {
        cache: SectionCache::new(text.as_deref()),
        name,
    }))
}

/// `pt_iscache_free`: drops the cache. NULL is accepted. Images that hold its
/// sections keep them until they are freed.
///
/// # Safety
/// `iscache` must be NULL or a cache from `pt_iscache_alloc` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pt_iscache_free(iscache: *mut pt_image_section_cache) {
    if !iscache.is_null() {
        // SAFETY: the pointer came from Box::into_raw in pt_iscache_alloc.
        drop(unsafe { Box::from_raw(iscache) });
    }
}

/// `pt_iscache_name`: the name given at allocation, or NULL.
///
/// # Safety
/// `iscache` must be NULL or a live cache.
#[no_mangle]
pub unsafe extern "C" fn pt_iscache_name(iscache: *const pt_image_section_cache) -> *const c_char {
    // SAFETY: the caller guarantees a live cache when not NULL.
    match unsafe { iscache.as_ref() } {
        Some(c) => c.name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
        None => std::ptr::null(),
    }
}

/// `pt_iscache_set_limit`: bounds the bytes kept mapped. 0 on success.
///
/// # Safety
/// `iscache` must be NULL or a live cache.
#[no_mangle]
pub unsafe extern "C" fn pt_iscache_set_limit(
    iscache: *mut pt_image_section_cache,
    limit: u64,
) -> c_int {
    // SAFETY: the caller guarantees a live cache when not NULL.
    let Some(c) = (unsafe { iscache.as_ref() }) else {
        return fail(pte::INVALID, "pt_iscache_set_limit: iscache is NULL");
    };
    c.cache.set_limit(limit);
    0
}

/// `pt_iscache_add_file`: adds a file section; returns its isid (> 0).
///
/// # Safety
/// `iscache` must be NULL or a live cache; `filename` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pt_iscache_add_file(
    iscache: *mut pt_image_section_cache,
    filename: *const c_char,
    offset: u64,
    size: u64,
    vaddr: u64,
) -> c_int {
    // SAFETY: the caller guarantees a live cache when not NULL.
    let cache = unsafe { iscache.as_ref() };
    // SAFETY: the caller guarantees a NUL-terminated string when not NULL.
    let path = unsafe { c_path(filename) };
    let (Some(c), Some(path)) = (cache, path) else {
        return fail(
            pte::INVALID,
            "pt_iscache_add_file: iscache or filename is NULL",
        );
    };
    match c.cache.add_file(path, offset, size, vaddr) {
        Ok(isid) => c_int::try_from(isid.get())
            .unwrap_or_else(|_| fail(pte::NOMEM, "pt_iscache_add_file: isids exhausted")),
        Err(e) => status(&e),
    }
}

/// `pt_iscache_read`: reads memory of section `isid` at `vaddr`; returns the
/// number of bytes read (cut at the section's end).
///
/// # Safety
/// `iscache` must be NULL or a live cache; `buffer` NULL or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn pt_iscache_read(
    iscache: *mut pt_image_section_cache,
    buffer: *mut u8,
    size: u64,
    isid: c_int,
    vaddr: u64,
) -> c_int {
    // SAFETY: the caller guarantees a live cache when not NULL.
    let Some(c) = (unsafe { iscache.as_ref() }) else {
        return fail(pte::INVALID, "pt_iscache_read: iscache is NULL");
    };
    if buffer.is_null() || size == 0 {
        return fail(pte::INVALID, "pt_iscache_read: buffer is NULL or size is 0");
    }
    let isid = match c_isid(isid) {
        Ok(isid) => isid,
        Err(code) => return code,
    };
    let len = size.min(c_int::MAX as u64) as usize;
    // SAFETY: the caller guarantees `buffer` is writable for `size` >= `len` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(buffer, len) };
    match c.cache.read(isid, vaddr, buf) {
        Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
        Err(e) => status(&e),
    }
}
