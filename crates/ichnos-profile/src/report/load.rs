//! A recording read back into what a report needs: each stack resolved to
//! the mappings of its address space when it was recorded, samples summed
//! per stack and thread (memory grows with distinct stacks, not samples),
//! names, JIT code, losses.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use ichnos_data::{JitSource, LostCause, ReadError, Reader, Record, StackStop, Target};

/// A mapping of an address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file (or `//anon`, `[vdso]`).
    pub path: Arc<[u8]>,
    /// Its build id (empty: unknown).
    pub build_id: Arc<[u8]>,
}

/// Named JIT code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitName {
    /// The range.
    pub start: u64,
    /// One past its end.
    pub end: u64,
    /// The name.
    pub name: Arc<str>,
    /// Where it came from.
    pub source: JitSource,
}

/// One address space.
#[derive(Clone, Debug, Default)]
pub struct Space {
    /// Its process.
    pub pid: u32,
    /// Indices into [`Profile::mappings`], in the order they were added
    /// (a later one wins where they overlap).
    pub mappings: Vec<usize>,
    /// Its JIT code, as named.
    pub jit: Vec<JitName>,
}

/// Where a frame lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In mapping `mapping` (an index into [`Profile::mappings`]), at file
    /// offset `offset`.
    Mapped {
        /// The mapping.
        mapping: usize,
        /// The file offset of the address looked up.
        offset: u64,
    },
    /// In no mapping of its address space.
    Unmapped,
}

/// An interned stack, resolved.
#[derive(Clone, Debug)]
pub struct Stack {
    /// Its address space.
    pub asid: u64,
    /// Why its walk ended.
    pub stop: StackStop,
    /// Its frames, innermost first: the address looked up (the first
    /// frame's instruction pointer, a return address minus one) and where
    /// it lies.
    pub frames: Vec<(u64, Place)>,
}

/// Samples of one stack in one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// How many.
    pub samples: u64,
    /// Their weight (nanoseconds, or cycles).
    pub weight: u64,
}

/// The description of a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Description {
    /// The machine.
    pub host: String,
    /// Its kernel.
    pub kernel: String,
    /// What was run.
    pub command: Vec<String>,
    /// The event.
    pub event: String,
    /// Samples per second asked for.
    pub frequency: u64,
    /// The start, in nanoseconds since 1970.
    pub start_realtime_ns: u64,
    /// The recorder.
    pub recorder: String,
    /// Whom it recorded.
    pub target: Option<Target>,
}

/// A recording, read.
#[derive(Debug, Default)]
pub struct Profile {
    /// The description.
    pub description: Description,
    /// Every mapping of every address space.
    pub mappings: Vec<Mapping>,
    /// Address spaces by number.
    pub spaces: HashMap<u64, Space>,
    /// Stacks by number.
    pub stacks: Vec<Option<Stack>>,
    /// Samples per (stack, process, thread).
    pub tallies: HashMap<(u64, u32, u32), Tally>,
    /// Thread names, by thread: (process, name).
    pub threads: HashMap<u32, (u32, Arc<str>)>,
    /// Process names, by process.
    pub processes: HashMap<u32, Arc<str>>,
    /// Samples and records lost, per cause.
    pub lost: HashMap<LostCause, u64>,
    /// Times sampling was throttled.
    pub throttled: u64,
    /// The recording's end time (nanoseconds since the start), if it has
    /// its end record.
    pub end: Option<u64>,
    /// The last sample's time.
    pub last_time: u64,
    /// Samples that named a stack the recording does not hold.
    pub orphans: u64,
    /// Why reading stopped early: the file was cut (the recorder did not
    /// finish).
    pub truncated: Option<ReadError>,
}

