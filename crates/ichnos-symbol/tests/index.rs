//! Symbol indexes answer every address exactly as reading the DWARF does:
//! checked address by address against a symbolizer without an index on a
//! C program with inlining, a Rust program, split debug files and split
//! DWARF. An index made from a debug file that has since changed is not
//! used; damaged index files are errors naming the offset, never panics.

use std::path::{Path, PathBuf};
use std::process::Command;

use ichnos_symbol::{
    DebugSource, SymbolError, SymbolIndex, Symbolized, Symbolizer, SymbolizerOptions, Unnamed,
};
use proptest::prelude::*;

mod support;
use support::{fixture, instruction_addresses, run};

fn live(options: &SymbolizerOptions) -> Symbolizer {
    Symbolizer::new(SymbolizerOptions {
        index_dir: None,
        ..options.clone()
    })
}

fn indexed(dir: &Path, options: &SymbolizerOptions) -> Symbolizer {
    Symbolizer::new(SymbolizerOptions {
        index_dir: Some(dir.to_path_buf()),
        ..options.clone()
    })
}

/// Makes the index of `exe` in `dir` and returns it.
fn make_index(dir: &Path, exe: &Path, options: &SymbolizerOptions) -> SymbolIndex {
    let mut calls = 0;
    let index = indexed(dir, options)
        .build_index(exe, &mut |done, all| {
            assert!(done <= all);
            calls += 1;
        })
        .unwrap();
    assert!(calls >= 1, "progress was never reported");
    index
}

/// Addresses around the edges: below, inside and past everything.
fn edges(addrs: &[u64]) -> Vec<u64> {
    let mut out = vec![0, 1, u64::MAX, u64::MAX - 1];
    if let (Some(&lo), Some(&hi)) = (addrs.first(), addrs.last()) {
        out.extend([lo - 1, hi + 1, hi + 4096, hi + (1 << 20)]);
    }
    out
}

/// Both symbolizers answer `addrs` alike, with and without demangling;
/// the indexed one answers from its index. Returns the indexed answers,
/// demangled.
fn assert_same_answers(dir: &Path, exe: &Path, addrs: &[u64]) -> Vec<Symbolized> {
    let mut last = Vec::new();
    for demangle in [false, true] {
        let options = SymbolizerOptions {
            demangle,
            ..SymbolizerOptions::default()
        };
        let index = indexed(dir, &options);
        // The index found by asking whether there is one is the one that
        // answers: opened and checked once.
        let found = index.usable_index(exe).expect("an index");
        let answering = index.index_of(exe).unwrap();
        assert!(
            answering.is_some_and(|a| std::sync::Arc::ptr_eq(&a, &found)),
            "no index answers for {}, or not the one found",
            exe.display()
        );
        let want = live(&options).symbolize_file(exe, addrs).unwrap();
        let got = index.symbolize_file(exe, addrs).unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "at {:#x} (demangle {demangle})", w.addr);
        }
        // The borrowed view says the same.
        let ix = index.index_of(exe).unwrap().unwrap();
        for w in &want {
            let refs: Vec<_> = ix.frame_refs(w.addr, demangle).collect();
            assert_eq!(refs.len(), w.frames.len(), "at {:#x}", w.addr);
            for (r, f) in refs.iter().zip(&w.frames) {
                assert_eq!(r.function, f.function.as_deref().map(str::as_bytes));
                assert_eq!(r.raw_function, f.raw_function.as_deref().map(str::as_bytes));
                assert_eq!(r.file, f.file.as_deref().map(str::as_bytes));
                assert_eq!((r.line, r.column, r.inlined), (f.line, f.column, f.inlined));
                assert_eq!(r.function_start, f.function_start, "at {:#x}", w.addr);
            }
        }
        last = got;
    }
    last
}

