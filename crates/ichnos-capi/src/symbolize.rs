//! The symbolization C ABI (`include/ichnos/symbolize.h`) over
//! [`ichnos_symbol::Symbolizer`].

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};

use ichnos_symbol::{DebugSource, SymbolError, Symbolizer, SymbolizerOptions};

use crate::error::set_last_error;
use crate::sized_struct::copy_struct;

/// `ICHNOS_SYMBOLIZE_RAW_NAMES`: frames name functions as stored.
const RAW_NAMES: u32 = 0x1;
/// `ICHNOS_SYMBOLIZE_NO_INLINES`: one frame per address.
const NO_INLINES: u32 = 0x2;

/// `struct ichnos_symbolizer_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ichnos_symbolizer_options {
    /// `ICHNOS_SYMBOLIZE_*` bits.
    pub flags: u32,
    /// Must be 0.
    pub reserved: u32,
    /// A NULL-terminated array of debug directories, or NULL for
    /// `/usr/lib/debug`.
    pub debug_dirs: *const *const c_char,
    /// Bound on the bytes of parsed files kept, 0 for the default.
    pub max_cached_bytes: u64,
    /// Where symbol indexes are kept, or NULL for none (version 1).
    pub index_dir: *const c_char,
}

impl Default for ichnos_symbolizer_options {
    fn default() -> Self {
        Self {
            flags: 0,
            reserved: 0,
            debug_dirs: std::ptr::null(),
            max_cached_bytes: 0,
            index_dir: std::ptr::null(),
        }
    }
}

/// Most debug directories taken from one options struct: a bound on a
/// list whose end the caller marks.
const MAX_DEBUG_DIRS: usize = 256;

/// `ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0`: the struct's size in its first
/// version, the least `size` accepted.
const OPTIONS_SIZE_VER0: usize = 24;
/// `ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER1`: with `index_dir`.
const OPTIONS_SIZE_VER1: usize = 32;
const _: () = assert!(std::mem::size_of::<ichnos_symbolizer_options>() == OPTIONS_SIZE_VER1);

/// [`ichnos_symbolizer_options`] as its bytes are copied from the caller:
/// the pointers as the addresses they are (they are read through
/// `user_memory`, never dereferenced), so that the struct is plain old
/// data.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct OptionsBytes {
    flags: u32,
    reserved: u32,
    debug_dirs: usize,
    max_cached_bytes: u64,
    index_dir: usize,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<OptionsBytes>() == size_of::<ichnos_symbolizer_options>());
    assert!(
        offset_of!(OptionsBytes, debug_dirs) == offset_of!(ichnos_symbolizer_options, debug_dirs)
    );
    assert!(
        offset_of!(OptionsBytes, max_cached_bytes)
            == offset_of!(ichnos_symbolizer_options, max_cached_bytes)
    );
    assert!(
        offset_of!(OptionsBytes, index_dir) == offset_of!(ichnos_symbolizer_options, index_dir)
    );
};

/// `struct ichnos_symbolizer`: the symbolizer and the strings of its last
/// answer.
#[derive(Debug)]
pub struct ichnos_symbolizer {
    symbolizer: Symbolizer,
    strings: Vec<CString>,
}

/// `struct ichnos_frame`.
#[repr(C)]
#[derive(Debug)]
pub struct ichnos_frame {
    /// Demangled function name, or NULL.
    pub function: *const c_char,
    /// Raw function name, or NULL.
    pub raw_function: *const c_char,
    /// Source file, or NULL.
    pub file: *const c_char,
    /// Line, 0 when unknown.
    pub line: u32,
    /// Column, 0 when unknown.
    pub column: u32,
    /// 1 if inlined into the next frame.
    pub inlined: c_int,
}

/// A path argument (`None` for NULL), read as the kernel reads a user
/// string: one that cannot be read, or has no NUL within 4,096 bytes, is
/// the error (`-EFAULT`, `-ENAMETOOLONG`; the message set).
fn path_arg(text: *const c_char, what: &str) -> Result<Option<PathBuf>, c_int> {
    if text.is_null() {
        return Ok(None);
    }
    let bytes = crate::user_memory::read_cstr(text as usize, what)?;
    Ok(Some(PathBuf::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes),
    )))
}

