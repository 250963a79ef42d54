//! Functions named by an assembler label for use inside their library,
//! as glibc names its own (`__GI_setlocale`, by `hidden_proto`): DWARF
//! gives the label as the function's linkage name, and its own name in
//! `DW_AT_name` (`setlocale`), which is the name given, as perf and
//! uftrace give it (gdb's backtrace shows the label).

use std::path::Path;
use std::process::Command;

use ichnos_symbol::{Symbolizer, SymbolizerOptions};

mod support;
use support::run;

/// A function given glibc's internal label, and a public alias.
const SOURCE: &str = r#"
int setthing(int x) __asm__("__GI_setthing");
__attribute__((noinline)) int setthing(int x) { return x * 3 + 1; }
extern __typeof(setthing) setthing_public __attribute__((alias("__GI_setthing")));
int main(int c, char **v) { (void)v; return setthing(c); }
"#;

/// Each subprogram's `DW_AT_name` and `DW_AT_linkage_name` in `object`,
/// as readelf dumps them.
fn dwarf_names(object: &Path) -> Vec<(String, Option<String>)> {
    let dump = run(Command::new("readelf").arg("--debug-dump=info").arg(object));
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    let mut in_subprogram = false;
    for line in dump.lines() {
        if line.contains("Abbrev Number") {
            in_subprogram = line.contains("DW_TAG_subprogram");
        } else if in_subprogram {
            let value = || line.rsplit(": ").next().unwrap().trim().to_owned();
            if line.contains("DW_AT_name") {
                out.push((value(), None));
            } else if line.contains("DW_AT_linkage_name") {
                if let Some(last) = out.last_mut() {
                    last.1 = Some(value());
                }
            }
        }
    }
    out
}

/// The address `nm` gives `symbol` in `object`.
fn address_of(object: &Path, symbol: &str) -> u64 {
    run(Command::new("nm").arg(object))
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == symbol).then(|| u64::from_str_radix(f[0], 16).ok())?
        })
        .unwrap_or_else(|| panic!("{symbol} in nm"))
}

fn function_at(symbolizer: &Symbolizer, object: &Path, addr: u64) -> String {
    let answers = symbolizer.symbolize_file(object, &[addr]).unwrap();
    answers[0]
        .frames
        .last()
        .and_then(|f| f.function.as_deref())
        .unwrap_or("??")
        .to_owned()
}

#[test]
fn a_function_with_glibcs_internal_label_is_named_by_its_own_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("gi.c");
    std::fs::write(&src, SOURCE).unwrap();
    let exe = dir.path().join("gi");
    run(Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(&src));
    // What the compiler wrote: the label as the linkage name.
    let names = dwarf_names(&exe);
    let (own, label) = names
        .iter()
        .find(|(_, linkage)| linkage.as_deref() == Some("__GI_setthing"))
        .unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(own, "setthing");
    let addr = address_of(&exe, label.as_deref().unwrap());
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    assert_eq!(function_at(&symbolizer, &exe, addr), *own);
    assert_eq!(function_at(&symbolizer, &exe, addr + 1), *own);
}

/// glibc itself, through its DWARF (libc6-dbg, which CI installs):
/// `setlocale`, whose DWARF linkage name is `__GI_setlocale`, is named as
/// `nm -D` names it.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn glibcs_setlocale_is_named_setlocale() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let table = run(Command::new("nm").arg("-D").arg(libc));
    let addr = table
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2].split('@').next() == Some("setlocale"))
                .then(|| u64::from_str_radix(f[0], 16).ok())?
        })
        .expect("setlocale in nm -D");
    let symbolizer = Symbolizer::new(SymbolizerOptions {
        debug_dirs: vec!["/usr/lib/debug".into()],
        ..SymbolizerOptions::default()
    });
    assert_eq!(function_at(&symbolizer, libc, addr), "setlocale");
    // From the DWARF, not the symbol table alone (which says setlocale
    // anyway): the answer has its line.
    let answer = &symbolizer.symbolize_file(libc, &[addr]).unwrap()[0];
    assert!(
        answer.frames.last().is_some_and(|f| f.line.is_some()),
        "{answer:?}: is libc6-dbg installed?"
    );
}
