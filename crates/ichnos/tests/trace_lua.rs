//! The function tracer on a real program: the Lua 5.4 interpreter (about
//! 500 functions; errors that `longjmp` out of nested calls; coroutines)
//! built with `-finstrument-functions`, traced by `ichnos trace`, and
//! checked against a count the program makes of itself: a library of
//! hooks (`fixtures/trace/hook_counts.c`) that counts each call by its
//! function and call site, as the compiler's instrumentation reports
//! them, named through binutils' `nm`. Every function's calls in `ichnos
//! report --trace` and every caller-callee pair in `ichnos replay` must be
//! those counts.

mod trace_support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use trace_support::{calls, ichnos, replay_lines, run};

/// Lua 5.4's C sources: those the `lua-src` crate ships (a
/// dev-dependency of ichnos for them alone), found through `cargo
/// metadata`.
fn lua_sources() -> PathBuf {
    let metadata = |offline: bool| {
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["metadata", "--format-version", "1", "--locked"])
            // Only this platform's packages.
            .arg("--filter-platform")
            .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
        if offline {
            cargo.arg("--offline");
        }
        cargo
    };
    // Offline first: the build has downloaded lua-src. But `cargo
    // metadata` wants every package of the workspace's graph, and a
    // build of this crate alone on a fresh machine has not downloaded
    // the others' (their dev-dependencies): then it may download them.
    let out = match metadata(true).output() {
        Ok(out) if out.status.success() => out,
        offline => {
            let online = metadata(false).output().unwrap();
            assert!(
                online.status.success(),
                "cargo metadata: offline {:?}\n{}\nonline: {}\n{}",
                offline.as_ref().map(|o| o.status),
                offline
                    .as_ref()
                    .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default(),
                online.status,
                String::from_utf8_lossy(&online.stderr)
            );
            online
        }
    };
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "lua-src")
        .expect("lua-src in `cargo metadata` (a dev-dependency of ichnos)");
    let root = Path::new(package["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("lua-5.4."))
        })
        .unwrap_or_else(|| panic!("no lua-5.4.* in {}", root.display()));
    assert!(dir.join("lua.h").is_file(), "{}", dir.display());
    dir
}

fn gcc(args: &mut Command) {
    let out = args
        .output()
        .unwrap_or_else(|e| panic!("gcc (Debian's gcc package): {e}"));
    assert!(
        out.status.success(),
        "{args:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the interpreter with the script of `fixtures/trace/lua_main.c`,
/// linked with the counting hooks, into `dir`.
fn build_lua(dir: &Path) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace");
    gcc(Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(dir.join("libhookcounts.so"))
        .arg(fixtures.join("hook_counts.c"))
        .arg("-ldl"));
    let src = lua_sources();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        // The stand-alone interpreter and compiler have mains of their own.
        .filter(|p| !p.ends_with("lua.c") && !p.ends_with("luac.c"))
        .collect();
    sources.sort();
    assert!(
        sources.len() > 30,
        "{} sources in {}",
        sources.len(),
        src.display()
    );
    let exe = dir.join("lua");
    gcc(Command::new("gcc")
        // No inlining and no sibling calls: each call site is then in
        // the code of the function that makes the call, which is how the
        // truth names callers.
        .args([
            "-O2",
            "-g",
            "-fno-inline",
            "-fno-optimize-sibling-calls",
            "-finstrument-functions",
            "-DLUA_USE_LINUX",
            // The count and the trace are of two runs: with Lua's hash
            // seed fixed (it mixes the time and addresses in), its
            // string hashes, so its table layouts and calls, are the same
            // every run, ASLR or not. A test that fails with counts a few
            // calls apart in the table functions is that seed.
            "-Dluai_makeseed(L)=0",
            // Addresses as offsets from the executable's start are nm's
            // only in a position-independent executable.
            "-fPIE",
            "-pie",
        ])
        .arg("-I")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(fixtures.join("lua_main.c"))
        .args(&sources)
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-lhookcounts", "-lm", "-ldl"]));
    exe
}

/// The program's functions as `nm` lists them: (address, name), sorted.
fn functions_of(exe: &Path) -> Vec<(u64, String)> {
    let out = run(Command::new("nm").arg(exe));
    let mut functions: Vec<(u64, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && (f[1] == "t" || f[1] == "T"))
                .then(|| (u64::from_str_radix(f[0], 16).unwrap(), f[2].to_owned()))
        })
        .collect();
    functions.sort();
    functions
}

