//! `ichnos trace`, `ichnos replay` and `ichnos report --trace`: flags
//! into `ichnos_trace`, one summary line at the end of a trace.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ichnos_profile::report::SymbolOptions;
use ichnos_trace::replay::ReplayOptions;
use ichnos_trace::totals::TotalsSort;
use ichnos_trace::{Trace, TraceOptions};

/// The runtime's file name.
const RUNTIME: &str = "libichnos_preload.so";

/// Arguments of `ichnos trace`.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// The recording to write (an existing one is kept as FILE.old).
    #[arg(short, long, value_name = "FILE", default_value = "ichnos.data")]
    output: PathBuf,
    /// Bytes of each thread's buffer (K/M suffixes; default 128K).
    #[arg(short = 'b', long = "buffer", value_name = "SIZE", value_parser = crate::units::parse_size)]
    buffer: Option<u64>,
    /// Flight recorder: keep only the newest events, SIZE bytes (16 per
    /// event) per thread, written when the program exits, crashes,
    /// receives SIGUSR2 or calls `ichnos_snapshot()`.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    ring: Option<u64>,
    /// Trace calls only this many levels deep.
    #[arg(short = 'D', long = "depth", value_name = "DEPTH")]
    depth: Option<u32>,
    /// Time with `CLOCK_MONOTONIC` even where the TSC is invariant.
    #[arg(long)]
    monotonic: bool,
    /// The command to run, built with `-finstrument-functions`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// Where the runtime library is: `$ICHNOS_PRELOAD`, or next to this
/// executable (where cargo builds it), or in `../lib/ichnos`.
fn runtime() -> PathBuf {
    if let Some(p) = std::env::var_os("ICHNOS_PRELOAD").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let Ok(exe) = std::env::current_exe() else {
        return PathBuf::from(RUNTIME);
    };
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(RUNTIME),
        dir.join("deps").join(RUNTIME),
        dir.join("../lib/ichnos").join(RUNTIME),
    ];
    candidates
        .iter()
        .find(|c| c.is_file())
        .unwrap_or(&candidates[0])
        .clone()
}

/// Runs `ichnos trace`; the command's exit status is the result.
pub fn trace(args: &TraceArgs, quiet: bool) -> Result<u8> {
    if args.ring == Some(0) || args.buffer == Some(0) {
        bail!("buffer sizes must be above 0");
    }
    let options = TraceOptions {
        command: args.command.clone(),
        output: args.output.clone(),
        preload: runtime(),
        buffer: args.buffer,
        ring: args.ring,
        depth: args.depth,
        monotonic: args.monotonic,
    };
    let stop = ichnos_profile::catch_stop_signals();
    let summary = ichnos_trace::trace(&options, stop)?;
    if !quiet {
        for r in &summary.refused {
            eprintln!("warning: {r}");
        }
        let lost = if summary.lost > 0 {
            format!(", {} LOST", crate::units::thousands(summary.lost))
        } else {
            ", 0 lost".to_owned()
        };
        eprintln!(
            "ichnos: traced {:.2} s: {} events{lost}, {} processes, {} threads ({}); wrote {} ({})",
            summary.duration.as_secs_f64(),
            crate::units::thousands(summary.events),
            summary.processes,
            summary.threads,
            if summary.tsc {
                "TSC"
            } else {
                "CLOCK_MONOTONIC"
            },
            summary.output.display(),
            crate::units::bytes(summary.bytes)
        );
        if summary.events == 0 {
            eprintln!(
                "note: no function was traced: is the program built with -finstrument-functions?"
            );
        }
    }
    Ok(match summary.status {
        ichnos_profile::ExitStatus::Code(c) => u8::try_from(c).unwrap_or(1),
        ichnos_profile::ExitStatus::Signal(s) => u8::try_from(128 + s).unwrap_or(255),
    })
}

/// Arguments of `ichnos replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The trace (made by `ichnos trace`).
    #[arg(short, long, value_name = "FILE", default_value = "ichnos.data")]
    input: PathBuf,
    /// Only these threads (repeatable, or comma-separated).
    #[arg(long, value_name = "TID", value_delimiter = ',')]
    tid: Vec<u32>,
    /// Hide calls shorter than this (`10us`, `1ms`; no unit: ns).
    #[arg(short = 't', long = "time-filter", value_name = "MIN_DURATION", value_parser = crate::units::parse_duration)]
    min: Option<u64>,
    /// Read and make no symbol index.
    #[arg(long)]
    no_index: bool,
}

fn open(path: &Path, no_index: bool, quiet: bool) -> Result<Trace> {
    let options = SymbolOptions {
        inlines: false,
        index_dir: if no_index {
            None
        } else {
            crate::symbolize::default_index_dir()
        },
        debug_dirs: Vec::new(),
        addresses: false,
    };
    let mut progress = crate::progress::Delayed::new(quiet, "symbolizing");
    let trace = Trace::open(path, &options, &mut |done, total| {
        progress.tick(done, total);
    });
    progress.finish();
    let trace = trace?;
    if !quiet {
        for w in &trace.warnings {
            eprintln!("warning: {w}");
        }
        if let Some(cut) = &trace.profile.truncated {
            eprintln!("warning: {cut}: the trace is incomplete (read to its last whole chunk)");
        } else if trace.profile.end.is_none() {
            eprintln!(
                "warning: {}: the trace is incomplete: the recorder did not finish it (read to its last whole chunk)",
                path.display()
            );
        }
    }
    Ok(trace)
}

/// Runs `ichnos replay`.
pub fn replay(args: &ReplayArgs, quiet: bool) -> Result<()> {
    let trace = open(&args.input, args.no_index, quiet)?;
    let options = ReplayOptions {
        tids: args.tid.clone(),
        min_ns: args.min.map(|n| n as f64),
    };
    let stdout = std::io::stdout().lock();
    match ichnos_trace::replay::replay(&trace, &options, std::io::BufWriter::new(stdout)) {
        Err(ichnos_trace::replay::ReplayError::Write(e))
            if e.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            Ok(())
        }
        other => other.with_context(|| format!("cannot replay {}", args.input.display())),
    }
}

/// How `report --trace` sorts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceSort {
    /// Time in the function's calls.
    Total,
    /// Time in the function itself.
    #[value(name = "self")]
    SelfTime,
    /// Calls.
    Calls,
    /// Average call.
    Avg,
    /// Longest call.
    Max,
}

/// `ichnos report --trace`: the per-function table.
pub fn report(
    path: &Path,
    sort: TraceSort,
    tids: &[u32],
    limit: usize,
    no_index: bool,
    quiet: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let trace = open(path, no_index, quiet)?;
    let sort = match sort {
        TraceSort::Total => TotalsSort::Total,
        TraceSort::SelfTime => TotalsSort::SelfTime,
        TraceSort::Calls => TotalsSort::Calls,
        TraceSort::Avg => TotalsSort::Average,
        TraceSort::Max => TotalsSort::Max,
    };
    let rows = ichnos_trace::totals::totals(&trace, tids, sort)?;
    let limit = (limit > 0).then_some(limit);
    match ichnos_trace::totals::write_totals(&rows, limit, out) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write the report"),
    }
}