#[test]
fn a_c_program_is_answered_alike_at_every_instruction() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let ix_dir = dir.path().join("index");
    let index = make_index(&ix_dir, &exe, &SymbolizerOptions::default());
    assert_eq!(index.source(), &DebugSource::SameFile);
    assert!(index.path().starts_with(&ix_dir));
    let mut addrs = instruction_addresses(&exe);
    // Every byte, not only instruction starts: ranges may begin anywhere.
    let (lo, hi) = (addrs[0], *addrs.last().unwrap());
    addrs = (lo..=hi + 16).collect();
    addrs.extend(edges(&addrs.clone()));
    let got = assert_same_answers(&ix_dir, &exe, &addrs);
    // The fixture inlines: the index must hold inlined frames.
    assert!(got.iter().any(|s| s.frames.len() > 1));
    assert!(got.iter().any(|s| s.frames[0].function.is_none()));
    // And says why it knows nothing, as the DWARF does: padding between
    // functions, and addresses outside every section.
    for why in [Unnamed::Padding, Unnamed::OutsideSections] {
        assert!(got.iter().any(|s| s.unnamed == Some(why)), "{why:?}");
    }
}

#[test]
fn a_rust_program_is_answered_alike() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/words.rs");
    let exe = dir.path().join("words");
    run(Command::new("rustc")
        .args(["-O", "-g", "-C", "link-arg=-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(src));
    let ix_dir = dir.path().join("index");
    make_index(&ix_dir, &exe, &SymbolizerOptions::default());
    // Each instruction of the program's own functions, and a spread over
    // the rest (std and its dependencies).
    let all = instruction_addresses(&exe);
    let own = own_function_addresses(&exe);
    let mut addrs: Vec<u64> = all.iter().copied().step_by(17).chain(own).collect();
    addrs.extend(edges(&all));
    let got = assert_same_answers(&ix_dir, &exe, &addrs);
    let demangled = got
        .iter()
        .filter_map(|s| s.frames.last()?.function.as_deref())
        .any(|f| f.starts_with("words::"));
    assert!(demangled, "no demangled words:: function answered");
}

/// Instruction addresses of the functions `nm` places in the `words`
/// crate.
fn own_function_addresses(exe: &Path) -> Vec<u64> {
    let nm = run(Command::new("nm")
        .args(["-S", "--defined-only", "-C"])
        .arg(exe));
    nm.lines()
        .filter(|l| l.contains(" words::"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let size = u64::from_str_radix(f.next()?, 16).ok()?;
            Some(addr..addr + size)
        })
        .flatten()
        .collect()
}

/// A split debug file: the index says where its answers came from, and
/// is not used once that file changes.
#[test]
fn an_index_from_a_debug_file_is_dropped_when_the_file_changes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exe = fixture(d);
    let debug = d.join("inlines.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    run(Command::new("objcopy")
        .args(["--strip-debug", "--add-gnu-debuglink"])
        .arg(&debug)
        .arg(&exe));
    let ix_dir = d.join("index");
    let options = SymbolizerOptions::default();
    let index = make_index(&ix_dir, &exe, &options);
    assert_eq!(index.source(), &DebugSource::DebugLink(debug.clone()));
    let addrs = instruction_addresses(&exe);
    let got = assert_same_answers(&ix_dir, &exe, &addrs);
    assert!(got
        .iter()
        .all(|s| s.source == DebugSource::DebugLink(debug.clone())));
    assert!(got.iter().any(|s| s.frames[0].line.is_some()));

    // The debug file changes (same contents, a new time): the index no
    // longer answers, and the DWARF does.
    let file = std::fs::File::options().write(true).open(&debug).unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    drop(file);
    assert!(indexed(&ix_dir, &options).usable_index(&exe).is_none());
    assert!(indexed(&ix_dir, &options).index_of(&exe).unwrap().is_none());
    // Rebuilt, it answers again.
    make_index(&ix_dir, &exe, &options);
    assert_same_answers(&ix_dir, &exe, &addrs);
}

#[test]
fn split_dwarf_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
    std::fs::copy(&src, d.join("inlines.c")).unwrap();
    run(Command::new("gcc").current_dir(d).args([
        "-O2",
        "-g",
        "-gsplit-dwarf",
        "-Wl,--build-id",
        "-o",
        "split",
        "inlines.c",
    ]));
    let exe = d.join("split");
    let ix_dir = d.join("index");
    make_index(&ix_dir, &exe, &SymbolizerOptions::default());
    let got = assert_same_answers(&ix_dir, &exe, &instruction_addresses(&exe));
    assert!(
        got.iter().any(|s| s.frames.len() > 1),
        "no inlined frames from the .dwo"
    );

    // Without its .dwo the object is not indexed: the index would freeze
    // answers short of what the .dwo file gives.
    for entry in std::fs::read_dir(d).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "dwo") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let other = d.join("index2");
    let err = indexed(&other, &SymbolizerOptions::default())
        .build_index(&exe, &mut |_, _| {})
        .unwrap_err();
    assert!(matches!(err, SymbolError::NotIndexed { .. }), "{err}");
    assert!(err.to_string().contains("split DWARF"), "{err}");
}

