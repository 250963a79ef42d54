//! ichnos against binutils `addr2line -f -i -C` on the same addresses of a
//! C program built with `-O2 -g` (inlined functions present), and debug
//! information found in separate files: by `.gnu_debuglink` with its CRC
//! checked, and by build id.
//!
//! Deliberate difference: an address in the padding between two functions
//! (never executed) is named by binutils after the function before it; by
//! ichnos, after nothing ("??"), since it lies outside that function.

use std::path::{Path, PathBuf};
use std::process::Command;

use ichnos_symbol::{DebugSource, Frame, Symbolizer, SymbolizerOptions, Unnamed};

mod support;
use support::{fixture, instruction_addresses, objdump_stubs, run};

/// binutils' frames per address: (function, file, line) with line 0 for
/// "?" and discriminators dropped.
fn binutils(exe: &Path, addrs: &[u64]) -> Vec<Vec<(String, String, u32)>> {
    let mut cmd = Command::new("addr2line");
    cmd.args(["-a", "-f", "-i", "-C", "-e"]).arg(exe);
    for a in addrs {
        cmd.arg(format!("{a:#x}"));
    }
    let text = run(&mut cmd);
    let mut out: Vec<Vec<(String, String, u32)>> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(marker) = lines.next() {
        assert!(marker.starts_with("0x"), "{marker}");
        let mut frames = Vec::new();
        while lines.peek().is_some_and(|l| !l.starts_with("0x")) {
            let function = lines.next().unwrap().to_string();
            let location = lines.next().unwrap();
            let location = location.split(" (discriminator").next().unwrap();
            let (file, line) = location.rsplit_once(':').unwrap();
            frames.push((function, file.to_string(), line.parse().unwrap_or(0)));
        }
        out.push(frames);
    }
    // A deliberate difference (docs/cli.md): a PLT stub, `??` to
    // addr2line, is named as objdump names it.
    let stubs: std::collections::HashMap<u64, String> = objdump_stubs(exe).into_iter().collect();
    for (a, frames) in addrs.iter().zip(&mut out) {
        if let (Some(name), [(function, _, _)]) = (stubs.get(a), frames.as_mut_slice()) {
            if function == "??" {
                function.clone_from(name);
            }
        }
    }
    out
}

fn ours(frames: &[Frame]) -> Vec<(String, String, u32)> {
    frames
        .iter()
        .map(|f| {
            (
                f.function.as_deref().unwrap_or("??").to_owned(),
                f.file.as_deref().unwrap_or("??").to_owned(),
                f.line.unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn every_instruction_agrees_with_binutils_addr2line() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let addrs = instruction_addresses(&exe);
    assert!(addrs.len() > 50, "{} addresses", addrs.len());
    let want = binutils(&exe, &addrs);
    assert_eq!(want.len(), addrs.len());
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let got = symbolizer.symbolize_file(&exe, &addrs).unwrap();
    let (mut compared, mut inlined, mut padding) = (0, 0, 0);
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        assert_eq!(got.source, DebugSource::SameFile);
        let got = ours(&got.frames);
        if want.len() == 1 && want[0].1 == "??" && got == [("??".into(), "??".into(), 0)] {
            padding += 1;
            continue;
        }
        assert_eq!(&got, want, "at {addr:#x}");
        compared += 1;
        inlined += usize::from(want.len() > 1);
    }
    assert!(compared > 50, "{compared} compared");
    assert!(inlined > 5, "only {inlined} addresses with inlined frames");
    assert!(padding < compared / 4, "{padding} padding addresses");
}

/// The same on a C++ program, whose functions of internal linkage have
/// only a short name in gcc's DWARF (`helper`): binutils names the
/// function from the symbol table (`(anonymous namespace)::helper(int)`),
/// as perf does, and so does ichnos.
///
/// Deliberate difference: at code inlined into such a function, binutils
/// gives the symbol's name to the innermost (inlined) frame and the short
/// name to the function; ichnos names the inlined function by its DWARF
/// name and the function by its symbol.
#[test]
fn a_cpp_program_agrees_with_binutils_addr2line() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("names");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/names.cc");
    run(Command::new("g++")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(src));
    let addrs = instruction_addresses(&exe);
    let want = binutils(&exe, &addrs);
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let got = symbolizer.symbolize_file(&exe, &addrs).unwrap();
    let mut compared = 0;
    let mut qualified = std::collections::BTreeSet::new();
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        let got = ours(&got.frames);
        if want.len() == 1 && want[0].1 == "??" && got == [("??".into(), "??".into(), 0)] {
            continue;
        }
        let swapped = want.len() > 1
            && want.len() == got.len()
            && want[0].0 != got[0].0
            && want[0].0 == got[got.len() - 1].0;
        if swapped {
            // binutils' names moved in: the locations must still agree.
            let places = |f: &[(String, String, u32)]| -> Vec<(String, u32)> {
                f.iter()
                    .map(|(_, file, line)| (file.clone(), *line))
                    .collect()
            };
            assert_eq!(places(&got), places(want), "at {addr:#x}");
        } else {
            assert_eq!(&got, want, "at {addr:#x}");
        }
        compared += 1;
        qualified.extend(got.iter().map(|f| f.0.clone()));
    }
    assert!(compared > 50, "{compared} compared");
    for name in [
        "(anonymous namespace)::helper(int)",
        "file_static(int)",
        "long (anonymous namespace)::local_twice<long>(long)",
    ] {
        assert!(qualified.contains(name), "{name} in {qualified:?}");
    }
}

