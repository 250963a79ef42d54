//! Names of JIT code: those the process's registry and GDB JIT objects
//! give the code objects, and those its perf map or jitdump file give,
//! captured while the process lives; and the new address space a name
//! put where another was named starts, so that stacks already written
//! keep the name they had.

use std::path::PathBuf;
use std::sync::Arc;

use ichnos_code::{CodeObject, RowSource};
use ichnos_data::{JitSource, Record};

use super::jit::looked_lately;
use super::{
    capped, reread, stamp, AddressSpace, FileStamp, HeldName, JitName, Output, MAX_JITDUMP,
    MAX_JIT_NAMES, MAX_PENDING_JIT,
};

/// New address spaces made per process for JIT code named anew where
/// other code was, at most (each costs a reader a copy of the process's
/// mappings and names, and the stacks are written anew).
const MAX_RENEWALS: u32 = 256;
/// One of them a second in the long run, in bursts of up to this many:
/// names found sooner wait (stacks of the new code keep the old name
/// until then). A burst, since a runtime that replaces code replaces
/// several pieces a few milliseconds apart, each named from its own time.
const RENEWAL_BURST: u64 = 8;
const NS_PER_RENEWAL: u64 = 1_000_000_000;

/// A bucket of renewals: how many may be made now, and the time the
/// count was last topped up to (whole [`NS_PER_RENEWAL`]s are added).
#[derive(Clone, Copy, Debug)]
pub(super) struct RenewalBucket {
    left: u64,
    at: u64,
}

impl RenewalBucket {
    /// The bucket at `time` (a full one if there was none).
    fn at(bucket: Option<RenewalBucket>, time: u64) -> RenewalBucket {
        let Some(b) = bucket else {
            return RenewalBucket {
                left: RENEWAL_BURST,
                at: time,
            };
        };
        let earned = time.saturating_sub(b.at) / NS_PER_RENEWAL;
        if earned == 0 {
            return b;
        }
        RenewalBucket {
            left: (b.left + earned).min(RENEWAL_BURST),
            at: b.at + earned * NS_PER_RENEWAL,
        }
    }
}

impl super::Spaces {
    /// A new address space for `pid` if it holds names of JIT code put
    /// where other code was named (its memory reused): the same mappings
    /// and code under a new number, whose names are the old ones with
    /// those in their place. The stacks written so far keep the old names;
    /// stacks from now on are written anew. Whether it made one.
    pub fn rename(&mut self, pid: u32, time: u64, out: &mut Output) -> bool {
        let asid = self.next_asid;
        let Some(space) = self.by_pid.get_mut(&pid) else {
            return false;
        };
        // (Names of code registered after `time` wait for its samples.)
        let bucket = RenewalBucket::at(space.jit.renewal_bucket, time);
        if !space.jit.held.iter().any(|h| h.since <= time) || bucket.left == 0 {
            return false;
        }
        space.jit.renewal_bucket = Some(RenewalBucket {
            left: bucket.left - 1,
            ..bucket
        });
        // Past the bound, names are replaced where they are (a reader
        // takes the last name at a start, for all its stacks).
        let renew = space.jit.renewals < MAX_RENEWALS;
        if renew {
            space.jit.renewals += 1;
            self.next_asid += 1;
            let parent = std::mem::replace(&mut space.asid, asid);
            out.meta(&Record::Process {
                asid,
                pid: u64::from(pid),
                parent,
                time: out.rel(time),
                name: &space.name,
            });
        }
        let (due, later): (Vec<HeldName>, Vec<HeldName>) = std::mem::take(&mut space.jit.held)
            .into_iter()
            .partition(|h| h.since <= time);
        space.jit.held = later;
        for held in due {
            space.jit.forget_name(held.name.start);
            space.record_name(held.name, held.since, out);
        }
        renew
    }
}

impl AddressSpace {
    /// Records the name of the JIT code object at `start` (`since`: the
    /// time of its first samples, where it replaced other code).
    pub(super) fn name_code(&mut self, start: u64, since: u64, out: &mut Output) {
        let Some(object) = self.code.find(start).filter(|o| o.start == start).cloned() else {
            return;
        };
        self.name_object(&object, since, out);
    }

