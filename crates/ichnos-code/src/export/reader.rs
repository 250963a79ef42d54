//! The reader of another process's exported table: found through its
//! files' symbols, read with `process_vm_readv`, every field checked.

use std::ops::Range;
use std::sync::atomic::{fence, Ordering};

use super::{
    ENTRY_ELF, ENTRY_JIT, EXPORT_MAGIC, EXPORT_VERSION, MAX_EXPORTED_BYTES, MAX_EXPORTED_ENTRIES,
    MAX_PATH, MIN_ENTRY_SIZE, RETIRED_KEPT,
};
use crate::memory::{Memory, ProcessMemory};
use crate::process_symbols::{find_process_symbol, find_process_symbol_in, SearchedFiles};
use crate::registration::{path_from_bytes, ElfCode, JitCode, Registration};
use crate::registry::{Registry, RegistryError};

/// Why another process's registry could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// No loaded file of the process defines the symbol.
    #[error("process {pid} exports no ichnos_code_registry symbol")]
    NoSymbol {
        /// The process.
        pid: u32,
    },
    /// The process's maps could not be read.
    #[error("reading /proc/{pid}/maps: {source}")]
    Maps {
        /// The process.
        pid: u32,
        /// The failure.
        source: std::io::Error,
    },
    /// A field of the exported table is not valid.
    #[error("registry at {addr:#x} in process {pid}: {field}: {detail}")]
    Bad {
        /// The process.
        pid: u32,
        /// Address of the field.
        addr: u64,
        /// The field's name.
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The table kept changing while being read.
    #[error("registry of process {pid} changed during 16 read attempts")]
    Busy {
        /// The process.
        pid: u32,
    },
}

/// Finds `ichnos_code_registry` in the files mapped by `pid`.
pub fn find_exported_registry(pid: u32) -> Result<u64, RemoteError> {
    find_process_symbol(pid, b"ichnos_code_registry")?.ok_or(RemoteError::NoSymbol { pid })
}

/// As [`find_exported_registry`], reading only the files `searched` does
/// not hold yet (and adding them): a library that exports a registry may
/// be loaded late (a binding that `dlopen`s `libichnos`). `None` where
/// none of them exports one.
///
/// # Errors
/// `/proc/PID/maps` cannot be read.
pub fn find_exported_registry_in_new_files(
    pid: u32,
    searched: &mut SearchedFiles,
) -> Result<Option<u64>, RemoteError> {
    find_process_symbol_in(pid, b"ichnos_code_registry", Some(searched))
}

/// The generation of the registry exported by process `pid` at `addr`:
/// it changes with every registration, so that a reader that saw it
/// before reads the entries again only when it moved (a registry being
/// changed has an odd one).
///
/// # Errors
/// The header cannot be read, or is not a registry's of this version.
pub fn exported_registry_generation(pid: u32, addr: u64) -> Result<u64, RemoteError> {
    let mut header = [0u8; 24];
    ProcessMemory::new(pid)
        .read(addr, &mut header)
        .map_err(|e| RemoteError::Bad {
            pid,
            addr,
            field: "header",
            detail: e.to_string(),
        })?;
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap_or([0; 4]));
    if header[..8] != EXPORT_MAGIC || version != EXPORT_VERSION {
        return Err(RemoteError::Bad {
            pid,
            addr,
            field: "magic",
            detail: format!("{:02x?}", &header[..12]),
        });
    }
    Ok(u64::from_le_bytes(
        header[16..24].try_into().unwrap_or([0; 8]),
    ))
}

/// One registration another process exports, with when it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportedEntry {
    /// The registration.
    pub registration: Registration,
    /// When it was registered, in `CLOCK_MONOTONIC` nanoseconds; `None`
    /// from a writer that does not say (entries of 96 bytes) or says 0.
    pub registered_ns: Option<u64>,
}

/// Reads the registrations exported by process `pid` at `addr` (from
/// [`find_exported_registry`]).
///
/// # Errors
/// As [`read_exported_entries`].
pub fn read_exported_registry(pid: u32, addr: u64) -> Result<Vec<Registration>, RemoteError> {
    Ok(read_exported_entries(pid, addr)?
        .into_iter()
        .map(|e| e.registration)
        .collect())
}

