//! Folded stacks weighted by time: `thread;caller;...;callee NS` lines,
//! root first, one per distinct call path, each weighted by the
//! nanoseconds spent in the path's last function itself (its calls'
//! durations less the traced calls they made). A flame graph of these
//! lines is the trace's time, where the profiler's is its samples.

use rustc_hash::FxHashMap;

use super::{names, whole_ns};

/// Call depth a path shows at most: the calls deeper (a deep recursion)
/// are one frame, [`DEEPER_NAME`], whose time is theirs. Without it a
/// recursion N deep would be N lines of up to N frames.
const MAX_PATH_DEPTH: usize = 1024;
/// The function number of that frame (no function has it).
const DEEPER: u64 = u64::MAX;
/// Its name.
const DEEPER_NAME: &str = "[deeper calls]";
use crate::read::{Call, Trace, TraceReadError, Visitor};

/// One call path: a node of the call tree.
struct Node {
    parent: usize,
    /// The function (for a thread's root: unused).
    function: u64,
    self_ticks: u64,
}

#[derive(Default)]
struct Paths {
    nodes: Vec<Node>,
    children: FxHashMap<(usize, u64), usize>,
    /// Per thread: its root's node, then its open calls' nodes.
    threads: FxHashMap<(u32, u32), Vec<usize>>,
    tids: Vec<u32>,
}

impl Paths {
    fn keeps(&self, tid: u32) -> bool {
        self.tids.is_empty() || self.tids.contains(&tid)
    }
}

impl Visitor for Paths {
    fn enter(&mut self, pid: u32, tid: u32, function: u64, _: u64, depth: usize, _: u64) {
        if !self.keeps(tid) {
            return;
        }
        let nodes = &mut self.nodes;
        let open = self.threads.entry((pid, tid)).or_insert_with(|| {
            nodes.push(Node {
                parent: usize::MAX,
                function: 0,
                self_ticks: 0,
            });
            vec![nodes.len() - 1]
        });
        // The walk's depth is the count of open calls below this one.
        open.truncate(depth + 1);
        let (parent, function) = if open.len() > MAX_PATH_DEPTH {
            (open[MAX_PATH_DEPTH], DEEPER)
        } else {
            (open[open.len() - 1], function)
        };
        let node = *self.children.entry((parent, function)).or_insert_with(|| {
            nodes.push(Node {
                parent,
                function,
                self_ticks: 0,
            });
            nodes.len() - 1
        });
        open.push(node);
    }

    fn exit(&mut self, pid: u32, tid: u32, call: &Call) {
        let Some(open) = self.threads.get_mut(&(pid, tid)) else {
            return;
        };
        // Exits come innermost first: this call is the one at its depth.
        let Some(&node) = open.get(call.depth + 1) else {
            return;
        };
        open.truncate(call.depth + 1);
        let own = (call.exit - call.enter).saturating_sub(call.children);
        let n = &mut self.nodes[node];
        n.self_ticks = n.self_ticks.saturating_add(own);
    }

    fn unfinished(&mut self, pid: u32, tid: u32, call: &Call) {
        // Counted to the thread's end, as the table counts it (main in a
        // program that calls `exit` below it); innermost first, as exits.
        self.exit(pid, tid, call);
    }

    fn abandon(&mut self, pid: u32, tid: u32, _: usize, _: u64) {
        // The thread's next calls start from its root again.
        if let Some(open) = self.threads.get_mut(&(pid, tid)) {
            open.truncate(1);
        }
    }
}

/// `trace`'s calls (only threads `tids`, unless empty) as folded stacks
/// weighted by nanoseconds, sorted; paths of no time are left out, and
/// calls still open when their thread ends count to its end, as in
/// [`crate::totals`].
pub fn folded(trace: &Trace, tids: &[u32]) -> Result<Vec<(String, u64)>, TraceReadError> {
    let mut paths = Paths {
        tids: tids.to_vec(),
        ..Paths::default()
    };
    trace.walk(&mut paths)?;
    let mut roots: FxHashMap<usize, String> = FxHashMap::default();
    for (&(pid, tid), open) in &paths.threads {
        roots.insert(open[0], clean(&names(trace, pid, tid).1));
    }
    let mut lines: FxHashMap<String, u64> = FxHashMap::default();
    let mut frames: Vec<String> = Vec::new();
    for (i, node) in paths.nodes.iter().enumerate() {
        let ns = whole_ns(trace.ns(node.self_ticks));
        if node.parent == usize::MAX || ns == 0 {
            continue;
        }
        frames.clear();
        let mut at = i;
        while paths.nodes[at].parent != usize::MAX {
            let function = paths.nodes[at].function;
            frames.push(if function == DEEPER {
                DEEPER_NAME.to_owned()
            } else {
                clean(trace.name(function))
            });
            at = paths.nodes[at].parent;
        }
        frames.push(roots.get(&at).cloned().unwrap_or_default());
        frames.reverse();
        // Threads of one name share their paths, as the profiler's
        // folded stacks do.
        let line = lines.entry(frames.join(";")).or_default();
        *line = line.saturating_add(ns);
    }
    let mut lines: Vec<(String, u64)> = lines.into_iter().collect();
    lines.sort_unstable();
    Ok(lines)
}

/// A frame with the format's separators replaced.
fn clean(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' => ' ',
            c => c,
        })
        .collect()
}
