//! Building an image from a live process's mappings (`/proc/PID/maps`).

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::{Asid, Image, SectionCache};

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// The address range.
    pub range: Range<u64>,
    /// Permission letters, e.g. `r-xp`.
    pub perms: String,
    /// Offset into the file.
    pub offset: u64,
    /// Inode number, 0 for anonymous memory.
    pub inode: u64,
    /// The path or pseudo-name (`[vdso]`, `[stack]`); empty for anonymous memory.
    pub name: String,
}

impl MapsEntry {
    /// Whether the mapping is executable.
    #[must_use]
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    fn readable(&self) -> bool {
        self.perms.as_bytes().first() == Some(&b'r')
    }

    /// Whether the mapped file was deleted (or replaced) since it was
    /// mapped: the kernel names it ` (deleted)`.
    #[must_use]
    pub fn deleted(&self) -> bool {
        self.name.starts_with('/') && self.name.ends_with(" (deleted)")
    }

    /// A path that reads the file this mapping of process `pid` maps,
    /// for a file that is gone from its directory ([`MapsEntry::deleted`]):
    /// the process's own link to the mapping, `/proc/PID/map_files/START-END`,
    /// which only root (or `CAP_CHECKPOINT_RESTORE`) may open; else, when
    /// the mapping is of the process's executable, `/proc/PID/exe`, which
    /// any user who may trace the process may open. When neither opens,
    /// the map-files link, whose error says why.
    #[must_use]
    pub fn deleted_file_link(&self, pid: u32) -> PathBuf {
        let map_files = PathBuf::from(format!(
            "/proc/{pid}/map_files/{:x}-{:x}",
            self.range.start, self.range.end
        ));
        if std::fs::metadata(&map_files).is_ok() {
            return map_files;
        }
        let exe = PathBuf::from(format!("/proc/{pid}/exe"));
        // The executable's link reads as the mapping is named, and it is
        // the same file: the same inode.
        let same = std::fs::read_link(&exe).is_ok_and(|t| t.as_os_str() == self.name.as_str())
            && std::fs::metadata(&exe)
                .is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == self.inode);
        if same {
            exe
        } else {
            map_files
        }
    }
}

/// Parses the text of a `/proc/PID/maps` file.
pub fn parse_maps(pid: u32, text: &str) -> Result<Vec<MapsEntry>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let bad = |reason| Error::BadProcMaps {
                pid,
                line: i + 1,
                reason,
            };
            let mut rest = line;
            let mut field = || {
                rest = rest.trim_start();
                let end = rest.find(' ').unwrap_or(rest.len());
                let (f, r) = rest.split_at(end);
                rest = r;
                f
            };
            let (range, perms, offset, _dev, inode) = (field(), field(), field(), field(), field());
            let (start, end) = range
                .split_once('-')
                .ok_or(bad("address range has no '-'"))?;
            let hex = |s: &str, what| u64::from_str_radix(s, 16).map_err(|_| bad(what));
            let range = hex(start, "bad start address")?..hex(end, "bad end address")?;
            if range.start >= range.end {
                return Err(bad("empty or inverted address range"));
            }
            if perms.len() != 4 {
                return Err(bad("permissions are not 4 letters"));
            }
            Ok(MapsEntry {
                range,
                perms: perms.to_owned(),
                offset: hex(offset, "bad file offset")?,
                inode: inode.parse().map_err(|_| bad("bad inode number"))?,
                name: rest.trim_start().to_owned(),
            })
        })
        .collect()
}

/// A mapping that [`Image::from_proc_maps`] did not add, and why.
#[derive(Debug)]
pub struct SkippedMapping {
    /// The mapping.
    pub entry: MapsEntry,
    /// Why it was not added.
    pub reason: Error,
}

/// An image of a live process, with what could not be put in it.
#[derive(Debug)]
pub struct ProcessImage {
    /// The image: file-backed mappings as sections, and the vDSO and
    /// anonymous executable memory through the read callback.
    pub image: Image,
    /// Address ranges served from the process's memory by the callback.
    pub live_ranges: Vec<Range<u64>>,
    /// Mappings that were neither added nor served, with the reason.
    pub skipped: Vec<SkippedMapping>,
}

