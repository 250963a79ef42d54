//! `pt_image_*`: traced memory images.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use ichnos_image::{Asid, Error, Image, Isid};

use crate::error::{fail, pte, status};
use crate::iscache::{c_isid, c_path, pt_image_section_cache};

/// libipt's `struct pt_asid`: `size` is `sizeof(struct pt_asid)`; a field
/// holding all ones is unknown and matches any value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pt_asid {
    /// The size of this object.
    pub size: usize,
    /// The CR3 value.
    pub cr3: u64,
    /// The VMCS base address.
    pub vmcs: u64,
}

/// libipt's "no value" for both asid fields.
const NO_VALUE: u64 = u64::MAX;

impl pt_asid {
    fn from_asid(asid: &Asid) -> pt_asid {
        pt_asid {
            size: std::mem::size_of::<pt_asid>(),
            cr3: asid.cr3.unwrap_or(NO_VALUE),
            vmcs: asid.vmcs.unwrap_or(NO_VALUE),
        }
    }
}

/// Reads a caller's asid as libipt's `pt_asid_from_user` does: start from the
/// defaults, copy the first `min(user->size, sizeof(struct pt_asid))` bytes,
/// ignore the rest. NULL means the wildcard.
///
/// # Safety
/// `user` must be NULL or point to at least `user->size` readable bytes
/// (and at least `sizeof(size_t)`).
unsafe fn asid_from_user(user: *const pt_asid) -> Asid {
    if user.is_null() {
        return Asid::ANY;
    }
    let mut asid = pt_asid::from_asid(&Asid::ANY);
    // SAFETY: the size field is the first member and always readable.
    let size = unsafe { std::ptr::addr_of!((*user).size).read_unaligned() };
    let len = size.min(std::mem::size_of::<pt_asid>());
    // SAFETY: the caller guarantees `size` readable bytes; `len <= size`, and
    // `asid` is a plain-data struct of at least `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            user.cast::<u8>(),
            std::ptr::addr_of_mut!(asid).cast::<u8>(),
            len,
        );
    }
    let field = |v: u64| (v != NO_VALUE).then_some(v);
    Asid {
        cr3: field(asid.cr3),
        vmcs: field(asid.vmcs),
    }
}

/// libipt's `read_memory_callback_t`.
pub type read_memory_callback_t = unsafe extern "C" fn(
    buffer: *mut u8,
    size: usize,
    asid: *const pt_asid,
    ip: u64,
    context: *mut c_void,
) -> c_int;

/// libipt's `struct pt_image`, opaque to C.
pub struct pt_image {
    image: Image,
    name: Option<CString>,
}

impl std::fmt::Debug for pt_image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.image.fmt(f)
    }
}

/// `pt_image_alloc`: a new, empty image. The name is copied; NULL means none.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pt_image_alloc(name: *const c_char) -> *mut pt_image {
    // SAFETY: the caller guarantees a NUL-terminated string when not NULL.
    let name = (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) }.to_owned());
    let text = name.as_ref().map(|n| n.to_string_lossy().into_owned());
    Box::into_raw(Box::new(pt_image {
        image: Image::new(text.as_deref()),
        name,
    }))
}

/// `pt_image_free`: drops the image and its references to sections. NULL is accepted.
///
/// # Safety
/// `image` must be NULL or an image from `pt_image_alloc` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pt_image_free(image: *mut pt_image) {
    if !image.is_null() {
        // SAFETY: the pointer came from Box::into_raw in pt_image_alloc.
        drop(unsafe { Box::from_raw(image) });
    }
}

/// `pt_image_name`: the name given at allocation, or NULL.
///
/// # Safety
/// `image` must be NULL or a live image.
#[no_mangle]
pub unsafe extern "C" fn pt_image_name(image: *const pt_image) -> *const c_char {
    // SAFETY: the caller guarantees a live image when not NULL.
    match unsafe { image.as_ref() } {
        Some(i) => i.name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
        None => std::ptr::null(),
    }
}

