//! Reading a recording chunk by chunk, every check before any record is
//! handed out.

use std::io::{self, Read, Seek, SeekFrom};

use crate::error::ReadError;
use crate::format::{
    ChunkHeader, CHUNK_HEADER_LEN, CHUNK_MAGIC, COMPRESSION_NONE, COMPRESSION_ZSTD, HEADER_LEN,
    MAGIC, MAX_CHUNK_RAW, VERSION,
};
use crate::record::{decode, Record};
use crate::varint::Cursor;

/// Largest file header accepted (`header_len`).
const MAX_HEADER_LEN: u32 = 1 << 16;

/// Reads a recording from `R`.
#[derive(Debug)]
pub struct Reader<R: Read> {
    input: R,
    offset: u64,
    stored: Vec<u8>,
    done: bool,
    /// A seek named the next chunk's offset: a chunk must be there.
    sought: bool,
}

/// One chunk's records, decompressed and checked.
#[derive(Clone, Debug)]
pub struct Chunk {
    offset: u64,
    raw: Vec<u8>,
    records: u32,
}

impl Chunk {
    /// The chunk's offset in the file.
    #[must_use]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many records it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records as usize
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Its records, in order.
    pub fn records(&self) -> impl Iterator<Item = Result<Record<'_>, ReadError>> + '_ {
        let mut pos = 0usize;
        let chunk = self.offset;
        std::iter::from_fn(move || {
            if pos >= self.raw.len() {
                return None;
            }
            let at = pos;
            let result = record_at(&self.raw, at).map(|(record, next)| {
                pos = next;
                record
            });
            if result.is_err() {
                pos = self.raw.len();
            }
            Some(result.map_err(|(problem, kind)| ReadError::BadRecord {
                chunk,
                offset: at,
                kind,
                problem,
            }))
        })
    }
}

/// The record at `at` and where the next one starts.
fn record_at(raw: &[u8], at: usize) -> Result<(Record<'_>, usize), (crate::BodyError, u8)> {
    let kind = raw[at];
    let mut c = Cursor::new(&raw[at + 1..]);
    let truncated = (
        crate::BodyError::Truncated {
            field: "record length",
        },
        kind,
    );
    let len = c.u().map_err(|_| truncated)?;
    let start = at + 1 + c.pos();
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| start.checked_add(len))
        .filter(|&end| end <= raw.len())
        .ok_or(truncated)?;
    let record = decode(kind, &raw[start..end]).map_err(|e| (e, kind))?;
    Ok((record, end))
}

impl<R: Read> Reader<R> {
    /// Reads and checks the file header.
    pub fn new(mut input: R) -> Result<Self, ReadError> {
        let mut header = [0u8; HEADER_LEN as usize];
        let n = read_full(&mut input, &mut header)?;
        if n == 0 {
            return Err(ReadError::EmptyFile);
        }
        if n >= MAGIC.len() && header[..MAGIC.len()] == MAGIC && n < header.len() {
            return Err(ReadError::TruncatedHeader {
                needed: HEADER_LEN.into(),
                found: n as u64,
            });
        }
        if n < header.len() || header[..8] != MAGIC {
            return Err(ReadError::NotARecording {
                found: header[..n.min(8)].to_vec(),
            });
        }
        let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if version != VERSION {
            return Err(ReadError::UnsupportedVersion { version });
        }
        let header_len = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        if !(HEADER_LEN..=MAX_HEADER_LEN).contains(&header_len) {
            return Err(ReadError::BadHeader {
                field: "header_len",
                value: u64::from(header_len),
            });
        }
        let mut rest = vec![0u8; (header_len - HEADER_LEN) as usize];
        let found = read_full(&mut input, &mut rest)?;
        if found < rest.len() {
            return Err(ReadError::TruncatedHeader {
                needed: u64::from(header_len),
                found: u64::from(HEADER_LEN) + found as u64,
            });
        }
        // The header is outside every checksum. A longer header's added
        // bytes never begin as a chunk does, so a chunk at byte 32 means
        // `header_len` was damaged, not lengthened.
        if rest.starts_with(&CHUNK_MAGIC) {
            return Err(ReadError::HeaderSkipsChunks { header_len });
        }
        Ok(Self {
            input,
            offset: u64::from(header_len),
            stored: Vec::new(),
            done: false,
            sought: false,
        })
    }

