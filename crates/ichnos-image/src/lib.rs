//! Memory images of traced programs, re-creating libipt's image section cache
//! (`pt_iscache_*`) and images (`pt_image_*`).
//!
//! A trace decoder or an unwinder needs the bytes a program had at an address
//! in one of its address spaces. An [`Image`] answers that: it is a set of
//! *sections* — ranges of files such as executables and shared libraries —
//! placed at virtual addresses in address spaces named by an [`Asid`]. A
//! [`SectionCache`] sits beside the images: it de-duplicates sections, names
//! each `(file range, load address)` by an [`Isid`], and keeps each file
//! range mapped once, whatever number of images, threads and decoders read
//! it, under an optional least-recently-used bound on mapped bytes.
//!
//! The semantics are libipt's, tested against its unit suites: the section
//! added last wins where sections overlap and the older ones are shrunk or
//! split but keep their isid; an unknown `Asid` field matches everything; a
//! read returns the bytes up to the end of one section. Where libipt has a
//! known defect (copying an image that holds split sections) this crate does
//! what libipt documents instead.
//!
//! ```
//! use ichnos_image::{Asid, Image, SectionCache};
//! # fn main() -> Result<(), ichnos_image::Error> {
//! # let dir = std::env::temp_dir().join(format!("ichnos-image-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! # let path = dir.join("code.bin");
//! std::fs::write(&path, [0x55, 0x48, 0x89, 0xe5, 0xc3]).unwrap();
//!
//! let cache = SectionCache::new(Some("session"));
//! let isid = cache.add_file(&path, 0, 5, 0x40_1000)?;
//!
//! let mut image = Image::new(Some("process 42"));
//! image.add_cached(&cache, isid, Asid::ANY)?;
//!
//! let mut buf = [0u8; 8];
//! let read = image.read(&Asid::ANY, 0x40_1003, &mut buf)?;
//! assert_eq!(&buf[..read.len], &[0xe5, 0xc3]); // cut at the section's end
//! assert_eq!(read.isid, Some(isid));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok(())
//! # }
//! ```

mod asid;
mod cache;
mod elf;
mod error;
pub mod guarded_map;
mod image;
mod loader;
mod process;
mod section;

pub use asid::Asid;
pub use cache::{CacheStats, CachedSection, Isid, SectionCache};
pub use elf::{load_segments, load_segments_from_bytes, vaddr_of_file_offset, LoadSegment};
pub use error::{error_chain, Error, ErrorKind, FileChange, Result};
pub use guarded_map::GuardedMap;
pub use image::{Image, ImageSection, ReadCallback, ReadOutcome};
pub use loader::open_regular;
pub use process::{parse_maps, MapsEntry, ProcessImage, SkippedMapping};
