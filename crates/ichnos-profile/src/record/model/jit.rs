//! The JIT side of an address space: code the process registered or
//! mapped anonymously, found when a walk runs into it or on time (its
//! code registry, its GDB JIT interface). Its names are `names.rs`'s.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use ichnos_code::{CodeObject, JitRows, RowSource, Rows};

use super::{
    replaced, AddressSpace, FileStamp, Output, Read, DEBUGGER_BYTES_PER_LOOK, MAX_DEBUGGER_ENTRIES,
    REFRESH_INTERVAL_NS,
};

/// JIT code of an address space: the registry, perf map and jitdump.
#[derive(Debug, Default)]
pub(super) struct JitState {
    /// The process's user, last seen while it ran: its perf map must be
    /// that user's, and a map written as it exits is read after `/proc`
    /// has forgotten it.
    pub(super) owner: Option<u32>,
    /// Where the process's exported registry is, and the files searched
    /// for it.
    pub(super) registry: RegistryAt,
    pub(super) registry_searched: ichnos_code::export::SearchedFiles,
    /// Files mapped so far, and how many there were at the last search
    /// for the registry and for the GDB JIT descriptor: a library loaded
    /// since may hold either.
    pub(super) files_mapped: u64,
    pub(super) registry_searched_at: u64,
    pub(super) debugger_searched_at: u64,
    /// Registrations made into code objects (text start, table head).
    pub(super) registered: HashMap<u64, RegisteredJit>,
    /// When the registry was last looked at, and its generation when its
    /// entries were last read (read again only when it moved).
    pub(super) last_registry_look: Option<u64>,
    pub(super) registry_generation: Option<u64>,
    /// When its entries were last read, and how long that took.
    pub(super) registry_read: Option<(std::time::Instant, std::time::Duration)>,
    /// Where the process's GDB JIT descriptor is.
    pub(super) debugger: RegistryAt,
    /// The files searched for it.
    pub(super) debugger_searched: ichnos_code::export::SearchedFiles,
    /// The GDB JIT interface's entries read, with the starts of the
    /// code objects each made (none if its object was unusable).
    pub(super) debugger_entries: HashMap<ichnos_code::gdb_jit::JitEntry, Vec<u64>>,
    /// Starts of the code objects made from GDB JIT objects.
    pub(super) from_debugger: HashSet<u64>,
    /// When the GDB JIT list was last read.
    pub(super) last_debugger_look: Option<u64>,
    /// Ranges of anonymous executable memory.
    pub(super) anon: Vec<Range<u64>>,
    /// Something new was mapped since the last refresh.
    pub(super) dirty: bool,
    pub(super) last_refresh: Option<u64>,
    /// Addresses in JIT code no name covers yet.
    pub(super) pending: HashSet<u64>,
    /// Addresses were added to `pending` since the last look.
    pub(super) fresh: bool,
    /// The perf map and jitdump file as they were at the last look.
    pub(super) looked: Option<(Option<FileStamp>, Option<FileStamp>)>,
    /// The perf map and the jitdump file as last read, with what they
    /// looked like then: read again only when they change.
    pub(super) perf_map: Option<Read<ichnos_symbol::perf_map::PerfMap>>,
    pub(super) jitdump_read: Option<Read<ichnos_symbol::jitdump::JitDump>>,
    /// The names recorded in this address space, by start.
    pub(super) recorded: HashMap<u64, JitName>,
    /// How many of them came from the perf map or the jitdump file.
    pub(super) names_from_files: usize,
    /// New address spaces made for names of reused memory, and how many
    /// more may be made now ([`super::Spaces::rename`]).
    pub(super) renewals: u32,
    pub(super) renewal_bucket: Option<super::names::RenewalBucket>,
    /// Names of code put where code of another name was recorded (its
    /// memory reused), to be recorded in a new address space so that the
    /// stacks already written keep the old names ([`super::Spaces::rename`]).
    pub(super) held: Vec<HeldName>,
    /// JIT code objects the registry no longer holds, kept for the
    /// samples taken before they went.
    pub(super) timeline: replaced::Timeline,
    /// The process's jitdump file, once it mapped it.
    pub(super) jitdump: Option<PathBuf>,
    pub(super) last_names: Option<u64>,
}

impl JitState {
    /// The JIT code object at `start` left the code map: its
    /// registration or GDB JIT entry is looked for again.
    pub(super) fn forget(&mut self, start: u64) {
        self.registered.remove(&start);
        if self.from_debugger.remove(&start) {
            self.debugger_entries
                .retain(|_, starts| !starts.contains(&start));
        }
    }
}