    /// Records the name of the JIT code `object` (see [`Self::name_code`]).
    fn name_object(&mut self, object: &CodeObject, since: u64, out: &mut Output) {
        if object.source != RowSource::Jit {
            return;
        }
        let name = JitName {
            start: object.start,
            end: object.end,
            source: if self.jit.from_debugger.contains(&object.start) {
                JitSource::Debugger
            } else {
                JitSource::Registry
            },
            name: Arc::from(capped(object.name.as_bytes())),
        };
        self.record_name(name, since, out);
    }

    /// Records a name of JIT code, unless this address space has it
    /// already. Where it has another name at the same start (the code
    /// there was freed and its memory reused), the name is held for a new
    /// address space ([`super::Spaces::rename`]) made at the first sample
    /// at or after `since`, so that stacks written before keep the name
    /// they had.
    pub(super) fn record_name(&mut self, name: JitName, since: u64, out: &mut Output) {
        match self.jit.recorded.get(&name.start) {
            Some(recorded) if recorded.end == name.end && recorded.name == name.name => return,
            Some(_) => {
                let held = self
                    .jit
                    .held
                    .iter_mut()
                    .find(|h| h.name.start == name.start);
                match held {
                    Some(held) => *held = HeldName { name, since },
                    None => self.jit.held.push(HeldName { name, since }),
                }
                return;
            }
            None => {}
        }
        if self.jit.recorded.len() >= MAX_JIT_NAMES {
            return;
        }
        self.jit.names_from_files += usize::from(name.is_from_files());
        out.meta(&Record::JitCode {
            asid: self.asid,
            start: name.start,
            end: name.end,
            source: name.source,
            name: &name.name,
        });
        self.jit.recorded.insert(name.start, name);
    }

    /// Notes the JIT frames of a new stack taken at `time`: names
    /// registered code the first time it appears (the code that was there
    /// then), and remembers addresses no name covers yet.
    pub fn note_jit_frames(&mut self, frames: &[u64], out: &mut Output, time: u64) {
        for (i, &frame) in frames.iter().enumerate() {
            let pc = if i == 0 { frame } else { frame.wrapping_sub(1) };
            match self.code_at(pc, time) {
                Some(object) if object.source == RowSource::Jit => {
                    let object = Arc::clone(object);
                    let current = self.code.find(pc).is_some_and(|o| Arc::ptr_eq(o, &object));
                    let since = |space: &Self| {
                        space
                            .jit
                            .registered
                            .get(&object.start)
                            .map_or(0, |r| r.since)
                    };
                    if current {
                        self.name_object(&object, since(self), out);
                    } else if !self.jit.recorded.contains_key(&object.start) {
                        // Code gone since (a sample walked late): named
                        // where nothing is, never held to replace the
                        // name of the code there now; which is then held
                        // for the samples from its own time.
                        self.name_object(&object, 0, out);
                        self.name_code(object.start, since(self), out);
                    }
                }
                None if self.jit.pending.len() < MAX_PENDING_JIT
                    && self.jit.anon.iter().any(|r| r.contains(&pc)) =>
                {
                    self.jit.fresh |= self.jit.pending.insert(pc);
                }
                _ => {}
            }
        }
        // New addresses are looked up now (in the files as last read,
        // unless they changed), not at the next look.
        if self.jit.fresh {
            self.capture_jit_names(out, time, true);
        }
    }

