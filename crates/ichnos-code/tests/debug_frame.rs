//! `.debug_frame` converted to unwind rows: every row of a C program built
//! to carry its CFI there (gcc's `-fno-asynchronous-unwind-tables -g`)
//! checked against what binutils' `readelf --debug-dump=frames-interp`
//! shows, and a Go program's rows, whose stack tops are marked outermost
//! where `nm` places the runtime's functions. The same program stripped
//! keeps Go's own function table: its functions are `nm`'s, and the rows
//! of its pcsp tables are those of the `.debug_frame` the linker wrote
//! from them.

mod support;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use ichnos_code::debug_frame::{go_top_frames, rows_from_object};
use ichnos_code::elf::{file_rows, RowChoice};
use ichnos_code::go_pclntab;
use ichnos_code::process::{code_object_for_mapping, FileMapping};
use ichnos_code::row::CfaBase;
use ichnos_code::RowSource;

fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A row as readelf shows it: [from, to), the CFA's register and offset,
/// and the offsets from the CFA of the saved rbp (if saved) and of the
/// return address.
#[derive(Debug, PartialEq)]
struct Shown {
    from: u64,
    to: u64,
    cfa: (String, i64),
    rbp: Option<i64>,
    ra: i64,
}

/// `c-16` as -16.
fn cfa_offset(value: &str) -> Option<i64> {
    value.strip_prefix('c')?.parse().ok()
}

/// The rows of the `.debug_frame` section in `readelf -wF`'s dump of
/// `path`, where the CFA is a register plus an offset and the return
/// address is saved at an offset from it.
fn readelf_rows(path: &Path) -> Vec<Shown> {
    let dump = run(Command::new("readelf")
        .arg("--debug-dump=frames-interp")
        .arg(path));
    let section = dump
        .split("Contents of the ")
        .find(|s| s.starts_with(".debug_frame section"))
        .expect("readelf shows a .debug_frame section");
    let mut shown = Vec::new();
    // The CIE's initial row: that of an FDE with no instructions.
    let mut initial: Option<Shown> = None;
    for entry in section
        .split("\n\n")
        .filter(|e| e.contains(" CIE ") || e.contains(" FDE "))
    {
        let mut lines = entry.lines().filter(|l| !l.trim().is_empty());
        let head = lines.next().unwrap();
        let range = head.split_once(" pc=").map(|(_, pc)| {
            let (start, end) = pc.trim().split_once("..").unwrap();
            let hex = |v: &str| u64::from_str_radix(v, 16).unwrap();
            (hex(start), hex(end))
        });
        let Some(columns) = lines.next() else {
            // An FDE without rows of its own.
            let ((from, to), Some(first)) = (range.unwrap(), &initial) else {
                panic!("{entry}");
            };
            shown.push(Shown {
                from,
                to,
                cfa: first.cfa.clone(),
                rbp: first.rbp,
                ra: first.ra,
            });
            continue;
        };
        let columns: Vec<&str> = columns.split_whitespace().collect();
        assert_eq!(columns[..2], ["LOC", "CFA"], "{entry}");
        let mut rows: Vec<(u64, Vec<&str>)> = lines
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (u64::from_str_radix(f[0], 16).unwrap(), f)
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        let end = range.map_or(u64::MAX, |r| r.1);
        for (i, (from, fields)) in rows.iter().enumerate() {
            let to = rows.get(i + 1).map_or(end, |r| r.0);
            let column = |name: &str| {
                let at = columns.iter().position(|c| *c == name)?;
                fields.get(at).copied()
            };
            let Some((register, offset)) = fields[1].split_once('+') else {
                continue; // an expression
            };
            let Some(ra) = column("ra").and_then(cfa_offset) else {
                continue;
            };
            let row = Shown {
                from: *from,
                to,
                cfa: (register.to_owned(), offset.parse().unwrap()),
                rbp: column("rbp").and_then(cfa_offset),
                ra,
            };
            if range.is_none() {
                initial = Some(row);
                break;
            }
            shown.push(row);
        }
    }
    shown
}

