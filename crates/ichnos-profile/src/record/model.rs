//! The recorder's model of each process: its address space as the mmap
//! records built it — an [`Image`] over the session's one
//! [`SectionCache`], and a [`CodeMap`] of code objects with their unwind
//! rows (converted once per build id for every process) — and the JIT code
//! found through its code registry.
//!
//! An address space lives from a process's exec (or first sighting) to its
//! next exec; a fork copies the parent's. A new executable mapping over an
//! old one also starts a new address space, and so does JIT code under a
//! new name where code was named before (its memory reused), so that
//! within one an address always means the same code
//! (docs/recording-format.md).

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ichnos_code::elf::RowChoice;
use ichnos_code::memory::{Memory, ProcessMemory};
use ichnos_code::process::{code_object_for_mapping, code_object_from_bytes, FileMapping};
use ichnos_code::{CodeMap, CodeObject, RowSource, UnwindCache};
use ichnos_data::{Record, MAPPING_EXECUTABLE};
use ichnos_image::{Asid, Image, SectionCache};

use super::output::Output;

mod ended;
mod java;
mod jit;
mod names;
mod replaced;
mod threads;

use jit::{HeldName, JitName, JitState};

/// Most JIT code names kept per address space (a runtime can register
/// millions of tiny ranges).
const MAX_JIT_NAMES: usize = 1 << 16;
/// GDB JIT interface entries followed per process at most.
const MAX_DEBUGGER_ENTRIES: usize = 1 << 16;
/// Bytes of GDB JIT objects read per look at a process's list.
const DEBUGGER_BYTES_PER_LOOK: u64 = 16 << 20;
/// Most addresses in unnamed JIT code remembered per address space.
const MAX_PENDING_JIT: usize = 1 << 16;
/// Least time between two looks at a process's registry or perf map
/// when nothing new was mapped.
const REFRESH_INTERVAL_NS: u64 = 50_000_000;
/// Largest jitdump file read.
const MAX_JITDUMP: u64 = 1 << 30;

/// What a file looked like: its size and modification time.
type FileStamp = (u64, i64, i64);

/// The stamp of the regular file at `path` (a link there is not followed:
/// it names no file of the process's).
fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_file().then(|| (m.len(), m.mtime(), m.mtime_nsec()))
}

/// A file as last read: what it looked like, what it said, and when and
/// how long the reading took.
type Read<T> = (FileStamp, Arc<T>, std::time::Instant, std::time::Duration);

/// `cached` if the file at `path` still looks as it did (`now`) when it
/// was read, else the file read again with `read`. A file that keeps
/// changing (a live JIT's perf map, its jitdump) is read again no sooner
/// than ten times as long as its last reading took: reading it whole
/// costs the recorder at most a tenth of its time however large it grows.
fn reread<T>(
    cached: &mut Option<Read<T>>,
    path: &Path,
    now: Option<FileStamp>,
    read: impl FnOnce(&Path) -> Option<T>,
) -> Option<Arc<T>> {
    let now = now?;
    if let Some((seen, value, at, took)) = cached {
        if *seen == now || at.elapsed() < *took * 10 {
            return Some(Arc::clone(value));
        }
    }
    let started = std::time::Instant::now();
    let value = Arc::new(read(path)?);
    *cached = Some((now, Arc::clone(&value), started, started.elapsed()));
    Some(value)
}

/// Largest vDSO read from a process.
const MAX_VDSO: u64 = 1 << 20;

/// A mapping as recorded.
#[derive(Clone, Debug)]
pub(crate) struct MappingInfo {
    pub range: Range<u64>,
    pub pgoff: u64,
    pub path: Arc<[u8]>,
}

impl MappingInfo {
    /// Whether `range` of `path` from `pgoff` shows what this mapping shows
    /// there: the same file at the same offsets, or the same anonymous
    /// memory (a mapping split or merged by the kernel, or seen again).
    fn same_content(&self, range: &Range<u64>, pgoff: u64, path: &[u8]) -> bool {
        *self.path == *path
            && (!is_file(path)
                || i128::from(self.pgoff) - i128::from(self.range.start)
                    == i128::from(pgoff) - i128::from(range.start))
    }

    fn overlaps(&self, range: &Range<u64>) -> bool {
        self.range.start < range.end && range.start < self.range.end
    }
}

