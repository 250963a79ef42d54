//! Two recordings compared: per function, how its share of the time
//! changed from a base recording to a new one, and a differential flame
//! graph. Functions are matched by name and object (the object's file
//! name), never by address, so two builds of one program compare.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use super::load::Tally;
use super::print::{folded, shown_rows, top, write_more, Sort, TopRow};
use super::Weighted;

/// One function in either recording.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffRow {
    /// The function.
    pub function: Arc<str>,
    /// Its object.
    pub object: Arc<str>,
    /// Its samples in the base recording: in itself, and in all it called.
    pub base: (Tally, Tally),
    /// The same in the new recording.
    pub new: (Tally, Tally),
    /// Its self share in the new recording less its share in the base,
    /// in percentage points.
    pub self_change: f64,
    /// The same for its total share.
    pub total_change: f64,
}

impl DiffRow {
    /// The change that ranks the row: of self or total share, whichever
    /// is larger in size (self where they tie).
    #[must_use]
    pub fn change(&self) -> f64 {
        if self.total_change.abs() > self.self_change.abs() {
            self.total_change
        } else {
            self.self_change
        }
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Every function of `base` or `new` with the change of its shares (of
/// each recording's whole weight), the largest change first: of self or
/// total share, whichever is larger (a function whose callees' time
/// moved ranks by its total), then of self share, then by name.
#[must_use]
pub fn diff(base: &[Weighted<'_>], new: &[Weighted<'_>]) -> Vec<DiffRow> {
    let whole = |samples: &[Weighted<'_>]| {
        samples
            .iter()
            .fold(0u64, |a, w| a.saturating_add(w.tally.weight))
    };
    let (base_whole, new_whole) = (whole(base), whole(new));
    let mut rows: HashMap<(Arc<str>, Arc<str>), DiffRow> = HashMap::new();
    let mut add = |r: TopRow, is_new: bool| {
        let row = rows
            .entry((Arc::clone(&r.function), Arc::clone(&r.object)))
            .or_insert_with(|| DiffRow {
                function: Arc::clone(&r.function),
                object: Arc::clone(&r.object),
                base: (Tally::default(), Tally::default()),
                new: (Tally::default(), Tally::default()),
                self_change: 0.0,
                total_change: 0.0,
            });
        if is_new {
            row.new = (r.self_tally, r.total_tally);
        } else {
            row.base = (r.self_tally, r.total_tally);
        }
    };
    for r in top(base, Sort::SelfTime) {
        add(r, false);
    }
    for r in top(new, Sort::SelfTime) {
        add(r, true);
    }
    let mut rows: Vec<DiffRow> = rows
        .into_values()
        .map(|mut r| {
            r.self_change = share(r.new.0.weight, new_whole) - share(r.base.0.weight, base_whole);
            r.total_change = share(r.new.1.weight, new_whole) - share(r.base.1.weight, base_whole);
            r
        })
        .collect();
    rows.sort_by(|a, b| {
        b.change()
            .abs()
            .total_cmp(&a.change().abs())
            .then_with(|| b.self_change.abs().total_cmp(&a.self_change.abs()))
            // Unchanged (two recordings alike): the hottest first.
            .then_with(|| b.new.0.weight.cmp(&a.new.0.weight))
            .then_with(|| b.base.0.weight.cmp(&a.base.0.weight))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.object.cmp(&b.object))
    });
    rows
}

/// `+` for a share that grew, `-` for one that shrank, ` ` for one that
/// stayed within 0.005 points.
fn sign(change: f64) -> char {
    if change >= 0.005 {
        '+'
    } else if change <= -0.005 {
        '-'
    } else {
        ' '
    }
}

/// Writes the change table: a sign column (`+` grew, `-` shrank, by the
/// change that ranks the row), the
/// change of self and total share in points, the self shares and sample
/// counts before and after, the function and its object; at most `limit`
/// rows (0: all).
pub fn write_diff(
    out: &mut dyn Write,
    rows: &[DiffRow],
    base_whole: Tally,
    new_whole: Tally,
    limit: usize,
) -> io::Result<()> {
    writeln!(
        out,
        "  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {:<40} OBJECT",
        "ΔSELF", "ΔTOTAL", "SELF%", "SELF%", "SELF", "SELF", "FUNCTION"
    )?;
    writeln!(
        out,
        "  {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "", "", "base", "new", "base", "new"
    )?;
    for r in &rows[..shown_rows(rows.len(), limit)] {
        writeln!(
            out,
            "{} {:>+7.2}% {:>+7.2}% {:>7.2}% {:>7.2}% {:>8} {:>8}  {:<40} {}",
            sign(r.change()),
            r.self_change,
            r.total_change,
            share(r.base.0.weight, base_whole.weight),
            share(r.new.0.weight, new_whole.weight),
            r.base.0.samples,
            r.new.0.samples,
            r.function,
            r.object
        )?;
    }
    write_more(out, rows.len(), limit)
}

/// Writes the differential flame graph of `base` to `new`: the new
/// recording's stacks, each frame coloured by how its samples changed
/// (red grew, blue shrank; inferno's differential colouring), with the
/// base scaled to the new one's sample count so that recordings of
/// different lengths compare.
pub fn write_diff_flamegraph(
    base: &[Weighted<'_>],
    new: &[Weighted<'_>],
    title: Option<&str>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let lines = |samples: &[Weighted<'_>]| -> Vec<u8> {
        let mut text = Vec::new();
        for (stack, count) in folded(samples) {
            text.extend_from_slice(format!("{stack} {count}\n").as_bytes());
        }
        text
    };
    let (before, after) = (lines(base), lines(new));
    let mut diff_folded = Vec::new();
    let options = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    inferno::differential::from_readers(options, &before[..], &after[..], &mut diff_folded)?;
    let text = String::from_utf8_lossy(&diff_folded);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.map_or_else(|| "Differential Flame Graph".to_owned(), str::to_owned);
    "samples".clone_into(&mut opts.count_name);
    if text.trim().is_empty() {
        return super::export::write_empty_flamegraph(&opts.title, out);
    }
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut *out)
        .map_err(super::export::keeping_io_kind)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Frame;
    use ichnos_data::StackStop;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame {
                function: Arc::from(*n),
                object: Arc::from("prog"),
                source: None,
                inlined: false,
                jit: false,
                kernel: false,
            })
            .collect()
    }

    fn weighted(frames: &[Frame], samples: u64) -> Weighted<'_> {
        Weighted {
            thread: Arc::from("prog"),
            pid: 1,
            tid: 1,
            frames: std::borrow::Cow::Borrowed(frames),
            stop: StackStop::Complete,
            tally: Tally {
                samples,
                weight: samples * 1000,
            },
            off_cpu: None,
        }
    }