/// The code symbols `nm -S` lists in `exe`: (start, size, name).
fn nm_functions(exe: &Path) -> Vec<(u64, u64, String)> {
    let nm = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(exe)
        .output()
        .unwrap();
    String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && (f[2] == "T" || f[2] == "t")).then(|| {
                let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
                (hex(f[0]), hex(f[1]), f[3].to_owned())
            })
        })
        .collect()
}

/// The outermost frame of every instruction of a function says where the
/// function starts, as binutils' `nm -S` lists its symbol: the address is
/// that many bytes into it (`function+0x12`). Inlined frames say nothing.
#[test]
fn the_outermost_frame_says_where_its_function_starts_as_nm_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let functions: Vec<(u64, u64, String)> = nm_functions(&exe)
        .into_iter()
        .filter(|(_, size, _)| *size > 0)
        .collect();
    let addrs = instruction_addresses(&exe);
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let got = symbolizer.symbolize_file(&exe, &addrs).unwrap();
    let mut checked = 0;
    for (addr, answer) in addrs.iter().zip(&got) {
        let Some((start, _, name)) = functions
            .iter()
            .find(|(start, size, _)| (*start..start + size).contains(addr))
        else {
            continue;
        };
        let (outer, inner) = answer.frames.split_last().unwrap();
        assert_eq!(outer.function_start, Some(*start), "{name} at {addr:#x}");
        assert!(
            inner.iter().all(|f| f.function_start.is_none()),
            "at {addr:#x}"
        );
        checked += 1;
    }
    assert!(checked > 50, "{checked} addresses checked");
}

/// An address nothing is known of says why, checked against binutils:
/// outside every section `readelf -S` lists, or, inside `.text`, between
/// the functions `nm -S` lists (padding), never inside one.
#[test]
fn an_unknown_address_says_why_as_binutils_places_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let functions: Vec<(u64, u64)> = nm_functions(&exe)
        .into_iter()
        .map(|(start, size, _)| (start, size))
        .collect();
    let readelf = Command::new("readelf")
        .args(["-SW"])
        .arg(&exe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&readelf.stdout)
        .lines()
        .find(|l| l.contains(" .text "))
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let at = f.iter().position(|w| *w == ".text")?;
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            Some((hex(f[at + 2])?, hex(f[at + 4])?))
        })
        .unwrap();
    let addrs: Vec<u64> = (text.0..text.0 + text.1).chain([0, u64::MAX]).collect();
    let got = Symbolizer::new(SymbolizerOptions::default())
        .symbolize_file(&exe, &addrs)
        .unwrap();
    let mut padding = 0;
    for s in &got {
        let unknown = s.frames == [Frame::default()];
        assert_eq!(s.unnamed.is_some(), unknown, "at {:#x}", s.addr);
        let inside = functions
            .iter()
            .any(|&(start, size)| (start..start + size).contains(&s.addr));
        match s.unnamed {
            None => {}
            Some(Unnamed::Padding) => {
                assert!(!inside, "padding inside a function at {:#x}", s.addr);
                padding += 1;
            }
            Some(why) => assert!(
                s.addr == 0 || s.addr == u64::MAX,
                "{why:?} at {:#x}, in .text",
                s.addr
            ),
        }
    }
    assert!(padding > 0, "no padding between the fixture's functions");
    let outside = |addr: u64| got.iter().find(|s| s.addr == addr).unwrap().unnamed;
    assert_eq!(outside(0), Some(Unnamed::OutsideSections));
    assert_eq!(outside(u64::MAX), Some(Unnamed::OutsideSections));
}

