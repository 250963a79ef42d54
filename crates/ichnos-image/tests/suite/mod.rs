//! Black-box tests, ported from libipt's ptunit suites where they apply.

mod bad_input;
mod cache;
mod image;
mod loaders;
mod model;
mod stress;
mod untrusted;

use std::path::PathBuf;

/// A scratch directory with helpers to write files into it.
pub struct Files {
    pub dir: tempfile::TempDir,
}

impl Files {
    pub fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes `bytes` to a new file `name` and returns its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// A file of `n` bytes with values `0, 1, 2, ...` (mod 256).
    pub fn counting(&self, name: &str, n: usize) -> PathBuf {
        let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
        self.write(name, &bytes)
    }

    /// libipt's ptunit-image mock section: 16 bytes `00..0f` at file offset 0x10.
    pub fn mock_section(&self, name: &str) -> PathBuf {
        let mut bytes = vec![0xffu8; 0x10];
        bytes.extend(0u8..0x10);
        self.write(name, &bytes)
    }
}
