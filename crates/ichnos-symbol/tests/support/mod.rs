//! Helpers shared by this crate's tests: running tools, building the C
//! fixture, listing instructions.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cmd`, which must succeed, and returns its standard output.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Builds tests/fixtures/inlines.c with `-O2 -g` into `dir`.
pub fn fixture(dir: &Path) -> PathBuf {
    let exe = dir.join("inlines");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
    run(Command::new("gcc")
        .args(["-O2", "-g", "-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(src));
    exe
}

/// Every instruction address of the file's code, per objdump.
pub fn instruction_addresses(exe: &Path) -> Vec<u64> {
    run(Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(exe))
    .lines()
    .filter_map(|l| {
        let (addr, rest) = l.trim_start().split_once(':')?;
        (!rest.is_empty() && l.starts_with(' ')).then_some(())?;
        u64::from_str_radix(addr, 16).ok()
    })
    .collect()
}
