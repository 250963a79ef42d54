//! The registry as another process sees it: the exported
//! `ichnos_code_registry` symbol, its writer and its reader.
//!
//! A process that uses [`Registry::global`] publishes a flat copy of its
//! registrations behind the symbol `ichnos_code_registry`, under a sequence
//! counter (odd while an update is in progress): `writer.rs`, told of each
//! change through [`crate::registration::Publish`]. A recorder finds the
//! symbol in the process's files, reads the table with `process_vm_readv`,
//! retries if the counter moved, and validates every field, since the
//! target is not trusted: `reader.rs`. The layout is here, and specified in
//! `docs/code-registry-export.md`.
//!
//! [`Registry::global`]: crate::Registry::global

mod reader;
mod writer;

pub use crate::process_symbols::SearchedFiles;
pub use reader::{
    exported_registry_generation, find_exported_registry, find_exported_registry_in_new_files,
    read_exported_entries, read_exported_entries_in, read_exported_registry, ExportedEntry,
    FailedRegistration, RemoteError,
};
pub use writer::Exporter;

use std::sync::atomic::AtomicU64;

/// `magic` of the exported header.
pub const EXPORT_MAGIC: [u8; 8] = *b"ICHNOSRG";
/// `version` of the exported layout.
pub const EXPORT_VERSION: u32 = 1;
/// Bytes of one exported entry as this writer lays it out.
pub const EXPORT_ENTRY_SIZE: u32 = 104;
/// Bytes of an entry of the first writers of version 1 (no
/// `registered_ns`): the least `entry_size` a reader accepts.
pub const MIN_ENTRY_SIZE: u32 = 96;
/// `kind` of an ELF entry.
pub const ENTRY_ELF: u32 = 1;
/// `kind` of a JIT entry.
pub const ENTRY_JIT: u32 = 2;
/// Most entries a reader accepts.
pub const MAX_EXPORTED_ENTRIES: u64 = 1 << 20;
/// Most bytes of entries a reader accepts (2^20 entries of this writer's).
pub const MAX_EXPORTED_BYTES: u64 = MAX_EXPORTED_ENTRIES * EXPORT_ENTRY_SIZE as u64;
/// Longest path a reader accepts.
pub(crate) const MAX_PATH: usize = 4096;
/// Published tables kept alive (the current one and the seven before it),
/// so a reader that raced an update still reads memory that is ours.
pub(crate) const RETIRED_KEPT: usize = 8;

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

/// One exported registration, as the docs lay it out.
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
    /// When it was registered, in `CLOCK_MONOTONIC` nanoseconds (the
    /// clock perf samples carry): a recorder unwinds samples taken before
    /// it with the code that was there then.
    registered_ns: u64,
}

const _: () = assert!(std::mem::size_of::<Entry>() == EXPORT_ENTRY_SIZE as usize);