/// Creates a symbolizer; see `include/ichnos/symbolize.h`.
///
/// # Safety
/// `debug_dir` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ichnos_symbolizer_new(debug_dir: *const c_char) -> *mut ichnos_symbolizer {
    let mut options = SymbolizerOptions::default();
    match path_arg(debug_dir, "debug_dir") {
        Ok(Some(dir)) => options.debug_dirs = vec![dir],
        Ok(None) => {}
        Err(e) => {
            crate::buf::set_errno(-e);
            return std::ptr::null_mut();
        }
    }
    Box::into_raw(Box::new(ichnos_symbolizer {
        symbolizer: Symbolizer::new(options),
        strings: Vec::new(),
    }))
}

/// Creates a symbolizer with options; see `include/ichnos/symbolize.h`.
///
/// # Safety
/// `options` must point at `size` readable bytes; its `debug_dirs` NULL or
/// a NULL-terminated array of NUL-terminated strings; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ichnos_symbolizer_create(
    options: *const ichnos_symbolizer_options,
    size: usize,
    out: *mut *mut ichnos_symbolizer,
) -> c_int {
    if out.is_null() {
        set_last_error("out is NULL");
        return -libc::EINVAL;
    }
    // The first version is the whole struct: a shorter one would cut
    // `debug_dirs` and leave a pointer the caller never passed.
    if size < OPTIONS_SIZE_VER0 {
        set_last_error(&format!(
            "size {size} is smaller than the first version of the options ({OPTIONS_SIZE_VER0} bytes)"
        ));
        return -libc::EINVAL;
    }
    // Between two versions, a pointer would be cut in two.
    if size > OPTIONS_SIZE_VER0 && size < OPTIONS_SIZE_VER1 {
        set_last_error(&format!(
            "size {size} lies between the first version ({OPTIONS_SIZE_VER0} bytes) and the second ({OPTIONS_SIZE_VER1})"
        ));
        return -libc::EINVAL;
    }
    let given: OptionsBytes = match copy_struct(options.cast::<c_void>(), size) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if given.flags & !(RAW_NAMES | NO_INLINES) != 0 || given.reserved != 0 {
        set_last_error(&format!(
            "unknown flags {:#x} or reserved {:#x} is not 0",
            given.flags & !(RAW_NAMES | NO_INLINES),
            given.reserved
        ));
        return -libc::EINVAL;
    }
    let mut options = SymbolizerOptions {
        demangle: given.flags & RAW_NAMES == 0,
        inlines: given.flags & NO_INLINES == 0,
        ..SymbolizerOptions::default()
    };
    if given.max_cached_bytes != 0 {
        options.max_cached_bytes = given.max_cached_bytes;
    }
    // NULL (also what a version-0 struct leaves here) or a string.
    options.index_dir = match path_arg(given.index_dir as *const c_char, "index_dir") {
        Ok(dir) => dir,
        Err(e) => return e,
    };
    if given.debug_dirs != 0 {
        options.debug_dirs.clear();
        for i in 0..=MAX_DEBUG_DIRS {
            // A NULL-terminated array, read entry by entry (as the kernel
            // reads argv): we stop at its NULL, or after reading the entry
            // where it is due at the latest.
            let at = given
                .debug_dirs
                .wrapping_add(i * std::mem::size_of::<usize>());
            let dir = match crate::user_memory::read_value::<usize>(at, "debug_dirs") {
                Ok(d) => d as *const c_char,
                Err(e) => return e,
            };
            match path_arg(dir, "debug_dirs entry") {
                Err(e) => return e,
                Ok(None) => break,
                Ok(Some(_)) if i == MAX_DEBUG_DIRS => {
                    set_last_error(&format!(
                        "debug_dirs holds more than {MAX_DEBUG_DIRS} paths (no NULL after them)"
                    ));
                    return -libc::E2BIG;
                }
                Ok(Some(dir)) => options.debug_dirs.push(dir),
            }
        }
    }
    let symbolizer = Box::into_raw(Box::new(ichnos_symbolizer {
        symbolizer: Symbolizer::new(options),
        strings: Vec::new(),
    }));
    // SAFETY: `out` is non-NULL and writable per the contract.
    unsafe { out.write(symbolizer) };
    0
}

