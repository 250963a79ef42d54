//! What the recorder reads of the command's program before it runs it.

use std::path::Path;

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;

/// The ELF file at `path`, parsed, with what `f` makes of it (none: not
/// an ELF file of this machine's kind, or unreadable).
pub(super) fn with_elf<T>(
    path: &Path,
    f: impl FnOnce(
        &elf::FileHeader64<Endianness>,
        Endianness,
        &object::ReadCache<std::fs::File>,
    ) -> Option<T>,
) -> Option<T> {
    let file = ichnos_image::open_regular(path).ok()?;
    let cache = object::ReadCache::new(file);
    let header = elf::FileHeader64::<Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    f(header, endian, &cache)
}

/// Whether the program at `path` is an ELF executable that names no
/// dynamic linker (`PT_INTERP`): linked statically (or static-pie),
/// it runs without one, and so without the libraries `LD_PRELOAD` names.
/// False for anything else (a script, a dynamic program, unreadable).
pub(super) fn statically_linked(path: &Path) -> bool {
    with_elf(path, |header, endian, data| {
        let kind = header.e_type(endian);
        if kind != elf::ET_EXEC && kind != elf::ET_DYN {
            return Some(false);
        }
        let headers = header.program_headers(endian, data).ok()?;
        // (A shared library has no PT_INTERP either, but is not run as
        // a command.)
        let interp = headers.iter().any(|s| s.p_type(endian) == elf::PT_INTERP);
        Some(!interp)
    })
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Against the compiler's own: a program linked -static, and one
    /// linked as usual (readelf would say "Requesting program
    /// interpreter" for it alone).
    #[test]
    fn a_static_program_is_told_from_a_dynamic_one() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("p.c");
        std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
        for (flags, expected) in [
            (&["-static"][..], true),
            (&[][..], false),
            (&["-static-pie"][..], true),
        ] {
            let exe = dir.path().join("p");
            let status = Command::new("gcc")
                .args(flags)
                .arg("-o")
                .arg(&exe)
                .arg(&source)
                .status()
                .unwrap();
            assert!(status.success(), "gcc {flags:?}");
            let readelf = Command::new("readelf")
                .arg("-l")
                .arg(&exe)
                .output()
                .unwrap();
            let interp =
                String::from_utf8_lossy(&readelf.stdout).contains("Requesting program interpreter");
            assert_eq!(interp, !expected, "readelf on {flags:?}");
            assert_eq!(statically_linked(&exe), expected, "{flags:?}");
        }
        assert!(!statically_linked(&source), "a C file");
    }
}
