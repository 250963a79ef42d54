//! Room for the runtime's thread-local storage where an auditor runs.
//!
//! The runtime keeps its per-thread state in initial-exec TLS (the fill
//! buffers' thread block, the scope's open calls: about 17 KiB), which a
//! preloaded library may hold: the dynamic linker sizes every thread's
//! static TLS for the objects it loads at the start. With an auditor
//! (`LD_AUDIT`, or a `DT_AUDIT`/`DT_DEPAUDIT` the program names, even one
//! that cannot be loaded) it sets that size before it loads the preloaded
//! libraries, which then have only the surplus (about 1.5 KiB), and it
//! refuses the runtime: "cannot allocate memory in static TLS block", the
//! program never starts. There the recorder asks glibc for a surplus the
//! runtime fits in (the `glibc.rtld.optional_static_tls` tunable, glibc
//! 2.32 and later), unless the user's own `GLIBC_TUNABLES` sets it.
//! Without an auditor the environment is left as it is.
//!
//! What is seen is `LD_AUDIT` in the recorder's environment and the
//! auditors the command's own executable names: a program the command
//! runs later (a script's, an exec's) that names one of its own, or an
//! `LD_AUDIT` set on the way (`env LD_AUDIT=...`), is refused as before.
//! The tunable reaches the command's children with the rest of the
//! environment: each of their threads sets that much more of its stack
//! aside for static TLS (a thread made with a very small stack of its own
//! may then not start), which is why it is not set everywhere.

use std::ffi::OsString;
use std::path::Path;

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader};

use super::elf::with_elf;

/// The tunable that sizes the static TLS surplus.
const TUNABLE: &str = "glibc.rtld.optional_static_tls";

/// The `GLIBC_TUNABLES` to run `program` with, when an auditor will run
/// and the runtime at `preload` needs room (none: leave it).
pub(super) fn tunables(program: &Path, preload: &Path) -> Option<(OsString, OsString)> {
    let audit = std::env::var_os("LD_AUDIT").is_some_and(|v| !v.is_empty());
    if !audit && !names_an_auditor(program) {
        return None;
    }
    let old = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
    if old.to_string_lossy().contains(TUNABLE) {
        return None;
    }
    // The runtime's TLS, and the default surplus besides for the rest.
    let room = tls_size(preload)?
        .checked_add(512)?
        .checked_next_multiple_of(4096)?;
    let mut value = old;
    if !value.is_empty() {
        value.push(":");
    }
    value.push(format!("{TUNABLE}={room}"));
    Some((OsString::from("GLIBC_TUNABLES"), value))
}

/// Whether the ELF program at `path` names an auditor in its dynamic
/// section (`DT_AUDIT`, `DT_DEPAUDIT`).
fn names_an_auditor(path: &Path) -> bool {
    with_elf(path, |header, endian, data| {
        let headers = header.program_headers(endian, data).ok()?;
        let found = headers.iter().any(|segment| {
            segment.p_type(endian) == elf::PT_DYNAMIC
                && segment
                    .dynamic(endian, data)
                    .ok()
                    .flatten()
                    .is_some_and(|entries| {
                        entries.iter().any(|entry| {
                            matches!(entry.tag32(endian), Some(elf::DT_AUDIT | elf::DT_DEPAUDIT))
                        })
                    })
        });
        Some(found)
    })
    .unwrap_or(false)
}

/// Bytes of the object at `path`'s thread-local storage (`PT_TLS`).
fn tls_size(path: &Path) -> Option<u64> {
    with_elf(path, |header, endian, data| {
        let headers = header.program_headers(endian, data).ok()?;
        headers
            .iter()
            .find(|segment| segment.p_type(endian) == elf::PT_TLS)
            .map(|segment| segment.p_memsz(endian))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Against readelf: a program's `PT_TLS` size, and a program linked
    /// with `--audit` against one linked without.
    #[test]
    fn reads_what_readelf_reads() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("main.c");
        std::fs::write(
            &source,
            "__thread char block[3000];\nint main(void) { return block[0]; }\n",
        )
        .unwrap();
        let plain = dir.path().join("plain");
        let audited = dir.path().join("audited");
        for (exe, extra) in [(&plain, None), (&audited, Some("-Wl,--audit,x.so"))] {
            let status = Command::new("gcc")
                .arg("-o")
                .arg(exe)
                .arg(&source)
                .args(extra)
                .status()
                .expect("gcc (Debian's gcc package)");
            assert!(status.success());
        }
        let readelf = |exe: &Path, args: &[&str]| -> String {
            let out = Command::new("readelf")
                .args(args)
                .arg(exe)
                .output()
                .expect("readelf (Debian's binutils package)");
            String::from_utf8(out.stdout).unwrap()
        };
        assert!(readelf(&audited, &["-dW"]).contains("(AUDIT)"));
        assert!(!readelf(&plain, &["-dW"]).contains("(AUDIT)"));
        assert!(names_an_auditor(&audited));
        assert!(!names_an_auditor(&plain));
        // readelf -lW: "TLS  offset vaddr paddr filesz memsz flags align".
        let line = readelf(&plain, &["-lW"])
            .lines()
            .find(|l| l.trim_start().starts_with("TLS "))
            .map(str::to_owned)
            .expect("a TLS segment");
        let memsz = line.split_whitespace().nth(5).unwrap();
        let memsz = u64::from_str_radix(memsz.trim_start_matches("0x"), 16).unwrap();
        assert!(memsz >= 3000);
        assert_eq!(tls_size(&plain), Some(memsz));
        assert_eq!(tls_size(&source), None);
    }
}
