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

/// objdump's PLT stubs of `exe`: each instruction's address with the name
/// of the stub it lies in.
pub fn objdump_stubs(exe: &Path) -> Vec<(u64, String)> {
    let text = run(Command::new("objdump")
        .args([
            "-d",
            "--no-show-raw-insn",
            "-j",
            ".plt",
            "-j",
            ".plt.got",
            "-j",
            ".plt.sec",
        ])
        .arg(exe));
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(head) = line.strip_suffix(">:") {
            // `0000000000001030 <puts@plt>:` (or `<.plt>:` for PLT0); a
            // program mold linked has its own symbols for its stubs,
            // `puts$plt` and `puts$pltgot`.
            current = head.split_once(" <").and_then(|(_, name)| {
                let function = name
                    .strip_suffix("@plt")
                    .or_else(|| name.strip_suffix("$plt"))
                    .or_else(|| name.strip_suffix("$pltgot"))?;
                Some(format!("{function}@plt"))
            });
            continue;
        }
        let Some(name) = &current else { continue };
        let Some((addr, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        if line.starts_with(' ') && !rest.trim().is_empty() {
            if let Ok(addr) = u64::from_str_radix(addr, 16) {
                out.push((addr, name.clone()));
            }
        }
    }
    out
}
