//! `ichnos report` of a function trace (made by `ichnos trace`): its
//! options checked and turned into what `crate::trace` writes, and the
//! options only a function trace takes refused for a sampling profile.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use ichnos_profile::report::export;

use super::{Format, ReportArgs, SortBy};

/// Refuses what only a function trace has for the sampling profile at
/// `input`.
pub(super) fn refuse_for_a_profile(args: &ReportArgs, format: Format, input: &Path) -> Result<()> {
    if !args.call_filters().is_empty() {
        bail!(
            "-F, -N and -D choose a function trace's calls (made by `ichnos trace`), and {} is a sampling profile",
            input.display()
        );
    }
    if matches!(format, Format::Perfetto | Format::Chrome) {
        bail!(
            "--format {} writes a function trace's calls (made by `ichnos trace`), and {} is a sampling profile: it opens in Perfetto as --format firefox",
            format.name(),
            input.display()
        );
    }
    // Checked before anything is written (the table's header came first).
    if args.sort.is_some() && format != Format::Top {
        usage!("--sort orders the table: use it with --format top");
    }
    if args.limit.is_some() && format != Format::Top {
        usage!("--limit counts the table's rows: use it with --format top (the tree folds by --min-percent)");
    }
    if args.min_percent.is_some() && format != Format::Tree {
        usage!("--min-percent folds the tree: use it with --tree");
    }
    if let Some(other @ (SortBy::Calls | SortBy::Avg | SortBy::Max)) = args.sort {
        usage!(
            "--sort {}: only a function trace (--trace) is sorted by it",
            format!("{other:?}").to_lowercase()
        );
    }
    Ok(())
}

/// `ichnos report --trace`: a function trace's per-function table,
/// folded stacks, flame graph or timeline.
pub(super) fn report(args: &ReportArgs, format: Format, input: &Path, quiet: bool) -> Result<()> {
    use crate::trace::{TraceOutput, TraceSort};
    if args.sort.is_some() && format != Format::Top {
        usage!("--sort orders the table: use it with --format top");
    }
    if args.pid.len() + usize::from(args.comm.is_some()) > 0 {
        usage!("a function trace is filtered by thread (--tid), not by --pid or --comm");
    }
    if args.limit.is_some() && format != Format::Top {
        usage!("--limit counts the table's rows: use it with --format top");
    }
    // Options of a profile's report that a trace's would silently ignore.
    for (given, option) in [
        (args.addresses, "--addresses"),
        (args.no_inline, "--no-inline"),
        (args.min_percent.is_some(), "--min-percent"),
    ] {
        if given {
            usage!("{option} is for a sampling profile's report; a function trace names each call's function");
        }
    }
    let what = match format {
        Format::Top => TraceOutput::Top {
            sort: match args.sort.unwrap_or(SortBy::Total) {
                SortBy::Total => TraceSort::Total,
                SortBy::SelfTime => TraceSort::SelfTime,
                SortBy::Calls => TraceSort::Calls,
                SortBy::Avg => TraceSort::Avg,
                SortBy::Max => TraceSort::Max,
            },
            limit: args.limit(),
        },
        Format::Folded => TraceOutput::Folded,
        Format::Svg => TraceOutput::Svg(export::FlamegraphOptions {
            title: args.title.clone(),
            icicle: args.icicle,
        }),
        Format::Perfetto => TraceOutput::Perfetto,
        Format::Chrome => TraceOutput::Chrome,
        other => bail!(
            "--format {}: a function trace is written as top, folded, svg, perfetto or chrome",
            other.name()
        ),
    };
    // Read (and its filters checked) before -o FILE is created: an error
    // leaves an existing FILE as it was.
    let trace = crate::trace::open_for_report(input, &args.call_filters(), args.no_index, quiet)?;
    let mut out = super::output(args)?;
    crate::trace::report(&trace, &what, &args.tid, quiet, &mut out)?;
    out.flush().context("cannot write the report")
}