/// What the recorder knows of one address space.
pub(crate) struct AddressSpace {
    pub asid: u64,
    pub pid: u32,
    pub name: Vec<u8>,
    pub image: Image,
    pub code: CodeMap,
    pub cache: UnwindCache,
    pub mappings: Vec<MappingInfo>,
    jit: JitState,
    /// Its leader exited while other threads ran: it ends with the last.
    leader_exited: bool,
    /// The process is not running here (a perf.data file read back):
    /// nothing is read from its memory or `/proc`.
    offline: bool,
    /// Its stacks walked out of JIT code by the frame pointer.
    java: java::JavaFrames,
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("asid", &self.asid)
            .field("pid", &self.pid)
            .field("mappings", &self.mappings.len())
            .finish_non_exhaustive()
    }
}

/// Every address space, by process.
pub(crate) struct Spaces {
    cache: SectionCache,
    choice: RowChoice,
    next_asid: u64,
    pub by_pid: HashMap<u32, AddressSpace>,
    /// Thread names, by thread: (process, name).
    pub threads: HashMap<u32, (u32, Vec<u8>)>,
    /// Threads whose exit record came, by thread: (process, when). A
    /// CPU-wide event still samples a thread in the kernel's `do_exit`
    /// after its exit record (on Linux 6.18 its exit record is written
    /// before its memory is let go); such a sample is not one of a thread
    /// to name anew.
    exited: HashMap<u32, (u32, u64)>,
    /// How many kept exits make the next forgetting of old ones.
    forget_at: usize,
    /// Processes that ended, by process: (their last address space,
    /// when). Their last thread is sampled past its exit record while
    /// the kernel lets its memory go, time perf counts to the process.
    ended_lately_at: HashMap<u32, (u64, u64)>,
    /// The processes are not running here (a perf.data file read back):
    /// their names, mappings and code come from the records and the files
    /// alone, never from `/proc` or their memory, where another process
    /// may now have their numbers.
    offline: bool,
    /// Processes whose JIT code stayed unnamed (at most
    /// [`MAX_UNNAMED_JIT`] of them), and how many in all.
    pub unnamed_jit: Vec<UnnamedJit>,
    pub unnamed_jit_processes: usize,
    /// Java processes whose stacks may have skipped compiled frames (at
    /// most [`MAX_UNNAMED_JIT`] of them), and how many in all.
    pub java_skipping: Vec<JavaSkipping>,
    pub java_skipping_processes: usize,
    /// The rows of processes that ended, kept a while for the next.
    ended_rows: ended::EndedRows,
}

/// A process whose JIT code stayed unnamed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnnamedJit {
    pub pid: u32,
    pub name: Vec<u8>,
    /// Addresses nothing named.
    pub addresses: usize,
    /// Whether it had a perf map or jitdump file (which did not name
    /// them).
    pub files: bool,
}

/// A Java process whose compiled code keeps no frame pointer, whose
/// stacks walked out of it by the frame pointer may have skipped frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JavaSkipping {
    pub pid: u32,
    pub name: Vec<u8>,
    /// The stacks.
    pub stacks: u64,
}

/// Processes with unnamed JIT code told of at the end, at most.
const MAX_UNNAMED_JIT: usize = 16;

impl std::fmt::Debug for Spaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spaces")
            .field("processes", &self.by_pid.len())
            .finish_non_exhaustive()
    }
}

use crate::mapping::{is_anonymous as is_anon, is_file, is_vdso};

impl Spaces {
    pub fn new(choice: RowChoice) -> Self {
        Self {
            cache: SectionCache::new(Some("ichnos record")),
            choice,
            next_asid: 1,
            by_pid: HashMap::new(),
            threads: HashMap::new(),
            exited: HashMap::new(),
            forget_at: threads::MANY_EXITED,
            ended_lately_at: HashMap::new(),
            offline: false,
            unnamed_jit: Vec::new(),
            unnamed_jit_processes: 0,
            java_skipping: Vec::new(),
            java_skipping_processes: 0,
            ended_rows: ended::EndedRows::default(),
        }
    }