impl Image {
    /// Builds an image of process `pid` from `/proc/PID/maps`: each readable
    /// file-backed mapping becomes a section (in [`Asid::ANY`]); the vDSO,
    /// anonymous executable memory and executable mappings of deleted files
    /// are read from `/proc/PID/mem` by the image's callback.
    pub fn from_proc_maps(pid: u32) -> Result<ProcessImage> {
        build(pid, None)
    }

    /// Like [`from_proc_maps`](Self::from_proc_maps), with the file-backed
    /// mappings added through `cache`.
    pub fn from_proc_maps_cached(pid: u32, cache: &SectionCache) -> Result<ProcessImage> {
        build(pid, Some(cache))
    }
}

fn build(pid: u32, cache: Option<&SectionCache>) -> Result<ProcessImage> {
    let maps_path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&maps_path).map_err(|source| Error::File {
        path: maps_path,
        op: "read",
        source,
    })?;
    let mut image = Image::new(Some(&format!("pid {pid}")));
    let mut live = Vec::new();
    let mut skipped = Vec::new();
    for entry in parse_maps(pid, &text)? {
        if !entry.readable() {
            continue;
        }
        let deleted = entry.name.ends_with(" (deleted)");
        if entry.name.starts_with('/') && !deleted {
            let size = entry.range.end - entry.range.start;
            let added = match cache {
                Some(cache) => cache
                    .add_file(&entry.name, entry.offset, size, entry.range.start)
                    .and_then(|isid| image.add_cached(cache, isid, Asid::ANY)),
                None => image.add_file(
                    &entry.name,
                    entry.offset,
                    size,
                    Asid::ANY,
                    entry.range.start,
                ),
            };
            if let Err(reason) = added {
                skipped.push(SkippedMapping { entry, reason });
            }
        } else if entry.executable() && (entry.name.is_empty() || entry.name == "[vdso]" || deleted)
        {
            live.push(entry.range.clone());
        }
    }
    if !live.is_empty() {
        let mem_path = PathBuf::from(format!("/proc/{pid}/mem"));
        match File::open(&mem_path) {
            Ok(mem) => image.set_callback(Some(Box::new(live_reader(pid, mem, live.clone())))),
            Err(source) => {
                let message = source.to_string();
                for range in live.drain(..) {
                    skipped.push(SkippedMapping {
                        entry: MapsEntry {
                            range: range.clone(),
                            perms: String::new(),
                            offset: 0,
                            inode: 0,
                            name: String::new(),
                        },
                        reason: Error::ProcessMemory {
                            pid,
                            vaddr: range.start,
                            len: 0,
                            source: std::io::Error::new(source.kind(), message.clone()),
                        },
                    });
                }
            }
        }
    }
    Ok(ProcessImage {
        image,
        live_ranges: live,
        skipped,
    })
}

/// Reads `ranges` of the process's memory and nothing else, so that the
/// callback never invents bytes for addresses the process does not map as code.
fn live_reader(
    pid: u32,
    mem: File,
    ranges: Vec<Range<u64>>,
) -> impl FnMut(&mut [u8], &Asid, u64) -> Result<usize> + Send {
    move |buf, asid, vaddr| {
        let Some(range) = ranges.iter().find(|r| r.contains(&vaddr)) else {
            return Err(Error::NoMapping { asid: *asid, vaddr });
        };
        let want = buf.len().min((range.end - vaddr) as usize);
        mem.read_at(&mut buf[..want], vaddr)
            .map_err(|source| Error::ProcessMemory {
                pid,
                vaddr,
                len: want,
                source,
            })
            .and_then(|n| {
                if n == 0 {
                    Err(Error::NoMapping { asid: *asid, vaddr })
                } else {
                    Ok(n)
                }
            })
    }
}
