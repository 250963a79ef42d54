//! A buffer of whole records, framed by their headers.

use super::{RecordHeader, RecordProblem, HEADER_LEN};

/// The records of a buffer of whole records, in order: each with its
/// offset in the buffer and its bytes.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Records<'a> {
    /// The records in `data`.
    #[must_use]
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }
}

/// A buffer whose records cannot be followed past `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("record framing broken at byte {offset}: {problem}")]
pub struct FramingError {
    /// Where the unreadable record starts.
    pub offset: usize,
    /// What is wrong.
    pub problem: RecordProblem,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<(usize, RecordHeader, &'a [u8]), FramingError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.data.get(self.pos..)?;
        if rest.is_empty() {
            return None;
        }
        let offset = self.pos;
        let fail = |problem| Some(Err(FramingError { offset, problem }));
        let Some(header) = RecordHeader::read(rest) else {
            self.pos = self.data.len();
            return fail(RecordProblem::Truncated {
                field: "header",
                needed: HEADER_LEN as u64,
                left: rest.len(),
            });
        };
        let size = usize::from(header.size);
        if size < HEADER_LEN {
            self.pos = self.data.len();
            return fail(RecordProblem::BadSize { size: header.size });
        }
        let Some(bytes) = rest.get(..size) else {
            self.pos = self.data.len();
            return fail(RecordProblem::Truncated {
                field: "record",
                needed: size as u64,
                left: rest.len(),
            });
        };
        self.pos += size;
        Some(Ok((offset, header, bytes)))
    }
}