#[test]
fn objects_an_index_cannot_serve_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inlines.c");
    let build = |name: &str, flags: &[&str]| -> PathBuf {
        let exe = d.join(name);
        run(Command::new("gcc")
            .args(["-O2"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src));
        exe
    };
    let ix_dir = d.join("index");
    let symbolizer = indexed(&ix_dir, &SymbolizerOptions::default());
    let cases = [
        (
            build("no-build-id", &["-g", "-Wl,--build-id=none"]),
            "no build id",
        ),
        (build("no-dwarf", &["-Wl,--build-id"]), "no DWARF"),
    ];
    for (exe, reason) in cases {
        let err = symbolizer.build_index(&exe, &mut |_, _| {}).unwrap_err();
        assert!(matches!(err, SymbolError::NotIndexed { .. }), "{err}");
        assert!(err.to_string().contains(reason), "{err}");
        assert!(err.to_string().contains(&*exe.to_string_lossy()), "{err}");
    }
    let err = Symbolizer::new(SymbolizerOptions::default())
        .build_index(&fixture(d), &mut |_, _| {})
        .unwrap_err();
    assert!(err.to_string().contains("no index directory"), "{err}");
}

/// A way of damaging index bytes.
type Damage = Box<dyn Fn(&mut Vec<u8>)>;

/// A damaged index in the directory is passed over: the DWARF answers.
#[test]
fn a_damaged_index_is_an_error_naming_the_offset_and_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let ix_dir = dir.path().join("index");
    let index = make_index(&ix_dir, &exe, &SymbolizerOptions::default());
    let path = index.path().to_path_buf();
    let good = std::fs::read(&path).unwrap();
    drop(index);

    let cases: Vec<(&str, Damage, u64)> = vec![
        ("magic", Box::new(|b| b[0] ^= 1), 0),
        ("version", Box::new(|b| b[8] = 9), 8),
        ("truncated", Box::new(|b| b.truncate(b.len() - 1)), 112),
        ("range count", Box::new(|b| b[112] ^= 1), 112),
        ("short", Box::new(|b| b.truncate(100)), 100),
        (
            "unsorted ranges",
            Box::new(|b| b[136..144].copy_from_slice(&u64::MAX.to_le_bytes())),
            144,
        ),
    ];
    for (what, damage, offset) in &cases {
        let mut bytes = good.clone();
        damage(&mut bytes);
        let err = SymbolIndex::from_bytes(bytes.clone()).unwrap_err();
        match &err {
            SymbolError::BadIndex { offset: at, .. } => assert_eq!(at, offset, "{what}: {err}"),
            other => panic!("{what}: {other}"),
        }
        std::fs::write(&path, &bytes).unwrap();
        let symbolizer = indexed(&ix_dir, &SymbolizerOptions::default());
        assert!(symbolizer.index_of(&exe).unwrap().is_none(), "{what}");
        let addrs = instruction_addresses(&exe);
        assert_eq!(
            symbolizer.symbolize_file(&exe, &addrs).unwrap(),
            live(&SymbolizerOptions::default())
                .symbolize_file(&exe, &addrs)
                .unwrap(),
            "{what}"
        );
    }
}