/// `pt_image_add_file`: adds a file section outside any cache. 0 on success.
///
/// # Safety
/// `image` NULL or live; `filename` NULL or a NUL-terminated string; `asid`
/// NULL or a `struct pt_asid` whose `size` bytes are readable.
#[no_mangle]
pub unsafe extern "C" fn pt_image_add_file(
    image: *mut pt_image,
    filename: *const c_char,
    offset: u64,
    size: u64,
    asid: *const pt_asid,
    vaddr: u64,
) -> c_int {
    // SAFETY: the caller guarantees a live image when not NULL.
    let image = unsafe { image.as_mut() };
    // SAFETY: the caller guarantees a NUL-terminated string when not NULL.
    let path = unsafe { c_path(filename) };
    let (Some(i), Some(path)) = (image, path) else {
        return fail(pte::INVALID, "pt_image_add_file: image or filename is NULL");
    };
    // SAFETY: the caller guarantees a readable asid when not NULL.
    let asid = unsafe { asid_from_user(asid) };
    match i.image.add_file(path, offset, size, asid, vaddr) {
        Ok(()) => 0,
        Err(e) => status(&e),
    }
}

/// `pt_image_add_cached`: adds the cache's section `isid` at its load address. 0 on success.
///
/// # Safety
/// `image` and `iscache` NULL or live; `asid` NULL or readable for its `size`.
#[no_mangle]
pub unsafe extern "C" fn pt_image_add_cached(
    image: *mut pt_image,
    iscache: *mut pt_image_section_cache,
    isid: c_int,
    asid: *const pt_asid,
) -> c_int {
    // SAFETY: the caller guarantees live objects when not NULL.
    let (image, cache) = unsafe { (image.as_mut(), iscache.as_ref()) };
    let (Some(i), Some(c)) = (image, cache) else {
        return fail(
            pte::INVALID,
            "pt_image_add_cached: image or iscache is NULL",
        );
    };
    let isid = match c_isid(isid) {
        Ok(isid) => isid,
        Err(code) => return code,
    };
    // SAFETY: the caller guarantees a readable asid when not NULL.
    let asid = unsafe { asid_from_user(asid) };
    match i.image.add_cached(&c.cache, isid, asid) {
        Ok(()) => 0,
        Err(e) => status(&e),
    }
}

/// `pt_image_copy`: adds every section of `src` to `image`. Returns the number
/// of sections ignored, which is always 0 here: unlike libipt, split sections
/// are copied as the exact windows `src` shows.
///
/// # Safety
/// `image` and `src` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn pt_image_copy(image: *mut pt_image, src: *const pt_image) -> c_int {
    if image.is_null() || src.is_null() {
        return fail(pte::INVALID, "pt_image_copy: image or src is NULL");
    }
    if std::ptr::eq(image.cast_const(), src) {
        return 0;
    }
    // SAFETY: both are live and distinct (checked above), so the exclusive
    // and the shared borrow do not alias.
    let (dst, src) = unsafe { (&mut *image, &*src) };
    dst.image.copy_from(&src.image);
    0
}

/// `pt_image_remove_by_filename`: removes the sections of `filename` (textual
/// match) in a matching address space; returns how many.
///
/// # Safety
/// `image` NULL or live; `filename` NULL or a NUL-terminated string; `asid` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn pt_image_remove_by_filename(
    image: *mut pt_image,
    filename: *const c_char,
    asid: *const pt_asid,
) -> c_int {
    // SAFETY: the caller guarantees a live image when not NULL.
    let image = unsafe { image.as_mut() };
    // SAFETY: the caller guarantees a NUL-terminated string when not NULL.
    let path = unsafe { c_path(filename) };
    let (Some(i), Some(path)) = (image, path) else {
        return fail(
            pte::INVALID,
            "pt_image_remove_by_filename: image or filename is NULL",
        );
    };
    // SAFETY: the caller guarantees a readable asid when not NULL.
    let asid = unsafe { asid_from_user(asid) };
    c_int::try_from(i.image.remove_by_filename(path, asid)).unwrap_or(c_int::MAX)
}