    /// Names the pending JIT addresses from the process's perf map and
    /// jitdump file, while it lives (`force`: now, else at most every
    /// 50 ms). The files are read again only when their size or time
    /// changed, and the addresses looked up only when they or the files
    /// are new. When the files changed, the starts they named before are
    /// looked up again too: a new name at one is code put in the memory of
    /// code freed ([`Self::record_name`]).
    pub fn capture_jit_names(&mut self, out: &mut Output, time: u64, force: bool) {
        // Offline, the perf map's owner cannot be checked against the
        // process (gone, or its number another's): not read.
        if (self.jit.pending.is_empty() && self.jit.names_from_files == 0) || self.offline {
            return;
        }
        if !force && self.jit.last_names.is_some_and(|t| looked_lately(t, time)) {
            return;
        }
        // The look's own time, on the samples' clock: what it finds
        // covers every sample taken before it.
        let looked = ichnos_perf::monotonic_ns().max(time);
        let previous_look = self.jit.last_names.replace(looked);
        let perf_map_path = PathBuf::from(format!("/tmp/perf-{}.map", self.pid));
        let stamps = (
            stamp(&perf_map_path),
            self.jit.jitdump.as_deref().and_then(stamp),
        );
        let pid = self.pid;
        self.learn_owner();
        let owner = self.jit.owner;
        let perf_map = reread(&mut self.jit.perf_map, &perf_map_path, stamps.0, |path| {
            ichnos_symbol::perf_map::PerfMap::read_owned_by(path, pid, owner).ok()
        });
        let jitdump = match self.jit.jitdump.clone() {
            Some(path) => reread(&mut self.jit.jitdump_read, &path, stamps.1, |path| {
                let file = ichnos_code::elf::open_regular(path).ok()?;
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_JITDUMP), &mut bytes)
                    .ok()?;
                Some(ichnos_symbol::jitdump::JitDump::parse(&bytes))
            }),
            None => None,
        };
        // A file changed since it was read but not read again (it is
        // read no sooner than ten times as long as its reading took):
        // the look does not count for the samples before it.
        let stale =
            |stamp: Option<FileStamp>, read: Option<FileStamp>| stamp.is_some() && stamp != read;
        if stale(stamps.0, self.jit.perf_map.as_ref().map(|r| r.0))
            || stale(stamps.1, self.jit.jitdump_read.as_ref().map(|r| r.0))
        {
            self.jit.last_names = previous_look;
        }
        // Looked up again only for new addresses or what the files now say.
        let said = (
            perf_map
                .as_ref()
                .and(self.jit.perf_map.as_ref().map(|r| r.0)),
            jitdump
                .as_ref()
                .and(self.jit.jitdump_read.as_ref().map(|r| r.0)),
        );
        let files_changed = self.jit.looked != Some(said);
        if !self.jit.fresh && !files_changed {
            return;
        }
        self.jit.fresh = false;
        self.jit.looked = Some(said);
        let mut named = Vec::new();
        // Starts the files named before, looked up again where they changed.
        let again: Vec<u64> = if files_changed {
            let recorded = self.jit.recorded.values();
            recorded
                .filter(|n| n.is_from_files())
                .map(|n| n.start)
                .collect()
        } else {
            Vec::new()
        };
        let find = |pc| name_in_files(pc, perf_map.as_deref(), jitdump.as_deref());
        for &pc in &self.jit.pending {
            if let Some(found) = find(pc) {
                named.push((pc, found));
            }
        }
        for pc in again {
            // A start named before, now of other code: under the same
            // start only (a range that merely overlaps it may be code
            // inside code, as runtimes name both).
            match find(pc) {
                Some(found) if found.0 == pc => named.push((pc, found)),
                _ => {}
            }
        }
        for (pc, (start, end, name, source, since)) in named {
            self.jit.pending.remove(&pc);
            let name = JitName {
                start,
                end,
                source,
                name: Arc::from(capped(name.as_bytes())),
            };
            self.record_name(name, since.min(looked), out);
        }
    }

    /// Addresses in JIT code that nothing has named (a name or a code
    /// object found after an address was noted covers it too), and
    /// whether a perf map or jitdump file was read for the process.
    pub fn unnamed_jit(&self) -> (usize, bool) {
        let mut named: Vec<(u64, u64)> = self
            .jit
            .recorded
            .values()
            .map(|n| (n.start, n.end))
            .collect();
        named.sort_unstable();
        let covered = |pc: u64| {
            let i = named.partition_point(|&(start, _)| start <= pc);
            i.checked_sub(1).is_some_and(|i| pc < named[i].1)
        };
        let unnamed = self
            .jit
            .pending
            .iter()
            .filter(|&&pc| self.code.find(pc).is_none() && !covered(pc))
            .count();
        let files = self.jit.perf_map.is_some() || self.jit.jitdump_read.is_some();
        (unnamed, files)
    }

    /// Learns the process's user while it runs (see `JitState::owner`):
    /// the last seen is kept.
    pub(super) fn learn_owner(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if self.offline {
            return;
        }
        if let Ok(meta) = std::fs::metadata(format!("/proc/{}", self.pid)) {
            self.jit.owner = Some(meta.uid());
        }
    }

    /// Looks at the perf map and jitdump file again if the last look was
    /// before `time`, so that a sample taken then is named knowing the
    /// code loaded before it (two `stat`s when neither changed).
    pub fn capture_jit_names_for(&mut self, time: u64, out: &mut Output) {
        if self.jit.last_names.is_none_or(|t| t < time) {
            self.capture_jit_names(out, time, true);
        }
    }
}

