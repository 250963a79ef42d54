//! The registry's JIT code as a perf map: `/tmp/perf-PID.map`, one
//! `START SIZE NAME` line per function (hexadecimal, no prefix), the file
//! perf, samply and ichnos read to name JIT frames. A JIT that registers
//! its code with the registry gets the map for nothing, so users of every
//! profiler name the same frames.
//!
//! The file sits in a directory everyone can write to: it is never opened
//! through a link or as a file of another owner. A map is written whole
//! beside its place and renamed over it, so a reader sees an old map or a
//! new one, never half of one; a map kept written grows by one line per
//! registration (perf maps have no removal: a later line for the same
//! range takes its place for readers).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::registry::Registration;

/// Where perf looks for the map of process `pid`.
#[must_use]
pub fn perf_map_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// One line of the map: the text range and the name, with line ends in
/// the name made spaces (the name runs to the end of its line).
pub(crate) fn line(start: u64, end: u64, name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let name = if name.is_empty() { "[jit]" } else { &name };
    format!("{start:x} {:x} {name}\n", end.saturating_sub(start))
}

/// The lines of every JIT registration, in registration order.
pub(crate) fn lines<'a>(registrations: impl Iterator<Item = &'a Registration>) -> String {
    let mut text = String::new();
    for r in registrations {
        if let Registration::Jit {
            text: range, name, ..
        } = r
        {
            text.push_str(&line(
                range.start,
                range.end,
                name.as_deref().unwrap_or("[jit]"),
            ));
        }
    }
    text
}

/// Writes `text` as the whole file at `path`: written to a new file
/// beside it (created, never opened through a link) and renamed over it.
pub(crate) fn replace(path: &Path, text: &str) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let base = path
        .file_name()
        .map_or_else(|| "perf.map".into(), |n| n.to_string_lossy().into_owned());
    let mut attempt = 0u32;
    let (temp, mut file) = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let temp = dir.join(format!(".{base}.{}.{nanos}.{attempt}", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
        {
            Ok(file) => break (temp, file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let written = file.write_all(text.as_bytes()).and_then(|()| file.flush());
    drop(file);
    if let Err(e) = written.and_then(|()| std::fs::rename(&temp, path)) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(())
}

/// Opens the map at `path` to add lines: a regular file of this user,
/// not through a link.
pub(crate) fn open_for_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a regular file of this user: not written",
                path.display()
            ),
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_hexadecimal_start_and_size_then_the_name_to_the_end_of_line() {
        assert_eq!(
            line(0x7f00_1000, 0x7f00_1080, "hot loop"),
            "7f001000 80 hot loop\n"
        );
        assert_eq!(line(0x10, 0x20, "two\nlines"), "10 10 two lines\n");
        assert_eq!(line(0x10, 0x20, ""), "10 10 [jit]\n");
    }

    #[test]
    fn a_registry_writes_its_jit_code_and_keeps_the_map_growing() {
        use crate::{ElfCode, JitCode, Registry};
        // A pid no process has (pids stay below 2^22), one of this test
        // process's, so that /tmp/perf-PID.map is the test's.
        let pid = u32::MAX - std::process::id();
        let registry = Registry::for_process(pid);
        let path = perf_map_path(pid);
        let _ = std::fs::remove_file(&path);
        registry
            .register_jit(JitCode::new(0x7000_0000..0x7000_0100, 0).with_name("first"))
            .unwrap();
        let elf = ElfCode {
            text: 0x6000_0000..0x6000_1000,
            ..ElfCode::default()
        };
        registry.register_elf(elf).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("perf.map");
        registry.write_perf_map_to(&copy).unwrap();
        // JIT code only: ELF code is named from its file.
        assert_eq!(
            std::fs::read_to_string(&copy).unwrap(),
            "70000000 100 first\n"
        );
        registry.keep_perf_map(true).unwrap();
        registry
            .register_jit(JitCode::new(0x7000_0100..0x7000_0180, 0).with_name("second"))
            .unwrap();
        // Written whole while kept: the kept map goes on in the new file.
        registry.write_perf_map().unwrap();
        registry
            .register_jit(JitCode::new(0x7000_0180..0x7000_0190, 0).with_name("third"))
            .unwrap();
        registry.keep_perf_map(false).unwrap();
        registry
            .register_jit(JitCode::new(0x7000_0200..0x7000_0280, 0))
            .unwrap();
        let kept = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            kept,
            "70000000 100 first\n70000100 80 second\n70000180 10 third\n"
        );
    }

    #[test]
    fn a_map_replaces_the_file_and_is_never_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        replace(&path, "1 2 a\n").unwrap();
        replace(&path, "3 4 b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "3 4 b\n");
        // No temporary file left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A link in its place is replaced, its target left alone.
        let target = dir.path().join("target");
        std::fs::write(&target, "precious").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        replace(&path, "5 6 c\n").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        // Appending refuses a link.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(open_for_append(&path).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    }
}
