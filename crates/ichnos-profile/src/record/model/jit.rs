//! The JIT side of an address space: code the process registered or
//! mapped anonymously, found when a walk runs into it, and the names its
//! perf map or jitdump file give it, captured while the process lives.

use std::path::PathBuf;
use std::sync::Arc;

use ichnos_code::{CodeObject, JitRows, RowSource, Rows};
use ichnos_data::{JitSource, Record};

use std::collections::{HashMap, HashSet};

use super::{
    capped, reread, stamp, AddressSpace, HeldName, JitName, Output, RegisteredJit, RegistryAt,
    DEBUGGER_BYTES_PER_LOOK, MAX_DEBUGGER_ENTRIES, MAX_JITDUMP, MAX_JIT_NAMES, MAX_PENDING_JIT,
    REFRESH_INTERVAL_NS,
};

/// New address spaces made per process for JIT code named anew where
/// other code was, at most (each costs a reader a copy of the process's
/// mappings and names, and the stacks are written anew).
const MAX_RENEWALS: u32 = 256;
/// Least time between two of them: names found sooner wait (stacks of
/// the new code keep the old name until then).
const MIN_RENEWAL_INTERVAL_NS: u64 = 1_000_000_000;

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
        if !space.jit.held.iter().any(|h| h.since <= time)
            || space
                .jit
                .last_renewal
                .is_some_and(|t| time.saturating_sub(t) < MIN_RENEWAL_INTERVAL_NS)
        {
            return false;
        }
        // Past the bound, names are replaced where they are (a reader
        // takes the last name at a start, for all its stacks).
        let renew = space.jit.renewals < MAX_RENEWALS;
        if renew {
            space.jit.renewals += 1;
            space.jit.last_renewal = Some(time);
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
    /// Whether `pc` lies in memory a JIT may fill: anonymous executable
    /// memory, or no mapping at all (code mapped before a record could
    /// tell us).
    pub fn may_be_jit(&self, pc: u64) -> bool {
        self.code.find(pc).is_none()
            && (self.jit.anon.iter().any(|r| r.contains(&pc))
                || !self.mappings.iter().any(|m| m.range.contains(&pc)))
    }

    /// Whether a look for code no record told of (JIT code the process
    /// registered, mappings made before the recording could see them) is
    /// due: something new was mapped, or the last look was 50 ms ago.
    /// Taking it starts the next interval.
    pub fn take_refresh(&mut self, time: u64) -> bool {
        if self.offline {
            return false;
        }
        let due = self.jit.dirty
            || self
                .jit
                .last_refresh
                .is_none_or(|t| !looked_lately(t, time));
        if due {
            self.jit.dirty = false;
            self.jit.last_refresh = Some(time);
        }
        due
    }

    /// Looks for JIT code the process registered since the last look, in
    /// its code registry and through the GDB JIT interface: whether the
    /// code map changed.
    pub fn refresh_jit(&mut self, time: u64, out: &mut Output) -> bool {
        let registered = self.refresh_registry(out);
        self.refresh_debugger_jit(time, out) | registered
    }

    /// Reads the process's exported registry again if it has one and the
    /// last look was [`REFRESH_INTERVAL_NS`] ago, whether or not a walk
    /// ran into unknown code: code unregistered and its memory reused
    /// lies under objects still known, where no walk would look. Whether
    /// the code map changed.
    pub fn refresh_registry_on_time(&mut self, time: u64, out: &mut Output) -> bool {
        if self.offline
            || !matches!(self.jit.registry, RegistryAt::At(_))
            || self
                .jit
                .last_registry_look
                .is_some_and(|t| looked_lately(t, time))
        {
            return false;
        }
        self.refresh_registry(out)
    }

    /// Looks at the process's exported registry if the last look was
    /// before `time`, so that a sample taken then is walked knowing every
    /// registration made before it (a look that finds nothing changed
    /// reads only the registry's generation). Whether the code map
    /// changed.
    pub fn refresh_registry_for(&mut self, time: u64, out: &mut Output) -> bool {
        if self.offline
            || !matches!(self.jit.registry, RegistryAt::At(_))
            || self.jit.last_registry_look.is_some_and(|t| t >= time)
        {
            return false;
        }
        self.refresh_registry(out)
    }

    /// Looks for JIT code in the process's exported code registry: each
    /// new registration becomes a code object; those gone from the
    /// registry, or registered anew (other rows, another name, another
    /// time), drop theirs, since their memory may hold other code now,
    /// and keep them for the samples taken before (`replaced.rs`). Code
    /// put where named code was is named at once.
    fn refresh_registry(&mut self, out: &mut Output) -> bool {
        // Looked for in the files mapped since the last look that found
        // none: a library exporting one may be loaded late.
        let recheck = self.jit.files_mapped > self.jit.registry_searched_at;
        if self.jit.registry == RegistryAt::Unknown
            || (self.jit.registry == RegistryAt::Absent && recheck)
        {
            self.jit.registry_searched_at = self.jit.files_mapped;
            self.jit.registry = match ichnos_code::export::find_exported_registry_in_new_files(
                self.pid,
                &mut self.jit.registry_searched,
            ) {
                Ok(Some(addr)) => RegistryAt::At(addr),
                _ => RegistryAt::Absent,
            };
        }
        let RegistryAt::At(addr) = self.jit.registry else {
            return false;
        };
        // The look's own time, on the samples' clock: what it finds
        // covers every sample taken before it.
        let looked = ichnos_perf::monotonic_ns();
        self.jit.last_registry_look = Some(looked);
        let pid = self.pid;
        let generation = ichnos_code::export::exported_registry_generation(pid, addr).ok();
        if generation.is_some() && generation == self.jit.registry_generation {
            return false;
        }
        let Ok(entries) = ichnos_code::export::read_exported_entries(pid, addr) else {
            return false;
        };
        // (Read before the entries: a change between the two is read at
        // the next look.)
        self.jit.registry_generation = generation;
        let live: HashMap<u64, RegisteredJit> = entries
            .into_iter()
            .filter_map(|e| match e.registration {
                ichnos_code::Registration::Jit {
                    text,
                    unwind_head,
                    name,
                } => Some((
                    text.start,
                    RegisteredJit {
                        end: text.end,
                        unwind_head,
                        name,
                        registered_at: e.registered_ns,
                    },
                )),
                ichnos_code::Registration::Elf(_) => None,
            })
            .collect();
        let retired = self.retire_gone(&live, looked);
        self.build_registered(live, out) | retired
    }

    /// Drops the code objects of registrations gone from `live`, or
    /// registered anew, keeping them for the samples taken before they
    /// went (a look at `looked` found them gone). Whether any went.
    fn retire_gone(&mut self, live: &HashMap<u64, RegisteredJit>, looked: u64) -> bool {
        let mut changed = false;
        let stale: Vec<u64> = self
            .jit
            .registered
            .iter()
            .filter(|(start, was)| live.get(start) != Some(*was))
            .map(|(&start, _)| start)
            .collect();
        for start in stale {
            let was = self.jit.registered.remove(&start);
            // (Unless the GDB JIT interface gave the object there now.)
            if self.jit.from_debugger.contains(&start)
                || !self
                    .code
                    .find(start)
                    .is_some_and(|o| o.start == start && o.source == RowSource::Jit)
            {
                continue;
            }
            if let Some(object) = self.code.remove(start) {
                changed = true;
                let since = was.and_then(|w| w.registered_at).unwrap_or(0);
                let until = super::replaced::served_until(
                    &(object.start..object.end),
                    since,
                    live.iter().map(|(&s, r)| (s..r.end, r.registered_at)),
                    looked,
                );
                self.jit.timeline.retire(object, since, until);
            }
        }
        changed
    }

    /// Makes a code object of each registration of `live` not made yet.
    /// Whether any was made.
    fn build_registered(&mut self, live: HashMap<u64, RegisteredJit>, out: &mut Output) -> bool {
        let mut changed = false;
        for (start, registration) in live {
            if self.jit.registered.contains_key(&start) {
                continue;
            }
            // In the way of other code: not built until that is gone (and
            // the entries read again until then).
            if self.code.check_free(start, registration.end).is_err() {
                self.jit.registry_generation = None;
                continue;
            }
            let (text, unwind_head) = (start..registration.end, registration.unwind_head);
            let name = registration.name.clone();
            let rows = JitRows::new(self.pid, text.start, text.end, unwind_head);
            rows.refresh();
            let name: Arc<str> = Arc::from(name.as_deref().unwrap_or("[jit]"));
            let object = CodeObject {
                start: text.start,
                end: text.end,
                bias: 0,
                rows: Rows::Jit(Arc::new(rows)),
                source: RowSource::Jit,
                name,
            };
            let since = registration.registered_at.unwrap_or(0);
            if self.code.insert(Arc::new(object)).is_ok() {
                changed = true;
                self.jit.registered.insert(start, registration);
                // Code put where other code was: the old code's name is
                // recorded for the samples taken before (unless one is),
                // and the new one held for those from its registration
                // on, whose stacks may be ones already written.
                if let Some(old) = self.jit.timeline.at_start(start).cloned() {
                    if !self.jit.recorded.contains_key(&start) {
                        self.name_object(&old, 0, out);
                    }
                }
                if self.jit.recorded.contains_key(&start) {
                    self.name_code(start, since, out);
                }
            }
        }
        changed
    }

    /// Looks for JIT code the process gave debuggers through the GDB JIT
    /// interface: each new entry's object becomes a code object per
    /// function it names (its `.eh_frame` rows shared), and, after a walk
    /// of the whole list, the objects of entries gone from it are
    /// dropped, since their code may have been freed and its memory
    /// reused. At most [`DEBUGGER_BYTES_PER_LOOK`] of objects are read
    /// per look; the rest wait for the next.
    fn refresh_debugger_jit(&mut self, time: u64, out: &mut Output) -> bool {
        use ichnos_code::gdb_jit;
        // Looked for in the files mapped since the last look that found
        // none: a JIT's library may be loaded late.
        let recheck = self.jit.files_mapped > self.jit.debugger_searched_at;
        if self.jit.debugger == RegistryAt::Unknown
            || (self.jit.debugger == RegistryAt::Absent && recheck)
        {
            self.jit.debugger_searched_at = self.jit.files_mapped;
            self.jit.debugger = match gdb_jit::find_descriptor_in_new_files(
                self.pid,
                &mut self.jit.debugger_searched,
            ) {
                Ok(Some(addr)) => RegistryAt::At(addr),
                _ => RegistryAt::Absent,
            };
        }
        let RegistryAt::At(addr) = self.jit.debugger else {
            return false;
        };
        self.jit.last_debugger_look = Some(time);
        let mut memory = ichnos_code::memory::ProcessMemory::new(self.pid);
        let Ok(list) = gdb_jit::read_entries(&mut memory, addr) else {
            return false;
        };
        let mut changed = false;
        if list.complete {
            let live: HashSet<gdb_jit::JitEntry> = list.entries.iter().copied().collect();
            let gone: Vec<gdb_jit::JitEntry> = self
                .jit
                .debugger_entries
                .keys()
                .filter(|e| !live.contains(e))
                .copied()
                .collect();
            for entry in gone {
                for start in self.jit.debugger_entries.remove(&entry).unwrap_or_default() {
                    // (Unless the registry gave the object there.)
                    if self.jit.from_debugger.contains(&start) {
                        changed |= self.code.remove(start).is_some();
                    }
                    self.jit.from_debugger.remove(&start);
                }
            }
        }
        let mut budget = DEBUGGER_BYTES_PER_LOOK;
        for entry in list.entries {
            if self.jit.debugger_entries.contains_key(&entry)
                || self.jit.debugger_entries.len() >= MAX_DEBUGGER_ENTRIES
            {
                continue;
            }
            // (One object larger than a look's budget is read alone.)
            if entry.size > budget && budget < DEBUGGER_BYTES_PER_LOOK {
                break;
            }
            budget = budget.saturating_sub(entry.size);
            let object = gdb_jit::read_object(&mut memory, &entry)
                .and_then(|bytes| gdb_jit::parse_object(&bytes));
            let Ok(object) = object else {
                // Unusable: not read again while the entry stays.
                self.jit.debugger_entries.insert(entry, Vec::new());
                continue;
            };
            if let Some(starts) = self.insert_debugger_object(object) {
                changed = true;
                // (Named at once wherever a name was recorded: the entry
                // may have gone in an earlier look.)
                let named_before: Vec<u64> = starts
                    .iter()
                    .copied()
                    .filter(|s| self.jit.recorded.contains_key(s))
                    .collect();
                for start in named_before {
                    self.name_code(start, 0, out);
                }
                self.jit.debugger_entries.insert(entry, starts);
            }
        }
        changed
    }

    /// Records the name of the JIT code object at `start` (`since`: the
    /// time of its first samples, where it replaced other code).
    fn name_code(&mut self, start: u64, since: u64, out: &mut Output) {
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

    /// Makes code objects of one GDB JIT object: one per function it
    /// names, or one for all its code where it names none; without unwind
    /// rows they only name the code. Returns their starts, or `None`
    /// (nothing kept) where other code there is in the way: that may be
    /// stale and go, and the entry is tried again at the next look. A
    /// piece already in the map from the debugger, at the same range,
    /// counts as made.
    fn insert_debugger_object(
        &mut self,
        object: ichnos_code::gdb_jit::JitObject,
    ) -> Option<Vec<u64>> {
        let table = object
            .rows
            .unwrap_or_else(|| ichnos_code::RowTable::new(object.text.start));
        let rows = Rows::Fixed(Arc::new(table));
        let pieces: Vec<(u64, u64, Arc<str>)> = if object.functions.is_empty() {
            vec![(object.text.start, object.text.end, Arc::from("[jit]"))]
        } else {
            object
                .functions
                .iter()
                .map(|f| (f.range.start, f.range.end, Arc::from(f.name.as_str())))
                .collect()
        };
        let mut starts = Vec::new();
        for (start, end, name) in pieces {
            let already = self.jit.from_debugger.contains(&start)
                && self
                    .code
                    .find(start)
                    .is_some_and(|o| o.start == start && o.end == end);
            if already {
                starts.push(start);
                continue;
            }
            let code = CodeObject {
                start,
                end,
                bias: 0,
                rows: rows.clone(),
                source: RowSource::Jit,
                name,
            };
            if self.code.insert(Arc::new(code)).is_err() {
                for start in starts {
                    if !self.jit.from_debugger.contains(&start) {
                        self.code.remove(start);
                    }
                }
                return None;
            }
            self.jit.from_debugger.insert(start);
            starts.push(start);
        }
        Some(starts)
    }

    /// Reads the GDB JIT list again if the process has one and the last
    /// look was [`REFRESH_INTERVAL_NS`] ago, whether or not a walk ran
    /// into unknown code: code freed and its memory reused lies under
    /// objects still known, where no walk would look. Whether the code
    /// map changed.
    pub fn refresh_debugger_jit_on_time(&mut self, time: u64, out: &mut Output) -> bool {
        if self.offline
            || !matches!(self.jit.debugger, RegistryAt::At(_))
            || self
                .jit
                .last_debugger_look
                .is_some_and(|t| looked_lately(t, time))
        {
            return false;
        }
        self.refresh_debugger_jit(time, out)
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
                    let since = self
                        .jit
                        .registered
                        .get(&object.start)
                        .and_then(|r| r.registered_at)
                        .filter(|_| self.code.find(pc).is_some_and(|o| Arc::ptr_eq(o, &object)))
                        .unwrap_or(0);
                    self.name_object(&object, since, out);
                }
                None if self.jit.pending.len() < MAX_PENDING_JIT
                    && self.jit.anon.iter().any(|r| r.contains(&pc)) =>
                {
                    self.jit.fresh |= self.jit.pending.insert(pc);
                }
                _ => {}
            }
        }
        if !self.jit.pending.is_empty() {
            self.capture_jit_names(out, time, false);
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
        self.jit.last_names = Some(time);
        let perf_map_path = PathBuf::from(format!("/tmp/perf-{}.map", self.pid));
        let stamps = (
            stamp(&perf_map_path),
            self.jit.jitdump.as_deref().and_then(stamp),
        );
        let pid = self.pid;
        let perf_map = reread(&mut self.jit.perf_map, &perf_map_path, stamps.0, |_| {
            ichnos_symbol::perf_map::PerfMap::for_process(pid).ok()
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
        for (pc, (start, end, name, source)) in named {
            self.jit.pending.remove(&pc);
            let name = JitName {
                start,
                end,
                source,
                name: Arc::from(capped(name.as_bytes())),
            };
            self.record_name(name, 0, out);
        }
    }
}

/// The code the jitdump file, else the perf map, says `pc` lies in: its
/// range, name and source. None where what covers `pc` is not the newest
/// code at its start (a perf map's older, longer line at a start that a
/// newer line names anew: `pc` lies past the new code's end, in memory
/// the files no longer name), so that a start has one name at a time.
fn name_in_files(
    pc: u64,
    perf_map: Option<&ichnos_symbol::perf_map::PerfMap>,
    jitdump: Option<&ichnos_symbol::jitdump::JitDump>,
) -> Option<(u64, u64, String, JitSource)> {
    let found = covering(pc, perf_map, jitdump)?;
    let newest = covering(found.0, perf_map, jitdump)?;
    (newest == found).then_some(found)
}

/// The code the jitdump file, else the perf map, says covers `pc`.
fn covering(
    pc: u64,
    perf_map: Option<&ichnos_symbol::perf_map::PerfMap>,
    jitdump: Option<&ichnos_symbol::jitdump::JitDump>,
) -> Option<(u64, u64, String, JitSource)> {
    jitdump
        .and_then(|d| d.lookup(pc))
        .map(|c| {
            (
                c.addr,
                c.addr.saturating_add(c.size),
                c.name.clone(),
                JitSource::JitDump,
            )
        })
        .or_else(|| {
            perf_map.and_then(|m| m.lookup(pc)).map(|e| {
                (
                    e.start,
                    e.start.saturating_add(e.size),
                    e.name.clone(),
                    JitSource::PerfMap,
                )
            })
        })
}

/// Whether a look at `last` was less than [`REFRESH_INTERVAL_NS`] before
/// `time`.
fn looked_lately(last: u64, time: u64) -> bool {
    time.saturating_sub(last) < REFRESH_INTERVAL_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A perf map whose newer line names a start anew with shorter code:
    /// past its end, the older line is no one's; a line for code inside
    /// other code is both's (each is the newest at its start).
    #[test]
    fn a_start_has_the_name_of_its_newest_line_only() {
        let map = ichnos_symbol::perf_map::PerfMap::parse(
            "1000 200 freed\n1000 40 reused\n3000 200 outer\n3080 10 inner\n",
            "perf-1.map",
        );
        let name = |pc| name_in_files(pc, Some(&map), None).map(|(s, e, n, _)| (s, e, n));
        assert_eq!(name(0x1010), Some((0x1000, 0x1040, "reused".to_owned())));
        assert_eq!(name(0x1100), None);
        assert_eq!(name(0x3100), Some((0x3000, 0x3200, "outer".to_owned())));
        assert_eq!(name(0x3084), Some((0x3080, 0x3090, "inner".to_owned())));
    }
}