    /// The address space of a process that ended (or exec'd), its JIT
    /// names captured at last: what stayed unnamed is told of at the end.
    fn ended(&mut self, space: &mut AddressSpace, time: u64, out: &mut Output) {
        self.ended_rows.keep(space.code.objects(), time);
        space.capture_jit_names(out, time, true);
        let stacks = space.java.may_skip();
        if stacks > 0 {
            self.java_skipping_processes += 1;
            if self.java_skipping.len() < MAX_UNNAMED_JIT {
                self.java_skipping.push(JavaSkipping {
                    pid: space.pid,
                    name: space.name.clone(),
                    stacks,
                });
            }
        }
        let (addresses, files) = space.unnamed_jit();
        if addresses == 0 {
            return;
        }
        self.unnamed_jit_processes += 1;
        if self.unnamed_jit.len() < MAX_UNNAMED_JIT {
            self.unnamed_jit.push(UnnamedJit {
                pid: space.pid,
                name: space.name.clone(),
                addresses,
                files,
            });
        }
    }

    /// The processes still running at the end (see [`Self::ended`]).
    pub fn finish(&mut self, time: u64, out: &mut Output) {
        let mut spaces = std::mem::take(&mut self.by_pid);
        for space in spaces.values_mut() {
            self.ended(space, time, out);
        }
        self.by_pid = spaces;
    }

    /// Spaces of processes not running here (see [`Spaces::offline`]).
    pub fn offline(choice: RowChoice) -> Self {
        Self {
            offline: true,
            ..Self::new(choice)
        }
    }

    /// Whether the processes are not running here.
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// A thread's command name from `/proc`, unless offline.
    fn comm(&self, pid: u32, tid: u32) -> Option<Vec<u8>> {
        if self.offline {
            None
        } else {
            read_comm(pid, tid)
        }
    }

    fn new_space(&mut self, pid: u32, name: Vec<u8>) -> AddressSpace {
        let asid = self.next_asid;
        self.next_asid += 1;
        AddressSpace {
            asid,
            pid,
            name,
            image: Image::new(None),
            code: CodeMap::new(),
            cache: UnwindCache::new(),
            mappings: Vec::new(),
            jit: JitState::default(),
            leader_exited: false,
            offline: self.offline,
            java: java::JavaFrames::default(),
        }
    }

    /// A fresh address space for `pid` (an exec, or a first sighting),
    /// replacing any it had.
    pub fn begin(&mut self, pid: u32, name: &[u8], time: u64, out: &mut Output) -> u64 {
        self.ended_rows.expire(time);
        if let Some(mut old) = self.by_pid.remove(&pid) {
            self.ended(&mut old, time, out);
        }
        let space = self.new_space(pid, name.to_vec());
        let asid = space.asid;
        out.meta(&Record::Process {
            asid,
            pid: u64::from(pid),
            parent: 0,
            time: out.rel(time),
            name,
        });
        self.by_pid.insert(pid, space);
        asid
    }

    /// The address space of `pid`, made from `/proc/PID` if the process
    /// was not seen before (attached to, or started before the recording).
    pub fn get_or_synthesize(
        &mut self,
        pid: u32,
        time: u64,
        out: &mut Output,
    ) -> &mut AddressSpace {
        if !self.by_pid.contains_key(&pid) {
            let name = self.comm(pid, pid).unwrap_or_default();
            self.begin(pid, &name, time, out);
            self.resync(pid, time, out);
            if self.exited_lately(pid, pid, time) {
                // Its first thread exited already (a thread not known
                // till now sampled after): the process ends with the
                // others, and that thread is not brought back.
                if let Some(space) = self.by_pid.get_mut(&pid) {
                    space.leader_exited = true;
                }
            } else {
                self.name_thread(pid, pid, &name, time, out);
            }
        }
        self.by_pid.get_mut(&pid).expect("just made")
    }

    /// Adds the executable mappings of `/proc/PID/maps` the space does not
    /// have yet; whether there were any.
    pub fn resync(&mut self, pid: u32, time: u64, out: &mut Output) -> bool {
        if self.offline {
            return false;
        }
        let Some(text) = process_maps(pid) else {
            return false;
        };
        let Ok(entries) = ichnos_image::parse_maps(pid, &text) else {
            return false;
        };
        let mut added = false;
        for m in entries.iter().filter(|m| m.perms.contains('x')) {
            // Anonymous memory has no name in the maps; perf calls it so.
            let path: &[u8] = if m.name.is_empty() {
                b"//anon"
            } else {
                m.name.as_bytes()
            };
            added |= self.map(pid, m.range.clone(), m.offset, path, None, time, out);
        }
        added
    }

