//! The text outputs: the top table, the call tree and folded stacks
//! (docs/cli.md).

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::sync::Arc;

use ichnos_data::StackStop;

use super::load::Tally;
use super::symbols::Frame;
use super::Weighted;

/// How the top table is sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// By time in the function itself.
    SelfTime,
    /// By time in the function and what it called.
    Total,
}

/// One function of the top table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopRow {
    /// The function.
    pub function: Arc<str>,
    /// Its object.
    pub object: Arc<str>,
    /// Samples in the function itself.
    pub self_tally: Tally,
    /// Samples with the function anywhere on the stack.
    pub total_tally: Tally,
}

fn add(a: &mut Tally, b: Tally) {
    a.samples = a.samples.saturating_add(b.samples);
    a.weight = a.weight.saturating_add(b.weight);
}

/// The pseudo-frame above the outermost frame of a stack whose walk did
/// not reach the thread's start.
pub const INCOMPLETE: &str = "[incomplete stack]";

/// The functions of `samples` with their self and total time, sorted by
/// `sort` (then by name, so the order is stable).
#[must_use]
pub fn top(samples: &[Weighted<'_>], sort: Sort) -> Vec<TopRow> {
    let mut rows: HashMap<(Arc<str>, Arc<str>), TopRow> = HashMap::new();
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for w in samples {
        seen.clear();
        for (i, f) in w.frames.iter().enumerate() {
            let fresh = seen.insert((&f.function, &f.object));
            if i > 0 && !fresh {
                continue;
            }
            let row = rows
                .entry((Arc::clone(&f.function), Arc::clone(&f.object)))
                .or_insert_with(|| TopRow {
                    function: Arc::clone(&f.function),
                    object: Arc::clone(&f.object),
                    self_tally: Tally::default(),
                    total_tally: Tally::default(),
                });
            if i == 0 {
                add(&mut row.self_tally, w.tally);
            }
            if fresh {
                add(&mut row.total_tally, w.tally);
            }
        }
    }
    let mut rows: Vec<TopRow> = rows.into_values().collect();
    rows.sort_by(|a, b| {
        let key = |r: &TopRow| match sort {
            Sort::SelfTime => (r.self_tally.weight, r.total_tally.weight),
            Sort::Total => (r.total_tally.weight, r.self_tally.weight),
        };
        key(b)
            .cmp(&key(a))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.object.cmp(&b.object))
    });
    rows
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// How many of `rows` rows a table shows at `limit` (0: all).
pub(super) fn shown_rows(rows: usize, limit: usize) -> usize {
    if limit == 0 {
        rows
    } else {
        rows.min(limit)
    }
}

/// The line after a table that `limit` cut short: how many rows of
/// `rows` it left out.
pub(super) fn write_more(out: &mut dyn Write, rows: usize, limit: usize) -> io::Result<()> {
    let more = rows - shown_rows(rows, limit);
    if more > 0 {
        let s = if more == 1 { "" } else { "s" };
        writeln!(out, "# {more} more function{s} (--limit 0 shows all)")?;
    }
    Ok(())
}

/// Writes the top table: `Self% Total% Self Total Function Object`, at
/// most `limit` rows (0: all).
pub fn write_top(
    out: &mut dyn Write,
    rows: &[TopRow],
    whole: Tally,
    limit: usize,
) -> io::Result<()> {
    writeln!(
        out,
        "{:>7} {:>7} {:>8} {:>8}  {:<40} OBJECT",
        "SELF%", "TOTAL%", "SELF", "TOTAL", "FUNCTION"
    )?;
    for r in &rows[..shown_rows(rows.len(), limit)] {
        writeln!(
            out,
            "{:>6.2}% {:>6.2}% {:>8} {:>8}  {:<40} {}",
            percent(r.self_tally.weight, whole.weight),
            percent(r.total_tally.weight, whole.weight),
            r.self_tally.samples,
            r.total_tally.samples,
            r.function,
            r.object
        )?;
    }
    write_more(out, rows.len(), limit)
}

/// The frames of one sample root first, as trees and folded stacks show
/// them: the thread, `[incomplete stack]` where the walk stopped early,
/// then from the outermost frame to the innermost.
fn root_first<'a>(w: &'a Weighted<'a>) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    let incomplete = (w.stop != StackStop::Complete).then_some((INCOMPLETE, ""));
    std::iter::once((&*w.thread, "")).chain(incomplete).chain(
        w.frames
            .iter()
            .rev()
            .map(|f: &Frame| (&*f.function, &*f.object)),
    )
}

