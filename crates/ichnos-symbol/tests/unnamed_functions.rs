//! A stripped shared library's functions: those its dynamic symbol table
//! still names keep their names, and the static ones, which nothing
//! names, are each one function `sub_ADDR`, placed by their `.eh_frame`
//! entries, at the address `nm` gave the function before the strip; its
//! every instruction is named so. The PLT, which one FDE covers, is no
//! made-up function.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use ichnos_symbol::{Symbolizer, SymbolizerOptions};

mod support;
use support::{instruction_addresses, run};

const SOURCE: &str = r#"
static volatile int sink;
__attribute__((noinline)) static int mix(int x) { for (int i = 0; i < x; i++) sink += i * x; return sink; }
__attribute__((noinline)) static int fold(int x) { return mix(x) ^ mix(x + 1); }
__attribute__((noinline)) static int spread(int x) { int s = 0; for (int i = 0; i < 3; i++) s += fold(x + i); return s; }
int exported(int x) { return spread(x) + fold(x); }
int puts(const char *);
int say(void) { return puts("hello"); }
"#;

/// nm's sized text symbols of `lib`: address to (name, size, global).
fn nm_functions(lib: &Path) -> HashMap<u64, (String, u64, bool)> {
    run(Command::new("nm").args(["-S", "--defined-only"]).arg(lib))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 4 || !matches!(f[2], "t" | "T") {
                return None;
            }
            let address = u64::from_str_radix(f[0], 16).ok()?;
            let size = u64::from_str_radix(f[1], 16).ok()?;
            Some((address, (f[3].to_owned(), size, f[2] == "T")))
        })
        .collect()
}

#[test]
fn a_stripped_librarys_static_functions_are_named_by_their_unwind_entries() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lib.c");
    std::fs::write(&src, SOURCE).unwrap();
    let lib = dir.path().join("libu.so");
    run(Command::new("gcc")
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(&src));
    let stripped = dir.path().join("libu-stripped.so");
    run(Command::new("strip").arg("-o").arg(&stripped).arg(&lib));

    let functions = nm_functions(&lib);
    let ours: Vec<(&u64, &(String, u64, bool))> = functions
        .iter()
        .filter(|(_, (name, _, _))| {
            ["mix", "fold", "spread", "exported"]
                .iter()
                .any(|n| name == n || name.starts_with(&format!("{n}.")))
        })
        .collect();
    assert_eq!(ours.len(), 4, "{functions:?}");

    // Every instruction of each, in the stripped file.
    let instructions = instruction_addresses(&lib);
    let mut addrs = Vec::new();
    let mut expected = Vec::new();
    for (&start, (name, size, global)) in &ours {
        let want = if *global {
            name.clone()
        } else {
            format!("sub_{start:x}")
        };
        for &a in instructions
            .iter()
            .filter(|&&a| a >= start && a < start + size)
        {
            addrs.push(a);
            expected.push(want.clone());
        }
    }
    let got = Symbolizer::new(SymbolizerOptions::default())
        .symbolize_file(&stripped, &addrs)
        .unwrap();
    for ((a, want), s) in addrs.iter().zip(&expected).zip(&got) {
        let name = s.frames.first().and_then(|f| f.function.as_deref());
        assert_eq!(name, Some(want.as_str()), "at {a:#x}");
    }

    // The PLT's one FDE covers every stub: no made-up function there.
    let plt: Vec<u64> = run(Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-j", ".plt", "-j", ".plt.sec"])
        .arg(&lib))
    .lines()
    .filter_map(|l| {
        let (addr, rest) = l.trim_start().split_once(':')?;
        (!rest.is_empty() && l.starts_with(' ')).then_some(())?;
        u64::from_str_radix(addr, 16).ok()
    })
    .collect();
    assert!(!plt.is_empty());
    let got = Symbolizer::new(SymbolizerOptions::default())
        .symbolize_file(&stripped, &plt)
        .unwrap();
    for (a, s) in plt.iter().zip(&got) {
        let name = s.frames.first().and_then(|f| f.function.as_deref());
        assert!(
            !name.is_some_and(|n| n.starts_with("sub_")),
            "{name:?} at {a:#x}"
        );
    }
}
