//! What a mapping's name says it is, as the kernel names mappings in mmap
//! records and `/proc/PID/maps`: the same rules for the recorder and the
//! report.

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
    [dir.join(tail).join("elf"), dir.join(tail)]
        .into_iter()
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