/// Frees a symbolizer.
///
/// # Safety
/// `symbolizer` must be NULL or from `ichnos_symbolizer_new`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn ichnos_symbolizer_free(symbolizer: *mut ichnos_symbolizer) {
    if !symbolizer.is_null() {
        // SAFETY: allocated by Box in `ichnos_symbolizer_new`, freed once.
        drop(unsafe { Box::from_raw(symbolizer) });
    }
}

/// Makes the symbol index of one object file; see
/// `include/ichnos/symbolize.h`.
///
/// # Safety
/// `symbolizer` from `ichnos_symbolizer_new` or `ichnos_symbolizer_create`;
/// `path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ichnos_symbolizer_build_index(
    symbolizer: *mut ichnos_symbolizer,
    path: *const c_char,
) -> c_int {
    let path = match path_arg(path, "path") {
        Ok(p) => p,
        Err(e) => return e,
    };
    let (Some(path), false) = (path, symbolizer.is_null()) else {
        set_last_error("symbolizer and path must not be NULL");
        return -libc::EINVAL;
    };
    // SAFETY: a live symbolizer, used by one thread at a time.
    let s = unsafe { &mut *symbolizer };
    match s.symbolizer.build_index(&path, &mut |_, _| {}) {
        Ok(_) => 0,
        Err(e) => {
            crate::error::set_last_error_of(&e);
            match e {
                SymbolError::NotIndexed { .. } if s.symbolizer.index_dir().is_none() => {
                    -libc::EINVAL
                }
                SymbolError::NotIndexed { .. } => -libc::ENODATA,
                _ if !path.exists() => -libc::ENOENT,
                _ => -libc::EIO,
            }
        }
    }
}

fn c_string(strings: &mut Vec<CString>, s: Option<&str>) -> *const c_char {
    let Some(s) = s else {
        return std::ptr::null();
    };
    let c = CString::new(s.replace('\0', "?")).unwrap_or_default();
    let p = c.as_ptr();
    strings.push(c);
    p
}

/// Symbolizes `addr` of the object at `path` into up to `max` of
/// `frames`: the answer, or the negative errno to return.
///
/// # Safety
///
/// As [`ichnos_symbolize`].
unsafe fn symbolize_into(
    symbolizer: *mut ichnos_symbolizer,
    path: *const c_char,
    addr: u64,
    frames: *mut ichnos_frame,
    max: usize,
) -> Result<ichnos_symbol::Symbolized, c_int> {
    let path = path_arg(path, "path")?;
    let (Some(path), false, false) = (path, symbolizer.is_null(), frames.is_null() && max > 0)
    else {
        set_last_error("symbolizer, path and frames must not be NULL");
        return Err(-libc::EINVAL);
    };
    // SAFETY: a live symbolizer from `ichnos_symbolizer_new`, used by one
    // thread at a time (the header says so).
    let s = unsafe { &mut *symbolizer };
    let result = match s.symbolizer.symbolize_file(Path::new(&path), &[addr]) {
        Ok(mut r) => r.remove(0),
        Err(e) => {
            crate::error::set_last_error_of(&e);
            return Err(if path.exists() {
                -libc::EIO
            } else {
                -libc::ENOENT
            });
        }
    };
    s.strings.clear();
    for (i, f) in result.frames.iter().take(max).enumerate() {
        let out = ichnos_frame {
            function: c_string(&mut s.strings, f.function.as_deref()),
            raw_function: c_string(&mut s.strings, f.raw_function.as_deref()),
            file: c_string(&mut s.strings, f.file.as_deref()),
            line: f.line.unwrap_or(0),
            column: f.column.unwrap_or(0),
            inlined: c_int::from(f.inlined),
        };
        // SAFETY: `i < max` and `frames` holds `max` writable frames.
        unsafe { frames.add(i).write(out) };
    }
    Ok(result)
}