fn split_debug(dir: &Path, exe: &Path) -> (PathBuf, PathBuf) {
    let debug = dir.join("inlines.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(exe)
        .arg(&debug));
    let stripped = dir.join("stripped").join("inlines");
    std::fs::create_dir_all(stripped.parent().unwrap()).unwrap();
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(exe)
        .arg(&stripped));
    (stripped, debug)
}

fn some_inlined_address(exe: &Path) -> (u64, Vec<(String, String, u32)>) {
    let addrs = instruction_addresses(exe);
    let want = binutils(exe, &addrs);
    addrs
        .into_iter()
        .zip(want)
        .find(|(_, w)| w.len() > 1)
        .expect("an inlined address")
}

/// The fixture built in `dir`, stripped, with its debug file in the
/// `.debug/` directory beside it (where its debug link is followed): an
/// inlined address and binutils' frames for it, the stripped file, and
/// that directory.
fn stripped_with_debug_beside(dir: &Path) -> (u64, Vec<(String, String, u32)>, PathBuf, PathBuf) {
    let exe = fixture(dir);
    let (addr, want) = some_inlined_address(&exe);
    let (stripped, debug) = split_debug(dir, &exe);
    let beside = stripped.parent().unwrap().join(".debug");
    std::fs::create_dir_all(&beside).unwrap();
    std::fs::copy(&debug, beside.join("inlines.debug")).unwrap();
    (addr, want, stripped, beside)
}

#[test]
fn a_debug_link_is_followed_and_its_crc_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, want, stripped, beside) = stripped_with_debug_beside(dir.path());
    let options = SymbolizerOptions {
        debug_dirs: vec![dir.path().join("no-such-dir")],
        ..SymbolizerOptions::default()
    };
    let got = Symbolizer::new(options.clone())
        .symbolize_file(&stripped, &[addr])
        .unwrap();
    assert_eq!(
        got[0].source,
        DebugSource::DebugLink(beside.join("inlines.debug"))
    );
    assert_eq!(ours(&got[0].frames), want);

    // A debug file whose CRC does not match is refused, and said so.
    let mut bytes = std::fs::read(beside.join("inlines.debug")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(beside.join("inlines.debug"), &bytes).unwrap();
    let symbolizer = Symbolizer::new(options);
    let got = symbolizer.symbolize_file(&stripped, &[addr]).unwrap();
    assert_eq!(got[0].source, DebugSource::SymbolsOnly);
    let refused = symbolizer.refused_debug_files(&stripped).unwrap();
    assert!(refused.iter().any(|r| r.contains("CRC32")), "{refused:?}");
    // Without DWARF the symbol table still names the outer function.
    assert_eq!(got[0].frames.len(), 1);
    assert_eq!(
        got[0].frames[0].function.as_deref(),
        Some(want.last().unwrap().0.as_str())
    );
}

/// A file deleted since it was opened is read through the kernel's link
/// to it (`/proc/PID/fd/N` here, `/proc/PID/map_files/...` for a mapping),
/// which reads as `OLD-PATH (deleted)`: its debug link is looked for
/// where the file was, as GDB does.
#[test]
fn a_deleted_file_finds_its_debug_link_where_it_was() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let (addr, want, stripped, beside) = stripped_with_debug_beside(dir.path());
    let open = std::fs::File::open(&stripped).unwrap();
    std::fs::remove_file(&stripped).unwrap();
    let link = PathBuf::from(format!("/proc/self/fd/{}", open.as_raw_fd()));
    let options = SymbolizerOptions {
        debug_dirs: vec![dir.path().join("no-such-dir")],
        ..SymbolizerOptions::default()
    };
    let got = Symbolizer::new(options)
        .symbolize_file(&link, &[addr])
        .unwrap();
    assert_eq!(
        got[0].source,
        DebugSource::DebugLink(beside.join("inlines.debug"))
    );
    assert_eq!(ours(&got[0].frames), want);
}

