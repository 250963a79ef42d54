//! Builds the C test programs against `libichnos` (shared and static) and,
//! where it is installed, against libipt itself, runs them, and checks that
//! every expectation held: the same C source holds both libraries to the same
//! behaviour.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/libichnos.rs"]
mod libichnos;
use libichnos::lib_dir;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn compile(out: &Path, extra: &[&str]) {
    compile_source("iscache_test.c", out, extra);
}

/// How a C test program is linked with libichnos.
#[derive(Clone, Copy)]
enum Linkage {
    Shared,
    Static,
}

/// Compiles `source` against libichnos with `flags` before the library
/// arguments. A shared build runs with `LD_LIBRARY_PATH` = [`lib_dir`].
fn compile_with_libichnos(source: &str, out: &Path, linkage: Linkage, flags: &[&str]) {
    let lib = lib_dir();
    let include = repo_root().join("include");
    let archive = lib.join("libichnos.a");
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["-I", include.to_str().unwrap()]);
    match linkage {
        Linkage::Shared => args.extend(["-L", lib.to_str().unwrap(), "-lichnos"]),
        Linkage::Static => args.extend([archive.to_str().unwrap(), "-lpthread", "-ldl", "-lm"]),
    }
    compile_source(source, out, &args);
}

fn compile_source(name: &str, out: &Path, extra: &[&str]) {
    let source = repo_root().join("crates/ichnos-capi/tests/c").join(name);
    let status = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .arg(&source)
        .arg("-o")
        .arg(out)
        .args(extra)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed on {}", source.display());
}

/// Runs the program and returns its `N passed, N failed` line after checking
/// that it exited 0 with no failure.
fn run(program: &Path, ld_path: Option<&Path>) -> String {
    run_expecting(program, ld_path, 50)
}

fn run_expecting(program: &Path, ld_path: Option<&Path>, min_checks: u32) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(program);
    cmd.arg(scratch.path());
    if let Some(dir) = ld_path {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    let out = cmd.output().expect("run C test");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{stderr}",
        program.display()
    );
    assert!(
        stdout.trim_end().ends_with(" passed, 0 failed"),
        "unexpected output: {stdout}"
    );
    let passed: u32 = stdout.split_whitespace().next().unwrap().parse().unwrap();
    assert!(passed > min_checks, "only {passed} checks ran");
    stdout
}

#[test]
fn c_program_against_shared_libichnos() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("iscache_test");
    compile_with_libichnos("iscache_test.c", &exe, Linkage::Shared, &["-DICHNOS"]);
    run(&exe, Some(&lib_dir()));
}

#[test]
fn c_program_against_static_libichnos() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("iscache_test_static");
    compile_with_libichnos("iscache_test.c", &exe, Linkage::Static, &["-DICHNOS"]);
    run(&exe, None);
}

/// The same program against Debian's libipt: proves the expectations are
/// libipt's and not written to fit ichnos.
#[test]
fn c_program_against_libipt() {
    // The peer is needed, not optional: a run without it fails rather
    // than passing untested.
    assert!(
        Path::new("/usr/include/intel-pt.h").exists(),
        "libipt-dev is not installed (apt-get install libipt-dev; .ci/run installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("iscache_test_libipt");
    compile(&exe, &["-lipt"]);
    run(&exe, None);
}

/// The codectl program: layouts, registration, look-up, JIT tables, size
/// extension and every error number, against the shared library and the
/// static one. Built with SFrame so it can register its own text.
#[test]
fn codectl_from_c_shared_and_static() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("codectl_test");
    compile_with_libichnos(
        "codectl_test.c",
        &shared,
        Linkage::Shared,
        &["-Wa,--gsframe"],
    );
    run_expecting(&shared, Some(&lib_dir()), 50);
    let fixed = dir.path().join("codectl_test_static");
    compile_with_libichnos(
        "codectl_test.c",
        &fixed,
        Linkage::Static,
        &["-Wa,--gsframe"],
    );
    run_expecting(&fixed, None, 50);
}

/// Fill buffers from C, shared and static: many threads, reserve/commit,
/// errors, circular reads, and `-finstrument-functions` hooks recording
/// every call of an instrumented function.
#[test]
fn fill_buffers_from_c_shared_and_static() {
    let dir = tempfile::tempdir().unwrap();
    for (linkage, name, ld) in [
        (Linkage::Shared, "buf_test", Some(lib_dir())),
        (Linkage::Static, "buf_test_static", None),
    ] {
        let exe = dir.path().join(name);
        compile_with_libichnos(
            "buf_test.c",
            &exe,
            linkage,
            &["-O1", "-finstrument-functions", "-pthread"],
        );
        run_expecting(&exe, ld.as_deref(), 15);
    }
}

