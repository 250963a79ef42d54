//! The fixed parts of the file: header and chunk header
//! (`docs/recording-format.md`).

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"ICHNOSRC";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Bytes of the file header this crate writes.
pub const HEADER_LEN: u32 = 32;
/// A chunk header's first four bytes.
pub const CHUNK_MAGIC: [u8; 4] = *b"CHNK";
/// Bytes of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 24;
/// Largest decompressed payload of one chunk.
pub const MAX_CHUNK_RAW: u32 = 16 << 20;
/// `compression`: stored as is.
pub const COMPRESSION_NONE: u8 = 0;
/// `compression`: one Zstandard frame.
pub const COMPRESSION_ZSTD: u8 = 1;

/// The file header.
#[must_use]
pub fn file_header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&HEADER_LEN.to_le_bytes());
    h
}

/// A chunk header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// `COMPRESSION_*`.
    pub compression: u8,
    /// Bytes of payload as stored.
    pub stored_len: u32,
    /// Bytes once decompressed.
    pub raw_len: u32,
    /// Records in the payload.
    pub records: u32,
    /// CRC-32 of header bytes 0–19 and the stored payload.
    pub crc32: u32,
}

impl ChunkHeader {
    /// The header's bytes 0–19 (everything the checksum covers of it).
    #[must_use]
    pub fn covered_bytes(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&CHUNK_MAGIC);
        b[4] = self.compression;
        b[8..12].copy_from_slice(&self.stored_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.raw_len.to_le_bytes());
        b[16..20].copy_from_slice(&self.records.to_le_bytes());
        b
    }

    /// The whole 24-byte header.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[..20].copy_from_slice(&self.covered_bytes());
        b[20..].copy_from_slice(&self.crc32.to_le_bytes());
        b
    }

    /// The checksum of this header with `payload`.
    #[must_use]
    pub fn checksum(&self, payload: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&self.covered_bytes());
        h.update(payload);
        h.finalize()
    }
}