/// Moves `debug`, the debug file of `exe`, to where a build-id directory
/// under `dir/debug` keeps it: (that directory, the file's new path).
fn into_build_id_dir(dir: &Path, exe: &Path, debug: &Path) -> (PathBuf, PathBuf) {
    let id_hex = run(Command::new("readelf").args(["-n"]).arg(exe))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build id");
    let debug_root = dir.join("debug");
    let by_id = debug_root
        .join(".build-id")
        .join(&id_hex[..2])
        .join(format!("{}.debug", &id_hex[2..]));
    std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
    std::fs::rename(debug, &by_id).unwrap();
    (debug_root, by_id)
}

#[test]
fn a_build_id_directory_is_searched() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let (addr, want) = some_inlined_address(&exe);
    let (stripped, debug) = split_debug(dir.path(), &exe);
    let (debug_root, by_id) = into_build_id_dir(dir.path(), &exe, &debug);
    let options = SymbolizerOptions {
        debug_dirs: vec![debug_root],
        ..SymbolizerOptions::default()
    };
    let got = Symbolizer::new(options)
        .symbolize_file(&stripped, &[addr])
        .unwrap();
    assert_eq!(got[0].source, DebugSource::BuildId(by_id));
    assert_eq!(ours(&got[0].frames), want);
}

/// The stored sizes of the `.debug_*` sections of `path` that naming
/// reads (all but locations and `.debug_frame`), as readelf lists them
/// (compressed sections at their compressed size).
fn readelf_debug_bytes(path: &Path) -> u64 {
    run(Command::new("readelf").args(["-S", "-W"]).arg(path))
        .lines()
        .filter_map(|l| {
            let l = l.split_once(']')?.1;
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = f.first()?;
            let skipped = [".debug_loc", ".debug_loclists", ".debug_frame"];
            (name.starts_with(".debug_") && !skipped.contains(name))
                .then(|| u64::from_str_radix(f[4], 16).ok())
                .flatten()
        })
        .sum()
}

#[test]
fn dwarf_size_counts_the_dwarf_a_symbolization_reads() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let want = readelf_debug_bytes(&exe);
    assert!(want > 1000, "{want}");
    let symbolizer = |debug_dirs| {
        Symbolizer::new(SymbolizerOptions {
            debug_dirs,
            ..SymbolizerOptions::default()
        })
    };
    let none = dir.path().join("none");
    assert_eq!(
        symbolizer(vec![none.clone()]).dwarf_size(&exe).unwrap(),
        want
    );
    // Stripped: the debug file's, found by build id; none where it is not.
    let (stripped, debug) = split_debug(dir.path(), &exe);
    let (debug_root, by_id) = into_build_id_dir(dir.path(), &exe, &debug);
    assert_eq!(
        symbolizer(vec![debug_root]).dwarf_size(&stripped).unwrap(),
        readelf_debug_bytes(&by_id)
    );
    assert_eq!(symbolizer(vec![none]).dwarf_size(&stripped).unwrap(), 0);
    // Compressed, counted as stored.
    let compressed = dir.path().join("compressed");
    run(Command::new("objcopy")
        .arg("--compress-debug-sections=zlib")
        .arg(&exe)
        .arg(&compressed));
    let stored = readelf_debug_bytes(&compressed);
    assert!(stored < want, "{stored} of {want}");
    assert_eq!(symbolizer(vec![]).dwarf_size(&compressed).unwrap(), stored);
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not an elf file at all").unwrap();
    let s = Symbolizer::new(SymbolizerOptions::default());
    let e = s.symbolize_file(&junk, &[0x1000]).unwrap_err();
    assert!(e.to_string().contains("junk"), "{e}");
    let e = s
        .symbolize_file(&dir.path().join("missing"), &[0])
        .unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

