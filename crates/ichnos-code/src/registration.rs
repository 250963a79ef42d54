//! What is registered: ELF code and JIT code as callers describe them
//! (`struct code_elf_info`, `struct code_jit_info`), and registrations as
//! the registry reports them and the exported table carries them.

use std::ffi::OsStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::jit::JitUnwindTable;

/// ELF code to register (`struct code_elf_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElfCode {
    /// The whole mapped object: first `PT_LOAD` to the end of the last
    /// (empty when unknown; then the text range stands for it).
    pub elf: Range<u64>,
    /// The executable range described.
    pub text: Range<u64>,
    /// The loaded SFrame section, if any.
    pub sframe: Option<Range<u64>>,
    /// The file's path.
    pub path: Option<PathBuf>,
    /// The GNU build id.
    pub build_id: Option<Vec<u8>>,
    /// The `.gnu_debuglink` file name.
    pub debug_link: Option<PathBuf>,
    /// The `.gnu_debuglink` CRC32.
    pub debug_link_crc: u32,
}

/// JIT code to register (`struct code_jit_info`).
#[derive(Clone, Debug)]
pub struct JitCode {
    /// The text range the JIT fills.
    pub text: Range<u64>,
    /// Address of the first `struct code_jit_unwind_table`, or 0.
    pub unwind_head: u64,
    /// What the JIT calls this code (a function, a trace, a module), for
    /// symbolization; `None` reads as `[jit]`.
    pub name: Option<String>,
    pub(crate) keep_alive: Option<Arc<JitUnwindTable>>,
}

impl JitCode {
    /// JIT code whose table chain starts at `unwind_head` (an address in
    /// the registering process).
    #[must_use]
    pub fn new(text: Range<u64>, unwind_head: u64) -> Self {
        Self {
            text,
            unwind_head,
            name: None,
            keep_alive: None,
        }
    }

    /// The same code, named.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// JIT code described by a table built with [`JitUnwindTable`]; the
    /// registry keeps the table alive until the code is unregistered.
    #[must_use]
    pub fn with_table(text: Range<u64>, table: &Arc<JitUnwindTable>) -> Self {
        Self {
            text,
            unwind_head: table.address(),
            name: None,
            keep_alive: Some(Arc::clone(table)),
        }
    }
}

/// What a registration holds, as the registry reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// ELF code.
    Elf(ElfCode),
    /// JIT code: the text range, the table chain's head and its name.
    Jit {
        /// The text range.
        text: Range<u64>,
        /// The first table.
        unwind_head: u64,
        /// The JIT's name for the code, if it gave one.
        name: Option<String>,
    },
}

impl Registration {
    /// The registered text range.
    #[must_use]
    pub fn text(&self) -> &Range<u64> {
        match self {
            Self::Elf(e) => &e.text,
            Self::Jit { text, .. } => text,
        }
    }
}

/// Told of every registration a registry makes and removes, as it makes
/// them: how a registry is published (the process's exported table, see
/// [`crate::export`]) without holding the publisher itself.
pub trait Publish: Send + Sync {
    /// `registration` was made.
    fn added(&self, registration: &Registration);
    /// The registration whose text starts at `text_start` was removed.
    fn removed(&self, text_start: u64);
}

/// A path from raw bytes (C strings).
pub(crate) fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}
