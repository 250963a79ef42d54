//! The GDB JIT interface read from a live process. The fixture
//! `gdb_jit.c` copies code linked at a fixed address (`gdb_jit_code.s`,
//! `ld -Ttext`) into anonymous memory, gives the linked file to debuggers
//! as the object describing it, and stops. The reader must find the
//! descriptor, its one entry and the object (the very bytes of the file),
//! and read from it the function `nm` lists and the unwind rows `readelf
//! -wF` prints.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ichnos_code::gdb_jit::{find_descriptor, parse_object, read_entries, read_object};
use ichnos_code::memory::ProcessMemory;
use ichnos_code::CfaBase;

fn run(command: &mut Command) -> String {
    let out = command.output().expect("runs");
    assert!(out.status.success(), "{command:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Builds the fixtures in `dir` (`gdb_jit_build.sh`): (program, object).
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    run(Command::new("sh")
        .arg(support::fixtures_dir().join("gdb_jit_build.sh"))
        .arg(dir));
    (dir.join("gdb_jit"), dir.join("code.elf"))
}

/// `readelf -wF`'s rows for the one FDE of `path`: (from, CFA offset
/// from rsp, whether rbp is saved at CFA-16), and the FDE's end.
fn readelf_rows(path: &Path) -> (Vec<(u64, i32, bool)>, u64) {
    let text = run(Command::new("readelf").arg("-wF").arg(path));
    let fde = text.lines().find(|l| l.contains(" FDE ")).expect("an FDE");
    let end = u64::from_str_radix(fde.rsplit("..").next().unwrap().trim(), 16).unwrap();
    let rows = text
        .lines()
        .skip_while(|l| !l.contains(" FDE "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let from = u64::from_str_radix(f.first()?, 16).ok()?;
            let cfa = f.get(1)?.strip_prefix("rsp+")?.parse().ok()?;
            Some((from, cfa, f.get(3) == Some(&"c-16")))
        })
        .collect();
    (rows, end)
}

/// The stopped fixture, killed however the test ends.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_object_a_jit_gave_debuggers_is_read_from_its_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (program, linked) = build(dir.path());
    let mut child = Stopped(
        Command::new(&program)
            .arg(&linked)
            .arg("stop")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = child.0.id();
    // Wait until it has stopped itself, its object registered.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .contains(") T ")
    {
        assert!(Instant::now() < deadline, "the fixture never stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    let range: Vec<u64> = line
        .split_whitespace()
        .map(|w| u64::from_str_radix(w, 16).unwrap())
        .collect();

    let descriptor = find_descriptor(pid).unwrap().expect("the descriptor");
    let mut memory = ProcessMemory::new(pid);
    let list = read_entries(&mut memory, descriptor).unwrap();
    assert!(list.complete);
    assert_eq!(list.entries.len(), 1, "{list:?}");
    let bytes = read_object(&mut memory, &list.entries[0]).unwrap();
    drop(child);
    assert_eq!(bytes, std::fs::read(&linked).unwrap(), "the linked file");

    let object = parse_object(&bytes).unwrap();
    assert_eq!(object.text, range[0]..range[1]);
    // nm -S: "ADDRESS SIZE T jit_hot".
    let nm = run(Command::new("nm").arg("-S").arg(&linked));
    let f: Vec<&str> = nm
        .lines()
        .find(|l| l.ends_with(" jit_hot"))
        .unwrap()
        .split_whitespace()
        .collect();
    let (start, size) = (
        u64::from_str_radix(f[0], 16).unwrap(),
        u64::from_str_radix(f[1], 16).unwrap(),
    );
    assert_eq!(object.functions.len(), 1, "{:?}", object.functions);
    assert_eq!(object.functions[0].name, "jit_hot");
    assert_eq!(object.functions[0].range, start..start + size);

    // Every address of the FDE has readelf's row.
    let table = object.rows.expect("rows from .eh_frame");
    let (rows, end) = readelf_rows(&linked);
    assert_eq!(rows.len(), 7, "{rows:?}");
    for (i, &(from, cfa, rbp_saved)) in rows.iter().enumerate() {
        let to = rows.get(i + 1).map_or(end, |r| r.0);
        for pc in from..to {
            let row = table
                .find(pc)
                .unwrap_or_else(|| panic!("no row at {pc:#x}"));
            assert_eq!(row.cfa_base(), CfaBase::Sp, "{pc:#x}");
            assert_eq!(row.cfa_off, cfa, "{pc:#x}");
            assert_eq!(row.fp_off != 0, rbp_saved, "{pc:#x}");
            if rbp_saved {
                assert_eq!(row.fp_off, -16, "{pc:#x}");
            }
        }
    }
}

/// A relocatable object (as LuaJIT builds them): its symbols count from
/// their sections, which the JIT placed at the code's address (here
/// `objcopy` does).
#[test]
fn functions_of_a_relocatable_object_are_placed_with_their_section() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let placed = dir.path().join("placed.o");
    run(Command::new("objcopy")
        .args(["--change-section-address", ".text=0x20000000"])
        .arg(dir.path().join("code.o"))
        .arg(&placed));
    let size = run(Command::new("size").arg("-A").arg(&placed))
        .lines()
        .find(|l| l.starts_with(".text "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap();
    let parsed = parse_object(&std::fs::read(&placed).unwrap()).unwrap();
    assert_eq!(parsed.text, 0x2000_0000..0x2000_0000 + size);
    assert_eq!(parsed.functions.len(), 1, "{:?}", parsed.functions);
    assert_eq!(parsed.functions[0].name, "jit_hot");
    assert_eq!(parsed.functions[0].range, 0x2000_0000..0x2000_0000 + size);
    // Its .eh_frame's addresses are in relocations not applied: no rows
    // (they would lie at the section-relative addresses).
    assert!(parsed.rows.is_none());
}