/// A Rust binary (this test program, with its debug information): points
/// a quarter, half and three quarters into every 20th function that `nm`
/// lists, against binutils.
#[test]
fn a_rust_binary_agrees_with_binutils_addr2line() {
    let exe = std::env::current_exe().unwrap();
    let nm = run(Command::new("nm").args(["-S", "--defined-only"]).arg(&exe));
    let addrs: Vec<u64> = nm
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && (f[2] == "t" || f[2] == "T")).then_some(())?;
            Some((
                u64::from_str_radix(f[0], 16).ok()?,
                u64::from_str_radix(f[1], 16).ok()?,
            ))
        })
        .filter(|(_, size)| *size >= 8)
        .step_by(20)
        .flat_map(|(a, s)| [a + s / 4, a + s / 2, a + 3 * s / 4])
        .collect();
    assert!(addrs.len() > 100, "{} addresses", addrs.len());
    let want = binutils(&exe, &addrs);
    let got = Symbolizer::new(SymbolizerOptions::default())
        .symbolize_file(&exe, &addrs)
        .unwrap();
    let mut inlined = 0;
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        assert_eq!(&ours(&got.frames), want, "at {addr:#x}");
        inlined += usize::from(want.len() > 1);
    }
    assert!(inlined > 10, "only {inlined} addresses with inlined frames");
}

/// DWARF entries of code the linker discarded are left at address 0; an
/// address outside every section (here the ELF header's, below the first
/// section of this PIE test program) must not be named after them. binutils
/// answers `??`, and so must we.
#[test]
fn addresses_outside_every_section_are_unknown_as_binutils_says() {
    let exe = std::env::current_exe().unwrap();
    let addrs = [0, 0x10, 0x40, 0x100];
    let want = binutils(&exe, &addrs);
    let got = Symbolizer::new(SymbolizerOptions::default())
        .symbolize_file(&exe, &addrs)
        .unwrap();
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        assert_eq!(
            want,
            &[("??".to_string(), "??".to_string(), 0)],
            "binutils at {addr:#x}"
        );
        assert_eq!(&ours(&got.frames), want, "at {addr:#x}");
    }
}

/// MiniDebugInfo as Fedora builds it: a stripped file whose
/// `.gnu_debugdata` holds an xz-compressed ELF with the function symbols
/// `.dynsym` lacks. Every function `nm` saw in the original is named.
#[test]
fn mini_debug_info_names_functions_of_a_stripped_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
    let exe = dir.path().join("plain");
    run(Command::new("gcc").args(["-O2", "-o"]).arg(&exe).arg(&src));
    let syms = |args: &[&str]| -> Vec<(u64, String)> {
        run(Command::new("nm").args(args).arg(&exe))
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 3 && (f[1] == "T" || f[1] == "t"))
                    .then(|| (u64::from_str_radix(f[0], 16).unwrap(), f[2].to_string()))
            })
            .collect()
    };
    let functions = syms(&["--defined-only"]);
    let dynamic: Vec<String> = syms(&["-D", "--defined-only"])
        .into_iter()
        .map(|s| s.1)
        .collect();
    let keep: Vec<&str> = functions
        .iter()
        .map(|(_, n)| n.as_str())
        .filter(|n| !dynamic.iter().any(|d| d == n))
        .collect();
    std::fs::write(dir.path().join("keep"), keep.join("\n") + "\n").unwrap();
    let mini = dir.path().join("mini");
    run(Command::new("objcopy")
        .args(["-S", "--remove-section", ".comment", "--keep-symbols"])
        .arg(dir.path().join("keep"))
        .arg(&exe)
        .arg(&mini));
    run(Command::new("xz").arg("-f").arg(&mini));
    let stripped = dir.path().join("stripped");
    run(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&stripped)
        .arg(&exe));
    run(Command::new("objcopy")
        .arg(format!(
            "--add-section=.gnu_debugdata={}",
            dir.path().join("mini.xz").display()
        ))
        .arg(&stripped));
    let addrs: Vec<u64> = functions.iter().map(|(a, _)| a + 1).collect();
    let s = Symbolizer::new(SymbolizerOptions {
        debug_dirs: vec![dir.path().join("none")],
        ..SymbolizerOptions::default()
    });
    let got = s.symbolize_file(&stripped, &addrs).unwrap();
    let mut named = 0;
    for ((_, name), r) in functions.iter().zip(&got) {
        assert_eq!(r.source, DebugSource::MiniDebugInfo);
        assert_eq!(r.frames[0].function.as_deref(), Some(name.as_str()));
        named += 1;
    }
    assert!(named >= 5, "{named} functions");
    // Without the section, the stripped file names only what .dynsym has.
    let bare = dir.path().join("bare");
    run(Command::new("strip")
        .arg("--strip-all")
        .arg("-o")
        .arg(&bare)
        .arg(&exe));
    let got = s.symbolize_file(&bare, &addrs).unwrap();
    assert_eq!(got[0].source, DebugSource::SymbolsOnly);
    assert!(got.iter().any(|r| r.frames[0].function.is_none()));
}

