//! The symbol index generator: a fingerprint of the code that makes index
//! answers, so that an index made by other code is not read (its answers
//! may differ; docs/symbol-index.md). It covers this crate's version,
//! every source file under `src/` (its path and its bytes: the object
//! readers, the DWARF and symbol lookups, the demangler and the index
//! writer all live there, and a change to any file of the crate counts,
//! which may remake indexes a change did not need to), and, in the
//! workspace, its Cargo.lock, which pins addr2line, gimli, object and the
//! demanglers. Built outside the workspace there is no lock to read, and
//! the dependencies' versions are not covered. `index/format.rs`
//! continues it, when ichnos runs, over the C++ demangler found then.

use std::path::{Path, PathBuf};

/// The `.rs` files under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let lock = manifest.join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-changed=build.rs");
    // A directory: cargo looks at every file in it.
    println!("cargo:rerun-if-changed=src");
    // FNV-1a: stable across Rust versions, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(
        std::env::var("CARGO_PKG_VERSION")
            .unwrap_or_default()
            .as_bytes(),
    );
    if let Ok(bytes) = std::fs::read(&lock) {
        feed(&bytes);
    }
    let mut files = Vec::new();
    sources(&manifest.join("src"), &mut files);
    files.sort();
    for file in files {
        let relative = file.strip_prefix(&manifest).unwrap_or(&file);
        feed(relative.to_string_lossy().as_bytes());
        feed(&[0]);
        feed(&std::fs::read(&file).unwrap_or_default());
    }
    println!("cargo:rustc-env=ICHNOS_SYMBOL_INDEX_GENERATOR={hash}");
}
