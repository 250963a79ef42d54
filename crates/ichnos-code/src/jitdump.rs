//! The registry's JIT code as a jitdump file (perf's
//! `jitdump-specification.txt`, version 1): `jit-PID.dump` with a
//! `JIT_CODE_LOAD` record — address, size, name and the code's bytes — per
//! JIT registration. The process maps the file's first page executable,
//! so `perf record -k mono` sees it and `perf inject --jit` turns the
//! records into objects perf reports name, code and all; ichnos's recorder
//! reads it too.
//!
//! The file is created new in a directory of its own (perf's convention:
//! under `$JITDUMPDIR`, else `~/.debug/jit`), never through a link.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::sys;

const MAGIC: u32 = 0x4A69_5444;
const VERSION: u32 = 1;
const HEADER_SIZE: u32 = 40;
/// `EM_X86_64`.
const ELF_MACHINE: u32 = 62;
const CODE_LOAD: u32 = 0;
const CODE_CLOSE: u32 = 3;
/// Most bytes of one registration's code copied into its record: a
/// larger registration is left out of the file.
pub const MAX_CODE: u64 = 16 << 20;

/// A jitdump file being written.
#[derive(Debug)]
pub struct JitDump {
    file: File,
    path: PathBuf,
    pid: u32,
    index: u64,
}

/// Where jitdump files go: `$JITDUMPDIR`, else `$HOME/.debug/jit`, else
/// the temporary directory.
fn base_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("JITDUMPDIR") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".debug").join("jit"),
        None => std::env::temp_dir(),
    }
}

impl JitDump {
    /// Creates `jit-PID.dump` for this process in a new directory under
    /// [`base_dir`], writes its header and maps it (see the module
    /// documentation).
    pub fn create() -> io::Result<JitDump> {
        let pid = std::process::id();
        let base = base_dir();
        std::fs::create_dir_all(&base)?;
        let nanos = sys::monotonic_ns();
        let dir = base.join(format!("ichnos-{pid}-{nanos:x}"));
        std::fs::create_dir(&dir)?;
        let path = dir.join(format!("jit-{pid}.dump"));
        Self::create_at(&path, pid)
    }

    /// Creates the file at `path` (new, not through a link) for process
    /// `pid`.
    pub fn create_at(path: &Path, pid: u32) -> io::Result<JitDump> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let mut header = Vec::with_capacity(HEADER_SIZE as usize);
        for v in [MAGIC, VERSION, HEADER_SIZE, ELF_MACHINE, 0, pid] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        header.extend_from_slice(&sys::monotonic_ns().to_le_bytes());
        header.extend_from_slice(&0u64.to_le_bytes());
        file.write_all(&header)?;
        sys::map_jitdump_marker(&file)?;
        Ok(JitDump {
            file,
            path: path.to_path_buf(),
            pid,
            index: 0,
        })
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the load of the code at `start..end` named `name`, its
    /// bytes read from this process (unreadable bytes written as zeros).
    /// Code larger than [`MAX_CODE`] is left out.
    pub fn code_load(&mut self, start: u64, end: u64, name: &str) -> io::Result<()> {
        let size = end.saturating_sub(start);
        if size == 0 || size > MAX_CODE {
            return Ok(());
        }
        let mut code = vec![0u8; usize::try_from(size).unwrap_or(0)];
        let _ = sys::process_vm_read(self.pid.cast_signed(), start, &mut code);
        let name: Vec<u8> = name.bytes().filter(|&b| b != 0).collect();
        let total = 16 + 8 + 4 * 8 + name.len() + 1 + code.len();
        let total = u32::try_from(total)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "code record too large"))?;
        let mut record = Vec::with_capacity(total as usize);
        record.extend_from_slice(&CODE_LOAD.to_le_bytes());
        record.extend_from_slice(&total.to_le_bytes());
        record.extend_from_slice(&sys::monotonic_ns().to_le_bytes());
        record.extend_from_slice(&self.pid.to_le_bytes());
        record.extend_from_slice(&sys::gettid().to_le_bytes());
        for v in [start, start, size, self.index] {
            record.extend_from_slice(&v.to_le_bytes());
        }
        record.extend_from_slice(&name);
        record.push(0);
        record.extend_from_slice(&code);
        self.index += 1;
        self.file.write_all(&record)
    }

    /// Writes the closing record: no more code follows.
    pub fn close(mut self) -> io::Result<()> {
        let mut record = Vec::with_capacity(16);
        record.extend_from_slice(&CODE_CLOSE.to_le_bytes());
        record.extend_from_slice(&16u32.to_le_bytes());
        record.extend_from_slice(&sys::monotonic_ns().to_le_bytes());
        self.file.write_all(&record)
    }
}
