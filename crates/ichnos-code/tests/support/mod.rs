//! Fixtures shared by the integration tests: C programs built with SFrame,
//! captured at known stops by gdb.

#![allow(dead_code)]

pub mod sframe_writer;

use std::path::{Path, PathBuf};
use std::process::Command;

use ichnos_code::elf::RowChoice;
use ichnos_code::CodeMap;

/// The C compiler flags of every fixture: no frame pointers, SFrame.
pub const CFLAGS: &[&str] = &["-O2", "-g", "-fomit-frame-pointer", "-Wa,--gsframe"];

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds `libfix.so` and `prog` (linked against it) in `dir`.
pub fn build_prog(dir: &Path) -> PathBuf {
    build_prog_with(dir, &[])
}

/// `build_prog` with `extra` flags for gcc (`-B DIR/` for another
/// binutils).
pub fn build_prog_with(dir: &Path, extra: &[&str]) -> PathBuf {
    let src = fixtures_dir();
    run(Command::new("gcc")
        .args(extra)
        .args(CFLAGS)
        .args(["-fPIC", "-shared", "-o"])
        .arg(dir.join("libfix.so"))
        .arg(src.join("libfix.c")));
    run(Command::new("gcc")
        .args(extra)
        .args(CFLAGS)
        .arg("-o")
        .arg(dir.join("prog"))
        .arg(src.join("prog.c"))
        .arg(format!("-L{}", dir.display()))
        .arg("-lfix")
        // Lazy binding, whatever the toolchain's default: the first call
        // through each PLT entry goes through the dynamic loader's
        // resolver, where the unwinder is tested too.
        .arg("-Wl,-z,lazy")
        .arg(format!("-Wl,-rpath,{}", dir.display())));
    dir.join("prog")
}

/// The `bin` directory of a newer binutils than the machine's, from
/// Debian's `suite` (`trixie`: 2.44, SFrame v2; `sid`: 2.47.50, v3), as
/// `tools/binutils/prepare.sh` prepares it (downloaded once, then
/// cached). A machine that cannot reach Debian's registry fails the
/// test: the peer is missing.
pub fn newer_binutils(suite: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/binutils/prepare.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(suite)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {suite} could not prepare binutils: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8(out.stdout).unwrap();
    Path::new(dir.trim()).join("bin")
}

/// The SFrame version of the `.sframe` section of the ELF file at `path`.
pub fn sframe_version(path: &Path) -> u8 {
    use object::{Object, ObjectSection};
    let bytes = std::fs::read(path).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let section = file.section_by_name(".sframe").expect("a .sframe section");
    ichnos_code::sframe::SframeSection::parse(section.data().unwrap(), section.address())
        .unwrap()
        .version()
}

/// One stop captured by gdb.
#[derive(Debug)]
pub struct Stop {
    pub label: String,
    pub rip: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub stack: Vec<u8>,
    pub maps: String,
    /// gdb's backtrace: pc and function name, innermost first, without
    /// the tail-call frames gdb synthesises from DWARF call-site data.
    pub frames: Vec<(u64, String)>,
    /// How many tail-call frames gdb showed besides.
    pub tailcall_frames: usize,
}

/// Builds `signal` (tests/fixtures/signal.c) in `dir`.
pub fn build_signal_prog(dir: &Path) -> PathBuf {
    run(Command::new("gcc")
        .args(CFLAGS)
        .arg("-o")
        .arg(dir.join("signal"))
        .arg(fixtures_dir().join("signal.c")));
    dir.join("signal")
}

/// Runs `program` under gdb with `breaks` set after `main` is reached and
/// returns every stop.
pub fn capture(program: &Path, breaks: &[&str]) -> Vec<Stop> {
    capture_passing(program, breaks, &[])
}