/// The program's own count: calls by function, and by (caller, callee);
/// and what it printed.
type Counts = (
    HashMap<String, u64>,
    HashMap<(String, String), u64>,
    Vec<u8>,
);

fn counted(exe: &Path, dir: &Path) -> Counts {
    let path = dir.join("counts.txt");
    let printed = run(Command::new(exe).env("ICHNOS_TEST_COUNTS", &path)).stdout;
    let functions = functions_of(exe);
    let name_at = |address: u64| -> String {
        let i = functions.partition_point(|(a, _)| *a <= address);
        assert!(i > 0, "{address:#x} before every function");
        functions[i - 1].1.clone()
    };
    let (mut by_function, mut by_pair) = (HashMap::new(), HashMap::new());
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let function = u64::from_str_radix(f[0], 16).unwrap();
        let site = u64::from_str_radix(f[1], 16).unwrap();
        let n: u64 = f[2].parse().unwrap();
        let at = functions
            .binary_search_by_key(&function, |(a, _)| *a)
            .unwrap_or_else(|_| panic!("no function at {function:#x}"));
        let callee = functions[at].1.clone();
        *by_function.entry(callee.clone()).or_insert(0) += n;
        if callee != "main" {
            // The site is the return address: the call is the byte before.
            *by_pair.entry((name_at(site - 1), callee)).or_insert(0) += n;
        }
    }
    (by_function, by_pair, printed)
}

/// Calls by (caller, callee) as `ichnos replay` nests them.
fn replayed_pairs(dir: &Path, data: &str) -> HashMap<(String, String), u64> {
    let mut pairs = HashMap::new();
    let mut open: Vec<String> = Vec::new();
    for line in replay_lines(dir, data) {
        if line.kind == "close" {
            continue;
        }
        open.truncate(line.depth);
        assert_eq!(
            open.len(),
            line.depth,
            "{line:?} deeper than the calls open"
        );
        if let Some(caller) = open.last() {
            *pairs
                .entry((caller.clone(), line.name.clone()))
                .or_insert(0) += 1;
        } else {
            assert_eq!(line.name, "main", "{line:?}");
        }
        if line.kind == "open" {
            open.push(line.name);
        }
    }
    pairs
}

#[test]
fn the_lua_interpreter_traced_makes_the_calls_it_counts_itself() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_lua(dir.path());
    let (by_function, by_pair, printed) = counted(&exe, dir.path());
    let total: u64 = by_function.values().sum();
    // The script reaches most of the interpreter, many times.
    assert!(by_function.len() > 300, "{} functions", by_function.len());
    assert!(total > 100_000, "{total} calls");
    // Its errors: each a longjmp out of the interpreter's nested calls.
    assert!(by_function.get("luaG_errormsg").copied().unwrap_or(0) >= 50);

    let out = ichnos()
        .args(["trace", "-q", "-o"])
        .arg(dir.path().join("lua.data"))
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The script's results (fib(15) first), traced as untraced.
    assert!(
        printed.starts_with(b"610\t"),
        "{}",
        String::from_utf8_lossy(&printed)
    );
    assert_eq!(out.stdout, printed);

    let traced = calls(dir.path(), "lua.data");
    let differ = differences(&by_function, &traced);
    assert!(
        differ.is_empty(),
        "calls (function, counted, traced): {differ:?}"
    );

    let replayed = replayed_pairs(dir.path(), "lua.data");
    let differ = differences(&by_pair, &replayed);
    assert!(
        differ.is_empty(),
        "calls ((caller, callee), counted, replayed): {differ:?}"
    );
}

/// Where two counts by key differ: (key, counted, seen), sorted; a key
/// seen and not counted has 0 counted.
fn differences<K: Clone + Ord + std::hash::Hash>(
    counted: &HashMap<K, u64>,
    seen: &HashMap<K, u64>,
) -> Vec<(K, u64, Option<u64>)> {
    let mut differ: Vec<_> = counted
        .iter()
        .filter(|(k, n)| seen.get(*k) != Some(n))
        .map(|(k, n)| (k.clone(), *n, seen.get(k).copied()))
        .collect();
    differ.extend(
        seen.iter()
            .filter(|(k, _)| !counted.contains_key(*k))
            .map(|(k, n)| (k.clone(), 0, Some(*n))),
    );
    differ.sort();
    differ
}
