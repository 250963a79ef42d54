//! `libichnos.so` and `libichnos.a` for tests that load or link them (the
//! C ABI tests here, and the profiler's test of a program that loads
//! libichnos late, which includes this file by path).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding `libichnos.so` and `libichnos.a`, freshly built.
///
/// `cargo test` builds `ichnos-capi` only as an rlib for the test
/// binaries, so the C libraries are built here by a nested cargo, into a
/// target directory of their own under the workspace's test directory
/// (no lock shared with the outer cargo; one build for every test binary
/// of the workspace).
pub fn lib_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-target");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "ichnos-capi",
                    "--lib",
                    "--target-dir",
                ])
                .arg(&target)
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
                .status()
                .expect("run cargo build -p ichnos-capi");
            assert!(status.success(), "building libichnos failed");
            target.join("debug")
        })
        .clone()
}