/// An index made by another build of the code that makes answers (its
/// generator differs) is not read: its answers may differ from ours.
#[test]
fn an_index_from_another_build_of_ichnos_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fixture(dir.path());
    let ix_dir = dir.path().join("index");
    let index = make_index(&ix_dir, &exe, &SymbolizerOptions::default());
    assert!(index.made_by_this_build());
    let path = index.path().to_path_buf();
    drop(index);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[128] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let other = SymbolIndex::open(&path).unwrap();
    assert!(!other.made_by_this_build());
    let symbolizer = indexed(&ix_dir, &SymbolizerOptions::default());
    assert!(symbolizer.usable_index(&exe).is_none());
    assert!(symbolizer.index_of(&exe).unwrap().is_none());
    // Asked for again, it is made again, by this build.
    let again = make_index(&ix_dir, &exe, &SymbolizerOptions::default());
    assert!(again.made_by_this_build());
    assert!(symbolizer.usable_index(&exe).is_some());
}

/// The generator an index records is the fingerprint docs/symbol-index.md
/// and build.rs describe, computed here apart: FNV-1a over the crate's
/// version, the workspace's Cargo.lock, then each source file under
/// `src/` (sorted by path: its path, a zero byte, its bytes), then a zero
/// byte, the path of the libstdc++ this process has mapped (its
/// demangler spells C++ names), a space and that file's build id. A fix to the symbolizer's sources, or
/// another libstdc++, therefore makes a new generator.
#[test]
fn the_generator_fingerprints_the_crate_sources() {
    fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rs_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(env!("CARGO_PKG_VERSION").as_bytes());
    feed(&std::fs::read(manifest.join("../../Cargo.lock")).unwrap());
    let mut files = Vec::new();
    rs_files(&manifest.join("src"), &mut files);
    files.sort();
    assert!(files.len() > 10, "{files:?}");
    for file in &files {
        feed(
            file.strip_prefix(manifest)
                .unwrap()
                .to_string_lossy()
                .as_bytes(),
        );
        feed(&[0]);
        feed(&std::fs::read(file).unwrap());
    }
    let bytes = small_index();
    // The generator names the demangler: making the index loaded it.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let libstdcxx = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| path.contains("/libstdc++.so"))
        .expect("libstdc++ is mapped");
    // Its build id as binutils reads it.
    let notes = std::process::Command::new("readelf")
        .args(["-n", libstdcxx])
        .output()
        .expect("readelf runs");
    let notes = String::from_utf8(notes.stdout).unwrap();
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("libstdc++ has a build id");
    feed(&[0]);
    feed(format!("{libstdcxx} {build_id}").as_bytes());
    let generator = u64::from_le_bytes(bytes[128..136].try_into().unwrap());
    assert_eq!(generator, hash);
}