    /// The offset of the next chunk.
    #[must_use]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next chunk; `None` at the end of the file. A file that ends
    /// inside a chunk gives [`ReadError::Truncated`] (with the chunk's
    /// offset) once, then `None`.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let offset = self.offset;
        let sought = std::mem::take(&mut self.sought);
        let mut h = [0u8; CHUNK_HEADER_LEN];
        let n = read_full(&mut self.input, &mut h)?;
        if n == 0 && !sought {
            self.done = true;
            return Ok(None);
        }
        if n < h.len() {
            self.done = true;
            return Err(ReadError::Truncated {
                offset,
                needed: CHUNK_HEADER_LEN as u64,
            });
        }
        // From here on, any failure ends the reading.
        self.done = true;
        if h[..4] != CHUNK_MAGIC {
            return Err(ReadError::BadChunk {
                offset,
                problem: crate::ChunkProblem::Magic,
            });
        }
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let header = ChunkHeader {
            compression: h[4],
            stored_len: word(8),
            raw_len: word(12),
            records: word(16),
            crc32: word(20),
        };
        let bad = |problem| ReadError::BadChunk { offset, problem };
        if header.raw_len > MAX_CHUNK_RAW {
            return Err(bad(crate::ChunkProblem::TooLarge {
                raw_len: header.raw_len,
            }));
        }
        // A stored payload is never larger than its raw bytes plus
        // Zstandard's bound on expansion.
        let bound = zstd::zstd_safe::compress_bound(header.raw_len as usize) as u64 + 64;
        if u64::from(header.stored_len) > bound {
            return Err(bad(crate::ChunkProblem::TooLarge {
                raw_len: header.stored_len,
            }));
        }
        self.stored.resize(header.stored_len as usize, 0);
        if read_full(&mut self.input, &mut self.stored)? < self.stored.len() {
            return Err(ReadError::Truncated {
                offset,
                needed: CHUNK_HEADER_LEN as u64 + u64::from(header.stored_len),
            });
        }
        // Over the header bytes as they are (reserved ones included).
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[..20]);
        crc.update(&self.stored);
        let computed = crc.finalize();
        if computed != header.crc32 {
            return Err(bad(crate::ChunkProblem::Checksum {
                stored: header.crc32,
                computed,
            }));
        }
        let raw = payload(&header, &mut self.stored).map_err(bad)?;
        let chunk = Chunk {
            offset,
            raw,
            records: header.records,
        };
        // Frame every record now: a chunk is sound whole, or not at all.
        let mut count = 0u64;
        for r in chunk.records() {
            r?;
            count += 1;
        }
        if count != u64::from(header.records) {
            return Err(bad(crate::ChunkProblem::RecordCount {
                expected: header.records,
                got: count,
            }));
        }
        self.offset += CHUNK_HEADER_LEN as u64 + u64::from(header.stored_len);
        self.done = false;
        Ok(Some(chunk))
    }
}

impl<R: Read + Seek> Reader<R> {
    /// Goes to the chunk at `offset` (one [`Chunk::offset`] gave): the
    /// next [`Reader::next_chunk`] reads it, and the chunks after it.
    /// An offset that is not a chunk's start gives that call's error,
    /// naming the offset; one at or past the end of the file gives
    /// [`ReadError::Truncated`], not the end.
    pub fn seek_chunk(&mut self, offset: u64) -> Result<(), ReadError> {
        self.input
            .seek(SeekFrom::Start(offset))
            .map_err(|source| ReadError::Io { source })?;
        self.offset = offset;
        self.done = false;
        self.sought = true;
        Ok(())
    }
}

/// The decompressed payload of a chunk whose stored bytes are `stored`
/// (taken when stored as is).
fn payload(header: &ChunkHeader, stored: &mut Vec<u8>) -> Result<Vec<u8>, crate::ChunkProblem> {
    let raw = match header.compression {
        COMPRESSION_NONE => std::mem::take(stored),
        COMPRESSION_ZSTD => zstd::bulk::decompress(stored, header.raw_len as usize)
            .map_err(|e| crate::ChunkProblem::Decompress(e.kind()))?,
        other => return Err(crate::ChunkProblem::Compression(other)),
    };
    if raw.len() == header.raw_len as usize {
        Ok(raw)
    } else {
        Err(crate::ChunkProblem::Length {
            expected: header.raw_len,
            got: raw.len(),
        })
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, ReadError> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ReadError::Io { source }),
        }
    }
    Ok(n)
}
