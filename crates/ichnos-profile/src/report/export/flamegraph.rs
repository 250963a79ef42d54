//! Flame graph SVGs, drawn by inferno from the folded stacks: an
//! interactive file (click a frame to zoom, search) that any browser
//! opens. An icicle graph hangs the roots from the top.

use std::io::{self, Write};

use super::super::print::folded;
use super::super::Weighted;

/// How the flame graph is drawn.
#[derive(Clone, Debug, Default)]
pub struct FlamegraphOptions {
    /// Its title (default "Flame Graph").
    pub title: Option<String>,
    /// Roots at the top, callees below.
    pub icicle: bool,
}

/// Writes `samples` as a flame graph SVG: one tower per thread name
/// (threads of one name share it, as in the folded stacks), frames root
/// first as the folded stacks give them, widths by samples.
pub fn write_flamegraph(
    samples: &[Weighted<'_>],
    options: &FlamegraphOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    write_folded_flamegraph(&folded(samples), "samples", options, out)
}

/// Writes folded stacks (`thread;frame;...;leaf` and a count, root
/// first) as a flame graph SVG, widths by the counts, which the graph
/// calls `count_name` ("samples", "ns").
pub fn write_folded_flamegraph(
    folded: &[(String, u64)],
    count_name: &str,
    options: &FlamegraphOptions,
    out: &mut dyn Write,
) -> io::Result<()> {
    let lines: Vec<String> = folded
        .iter()
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    let mut opts = inferno::flamegraph::Options::default();
    if let Some(title) = &options.title {
        opts.title.clone_from(title);
    }
    count_name.clone_into(&mut opts.count_name);
    if options.icicle {
        opts.direction = inferno::flamegraph::Direction::Inverted;
    }
    if lines.is_empty() {
        // inferno refuses an empty graph; an empty profile still gets a
        // file that says so.
        return write_empty_flamegraph(&opts.title, out);
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut *out)
        .map_err(keeping_io_kind)?;
    out.flush()
}

/// inferno's error as an `io::Error` of the kind of the write that failed
/// in it, if one did (a closed pipe stays a broken pipe, which the
/// command line ends quietly on, as it does for every other output).
pub(crate) fn keeping_io_kind<E: std::error::Error + Send + Sync + 'static>(e: E) -> io::Error {
    let mut kind = io::ErrorKind::Other;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            kind = io.kind();
            break;
        }
        cause = c.source();
    }
    io::Error::new(kind, e)
}

/// An SVG with only a title and "no samples".
pub(crate) fn write_empty_flamegraph(title: &str, out: &mut dyn Write) -> io::Result<()> {
    // XML 1.0 allows no control characters but tab and line ends.
    let escaped: String = title
        .chars()
        .map(|c| match c {
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '&' => "&amp;".to_owned(),
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => " ".to_owned(),
            c => c.to_string(),
        })
        .collect();
    writeln!(
        out,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="60" xmlns="http://www.w3.org/2000/svg"><text x="600" y="24" text-anchor="middle">{escaped}</text><text x="600" y="48" text-anchor="middle">no samples</text></svg>"#
    )?;
    out.flush()
}
