//! Chrome's trace event format (the JSON object form): `B` and `E`
//! events per call, `M` events naming processes and threads, `i` events
//! for probes and losses; times in microseconds with three decimals, so
//! no nanosecond is lost. Perfetto's UI, `chrome://tracing` and
//! speedscope read it; past a few hundred megabytes they do not, which is
//! what the Perfetto export is for.

use std::io::{self, Write};

use super::{export, ExportError, ExportSummary, ThreadInfo, Timeline};
use crate::read::Trace;

struct Chrome<'a> {
    out: &'a mut dyn Write,
    /// Whether an event was written (the next needs a comma).
    any: bool,
}

/// `ns` as the format's microseconds, exactly.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

impl Chrome<'_> {
    fn separator(&mut self) -> io::Result<()> {
        if self.any {
            self.out.write_all(b",\n")
        } else {
            self.any = true;
            self.out.write_all(b"\n")
        }
    }

    fn string(&mut self, s: &str) -> io::Result<()> {
        serde_json::to_writer(&mut *self.out, s).map_err(io::Error::from)
    }

    fn metadata(&mut self, what: &str, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            r#"{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"args":{{"name":"#
        )?;
        self.string(name)?;
        self.out.write_all(b"}}")
    }
}

impl Timeline for Chrome<'_> {
    fn thread(&mut self, t: &ThreadInfo<'_>) -> io::Result<()> {
        if t.first_of_process {
            self.metadata("process_name", t.pid, t.pid, t.process)?;
        }
        self.metadata("thread_name", t.pid, t.tid, t.thread)
    }

    fn begin(&mut self, pid: u32, tid: u32, _: u64, name: &str, ns: u64) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            r#"{{"ph":"B","pid":{pid},"tid":{tid},"ts":{},"name":"#,
            Micros(ns)
        )?;
        self.string(name)?;
        self.out.write_all(b"}")
    }

    fn end(&mut self, pid: u32, tid: u32, ns: u64) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            r#"{{"ph":"E","pid":{pid},"tid":{tid},"ts":{}}}"#,
            Micros(ns)
        )
    }

    fn instant(&mut self, pid: u32, tid: u32, ns: u64, name: &str, value: u64) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            r#"{{"ph":"i","s":"t","pid":{pid},"tid":{tid},"ts":{},"args":{{"value":{value}}},"name":"#,
            Micros(ns)
        )?;
        self.string(name)?;
        self.out.write_all(b"}")
    }
}

/// Writes `trace` (only threads `tids`, unless empty) to `out` as Chrome
/// trace event JSON (docs/function-trace.md). Calls still open when the
/// trace ends have a `B` event and no `E`.
pub fn write_chrome(
    trace: &Trace,
    tids: &[u32],
    out: &mut dyn Write,
) -> Result<ExportSummary, ExportError> {
    out.write_all(br#"{"displayTimeUnit":"ns","traceEvents":["#)
        .map_err(ExportError::Write)?;
    let (timeline, summary) = export(trace, tids, Chrome { out, any: false })?;
    timeline
        .out
        .write_all(b"\n]}\n")
        .and_then(|()| timeline.out.flush())
        .map_err(ExportError::Write)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_keep_every_nanosecond() {
        assert_eq!(Micros(0).to_string(), "0.000");
        assert_eq!(Micros(7).to_string(), "0.007");
        assert_eq!(Micros(1_234_567).to_string(), "1234.567");
        assert_eq!(Micros(u64::MAX).to_string(), "18446744073709551.615");
    }

    #[test]
    fn names_are_escaped_as_json_strings() {
        let mut out = Vec::new();
        let mut c = Chrome {
            out: &mut out,
            any: false,
        };
        c.begin(1, 2, 0, "a\"b\\c\n", 1500).unwrap();
        c.end(1, 2, 2500).unwrap();
        let text = format!("[{}]", String::from_utf8(out).unwrap());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[0]["name"], "a\"b\\c\n");
        assert_eq!(v[0]["ph"], "B");
        assert_eq!(v[0]["ts"], 1.5);
        assert_eq!(v[1]["ph"], "E");
        assert_eq!(v[1]["ts"], 2.5);
    }
}
