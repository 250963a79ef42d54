//! The entry point of a program the kernel jumps into (the dynamic loader,
//! a static executable) is its thread's first frame, though its code may
//! have no unwind row: the rows say "outermost" there, and only there.
//! Which code has rows is read from readelf; entry points from readelf and
//! nm.

use std::path::Path;
use std::process::Command;

use ichnos_code::elf::{file_rows, object_rows, RowChoice};
use ichnos_code::Rows;

fn tool(program: &str, args: &[&str], path: &Path) -> String {
    let out = Command::new(program).args(args).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} {}",
        path.display()
    );
    String::from_utf8(out.stdout).unwrap()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// The entry point readelf reads in the ELF header.
fn entry_point(path: &Path) -> u64 {
    let header = tool("readelf", &["-hW"], path);
    let line = header
        .lines()
        .find(|l| l.contains("Entry point address:"))
        .unwrap();
    hex(line.split_whitespace().last().unwrap())
}

/// The code ranges readelf reads FDEs for.
fn fde_ranges(path: &Path) -> Vec<(u64, u64)> {
    // readelf (binutils 2.40) exits 1 after printing every FDE of these
    // files, silently, so its status is not asked.
    let out = Command::new("readelf")
        .args(["-wf", "-W"])
        .arg(path)
        .output()
        .unwrap();
    let frames = String::from_utf8(out.stdout).unwrap();
    frames
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| {
            let range = l.split("pc=").nth(1)?;
            let (start, end) = range.trim().split_once("..")?;
            Some((hex(start), hex(end)))
        })
        .collect()
}

/// What the eager and the lazy rows of the file say at `addr` (a link-time
/// address of a file whose first `PT_LOAD` is at 0): outermost, or not,
/// or no row.
fn outermost_at(path: &Path, addr: u64) -> [Option<bool>; 2] {
    let bytes = std::fs::read(path).unwrap();
    let eager = file_rows(&bytes, RowChoice::SframeThenEhFrame).unwrap();
    let file = object::File::parse(&bytes[..]).unwrap();
    let Rows::Lazy(lazy) = object_rows(&file, RowChoice::SframeThenEhFrame).unwrap() else {
        panic!("{}: lazy rows expected", path.display());
    };
    [
        eager.find(addr).map(ichnos_code::UnwindRow::is_outermost),
        lazy.find(addr).map(|r| r.is_outermost()),
    ]
}

#[test]
fn the_dynamic_loaders_entry_is_the_outermost_frame() {
    let loader = Path::new("/lib64/ld-linux-x86-64.so.2");
    let entry = entry_point(loader);
    let fdes = fde_ranges(loader);
    assert!(fdes.len() > 100, "{fdes:?}");
    // The premise: glibc's loader has no FDE for its _start.
    assert!(
        !fdes.iter().any(|&(s, e)| (s..e).contains(&entry)),
        "an FDE covers {entry:#x}"
    );
    // `_start: mov %rsp,%rdi; call _dl_start`: the return address from
    // _dl_start is 8 bytes in, the first instruction's address the entry.
    assert_eq!(outermost_at(loader, entry), [Some(true); 2]);
    assert_eq!(outermost_at(loader, entry + 8), [Some(true); 2]);
    // Up to the next FDE and no further.
    let next = fdes
        .iter()
        .map(|&(s, _)| s)
        .filter(|&s| s > entry)
        .min()
        .unwrap();
    assert_eq!(outermost_at(loader, next - 1), [Some(true); 2]);
    assert_eq!(outermost_at(loader, next), [Some(false); 2]);
    // The function before the entry keeps its own rows.
    let (before, _) = fdes
        .iter()
        .copied()
        .filter(|&(_, e)| e <= entry)
        .max()
        .unwrap();
    assert_eq!(outermost_at(loader, before), [Some(false); 2]);
}

/// A shared object in `dir` whose entry point is `begin`, code without
/// unwind information, built with `flags`; its path and `begin`'s address.
fn entry_fixture(dir: &Path, name: &str, flags: &[&str]) -> (std::path::PathBuf, u64) {
    let src = dir.join("entry.c");
    std::fs::write(
        &src,
        "void work(void) { __asm__ volatile(\"\" ::: \"memory\"); }\n\
         __asm__(\".text\\n.globl begin\\nbegin:\\n\\tcall work\\n\\thlt\\n\");\n",
    )
    .unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-fPIC", "-shared", "-Wl,-e,begin", "-o"])
        .arg(&out)
        .arg(&src)
        .args(flags)
        .status()
        .unwrap();
    assert!(status.success());
    let symbols = tool("nm", &["--defined-only"], &out);
    let begin = symbols
        .lines()
        .find(|l| l.ends_with(" begin"))
        .map(|l| hex(l.split_whitespace().next().unwrap()))
        .unwrap();
    assert_eq!(entry_point(&out), begin);
    assert!(!fde_ranges(&out)
        .iter()
        .any(|&(s, e)| (s..e).contains(&begin)));
    (out, begin)
}

#[test]
fn only_an_object_that_needs_nothing_is_started_at_its_entry() {
    let dir = tempfile::tempdir().unwrap();
    // Built without libc: nothing needed, no interpreter.
    let (alone, begin) = entry_fixture(dir.path(), "alone.so", &["-nostdlib"]);
    assert!(!tool("readelf", &["-dW"], &alone).contains("(NEEDED)"));
    assert_eq!(outermost_at(&alone, begin), [Some(true); 2]);
    assert_eq!(outermost_at(&alone, begin + 5), [Some(true); 2]);
    // With libc: a library whose entry point is only a field in its
    // header (as many have, at the start of .text); its code there is
    // called like any other, and stays without a row.
    let (library, begin) = entry_fixture(dir.path(), "library.so", &["-Wl,--no-as-needed", "-lc"]);
    assert!(tool("readelf", &["-dW"], &library).contains("(NEEDED)"));
    assert_eq!(outermost_at(&library, begin), [None; 2]);
}
