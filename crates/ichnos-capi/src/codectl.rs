//! `codectl()` and the code-registry extensions, over
//! [`ichnos_code::Registry::global`].

use std::ffi::{c_int, c_uint, c_void};
use std::path::PathBuf;

use ichnos_code::{ElfCode, JitCode, Registry, RegistryError, RowSource, UnwindRow};

use crate::error::set_last_error;
use crate::sized_struct::copy_struct;

const CODE_UNREGISTER: c_uint = 0;
const CODE_REGISTER_ELF: c_uint = 1;
const CODE_REGISTER_JIT: c_uint = 2;

/// `struct code_elf_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct code_elf_info {
    /// First byte of the object's first `PT_LOAD` page.
    pub elf_start: u64,
    /// End of the last `PT_LOAD`.
    pub elf_end: u64,
    /// Start of the executable range.
    pub text_start: u64,
    /// End of the executable range.
    pub text_end: u64,
    /// Start of the loaded SFrame section, or 0.
    pub sframe_start: u64,
    /// End of the SFrame section, or 0.
    pub sframe_end: u64,
    /// `const char *` path, or 0.
    pub pathname: u64,
    /// `const unsigned char *` build id, or 0.
    pub build_id: u64,
    /// `const char *` debug-link file name, or 0.
    pub debug_link_pathname: u64,
    /// Bytes at `build_id`.
    pub build_id_len: u32,
    /// CRC32 of the debug-link file.
    pub debug_link_crc: u32,
}

/// `struct code_jit_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct code_jit_info {
    /// Start of the JIT text.
    pub text_start: u64,
    /// End of the JIT text.
    pub text_end: u64,
    /// `struct code_jit_unwind_table *`, or 0.
    pub unwind_head: u64,
    /// `const char *`: the JIT's name for the code, or 0 (version 1, an
    /// ichnos extension; a 24-byte version 0 struct leaves it 0).
    pub name: u64,
}

/// `struct code_unregister_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct code_unregister_info {
    /// Start of the registered text range.
    pub text_start: u64,
}

/// `struct ichnos_code_lookup`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ichnos_code_lookup {
    /// Start of the registration containing the address.
    pub text_start: u64,
    /// Its end.
    pub text_end: u64,
    /// `enum ichnos_row_source`.
    pub source: u32,
    /// 1 if `row` is valid.
    pub has_row: u32,
    /// The row, `ip_off` counted from `text_start`.
    pub row: UnwindRow,
}

fn status(result: Result<(), RegistryError>) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e) => {
            crate::error::set_last_error_of(&e);
            e.errno()
        }
    }
}

/// A C string argument, or `None` for 0: read as the kernel reads a
/// user string (`-EFAULT` where it cannot be, `-ENAMETOOLONG` without a
/// NUL within 4,096 bytes).
fn c_path(addr: u64, what: &str) -> Result<Option<PathBuf>, c_int> {
    if addr == 0 {
        return Ok(None);
    }
    let bytes = crate::user_memory::read_cstr(addr as usize, what)?;
    Ok(Some(PathBuf::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes),
    )))
}