/// libichnos.so loaded with `dlopen`, as a plugin or a binding loads it:
/// two buffers written by three threads, every record flushed back. A
/// library with any initial-exec TLS would have to fit all its TLS in the
/// C library's small static reserve to be loaded so (an earlier libichnos
/// did not), so the library must not be marked `STATIC_TLS`.
#[test]
fn fill_buffers_from_a_dlopened_libichnos() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("buf_dlopen");
    let include = repo_root().join("include");
    compile_source(
        "buf_dlopen.c",
        &exe,
        &["-I", include.to_str().unwrap(), "-pthread", "-ldl"],
    );
    let lib = lib_dir().join("libichnos.so");
    let dynamic = Command::new("readelf")
        .arg("-dW")
        .arg(&lib)
        .output()
        .unwrap();
    assert!(dynamic.status.success());
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic.contains("(FLAGS)") || dynamic.contains("FLAGS_1"),
        "{dynamic}"
    );
    assert!(!dynamic.contains("STATIC_TLS"), "{dynamic}");
    let out = Command::new(&exe).arg(&lib).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 3 threads x 1000 records 1..=1000 in each buffer.
    for b in 0..2 {
        assert!(
            stdout.contains(&format!("buffer {b}: 3000 records, sum 1501500")),
            "{stdout}"
        );
    }
}

/// Records of a main thread that returns from `main` without flushing,
/// and of a thread still running then, are flushed once at exit.
#[test]
fn fill_buffers_flush_when_main_returns() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("buf_exit");
    compile_with_libichnos("buf_exit.c", &exe, Linkage::Shared, &["-pthread"]);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 2, "{stdout}");
    // The main thread's TLS destructors run in exit() (reason 2), or the
    // atexit hook flushes it (3); the other thread only by the hook (3).
    assert!(
        lines[0] == "flush main reason=2 records=10 first=0 last=9"
            || lines[0] == "flush main reason=3 records=10 first=0 last=9",
        "{stdout}"
    );
    assert_eq!(
        lines[1], "flush other reason=3 records=5 first=1000 last=1004",
        "{stdout}"
    );
}

#[test]
fn header_compiles_as_cxx() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("h.cc");
    std::fs::write(&src, "#include <ichnos/iscache.h>\n#include <ichnos/codectl.h>\n#include <ichnos/symbolize.h>\n#include <ichnos/buf.h>\nint main() { struct pt_asid a; pt_asid_init(&a); return (int)a.size - 24 + (int)sizeof(struct code_jit_unwind_fre) - 24; }\n").unwrap();
    let exe = dir.path().join("h");
    let include = repo_root().join("include");
    let status = Command::new("g++")
        .args(["-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run g++");
    assert!(status.success());
    assert!(Command::new(&exe).status().unwrap().success());
}