/// As [`capture`], with the signals in `pass` handed to the program
/// without stopping (it handles them itself).
pub fn capture_passing(program: &Path, breaks: &[&str], pass: &[&str]) -> Vec<Stop> {
    let out_path = program.with_extension("capture.jsonl");
    let out = Command::new("gdb")
        .args(["--batch", "-nx", "-x"])
        .arg(fixtures_dir().join("gdb_capture.py"))
        .arg(program)
        .env("CAPTURE_OUT", &out_path)
        // (Binding at start-up would take the lazy-binding stops away.)
        .env_remove("LD_BIND_NOW")
        .env("CAPTURE_BREAKS", breaks.join(";"))
        .env("CAPTURE_PASS", pass.join(";"))
        .output()
        .expect("gdb runs (install gdb)");
    let text = std::fs::read_to_string(&out_path).unwrap_or_else(|e| {
        panic!(
            "gdb wrote no capture ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let hex = v["stack"].as_str().unwrap();
            let stack = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            Stop {
                label: v["label"].as_str().unwrap().to_string(),
                rip: v["rip"].as_u64().unwrap(),
                rsp: v["rsp"].as_u64().unwrap(),
                rbp: v["rbp"].as_u64().unwrap(),
                rbx: v["rbx"].as_u64().unwrap(),
                stack,
                maps: v["maps"].as_str().unwrap().to_string(),
                tailcall_frames: v["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|f| f["tailcall"].as_bool() == Some(true))
                    .count(),
                frames: v["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|f| f["tailcall"].as_bool() != Some(true))
                    .map(|f| {
                        (
                            f["pc"].as_u64().unwrap(),
                            f["name"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Which rows a code map built from a stop's mappings uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    /// `.sframe` only; files without it get no code object.
    SframeOnly,
    /// Converted `.eh_frame` only.
    EhFrameOnly,
    /// `.sframe` where the file has it, else `.eh_frame`.
    Preferred,
}

/// Builds the code map of a process from its `/proc/PID/maps` text: one
/// code object per executable file mapping (the library's own builder).
pub fn code_map(maps: &str, rules: Rules) -> CodeMap {
    let entries = ichnos_image::parse_maps(0, maps).unwrap();
    let choice = match rules {
        Rules::SframeOnly => RowChoice::Sframe,
        Rules::EhFrameOnly => RowChoice::EhFrame,
        Rules::Preferred => RowChoice::SframeThenEhFrame,
    };
    ichnos_code::process::code_map_from_maps(&entries, choice).map
}

/// The rows `objdump --sframe` (the binutils of `objdump`) prints for
/// the file at `path`: (function start, FRE start, whether the start is
/// a mask, CFA text, FP text), e.g. (0x1170, 0x117a, false, "sp+20016",
/// "u").
pub fn objdump_sframe_rows(objdump: &str, path: &Path) -> Vec<(u64, u64, bool, String, String)> {
    let out = Command::new(objdump)
        .arg("--sframe")
        .arg(path)
        .output()
        .expect("objdump runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut rows = Vec::new();
    let mut func = 0u64;
    let mut mask = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("func idx [") {
            let pc = rest
                .split("pc = 0x")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap();
            func = u64::from_str_radix(pc, 16).unwrap();
        } else if line.starts_with("STARTPC") {
            mask = line.starts_with("STARTPC[m]");
        } else if line.len() > 16 && line.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let start = u64::from_str_radix(cols[0], 16).unwrap();
            rows.push((func, start, mask, cols[1].to_string(), cols[2].to_string()));
        }
    }
    rows
}

/// Assembles `source` (x86-64 assembly with CFI directives) into a shared
/// object `NAME.so` in `dir` (`gcc -nostdlib -shared`); the object, and
/// the address of each of its symbols by `nm`.
pub fn assemble(dir: &Path, name: &str, source: &str) -> (PathBuf, Vec<(String, u64)>) {
    let asm = dir.join(format!("{name}.s"));
    let object = dir.join(format!("{name}.so"));
    std::fs::write(&asm, source).unwrap();
    run(Command::new("gcc")
        .args(["-nostdlib", "-shared", "-o"])
        .arg(&object)
        .arg(&asm));
    let nm = Command::new("nm")
        .arg("--defined-only")
        .arg(&object)
        .output()
        .expect("nm (binutils)");
    let symbols = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let address = u64::from_str_radix(words.next()?, 16).ok()?;
            let name = words.nth(1)?;
            Some((name.to_owned(), address))
        })
        .collect();
    (object, symbols)
}

/// The address of `name` among `symbols`.
pub fn symbol(symbols: &[(String, u64)], name: &str) -> u64 {
    symbols
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name} in {symbols:?}"))
        .1
}

/// A map holding one code object, `[start, end)` at bias 0, with
/// `table`'s rows from `source`.
pub fn one_object(
    start: u64,
    end: u64,
    table: ichnos_code::row::RowTable,
    source: ichnos_code::RowSource,
) -> CodeMap {
    let mut map = CodeMap::new();
    map.insert(std::sync::Arc::new(ichnos_code::CodeObject {
        start,
        end,
        bias: 0,
        rows: ichnos_code::Rows::Fixed(std::sync::Arc::new(table)),
        source,
        name: "test".into(),
    }))
    .unwrap();
    map
}
