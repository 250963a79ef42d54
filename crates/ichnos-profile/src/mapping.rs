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