#[test]
fn every_debug_frame_row_is_as_readelf_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = support::fixtures_dir();
    run(Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-fPIC",
            "-shared",
            "-o",
        ])
        .arg(dir.path().join("libfix.so"))
        .arg(src.join("libfix.c")));
    let program = dir.path().join("prog");
    // Without asynchronous unwind tables, gcc writes the functions' CFI
    // into .debug_frame, not .eh_frame.
    run(Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer"])
        .args(["-fno-asynchronous-unwind-tables", "-fno-exceptions", "-o"])
        .arg(&program)
        .arg(src.join("prog.c"))
        .arg(format!("-L{}", dir.path().display()))
        .arg("-lfix"));
    let shown = readelf_rows(&program);
    // prog.c's functions: a large frame, alloca's rbp-based CFA.
    assert!(shown.len() >= 10, "{shown:?}");
    assert!(shown.iter().any(|r| r.cfa.0 == "rbp"), "{shown:?}");

    let bytes = std::fs::read(&program).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let conversion = rows_from_object(&file, None).unwrap();
    assert_eq!(conversion.skipped_fdes, 0);
    assert_eq!(conversion.unexpressible_rows, 0);
    check_rows(&conversion.table, &shown);
    // The file's rows, as a code object for it has them: its .eh_frame
    // (the C library's start-up code, the PLT) with .debug_frame's rows
    // where it has none. (A PIE's origin is 0: offsets are addresses.)
    let table = file_rows(&bytes, RowChoice::SframeThenEhFrame).unwrap();
    check_rows(&table, &shown);
    // And the code objects say so (`ichnos stack` prints it): the
    // program's rows are .debug_frame's, the library's .eh_frame's.
    assert_eq!(source_of(&program), RowSource::DebugFrame);
    assert_eq!(source_of(&dir.path().join("libfix.so")), RowSource::EhFrame);
    // With both complete (gcc's -fno-dwarf2-cfi-asm writes both), and
    // .debug_frame the larger (its FDEs hold 8-byte addresses), the
    // rows are named for .eh_frame.
    let both = dir.path().join("both");
    let mut many = String::new();
    for i in 0..200 {
        writeln!(
            many,
            "__attribute__((noinline)) int f{i}(int x) {{ return x * {i} + {i}; }}"
        )
        .unwrap();
    }
    many += "int main(int c, char **v) { (void)v; return f1(c) + f199(c); }\n";
    std::fs::write(dir.path().join("both.c"), many).unwrap();
    run(Command::new("gcc")
        .args(["-O2", "-g", "-fno-dwarf2-cfi-asm", "-o"])
        .arg(&both)
        .arg(dir.path().join("both.c")));
    let sizes = run(Command::new("readelf").args(["-S", "-W"]).arg(&both));
    let size_of = |name: &str| {
        // Name, type, address, offset, size.
        let f: Vec<&str> = sizes
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.contains(&name))
            .unwrap();
        let at = f.iter().position(|&w| w == name).unwrap();
        u64::from_str_radix(f[at + 4], 16).unwrap()
    };
    assert!(size_of(".debug_frame") > size_of(".eh_frame"), "{sizes}");
    assert_eq!(source_of(&both), RowSource::EhFrame);
}

/// Where the code object of `path`'s executable segment says its rows
/// come from.
fn source_of(path: &Path) -> RowSource {
    code_object_of(path).source
}

/// The code object of `path`'s executable segment, mapped as the kernel
/// maps it (a shared object or PIE at a made-up base).
fn code_object_of(path: &Path) -> ichnos_code::CodeObject {
    use object::{Object, ObjectSegment, SegmentFlags};
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let base = if file.kind() == object::ObjectKind::Dynamic {
        0x5555_5555_4000
    } else {
        0
    };
    let text = file
        .segments()
        .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 1 != 0))
        .expect("an executable segment");
    let start = base + (text.address() & !0xfff);
    let mapping = FileMapping {
        start,
        end: (base + text.address() + text.size() + 0xfff) & !0xfff,
        pgoff: text.file_range().0 & !0xfff,
    };
    let name = path.to_str().unwrap();
    code_object_for_mapping(path, name, mapping, RowChoice::SframeThenEhFrame).unwrap()
}

/// Two different Go programs built with the same Go build id (as builds
/// that set it do: `-buildid=redacted`) do not share their rows.
#[test]
fn go_programs_with_one_build_id_keep_their_own_rows() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["-ldflags=-buildid=redacted"];
    let one = build_go_program(
        dir.path(),
        "one",
        "package main\n\nfunc main() { println(1) }\n",
        &flags,
    );
    let two = build_go_program(
        dir.path(),
        "two",
        "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(2) }\n",
        &flags,
    );
    for program in [&one, &two] {
        // readelf -x shows the note's bytes: the id is the last of them.
        let dump = run(Command::new("readelf")
            .args(["-x", ".note.go.buildid"])
            .arg(program));
        assert!(dump.trim_end().ends_with("redacted"), "{dump}");
    }
    let (a, b) = (code_object_of(&one), code_object_of(&two));
    assert!(!a.rows.same(&b.rows));
}

