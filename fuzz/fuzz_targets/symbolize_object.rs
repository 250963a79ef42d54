//! An object file from anywhere (a profiled process's libraries, a debug
//! directory, a build id lookup): symbol tables, `.gnu_debuglink`,
//! MiniDebugInfo and DWARF (lines, inlined functions, names across units)
//! parsed and looked up. Answers or errors, never a panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use ichnos_symbol::{Symbolizer, SymbolizerOptions};

/// A directory of this process's own, holding the file under test and
/// nothing for debug-file lookups to find.
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ichnos-fuzz-symbolize-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("debug")).unwrap();
        dir
    })
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = scratch().join("object");
    std::fs::write(&path, data).unwrap();
    let symbolizer = Symbolizer::new(SymbolizerOptions {
        debug_dirs: vec![scratch().join("debug")],
        ..SymbolizerOptions::default()
    });
    // The entry point, addresses around it, and a few the input names at
    // its end: enough to reach the symbol tables and the DWARF lookups.
    let entry = u64_at(data, 24).unwrap_or(0);
    let mut addrs = vec![0, entry, entry.wrapping_add(1), entry.wrapping_add(0x40), entry.wrapping_sub(0x10)];
    for i in 1..=4 {
        if let Some(a) = data.len().checked_sub(8 * i).and_then(|at| u64_at(data, at)) {
            addrs.push(a & 0xffff_ffff);
        }
    }
    let _ = symbolizer.symbolize_file(&path, &addrs);
});
