//! Addresses of a live process: through its mappings to the object file
//! and the file's own address, or to the JIT names in its perf map.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ichnos_image::{load_segments, LoadSegment};

use crate::jitdump::JitDump;
use crate::perf_map::PerfMap;

/// Largest jitdump file read (it holds the code bytes too).
const MAX_JITDUMP: u64 = 1 << 30;
use crate::frame::{Frame, Symbolized, Unnamed};
use crate::symbolizer::Symbolizer;
use crate::SymbolError;

/// Where an address of a process lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// In a mapped object file, at this address of the file (what
    /// `addr2line -e FILE` takes).
    Object {
        /// The file, as the process's mappings name it (a file deleted
        /// since it was mapped ends in ` (deleted)`).
        path: PathBuf,
        /// The address in the file's own terms.
        file_addr: u64,
        /// Where the file is read from: `path`, or for a deleted file
        /// the process's own link to it
        /// ([`ichnos_image::MapsEntry::deleted_file_link`]).
        read_from: PathBuf,
    },
    /// In anonymous executable memory (JIT code), or in a mapped file
    /// whose segments cannot be read.
    Anonymous,
    /// In no mapping, or in memory that holds no code (heap, stack).
    Unmapped,
}

/// An address of a process, placed and symbolized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSymbolized {
    /// Where the address lies.
    pub place: Place,
    /// Its frames.
    pub symbolized: Symbolized,
}

/// A copy of a process's vDSO in a memory file, readable by path while
/// the copy lives.
struct VdsoCopy {
    _file: std::fs::File,
    path: PathBuf,
}

/// A process's vDSO, copied from its memory into a memory file that the
/// symbolizer reads like any object file while this lives. A recording's
/// vDSO addresses can be named from the reporting process's own vDSO when
/// the two build ids agree (the same kernel build maps the same bytes).
pub struct VdsoImage {
    copy: VdsoCopy,
    build_id: Option<Vec<u8>>,
}

impl std::fmt::Debug for VdsoImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VdsoImage")
            .field("path", &self.copy.path)
            .finish_non_exhaustive()
    }
}

impl VdsoImage {
    /// The vDSO of process `pid` (this process's own with
    /// [`std::process::id`]), if it has one that can be read.
    #[must_use]
    pub fn of_process(pid: u32) -> Option<VdsoImage> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let maps = ichnos_image::parse_maps(pid, &text).ok()?;
        let m = maps
            .iter()
            .find(|m| m.name == "[vdso]" && m.perms.contains('x'))?;
        let copy = vdso_copy(pid, m)?;
        let build_id = crate::object_file::build_id_of(&copy.path);
        Some(VdsoImage { copy, build_id })
    }

    /// A path the copy reads from while this lives.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.copy.path
    }

    /// Its GNU build id, if it has one.
    #[must_use]
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }
}

