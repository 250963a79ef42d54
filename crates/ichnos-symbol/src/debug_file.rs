//! Finding the debug information of an object, as distributions ship it.

use std::path::{Path, PathBuf};

/// Where the answers for an object came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DebugSource {
    /// DWARF in the object file itself.
    SameFile,
    /// DWARF in the file found by build id (`.build-id/xx/yyyy.debug`).
    BuildId(PathBuf),
    /// DWARF in the file named by `.gnu_debuglink`, CRC checked.
    DebugLink(PathBuf),
    /// No DWARF found: names from the ELF symbol tables only.
    SymbolsOnly,
    /// No DWARF found; names from the symbol tables and from the
    /// MiniDebugInfo (`.gnu_debugdata`, xz) symbol table.
    MiniDebugInfo,
    /// JIT code named by the process's jitdump file.
    JitDump,
    /// JIT code named by the process's perf map (`/tmp/perf-PID.map`).
    PerfMap,
    /// JIT code named when the process registered it (`codectl()`).
    Registry,
    /// Nothing names the address: anonymous memory no JIT source names,
    /// or an address no mapping of the process covers, or an object that
    /// could not be read.
    Nothing,
}

impl std::fmt::Display for DebugSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SameFile => write!(f, "the file itself"),
            Self::BuildId(p) => write!(f, "build id: {}", p.display()),
            Self::DebugLink(p) => write!(f, "debug link: {}", p.display()),
            Self::SymbolsOnly => write!(f, "symbol tables only"),
            Self::MiniDebugInfo => write!(f, "symbol tables and MiniDebugInfo"),
            Self::JitDump => write!(f, "jitdump file"),
            Self::PerfMap => write!(f, "perf map"),
            Self::Registry => write!(f, "code registry"),
            Self::Nothing => write!(f, "nothing"),
        }
    }
}

/// The CRC32 (IEEE) of a file's contents, as `.gnu_debuglink` records it.
pub fn crc32_of_file(path: &Path) -> std::io::Result<u32> {
    use std::io::Read;
    let mut file = ichnos_image::open_regular(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

/// `bytes` in lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Where a file of build id `id` (two bytes or more) lies under a debug
/// directory: `dir/.build-id/xx/yyyy.debug`.
pub(crate) fn build_id_path(dir: &Path, id: &[u8]) -> PathBuf {
    dir.join(".build-id")
        .join(hex(&id[..1]))
        .join(format!("{}.debug", hex(&id[1..])))
}

/// A debug file found for an object, or the candidates that were refused.
#[derive(Debug, Default)]
pub(crate) struct Search {
    pub found: Option<(PathBuf, DebugSource)>,
    /// Candidates that exist but were refused (wrong CRC), with the reason.
    pub refused: Vec<String>,
}

/// Looks for the separate debug file of `object`: by build id under each
/// debug directory, then by debug link next to the object, in its
/// `.debug/` subdirectory, and under each debug directory followed by the
/// object's directory.
pub(crate) fn find_debug_file(
    object: &Path,
    build_id: Option<&[u8]>,
    debug_link: Option<(&[u8], u32)>,
    debug_dirs: &[PathBuf],
) -> Search {
    let mut search = Search::default();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        for dir in debug_dirs {
            let candidate = build_id_path(dir, id);
            if candidate.is_file() && !same_file(&candidate, object) {
                search.found = Some((candidate.clone(), DebugSource::BuildId(candidate)));
                return search;
            }
        }
    }
    if let Some((name, crc)) = debug_link {
        // A file name is bytes; the link need not be UTF-8.
        let name = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name));
        if name.as_os_str().is_empty() || name.components().count() != 1 {
            return search;
        }
        // The directory as GDB takes it: the object's real location (for
        // a deleted file read through a process's link to it, where it
        // was).
        let real = std::fs::canonicalize(object)
            .ok()
            .or_else(|| deleted_location(object))
            .unwrap_or_else(|| object.to_path_buf());
        let dir = real.parent().unwrap_or(Path::new("/"));
        let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
        for debug_dir in debug_dirs {
            let relative = dir.strip_prefix("/").unwrap_or(dir);
            candidates.push(debug_dir.join(relative).join(name));
        }
        for candidate in candidates {
            if !candidate.is_file() || same_file(&candidate, object) {
                continue;
            }
            match crc32_of_file(&candidate) {
                Ok(c) if c == crc => {
                    search.found = Some((candidate.clone(), DebugSource::DebugLink(candidate)));
                    return search;
                }
                Ok(c) => search.refused.push(format!(
                    "{}: CRC32 {c:#010x}, the debug link says {crc:#010x}",
                    candidate.display()
                )),
                Err(e) => search.refused.push(format!("{}: {e}", candidate.display())),
            }
        }
    }
    search
}

/// Where a file deleted since it was opened was, when `link` is a link to
/// it that the kernel keeps (`/proc/PID/map_files/...`, `/proc/PID/exe`):
/// such a link reads as the old path followed by ` (deleted)`.
fn deleted_location(link: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::fs::read_link(link).ok()?;
    let old = target.as_os_str().as_bytes().strip_suffix(b" (deleted)")?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(old)))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