/// A C process registers its loaded objects and a JIT table through
/// codectl; this process finds its exported registry, reads every
/// registration with `process_vm_readv` and looks up the JIT row remotely.
#[test]
fn another_process_reads_the_registry() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let lib = lib_dir();
    let exe = dir.path().join("remote_child");
    compile_with_libichnos("remote_child.c", &exe, Linkage::Shared, &["-Wa,--gsframe"]);
    let mut child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let fields: Vec<i64> = line
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert!(fields[0] >= 3, "child registered {} text ranges", fields[0]);
    assert_eq!(fields[1], 0, "codectl JIT registration in the child");

    let pid = child.id();
    let result = ichnos_code::Registry::from_process(pid);
    child.stdin.as_mut().unwrap().write_all(b"done\n").unwrap();
    assert!(child.wait().unwrap().success());

    let (registry, failed) = result.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let registrations = registry.registrations();
    // The JIT code's name (a version-1 code_jit_info) came across.
    assert!(
        registrations.iter().any(|r| matches!(r,
            ichnos_code::Registration::Jit { name: Some(n), .. } if n == "js:render@app.js")),
        "{registrations:?}"
    );
    let elf_paths: Vec<String> = registrations
        .iter()
        .filter_map(|r| match r {
            ichnos_code::Registration::Elf(e) => e.path.as_ref().map(|p| p.display().to_string()),
            ichnos_code::Registration::Jit { .. } => None,
        })
        .collect();
    assert!(
        elf_paths.iter().any(|p| p.ends_with("remote_child")),
        "{elf_paths:?}"
    );
    assert!(
        elf_paths.iter().any(|p| p.contains("libichnos.so")),
        "{elf_paths:?}"
    );
    assert!(
        elf_paths.iter().any(|p| p.contains("libc.so")),
        "{elf_paths:?}"
    );
    // The child's own text has SFrame rows; build ids came across.
    let own = registrations
        .iter()
        .find_map(|r| match r {
            ichnos_code::Registration::Elf(e)
                if e.path.as_ref().is_some_and(|p| p.ends_with("remote_child")) =>
            {
                Some(e)
            }
            _ => None,
        })
        .unwrap();
    assert!(own.sframe.is_some());
    assert!(own.build_id.as_ref().is_some_and(|b| !b.is_empty()));
    let object = registry.lookup(own.text.start + 1).unwrap();
    assert_eq!(object.source, ichnos_code::RowSource::Sframe);
    // The JIT row, read from the child's table.
    let jit = registry.lookup(0x6000_0090).unwrap();
    let row = jit.find_row(0x6000_0090).unwrap();
    assert_eq!(
        (row.ip_off, row.size, row.cfa_off, row.fp_off),
        (0x80, 0x40, 32, -16)
    );
}

/// The symbolization ABI from C prints, for every instruction of a C
/// function with inlined calls, what `addr2line -f -i -C` prints, and
/// returns the documented error numbers.
#[test]
fn symbolize_from_c_agrees_with_addr2line() {
    let (dir, exe, fixture) = c_program_and_inlines("symbolize_test");
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"no elf here").unwrap();
    let disasm = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "--disassemble=work"])
        .arg(&fixture)
        .output()
        .unwrap();
    let addrs: Vec<String> = String::from_utf8_lossy(&disasm.stdout)
        .lines()
        .filter(|l| l.starts_with("    ") && l.contains(':'))
        .filter_map(|l| l.trim().split(':').next().map(|a| format!("0x{a}")))
        .collect();
    assert!(addrs.len() > 10);
    let mut args = vec![fixture.display().to_string(), junk.display().to_string()];
    args.extend(addrs.iter().cloned());
    let ours = run_shared(&exe, &args);
    let theirs = binutils_addr2line(&["-f", "-i", "-C"], &fixture, &addrs);
    assert_eq!(ours, theirs);
}

/// `ichnos_symbolize_address` from C: for every instruction of every
/// sized function of a fixture, the function's start is the address `nm`
/// gives its symbol; the bytes between `main`'s end and the next symbol
/// (alignment, which objdump disassembles as no-ops) are padding; an
/// address in the ELF header, below every section readelf lists, is
/// outside the sections.
#[test]
fn symbolize_address_from_c_gives_nm_function_starts_and_why_unnamed() {
    let (_dir, exe, fixture) = c_program_and_inlines("symbolize_address");
    let symbols = nm_symbols(&fixture);
    let sized: Vec<&(u64, u64, String)> = symbols.iter().filter(|(_, size, _)| *size > 0).collect();
    let mut want = BTreeMap::new();
    for a in function_instructions(&fixture, "") {
        let addr = u64::from_str_radix(&a[2..], 16).unwrap();
        if let Some((start, _, name)) = sized.iter().find(|(s, n, _)| (*s..s + n).contains(&addr)) {
            want.insert(addr, format!("{name} {start:x} 0"));
        }
    }
    assert!(want.len() > 20, "{want:?}");
    for addr in padding_after(&fixture, &symbols, "main") {
        want.insert(addr, "- 0 2".to_owned());
    }
    // The ELF header: below every section.
    let lowest = lowest_section_address(&fixture);
    assert!(lowest > 0x10, "{lowest:#x}");
    want.insert(0x10, "- 0 1".to_owned());

    let mut args = vec![fixture.display().to_string()];
    args.extend(want.keys().map(|a| format!("{a:#x}")));
    let got: BTreeMap<u64, String> = run_shared(&exe, &args)
        .lines()
        .map(|l| {
            let (addr, rest) = l.split_once(' ').unwrap();
            (
                u64::from_str_radix(&addr[2..], 16).unwrap(),
                rest.to_owned(),
            )
        })
        .collect();
    assert_eq!(got, want);
}