/// `pt_image_remove_by_asid`: removes the sections in a matching address space
/// (NULL: all); returns how many.
///
/// # Safety
/// `image` NULL or live; `asid` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn pt_image_remove_by_asid(
    image: *mut pt_image,
    asid: *const pt_asid,
) -> c_int {
    // SAFETY: the caller guarantees a live image when not NULL.
    let Some(i) = (unsafe { image.as_mut() }) else {
        return fail(pte::INVALID, "pt_image_remove_by_asid: image is NULL");
    };
    // SAFETY: the caller guarantees a readable asid when not NULL.
    let asid = unsafe { asid_from_user(asid) };
    c_int::try_from(i.image.remove_by_asid(asid)).unwrap_or(c_int::MAX)
}

/// The C callback and its context. The C caller owns the context and
/// promises, as with libipt, to use the image from one thread at a time.
struct CCallback {
    callback: read_memory_callback_t,
    context: *mut c_void,
}

// SAFETY: the image, and so the callback, is used by one thread at a time;
// moving it between threads is the C caller's decision, as in libipt.
unsafe impl Send for CCallback {}

impl CCallback {
    fn call(&mut self, buf: &mut [u8], asid: &Asid, vaddr: u64) -> Result<usize, Error> {
        let user = pt_asid::from_asid(asid);
        // SAFETY: the buffer is valid for its length; the callback's contract
        // (libipt's) is to write at most `size` bytes and return how many.
        let n = unsafe {
            (self.callback)(
                buf.as_mut_ptr(),
                buf.len(),
                &raw const user,
                vaddr,
                self.context,
            )
        };
        usize::try_from(n).map_err(|_| Error::Callback {
            vaddr,
            message: format!("callback returned {n}"),
            code: Some(n),
        })
    }
}

/// `pt_image_set_callback`: sets (or with NULL removes) the function that
/// reads memory no section covers. 0 on success.
///
/// # Safety
/// `image` NULL or live; `callback` NULL or a function honouring libipt's contract.
#[no_mangle]
pub unsafe extern "C" fn pt_image_set_callback(
    image: *mut pt_image,
    callback: Option<read_memory_callback_t>,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller guarantees a live image when not NULL.
    let Some(i) = (unsafe { image.as_mut() }) else {
        return fail(pte::INVALID, "pt_image_set_callback: image is NULL");
    };
    i.image.set_callback(callback.map(|callback| {
        let mut c = CCallback { callback, context };
        Box::new(move |buf: &mut [u8], asid: &Asid, vaddr: u64| c.call(buf, asid, vaddr)) as Box<_>
    }));
    0
}

/// ichnos extension: reads image memory at `vaddr` in `asid`, as libipt's
/// decoders do internally. Returns bytes read (cut at the section's end) and
/// stores the section's isid (0 for none) in `*isid` when `isid` is not NULL.
///
/// # Safety
/// `image` NULL or live; `buffer` NULL or writable for `size` bytes; `asid`
/// NULL or readable; `isid` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ichnos_image_read(
    image: *mut pt_image,
    buffer: *mut u8,
    size: usize,
    asid: *const pt_asid,
    vaddr: u64,
    isid: *mut c_int,
) -> c_int {
    // SAFETY: the caller guarantees a live image when not NULL.
    let Some(i) = (unsafe { image.as_mut() }) else {
        return fail(pte::INVALID, "ichnos_image_read: image is NULL");
    };
    if buffer.is_null() || size == 0 {
        return fail(
            pte::INVALID,
            "ichnos_image_read: buffer is NULL or size is 0",
        );
    }
    // SAFETY: the caller guarantees a readable asid when not NULL.
    let asid = unsafe { asid_from_user(asid) };
    // SAFETY: the caller guarantees `buffer` is writable for `size` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(buffer, size.min(c_int::MAX as usize)) };
    match i.image.read(&asid, vaddr, buf) {
        Ok(read) => {
            if !isid.is_null() {
                let number = read.isid.map_or(0, Isid::get);
                // SAFETY: the caller guarantees `isid` is writable when not NULL.
                unsafe { isid.write(c_int::try_from(number).unwrap_or(c_int::MAX)) };
            }
            c_int::try_from(read.len).unwrap_or(c_int::MAX)
        }
        Err(e) => status(&e),
    }
}