    /// A new process `pid` forked from `parent`: a copy of its space.
    pub fn fork(&mut self, pid: u32, parent: u32, tid: u32, time: u64, out: &mut Output) {
        let Some(from) = self.by_pid.get(&parent) else {
            self.get_or_synthesize(pid, time, out);
            return;
        };
        let name = from.name.clone();
        let mut image = Image::new(None);
        image.copy_from(&from.image);
        // JIT rows are read from the process that registered them: the
        // child's are looked up again in the child.
        let mut code = CodeMap::new();
        for object in from.code.objects() {
            if object.source != RowSource::Jit {
                let _ = code.insert(Arc::clone(object));
            }
        }
        let mappings = from.mappings.clone();
        let anon = from.jit.anon.clone();
        let jitdump = from.jit.jitdump.clone();
        let parent_asid = from.asid;
        let mut space = self.new_space(pid, name.clone());
        space.image = image;
        space.code = code;
        for m in &mappings {
            space.java.mapped(&m.path);
        }
        space.mappings = mappings;
        space.jit.anon = anon;
        space.jit.jitdump = jitdump;
        space.jit.dirty = true;
        // (Its perf map is its user's, learnt while it runs.)
        space.learn_owner();
        out.meta(&Record::Process {
            asid: space.asid,
            pid: u64::from(pid),
            parent: parent_asid,
            time: out.rel(time),
            name: &name,
        });
        self.by_pid.insert(pid, space);
        let thread_name = self.threads.get(&parent).map_or(name, |(_, n)| n.clone());
        self.name_thread(pid, tid, &thread_name, time, out);
    }

    /// An executable mapping of `pid`; whether it was new.
    #[allow(clippy::too_many_arguments)]
    pub fn map(
        &mut self,
        pid: u32,
        range: Range<u64>,
        pgoff: u64,
        path: &[u8],
        build_id: Option<&[u8]>,
        time: u64,
        out: &mut Output,
    ) -> bool {
        if range.start >= range.end {
            return false;
        }
        let space = self.get_or_synthesize(pid, time, out);
        let known = space.mappings.iter().any(|m| {
            m.same_content(&range, pgoff, path)
                && m.range.start <= range.start
                && range.end <= m.range.end
        });
        if known {
            // Read from /proc already, or a piece of a mapping seen before
            // (the kernel splits a mapping that changes protection).
            return false;
        }
        let conflict = space
            .mappings
            .iter()
            .any(|m| m.overlaps(&range) && !m.same_content(&range, pgoff, path));
        if conflict {
            // New code where old code was: a new address space.
            self.renew(pid, &range, time, out);
        } else {
            // The same content grown (merged mappings): the new mapping
            // stands for the old ones.
            let space = self.by_pid.get_mut(&pid).expect("made above");
            let (gone, kept): (Vec<MappingInfo>, Vec<MappingInfo>) =
                std::mem::take(&mut space.mappings)
                    .into_iter()
                    .partition(|m| m.overlaps(&range));
            space.mappings = kept;
            for m in gone {
                if let Some(object) = space.code.find(m.range.start).cloned() {
                    if object.start >= m.range.start && object.end <= m.range.end {
                        space.code.remove(object.start);
                        if object.source == RowSource::Jit {
                            space.jit.forget(object.start);
                        }
                    }
                }
            }
        }
        let choice = self.choice;
        let cache = self.cache.clone();
        let space = self.by_pid.get_mut(&pid).expect("made above");
        let file_path =
            Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
        let mut recorded_id = build_id.map(<[u8]>::to_vec);
        if is_file(path) {
            // The file as the process sees it (another mount namespace),
            // else as we do.
            let seen = PathBuf::from(format!("/proc/{pid}/root"))
                .join(file_path.strip_prefix("/").unwrap_or(file_path));
            let open = if !space.offline && seen.exists() {
                seen
            } else {
                file_path.to_path_buf()
            };
            let (open, file_id, changed) =
                crate::mapping::build_mapped(open, recorded_id.as_deref());
            if recorded_id.is_none() {
                recorded_id = file_id;
            }
            if !changed {
                let mapping = FileMapping {
                    start: range.start,
                    end: range.end,
                    pgoff,
                };
                let name = String::from_utf8_lossy(path);
                if let Ok(object) = code_object_for_mapping(&open, &name, mapping, choice) {
                    let _ = space.code.insert(Arc::new(object));
                }
                if let Ok(isid) = cache.add_file(&open, pgoff, range.end - range.start, range.start)
                {
                    let _ = space.image.add_cached(&cache, isid, Asid::ANY);
                }
            }
            if path.ends_with(format!("/jit-{pid}.dump").as_bytes()) {
                space.jit.jitdump = Some(open);
            }
            space.java.mapped(path);
            // A library loaded now may export a registry or hold a GDB
            // JIT descriptor.
            space.jit.files_mapped += 1;
        } else if is_vdso(path) {
            // Its build id goes into the recording, so that a report can
            // name its addresses from a vDSO of the same build.
            if let Some(id) = space.add_vdso(&range, choice) {
                recorded_id.get_or_insert(id);
            }
        } else if is_anon(path) {
            space.jit.anon.push(range.clone());
            // JIT code may come: its perf map is read as the process's
            // user's, which is learnt while it runs.
            space.learn_owner();
        }
        space.jit.dirty = true;
        space.mappings.push(MappingInfo {
            range: range.clone(),
            pgoff,
            path: Arc::from(path),
        });
        out.meta(&Record::Mapping {
            asid: space.asid,
            start: range.start,
            len: range.end - range.start,
            pgoff,
            time: out.rel(time),
            path,
            build_id: recorded_id.as_deref().unwrap_or_default(),
            flags: MAPPING_EXECUTABLE,
        });
        true
    }

