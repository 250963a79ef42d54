//! `ichnos report`: a recording read back, symbolized offline, and
//! aggregated into a top table, a call tree or folded stacks
//! (docs/cli.md specifies the text), or exported for the viewers people
//! use ([`export`]).

mod diff;
pub mod export;
mod load;
mod print;
mod symbols;

use std::collections::HashMap;
use std::sync::Arc;

pub use diff::{diff, write_diff, write_diff_flamegraph, DiffRow};
pub use load::{
    for_each_sample, Description, JitName, Mapping, Place, Profile, Sample, Space, Stack, Tally,
};
pub use print::{folded, top, tree, write_top, Sort, TopRow, INCOMPLETE};
pub use symbols::{
    symbolize, Frame, SymbolOptions, Symbolized, INDEX_DWARF_BYTES, INDEX_THRESHOLD,
};

use ichnos_data::StackStop;

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
    /// Whether the samples of thread `tid` of process `pid` are kept.
    #[must_use]
    pub fn keeps(&self, profile: &Profile, pid: u32, tid: u32) -> bool {
        if !self.pids.is_empty() && !self.pids.contains(&pid) {
            return false;
        }
        if !self.tids.is_empty() && !self.tids.contains(&tid) {
            return false;
        }
        let Some(comm) = &self.comm else {
            return true;
        };
        let (thread_name, process_name) = profile.thread_name(pid, tid);
        let matches = |n: Option<&Arc<str>>| n.is_some_and(|n| **n == **comm);
        matches(thread_name) || matches(process_name)
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
    /// The frames, innermost first.
    pub frames: &'a [Frame],
    /// Why the walk ended.
    pub stop: StackStop,
    /// Samples and weight.
    pub tally: Tally,
}

/// The samples `filter` keeps, with their symbolized stacks.
#[must_use]
pub fn weighted<'a>(
    profile: &'a Profile,
    symbols: &'a Symbolized,
    filter: &Filter,
) -> Vec<Weighted<'a>> {
    let mut out = Vec::new();
    let mut names: HashMap<(u32, u32), Arc<str>> = HashMap::new();
    let mut keys: Vec<_> = profile.tallies.iter().collect();
    // A stable order: by stack, then thread.
    keys.sort_unstable_by_key(|(k, _)| **k);
    for (&(stack, pid, tid), tally) in keys {
        if !filter.keeps(profile, pid, tid) {
            continue;
        }
        let (thread_name, _) = profile.thread_name(pid, tid);
        let (Some(Some(frames)), Some(Some(s))) = (
            symbols.stacks.get(stack as usize),
            profile.stacks.get(stack as usize),
        ) else {
            continue;
        };
        let thread = names
            .entry((pid, tid))
            .or_insert_with(|| {
                thread_name
                    .cloned()
                    .unwrap_or_else(|| Arc::from(format!("thread {tid}")))
            })
            .clone();
        out.push(Weighted {
            thread,
            pid,
            tid,
            frames,
            stop: s.stop,
            tally: *tally,
        });
    }
    out
}
