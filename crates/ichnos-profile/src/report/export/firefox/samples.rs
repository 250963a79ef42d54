//! The profile written out, each thread's sample table streamed.
//!
//! A sample table is four columns (`stack`, `timeDeltas`, `weight`,
//! `threadCPUDelta`, in the order the crate writes them), each as long
//! as the thread has samples; together they are almost the whole file.
//! Columns are written in file order. When a column's turn comes and its
//! text is not yet held, the recording is read again: that column goes
//! straight to the output as the read finds its entries, and the columns
//! after it are held as text as long as their longest possible text fits
//! the budget. The budget bounds the memory, whatever the recording's
//! length; a recording under it is read once here.

use std::io::{self, Write};

use super::{FirefoxError, RawObject};

/// One sample as its thread's table holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Entry {
    /// Its stack's index in the thread's stack table (`None`: empty).
    pub stack: Option<u64>,
    /// Milliseconds since the thread's previous sample (the first: since
    /// the profile's start).
    pub delta_ms: f64,
    /// Samples it counts as.
    pub weight: i32,
    /// Microseconds of CPU time it stands for.
    pub cpu_micros: u64,
}

/// A column of a sample table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Column {
    Stack,
    TimeDeltas,
    Weight,
    CpuDelta,
}

/// The columns in the order a table holds them.
const COLUMNS: [Column; 4] = [
    Column::Stack,
    Column::TimeDeltas,
    Column::Weight,
    Column::CpuDelta,
];

impl Column {
    /// Its key in the table.
    fn key(self) -> &'static str {
        match self {
            Column::Stack => "stack",
            Column::TimeDeltas => "timeDeltas",
            Column::Weight => "weight",
            Column::CpuDelta => "threadCPUDelta",
        }
    }

    /// The most bytes an entry's text takes, with its comma: a u64 in
    /// decimal is 20 digits, an i32 11 characters, and a float as
    /// `serde_json` writes it (ryu) at most 24.
    fn most_bytes(self) -> usize {
        match self {
            Column::Stack | Column::CpuDelta => 21,
            Column::TimeDeltas => 25,
            Column::Weight => 12,
        }
    }

    /// Writes `entry`'s value in this column, after a comma unless it is
    /// the first.
    fn write(self, entry: &Entry, first: bool, out: &mut dyn Write) -> io::Result<()> {
        if !first {
            out.write_all(b",")?;
        }
        match self {
            Column::Stack => match entry.stack {
                Some(index) => write!(out, "{index}"),
                None => out.write_all(b"null"),
            },
            Column::TimeDeltas => {
                serde_json::to_writer(out, &entry.delta_ms).map_err(io::Error::from)
            }
            Column::Weight => write!(out, "{}", entry.weight),
            Column::CpuDelta => write!(out, "{}", entry.cpu_micros),
        }
    }
}

/// One read of the recording: hands each exported sample to the
/// function given, with the place of its thread among the threads.
pub(super) type Pass<'a> = dyn FnMut(&mut dyn FnMut(usize, Entry)) -> Result<(), FirefoxError> + 'a;

/// The columns of every thread, numbered in file order (thread `t`'s
/// column `c` is `4 t + c`), and those held as text.
struct Columns<'a> {
    counts: &'a [usize],
    budget: usize,
    held: Vec<Option<Vec<u8>>>,
}