    /// A new address space for `pid`: a copy of its current one without
    /// what `range` covers (new code replaces old code there).
    fn renew(&mut self, pid: u32, range: &Range<u64>, time: u64, out: &mut Output) {
        let Some(mut old) = self.by_pid.remove(&pid) else {
            return;
        };
        old.capture_jit_names(out, time, true);
        let clear = |r: &Range<u64>| r.end <= range.start || range.end <= r.start;
        let mut space = self.new_space(pid, old.name.clone());
        space.image.copy_from(&old.image);
        for object in old.code.objects() {
            if clear(&(object.start..object.end)) {
                let _ = space.code.insert(Arc::clone(object));
            } else if object.source == RowSource::Jit {
                // Its registration is looked for again.
                old.jit.forget(object.start);
            }
        }
        let parent = old.asid;
        space.mappings = old
            .mappings
            .into_iter()
            .filter(|m| clear(&m.range))
            .collect();
        space.jit.anon = old.jit.anon.into_iter().filter(|r| clear(r)).collect();
        space.jit.registry = old.jit.registry;
        space.jit.registry_searched = old.jit.registry_searched;
        space.jit.files_mapped = old.jit.files_mapped;
        space.jit.registry_searched_at = old.jit.registry_searched_at;
        space.jit.debugger_searched_at = old.jit.debugger_searched_at;
        space.jit.registered = old.jit.registered;
        space.jit.last_registry_look = old.jit.last_registry_look;
        space.jit.registry_generation = old.jit.registry_generation;
        space.jit.registry_read = old.jit.registry_read;
        space.jit.debugger = old.jit.debugger;
        space.jit.debugger_searched = old.jit.debugger_searched;
        space.jit.debugger_entries = old.jit.debugger_entries;
        space.jit.from_debugger = old.jit.from_debugger;
        space.jit.last_debugger_look = old.jit.last_debugger_look;
        space.jit.jitdump = old.jit.jitdump;
        // The names recorded carry over (a reader copies them), but those
        // of code the new mapping covers; so do the files as read.
        space.jit.recorded = std::mem::take(&mut old.jit.recorded)
            .into_iter()
            .filter(|(_, n)| clear(&(n.start..n.end)))
            .collect();
        space.jit.names_from_files = space
            .jit
            .recorded
            .values()
            .filter(|n| n.is_from_files())
            .count();
        space.jit.renewals = old.jit.renewals;
        space.jit.renewal_bucket = old.jit.renewal_bucket;
        space.jit.pending = std::mem::take(&mut old.jit.pending)
            .into_iter()
            .filter(|&pc| clear(&(pc..pc.saturating_add(1))))
            .collect();
        space.jit.fresh = !space.jit.pending.is_empty();
        space.jit.perf_map = old.jit.perf_map.take();
        space.jit.jitdump_read = old.jit.jitdump_read.take();
        space.jit.looked = old.jit.looked;
        space.leader_exited = old.leader_exited;
        out.meta(&Record::Process {
            asid: space.asid,
            pid: u64::from(pid),
            parent,
            time: out.rel(time),
            name: &space.name,
        });
        space.jit.timeline = std::mem::take(&mut old.jit.timeline);
        // (What the new mapping covers held its code from now on.)
        space.jit.timeline.end_in(range, time);
        // Names held for a new address space go into this one.
        for held in std::mem::take(&mut old.jit.held) {
            space.record_name(held.name, held.since, out);
        }
        // The copy holds the old mappings of the range too (a reader's
        // Mapping replaces them); the code objects there are gone here.
        self.by_pid.insert(pid, space);
    }
}