/// Reads the entries exported by process `pid` at `addr`: each
/// registration with its time.
///
/// # Errors
/// The header or entries cannot be read, a field is not valid (named,
/// with its address), or the table kept changing over 16 attempts.
pub fn read_exported_entries(pid: u32, addr: u64) -> Result<Vec<ExportedEntry>, RemoteError> {
    read_exported_entries_in(&mut ProcessMemory::new(pid), pid, addr)
}

/// As [`read_exported_entries`], from `memory` (process `pid`'s, which
/// errors name): a core, or bytes a test or fuzzer lays out.
///
/// # Errors
/// As [`read_exported_entries`].
pub fn read_exported_entries_in(
    memory: &mut dyn Memory,
    pid: u32,
    addr: u64,
) -> Result<Vec<ExportedEntry>, RemoteError> {
    let bad = |at: u64, field, detail: String| RemoteError::Bad {
        pid,
        addr: at,
        field,
        detail,
    };
    let mut header = [0u8; 40];
    for _attempt in 0..16 {
        memory
            .read(addr, &mut header)
            .map_err(|e| bad(addr, "header", e.to_string()))?;
        let word = |o: usize| u64::from_le_bytes(header[o..o + 8].try_into().unwrap_or([0; 8]));
        if header[..8] != EXPORT_MAGIC {
            return Err(bad(addr, "magic", format!("{:02x?}", &header[..8])));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().unwrap_or([0; 4]));
        let entry_size = u32::from_le_bytes(header[12..16].try_into().unwrap_or([0; 4]));
        if version != EXPORT_VERSION {
            return Err(bad(addr + 8, "version", version.to_string()));
        }
        if !(MIN_ENTRY_SIZE..=4096).contains(&entry_size) {
            return Err(bad(addr + 12, "entry_size", entry_size.to_string()));
        }
        let (generation, table, count) = (word(16), word(24), word(32));
        if generation % 2 == 1 {
            std::thread::yield_now();
            continue;
        }
        if count > MAX_EXPORTED_ENTRIES || count * u64::from(entry_size) > MAX_EXPORTED_BYTES {
            return Err(bad(
                addr + 32,
                "count",
                format!("{count} entries of {entry_size} bytes"),
            ));
        }
        fence(Ordering::Acquire);
        let mut raw = vec![0u8; (count * u64::from(entry_size)) as usize];
        if count > 0 {
            memory
                .read(table, &mut raw)
                .map_err(|e| bad(addr + 24, "entries", e.to_string()))?;
        }
        fence(Ordering::Acquire);
        let generation_now = |memory: &mut dyn Memory| -> Result<u64, RemoteError> {
            let mut again = [0u8; 8];
            memory
                .read(addr + 16, &mut again)
                .map_err(|e| bad(addr + 16, "generation", e.to_string()))?;
            Ok(u64::from_le_bytes(again))
        };
        if generation_now(memory)? != generation {
            continue;
        }
        let mut out = Vec::with_capacity(count as usize);
        let mut failed = None;
        for (i, e) in raw.chunks_exact(entry_size as usize).enumerate() {
            let at = table + i as u64 * u64::from(entry_size);
            match decode_entry(memory, e) {
                Ok(r) => out.push(r),
                Err((field, detail)) => {
                    failed = Some(bad(at, field, detail));
                    break;
                }
            }
        }
        // The strings of removed entries stay for the next RETIRED_KEPT - 1
        // updates (the generation rises by 2 with each): read after more
        // than that, what they said may be gone; read again.
        fence(Ordering::Acquire);
        let moved = generation_now(memory)?.wrapping_sub(generation) / 2;
        if moved >= RETIRED_KEPT as u64 - 1 || (failed.is_some() && moved > 0) {
            continue;
        }
        return match failed {
            Some(e) => Err(e),
            None => Ok(out),
        };
    }
    Err(RemoteError::Busy { pid })
}

/// Offset of `registered_ns` in an entry (past the first writers' 96
/// bytes).
const REGISTERED_NS_AT: usize = 96;