/// Parsed objects are kept per build id (a copy of a file is the same
/// object) under a memory bound; answers come back in the order asked
/// whatever order they are worked in.
#[test]
fn objects_are_kept_per_build_id_within_a_bound() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let copy = dir.path().join("copy");
    std::fs::copy(&exe, &copy).unwrap();
    let s = Symbolizer::new(SymbolizerOptions::default());
    let mut addrs = instruction_addresses(&exe);
    addrs.reverse();
    let a = s.symbolize_file(&exe, &addrs).unwrap();
    let b = s.symbolize_file(&copy, &addrs).unwrap();
    assert_eq!(s.cached_objects(), 1, "a copy with the same build id");
    assert_eq!(a, b);
    assert!(a.iter().zip(&addrs).all(|(r, &addr)| r.addr == addr));

    // A bound smaller than two files keeps one object at a time.
    let other = dir.path().join("other");
    run(Command::new("gcc")
        .args(["-O1", "-g", "-o"])
        .arg(&other)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c")));
    let small = Symbolizer::new(SymbolizerOptions {
        max_cached_bytes: std::fs::metadata(&exe).unwrap().len() + 1,
        ..SymbolizerOptions::default()
    });
    small.symbolize_file(&exe, &addrs[..4]).unwrap();
    small.symbolize_file(&other, &[0x1000]).unwrap();
    assert_eq!(small.cached_objects(), 1);
    // Evicted objects are parsed again when asked for.
    assert_eq!(small.symbolize_file(&exe, &addrs[..4]).unwrap(), a[..4]);
}

/// Compressed DWARF (`-gz`, as Debian's debug packages ship it) reads the
/// same as plain DWARF, per binutils.
#[test]
fn compressed_debug_sections_agree_with_binutils() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("compressed");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
    run(Command::new("gcc")
        .args(["-O2", "-g", "-gz=zlib", "-o"])
        .arg(&exe)
        .arg(src));
    let sections = run(Command::new("readelf").args(["-SW"]).arg(&exe));
    assert!(
        sections
            .lines()
            .any(|l| l.contains(".debug_info") && l.split_whitespace().any(|f| f == "C")),
        "the fixture's DWARF is compressed:\n{sections}"
    );
    let addrs = instruction_addresses(&exe);
    let want = binutils(&exe, &addrs);
    let got = Symbolizer::new(SymbolizerOptions::default())
        .symbolize_file(&exe, &addrs)
        .unwrap();
    let mut compared = 0;
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        let got = ours(&got.frames);
        if want.len() == 1 && want[0].1 == "??" && got == [("??".into(), "??".into(), 0)] {
            continue;
        }
        assert_eq!(&got, want, "at {addr:#x}");
        compared += 1;
    }
    assert!(compared > 50);
}

/// A file rebuilt in place under the same path is parsed afresh, with or
/// without a build id: a long-lived symbolizer must not answer from the
/// file that was there before.
#[test]
fn a_file_rebuilt_in_place_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    for build_id in ["-Wl,--build-id", "-Wl,--build-id=none"] {
        let exe = dir.path().join(format!("rebuilt{}", build_id.len()));
        let mut answers = Vec::new();
        for name in ["alpha_function", "omega_function"] {
            let src = dir.path().join(format!("{name}.c"));
            std::fs::write(
                &src,
                format!("int __attribute__((noinline)) {name}(int x) {{ return x * 3 + 1; }}\nint main(int c, char **v) {{ (void)v; return {name}(c); }}\n"),
            )
            .unwrap();
            run(Command::new("gcc")
                .args(["-O1", "-g", build_id, "-o"])
                .arg(&exe)
                .arg(&src));
            let nm = run(Command::new("nm").arg(&exe));
            let addr = nm
                .lines()
                .find(|l| l.ends_with(&format!(" {name}")))
                .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
                .unwrap();
            let got = symbolizer.symbolize_file(&exe, &[addr]).unwrap();
            answers.push(got[0].frames[0].function.as_deref().map(str::to_owned));
        }
        assert_eq!(
            answers,
            [
                Some("alpha_function".to_owned()),
                Some("omega_function".to_owned())
            ],
            "{build_id}"
        );
    }
}