/// Registers or unregisters code; see `include/ichnos/codectl.h`.
///
/// # Safety
/// None beyond the header's: every pointer is read as the kernel reads
/// user memory (a range that cannot be read is `-EFAULT`). Registered
/// ranges are trusted to hold what they say while registered.
#[no_mangle]
pub unsafe extern "C" fn codectl(
    option: c_uint,
    info: *mut c_void,
    info_size: usize,
    flags: c_uint,
) -> c_int {
    if flags != 0 {
        set_last_error(&format!("flags {flags:#x} must be 0"));
        return -libc::EINVAL;
    }
    let registry = Registry::global();
    match option {
        CODE_REGISTER_ELF => {
            let info: code_elf_info = match copy_struct(info, info_size) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let build_id = if info.build_id == 0 || info.build_id_len == 0 {
                None
            } else if info.build_id_len > 64 {
                set_last_error(&format!(
                    "build_id_len {} is larger than 64",
                    info.build_id_len
                ));
                return -libc::EINVAL;
            } else {
                let mut id = vec![0u8; info.build_id_len as usize];
                if let Err(e) =
                    crate::user_memory::read(info.build_id as usize, &mut id, "build_id")
                {
                    return e;
                }
                Some(id)
            };
            let sframe = match (info.sframe_start, info.sframe_end) {
                (0, 0) => None,
                (s, e) => Some(s..e),
            };
            let (path, debug_link) = match (
                c_path(info.pathname, "pathname"),
                c_path(info.debug_link_pathname, "debug_link_pathname"),
            ) {
                (Ok(p), Ok(d)) => (p, d),
                (Err(e), _) | (_, Err(e)) => return e,
            };
            let code = ElfCode {
                elf: info.elf_start..info.elf_end,
                text: info.text_start..info.text_end,
                sframe,
                path,
                build_id,
                debug_link,
                debug_link_crc: info.debug_link_crc,
            };
            status(registry.register_elf(code))
        }
        CODE_REGISTER_JIT => {
            let info: code_jit_info = match copy_struct(info, info_size) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let code = JitCode::new(info.text_start..info.text_end, info.unwind_head);
            let code = match c_path(info.name, "name") {
                Ok(Some(name)) => code.with_name(name.to_string_lossy()),
                Ok(None) => code,
                Err(e) => return e,
            };
            status(registry.register_jit(code))
        }
        CODE_UNREGISTER => {
            let info: code_unregister_info = match copy_struct(info, info_size) {
                Ok(i) => i,
                Err(e) => return e,
            };
            status(registry.unregister(info.text_start))
        }
        other => {
            set_last_error(&format!("unknown option {other}"));
            -libc::EINVAL
        }
    }
}

/// Looks up `addr` in the registry; see `include/ichnos/codectl.h`.
///
/// # Safety
/// `out` must be NULL or point at a writable `struct ichnos_code_lookup`.
#[no_mangle]
pub unsafe extern "C" fn ichnos_code_lookup(addr: u64, out: *mut ichnos_code_lookup) -> c_int {
    if out.is_null() {
        set_last_error("out is NULL");
        return -libc::EINVAL;
    }
    let Some(object) = Registry::global().lookup(addr) else {
        set_last_error(&format!("no code registered at {addr:#x}"));
        return -libc::ENOENT;
    };
    let mut answer = ichnos_code_lookup {
        text_start: object.start,
        text_end: object.end,
        source: match object.source {
            RowSource::Sframe => 1,
            RowSource::EhFrame => 2,
            RowSource::Jit => 3,
            RowSource::DebugFrame => 4,
            RowSource::GoTable => 5,
            RowSource::None => 0,
        },
        ..ichnos_code_lookup::default()
    };
    if let Some((start, mut row)) = object.find_row_at(addr) {
        // A row may begin before the registered text (rows of equal rules
        // merge across segment boundaries): report the part inside it.
        let end = start.saturating_add(u64::from(row.size)).min(object.end);
        let start = start.max(object.start);
        row.ip_off = (start - object.start) as u32;
        row.size = (end - start) as u32;
        answer.row = row;
        answer.has_row = 1;
    }
    // SAFETY: `out` is non-NULL and writable per the contract.
    unsafe { out.write(answer) };
    0
}

/// Registers every loaded object; returns how many text ranges were
/// registered.
#[no_mangle]
pub extern "C" fn ichnos_code_register_loaded_objects() -> c_int {
    let report = ichnos_code::register_loaded_objects(Registry::global());
    c_int::try_from(report.registered.len()).unwrap_or(c_int::MAX)
}

/// The codectl-style status of an I/O error: its negated errno.
fn io_status(e: &std::io::Error, what: &str) -> c_int {
    set_last_error(&format!("{what}: {e}"));
    let errno = e.raw_os_error().unwrap_or(match e.kind() {
        std::io::ErrorKind::PermissionDenied => libc::EPERM,
        _ => libc::EIO,
    });
    -errno
}

/// Writes `/tmp/perf-PID.map` with the registry's JIT code, whole.
#[no_mangle]
pub extern "C" fn ichnos_registry_write_perf_map() -> c_int {
    match Registry::global().write_perf_map() {
        Ok(_) => 0,
        Err(e) => io_status(&e, "cannot write the perf map"),
    }
}

/// Keeps the perf map written (a line per JIT registration), or stops.
#[no_mangle]
pub extern "C" fn ichnos_registry_keep_perf_map(on: c_int) -> c_int {
    match Registry::global().keep_perf_map(on != 0) {
        Ok(()) => 0,
        Err(e) => io_status(&e, "cannot keep the perf map"),
    }
}