fn decode_entry(
    memory: &mut dyn Memory,
    e: &[u8],
) -> Result<ExportedEntry, (&'static str, String)> {
    let u64_at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap_or([0; 8]));
    let registered_ns = e
        .get(REGISTERED_NS_AT..REGISTERED_NS_AT + 8)
        .map(|_| u64_at(REGISTERED_NS_AT))
        .filter(|&t| t != 0);
    Ok(ExportedEntry {
        registration: decode_registration(memory, e)?,
        registered_ns,
    })
}

fn decode_registration(
    memory: &mut dyn Memory,
    e: &[u8],
) -> Result<Registration, (&'static str, String)> {
    let u32_at = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap_or([0; 8]));
    let range = |o: usize, field| {
        let r = u64_at(o)..u64_at(o + 8);
        if r.start > r.end {
            Err((field, format!("[{:#x}, {:#x}) is reversed", r.start, r.end)))
        } else {
            Ok(r)
        }
    };
    let text = range(8, "text_start")?;
    match u32_at(0) {
        ENTRY_JIT => Ok(Registration::Jit {
            text,
            unwind_head: u64_at(56),
            name: read_c_string(memory, u64_at(64))
                .map_err(|d| ("pathname", d))?
                .map(|p| p.to_string_lossy().into_owned()),
        }),
        ENTRY_ELF => {
            let sframe = range(40, "sframe_start")?;
            let build_id_len = u32_at(4) as usize;
            if build_id_len > 64 {
                return Err(("build_id_len", build_id_len.to_string()));
            }
            let build_id = match u64_at(72) {
                0 => None,
                p => {
                    let mut id = vec![0u8; build_id_len];
                    memory
                        .read(p, &mut id)
                        .map_err(|err| ("build_id", err.to_string()))?;
                    Some(id)
                }
            };
            Ok(Registration::Elf(ElfCode {
                elf: range(24, "elf_start")?,
                text,
                sframe: (!sframe.is_empty()).then_some(sframe),
                path: read_c_string(memory, u64_at(64)).map_err(|d| ("pathname", d))?,
                build_id,
                debug_link: read_c_string(memory, u64_at(80))
                    .map_err(|d| ("debug_link_pathname", d))?,
                debug_link_crc: u32_at(88),
            }))
        }
        k => Err(("kind", format!("unknown kind {k}"))),
    }
}

fn read_c_string(memory: &mut dyn Memory, addr: u64) -> Result<Option<std::path::PathBuf>, String> {
    if addr == 0 {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < MAX_PATH {
        // Read no further than a page's end (the next page may not be
        // mapped); where memory ends sooner (a core's, bytes laid out by
        // hand), a byte at a time rather than fail on a short string.
        let at = addr.wrapping_add(out.len() as u64);
        let room = (0x1000 - (at & 0xfff)) as usize;
        let mut n = room.min(chunk.len());
        if memory.read(at, &mut chunk[..n]).is_err() {
            n = 1;
            memory
                .read(at, &mut chunk[..1])
                .map_err(|e| e.to_string())?;
        }
        if let Some(nul) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return Ok(Some(path_from_bytes(&out)));
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Err(format!("no NUL within {MAX_PATH} bytes"))
}

/// A registration another process exports that could not be made here:
/// its text range and why.
pub type FailedRegistration = (Range<u64>, RegistryError);

impl Registry {
    /// A registry for process `pid` built from what it exports: every ELF
    /// and JIT registration, with SFrame sections and JIT tables read from
    /// its memory. Registrations that fail are returned beside it.
    pub fn from_process(pid: u32) -> Result<(Registry, Vec<FailedRegistration>), RemoteError> {
        let addr = find_exported_registry(pid)?;
        let registrations = read_exported_registry(pid, addr)?;
        let registry = Registry::for_process(pid);
        let mut failed = Vec::new();
        for r in registrations {
            let text = r.text().clone();
            let result = match r {
                Registration::Elf(code) => registry.register_elf(code),
                Registration::Jit {
                    text,
                    unwind_head,
                    name,
                } => {
                    let code = JitCode::new(text, unwind_head);
                    registry.register_jit(match name {
                        Some(name) => code.with_name(name),
                        None => code,
                    })
                }
            };
            if let Err(e) = result {
                failed.push((text, e));
            }
        }
        Ok((registry, failed))
    }
}