/// The instruction addresses from the end of the sized symbol `name`
/// (among `symbols`: start, size, name) to the next symbol of `file`,
/// checked to be what objdump disassembles as no-ops: alignment padding.
fn padding_after(file: &Path, symbols: &[(u64, u64, String)], name: &str) -> Vec<u64> {
    let (start, size, _) = symbols.iter().find(|s| s.2 == name).unwrap();
    let end = start + size;
    let next = symbols
        .iter()
        .map(|s| s.0)
        .filter(|&s| s >= end)
        .min()
        .unwrap();
    assert!(next > end, "{name} is followed at once by a symbol");
    let disasm = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--start-address={end:#x}"))
        .arg(format!("--stop-address={next:#x}"))
        .arg(file)
        .output()
        .unwrap();
    let padding: Vec<(u64, String)> = String::from_utf8_lossy(&disasm.stdout)
        .lines()
        .filter(|l| l.starts_with("    ") && l.contains(':'))
        .filter_map(|l| {
            let (addr, insn) = l.trim().split_once(':')?;
            Some((u64::from_str_radix(addr, 16).ok()?, insn.trim().to_owned()))
        })
        .collect();
    assert!(!padding.is_empty());
    for (addr, insn) in &padding {
        assert!(
            ["nop", "xchg", "int3", "data16"]
                .iter()
                .any(|n| insn.contains(n)),
            "{addr:#x}: {insn}"
        );
    }
    padding.into_iter().map(|(a, _)| a).collect()
}

/// The lowest address of a section of `file` with one, as readelf lists
/// them.
fn lowest_section_address(file: &Path) -> u64 {
    let readelf = Command::new("readelf")
        .args(["-SW"])
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&readelf.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(']').nth(1)?.split_whitespace().collect();
            let addr = u64::from_str_radix(f.get(2)?, 16).ok()?;
            (addr > 0).then_some(addr)
        })
        .min()
        .unwrap()
}

/// The C program `name` (`tests/c/NAME.c`) linked with `libichnos.so`, and
/// the `inlines` fixture of ichnos-symbol, built in a new directory.
fn c_program_and_inlines(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(name);
    compile_with_libichnos(&format!("{name}.c"), &exe, Linkage::Shared, &[]);
    let fixture = dir.path().join("inlines");
    compile_fixture(
        &repo_root().join("crates/ichnos-symbol/tests/fixtures/inlines.c"),
        &fixture,
    );
    (dir, exe, fixture)
}

/// `nm -S --defined-only` of `file`: (address, size, name) of every
/// symbol, size 0 where nm gives none.
fn nm_symbols(file: &Path) -> Vec<(u64, u64, String)> {
    let nm = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let start = u64::from_str_radix(f.first()?, 16).ok()?;
            match f.len() {
                4 => Some((start, u64::from_str_radix(f[1], 16).ok()?, f[3].to_owned())),
                3 => Some((start, 0, f[2].to_owned())),
                _ => None,
            }
        })
        .collect()
}

/// Instruction addresses (hex, `0x` prefixed) of the functions of `file`
/// whose symbol names start with `prefix`, within each symbol's size (so
/// not the padding after it, which binutils and ichnos name differently on
/// purpose; see docs/cli.md).
fn function_instructions(file: &Path, prefix: &str) -> Vec<String> {
    let ranges: Vec<(u64, u64)> = nm_symbols(file)
        .into_iter()
        .filter(|(_, size, name)| *size > 0 && name.starts_with(prefix))
        .map(|(start, size, _)| (start, start + size))
        .collect();
    let disasm = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&disasm.stdout)
        .lines()
        .filter(|l| l.starts_with("    ") && l.contains(':'))
        .filter_map(|l| u64::from_str_radix(l.trim().split(':').next()?, 16).ok())
        .filter(|a| ranges.iter().any(|&(s, e)| (s..e).contains(a)))
        .map(|a| format!("{a:#x}"))
        .collect()
}

/// Builds a C or C++ fixture with `-O2 -g`.
fn compile_fixture(source: &Path, out: &Path) {
    compile_fixture_with(source, out, &["-O2", "-g"]);
}

