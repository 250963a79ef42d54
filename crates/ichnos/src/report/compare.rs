//! `ichnos report --diff BASE NEW`: two recordings compared, as a table of
//! each function's change of share or a differential flame graph.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Result};
use ichnos_profile::report;

use super::{finished, load, output, symbols, whole, Format, ReportArgs};

/// `ichnos report --diff BASE NEW`: the change of each function's share,
/// as a table or a differential flame graph.
pub(super) fn compare(
    args: &ReportArgs,
    format: Format,
    base_path: &Path,
    new_path: &Path,
    quiet: bool,
    verbose: bool,
) -> Result<()> {
    if !matches!(format, Format::Top | Format::Svg) {
        usage!("--diff shows a table (--format top) or a differential flame graph (--format svg)");
    }
    // Refused rather than ignored, as for one recording's report.
    if args.sort.is_some() {
        usage!("--diff sorts its rows by the change: --sort is for one recording's table");
    }
    if args.min_percent.is_some() {
        usage!("--min-percent folds the tree (--tree), which --diff does not draw");
    }
    if args.limit.is_some() && format != Format::Top {
        usage!("--limit counts the table's rows: use it with --format top");
    }
    let base = load(base_path, quiet)?.profile;
    let new = load(new_path, quiet)?.profile;
    for (path, profile) in [(base_path, &base), (new_path, &new)] {
        if profile.description.event.starts_with("function-trace") {
            bail!(
                "{} is a function trace: --diff compares sampling profiles (ichnos record, perf.data)",
                path.display()
            );
        }
    }
    let base_symbols = symbols(&base, args, quiet, verbose);
    let new_symbols = symbols(&new, args, quiet, verbose);
    let filter = args.filter();
    let base_samples = report::weighted(&base, &base_symbols, &filter);
    let new_samples = report::weighted(&new, &new_symbols, &filter);
    let mut out = output(args)?;
    if format == Format::Svg {
        report::write_diff_flamegraph(
            &base_samples,
            &new_samples,
            args.title.as_deref(),
            &mut out,
        )?;
    } else {
        for (label, path, profile, samples) in [
            ("base", base_path, &base, &base_samples),
            ("new", new_path, &new, &new_samples),
        ] {
            let shown = whole(samples);
            writeln!(
                out,
                "# {label}: {}: {} of {} ({} shown)",
                path.display(),
                crate::units::counted(profile.totals().samples, "sample", "samples"),
                profile.description.event,
                crate::units::thousands(shown.samples),
            )?;
        }
        writeln!(
            out,
            "# shares are of each recording's own whole; + grew, - shrank; functions matched by name and object"
        )?;
        let rows = report::diff(&base_samples, &new_samples);
        report::write_diff(
            &mut out,
            &rows,
            whole(&base_samples),
            whole(&new_samples),
            args.limit(),
        )?;
    }
    out.flush()?;
    drop(out);
    finished(base_path, &base)?;
    finished(new_path, &new)
}
