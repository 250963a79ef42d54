//! Writing a recording: records gathered into chunks, each compressed,
//! checksummed and written whole.

use std::io::{self, Write};

use crate::format::{file_header, ChunkHeader, COMPRESSION_NONE, COMPRESSION_ZSTD, MAX_CHUNK_RAW};
use crate::record::Record;
use crate::varint::Cursor;

/// Raw bytes at which a chunk is written (docs: "whenever 1 MiB of records
/// has gathered").
pub const CHUNK_TARGET: usize = 1 << 20;

/// The Zstandard level: fast, and still an order of magnitude on samples.
const ZSTD_LEVEL: i32 = 3;

/// Writes a recording to `W`.
pub struct Writer<W: Write> {
    out: W,
    chunk: Vec<u8>,
    records: u32,
    scratch: Vec<u8>,
    compressed: Vec<u8>,
    compressor: zstd::bulk::Compressor<'static>,
    chunk_target: usize,
    written: u64,
}

impl<W: Write> std::fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("written", &self.written)
            .field("pending", &self.chunk.len())
            .finish_non_exhaustive()
    }
}

impl<W: Write> Writer<W> {
    /// Writes the file header to `out`.
    pub fn new(out: W) -> io::Result<Self> {
        Self::with_chunk_target(out, CHUNK_TARGET)
    }

    /// As [`Writer::new`], compressing at Zstandard level `level` (the
    /// default is 3): level 1 for a recorder whose compressing competes
    /// with the traced program for the CPU.
    pub fn with_level(out: W, level: i32) -> io::Result<Self> {
        Self::build(out, CHUNK_TARGET, level)
    }

    /// As [`Writer::new`], writing a chunk whenever `chunk_target` raw
    /// bytes have gathered (at most 16 MiB).
    pub fn with_chunk_target(out: W, chunk_target: usize) -> io::Result<Self> {
        Self::build(out, chunk_target, ZSTD_LEVEL)
    }

    fn build(mut out: W, chunk_target: usize, level: i32) -> io::Result<Self> {
        let header = file_header();
        out.write_all(&header)?;
        Ok(Self {
            out,
            chunk: Vec::new(),
            records: 0,
            scratch: Vec::new(),
            compressed: Vec::new(),
            compressor: zstd::bulk::Compressor::new(level)?,
            chunk_target: chunk_target.clamp(1, MAX_CHUNK_RAW as usize / 2),
            written: header.len() as u64,
        })
    }

    /// Adds a record.
    pub fn push(&mut self, record: &Record<'_>) -> io::Result<()> {
        record.encode(&mut self.chunk, &mut self.scratch);
        self.records += 1;
        self.flush_if_full()
    }

    /// Adds records already encoded with [`Record::encode`] (whole
    /// records, as a recorder hands them over). Their framing is checked:
    /// a chunk never holds a partial record.
    pub fn push_encoded(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let len = encoded_len(bytes).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "a partial encoded record")
            })?;
            self.chunk.extend_from_slice(&bytes[..len]);
            self.records += 1;
            bytes = &bytes[len..];
            self.flush_if_full()?;
        }
        Ok(())
    }

    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.chunk.len() >= self.chunk_target {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Raw bytes of records not yet written.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.chunk.len()
    }

    /// Bytes written so far.
    #[must_use]
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes the gathered records as one chunk (nothing if there are
    /// none) and flushes the output, so that a reader sees them even if
    /// this process is killed next.
    pub fn flush_chunk(&mut self) -> io::Result<()> {
        if self.records == 0 {
            return self.out.flush();
        }
        let raw_len = u32::try_from(self.chunk.len())
            .ok()
            .filter(|&n| n <= MAX_CHUNK_RAW)
            .ok_or_else(|| io::Error::other("chunk larger than 16 MiB"))?;
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(self.chunk.len()));
        self.compressor
            .compress_to_buffer(&self.chunk, &mut self.compressed)?;
        let (compression, payload) = if self.compressed.len() < self.chunk.len() {
            (COMPRESSION_ZSTD, &self.compressed)
        } else {
            (COMPRESSION_NONE, &self.chunk)
        };
        let mut header = ChunkHeader {
            compression,
            stored_len: payload.len() as u32,
            raw_len,
            records: self.records,
            crc32: 0,
        };
        header.crc32 = header.checksum(payload);
        self.out.write_all(&header.to_bytes())?;
        self.out.write_all(payload)?;
        self.out.flush()?;
        self.written += (header.to_bytes().len() + payload.len()) as u64;
        self.chunk.clear();
        self.records = 0;
        Ok(())
    }

    /// Writes what is gathered and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_chunk()?;
        Ok(self.out)
    }
}

/// The length of the encoded record at the start of `bytes`, if it is
/// whole.
#[must_use]
pub fn encoded_len(bytes: &[u8]) -> Option<usize> {
    let mut c = Cursor::new(bytes.get(1..)?);
    let len = usize::try_from(c.u().ok()?).ok()?;
    let total = 1usize.checked_add(c.pos())?.checked_add(len)?;
    (total <= bytes.len()).then_some(total)
}
