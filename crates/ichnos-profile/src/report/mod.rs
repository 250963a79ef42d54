//! `ichnos report`: a recording read back, symbolized offline, and
//! aggregated into a top table, a call tree or folded stacks
//! (docs/cli.md specifies the text), or exported for the viewers people
//! use ([`export`]).

mod command_line;
mod diff;
pub mod export;
mod load;
mod print;
mod symbols;
mod timeline;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

pub use command_line::quote_words;
pub use diff::{diff, write_diff, write_diff_flamegraph, DiffRow};
pub use load::{
    Description, JitName, Mapping, Place, Profile, Sample, Space, Stack, Tally, TraceClock,
};
pub use print::{folded, top, tree, write_top, Sort, TopRow, INCOMPLETE};
pub use symbols::{
    symbolize, Frame, SymbolOptions, Symbolized, INDEX_DWARF_BYTES, INDEX_THRESHOLD, SPAN_OBJECT,
};
pub use timeline::for_each_sample;

use ichnos_data::{OffCpuState, StackStop};

/// Which samples a report counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these processes (empty: all).
    pub pids: Vec<u32>,
    /// Only these threads (empty: all).
    pub tids: Vec<u32>,
    /// Only threads (or processes) of this name.
    pub comm: Option<String>,
}

impl Filter {
    /// Whether the samples of thread `tid` of process `pid` with stack
    /// `stack` are kept. A name is matched against the names the thread
    /// and its process had in the program the stack's address space ran
    /// (the last there), as `perf report --comms` matches each sample's
    /// comm: a child's samples before an exec keep its name of then.
    #[must_use]
    pub fn keeps(&self, profile: &Profile, stack: u64, pid: u32, tid: u32) -> bool {
        if !self.pids.is_empty() && !self.pids.contains(&pid) {
            return false;
        }
        if !self.tids.is_empty() && !self.tids.contains(&tid) {
            return false;
        }
        let Some(comm) = &self.comm else {
            return true;
        };
        let matches = |n: Option<&Arc<str>>| n.is_some_and(|n| **n == **comm);
        let space = usize::try_from(stack)
            .ok()
            .and_then(|i| profile.stacks.get(i)?.as_ref())
            .map(|stored| stored.asid);
        let Some(asid) = space else {
            let (thread_name, process_name) = profile.thread_name(pid, tid);
            return matches(thread_name) || matches(process_name);
        };
        // The process's name then: its first thread's.
        let process_name = profile
            .thread_name_in(asid, pid, pid)
            .or_else(|| profile.thread_name(pid, tid).1);
        matches(profile.thread_name_in(asid, pid, tid)) || matches(process_name)
    }
}

/// One stack's samples in one thread, symbolized: what every output
/// aggregates.
#[derive(Clone, Debug)]
pub struct Weighted<'a> {
    /// The thread's name (or its number).
    pub thread: Arc<str>,
    /// Its process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The frames, innermost first. Time off the CPU has one more, the
    /// innermost: [`off_cpu_frame`].
    pub frames: Cow<'a, [Frame]>,
    /// Why the walk ended.
    pub stop: StackStop,
    /// Samples and weight. Off the CPU, `weight` is the nanoseconds off
    /// and `samples` the samples the clock would have taken in that time
    /// (at the recording's mean period), so that both sit in one profile.
    pub tally: Tally,
    /// Time off the CPU, and why; `None`: samples on it.
    pub off_cpu: Option<OffCpuState>,
}

/// `ns` in sampling periods of `period` nanoseconds, to the nearest.
// A non-negative f64 below 2^64 (nanoseconds over a period of at least
// one) converts exactly enough; `as` saturates beyond.
#[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
pub(crate) fn periods(ns: u64, period: f64) -> u64 {
    (ns as f64 / period.max(1.0)).round() as u64
}

/// The object named by the frame that marks time off the CPU.
pub const OFF_CPU_OBJECT: &str = "[off-CPU]";

/// The innermost frame of a stack off the CPU: `[waiting]` or
/// `[preempted]` in the object `[off-CPU]`, so that every output shows
/// where threads wait beside where they run.
#[must_use]
pub fn off_cpu_frame(state: OffCpuState) -> Frame {
    Frame {
        function: Arc::from(format!("[{}]", state.describe())),
        object: Arc::from(OFF_CPU_OBJECT),
        source: None,
        inlined: false,
        jit: false,
        kernel: false,
    }
}

/// A stack of the recording, symbolized and resolved, for a thread the
/// filter keeps: its frames, its walk's end, and the thread's name (each
/// thread's looked up once, in `names`).
fn keep<'a>(
    profile: &'a Profile,
    symbols: &'a Symbolized,
    filter: &Filter,
    names: &mut HashMap<(u64, u32, u32), Arc<str>>,
    (stack, pid, tid): (u64, u32, u32),
) -> Option<(&'a [Frame], StackStop, Arc<str>)> {
    if !filter.keeps(profile, stack, pid, tid) {
        return None;
    }
    let frames = symbols.stacks.get(stack as usize)?.as_deref()?;
    let stored = profile.stacks.get(stack as usize)?.as_ref()?;
    let (stop, asid) = (stored.stop, stored.asid);
    let thread = names
        .entry((asid, pid, tid))
        .or_insert_with(|| {
            profile
                .thread_name_in(asid, pid, tid)
                .cloned()
                .unwrap_or_else(|| Arc::from(format!("thread {tid}")))
        })
        .clone();
    Some((frames, stop, thread))
}

/// The samples `filter` keeps, with their symbolized stacks.
#[must_use]
pub fn weighted<'a>(
    profile: &'a Profile,
    symbols: &'a Symbolized,
    filter: &Filter,
) -> Vec<Weighted<'a>> {
    let mut out = Vec::new();
    let mut names: HashMap<(u64, u32, u32), Arc<str>> = HashMap::new();
    let mut keys: Vec<_> = profile.tallies.iter().collect();
    // A stable order: by stack, then thread.
    keys.sort_unstable_by_key(|(k, _)| **k);
    for (&key, tally) in keys {
        let Some((frames, stop, thread)) = keep(profile, symbols, filter, &mut names, key) else {
            continue;
        };
        out.push(Weighted {
            thread,
            pid: key.1,
            tid: key.2,
            frames: Cow::Borrowed(frames),
            stop,
            tally: *tally,
            off_cpu: None,
        });
    }
    let period = profile.sample_period_ns();
    let mut off: Vec<_> = profile.off_cpu.iter().collect();
    off.sort_unstable_by_key(|(k, _)| **k);
    for (&(stack, pid, tid, state), tally) in off {
        let key = (stack, pid, tid);
        let Some((frames, stop, thread)) = keep(profile, symbols, filter, &mut names, key) else {
            continue;
        };
        let mut with_leaf = Vec::with_capacity(frames.len() + 1);
        with_leaf.push(off_cpu_frame(state));
        with_leaf.extend_from_slice(frames);
        out.push(Weighted {
            thread,
            pid,
            tid,
            frames: Cow::Owned(with_leaf),
            stop,
            tally: Tally {
                samples: periods(tally.weight, period),
                weight: tally.weight,
            },
            off_cpu: Some(state),
        });
    }
    out
}