/// An index file written here from docs/symbol-index.md alone: ranges,
/// frames and strings as the page lays them out. A frame is its six
/// 32-bit fields and its 64-bit `function_start` as two 32-bit halves, low
/// first (the same bytes, little-endian).
fn index_from_the_spec(ranges: &[(u64, u32)], frames: &[[u32; 8]], strings: &[&str]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(b"ICHNSYMI");
    f.extend_from_slice(&6u32.to_le_bytes());
    f.extend_from_slice(&4u32.to_le_bytes());
    let mut id = [0u8; 64];
    id[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    f.extend_from_slice(&id);
    f.extend_from_slice(&4096u64.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&u32::MAX.to_le_bytes());
    f.extend_from_slice(&[0; 16]);
    let blob: usize = strings.iter().map(|s| s.len()).sum();
    for n in [ranges.len(), frames.len(), strings.len(), blob] {
        f.extend_from_slice(&u32::try_from(n).unwrap().to_le_bytes());
    }
    f.extend_from_slice(&0u64.to_le_bytes());
    assert_eq!(f.len(), 136);
    for r in ranges {
        f.extend_from_slice(&r.0.to_le_bytes());
    }
    for r in ranges {
        f.extend_from_slice(&r.1.to_le_bytes());
    }
    f.resize(f.len().next_multiple_of(8), 0);
    for v in frames.iter().flatten() {
        f.extend_from_slice(&v.to_le_bytes());
    }
    let mut at = 0u32;
    for s in strings {
        f.extend_from_slice(&at.to_le_bytes());
        f.extend_from_slice(&u32::try_from(s.len()).unwrap().to_le_bytes());
        at += u32::try_from(s.len()).unwrap();
    }
    for s in strings {
        f.extend_from_slice(s.as_bytes());
    }
    f
}

#[test]
fn an_index_written_from_the_spec_is_read_as_the_spec_says() {
    const NONE: u32 = u32::MAX;
    let (inlined, has_line, has_column, last, has_start) = (1, 2, 4, 8, 16);
    let bytes = index_from_the_spec(
        &[(0x1000, 0), (0x1010, NONE), (0x2000, 2)],
        &[
            [0, 1, 2, 7, 5, inlined | has_line | has_column, 0, 0],
            [3, 3, 2, 3, 0, has_line | last | has_start, 0x0ff0, 0x1],
            [NONE, NONE, 2, 0, 0, last, 0, 0],
        ],
        &["helper", "_Z6helperv", "a.c", "outer"],
    );
    let index = SymbolIndex::from_bytes(bytes).unwrap();
    assert_eq!(index.build_id(), [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(index.object_size(), 4096);
    assert_eq!(index.ranges(), 3);
    let answers = index.frames(
        &[0xfff, 0x1000, 0x100f, 0x1010, 0x1fff, 0x2000, u64::MAX],
        true,
    );
    let unknown = vec![ichnos_symbol::Frame::default()];
    let known = |function: Option<&str>, raw: Option<&str>, line, column, inlined, start| {
        ichnos_symbol::Frame {
            function: function.map(Into::into),
            raw_function: raw.map(Into::into),
            file: Some("a.c".into()),
            line,
            column,
            inlined,
            function_start: start,
        }
    };
    let first = vec![
        known(
            Some("helper"),
            Some("_Z6helperv"),
            Some(7),
            Some(5),
            true,
            None,
        ),
        known(
            Some("outer"),
            Some("outer"),
            Some(3),
            None,
            false,
            Some(0x1_0000_0ff0),
        ),
    ];
    let last_range = vec![known(None, None, None, None, false, None)];
    assert_eq!(
        answers,
        [
            &unknown,
            &first,
            &first,
            &unknown,
            &unknown,
            &last_range,
            &last_range
        ]
        .map(Clone::clone)
    );
    // Raw names when not demangling.
    assert_eq!(
        index.frames(&[0x1000], false)[0][0].function.as_deref(),
        Some("_Z6helperv")
    );

    // An answer longer than 1024 frames is refused, naming the frame.
    let mut long = vec![[NONE, NONE, NONE, 0, 0, 0, 0, 0]; 1100];
    long[1099][5] = last;
    let err = SymbolIndex::from_bytes(index_from_the_spec(&[(0, 0)], &long, &[])).unwrap_err();
    assert!(err.to_string().contains("longer than 1024 frames"), "{err}");
    long[1023][5] = last;
    SymbolIndex::from_bytes(index_from_the_spec(&[(0, 0)], &long, &[])).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any damage to a real index either is refused or leaves an index
    /// whose lookups answer without panicking.
    #[test]
    fn damaged_indexes_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        addrs in proptest::collection::vec(any::<u64>(), 1..64),
    ) {
        let bytes = small_index();
        let mut bytes = bytes.clone();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Ok(index) = SymbolIndex::from_bytes(bytes) {
            for demangle in [true, false] {
                for frames in index.frames(&addrs, demangle) {
                    prop_assert!(!frames.is_empty());
                }
                for &a in &addrs {
                    prop_assert!(index.frame_refs(a, demangle).count() >= 1);
                }
            }
        }
    }
}

/// The bytes of the fixture's index, made once for the property test.
fn small_index() -> &'static Vec<u8> {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let exe = fixture(dir.path());
        let index = make_index(
            &dir.path().join("index"),
            &exe,
            &SymbolizerOptions::default(),
        );
        std::fs::read(index.path()).unwrap()
    })
}
