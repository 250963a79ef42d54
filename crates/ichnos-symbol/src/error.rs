//! What can go wrong when symbolizing.

use std::path::PathBuf;

/// Why an object could not be symbolized.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymbolError {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file was cut short while it was mapped and read: what was read
    /// past its new end was zeros, not the file.
    #[error("{path}: the file was cut short while it was read (truncated under its mapping)")]
    FileChanged {
        /// The file.
        path: PathBuf,
    },
    /// The file is not an ELF object this crate reads.
    #[error("{path}: not a readable ELF file: {detail}")]
    BadObject {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// The DWARF of the file could not be read.
    #[error("{path}: bad DWARF: {detail}")]
    BadDwarf {
        /// The file holding the DWARF.
        path: PathBuf,
        /// What gimli said.
        detail: String,
    },
    /// A symbol index file that is not one, or is damaged.
    #[error("{path}: bad symbol index at offset {offset:#x}: {detail}")]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
    /// An object that is not indexed, and why.
    #[error("{path}: not indexed: {reason}")]
    NotIndexed {
        /// The object file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