/// [`compile_fixture`] with other compiler flags.
fn compile_fixture_with(source: &Path, out: &Path, flags: &[&str]) {
    let compiler = if source.extension().is_some_and(|e| e == "cpp") {
        "g++"
    } else {
        "gcc"
    };
    assert!(Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()
        .unwrap()
        .success());
}

fn binutils_addr2line(flags: &[&str], file: &Path, addrs: &[String]) -> String {
    let out = Command::new("addr2line")
        .args(flags)
        .arg("-e")
        .arg(file)
        .args(addrs)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(" (discriminator").next().unwrap().to_string() + "\n")
        .collect()
}

/// Runs `symbolize_options` in `mode` with `paths` (an index directory and
/// the file, or the file) and `addrs`.
fn run_options(exe: &Path, mode: &str, paths: &[&Path], addrs: &[String]) -> String {
    let mut args: Vec<&std::ffi::OsStr> = vec![mode.as_ref()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    args.extend(addrs.iter().map(std::ffi::OsStr::new));
    run_shared(exe, &args)
}

/// Runs the C program `exe`, linked with `libichnos.so`, with `args`;
/// its standard output, once it has exited 0.
fn run_shared<S: AsRef<std::ffi::OsStr>>(exe: &Path, args: &[S]) -> String {
    let out = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {:?}: {}",
        exe.display(),
        args.first().map(AsRef::as_ref),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ichnos_symbolizer_create`'s options, from C: demangled names as
/// binutils `-C` gives them, raw names as binutils gives them without
/// `-C`, one frame per address as the outermost function of binutils'
/// inline chain at its innermost line; and every error number.
#[test]
fn symbolizer_options_from_c_agree_with_addr2line() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("symbolize_options");
    compile_with_libichnos("symbolize_options.c", &exe, Linkage::Shared, &[]);
    // A file without DWARF, which is not indexed.
    let no_dwarf = dir.path().join("no-dwarf");
    compile_fixture_with(
        &repo_root().join("crates/ichnos-symbol/tests/fixtures/inlines.c"),
        &no_dwarf,
        &["-O2", "-Wl,--build-id"],
    );
    run_shared(
        &exe,
        &[std::ffi::OsStr::new("errors"), no_dwarf.as_os_str()],
    );

    // Names: a C++ program, mangled names everywhere.
    let cxx = dir.path().join("geometry");
    compile_fixture(
        &repo_root().join("crates/ichnos-capi/tests/c/geometry.cpp"),
        &cxx,
    );
    let addrs = function_instructions(&cxx, "_ZN8geometry");
    assert!(addrs.len() > 6, "{addrs:?}");
    let demangled = run_options(&exe, "default", &[&cxx], &addrs);
    assert_eq!(
        demangled,
        binutils_addr2line(&["-f", "-i", "-C"], &cxx, &addrs)
    );
    assert!(
        demangled.contains("geometry::twice<double>(double)"),
        "{demangled}"
    );
    let raw = run_options(&exe, "raw", &[&cxx], &addrs);
    assert_eq!(raw, binutils_addr2line(&["-f", "-i"], &cxx, &addrs));
    assert!(raw.contains("_ZN8geometry5twiceIdEET_S1_"), "{raw}");
    // Through a symbol index made from C: the same lines.
    let index_dir = dir.path().join("index");
    let indexed = run_options(&exe, "index", &[&index_dir, &cxx], &addrs);
    assert_eq!(indexed, demangled);
    let kept = std::fs::read_dir(&index_dir).unwrap().count();
    assert_eq!(kept, 1, "one index file");

    // Inlines: a C program with inlined calls; each address's frames, as
    // binutils prints them (function and place pairs, inlined first), fold
    // into the outermost function at the innermost place.
    let c = dir.path().join("inlines");
    compile_fixture(
        &repo_root().join("crates/ichnos-symbol/tests/fixtures/inlines.c"),
        &c,
    );
    let addrs = function_instructions(&c, "work");
    let mut expected = String::new();
    let mut folded_some = false;
    for addr in &addrs {
        let chain = binutils_addr2line(&["-f", "-i", "-C"], &c, std::slice::from_ref(addr));
        let lines: Vec<&str> = chain.lines().collect();
        folded_some |= lines.len() > 2;
        for line in [lines[lines.len() - 2], lines[1]] {
            expected.push_str(line);
            expected.push('\n');
        }
    }
    assert!(folded_some, "the fixture has no inlined frames to fold");
    assert_eq!(run_options(&exe, "noinline", &[&c], &addrs), expected);
}
