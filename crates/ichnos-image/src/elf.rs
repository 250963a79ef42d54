//! Loading an ELF file's `PT_LOAD` segments into an image.

use std::path::Path;

use object::elf::PT_LOAD;
use object::read::elf::{FileHeader, ProgramHeader};
use object::read::ReadCache;
use object::{FileKind, ReadRef};

use crate::error::{Error, Result};
use crate::{Asid, Image, SectionCache};

/// One loadable segment: `filesz` bytes at `offset` of the file, at `vaddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    /// File offset.
    pub offset: u64,
    /// Bytes that come from the file (`p_filesz`).
    pub filesz: u64,
    /// Address with the load bias applied.
    pub vaddr: u64,
}

/// The address the file byte at `offset` is loaded at: where one of
/// `segments` (as [`load_segments`] gives them) holds it.
#[must_use]
pub fn vaddr_of_file_offset(segments: &[LoadSegment], offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| (s.offset..s.offset.saturating_add(s.filesz)).contains(&offset))
        .map(|s| s.vaddr.wrapping_add(offset - s.offset))
}

/// The file-backed `PT_LOAD` segments of the ELF file at `path`, placed at
/// their addresses plus `load_bias`. Only the headers are read.
pub fn load_segments(path: &Path, load_bias: u64) -> Result<Vec<LoadSegment>> {
    let file = crate::loader::open_regular(path).map_err(|source| Error::File {
        path: path.to_owned(),
        op: "open",
        source,
    })?;
    let data = ReadCache::new(file);
    segments_of(path, &data, load_bias)
}

/// Like [`load_segments`], for an ELF file already in memory (`path` only
/// names it in errors).
pub fn load_segments_from_bytes(
    path: &Path,
    bytes: &[u8],
    load_bias: u64,
) -> Result<Vec<LoadSegment>> {
    segments_of(path, bytes, load_bias)
}

fn segments_of<'data, R: ReadRef<'data>>(
    path: &Path,
    data: R,
    load_bias: u64,
) -> Result<Vec<LoadSegment>> {
    let bad = |reason: String| Error::BadElf {
        path: path.to_owned(),
        reason,
    };
    let kind = FileKind::parse(data).map_err(|e| bad(e.to_string()))?;
    let raw = match kind {
        FileKind::Elf32 => segments::<object::elf::FileHeader32<object::Endianness>, _>(data),
        FileKind::Elf64 => segments::<object::elf::FileHeader64<object::Endianness>, _>(data),
        other => return Err(bad(format!("file kind is {other:?}"))),
    }
    .map_err(|e| bad(e.to_string()))?;
    raw.into_iter()
        .map(|(offset, filesz, vaddr)| {
            let vaddr = vaddr.checked_add(load_bias).ok_or(Error::BiasOverflow {
                vaddr,
                bias: load_bias,
            })?;
            Ok(LoadSegment {
                offset,
                filesz,
                vaddr,
            })
        })
        .collect()
}

fn segments<'data, H: FileHeader, R: ReadRef<'data>>(
    data: R,
) -> object::Result<Vec<(u64, u64, u64)>> {
    let header = H::parse(data)?;
    let endian = header.endian()?;
    Ok(header
        .program_headers(endian, data)?
        .iter()
        .filter(|ph| ph.p_type(endian) == PT_LOAD && ph.p_filesz(endian).into() > 0)
        .map(|ph| {
            (
                ph.p_offset(endian).into(),
                ph.p_filesz(endian).into(),
                ph.p_vaddr(endian).into(),
            )
        })
        .collect())
}

impl Image {
    /// Adds the `PT_LOAD` segments of the ELF file at `path`, shifted by
    /// `load_bias` (the address the file is loaded at, for a position-
    /// independent file), in `asid`. Returns the number of segments added.
    /// Nothing is added when the headers cannot be read; when adding a
    /// segment fails, the segments before it stay added.
    pub fn add_elf(&mut self, path: impl AsRef<Path>, load_bias: u64, asid: Asid) -> Result<usize> {
        let path = path.as_ref();
        let segments = load_segments(path, load_bias)?;
        for s in &segments {
            self.add_file(path, s.offset, s.filesz, asid, s.vaddr)?;
        }
        Ok(segments.len())
    }

    /// Like [`add_elf`](Self::add_elf), through `cache`, so that the segments
    /// are mapped once for every image that adds them this way.
    pub fn add_elf_cached(
        &mut self,
        cache: &SectionCache,
        path: impl AsRef<Path>,
        load_bias: u64,
        asid: Asid,
    ) -> Result<usize> {
        let path = path.as_ref();
        let segments = load_segments(path, load_bias)?;
        for s in &segments {
            let isid = cache.add_file(path, s.offset, s.filesz, s.vaddr)?;
            self.add_cached(cache, isid, asid)?;
        }
        Ok(segments.len())
    }
}