/// Asserts that `table` has the rows readelf showed, at their first and
/// last addresses.
fn check_rows(table: &ichnos_code::RowTable, shown: &[Shown]) {
    for want in shown {
        for addr in [want.from, want.to - 1] {
            let row = table
                .find(addr)
                .unwrap_or_else(|| panic!("no row at {addr:#x}: {want:?}"));
            let base = match row.cfa_base() {
                CfaBase::Sp => "rsp",
                CfaBase::Fp => "rbp",
            };
            let rbp = (row.fp_off != 0).then_some(i64::from(row.fp_off));
            assert_eq!(
                (base, i64::from(row.cfa_off), rbp, i64::from(row.ra_off)),
                (want.cfa.0.as_str(), want.cfa.1, want.rbp, want.ra),
                "at {addr:#x}: {want:?}"
            );
        }
    }
}

/// `nm`'s address of `name` in `path`.
fn nm_address(path: &Path, name: &str) -> Option<u64> {
    run(Command::new("nm").arg(path)).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
    })
}

/// Builds a small Go program with goroutines in `dir`, linked by Go's
/// own linker.
fn build_go(dir: &Path) -> std::path::PathBuf {
    build_go_program(
        dir,
        "go_tops",
        "package main\n\nfunc main() {\n\tdone := make(chan int)\n\tgo func() { done <- 1 }()\n\t<-done\n}\n",
        &[],
    )
}

/// Builds the Go program `source` in `dir` as `name`, with `flags` for
/// `go build`.
fn build_go_program(dir: &Path, name: &str, source: &str, flags: &[&str]) -> std::path::PathBuf {
    let src_dir = dir.join(format!("{name}-src"));
    std::fs::create_dir_all(&src_dir).unwrap();
    let main = src_dir.join("main.go");
    std::fs::write(&main, source).unwrap();
    let program = dir.join(name);
    run(Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&program)
        .arg(&main)
        .current_dir(&src_dir)
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("CGO_ENABLED", "0"));
    program
}

#[test]
fn a_go_programs_stack_tops_are_outermost() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_go(dir.path());
    let bytes = std::fs::read(&program).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    // A Go program has no .eh_frame: its rows come from .debug_frame.
    assert!(object::Object::section_by_name(&file, ".eh_frame").is_none());
    assert_eq!(source_of(&program), RowSource::DebugFrame);

    // Two processes of it share one conversion of its rows (a copy
    // elsewhere, so that nothing but what is in the file is in common):
    // a Go program older than 1.24 has no GNU build id, and its Go build
    // id keys them.
    let copy = dir.path().join("copy");
    std::fs::copy(&program, &copy).unwrap();
    let (a, b) = (code_object_of(&program), code_object_of(&copy));
    assert!(a.rows.same(&b.rows));

    let tops = go_top_frames(&file);
    // The tops of stacks, and code that switches to the system stack:
    // where Go's own traceback of a profiling signal stops.
    let names = [
        "runtime.goexit",
        "runtime.mstart",
        "runtime.rt0_go",
        "runtime.systemstack",
        "runtime.mcall",
    ];
    for name in names {
        // Go 1.17 and later name the assembly functions' ABI0 symbols so.
        let address = nm_address(&program, &format!("{name}.abi0"))
            .or_else(|| nm_address(&program, name))
            .unwrap_or_else(|| panic!("nm shows no {name}"));
        assert!(
            tops.iter().any(|&(start, _)| start == address),
            "{name} at {address:#x} not in {tops:x?}"
        );
    }
    // (Some Go versions have an ABI wrapper besides each ABI0 function.)
    assert!(tops.len() >= names.len(), "{tops:x?}");

    // The file's rows, counted from its origin (the first PT_LOAD's page).
    let origin = object::Object::segments(&file)
        .map(|s| object::ObjectSegment::address(&s))
        .min()
        .unwrap()
        & !0xfff;
    let table = file_rows(&bytes, RowChoice::SframeThenEhFrame).unwrap();
    for &(start, end) in &tops {
        for addr in [start, end - 1] {
            let row = table.find(addr - origin).expect("a row");
            assert!(row.is_outermost(), "{addr:#x}: {row:?}");
        }
    }
    // The code around them keeps its own rows: main.main's first is the
    // CFA at rsp+8, as readelf shows every FDE's first row.
    let main = nm_address(&program, "main.main").unwrap();
    let row = table.find(main - origin).expect("main.main's row");
    assert!(!row.is_outermost());
    assert_eq!(
        (row.cfa_base(), row.cfa_off, row.ra_off),
        (CfaBase::Sp, 8, -8)
    );
}