/// Most frames of a stack kept (a damaged recording may claim more).
const MAX_FRAMES: usize = 4096;
/// Most stacks a recording may hold.
const MAX_STACKS: u64 = 1 << 26;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Profile {
    /// Reads a recording. A recording cut short is read to its last whole
    /// chunk and the cut kept in [`Profile::truncated`]; anything else
    /// wrong is the error.
    pub fn read(input: impl Read) -> Result<Profile, ReadError> {
        let mut reader = Reader::new(input)?;
        let mut profile = Profile::default();
        loop {
            match reader.next_chunk() {
                Ok(Some(chunk)) => {
                    for record in chunk.records() {
                        profile.add(&record?);
                    }
                }
                Ok(None) => break,
                Err(e) if e.is_truncation() => {
                    profile.truncated = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(profile)
    }

    fn add(&mut self, record: &Record<'_>) {
        match record {
            Record::Meta(m) => self.describe(m),
            Record::Process {
                asid,
                pid,
                parent,
                name,
                ..
            } => {
                let pid = *pid as u32;
                let mut space = self.spaces.get(parent).cloned().unwrap_or_default();
                space.pid = pid;
                self.spaces.insert(*asid, space);
                self.processes.insert(pid, Arc::from(text(name)));
            }
            Record::Thread { pid, tid, name, .. } => {
                let name: Arc<str> = Arc::from(text(name));
                if pid == tid {
                    self.processes.insert(*pid as u32, Arc::clone(&name));
                }
                self.threads.insert(*tid as u32, (*pid as u32, name));
            }
            Record::Mapping {
                asid,
                start,
                len,
                pgoff,
                path,
                build_id,
                ..
            } => {
                let index = self.mappings.len();
                self.mappings.push(Mapping {
                    start: *start,
                    end: start.saturating_add(*len),
                    pgoff: *pgoff,
                    path: Arc::from(*path),
                    build_id: Arc::from(*build_id),
                });
                self.spaces.entry(*asid).or_default().mappings.push(index);
            }
            Record::Stack(s) => self.add_stack(s),
            Record::Sample {
                time,
                pid,
                tid,
                stack,
                weight,
                ..
            } => {
                if self.stacks.get(*stack as usize).is_none_or(Option::is_none) {
                    self.orphans += 1;
                    return;
                }
                let tally = self
                    .tallies
                    .entry((*stack, *pid as u32, *tid as u32))
                    .or_default();
                tally.samples += 1;
                tally.weight = tally.weight.saturating_add(*weight);
                self.last_time = self.last_time.max(*time);
            }
            Record::JitCode {
                asid,
                start,
                end,
                source,
                name,
            } => {
                self.spaces.entry(*asid).or_default().jit.push(JitName {
                    start: *start,
                    end: *end,
                    name: Arc::from(text(name)),
                    source: *source,
                });
            }
            Record::Lost { count, cause, .. } => {
                *self.lost.entry(*cause).or_default() += count;
            }
            Record::Throttle { throttled, .. } => {
                self.throttled += u64::from(*throttled);
            }
            Record::End { time, .. } => self.end = Some(*time),
            Record::Exit { .. } | Record::StackOut(_) | Record::Unknown { .. } => {}
        }
    }

    fn describe(&mut self, m: &ichnos_data::Meta<'_>) {
        self.description = Description {
            host: text(m.host),
            kernel: text(m.kernel),
            command: m.command.iter().map(|a| text(a)).collect(),
            event: text(m.event),
            frequency: m.frequency,
            start_realtime_ns: m.start_realtime_ns,
            recorder: text(m.recorder),
            target: Some(m.target),
        };
    }

    /// A stack, resolved against the mappings its address space has now.
    fn add_stack(&mut self, s: &ichnos_data::Stack<'_>) {
        if s.id >= MAX_STACKS {
            return;
        }
        let frames: Vec<(u64, Place)> = s
            .frames
            .iter()
            .take(MAX_FRAMES)
            .enumerate()
            .map(|(i, f)| {
                // Callers are looked up at their return address minus one,
                // so the call is what is named.
                let pc = if i == 0 { f } else { f.wrapping_sub(1) };
                (pc, self.place(s.asid, pc))
            })
            .collect();
        let id = s.id as usize;
        if self.stacks.len() <= id {
            self.stacks.resize(id + 1, None);
        }
        self.stacks[id] = Some(Stack {
            asid: s.asid,
            stop: s.stop,
            frames,
        });
    }

    /// Where `pc` lies in address space `asid` now: the mapping added last
    /// that holds it.
    fn place(&self, asid: u64, pc: u64) -> Place {
        let Some(space) = self.spaces.get(&asid) else {
            return Place::Unmapped;
        };
        space
            .mappings
            .iter()
            .rev()
            .map(|&i| (i, &self.mappings[i]))
            .find(|(_, m)| m.start <= pc && pc < m.end)
            .map_or(Place::Unmapped, |(i, m)| Place::Mapped {
                mapping: i,
                offset: pc - m.start + m.pgoff,
            })
    }

    /// All samples and their weight.
    #[must_use]
    pub fn totals(&self) -> Tally {
        self.tallies.values().fold(Tally::default(), |a, t| Tally {
            samples: a.samples + t.samples,
            weight: a.weight.saturating_add(t.weight),
        })
    }

    /// The name of thread `tid`, and of its process.
    #[must_use]
    pub fn thread_name(&self, tid: u32) -> (Option<&Arc<str>>, Option<&Arc<str>>) {
        match self.threads.get(&tid) {
            Some((pid, name)) => (Some(name), self.processes.get(pid)),
            None => (None, None),
        }
    }

    /// The JIT code name covering `pc` in address space `asid`.
    #[must_use]
    pub fn jit_name(&self, asid: u64, pc: u64) -> Option<&JitName> {
        self.spaces
            .get(&asid)?
            .jit
            .iter()
            .rev()
            .find(|j| j.start <= pc && pc < j.end)
    }
}