/// dwz moves DWARF that several files share into one supplementary file
/// named by `.gnu_debugaltlink` (Fedora and others ship debug info so):
/// names and inlined functions then live there. Every instruction agrees
/// with binutils on the same program before dwz; without the file, the
/// loss is reported.
#[test]
fn dwz_supplementary_files_are_followed() {
    // The peer is needed, not optional: a run without it fails rather
    // than passing untested.
    assert!(
        Command::new("dwz").arg("--version").output().is_ok(),
        "dwz is not installed (apt-get install dwz; .ci/run installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("shared.h"),
        "struct point { int x, y; long tag; };\n\
         static inline __attribute__((always_inline)) int square(int v) { return v * v + 1; }\n\
         static inline __attribute__((always_inline)) int dist(struct point *p) { return square(p->x) + square(p->y); }\n",
    )
    .unwrap();
    for (name, k) in [("a", 3), ("b", 5)] {
        std::fs::write(
            d.join(format!("{name}.c")),
            format!(
                "#include \"shared.h\"\n\
                 int __attribute__((noinline)) work_{name}(struct point *p) {{ return dist(p) * {k}; }}\n\
                 int main(int c, char **v) {{ struct point p = {{ c, c + {k}, 0 }}; (void)v; return work_{name}(&p); }}\n"
            ),
        )
        .unwrap();
        run(Command::new("gcc").current_dir(d).args([
            "-O2",
            "-g",
            "-o",
            name,
            &format!("{name}.c"),
        ]));
    }
    // The truth: binutils on the file before dwz (dwz rewrites only the
    // debug sections). binutils 2.40 on the dwz'd file names an inlined
    // function whose abstract origin moved to the supplementary file after
    // the function it was inlined into, so it cannot be the truth there.
    std::fs::copy(d.join("a"), d.join("a.plain")).unwrap();
    run(Command::new("dwz").current_dir(d).args([
        "-m",
        "common.debug",
        "-M",
        "common.debug",
        "a",
        "b",
    ]));
    let exe = d.join("a");
    let addrs = instruction_addresses(&exe);
    assert_eq!(addrs, instruction_addresses(&d.join("a.plain")));
    let want = binutils(&d.join("a.plain"), &addrs);
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let got = symbolizer.symbolize_file(&exe, &addrs).unwrap();
    let mut inlined = 0;
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        let got = ours(&got.frames);
        if want.len() == 1 && want[0].1 == "??" && got == [("??".into(), "??".into(), 0)] {
            continue;
        }
        assert_eq!(&got, want, "at {addr:#x}");
        inlined += usize::from(want.iter().any(|f| f.0 == "square"));
    }
    assert!(
        inlined > 0,
        "no address in the inlined function that dwz moved"
    );
    assert!(symbolizer.refused_debug_files(&exe).unwrap().is_empty());

    // The supplementary file gone: reported, and the rest still answers.
    std::fs::remove_file(d.join("common.debug")).unwrap();
    let fresh = Symbolizer::new(SymbolizerOptions::default());
    let b = d.join("b");
    let refused = fresh.refused_debug_files(&b).unwrap();
    assert!(
        refused
            .iter()
            .any(|r| r.contains("common.debug") && r.contains("not found")),
        "{refused:?}"
    );
}