    #[test]
    fn shares_change_by_their_own_recordings_whole_and_the_largest_change_leads() {
        let a = frames(&["a", "main"]);
        let b = frames(&["b", "main"]);
        // Base: a 75%, b 25% of 400; new: a 20%, b 80% of 100.
        let base = [weighted(&a, 300), weighted(&b, 100)];
        let new = [weighted(&a, 20), weighted(&b, 80)];
        let rows = diff(&base, &new);
        let names: Vec<&str> = rows.iter().map(|r| &*r.function).collect();
        // a and b changed as much: b, hotter in NEW, first.
        assert_eq!(names, ["b", "a", "main"]);
        assert!((rows[1].change() - -55.0).abs() < 1e-9);
        assert!((rows[1].self_change - -55.0).abs() < 1e-9);
        assert!((rows[0].self_change - 55.0).abs() < 1e-9);
        assert!(rows[2].self_change.abs() < 1e-9);
        assert!(rows[2].total_change.abs() < 1e-9);
        assert_eq!(rows[1].base.0.samples, 300);
        assert_eq!(rows[1].new.0.samples, 20);
    }

    #[test]
    fn rows_that_did_not_change_come_hottest_first() {
        // The same recording twice: no change anywhere; "zz" holds the
        // time, "aa" little of it (by name it came first).
        let zz = frames(&["zz", "main"]);
        let aa = frames(&["aa", "main"]);
        let samples = [weighted(&zz, 90), weighted(&aa, 10)];
        let rows = diff(&samples, &samples);
        let names: Vec<&str> = rows.iter().map(|r| &*r.function).collect();
        assert_eq!(names, ["zz", "aa", "main"]);
    }

    #[test]
    fn a_caller_whose_callees_time_moved_ranks_by_its_total() {
        // Base: outer -> leaf 50%, other 50%; new: outer -> leaf 90%,
        // other 10%. outer has no self time in either.
        let outer = frames(&["leaf", "outer", "main"]);
        let other = frames(&["other", "main"]);
        let base = [weighted(&outer, 50), weighted(&other, 50)];
        let new = [weighted(&outer, 90), weighted(&other, 10)];
        let rows = diff(&base, &new);
        let names: Vec<&str> = rows.iter().map(|r| &*r.function).collect();
        // leaf and other change by 40 points of self share, outer by 40
        // of total: outer follows the two self changes of its size.
        assert_eq!(names, ["leaf", "other", "outer", "main"]);
        let outer_row = &rows[2];
        assert!(outer_row.self_change.abs() < 1e-9);
        assert!((outer_row.change() - 40.0).abs() < 1e-9);
        assert_eq!(sign(outer_row.change()), '+');
    }

    #[test]
    fn a_function_in_one_recording_only_is_compared_with_nothing() {
        let a = frames(&["a", "main"]);
        let c = frames(&["c", "main"]);
        let rows = diff(&[weighted(&a, 10)], &[weighted(&c, 10)]);
        let c_row = rows.iter().find(|r| &*r.function == "c").unwrap();
        assert_eq!(c_row.base.0.samples, 0);
        assert!((c_row.self_change - 100.0).abs() < 1e-9);
        let a_row = rows.iter().find(|r| &*r.function == "a").unwrap();
        assert!((a_row.self_change - -100.0).abs() < 1e-9);
        assert_eq!(sign(a_row.self_change), '-');
        assert_eq!(sign(c_row.self_change), '+');
        assert_eq!(sign(0.001), ' ');
    }
}
