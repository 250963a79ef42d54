//! The registry as another process sees it: the exported
//! `ichnos_code_registry` symbol and its reader.
//!
//! A process that uses [`Registry::global`] publishes a flat copy of its
//! registrations behind the symbol `ichnos_code_registry`, under a sequence
//! counter (odd while an update is in progress). A recorder finds the
//! symbol in the process's files, reads the table with `process_vm_readv`,
//! retries if the counter moved, and validates every field: the target is
//! not trusted. The layout is specified in `docs/code-registry-export.md`.

use std::ffi::CString;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::memory::{Memory, ProcessMemory};
use crate::registry::{path_from_bytes, ElfCode, JitCode, Registration, Registry, RegistryError};

/// `magic` of the exported header.
pub const EXPORT_MAGIC: [u8; 8] = *b"ICHNOSRG";
/// `version` of the exported layout.
pub const EXPORT_VERSION: u32 = 1;
/// Bytes of one exported entry in this version.
pub const EXPORT_ENTRY_SIZE: u32 = 96;
/// `kind` of an ELF entry.
pub const ENTRY_ELF: u32 = 1;
/// `kind` of a JIT entry.
pub const ENTRY_JIT: u32 = 2;
/// Most entries a reader accepts.
pub const MAX_EXPORTED_ENTRIES: u64 = 1 << 20;
/// Most bytes of entries a reader accepts (2^20 entries of version 1).
pub const MAX_EXPORTED_BYTES: u64 = MAX_EXPORTED_ENTRIES * EXPORT_ENTRY_SIZE as u64;
/// Longest path a reader accepts.
const MAX_PATH: usize = 4096;
/// Published tables kept alive (the current one and the seven before it),
/// so a reader that raced an update still reads memory that is ours.
const RETIRED_KEPT: usize = 8;

/// The exported header (`struct ichnos_code_registry` in the docs).
#[repr(C)]
#[derive(Debug)]
pub struct ExportedRegistry {
    magic: [u8; 8],
    version: u32,
    entry_size: u32,
    generation: AtomicU64,
    entries: AtomicU64,
    count: AtomicU64,
}

/// The symbol a recorder looks for.
#[unsafe(no_mangle)]
#[used]
pub static ichnos_code_registry: ExportedRegistry = ExportedRegistry {
    magic: EXPORT_MAGIC,
    version: EXPORT_VERSION,
    entry_size: EXPORT_ENTRY_SIZE,
    generation: AtomicU64::new(0),
    entries: AtomicU64::new(0),
    count: AtomicU64::new(0),
};

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Entry {
    kind: u32,
    build_id_len: u32,
    text_start: u64,
    text_end: u64,
    elf_start: u64,
    elf_end: u64,
    sframe_start: u64,
    sframe_end: u64,
    unwind_head: u64,
    pathname: u64,
    build_id: u64,
    debug_link_pathname: u64,
    debug_link_crc: u32,
    reserved: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == EXPORT_ENTRY_SIZE as usize);

/// What an entry's pointers point at, owned for as long as it is
/// exported (heap memory: it stays where it is when the owner moves).
#[derive(Default)]
struct Held {
    // Never read: they are held for the addresses in the entry.
    #[allow(dead_code)]
    strings: Vec<CString>,
    #[allow(dead_code)]
    id: Option<Box<[u8]>>,
}

/// The exported table: the entry array readers see, and what its entries
/// point at. Entries are added at the end and removed by moving the last
/// into the hole, in place under the generation's odd count (a reader
/// that raced it retries); a full array is copied into one twice its
/// size, and the arrays it replaced are kept for the next
/// [`RETIRED_KEPT`] - 1 replacements. Each change costs O(1) amortized.
#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    held: Vec<Held>,
    index_of: std::collections::HashMap<u64, usize>,
    retired: std::collections::VecDeque<Vec<Entry>>,
    /// What removed entries pointed at, with the update that removed
    /// them: kept for the next [`RETIRED_KEPT`] - 1 updates, as readers
    /// read strings after the table.
    retired_held: std::collections::VecDeque<(u64, Held)>,
    /// Updates so far.
    updates: u64,
}

/// Writes the exported copy of the global registry.
pub struct Exporter {
    table: Mutex<Option<Table>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

pub(crate) fn exporter() -> &'static Exporter {
    static EXPORTER: Exporter = Exporter {
        table: Mutex::new(None),
    };
    &EXPORTER
}

/// The exported entry of `r`, and what its pointers point at.
fn entry_of(r: &Registration) -> (Entry, Held) {
    let mut e = Entry::default();
    let mut held = Held::default();
    let mut c_string = |bytes: &[u8]| {
        CString::new(bytes).ok().map_or(0, |c| {
            let addr = c.as_ptr() as u64;
            held.strings.push(c);
            addr
        })
    };
    match r {
        Registration::Elf(elf) => {
            e.kind = ENTRY_ELF;
            (e.text_start, e.text_end) = (elf.text.start, elf.text.end);
            (e.elf_start, e.elf_end) = (elf.elf.start, elf.elf.end);
            if let Some(s) = &elf.sframe {
                (e.sframe_start, e.sframe_end) = (s.start, s.end);
            }
            e.pathname = elf
                .path
                .as_deref()
                .map_or(0, |p| c_string(p.as_os_str().as_bytes()));
            e.debug_link_pathname = elf
                .debug_link
                .as_deref()
                .map_or(0, |p| c_string(p.as_os_str().as_bytes()));
            e.debug_link_crc = elf.debug_link_crc;
            if let Some(id) = &elf.build_id {
                let id: Box<[u8]> = id.clone().into_boxed_slice();
                e.build_id = id.as_ptr() as u64;
                e.build_id_len = id.len() as u32;
                held.id = Some(id);
            }
        }
        Registration::Jit {
            text,
            unwind_head,
            name,
        } => {
            e.kind = ENTRY_JIT;
            (e.text_start, e.text_end) = (text.start, text.end);
            e.unwind_head = *unwind_head;
            // A JIT entry's pathname is the code's name.
            e.pathname = name.as_deref().map_or(0, |n| c_string(n.as_bytes()));
        }
    }
    (e, held)
}