impl Columns<'_> {
    /// Writes column `unit`: its text held, or, read anew, straight to
    /// `out` with the columns after it that fit the budget held.
    fn write(
        &mut self,
        unit: usize,
        out: &mut dyn Write,
        pass: &mut Pass<'_>,
    ) -> Result<(), FirefoxError> {
        if let Some(text) = self.held.get_mut(unit).and_then(Option::take) {
            out.write_all(&text)?;
            return Ok(());
        }
        // The columns read along with this one: [unit, end).
        let mut end = unit + 1;
        let mut held_bytes = 0usize;
        while end < self.held.len() {
            let bytes = self.counts[end / 4].saturating_mul(COLUMNS[end % 4].most_bytes());
            if held_bytes.saturating_add(bytes) > self.budget {
                break;
            }
            held_bytes += bytes;
            end += 1;
        }
        // Each held column's longest text reserved at once: growing by
        // reallocation would copy it (and, from the heap, hold both
        // copies at the peak); pages reserved and not written are not
        // resident.
        let mut texts: Vec<Vec<u8>> = (unit + 1..end)
            .map(|u| Vec::with_capacity(self.counts[u / 4] * COLUMNS[u % 4].most_bytes()))
            .collect();
        let mut written = vec![0usize; end - unit];
        let mut failed: Option<io::Error> = None;
        pass(&mut |thread, entry| {
            for u in (4 * thread).max(unit)..(4 * thread + 4).min(end) {
                let column = COLUMNS[u % 4];
                let first = written[u - unit] == 0;
                written[u - unit] += 1;
                if u == unit {
                    if failed.is_none() {
                        failed = column.write(&entry, first, out).err();
                    }
                } else {
                    // Writing to a vector does not fail.
                    let _ = column.write(&entry, first, &mut texts[u - unit - 1]);
                }
            }
        })?;
        if let Some(error) = failed {
            return Err(error.into());
        }
        for (offset, &then) in written.iter().enumerate() {
            let first = self.counts[(unit + offset) / 4];
            if then != first {
                return Err(FirefoxError::Changed { first, then });
            }
        }
        for (offset, text) in texts.into_iter().enumerate() {
            self.held[unit + 1 + offset] = Some(text);
        }
        Ok(())
    }
}

/// Writes a JSON object member's key and colon, after a comma unless it
/// is the first.
fn key(out: &mut dyn Write, name: &str, first: bool) -> Result<(), FirefoxError> {
    if !first {
        out.write_all(b",")?;
    }
    serde_json::to_writer(&mut *out, name)?;
    out.write_all(b":")?;
    Ok(())
}

/// Writes the object `members`, calling `special` for the member named
/// `name` in place of its text.
fn object(
    out: &mut dyn Write,
    members: &RawObject,
    name: &str,
    special: &mut dyn FnMut(&mut dyn Write) -> Result<(), FirefoxError>,
) -> Result<(), FirefoxError> {
    out.write_all(b"{")?;
    for (i, (member, value)) in members.iter().enumerate() {
        key(out, member, i == 0)?;
        if member == name {
            special(out)?;
        } else {
            out.write_all(value.get().as_bytes())?;
        }
    }
    out.write_all(b"}")?;
    Ok(())
}