/// `name` as Go's function table writes it: an array type's length in
/// a generated function's name (`type..eq.[5]T`) elided as `[...]`.
fn elided(name: &str) -> String {
    let mut out = String::new();
    let mut rest = name;
    while let Some(open) = rest.find('[') {
        let (before, after) = rest.split_at(open);
        out.push_str(before);
        match after[1..].find(']') {
            Some(close) if close > 0 && after[1..=close].bytes().all(|b| b.is_ascii_digit()) => {
                out.push_str("[...]");
                rest = &after[close + 2..];
            }
            _ => {
                out.push('[');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn a_stripped_go_program_keeps_its_functions_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let program = build_go(dir.path());
    let stripped = dir.path().join("stripped");
    run(Command::new("strip").arg("-o").arg(&stripped).arg(&program));
    let bytes = std::fs::read(&stripped).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    for gone in [".symtab", ".debug_frame"] {
        assert!(object::Object::section_by_name(&file, gone).is_none());
    }
    assert_eq!(source_of(&stripped), RowSource::GoTable);

    // Its functions, against nm of the program before it was stripped
    // (nm names assembly functions' ABI0 symbols `NAME.abi0`).
    let functions = go_pclntab::functions(&file);
    let nm = run(Command::new("nm").arg(&program));
    let texts: std::collections::HashMap<u64, Vec<&str>> =
        nm.lines()
            .fold(std::collections::HashMap::new(), |mut texts, l| {
                // (Go's names may hold spaces: `type..eq.struct { ... }`.)
                let f: Vec<&str> = l.splitn(3, ' ').collect();
                if f.len() == 3 && (f[1] == "T" || f[1] == "t") {
                    let address = u64::from_str_radix(f[0], 16).unwrap();
                    texts.entry(address).or_default().push(f[2]);
                }
                texts
            });
    assert!(
        functions.len() * 10 >= texts.len() * 9,
        "{} of {}",
        functions.len(),
        texts.len()
    );
    for f in &functions {
        let names = texts.get(&f.start).map(Vec::as_slice).unwrap_or_default();
        assert!(
            names
                .iter()
                .any(|n| elided(n.trim_end_matches(".abi0")) == f.name),
            "{} at {:#x}: nm has {names:?}",
            f.name,
            f.start
        );
        assert!(f.end > f.start);
    }
    assert!(functions.windows(2).all(|w| w[0].end <= w[1].start));

    // Its rows, against those of the .debug_frame the linker wrote from
    // the same tables (read as readelf reads it, by the test above): the
    // CFA's offset from rsp at every row's first and last address.
    let unstripped = std::fs::read(&program).unwrap();
    let unstripped = object::File::parse(&*unstripped).unwrap();
    let debug = rows_from_object(&unstripped, Some(0)).unwrap().table;
    let rows = go_pclntab::rows(&file, 0).expect("rows from the function table");
    let mut compared = 0;
    for row in debug.rows() {
        for addr in [u64::from(row.ip_off), row.end_off() - 1] {
            let ours = rows
                .find(addr)
                .unwrap_or_else(|| panic!("no row at {addr:#x}"));
            assert_eq!(
                (ours.cfa_base(), ours.cfa_off, ours.ra_off),
                (CfaBase::Sp, row.cfa_off, row.ra_off),
                "at {addr:#x}"
            );
            compared += 1;
        }
    }
    assert!(compared > 1000, "{compared}");
    // And the stack tops are found by the function table's names (each
    // reaching to the next function, over the padding its symbol leaves).
    let (mut from_table, mut from_symbols) = (go_top_frames(&file), go_top_frames(&unstripped));
    from_table.sort_unstable();
    from_symbols.sort_unstable();
    assert_eq!(from_table.len(), from_symbols.len());
    for (t, s) in from_table.iter().zip(&from_symbols) {
        assert!(t.0 == s.0 && t.1 >= s.1, "{t:x?} against {s:x?}");
    }
}
