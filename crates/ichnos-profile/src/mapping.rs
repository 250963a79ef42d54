//! What a mapping's name says it is, as the kernel names mappings in mmap
//! records and `/proc/PID/maps`, and where the build it was recorded with
//! is read from: the same rules for the recorder and the report.

/// Anonymous executable memory (where JIT code lives): perf's `//anon`,
/// the kernel's `[anon:NAME]` for named anonymous memory, or no name.
pub(crate) fn is_anonymous(path: &[u8]) -> bool {
    path.is_empty() || path.starts_with(b"//anon") || path.starts_with(b"[anon")
}

/// A file (not `//anon`, `[vdso]`, ...).
pub(crate) fn is_file(path: &[u8]) -> bool {
    path.first() == Some(&b'/') && !path.starts_with(b"//")
}

/// The vDSO.
pub(crate) fn is_vdso(path: &[u8]) -> bool {
    path.starts_with(b"[vdso]")
}

/// The copy of the object of `build_id` that perf's build id cache keeps
/// (`perf record` copies each object it sampled there, unless told not
/// to): `~/.debug/.build-id/xx/yyyy/elf`, or the older layout's
/// `~/.debug/.build-id/xx/yyyy`, where it is of that build.
pub(crate) fn perf_cached_copy(build_id: &[u8]) -> Option<std::path::PathBuf> {
    if build_id.len() < 2 {
        return None;
    }
    let home = std::env::var_os("HOME")?;
    let id = hex(build_id);
    let (head, tail) = id.split_at(2);
    let dir = std::path::PathBuf::from(home)
        .join(".debug/.build-id")
        .join(head);
    // The older layout's `yyyy` is a link into the cache's tree by path,
    // which the identity check (that follows no link) is given resolved.
    [dir.join(tail).join("elf"), dir.join(tail)]
        .into_iter()
        .filter_map(|c| std::fs::canonicalize(c).ok())
        .find(|c| {
            c.is_file() && ichnos_code::elf::identity_of_file(c).0.as_deref() == Some(build_id)
        })
}

/// `bytes` in lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The file to read for a mapping of `open` whose build was recorded as
/// `recorded` (where known), the build id `open` has now, and whether
/// the mapping's build is not to be had: `open` is of another build (a
/// perf.data file read after a rebuild) or gone, and perf's build-id
/// cache kept no copy of the build recorded (which is read instead where
/// it did).
pub(crate) fn build_mapped(
    open: std::path::PathBuf,
    recorded: Option<&[u8]>,
) -> (std::path::PathBuf, Option<Vec<u8>>, bool) {
    let (file_id, _) = ichnos_code::elf::identity_of_file(&open);
    let Some(recorded) = recorded.filter(|&r| file_id.as_deref() != Some(r)) else {
        return (open, file_id, false);
    };
    match perf_cached_copy(recorded) {
        Some(copy) => (copy, file_id, false),
        None => (open, file_id, true),
    }
}