/// Folded stacks: `thread;frame;...;leaf COUNT` lines, root first, one
/// per distinct stack, sorted; none of count 0 (a stack off the CPU for
/// less than half a sampling period).
#[must_use]
pub fn folded(samples: &[Weighted<'_>]) -> Vec<(String, u64)> {
    let mut lines: HashMap<String, u64> = HashMap::new();
    let mut line = String::new();
    for w in samples {
        line.clear();
        for (i, (function, _)) in root_first(w).enumerate() {
            if i > 0 {
                line.push(';');
            }
            // The separators of the format cannot appear in a frame.
            line.extend(function.chars().map(|c| match c {
                ';' => ':',
                '\n' => ' ',
                c => c,
            }));
        }
        let count = lines.entry(line.clone()).or_default();
        *count = count.saturating_add(w.tally.samples);
    }
    // A stack off the CPU for less than half a period is no sample.
    let mut lines: Vec<(String, u64)> = lines.into_iter().filter(|(_, n)| *n > 0).collect();
    lines.sort_unstable();
    lines
}

/// One node of the call tree.
#[derive(Debug, Default)]
struct Node {
    function: Arc<str>,
    object: Arc<str>,
    total: Tally,
    self_tally: Tally,
    children: HashMap<(Arc<str>, Arc<str>), usize>,
}

/// Writes the call tree, callers to callees: each line a node's total and
/// self share, its samples, and the function indented by depth with its
/// object; children below `min_percent` of all samples are folded into
/// one line.
pub fn tree(
    out: &mut dyn Write,
    samples: &[Weighted<'_>],
    whole: Tally,
    min_percent: f64,
) -> io::Result<()> {
    let mut nodes = vec![Node::default()];
    for w in samples {
        let mut at = 0;
        for (function, object) in root_first(w) {
            let key: (Arc<str>, Arc<str>) = (Arc::from(function), Arc::from(object));
            let next = if let Some(&n) = nodes[at].children.get(&key) {
                n
            } else {
                nodes.push(Node {
                    function: Arc::clone(&key.0),
                    object: Arc::clone(&key.1),
                    ..Node::default()
                });
                let n = nodes.len() - 1;
                nodes[at].children.insert(key, n);
                n
            };
            at = next;
            add(&mut nodes[at].total, w.tally);
        }
        add(&mut nodes[at].self_tally, w.tally);
    }
    writeln!(
        out,
        "{:>7} {:>7} {:>8}  CALL TREE",
        "TOTAL%", "SELF%", "SAMPLES"
    )?;
    write_nodes(out, &nodes, whole, min_percent)
}

/// What is left to print of the tree, depth first.
enum Work {
    /// A node and its subtree, at a depth.
    Node(usize, usize),
    /// The line for children folded below the threshold.
    Folded {
        depth: usize,
        count: usize,
        tally: Tally,
    },
}

/// Prints the nodes below the root, depth first, without recursion (a
/// recording's stacks may be thousands of frames deep).
fn write_nodes(
    out: &mut dyn Write,
    nodes: &[Node],
    whole: Tally,
    min_percent: f64,
) -> io::Result<()> {
    let mut work = vec![Work::Node(0, 0)];
    while let Some(item) = work.pop() {
        let (at, depth) = match item {
            Work::Folded {
                depth,
                count,
                tally,
            } => {
                writeln!(
                    out,
                    "{:>6.2}% {:>7} {:>8}  {:indent$}[{count} more below {min_percent}%]",
                    percent(tally.weight, whole.weight),
                    "",
                    tally.samples,
                    "",
                    indent = depth * 2
                )?;
                continue;
            }
            Work::Node(at, depth) => (at, depth),
        };
        let n = &nodes[at];
        if at != 0 {
            // One line a node: a thread or a file named with a newline or
            // a tab (names and paths take any bytes) does not split it.
            let one_line = |name: &str| -> String {
                name.chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect()
            };
            let object = if n.object.is_empty() {
                String::new()
            } else if n.object.starts_with('[') {
                format!("  {}", one_line(&n.object))
            } else {
                format!("  [{}]", one_line(&n.object))
            };
            writeln!(
                out,
                "{:>6.2}% {:>6.2}% {:>8}  {:indent$}{}{object}",
                percent(n.total.weight, whole.weight),
                percent(n.self_tally.weight, whole.weight),
                n.total.samples,
                "",
                one_line(&n.function),
                indent = (depth - 1) * 2
            )?;
        }
        let mut children: Vec<usize> = n.children.values().copied().collect();
        children.sort_by(|&a, &b| {
            nodes[b]
                .total
                .weight
                .cmp(&nodes[a].total.weight)
                .then_with(|| nodes[a].function.cmp(&nodes[b].function))
        });
        let (shown, folded): (Vec<usize>, Vec<usize>) = children
            .into_iter()
            .partition(|&c| percent(nodes[c].total.weight, whole.weight) >= min_percent);
        if !folded.is_empty() {
            let mut tally = Tally::default();
            for &c in &folded {
                add(&mut tally, nodes[c].total);
            }
            work.push(Work::Folded {
                depth,
                count: folded.len(),
                tally,
            });
        }
        work.extend(shown.into_iter().rev().map(|c| Work::Node(c, depth + 1)));
    }
    Ok(())
}