/// `enum ichnos_debug_source` of `source`.
fn source_code(source: &DebugSource) -> i32 {
    match source {
        DebugSource::SameFile => 0,
        DebugSource::BuildId(_) => 1,
        DebugSource::DebugLink(_) => 2,
        DebugSource::SymbolsOnly => 3,
        DebugSource::MiniDebugInfo => 4,
        DebugSource::JitDump => 5,
        DebugSource::PerfMap => 6,
        DebugSource::Registry => 7,
        DebugSource::Nothing => 8,
    }
}

/// `enum ichnos_unnamed` of `unnamed`.
fn unnamed_code(unnamed: Option<ichnos_symbol::Unnamed>) -> u32 {
    use ichnos_symbol::Unnamed;
    match unnamed {
        None => 0,
        Some(Unnamed::OutsideSections) => 1,
        Some(Unnamed::Padding) => 2,
        Some(Unnamed::Unmapped) => 4,
        Some(Unnamed::Anonymous) => 5,
        // No symbol; a reason added later reads as that to this ABI.
        Some(_) => 3,
    }
}

/// The frame count `ichnos_symbolize` returns.
fn frame_count(result: &ichnos_symbol::Symbolized) -> c_int {
    c_int::try_from(result.frames.len()).unwrap_or(c_int::MAX)
}

/// Symbolizes `addr` of the object file at `path` (`ichnos_symbolize` in
/// `symbolize.h`).
///
/// # Safety
///
/// `symbolizer` from `ichnos_symbolizer_new`; `path` a NUL-terminated
/// string; `frames` NULL (with `max` 0) or `max` writable frames; `source`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ichnos_symbolize(
    symbolizer: *mut ichnos_symbolizer,
    path: *const c_char,
    addr: u64,
    frames: *mut ichnos_frame,
    max: usize,
    source: *mut c_int,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    let result = match unsafe { symbolize_into(symbolizer, path, addr, frames, max) } {
        Ok(r) => r,
        Err(e) => return e,
    };
    if !source.is_null() {
        // SAFETY: non-NULL and writable per the contract.
        unsafe { source.write(source_code(&result.source)) };
    }
    frame_count(&result)
}

/// `struct ichnos_address`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ichnos_address {
    /// `enum ichnos_debug_source`.
    pub source: i32,
    /// `enum ichnos_unnamed`.
    pub unnamed: u32,
    /// Where the address's function starts; 0 if unknown.
    pub function_start: u64,
}

/// `ICHNOS_ADDRESS_SIZE_VER0`.
const ADDRESS_SIZE_VER0: usize = 16;
const _: () = assert!(std::mem::size_of::<ichnos_address>() == ADDRESS_SIZE_VER0);

/// Symbolizes `addr` as `ichnos_symbolize` does, and says where its
/// function starts and why nothing names it (`ichnos_symbolize_address`
/// in `symbolize.h`).
///
/// # Safety
///
/// As [`ichnos_symbolize`]; `address` writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ichnos_symbolize_address(
    symbolizer: *mut ichnos_symbolizer,
    path: *const c_char,
    addr: u64,
    frames: *mut ichnos_frame,
    max: usize,
    address: *mut ichnos_address,
    size: usize,
) -> c_int {
    if address.is_null() || size < ADDRESS_SIZE_VER0 {
        set_last_error("address must not be NULL, and size at least ICHNOS_ADDRESS_SIZE_VER0");
        return -libc::EINVAL;
    }
    // SAFETY: the caller's promises, passed on.
    let result = match unsafe { symbolize_into(symbolizer, path, addr, frames, max) } {
        Ok(r) => r,
        Err(e) => return e,
    };
    let info = ichnos_address {
        source: source_code(&result.source),
        unnamed: unnamed_code(result.unnamed),
        function_start: result
            .frames
            .last()
            .and_then(|f| f.function_start)
            .unwrap_or(0),
    };
    // An older struct than ours gets what fits; bytes past ours (a newer
    // caller's) are left alone.
    let bytes = bytemuck::bytes_of(&info);
    let len = bytes.len().min(size);
    // SAFETY: `address` is writable for `size` bytes and `len <= size`;
    // a byte copy has no alignment needs.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), address.cast::<u8>(), len) };
    frame_count(&result)
}
