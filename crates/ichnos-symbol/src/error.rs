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
    #[error("{path}: not a readable ELF file")]
    BadObject {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: object::Error,
    },
    /// The DWARF of the file could not be read.
    #[error("{path}: bad DWARF")]
    BadDwarf {
        /// The file holding the DWARF.
        path: PathBuf,
        /// What gimli said.
        source: gimli::Error,
    },
    /// A process's `/proc/PID/maps` could not be parsed.
    #[error("cannot read the mappings of process {pid}")]
    BadMaps {
        /// The process.
        pid: u32,
        /// What was wrong, and on which line.
        source: ichnos_image::Error,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_says_each_cause_once() {
        let e = SymbolError::BadMaps {
            pid: 7,
            source: ichnos_image::parse_maps(7, "zz").unwrap_err(),
        };
        let text = ichnos_image::error_chain(&e);
        assert!(
            text.starts_with("cannot read the mappings of process 7: "),
            "{text}"
        );
        assert!(text.contains("line 1"), "{text}");
        let io = SymbolError::Io {
            path: PathBuf::from("/x"),
            source: std::io::Error::from_raw_os_error(2),
        };
        assert_eq!(
            ichnos_image::error_chain(&io),
            "/x: No such file or directory (os error 2)"
        );
    }
}