/// Writes the profile: `top`'s members, with `threads` in place of its
/// "threads" member, each with its sample table of `counts[t]` samples,
/// whose entries `pass` gives, read as often as `budget` requires.
pub(super) fn write_profile(
    out: &mut dyn Write,
    top: &RawObject,
    threads: &[RawObject],
    counts: &[usize],
    budget: usize,
    pass: &mut Pass<'_>,
) -> Result<(), FirefoxError> {
    let mut columns = Columns {
        counts,
        budget,
        held: vec![None; 4 * threads.len()],
    };
    object(out, top, "threads", &mut |out| {
        out.write_all(b"[")?;
        for (t, thread) in threads.iter().enumerate() {
            if t > 0 {
                out.write_all(b",")?;
            }
            object(out, thread, "samples", &mut |out| {
                let length = counts.get(t).copied().unwrap_or(0);
                write!(out, "{{\"length\":{length},\"weightType\":\"samples\"")?;
                for (c, column) in COLUMNS.iter().enumerate() {
                    key(out, column.key(), false)?;
                    out.write_all(b"[")?;
                    columns.write(4 * t + c, out, pass)?;
                    out.write_all(b"]")?;
                }
                out.write_all(b"}")?;
                Ok(())
            })?;
        }
        out.write_all(b"]")?;
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;
    use serde_json::Value;

    /// A member's text as the crate's serialization would hold it.
    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    /// Three threads' samples, in the order a recording holds them:
    /// interleaved, thread 1 with none.
    fn recording() -> Vec<(usize, Entry)> {
        (0..300u64)
            .map(|i| {
                let thread = [0, 2, 0, 2, 2][i as usize % 5];
                let entry = Entry {
                    stack: (i % 7 != 3).then_some(i % 11),
                    delta_ms: i as f64 * 0.25,
                    weight: i32::try_from(i % 4).unwrap(),
                    cpu_micros: i * 1000,
                };
                (thread, entry)
            })
            .collect()
    }

    fn thread(name: &str) -> RawObject {
        RawObject::from([
            ("name".to_owned(), raw(&format!("\"{name}\""))),
            ("samples".to_owned(), raw("{}")),
            ("tid".to_owned(), raw("7")),
        ])
    }

    /// The profile written with `budget`, and the reads it took.
    fn written(
        budget: usize,
        samples: &[(usize, Entry)],
    ) -> (Result<Vec<u8>, FirefoxError>, usize) {
        let top = RawObject::from([
            ("libs".to_owned(), raw("[]")),
            ("meta".to_owned(), raw("{\"version\":1}")),
            ("threads".to_owned(), raw("[]")),
        ]);
        let threads = [thread("a"), thread("b"), thread("c")];
        let mut counts = vec![0; 3];
        for (t, _) in recording() {
            counts[t] += 1;
        }
        let mut reads = 0;
        let mut pass = |each: &mut dyn FnMut(usize, Entry)| -> Result<(), FirefoxError> {
            reads += 1;
            for &(t, e) in samples {
                each(t, e);
            }
            Ok(())
        };
        let mut out = Vec::new();
        let result = write_profile(&mut out, &top, &threads, &counts, budget, &mut pass);
        (result.map(|()| out), reads)
    }

    #[test]
    fn each_threads_columns_hold_its_samples_in_order_whatever_the_budget() {
        let samples = recording();
        let (whole, one_read) = written(usize::MAX, &samples);
        let whole = whole.unwrap();
        assert_eq!(one_read, 1);
        // One column's worth of budget: several reads, the same file.
        let (bit_by_bit, reads) = written(2000, &samples);
        assert!(reads > 3, "{reads} reads");
        assert_eq!(bit_by_bit.unwrap(), whole);
        // No budget at all: a read per column of each thread with
        // samples (thread 1's empty columns cost nothing to hold).
        let (none, reads) = written(0, &samples);
        assert_eq!(reads, 8);
        assert_eq!(none.unwrap(), whole);

        // Read back as JSON: each thread's columns are its samples.
        let profile: Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(profile["meta"]["version"], 1);
        let threads = profile["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 3);
        for (t, thread) in threads.iter().enumerate() {
            let mine: Vec<Entry> = samples
                .iter()
                .filter(|(s, _)| *s == t)
                .map(|(_, e)| *e)
                .collect();
            let table = &thread["samples"];
            assert_eq!(table["length"], mine.len());
            assert_eq!(table["weightType"], "samples");
            let column = |key: &str| table[key].as_array().unwrap().clone();
            let stacks: Vec<Option<u64>> = column("stack").iter().map(Value::as_u64).collect();
            let deltas: Vec<f64> = column("timeDeltas")
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let weights: Vec<i64> = column("weight")
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            let cpu: Vec<u64> = column("threadCPUDelta")
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(stacks, mine.iter().map(|e| e.stack).collect::<Vec<_>>());
            assert_eq!(deltas, mine.iter().map(|e| e.delta_ms).collect::<Vec<_>>());
            assert_eq!(
                weights,
                mine.iter().map(|e| i64::from(e.weight)).collect::<Vec<_>>()
            );
            assert_eq!(cpu, mine.iter().map(|e| e.cpu_micros).collect::<Vec<_>>());
            // The thread's other members are as the crate wrote them.
            assert_eq!(thread["tid"], 7);
        }
        assert_eq!(threads[1]["samples"]["stack"], serde_json::json!([]));
    }

    #[test]
    fn a_read_that_finds_other_samples_than_the_first_is_an_error() {
        let mut samples = recording();
        samples.pop();
        for budget in [0, 2000, usize::MAX] {
            let (result, _) = written(budget, &samples);
            assert!(
                matches!(result, Err(FirefoxError::Changed { .. })),
                "budget {budget}: {:?}",
                result.map(|_| ())
            );
        }
    }
}
