//! The symbol index generator: a fingerprint of the code that makes index
//! answers (this crate's version and, in the workspace, its Cargo.lock,
//! which pins addr2line, gimli and the demanglers). An index made by other
//! code is not read, since its answers may differ (docs/symbol-index.md).

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let lock = std::path::Path::new(&manifest).join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-changed=build.rs");
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
    println!("cargo:rustc-env=ICHNOS_SYMBOL_INDEX_GENERATOR={hash}");
}