/// The vDSO of process `pid` (mapped at `m`), read from its memory into a
/// memory file.
fn vdso_copy(pid: u32, m: &ichnos_image::MapsEntry) -> Option<VdsoCopy> {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::FileExt;
    // The vDSO is a page or two: far below this.
    let len = usize::try_from(m.range.end - m.range.start)
        .ok()
        .filter(|&l| l <= 1 << 20)?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut bytes = vec![0u8; len];
    mem.read_exact_at(&mut bytes, m.range.start).ok()?;
    // SAFETY: memfd_create with a NUL-terminated name and no flags but
    // close-on-exec; the new descriptor is ours alone.
    let fd = unsafe { libc::memfd_create(c"vdso".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor just created, owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(&bytes).ok()?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Some(VdsoCopy { _file: file, path })
}

/// A runtime writing jitdump maps its `jit-PID.dump` (so perf sees it):
/// find it among the mappings and read it, bounded in size.
fn mapped_jitdump(pid: u32, maps: &[ichnos_image::MapsEntry]) -> Option<JitDump> {
    let m = maps
        .iter()
        .find(|m| m.name.ends_with(&format!("/jit-{pid}.dump")))?;
    let path = format!("/proc/{pid}/root{}", m.name);
    let meta = std::fs::metadata(&path).ok()?;
    (meta.is_file() && meta.len() <= MAX_JITDUMP).then_some(())?;
    std::fs::read(&path)
        .ok()
        .map(|bytes| JitDump::parse(&bytes))
}

/// Names of JIT code the process registered with `codectl()` (read from
/// its exported code registry): (text range, name), sorted by start.
fn registered_jit_names(pid: u32) -> Vec<(std::ops::Range<u64>, Arc<str>)> {
    let Ok(at) = ichnos_code::export::find_exported_registry(pid) else {
        return Vec::new();
    };
    let Ok(registrations) = ichnos_code::export::read_exported_registry(pid, at) else {
        return Vec::new();
    };
    let mut names: Vec<_> = registrations
        .into_iter()
        .filter_map(|r| match r {
            ichnos_code::Registration::Jit {
                text,
                name: Some(name),
                ..
            } => Some((text, Arc::from(name.as_str()))),
            _ => None,
        })
        .collect();
    names.sort_by_key(|(text, _)| text.start);
    names
}

/// The frame of JIT code: from the jitdump first (it has lines), then
/// from the perf map, then from the name the JIT registered the code
/// range under.
fn jit_frame(
    addr: u64,
    jitdump: Option<&JitDump>,
    perf_map: Option<&PerfMap>,
    registered: &[(std::ops::Range<u64>, Arc<str>)],
) -> (Frame, crate::DebugSource) {
    let mut frame = Frame::default();
    let mut source = crate::DebugSource::Nothing;
    if let Some(code) = jitdump.and_then(|d| d.lookup(addr)) {
        frame.function = Some(Arc::from(code.name.as_str()));
        if let Some(line) = code.line(addr) {
            frame.file = Some(Arc::from(line.file.as_str()));
            frame.line = Some(line.line);
        }
        source = crate::DebugSource::JitDump;
    } else if let Some(e) = perf_map.and_then(|m| m.lookup(addr)) {
        frame.function = Some(Arc::from(e.name.as_str()));
        source = crate::DebugSource::PerfMap;
    } else {
        // Registered ranges never overlap: the one starting last at or
        // below the address is the only candidate.
        let i = registered.partition_point(|(text, _)| text.start <= addr);
        if let Some((text, name)) = i.checked_sub(1).map(|i| &registered[i]) {
            if text.contains(&addr) {
                frame.function = Some(Arc::clone(name));
                source = crate::DebugSource::Registry;
            }
        }
    }
    frame.raw_function.clone_from(&frame.function);
    (frame, source)
}

/// Where `addr` of process `pid` lies: in a file of its mappings (a
/// deleted one read through the process's link to it, the vDSO through
/// its copy `vdso`), in anonymous executable memory, or nowhere. Each
/// file's segments are read once, into `segments`.
fn place(
    pid: u32,
    addr: u64,
    maps: &[ichnos_image::MapsEntry],
    vdso: Option<&(std::ops::Range<u64>, VdsoCopy)>,
    segments: &mut HashMap<String, Option<Vec<LoadSegment>>>,
) -> Place {
    let Some(m) = maps.iter().find(|m| m.range.contains(&addr)) else {
        return Place::Unmapped;
    };
    if let Some((range, copy)) = vdso.filter(|(r, _)| r.contains(&addr)) {
        let read_from = copy.path.clone();
        let segs = segments
            .entry(read_from.to_string_lossy().into_owned())
            .or_insert_with(|| load_segments(&read_from, 0).ok());
        let offset = addr - range.start;
        return match segs
            .as_ref()
            .and_then(|segs| ichnos_image::vaddr_of_file_offset(segs, offset))
        {
            Some(file_addr) => Place::Object {
                path: PathBuf::from("[vdso]"),
                file_addr,
                read_from,
            },
            None => Place::Anonymous,
        };
    }
    if !m.name.starts_with('/') {
        // Only executable memory can hold JIT code.
        return if m.perms.contains('x') {
            Place::Anonymous
        } else {
            Place::Unmapped
        };
    }
    // A file deleted (or replaced) since it was mapped is still
    // there, for the process: read it through its link to it.
    let read_from = if m.deleted() {
        m.deleted_file_link(pid)
    } else {
        PathBuf::from(&m.name)
    };
    let offset = addr - m.range.start + m.offset;
    let segs = segments
        .entry(read_from.to_string_lossy().into_owned())
        .or_insert_with(|| load_segments(&read_from, 0).ok());
    let file_addr = segs
        .as_ref()
        .and_then(|segs| ichnos_image::vaddr_of_file_offset(segs, offset));
    match file_addr {
        Some(file_addr) => Place::Object {
            path: PathBuf::from(&m.name),
            file_addr,
            read_from,
        },
        None => Place::Anonymous,
    }
}

impl Symbolizer {
    /// Symbolizes addresses of the live process `pid`: each is placed
    /// through `/proc/PID/maps` into an object file (then symbolized like
    /// [`Symbolizer::symbolize_file`], one batch per file) or into
    /// anonymous executable memory, named from the process's jitdump, its
    /// `/tmp/perf-PID.map` (when it belongs to the process's user), or the
    /// names it registered JIT code under with `codectl()`.
    pub fn symbolize_process(
        &self,
        pid: u32,
        addrs: &[u64],
    ) -> Result<Vec<ProcessSymbolized>, SymbolError> {
        let maps_path = PathBuf::from(format!("/proc/{pid}/maps"));
        let text = std::fs::read_to_string(&maps_path).map_err(|source| SymbolError::Io {
            path: maps_path.clone(),
            source,
        })?;
        let maps = ichnos_image::parse_maps(pid, &text)
            .map_err(|source| SymbolError::BadMaps { pid, source })?;
        let perf_map = PerfMap::for_process(pid).ok();
        let jitdump = mapped_jitdump(pid, &maps);
        let mut registered = None;
        let mut segments: HashMap<String, Option<Vec<LoadSegment>>> = HashMap::new();
        // The vDSO is a file only in the process's memory: a copy of it,
        // open while the addresses are symbolized, reads as one.
        let vdso = maps
            .iter()
            .find(|m| m.name == "[vdso]" && m.perms.contains('x'))
            // Copied only if an address lies in it.
            .filter(|m| addrs.iter().any(|a| m.range.contains(a)))
            .and_then(|m| vdso_copy(pid, m).map(|c| (m.range.clone(), c)));
        let places: Vec<Place> = addrs
            .iter()
            .map(|&addr| place(pid, addr, &maps, vdso.as_ref(), &mut segments))
            .collect();
        // One batch per object file.
        let mut by_file: HashMap<&Path, Vec<usize>> = HashMap::new();
        for (i, p) in places.iter().enumerate() {
            if let Place::Object { read_from, .. } = p {
                by_file.entry(read_from.as_path()).or_default().push(i);
            }
        }
        let mut results: Vec<Option<Symbolized>> = vec![None; addrs.len()];
        for (path, indices) in by_file {
            let file_addrs: Vec<u64> = indices
                .iter()
                .map(|&i| match &places[i] {
                    Place::Object { file_addr, .. } => *file_addr,
                    _ => 0,
                })
                .collect();
            // A file that cannot be read leaves its addresses unnamed.
            if let Ok(done) = self.symbolize_file(path, &file_addrs) {
                for (i, mut s) in indices.into_iter().zip(done) {
                    // The address asked for, not the file's.
                    s.addr = addrs[i];
                    results[i] = Some(s);
                }
            }
        }
        Ok(places
            .into_iter()
            .zip(results)
            .zip(addrs)
            .map(|((place, done), &addr)| {
                let symbolized = done.unwrap_or_else(|| {
                    let (frame, source) = if place == Place::Unmapped {
                        (Frame::default(), crate::DebugSource::Nothing)
                    } else {
                        // Anonymous memory, or a file that could not be
                        // read (a runtime's memfd): JIT code, maybe.
                        // Read once, and only if JIT code was asked about.
                        let registered =
                            registered.get_or_insert_with(|| registered_jit_names(pid));
                        jit_frame(addr, jitdump.as_ref(), perf_map.as_ref(), registered)
                    };
                    let unnamed =
                        (frame == Frame::default()).then_some(if place == Place::Unmapped {
                            Unnamed::Unmapped
                        } else {
                            Unnamed::Anonymous
                        });
                    Symbolized {
                        addr,
                        frames: vec![frame],
                        source,
                        unnamed,
                    }
                });
                ProcessSymbolized { place, symbolized }
            })
            .collect())
    }
}
