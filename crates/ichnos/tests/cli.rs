//! The `ichnos` binary end to end: output against readelf and the file's
//! bytes, and the exit codes of docs/cli.md.

use std::process::{Command, Output};

mod common;

fn ichnos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ichnos"))
        .args(args)
        .output()
        .expect("run ichnos")
}

/// `ichnos symbolize -e EXE` with its standard input and output piped.
fn symbolize_reading_stdin(exe: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ichnos"))
        .args(["symbolize", "-e", exe])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The first `PT_LOAD` with file bytes, per readelf: (offset, vaddr).
fn first_load(path: &str) -> (u64, u64) {
    let out = Command::new("readelf")
        .args(["-lW", path])
        .output()
        .unwrap();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"LOAD") && hex(f[4]) > 0)
        .map(|f| (hex(f[1]), hex(f[2])))
        .unwrap()
}

#[test]
fn image_elf_lists_segments_and_reads_the_file() {
    let exe = env!("CARGO_BIN_EXE_ichnos");
    let (offset, vaddr) = first_load(exe);
    let addr = 0x10_0000 + vaddr + 0x40;
    let out = ichnos(&[
        "image",
        "--elf",
        &format!("{exe}:0x100000"),
        "--read",
        // Hex without 0x, as addr2line reads addresses: 20 bytes.
        &format!("{addr:x}:14"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("START"));
    let first = lines.next().unwrap();
    assert!(
        first.starts_with(&format!("{:#018x} ", 0x10_0000 + vaddr)),
        "{first}"
    );
    assert!(first.ends_with(exe));
    // The dump: two lines, 16 and 4 bytes, equal to the file's.
    let file = std::fs::read(exe).unwrap();
    let start = (offset + 0x40) as usize;
    let want: Vec<String> = file[start..start + 20]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dump: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("  ") && !l.contains('/') && !l.starts_with("START"))
        .collect();
    assert_eq!(dump.len(), 2, "{text}");
    assert_eq!(dump[0], format!("{addr:#018x}  {}", want[..16].join(" ")));
    assert_eq!(
        dump[1],
        format!("{:#018x}  {}", addr + 16, want[16..].join(" "))
    );
}

#[test]
fn image_of_self_lists_its_own_executable() {
    let out = ichnos(&["image", "-p", "self"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_ichnos")).unwrap();
    assert!(
        text.lines().any(|l| l.ends_with(exe.to_str().unwrap())),
        "{text}"
    );
    assert!(
        text.contains("[process memory]"),
        "the vDSO should be listed: {text}"
    );
}

#[test]
fn user_errors_exit_1_and_name_the_file() {
    let out = ichnos(&["image", "--elf", "/nonexistent/prog"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("/nonexistent/prog"),
        "{err}"
    );

    // Each thing is said once: the file's name, and the operating
    // system's reason (once wrapped as "(os error 2): ... (os error 2)",
    // and the path twice).
    for (args, said) in [
        (
            &["image", "--elf", "/nonexistent/prog"][..],
            "error: cannot load /nonexistent/prog: cannot open: No such file or directory (os error 2)\n",
        ),
        (
            &["symbolize", "-e", "/nonexistent/prog", "0x1"][..],
            "error: cannot symbolize /nonexistent/prog: No such file or directory (os error 2)\n",
        ),
        (
            &["report", "-i", "/nonexistent/prog"][..],
            "error: cannot open /nonexistent/prog: No such file or directory (os error 2)\n",
        ),
    ] {
        let out = ichnos(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), said, "{args:?}");
    }

    let out = ichnos(&["image", "--elf", "/etc/hostname"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loadable ELF file"));

    let exe = env!("CARGO_BIN_EXE_ichnos");
    let out = ichnos(&["image", "--elf", exe, "--read", "0xffffffff00000000"]);
    assert_eq!(out.status.code(), Some(1));
    // The image has one address space: not named (it read "in address
    // space any", the library's wildcard).
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .ends_with("no section covers address 0xffffffff00000000\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(ichnos(&["image", "--no-such-flag"]).status.code(), Some(2));
    // No stack is zero frames deep: refused as record refuses it.
    let out = ichnos(&["stack", "-p", "1", "--max-frames", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a number of frames from 1 to 16384"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ichnos(&["image", "--elf", "x", "-p", "1"]).status.code(),
        Some(2)
    );
    assert_eq!(ichnos(&["image"]).status.code(), Some(2));
    // Options that do not go together, or values out of range, that
    // clap does not check: usage errors too.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("t.data");
    let data = data.to_str().unwrap();
    let out = ichnos(&["record", "-o", data, "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (args, said) in [
        (
            &["report", "--min-percent", "5", "-i", data][..],
            "use it with --tree",
        ),
        (
            &["report", "--limit", "5", "--tree", "-i", data],
            "use it with --format top",
        ),
        (
            &["report", "--icicle", "-i", data],
            "use them with --format svg",
        ),
        (
            &["record", "-F", "0", "--", "true"],
            "-F must be at least 1 Hz",
        ),
        (&["record", "-p", "abc"], "\"abc\" is not a process id"),
        (
            &["trace", "-b", "0", "--", "true"],
            "-b 0: a thread's buffer must hold events",
        ),
        (&["trace", "--ring", "0", "--", "true"], "--ring 0:"),
    ] {
        let out = ichnos(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

/// Compiles a C fixture (a path relative to this crate) with `flags` into
/// `dir`, returning the executable.
fn build_fixture(dir: &std::path::Path, source: &str, flags: &[&str]) -> std::path::PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let exe = dir.join(src.file_stem().unwrap());
    let status = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success(), "gcc failed on {}", src.display());
    exe
}

/// The instruction addresses objdump lists in `exe` (`0x` hex), with
/// objdump's extra `flags` (e.g. `--disassemble=FUNCTION`).
fn instruction_addresses(exe: &std::path::Path, flags: &[&str]) -> Vec<String> {
    let disasm = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .args(flags)
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8_lossy(&disasm.stdout)
        .lines()
        .filter(|l| l.starts_with("  ") && l.contains(':'))
        .filter_map(|l| l.trim().split(':').next().map(|a| format!("0x{a}")))
        .collect()
}

/// A process waiting under frames of its own; killed when dropped.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `exe` and waits for the first line it prints (its "ready", or
/// what it reports); it is killed when the handle is dropped.
fn spawn_until_line(exe: &std::path::Path) -> (Sleeper, String) {
    spawn_until_line_as(exe, None)
}

/// [`spawn_until_line`], as the user `user` (given only when root).
fn spawn_until_line_as(exe: &std::path::Path, user: Option<u32>) -> (Sleeper, String) {
    use std::io::BufRead;
    let child = as_user(&mut Command::new(exe), user)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Sleeper(child);
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// Where process `pid` maps the first page of the file `exe`: its load
/// address (a PIE's run-time addresses minus this are file addresses).
fn load_base(pid: u32, exe: &str) -> u64 {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .find(|l| l.ends_with(exe) && l.split_whitespace().nth(2) == Some("00000000"))
        .and_then(|l| l.split('-').next())
        .map(|a| u64::from_str_radix(a, 16).unwrap())
        .expect("the executable's first mapping")
}

fn start_sleeper(dir: &std::path::Path) -> Sleeper {
    let exe = build_fixture(
        dir,
        "tests/fixtures/sleeper.c",
        &["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"],
    );
    let (child, line) = spawn_until_line(&exe);
    assert_eq!(line.trim(), "ready");
    // Let it reach pause().
    std::thread::sleep(std::time::Duration::from_millis(100));
    child
}

fn frame_addresses(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .collect()
}

/// Each frame of `ichnos stack`'s text: its address, and its function
/// (the field before the bracketed "how").
fn our_frame_names(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let addr = l.split_whitespace().nth(1)?.trim_start_matches("0x");
            let name = l.rsplit_once("  [")?.0.rsplit("  ").next()?;
            Some((u64::from_str_radix(addr, 16).ok()?, name.to_owned()))
        })
        .collect()
}

/// Each frame of gdb's `bt` that shows its address (`#1  0x... in NAME
/// (...)`; frame 0 and inlined frames may show none): its address and
/// function.
fn gdb_frame_names(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter_map(|l| {
            // (One space after "#10", two after "#1".)
            let rest = l.split_once(char::is_whitespace)?.1.trim_start();
            let (addr, rest) = rest.split_once(" in ")?;
            let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok()?;
            Some((addr, rest.split(" (").next()?.to_owned()))
        })
        .collect()
}

/// Whether two debuggers' names of one frame are the same function:
/// equal, or but for glibc's internal `__GI_` alias.
fn same_function(a: &str, b: &str) -> bool {
    a.trim_start_matches("__GI_") == b.trim_start_matches("__GI_")
}

#[test]
fn stack_of_a_live_process_agrees_with_gdb() {
    let dir = tempfile::tempdir().unwrap();
    let sleeper = start_sleeper(dir.path());
    let pid = sleeper.0.id().to_string();
    let out = ichnos(&["stack", "-p", &pid]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = stdout(&out);
    assert!(ours.contains("stopped: outermost frame"), "{ours}");
    assert!(ours.contains("[via sframe]"), "{ours}");
    let gdb = Command::new("gdb")
        .args(["--batch", "-nx", "-p", &pid])
        .args([
            "-ex",
            "set backtrace past-main on",
            "-ex",
            "set backtrace past-entry on",
            "-ex",
            "bt",
        ])
        .output()
        .expect("gdb runs");
    let gdb_text = String::from_utf8_lossy(&gdb.stdout);
    // gdb prints frame 0 without its address when it has line information.
    let mut want = frame_addresses(&gdb_text);
    let got = frame_addresses(&ours);
    if want.len() + 1 == got.len() {
        want.insert(0, got[0]);
    }
    assert_eq!(got, want, "ichnos:\n{ours}\ngdb:\n{gdb_text}");
    assert!(got.len() >= 8, "{ours}");
    // And each frame's function is the one gdb names at that address
    // (the program's own frames, and libc's where gdb names them).
    let gdb_names = gdb_frame_names(&gdb_text);
    let our_names = our_frame_names(&ours);
    let mut compared = 0;
    for (addr, name) in &our_names {
        if let Some((_, theirs)) = gdb_names.iter().find(|(a, _)| a == addr) {
            if theirs != "??" {
                assert!(
                    same_function(name, theirs),
                    "{addr:#x}: {name} against gdb's {theirs}\nichnos:\n{ours}\ngdb:\n{gdb_text}"
                );
                compared += 1;
            }
        }
    }
    assert!(
        compared >= 6,
        "{compared} frames compared\n{ours}\n{gdb_text}"
    );
    for own in ["c", "b", "a", "main", "_start"] {
        assert!(our_names.iter().any(|(_, n)| n == own), "{own}: {ours}");
    }
    // Named from the DWARF (no index), the same names; with none, the
    // same frames without them.
    let out = ichnos(&["stack", "-p", &pid, "--no-index"]);
    assert!(out.status.success());
    let no_index = stdout(&out);
    assert_eq!(our_frame_names(&no_index), our_names, "{no_index}");
    let out = ichnos(&["stack", "-p", &pid, "--no-names"]);
    assert!(out.status.success());
    let bare = stdout(&out);
    assert_eq!(frame_addresses(&bare), got, "{bare}");
    for line in bare.lines().filter(|l| l.trim_start().starts_with('#')) {
        // Number, address, place, how: no name between them.
        let (front, how) = line.rsplit_once("  [").unwrap();
        assert_eq!(
            front.split("  ").filter(|f| !f.trim().is_empty()).count(),
            3,
            "{line}"
        );
        assert!(how.ends_with(']'), "{line}");
    }
    // The process carries on after both looked.
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
}

/// `--debug-dir` finds a stripped program's debug file by build id, and
/// `--index-dir` says where the symbol indexes it reads are kept.
#[test]
fn stack_finds_debug_files_and_symbol_indexes_where_told() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "tests/fixtures/sleeper.c",
        &["-O2", "-g", "-fomit-frame-pointer", "-Wa,--gsframe"],
    );
    // The debug file kept by build id, as distributions keep them; the
    // program stripped of every symbol (its unwind tables stay).
    let id = common::build_id(&exe);
    let debug = dir.path().join("debug");
    let by_id = debug.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&by_id).unwrap();
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        let status = Command::new(program).args(args).status().unwrap();
        assert!(status.success(), "{program} {args:?}");
    };
    let debug_file = by_id.join(format!("{}.debug", &id[2..]));
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            exe.as_os_str(),
            debug_file.as_os_str(),
        ],
    );
    run("strip", &["--strip-all".as_ref(), exe.as_os_str()]);
    let (sleeper, line) = spawn_until_line(&exe);
    assert_eq!(line.trim(), "ready");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let pid = sleeper.0.id().to_string();
    let index_dir = dir.path().join("index");
    let index = index_dir.to_str().unwrap();
    let stack = |extra: &[&str]| {
        let mut args = vec!["stack", "-p", &pid, "--index-dir", index];
        args.extend_from_slice(extra);
        let out = ichnos(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let names: Vec<String> = our_frame_names(&stdout(&out))
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        names
    };
    // Without the debug file the program's own frames have no names.
    let bare = stack(&[]);
    for own in ["c", "b", "a", "main"] {
        assert!(!bare.iter().any(|n| n == own), "{own}: {bare:?}");
    }
    // With it, they do, in the order gdb shows them.
    let named = stack(&["--debug-dir", debug.to_str().unwrap()]);
    let own: Vec<&str> = named
        .iter()
        .map(String::as_str)
        .filter(|n| ["c", "b", "a", "main"].contains(n))
        .collect();
    assert_eq!(own, ["c", "b", "a", "main"], "{named:?}");
    // glibc's index, made in the directory given (as a report makes it):
    // stack names glibc's frames through it, and -v says so; with an
    // empty directory, or --no-index, it reads glibc's DWARF.
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let out = ichnos(&[
        "symbolize",
        "--index",
        "--index-dir",
        index,
        "-e",
        libc,
        "0x0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let notes = |args: &[&str]| {
        let mut all = vec!["-v", "stack", "-p", &pid];
        all.extend_from_slice(args);
        let out = ichnos(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let told = notes(&["--index-dir", index]);
    assert!(
        told.lines().any(
            |l| l.contains("/libc.so.6 is named through the symbol index ")
                && l.contains(&format!("{index}/{}", common::build_id(libc.as_ref())))
        ),
        "{told}"
    );
    let empty = dir.path().join("empty");
    for args in [
        &["--index-dir", empty.to_str().unwrap()][..],
        &["--no-index"],
    ] {
        let told = notes(args);
        assert!(!told.contains("symbol index"), "{args:?}: {told}");
    }
}

#[test]
fn stack_errors_name_the_process() {
    let out = ichnos(&["stack", "-p", "999999999"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("process 999999999 does not exist"), "{err}");
    let out = ichnos(&["stack"]);
    assert_eq!(out.status.code(), Some(2));
    // Naming options without names: refused, by name.
    let out = ichnos(&["stack", "-p", "1", "--no-names", "--no-index"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-names") && err.contains("--no-index"),
        "{err}"
    );
}

/// A relocatable object (`gcc -c -g`): its DWARF is not read unrelocated
/// (every name read so was its first string, the file's `tn.c`, and the
/// paths `tn.c/tn.c`), a warning says why, and its symbol table names
/// the function as addr2line does.
#[test]
fn symbolize_an_object_file_names_from_its_symbols_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("tn.c");
    std::fs::write(
        &source,
        "static volatile unsigned long s;\n\
         void spin(unsigned long n) { for (unsigned long i = 0; i < n; i++) s++; }\n",
    )
    .unwrap();
    let object = dir.path().join("tn.o");
    let built = Command::new("gcc")
        .args(["-O2", "-gdwarf-4", "-c", "-o"])
        .arg(&object)
        .arg(&source)
        .status()
        .unwrap();
    assert!(built.success());
    let out = ichnos(&["symbolize", "-e", object.to_str().unwrap(), "0x0", "0x4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = Command::new("addr2line")
        .args(["-f", "-e"])
        .arg(&object)
        .args(["0x0", "0x4"])
        .output()
        .unwrap();
    let functions =
        |text: &str| -> Vec<String> { text.lines().step_by(2).map(str::to_owned).collect() };
    assert_eq!(
        functions(&stdout(&out)),
        functions(&String::from_utf8_lossy(&theirs.stdout)),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("tn.c/tn.c"), "{}", stdout(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a relocatable object (not linked)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ichnos symbolize` prints what `addr2line -f -i -C` prints for the same
/// addresses of a C program built with `-O2 -g` (inlined frames included),
/// discriminators aside; addresses come from the command line or stdin.
#[test]
fn symbolize_prints_addr2line_lines() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "../ichnos-symbol/tests/fixtures/inlines.c",
        &["-O2", "-g"],
    );
    let addrs = instruction_addresses(&exe, &["--disassemble=work"]);
    assert!(addrs.len() > 10);
    let exe_str = exe.to_str().unwrap();
    let mut args = vec!["symbolize", "-e", exe_str];
    args.extend(addrs.iter().map(String::as_str));
    let out = ichnos(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = Command::new("addr2line")
        .args(["-f", "-i", "-C", "-e", exe_str])
        .args(&addrs)
        .output()
        .unwrap();
    let theirs: String = String::from_utf8_lossy(&theirs.stdout)
        .lines()
        .map(|l| l.split(" (discriminator").next().unwrap().to_string() + "\n")
        .collect();
    assert_eq!(stdout(&out), theirs);
    assert!(
        theirs.contains("square"),
        "inlined frames expected:\n{theirs}"
    );

    // Standard input, one address a line; an unknown address is ??/??:0.
    let mut child = symbolize_reading_stdin(exe_str);
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        format!("{}\n0x999999\n", addrs[0]).as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("??\n??:0\n"), "{text}");

    // As a coprocess: each address is answered before the next is sent,
    // with standard input still open (as addr2line can be driven).
    let mut child = symbolize_reading_stdin(exe_str);
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = std::io::BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut line = String::new();
        while from_child.read_line(&mut line).unwrap() > 0 {
            tx.send(std::mem::take(&mut line)).unwrap();
        }
    });
    for addr in [&addrs[0], &addrs[1]] {
        std::io::Write::write_all(&mut to_child, format!("{addr}\n").as_bytes()).unwrap();
        let function = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("an answer while input stays open");
        let location = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap();
        assert!(
            !function.trim().is_empty() && location.contains(':'),
            "{function}{location}"
        );
    }
    drop(to_child);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();

    // JSON on request.
    let out = ichnos(&["symbolize", "-e", exe_str, "--json", &addrs[3]]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"], "the file itself");
    assert!(v["frames"][0]["line"].as_u64().unwrap() > 0);

    // A bad address and a missing file are user errors.
    assert_eq!(
        ichnos(&["symbolize", "-e", exe_str, "xyz"]).status.code(),
        Some(1)
    );
    assert_eq!(
        ichnos(&["symbolize", "-e", "/no/such/file", "0x10"])
            .status
            .code(),
        Some(1)
    );
}

/// `ichnos symbolize -p`: run-time addresses of a live process, placed
/// through its mappings. Its own code reads as `addr2line -e` reads the
/// file at the file's address; its JIT code is named from its perf map.
#[test]
fn symbolize_a_live_process() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(dir.path(), "tests/fixtures/jitter.c", &["-O2", "-g"]);
    let (child, line) = spawn_until_line(&exe);
    let pid = child.0.id();
    let perf_map = format!("/tmp/perf-{pid}.map");
    let jitdump = format!("/tmp/jit-{pid}.dump");
    let addrs: Vec<u64> = line
        .split_whitespace()
        .map(|a| u64::from_str_radix(a, 16).unwrap())
        .collect();
    let (work, jit, dumped) = (addrs[0] + 4, addrs[1] + 0x10, addrs[2] + 8);
    let out = ichnos(&[
        "symbolize",
        "-p",
        &pid.to_string(),
        &format!("{work:#x}"),
        &format!("{jit:#x}"),
        "0x10",
        &format!("{dumped:#x}"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    // work(): the same as binutils at the file address (PIE: run-time
    // address minus where the file's first page is mapped).
    let exe_str = exe.to_str().unwrap();
    let base = load_base(pid, exe_str);
    let theirs = Command::new("addr2line")
        .args([
            "-f",
            "-i",
            "-C",
            "-e",
            exe_str,
            &format!("{:#x}", work - base),
        ])
        .output()
        .unwrap();
    let theirs = String::from_utf8_lossy(&theirs.stdout);
    let theirs: Vec<&str> = theirs.lines().collect();
    assert_eq!(&lines[..theirs.len()], &theirs[..], "{text}");
    assert_eq!(theirs[0], "work");
    // JSON gives the address asked for and where it lies.
    let out = ichnos(&[
        "symbolize",
        "-p",
        &pid.to_string(),
        "--json",
        &format!("{work:#x}"),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["address"], format!("{work:#x}"));
    assert_eq!(v["object_address"], format!("{:#x}", work - base));
    assert_eq!(v["object"], exe_str);
    // Four bytes into work(), whose address the fixture printed: work+0x4.
    let frames = v["frames"].as_array().unwrap();
    assert_eq!(frames.last().unwrap()["function_offset"], "0x4", "{v}");
    // Where each answer came from: the file, the perf map, nothing, the
    // jitdump (the process still runs: its files are read again).
    let out = ichnos(&[
        "symbolize",
        "-p",
        &pid.to_string(),
        "--json",
        &format!("{work:#x}"),
        &format!("{jit:#x}"),
        "0x10",
        &format!("{dumped:#x}"),
    ]);
    let (sources, unnamed): (Vec<String>, Vec<Option<String>>) =
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let why = v["unnamed"].as_str().map(str::to_owned);
                (v["source"].as_str().unwrap().to_owned(), why)
            })
            .unzip();
    let _ = std::fs::remove_file(&perf_map);
    let _ = std::fs::remove_file(&jitdump);
    assert_eq!(
        sources[1..],
        ["perf map", "nothing", "jitdump file"],
        "{sources:?}"
    );
    // Only the unmapped address is unnamed, and says so.
    let in_no_mapping = Some("in no executable mapping".to_owned());
    assert_eq!(unnamed, [None, None, in_no_mapping, None]);
    // The JIT code: the perf map's name, no line; an unmapped address: ??;
    // code the jitdump describes: its name and line.
    let rest = &lines[theirs.len()..];
    assert_eq!(
        rest,
        [
            "jitted::handler (tier 2)",
            "??:?",
            "??",
            "??:0",
            "jitted::dumped",
            "script.js:42"
        ],
        "{text}"
    );
}

/// The sleeper fixture built with `-O2 -g` in `dir`, and a stripped copy
/// whose debug link names its debug file in `dir/.debug`: (the build, the
/// stripped file, the debug file).
fn stripped_sleeper(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let exe = build_fixture(dir, "tests/fixtures/sleeper.c", &["-O2", "-g"]);
    let debug_dir = dir.join(".debug");
    std::fs::create_dir(&debug_dir).unwrap();
    let debug = debug_dir.join("sleeper.debug");
    let stripped = dir.join("stripped");
    let objcopy = |args: &[&std::ffi::OsStr]| {
        assert!(Command::new("objcopy")
            .args(args)
            .status()
            .unwrap()
            .success());
    };
    objcopy(&[
        "--only-keep-debug".as_ref(),
        exe.as_os_str(),
        debug.as_os_str(),
    ]);
    objcopy(&[
        "--strip-debug".as_ref(),
        format!("--add-gnu-debuglink={}", debug.display()).as_ref(),
        exe.as_os_str(),
        stripped.as_os_str(),
    ]);
    (exe, stripped, debug)
}

/// A debug file found through `.gnu_debuglink` whose CRC does not match is
/// refused, and `symbolize` says so on standard error, for `-e` and for
/// the objects of a process under `-p`, once per object.
#[test]
fn symbolize_warns_of_refused_debug_files() {
    let dir = tempfile::tempdir().unwrap();
    let (_, stripped, debug) = stripped_sleeper(dir.path());
    // Spoil the debug file after the link recorded its CRC.
    let mut bytes = std::fs::read(&debug).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&debug, &bytes).unwrap();
    let (main, _) = {
        let nm = Command::new("nm").arg(&stripped).output().unwrap();
        let text = String::from_utf8_lossy(&nm.stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.ends_with(" T main"))
            .unwrap()
            .to_string();
        (
            u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap(),
            line,
        )
    };
    let stripped_str = stripped.to_str().unwrap();
    let out = ichnos(&[
        "symbolize",
        "-e",
        stripped_str,
        &format!("{main:#x}"),
        &format!("{:#x}", main + 1),
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("debug file refused").count(), 1, "{stderr}");
    assert!(
        stderr.contains(stripped_str) && stderr.contains("CRC32"),
        "{stderr}"
    );
    // Without its DWARF the symbol table still names the function.
    assert!(stdout(&out).starts_with("main\n"), "{}", stdout(&out));

    let (child, _) = spawn_until_line(&stripped);
    let pid = child.0.id();
    let base = load_base(pid, stripped_str);
    let out = ichnos(&[
        "symbolize",
        "-p",
        &pid.to_string(),
        &format!("{:#x}", base + main),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("debug file refused").count(), 1, "{stderr}");
    assert!(stderr.contains(stripped_str), "{stderr}");
    assert!(stdout(&out).starts_with("main\n"), "{}", stdout(&out));
}

/// `--index` makes the file's symbol index once (under
/// `$XDG_CACHE_HOME/ichnos/symbols` by default); answers from it are the
/// lines and JSON the DWARF gives.
#[test]
fn symbolize_answers_from_a_symbol_index_as_from_dwarf() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_fixture(
        dir.path(),
        "../ichnos-symbol/tests/fixtures/inlines.c",
        &["-O2", "-g", "-Wl,--build-id"],
    );
    let addrs = instruction_addresses(&exe, &[]);
    assert!(addrs.len() > 50);
    let exe_str = exe.to_str().unwrap();
    let cache = dir.path().join("cache");
    let run = |flags: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ichnos"))
            .env("XDG_CACHE_HOME", &cache)
            .arg("symbolize")
            .args(flags)
            .args(["-e", exe_str])
            .args(&addrs)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (stdout(&out), stderr)
    };
    let (plain, _) = run(&["--no-index"]);
    let (first, note) = run(&["--index"]);
    assert!(note.contains("note: indexed"), "{note}");
    let kept: Vec<_> = std::fs::read_dir(cache.join("ichnos/symbols"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        kept.len() == 1 && kept[0].ends_with(".ichnos-symbols"),
        "{kept:?}"
    );
    assert_eq!(first, plain);
    // Made once: the second run answers from it without making it again.
    let (second, note) = run(&["-v", "--index"]);
    assert!(!note.contains("indexed"), "{note}");
    assert!(note.contains("through the symbol index"), "{note}");
    assert_eq!(second, plain);
    // JSON answers go through the library's batches: the same too.
    let (json_indexed, _) = run(&["--json"]);
    let (json_plain, _) = run(&["--json", "--no-index"]);
    assert_eq!(json_indexed, json_plain);
    // Without inlines, the DWARF answers (an index holds inlined frames),
    // and --index does not make the index again.
    let (outer_indexed, note) = run(&["--no-inlines", "--index"]);
    assert!(!note.contains("indexed"), "{note}");
    let (outer_plain, _) = run(&["--no-inlines", "--no-index"]);
    assert_eq!(outer_indexed, outer_plain);
    assert_ne!(outer_plain, plain);

    let out = ichnos(&["symbolize", "--index", "--no-index", "-e", exe_str, "0x0"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `command` run as `user` (with that user's group), when given.
fn as_user(command: &mut Command, user: Option<u32>) -> &mut Command {
    use std::os::unix::process::CommandExt;
    if let Some(user) = user {
        command.uid(user).gid(user);
    }
    command
}

/// An executable deleted while it runs (a package upgraded under it) is
/// still the process's: `stack` unwinds through it by its own rows, and
/// `symbolize -p` names its functions, both through the process's link to
/// the file (`/proc/PID/map_files`).
#[test]
fn a_deleted_executable_is_unwound_and_named() {
    deleted_executable_case(None);
}

/// The same for a user with no privilege, who may not open
/// `/proc/PID/map_files` links: the executable is read through
/// `/proc/PID/exe`. Run as `nobody` when the tests run as root (as CI
/// does), else as the user running them.
#[test]
fn a_deleted_executable_is_unwound_and_named_without_privilege() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    deleted_executable_case(root.then_some(65534));
}

fn deleted_executable_case(user: Option<u32>) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = build_fixture(
        dir.path(),
        "tests/fixtures/sleeper.c",
        &["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"],
    );
    let (sleeper, line) = spawn_until_line_as(&exe, user);
    assert_eq!(line.trim(), "ready");
    // Let it reach pause().
    std::thread::sleep(std::time::Duration::from_millis(100));
    std::fs::remove_file(&exe).unwrap();
    let pid = sleeper.0.id().to_string();
    let ichnos = |args: &[&str]| {
        as_user(&mut Command::new(env!("CARGO_BIN_EXE_ichnos")), user)
            .args(args)
            .output()
            .expect("run ichnos")
    };
    let out = ichnos(&["stack", "-p", &pid]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("stopped: outermost frame"), "{text}");
    assert!(
        text.contains("(deleted)+0x") && text.contains("[via sframe]"),
        "{text}"
    );
    // The frames in the deleted file, named: c, b, a, main, as the
    // fixture calls them.
    let addrs: Vec<String> = text
        .lines()
        .filter(|l| l.contains("(deleted)+0x"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect();
    let mut args = vec!["symbolize", "-p", &pid];
    args.extend(addrs.iter().map(String::as_str));
    let out = ichnos(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let named = stdout(&out);
    let functions: Vec<&str> = named.lines().step_by(2).collect();
    for f in ["c", "b", "a", "main"] {
        assert!(functions.contains(&f), "{f} in {functions:?}");
    }
}

/// A stripped executable deleted while it runs keeps its debug file by
/// the debug link next to where it was: `symbolize -p` finds it there,
/// answers as addr2line answers from the unstripped build, and a debug
/// file whose CRC does not match is reported under the deleted name.
#[test]
fn a_deleted_executable_finds_its_debug_link() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, stripped, debug) = stripped_sleeper(dir.path());
    let nm = Command::new("nm").arg(&stripped).output().unwrap();
    let main = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(" T main"))
        .map(|l| u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap())
        .unwrap();
    let truth = Command::new("addr2line")
        .arg("-e")
        .arg(&exe)
        .arg(format!("{main:#x}"))
        .output()
        .unwrap();
    let truth = String::from_utf8_lossy(&truth.stdout).trim().to_owned();
    assert!(truth.contains("sleeper.c:"), "{truth}");

    let (child, _) = spawn_until_line(&stripped);
    let pid = child.0.id().to_string();
    let base = load_base(child.0.id(), stripped.to_str().unwrap());
    std::fs::remove_file(&stripped).unwrap();
    let at = format!("{:#x}", base + main);
    let symbolize = || {
        let out = Command::new(env!("CARGO_BIN_EXE_ichnos"))
            .args(["symbolize", "--no-index", "-p", &pid, &at])
            .env("XDG_CACHE_HOME", dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let out = symbolize();
    assert_eq!(stdout(&out), format!("main\n{truth}\n"));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");

    // Spoil the debug file: it is refused, and said so once, under the
    // name the process's mappings give the deleted file.
    let mut bytes = std::fs::read(&debug).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&debug, &bytes).unwrap();
    let out = symbolize();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("debug file refused").count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("{} (deleted)", stripped.display())) && stderr.contains("CRC32"),
        "{stderr}"
    );
    assert!(stdout(&out).starts_with("main\n??:"), "{}", stdout(&out));
}

/// The vDSO is a file only in the process's memory: `symbolize -p` reads
/// it from there and names its functions as binutils' nm names the same
/// bytes.
#[test]
fn vdso_addresses_are_named_from_the_process_memory() {
    use std::os::unix::fs::FileExt;
    let child = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = child.0.id();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).unwrap();
    let (start, end) = line
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let (start, end) = (
        u64::from_str_radix(start, 16).unwrap(),
        u64::from_str_radix(end, 16).unwrap(),
    );
    // The same bytes, for nm.
    let mut bytes = vec![0u8; (end - start) as usize];
    std::fs::File::open(format!("/proc/{pid}/mem"))
        .unwrap()
        .read_exact_at(&mut bytes, start)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("vdso.so");
    std::fs::write(&copy, &bytes).unwrap();
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&copy)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&nm.stdout).into_owned();
    // A function symbol: (address, name).
    let (addr, name) = listing
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && (f[1] == "T" || f[1] == "W"))
                .then(|| (u64::from_str_radix(f[0], 16).unwrap(), f[2].to_owned()))
        })
        .find(|(_, n)| n.contains("clock_gettime"))
        .unwrap_or_else(|| panic!("{listing}"));
    let names_at: Vec<&str> = listing
        .lines()
        .filter(|l| l.starts_with(&format!("{addr:016x}")))
        .filter_map(|l| l.split_whitespace().nth(2))
        // Without the symbol version nm appends (`@@LINUX_2.6`).
        .map(|n| n.split('@').next().unwrap_or(n))
        .collect();
    // The vDSO is linked at 0: its address is its offset in the mapping.
    let at = format!("{:#x}", start + addr + 4);
    let out = ichnos(&["symbolize", "-p", &pid.to_string(), "--json", &at]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["object"], "[vdso]");
    let ours = v["frames"][0]["function"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        names_at.contains(&ours.as_str()),
        "{ours} not among {names_at:?} ({name})"
    );
}

/// A recording of no sample says so, with no share of complete stacks
/// (a 0.0% read as broken stacks).
#[test]
fn a_recording_of_no_sample_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("t.data");
    let out = ichnos(&[
        "record",
        "-F",
        "1",
        "-o",
        data.to_str().unwrap(),
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("recorded no samples in "), "{err}");
    assert!(!err.contains("complete stacks"), "{err}");
}
