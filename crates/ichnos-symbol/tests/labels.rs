//! Assembler labels (`STT_NOTYPE` symbols without a size) in code, against
//! gdb's `info symbol` at every instruction of a program built without
//! debug information: a label outside every function names the code up
//! to the next symbol (the dynamic loader's `_start` is one), and a label
//! inside a sized function leaves the function its name.

use std::path::Path;
use std::process::Command;

use ichnos_symbol::{Symbolizer, SymbolizerOptions, Unnamed};

mod support;
use support::{instruction_addresses, run};

const SOURCE: &str = r#"
int work(int x);
__asm__(".text\n"
        ".globl entry_label\n"
        "entry_label:\n\tcall work\n\thlt\n"
        ".globl sized_fn\n.type sized_fn,@function\n"
        "sized_fn:\n\tnop\n\tnop\n\tnop\n"
        "inside_label:\n\tnop\n\tnop\n\tret\n"
        ".size sized_fn, .-sized_fn\n");
__attribute__((noinline)) int work(int x) { return x * 3 + 1; }
int main(int c, char **v) { (void)v; return work(c); }
"#;

/// gdb's name for each address: the symbol, or `None` where it has none.
fn gdb_names(exe: &Path, addrs: &[u64]) -> Vec<Option<String>> {
    let mut cmd = Command::new("gdb");
    cmd.args(["-nx", "-batch"]);
    for a in addrs {
        cmd.arg("-ex").arg(format!("info symbol {a:#x}"));
    }
    let text = run(cmd.arg(exe));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), addrs.len(), "{text}");
    lines
        .iter()
        .map(|l| {
            if l.starts_with("No symbol matches") {
                None
            } else {
                // "NAME in section S" or "NAME + OFF in section S".
                let name = l.split(" in section ").next().unwrap();
                Some(name.split(" + ").next().unwrap().to_owned())
            }
        })
        .collect()
}

/// The addresses of the no-op instructions objdump shows (what
/// compilers and assemblers pad with).
fn padding_instructions(exe: &Path) -> Vec<u64> {
    run(Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(exe))
    .lines()
    .filter_map(|l| {
        let (addr, rest) = l.trim_start().split_once(':')?;
        let op = rest.trim_start();
        let nop = ["nop", "xchg   %ax,%ax", "cs nop", "data16", "int3"]
            .iter()
            .any(|p| op.starts_with(p));
        (nop && l.starts_with(' ')).then(|| u64::from_str_radix(addr, 16).ok())?
    })
    .collect()
}

#[test]
fn labels_in_code_are_named_as_gdb_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("labels.c");
    std::fs::write(&src, SOURCE).unwrap();
    let exe = dir.path().join("labels");
    run(Command::new("gcc")
        .args(["-O2", "-g0", "-o"])
        .arg(&exe)
        .arg(&src));
    // `.text` (gdb makes names of its own for PLT entries).
    let sections = run(Command::new("readelf").arg("-SW").arg(&exe));
    let text = sections.lines().find(|l| l.contains(" .text ")).unwrap();
    let fields: Vec<&str> = text.split(']').nth(1).unwrap().split_whitespace().collect();
    let start = u64::from_str_radix(fields[2], 16).unwrap();
    let end = start + u64::from_str_radix(fields[4], 16).unwrap();
    let addrs: Vec<u64> = instruction_addresses(&exe)
        .into_iter()
        .filter(|a| (start..end).contains(a))
        .collect();
    let theirs = gdb_names(&exe, &addrs);
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let ours = symbolizer.symbolize_file(&exe, &addrs).unwrap();
    let mut seen = Vec::new();
    let padding = padding_instructions(&exe);
    for ((addr, want), answer) in addrs.iter().zip(&theirs).zip(&ours) {
        let got = answer
            .frames
            .last()
            .and_then(|f| f.function.as_deref().map(str::to_owned));
        // The one deliberate difference (as with addr2line): the padding
        // after a function's end is no function's.
        if answer.unnamed == Some(Unnamed::Padding) && padding.contains(addr) {
            continue;
        }
        assert_eq!(&got, want, "at {addr:#x}");
        seen.extend(got);
    }
    for name in ["entry_label", "sized_fn", "work", "main"] {
        assert!(seen.iter().any(|s| s == name), "{name} in {seen:?}");
    }
    assert!(!seen.iter().any(|s| s == "inside_label"), "{seen:?}");
}