/// A JIT registration made into a code object, as the registry showed
/// it: by its start, its end, unwind table, name and time (the same code
/// registered anew is another registration).
#[derive(Debug)]
pub(super) struct RegisteredJit {
    pub(super) end: u64,
    pub(super) unwind_head: u64,
    pub(super) name: Option<String>,
    /// The time the registry says (the target's clock, trusted for
    /// nothing but telling registrations apart).
    pub(super) registered_ns: Option<u64>,
    /// The time of the first samples it serves: its registration time,
    /// but no later than the look that first found it (0: not known).
    pub(super) since: u64,
}

impl RegisteredJit {
    /// Whether `other` is the same registration (whenever it was seen).
    pub(super) fn same(&self, other: &RegisteredJit) -> bool {
        (self.end, self.unwind_head, &self.name, self.registered_ns)
            == (
                other.end,
                other.unwind_head,
                &other.name,
                other.registered_ns,
            )
    }
}

/// A name held for a new address space, and the time of the first
/// samples it names (those before it are of the code named before).
#[derive(Debug)]
pub(super) struct HeldName {
    pub(super) name: JitName,
    pub(super) since: u64,
}

/// A name for JIT code, as a `JitCode` record gives it.
#[derive(Debug)]
pub(super) struct JitName {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) source: ichnos_data::JitSource,
    pub(super) name: Arc<[u8]>,
}

impl JitName {
    /// Whether the perf map or the jitdump file gave it.
    pub(super) fn is_from_files(&self) -> bool {
        matches!(
            self.source,
            ichnos_data::JitSource::PerfMap | ichnos_data::JitSource::JitDump
        )
    }
}

impl JitState {
    /// Forgets the name recorded at `start`.
    pub(super) fn forget_name(&mut self, start: u64) {
        if let Some(name) = self.recorded.remove(&start) {
            self.names_from_files -= usize::from(name.is_from_files());
        }
    }
}

/// Where a process's exported code registry is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum RegistryAt {
    /// Not looked for yet.
    #[default]
    Unknown,
    /// Looked for, not there.
    Absent,
    /// At this address.
    At(u64),
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
        let pid = self.pid;
        let generation = ichnos_code::export::exported_registry_generation(pid, addr).ok();
        if generation.is_some() && generation == self.jit.registry_generation {
            self.jit.last_registry_look = Some(looked);
            return false;
        }
        // A table that changes all the time is read again no sooner than
        // ten times as long as its last reading took (a large one costs
        // the recorder at most a tenth of its time); until then the look
        // does not count.
        if self
            .jit
            .registry_read
            .is_some_and(|(at, took)| at.elapsed() < took * 10)
        {
            return false;
        }
        self.jit.last_registry_look = Some(looked);
        let started = std::time::Instant::now();
        let read = ichnos_code::export::read_exported_entries(pid, addr);
        self.jit.registry_read = Some((started, started.elapsed()));
        let Ok(entries) = read else {
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
                        registered_ns: e.registered_ns,
                        // (A registration the look found is no later
                        // than the look, whatever the target wrote.)
                        since: e.registered_ns.map_or(0, |t| t.min(looked)),
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
        let mut by_start: Vec<(std::ops::Range<u64>, Option<u64>)> = live
            .iter()
            .map(|(&start, r)| (start..r.end, (r.since > 0).then_some(r.since)))
            .collect();
        by_start.sort_unstable_by_key(|(r, _)| r.start);
        let stale: Vec<u64> = self
            .jit
            .registered
            .iter()
            .filter(|(start, was)| !live.get(start).is_some_and(|now| now.same(was)))
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
                let since = was.map_or(0, |w| w.since);
                let until = super::replaced::served_until(
                    &(object.start..object.end),
                    since,
                    &by_start,
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
            let since = registration.since;
            if self.code.insert(Arc::new(object)).is_ok() {
                changed = true;
                self.jit.registered.insert(start, registration);
                // Code put where named code was: its name is held for the
                // samples from its registration on, whose stacks may be
                // ones already written.
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
}

/// Whether a look at `last` was less than [`REFRESH_INTERVAL_NS`] before
/// `time`.
pub(super) fn looked_lately(last: u64, time: u64) -> bool {
    time.saturating_sub(last) < REFRESH_INTERVAL_NS
}