impl Exporter {
    /// Runs `change` on the table with the header's generation odd, then
    /// publishes where the array is and how many entries it holds.
    fn update(&self, change: impl FnOnce(&mut Table)) {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let table = table.get_or_insert_with(Table::default);
        let header = &ichnos_code_registry;
        let g = header.generation.load(Ordering::Relaxed);
        header.generation.store(g + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        table.updates += 1;
        let now = table.updates;
        while table
            .retired_held
            .front()
            .is_some_and(|(at, _)| at + (RETIRED_KEPT as u64) <= now)
        {
            table.retired_held.pop_front();
        }
        change(table);
        header
            .entries
            .store(table.entries.as_ptr() as u64, Ordering::Relaxed);
        header
            .count
            .store(table.entries.len() as u64, Ordering::Relaxed);
        header.generation.store(g + 2, Ordering::Release);
    }

    /// Exports registration `r` (its text range not exported yet).
    pub(crate) fn add(&self, r: &Registration) {
        let (entry, held) = entry_of(r);
        self.update(|t| {
            if t.entries.len() == t.entries.capacity() {
                // A reader may be reading the old array: it stays.
                let mut bigger = Vec::with_capacity((2 * t.entries.capacity()).max(16));
                bigger.extend_from_slice(&t.entries);
                t.retired
                    .push_back(std::mem::replace(&mut t.entries, bigger));
                if t.retired.len() >= RETIRED_KEPT {
                    t.retired.pop_front();
                }
            }
            t.index_of.insert(entry.text_start, t.entries.len());
            t.entries.push(entry);
            t.held.push(held);
        });
    }

    /// Stops exporting the registration of the text range starting at
    /// `text_start`.
    pub(crate) fn remove(&self, text_start: u64) {
        self.update(|t| {
            let Some(i) = t.index_of.remove(&text_start) else {
                return;
            };
            t.entries.swap_remove(i);
            // What the entry pointed at goes only once no reader can be
            // reading it: with the array it was in, kept retired.
            let gone = t.held.swap_remove(i);
            if let Some(moved) = t.entries.get(i) {
                t.index_of.insert(moved.text_start, i);
            }
            t.retired_held.push_back((t.updates, gone));
        });
    }
}

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
    use object::{Object, ObjectSegment, ObjectSymbol};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|source| RemoteError::Maps { pid, source })?;
    let entries = ichnos_image::parse_maps(pid, &maps).map_err(|e| RemoteError::Maps {
        pid,
        source: std::io::Error::other(e.to_string()),
    })?;
    for m in entries
        .iter()
        .filter(|m| m.offset == 0 && m.name.starts_with('/'))
    {
        // The file as the process sees it; only the headers and symbol
        // tables are read (a mapped file can be large).
        let Ok(f) = std::fs::File::open(format!("/proc/{pid}/root{}", m.name)) else {
            continue;
        };
        if !f.metadata().is_ok_and(|meta| meta.is_file()) {
            continue;
        }
        let cache = object::ReadCache::new(f);
        let Ok(file) = object::File::parse(&cache) else {
            continue;
        };
        let Some(first) = file.segments().map(|s| s.address()).min() else {
            continue;
        };
        let symbol = file.symbols().chain(file.dynamic_symbols()).find(|s| {
            s.is_definition() && s.name_bytes().ok() == Some(b"ichnos_code_registry".as_slice())
        });
        let link_origin = first & !(crate::elf::ELF_START_ALIGN - 1);
        if let Some(offset) = symbol.and_then(|s| s.address().checked_sub(link_origin)) {
            return Ok(m.range.start.wrapping_add(offset));
        }
    }
    Err(RemoteError::NoSymbol { pid })
}

/// Reads the registrations exported by process `pid` at `addr` (from
/// [`find_exported_registry`]).
pub fn read_exported_registry(pid: u32, addr: u64) -> Result<Vec<Registration>, RemoteError> {
    let mut memory = ProcessMemory::new(pid);
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
        if !(EXPORT_ENTRY_SIZE..=4096).contains(&entry_size) {
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
        let generation_now = |memory: &mut ProcessMemory| -> Result<u64, RemoteError> {
            let mut again = [0u8; 8];
            memory
                .read(addr + 16, &mut again)
                .map_err(|e| bad(addr + 16, "generation", e.to_string()))?;
            Ok(u64::from_le_bytes(again))
        };
        if generation_now(&mut memory)? != generation {
            continue;
        }
        let mut out = Vec::with_capacity(count as usize);
        let mut failed = None;
        for (i, e) in raw.chunks_exact(entry_size as usize).enumerate() {
            let at = table + i as u64 * u64::from(entry_size);
            match decode_entry(&mut memory, e) {
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
        let moved = generation_now(&mut memory)?.wrapping_sub(generation) / 2;
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

fn decode_entry(
    memory: &mut ProcessMemory,
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

fn read_c_string(
    memory: &mut ProcessMemory,
    addr: u64,
) -> Result<Option<std::path::PathBuf>, String> {
    if addr == 0 {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < MAX_PATH {
        // Read byte-wise near a page end rather than fail on a short string.
        let at = addr + out.len() as u64;
        let room = (0x1000 - (at & 0xfff)) as usize;
        let n = room.min(chunk.len());
        memory
            .read(at, &mut chunk[..n])
            .map_err(|e| e.to_string())?;
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
