//! `/tmp/perf-PID.map`: the names JIT runtimes write for their code.
//!
//! One line per symbol: `START SIZE NAME`, START and SIZE in hex without
//! `0x`, the name the rest of the line (it may hold spaces). perf reads the
//! file only if it belongs to the process's user; so does
//! [`PerfMap::for_process`]. A later line for the same address wins, as
//! runtimes rewrite code.

use std::path::{Path, PathBuf};

/// One symbol of a perf map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfMapEntry {
    /// First address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// The name, as written.
    pub name: String,
}

/// A line that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {reason}")]
pub struct PerfMapLineError {
    /// The file.
    pub path: String,
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Why a perf map could not be used at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfMapError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file does not belong to the process's user (perf refuses it too).
    #[error(
        "{path} belongs to uid {file_uid}, process {pid} runs as uid {process_uid}; not trusted"
    )]
    NotOwned {
        /// The file.
        path: PathBuf,
        /// The process.
        pid: u32,
        /// The file's owner.
        file_uid: u32,
        /// The process's user.
        process_uid: u32,
    },
}

/// A parsed perf map: entries sorted by start, the last written winning.
#[derive(Clone, Debug, Default)]
pub struct PerfMap {
    entries: Vec<PerfMapEntry>,
    errors: Vec<PerfMapLineError>,
}

/// Most bytes of a perf map read (runtimes append for as long as they run).
const MAX_PERF_MAP: u64 = 256 << 20;

/// Longest name kept (a line can be arbitrarily long).
const MAX_NAME: usize = 4096;

impl PerfMap {
    /// Parses perf map text; `path` names the file in errors. Malformed
    /// lines are skipped and reported by [`Self::errors`].
    #[must_use]
    pub fn parse(text: &str, path: &str) -> Self {
        let mut map = PerfMap::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |reason: &str| PerfMapLineError {
                path: path.to_string(),
                line: i + 1,
                reason: reason.to_string(),
            };
            let mut fields = line.splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                map.errors.push(bad("expected START SIZE NAME"));
                continue;
            };
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16);
            let (Ok(start), Ok(size)) = (hex(start), hex(size)) else {
                map.errors.push(bad("START and SIZE must be hex numbers"));
                continue;
            };
            if start.checked_add(size).is_none() {
                map.errors.push(bad("START + SIZE overflows"));
                continue;
            }
            let mut name = name.trim_end_matches('\r').to_string();
            if name.len() > MAX_NAME {
                let mut cut = MAX_NAME;
                while !name.is_char_boundary(cut) {
                    cut -= 1;
                }
                name.truncate(cut);
            }
            map.entries.push(PerfMapEntry { start, size, name });
        }
        // Stable: for one start, the entry written last stays last.
        map.entries.sort_by_key(|e| e.start);
        map
    }

    /// Reads `/tmp/perf-PID.map` if it belongs to the process's user.
    pub fn for_process(pid: u32) -> Result<Self, PerfMapError> {
        Self::read_owned(Path::new(&format!("/tmp/perf-{pid}.map")), pid)
    }

    /// Reads a perf map at `path` for process `pid`, refusing it unless it
    /// belongs to the process's user.
    pub fn read_owned(path: &Path, pid: u32) -> Result<Self, PerfMapError> {
        Self::read_owned_by(path, pid, None)
    }

    /// Reads a perf map at `path` for process `pid`, refusing it unless it
    /// belongs to the process's user: as `/proc` shows it, or, once the
    /// process is gone from `/proc`, `last_uid` (a profiler that reads a
    /// map a program wrote as it exited learns the user while the
    /// process runs).
    pub fn read_owned_by(
        path: &Path,
        pid: u32,
        last_uid: Option<u32>,
    ) -> Result<Self, PerfMapError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let io = |source| PerfMapError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Opened without following a link, and the owner taken from the
        // opened file: another user cannot swap the file between the
        // check and the read.
        // Without blocking: a FIFO would wait for a writer for ever.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::other("not a regular file")));
        }
        let file_uid = meta.uid();
        let process_uid = match (std::fs::metadata(format!("/proc/{pid}")), last_uid) {
            (Ok(meta), _) => meta.uid(),
            (Err(e), Some(uid)) if e.kind() == std::io::ErrorKind::NotFound => uid,
            (Err(e), _) => return Err(io(e)),
        };
        if file_uid != process_uid {
            return Err(PerfMapError::NotOwned {
                path: path.to_path_buf(),
                pid,
                file_uid,
                process_uid,
            });
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_PERF_MAP), &mut bytes)
            .map_err(io)?;
        // A stray invalid byte costs its line, not the file.
        let text = String::from_utf8_lossy(&bytes);
        Ok(Self::parse(&text, &path.display().to_string()))
    }

    /// The entry covering `addr`: of overlapping entries the one starting
    /// last, and of entries with the same start the one written last (the
    /// 64 entries below `addr` are searched).
    #[must_use]
    pub fn lookup(&self, addr: u64) -> Option<&PerfMapEntry> {
        let i = self.entries.partition_point(|e| e.start <= addr);
        self.entries[..i]
            .iter()
            .rev()
            .take(64)
            .find(|e| addr < e.start + e.size)
    }

    /// The entries, sorted by start.
    #[must_use]
    pub fn entries(&self) -> &[PerfMapEntry] {
        &self.entries
    }

    /// Lines that could not be read.
    #[must_use]
    pub fn errors(&self) -> &[PerfMapLineError] {
        &self.errors
    }
}
