//! Where a report goes: a file (`-o`) or standard output, with every
//! write's failure naming it.

use std::io::{self, Write};

/// A writer whose errors say what was being written: `cannot write
/// /dev/full: No space left on device`, where the error alone named
/// nothing. The error's kind is kept (a closed pipe stays a broken pipe,
/// which the command line ends quietly on).
pub(super) struct Named<W> {
    inner: W,
    name: String,
}

impl<W: Write> Named<W> {
    /// `inner`, written as `name` (a path, or "standard output").
    pub(super) fn new(inner: W, name: String) -> Named<W> {
        Named { inner, name }
    }

    fn named(&self, e: &io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("cannot write {}: {e}", self.name))
    }
}

impl<W: Write> Write for Named<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.named(&e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.named(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_names_what_was_written_and_keeps_its_kind() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut out = Named::new(io::BufWriter::new(full), "/dev/full".to_owned());
        let _ = out.write(b"report");
        let e = out.flush().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(
            e.to_string()
                .starts_with("cannot write /dev/full: No space left on device"),
            "{e}"
        );
    }
}