/// Split DWARF (`-gsplit-dwarf`): the line tables and inlined functions
/// live in a `.dwo` file that the binary's skeleton unit names, or in a
/// DWARF package (`.dwp`) beside the binary. Every instruction agrees with
/// binutils on the same program built without splitting; with both gone,
/// the symbol tables still name functions.
#[test]
fn split_dwarf_files_are_loaded() {
    // DWARF 5 (gcc's default) and the GNU extension of DWARF 4; the
    // package is made for DWARF 4, which binutils' dwp handles (its dwp
    // crashes on DWARF 5 input).
    for version in ["-gdwarf-5", "-gdwarf-4"] {
        split_dwarf_case(version);
    }
}

fn split_dwarf_case(version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
    std::fs::copy(&src, d.join("inlines.c")).unwrap();
    for (out, split) in [("plain", false), ("split", true)] {
        let mut cmd = Command::new("gcc");
        cmd.current_dir(d)
            .args(["-O2", "-g", version, "-o", out, "inlines.c"]);
        if split {
            cmd.arg("-gsplit-dwarf");
        }
        run(&mut cmd);
    }
    let dwos: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "dwo"))
        .map(|e| e.path())
        .collect();
    assert!(!dwos.is_empty(), "gcc wrote no .dwo");
    let exe = d.join("split");
    let addrs = instruction_addresses(&exe);
    assert_eq!(
        addrs,
        instruction_addresses(&d.join("plain")),
        "splitting changed the code"
    );
    let want = binutils(&d.join("plain"), &addrs);
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let got = symbolizer.symbolize_file(&exe, &addrs).unwrap();
    let (mut compared, mut inlined) = (0, 0);
    for ((addr, want), got) in addrs.iter().zip(&want).zip(&got) {
        let got = ours(&got.frames);
        if want.len() == 1 && want[0].1 == "??" && got == [("??".into(), "??".into(), 0)] {
            continue;
        }
        assert_eq!(&got, want, "{version} at {addr:#x}");
        compared += 1;
        inlined += usize::from(want.len() > 1);
    }
    assert!(
        compared > 50 && inlined > 5,
        "{version}: {compared} compared, {inlined} inlined"
    );

    if version == "-gdwarf-4" {
        // Packed into split.dwp and the .dwo files removed: the same
        // answers from the package.
        run(Command::new("dwp").current_dir(d).args(["-e", "split"]));
        for dwo in &dwos {
            std::fs::remove_file(dwo).unwrap();
        }
        let packaged = Symbolizer::new(SymbolizerOptions::default());
        let from_package = packaged.symbolize_file(&exe, &addrs).unwrap();
        assert_eq!(
            from_package, got,
            "answers from the .dwp differ from those of the .dwo files"
        );
        std::fs::remove_file(d.join("split.dwp")).unwrap();
    } else {
        for dwo in &dwos {
            std::fs::remove_file(dwo).unwrap();
        }
    }
    let fresh = Symbolizer::new(SymbolizerOptions::default());
    let got = fresh.symbolize_file(&exe, &addrs).unwrap();
    let named = got
        .iter()
        .filter(|r| r.frames[0].function.is_some())
        .count();
    assert!(
        named > addrs.len() / 2,
        "symbol tables name {named} of {}",
        addrs.len()
    );
}

/// A debug link is a file name, which need not be UTF-8.
#[test]
fn a_debug_link_that_is_not_utf8_is_followed() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let (addr, want) = some_inlined_address(&exe);
    let debug = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"inlines-\xff\xfe.debug"));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    let stripped = dir.path().join("stripped");
    let mut link = std::ffi::OsString::from("--add-gnu-debuglink=");
    link.push(&debug);
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(link)
        .arg(&exe)
        .arg(&stripped));
    let got = Symbolizer::new(SymbolizerOptions {
        debug_dirs: vec![dir.path().join("no-such-dir")],
        ..SymbolizerOptions::default()
    })
    .symbolize_file(&stripped, &[addr])
    .unwrap();
    assert_eq!(got[0].source, DebugSource::DebugLink(debug));
    assert_eq!(ours(&got[0].frames), want);
    // An index keeps its debug file's path as UTF-8 text: this one is
    // refused, with the reason, rather than made never to be used.
    let err = Symbolizer::new(SymbolizerOptions {
        index_dir: Some(dir.path().join("index")),
        ..SymbolizerOptions::default()
    })
    .build_index(&stripped, &mut |_, _| {})
    .unwrap_err();
    assert!(err.to_string().contains("is not UTF-8"), "{err}");
}
