//! Writing a recording: records gathered into chunks, each compressed,
//! checksummed and written whole.

use std::io::{self, Write};

use crate::format::{file_header, ChunkHeader, COMPRESSION_NONE, COMPRESSION_ZSTD, MAX_CHUNK_RAW};
use crate::record::Record;
use crate::varint::Cursor;

mod thread;

use thread::ChunkThread;

/// Raw bytes at which a chunk is written (docs: "whenever 1 MiB of records
/// has gathered").
pub const CHUNK_TARGET: usize = 1 << 20;

/// The Zstandard level: fast, and still an order of magnitude on samples.
const ZSTD_LEVEL: i32 = 3;

/// Writes a recording to `W`.
pub struct Writer<W: Write> {
    sink: Sink<W>,
    chunk: Vec<u8>,
    records: u32,
    scratch: Vec<u8>,
    chunk_target: usize,
}

/// Where a gathered chunk goes.
enum Sink<W: Write> {
    /// Compressed and written by the caller as it is full.
    Here(ChunkOut<W>),
    /// Handed to a thread of its own that compresses and writes it
    /// ([`Writer::compressing_on_a_thread`]).
    Thread(ChunkThread<W>),
}

impl<W: Write> std::fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("written", &self.written())
            .field("pending", &self.chunk.len())
            .field("threaded", &matches!(self.sink, Sink::Thread(_)))
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
            sink: Sink::Here(ChunkOut {
                out,
                compressor: zstd::bulk::Compressor::new(level)?,
                compressed: Vec::new(),
                written: header.len() as u64,
            }),
            chunk: Vec::new(),
            records: 0,
            scratch: Vec::new(),
            chunk_target: chunk_target.clamp(1, MAX_CHUNK_RAW as usize / 2),
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
            self.write_chunk(false)?;
        }
        Ok(())
    }

    /// Raw bytes of records not yet written (on a thread of its own,
    /// those gathered here, not those handed to it).
    #[must_use]
    pub fn pending(&self) -> usize {
        self.chunk.len()
    }

    /// Bytes written so far (on a thread of its own, as far as it got).
    #[must_use]
    pub fn written(&self) -> u64 {
        match &self.sink {
            Sink::Here(out) => out.written,
            Sink::Thread(thread) => thread.written(),
        }
    }

    /// Writes the gathered records as one chunk (nothing if there are
    /// none) and flushes the output, so that a reader sees them even if
    /// this process is killed next (on a thread of its own, waiting for
    /// it to have written every chunk handed to it).
    pub fn flush_chunk(&mut self) -> io::Result<()> {
        self.write_chunk(true)
    }

    /// Writes the gathered records as one chunk, and with `flush` flushes
    /// the output (and waits for a thread of its own to have).
    fn write_chunk(&mut self, flush: bool) -> io::Result<()> {
        if self.records > 0 {
            let raw_len = u32::try_from(self.chunk.len())
                .ok()
                .filter(|&n| n <= MAX_CHUNK_RAW)
                .ok_or_else(|| io::Error::other("chunk larger than 16 MiB"))?;
            match &mut self.sink {
                Sink::Here(out) => {
                    out.write_chunk(&self.chunk, raw_len, self.records)?;
                    self.chunk.clear();
                    self.records = 0;
                }
                Sink::Thread(thread) => {
                    // Handed over whole, or (the thread stopped) gone.
                    let next = thread.spare_buffer(self.chunk.capacity());
                    let full = std::mem::replace(&mut self.chunk, next);
                    thread.hand_over(full, std::mem::take(&mut self.records))?;
                }
            }
        } else if !flush {
            return Ok(());
        }
        match &mut self.sink {
            Sink::Here(out) => out.out.flush(),
            Sink::Thread(thread) if flush => thread.flush(),
            Sink::Thread(_) => Ok(()),
        }
    }

    /// Writes what is gathered and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_chunk()?;
        match self.sink {
            Sink::Here(out) => Ok(out.out),
            Sink::Thread(thread) => thread.finish(),
        }
    }
}

impl<W: Write + Send + 'static> Writer<W> {
    /// Compresses and writes each chunk on a thread of its own, so that
    /// the caller goes on gathering the next meanwhile: for a recorder
    /// whose compressing is half its work (the function tracer's), where
    /// the machine has a CPU to spare. The bytes written are those the
    /// caller would have written; at most two chunks wait for the thread
    /// (the caller waits for room past that). An error of the thread's
    /// writing is returned by the next call that hands it a chunk, or by
    /// [`Writer::flush_chunk`] or [`Writer::finish`]. Where the thread
    /// cannot be started, the writer goes on compressing itself.
    #[must_use]
    pub fn compressing_on_a_thread(self) -> Self {
        let Writer {
            sink,
            chunk,
            records,
            scratch,
            chunk_target,
        } = self;
        let sink = match sink {
            Sink::Here(out) => match ChunkThread::start(out) {
                Ok(thread) => Sink::Thread(thread),
                Err(out) => Sink::Here(out),
            },
            threaded @ Sink::Thread(_) => threaded,
        };
        Writer {
            sink,
            chunk,
            records,
            scratch,
            chunk_target,
        }
    }
}

/// Compresses chunks and writes them to `out`.
pub(crate) struct ChunkOut<W> {
    pub(crate) out: W,
    compressor: zstd::bulk::Compressor<'static>,
    compressed: Vec<u8>,
    /// Bytes written, the file header's included.
    pub(crate) written: u64,
}

impl<W: Write> ChunkOut<W> {
    /// Writes the `records` records of `raw` (`raw_len` bytes) as one
    /// chunk: compressed where that makes it smaller, checksummed.
    pub(crate) fn write_chunk(&mut self, raw: &[u8], raw_len: u32, records: u32) -> io::Result<()> {
        self.compressed.clear();
        self.compressed
            .reserve(zstd::zstd_safe::compress_bound(raw.len()));
        self.compressor
            .compress_to_buffer(raw, &mut self.compressed)?;
        let (compression, payload): (u8, &[u8]) = if self.compressed.len() < raw.len() {
            (COMPRESSION_ZSTD, &self.compressed)
        } else {
            (COMPRESSION_NONE, raw)
        };
        let mut header = ChunkHeader {
            compression,
            stored_len: payload.len() as u32,
            raw_len,
            records,
            crc32: 0,
        };
        header.crc32 = header.checksum(payload);
        self.out.write_all(&header.to_bytes())?;
        self.out.write_all(payload)?;
        self.written += (header.to_bytes().len() + payload.len()) as u64;
        Ok(())
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