/// Where a file says code lies: its range, name and source, and the time
/// it was loaded where the file says (a jitdump file's load record on
/// `CLOCK_MONOTONIC`; else 0).
type FileName = (u64, u64, String, JitSource, u64);

/// The code the jitdump file, else the perf map, says `pc` lies in: its
/// range, name and source. None where what covers `pc` is not the newest
/// code at its start (a perf map's older, longer line at a start that a
/// newer line names anew: `pc` lies past the new code's end, in memory
/// the files no longer name), so that a start has one name at a time.
fn name_in_files(
    pc: u64,
    perf_map: Option<&ichnos_symbol::perf_map::PerfMap>,
    jitdump: Option<&ichnos_symbol::jitdump::JitDump>,
) -> Option<FileName> {
    let found = covering(pc, perf_map, jitdump)?;
    let newest = covering(found.0, perf_map, jitdump)?;
    (newest == found).then_some(found)
}

/// The code the jitdump file, else the perf map, says covers `pc`.
fn covering(
    pc: u64,
    perf_map: Option<&ichnos_symbol::perf_map::PerfMap>,
    jitdump: Option<&ichnos_symbol::jitdump::JitDump>,
) -> Option<FileName> {
    jitdump
        .and_then(|d| Some((d.lookup(pc)?, d.arch_timestamps)))
        .map(|(c, arch)| {
            (
                c.addr,
                c.addr.saturating_add(c.size),
                c.name.clone(),
                JitSource::JitDump,
                if arch { 0 } else { c.timestamp },
            )
        })
        .or_else(|| {
            perf_map.and_then(|m| m.lookup(pc)).map(|e| {
                (
                    e.start,
                    e.start.saturating_add(e.size),
                    e.name.clone(),
                    JitSource::PerfMap,
                    0,
                )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ichnos_code::elf::RowChoice;
    use ichnos_code::Rows;

    fn name(start: u64, name: &str) -> JitName {
        JitName {
            start,
            end: start + 0x100,
            source: JitSource::Registry,
            name: Arc::from(name.as_bytes()),
        }
    }

    fn object(start: u64, name: &str) -> Arc<CodeObject> {
        Arc::new(CodeObject {
            start,
            end: start + 0x100,
            bias: 0,
            rows: Rows::Fixed(Arc::new(ichnos_code::RowTable::new(start))),
            source: RowSource::Jit,
            name: Arc::from(name),
        })
    }

    /// Runs `test` on the offline address space of process 7, with an
    /// output to write records to.
    fn with_space(test: impl FnOnce(&mut super::super::Spaces, &mut Output)) {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("x.data")).unwrap();
        let (mut out, writer) = crate::record::output::start(file, 0).unwrap();
        let mut spaces = super::super::Spaces::offline(RowChoice::EhFrame);
        spaces.begin(7, b"p", 1, &mut out);
        test(&mut spaces, &mut out);
        crate::record::close(out, writer, 0).unwrap();
    }

    /// Names of code registered where named code was wait for the samples
    /// taken from their registration on: a new address space comes at the
    /// first of them, with the names due then, and the others wait.
    #[test]
    fn a_held_name_starts_a_new_address_space_at_its_own_time() {
        with_space(|spaces, out| {
            let space = spaces.by_pid.get_mut(&7).unwrap();
            space.record_name(name(0x1000, "a"), 0, out);
            space.record_name(name(0x2000, "c"), 0, out);
            space.record_name(name(0x1000, "b"), 500, out);
            space.record_name(name(0x2000, "d"), 1_000_000_000, out);
            let first = space.asid;
            assert!(!spaces.rename(7, 499, out), "b's code is not there yet");
            assert_eq!(spaces.by_pid[&7].asid, first);
            assert!(spaces.rename(7, 500, out));
            let space = &spaces.by_pid[&7];
            assert_ne!(space.asid, first);
            assert_eq!(&*space.jit.recorded[&0x1000].name, b"b");
            assert_eq!(&*space.jit.recorded[&0x2000].name, b"c", "d waits");
            assert_eq!(space.jit.held.len(), 1);
            assert!(spaces.rename(7, 1_000_000_000, out));
            assert_eq!(&*spaces.by_pid[&7].jit.recorded[&0x2000].name, b"d");
            // Bursts of 8 (at 500, 1e9 and six more; one earned back a
            // second after the first): the ninth waits for its second.
            for i in 0..6 {
                let space = spaces.by_pid.get_mut(&7).unwrap();
                space.record_name(name(0x3000, &format!("e{i}")), 0, out);
                space.record_name(name(0x3000, &format!("f{i}")), 0, out);
                assert!(spaces.rename(7, 1_000_000_001 + i, out), "{i}");
            }
            let space = spaces.by_pid.get_mut(&7).unwrap();
            space.record_name(name(0x3000, "g"), 0, out);
            assert!(!spaces.rename(7, 1_000_000_499, out));
            assert!(spaces.rename(7, 1_000_000_500, out));
            assert_eq!(&*spaces.by_pid[&7].jit.recorded[&0x3000].name, b"g");
            // Then one a second.
            let space = spaces.by_pid.get_mut(&7).unwrap();
            space.record_name(name(0x3000, "h"), 0, out);
            assert!(!spaces.rename(7, 2_000_000_499, out));
            assert!(spaces.rename(7, 2_000_000_500, out));
        });
    }

    /// A sample walked late, taken before code it ran was replaced, names
    /// that code only where no name is: it never holds the old name to
    /// replace the new one.
    #[test]
    fn a_late_sample_of_replaced_code_does_not_bring_its_name_back() {
        with_space(|spaces, out| {
            let space = spaces.by_pid.get_mut(&7).unwrap();
            space.code.insert(object(0x1000, "new")).unwrap();
            space.jit.timeline.retire(object(0x1000, "old"), 0, 500);
            space.record_name(name(0x1000, "new"), 0, out);
            space.note_jit_frames(&[0x1010], out, 400);
            assert!(space.jit.held.is_empty());
            assert_eq!(&*space.jit.recorded[&0x1000].name, b"new");
            // Where nothing was named yet, it is named for its own time,
            // and the code there now held from its own (a stack of it
            // may be one written already, under the old name).
            space.jit.forget_name(0x1000);
            space.jit.registered.insert(
                0x1000,
                super::super::jit::RegisteredJit {
                    end: 0x1100,
                    unwind_head: 0,
                    name: Some("new".to_owned()),
                    registered_ns: Some(500),
                    since: 500,
                },
            );
            space.note_jit_frames(&[0x1010], out, 400);
            assert_eq!(&*space.jit.recorded[&0x1000].name, b"old");
            assert_eq!(space.jit.held.len(), 1);
            assert_eq!(&*space.jit.held[0].name.name, b"new");
            assert_eq!(space.jit.held[0].since, 500);
            assert!(!spaces.rename(7, 499, out));
            assert!(spaces.rename(7, 500, out));
            let space = &spaces.by_pid[&7];
            assert_eq!(&*space.jit.recorded[&0x1000].name, b"new");
        });
    }

    /// A perf map whose newer line names a start anew with shorter code:
    /// past its end, the older line is no one's; a line for code inside
    /// other code is both's (each is the newest at its start).
    #[test]
    fn a_start_has_the_name_of_its_newest_line_only() {
        let map = ichnos_symbol::perf_map::PerfMap::parse(
            "1000 200 freed\n1000 40 reused\n3000 200 outer\n3080 10 inner\n",
            "perf-1.map",
        );
        let name = |pc| name_in_files(pc, Some(&map), None).map(|(s, e, n, _, _)| (s, e, n));
        assert_eq!(name(0x1010), Some((0x1000, 0x1040, "reused".to_owned())));
        assert_eq!(name(0x1100), None);
        assert_eq!(name(0x3100), Some((0x3000, 0x3200, "outer".to_owned())));
        assert_eq!(name(0x3084), Some((0x3080, 0x3090, "inner".to_owned())));
    }
}