/// Longest name written for JIT code (names come from the target).
const MAX_NAME: usize = 4096;

/// `name`, cut to [`MAX_NAME`] bytes.
fn capped(name: &[u8]) -> &[u8] {
    &name[..name.len().min(MAX_NAME)]
}

/// A thread's command name, from `/proc`.
fn read_comm(pid: u32, tid: u32) -> Option<Vec<u8>> {
    let mut name = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    while name.last() == Some(&b'\n') {
        name.pop();
    }
    Some(name)
}

/// The code object of a process's vDSO, from its memory (if its rows can
/// be made), and its build id (which names it in a report either way).
fn vdso_object(
    pid: u32,
    range: &Range<u64>,
    choice: RowChoice,
) -> Option<(Option<CodeObject>, Option<Vec<u8>>)> {
    let len = range.end - range.start;
    if len > MAX_VDSO {
        return None;
    }
    let mut bytes = vec![0u8; len as usize];
    ProcessMemory::new(pid).read(range.start, &mut bytes).ok()?;
    let mapping = FileMapping {
        start: range.start,
        end: range.end,
        pgoff: 0,
    };
    let (build_id, _) = ichnos_code::elf::identity(&bytes);
    let object = code_object_from_bytes(&bytes, "[vdso]", mapping, choice).ok();
    Some((object, build_id))
}

impl AddressSpace {
    /// Notes that a stack of this process was walked out of JIT code by
    /// the frame pointer (see `model/java.rs`).
    pub fn walked_out_of_jit(&mut self) {
        self.java.walked_out_of_jit(self.pid, self.offline);
    }

    /// Whether the process runs HotSpot (it maps `libjvm.so`).
    pub fn maps_jvm(&self) -> bool {
        self.java.jvm()
    }

    /// The vDSO's code object, read from the process's memory; returns
    /// its build id. Offline it is not at hand: its frames end the walk.
    fn add_vdso(&mut self, range: &Range<u64>, choice: RowChoice) -> Option<Vec<u8>> {
        if self.offline {
            return None;
        }
        let (object, build_id) = vdso_object(self.pid, range, choice)?;
        if let Some(object) = object {
            let _ = self.code.insert(Arc::new(object));
        }
        build_id
    }

    /// Whether `pc` lies in an executable mapping of the process.
    pub fn is_mapped(&self, pc: u64) -> bool {
        self.code.find(pc).is_some() || self.mappings.iter().any(|m| m.range.contains(&pc))
    }
}

/// The memory map of process `pid`: its `/proc/PID/maps`, or, where that
/// is empty because its first thread has exited (a zombie whose memory
/// the kernel no longer reaches through it) while the others run on, a
/// live thread's.
pub(super) fn process_maps(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if !text.is_empty() {
        return Some(text);
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("maps")).ok())
        .find(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_space_ends_with_its_last_thread_whoever_exits_first() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("x.data")).unwrap();
        let (mut out, writer) = crate::record::output::start(file, 0).unwrap();
        let mut spaces = Spaces::new(RowChoice::EhFrame);
        for (pid, leader_first) in [(10, true), (20, false)] {
            spaces.begin(pid, b"p", 1, &mut out);
            spaces.know_thread(pid, pid, 1, &mut out);
            spaces.know_thread(pid, pid + 1, 1, &mut out);
            let order = if leader_first {
                [pid, pid + 1]
            } else {
                [pid + 1, pid]
            };
            spaces.exit(pid, order[0], 2, &mut out);
            assert!(spaces.by_pid.contains_key(&pid), "{pid}: ended early");
            spaces.exit(pid, order[1], 3, &mut out);
            assert!(!spaces.by_pid.contains_key(&pid), "{pid}: kept");
        }
        crate::record::close(out, writer, 0).unwrap();
    }
}
