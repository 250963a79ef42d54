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

/// The file's ELF origin, as readelf reads its program headers: the
/// page of its first `PT_LOAD` (rows count from it).
fn origin(path: &Path) -> u64 {
    let headers = tool("readelf", &["-lW"], path);
    let first_load = headers
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with("LOAD "))
        .unwrap();
    hex(first_load.split_whitespace().nth(2).unwrap()) & !0xfff
}

/// What the eager and the lazy rows of the file say at `addr` (a link-time
/// address): outermost, or not, or no row.
fn outermost_at(path: &Path, addr: u64) -> [Option<bool>; 2] {
    let addr = addr - origin(path);
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

/// A static executable in `dir` (linked at 0x400000, no libc) entered at
/// `begin`, with `asm` for its entry code around two C functions, and
/// SFrame if `sframe`; its path and the addresses of its symbols, by nm.
fn static_fixture(
    dir: &Path,
    name: &str,
    asm: &str,
    sframe: bool,
) -> (std::path::PathBuf, Vec<(String, u64)>) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!(
            "void work(void) {{ __asm__ volatile(\"\" ::: \"memory\"); }}\n\
             __asm__({asm:?});\n\
             void after(void) {{ __asm__ volatile(\"\" ::: \"memory\"); }}\n"
        ),
    )
    .unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-static", "-nostdlib", "-no-pie", "-fno-pie"])
        .args(sframe.then_some("-Wa,--gsframe"))
        .args(["-Wl,-e,begin", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    let symbols = tool("nm", &["--defined-only"], &out)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let addr = hex(parts.next()?);
            Some((parts.nth(1)?.to_owned(), addr))
        })
        .collect();
    (out, symbols)
}

fn address(symbols: &[(String, u64)], name: &str) -> u64 {
    symbols.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn at_a_static_executables_entry_the_mark_ends_at_the_next_fde_even_behind_sframe() {
    let dir = tempfile::tempdir().unwrap();
    // `odd` has an FDE that SFrame cannot express (gas leaves it out of
    // .sframe): the next SFrame row is `work`'s, further on.
    let (exe, symbols) = static_fixture(
        dir.path(),
        "odd",
        ".text\n.globl begin\nbegin:\n\tcall odd\n\tcall work\n\thlt\n\
         .globl odd\n.type odd,@function\nodd:\n\t.cfi_startproc\n\
         \t.cfi_escape 0x2e,0x0\n\tnop\n\tret\n\t.cfi_endproc\n.size odd,.-odd\n",
        true,
    );
    assert_eq!(origin(&exe), 0x40_0000);
    let (begin, odd, work) = (
        address(&symbols, "begin"),
        address(&symbols, "odd"),
        address(&symbols, "work"),
    );
    assert_eq!(entry_point(&exe), begin);
    let fdes = fde_ranges(&exe);
    assert!(fdes.iter().any(|&(s, _)| s == odd), "{fdes:?}");
    let sframe = tool("readelf", &["--sframe"], &exe);
    assert!(!sframe.contains(&format!("pc = {odd:#x}")), "{sframe}");
    assert!(sframe.contains(&format!("pc = {work:#x}")), "{sframe}");
    assert_eq!(outermost_at(&exe, begin), [Some(true); 2]);
    assert_eq!(outermost_at(&exe, odd - 1), [Some(true); 2]);
    // `odd` is a function of its own, whose rows say it is called.
    assert_eq!(outermost_at(&exe, odd), [Some(false); 2]);
    assert_eq!(outermost_at(&exe, odd + 1), [Some(false); 2]);
}

#[test]
fn an_entry_with_rows_of_its_own_is_left_as_they_say() {
    let dir = tempfile::tempdir().unwrap();
    // CFI for the entry's first instruction only (it says outermost: the
    // return address is undefined), then code without any. Without
    // SFrame: version 1 has no word for an undefined return address, and
    // gas 2.40 writes a plain frame's row for it.
    let (exe, symbols) = static_fixture(
        dir.path(),
        "covered",
        ".text\n.globl begin\nbegin:\n\t.cfi_startproc\n\t.cfi_undefined rip\n\
         \tcall work\n\t.cfi_endproc\n.globl bare\nbare:\n\tcall work\n\thlt\n",
        false,
    );
    let (begin, bare) = (address(&symbols, "begin"), address(&symbols, "bare"));
    let fdes = fde_ranges(&exe);
    assert!(
        fdes.iter().any(|&(s, e)| (s..e).contains(&begin)),
        "{fdes:?}"
    );
    assert!(
        !fdes.iter().any(|&(s, e)| (s..e).contains(&bare)),
        "{fdes:?}"
    );
    assert_eq!(outermost_at(&exe, begin), [Some(true); 2]);
    // The code past the entry's FDE has no row: it is not the entry's.
    assert_eq!(outermost_at(&exe, bare), [None; 2]);
}
