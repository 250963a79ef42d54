//! The `ichnos` binary end to end: output against readelf and the file's
//! bytes, and the exit codes of docs/cli.md.

use std::process::{Command, Output};

fn ichnos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ichnos"))
        .args(args)
        .output()
        .expect("run ichnos")
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
        &format!("{addr:#x}:20"),
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

    let out = ichnos(&["image", "--elf", "/etc/hostname"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loadable ELF file"));

    let exe = env!("CARGO_BIN_EXE_ichnos");
    let out = ichnos(&["image", "--elf", exe, "--read", "0xffffffff00000000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("0xffffffff00000000"));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(ichnos(&["image", "--no-such-flag"]).status.code(), Some(2));
    assert_eq!(
        ichnos(&["image", "--elf", "x", "-p", "1"]).status.code(),
        Some(2)
    );
    assert_eq!(ichnos(&["image"]).status.code(), Some(1));
}
