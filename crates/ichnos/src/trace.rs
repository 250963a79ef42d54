//! `ichnos trace`, `ichnos replay` and `ichnos report --trace`: flags
//! into `ichnos_trace`, one summary line at the end of a trace.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ichnos_profile::report::SymbolOptions;
use ichnos_trace::replay::ReplayOptions;
use ichnos_trace::totals::TotalsSort;
use ichnos_trace::{CallFilters, Trace, TraceOptions};

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
    /// event; a power of two, at least 4K) per thread, written when the
    /// program exits, crashes, receives SIGUSR2 or calls
    /// `ichnos_snapshot()`.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    ring: Option<u64>,
    /// Trace calls only this many levels deep (under -F, counted from
    /// the innermost call of a -F function).
    #[arg(short = 'D', long = "depth", value_name = "DEPTH", value_parser = clap::value_parser!(u32).range(1..))]
    depth: Option<u32>,
    /// Leave out calls shorter than this (10us, 1.5ms; plain
    /// numbers are nanoseconds) and the calls they made, as the program
    /// runs.
    #[arg(short = 't', long = "time-filter", value_name = "MIN_DURATION", value_parser = crate::units::parse_duration)]
    time_filter: Option<u64>,
    /// Trace only the calls inside FUNC and the calls it makes (repeat for
    /// more; `*` matches any characters; the executable's functions).
    #[arg(short = 'F', long = "filter", value_name = "FUNC")]
    filter: Vec<String>,
    /// Leave out FUNC and the calls it makes (repeat for more; `*`
    /// matches any characters; the executable's functions).
    #[arg(short = 'N', long = "notrace", value_name = "FUNC")]
    notrace: Vec<String>,
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

/// Where the runtime library is: `$ICHNOS_PRELOAD`, or the newest of
/// the one next to this executable, in `deps/` beside it (where cargo
/// builds it) and in `../lib/ichnos`.
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
    // Where cargo left two (the one beside the executable from a build
    // of the runtime alone, the one in deps/ from a build of ichnos), the
    // newer is the one built from the sources at hand.
    candidates
        .iter()
        .filter_map(|c| Some((std::fs::metadata(c).ok()?.modified().ok()?, c)))
        .max_by_key(|&(modified, _)| modified)
        .map_or(&candidates[0], |(_, c)| c)
        .clone()
}

/// Runs `ichnos trace`; the command's exit status is the result.
pub fn trace(args: &TraceArgs, quiet: bool) -> Result<u8> {
    if args.output.as_os_str() == "-" {
        usage!("-o -: a recording is written to a file, not to standard output");
    }
    for (flag, size) in [("-b", args.buffer), ("--ring", args.ring)] {
        if size == Some(0) {
            usage!("{flag} 0: a thread's buffer must hold events");
        }
    }
    if args.ring.is_some() && args.time_filter.is_some_and(|t| t > 0) {
        // Held entries are written late, with their own older times; a
        // ring saved again skips events older than the ones it read.
        usage!("-t is not for the flight recorder (--ring): replay -t hides short calls of a ring's trace");
    }
    // A buffer or ring goes to the recorder as one frame, at most 1 GiB.
    let most = ichnos_data::wire::MAX_FRAME_BYTES;
    for (flag, size) in [("-b", args.buffer), ("--ring", args.ring)] {
        if size.is_some_and(|s| s > most) {
            usage!("{flag}: at most 1G (a thread's buffer or ring is sent whole)");
        }
    }
    if let Some(asked) = args.ring {
        let made = ichnos_data::wire::ring_bytes(asked);
        if made != asked && !quiet {
            eprintln!(
                "note: --ring {}: each thread keeps {} ({} events): a ring is a power of two of at least 4 KiB",
                crate::units::bytes(asked),
                crate::units::bytes(made),
                crate::units::thousands(made / ichnos_data::wire::EVENT_BYTES as u64)
            );
        }
    }
    let options = TraceOptions {
        command: args.command.clone(),
        output: args.output.clone(),
        preload: runtime(),
        buffer: args.buffer,
        ring: args.ring,
        depth: args.depth,
        min_duration: args.time_filter,
        only: args.filter.clone(),
        not: args.notrace.clone(),
        monotonic: args.monotonic,
        compress_on_a_thread: None,
    };
    let stop = ichnos_profile::catch_stop_signals();
    let mut status_line = crate::status_line::StatusLine::start(quiet);
    let mut show = |s: &ichnos_trace::TraceStatus| {
        if let Some(line) = status_line.as_mut() {
            line.show(&format!(
                "tracing: {:.1} s, {} received, {} lost, {}",
                s.elapsed.as_secs_f64(),
                crate::units::counted(s.events, "event", "events"),
                crate::units::thousands(s.lost),
                crate::units::counted(s.processes as u64, "process", "processes")
            ));
        }
    };
    let result = ichnos_trace::trace(&options, stop, &mut show);
    drop(status_line);
    let summary = result?;
    if !quiet {
        for r in &summary.refused {
            eprintln!("warning: {r}");
        }
        let lost = if summary.lost > 0 {
            format!(", {} LOST", crate::units::thousands(summary.lost))
        } else {
            ", 0 lost".to_owned()
        };
        let counted = |n: usize, one, many| crate::units::counted(n as u64, one, many);
        eprintln!(
            "ichnos: traced {:.2} s: {}{lost}, {}, {} ({}); wrote {} ({})",
            summary.duration.as_secs_f64(),
            crate::units::counted(summary.events, "event", "events"),
            counted(summary.processes, "process", "processes"),
            counted(summary.threads, "thread", "threads"),
            if summary.tsc {
                "TSC"
            } else {
                "CLOCK_MONOTONIC"
            },
            summary.output.display(),
            crate::units::bytes(summary.bytes)
        );
        if let Some(note) = crate::ending::signal_note(
            Some(summary.status),
            stop.load(std::sync::atomic::Ordering::Relaxed),
        ) {
            eprintln!("note: {note}");
        }
        note_left_running(&summary.left_running);
        note_cut_short(&summary.cut_short);
        if summary.events == 0 {
            eprintln!(
                "note: no function was traced: {}",
                nothing_traced_why(&summary, &options)
            );
        }
    }
    Ok(crate::ending::exit_code(Some(summary.status)))
}

/// The note of a trace stopped while processes the command started ran
/// on (`left_running`, by process id), if any.
fn note_left_running(left_running: &[u32]) {
    if left_running.is_empty() {
        return;
    }
    let pids: Vec<String> = left_running.iter().map(u32::to_string).collect();
    let (n, one) = (left_running.len() as u64, left_running.len() == 1);
    eprintln!(
        "note: the trace was stopped while {} the command started ran on ({} {}): only \
         what {} handed over by then is in it (not {} threads' partly filled buffers)",
        crate::units::counted(n, "process", "processes"),
        if one { "pid" } else { "pids" },
        pids.join(", "),
        if one { "it" } else { "they" },
        if one { "its" } else { "their" }
    );
}

/// The note of processes that ended before their runtime handed their
/// threads' last buffers over (`cut_short`, by process id), if any.
fn note_cut_short(cut_short: &[u32]) {
    if cut_short.is_empty() {
        return;
    }
    let pids: Vec<u64> = cut_short.iter().map(|&p| u64::from(p)).collect();
    eprintln!(
        "note: {}",
        ichnos_trace::cut_short_note(&pids, pids.len() as u64)
    );
}

/// Why a trace holds no event, as far as the recorder can tell.
fn nothing_traced_why(summary: &ichnos_trace::TraceSummary, options: &TraceOptions) -> String {
    let program = options
        .command
        .first()
        .map_or(String::new(), |p| p.to_string_lossy().into_owned());
    let filters: Vec<&str> = [
        ("-F", !options.only.is_empty()),
        ("-N", !options.not.is_empty()),
        ("-D", options.depth.is_some()),
        ("-t", options.min_duration.is_some_and(|t| t > 0)),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect();
    let cut_short = summary.cut_short.len();
    if cut_short > 0 && cut_short >= summary.processes {
        format!(
            "what was called was never handed over (the {} first: above)",
            if cut_short == 1 {
                "process ended"
            } else {
                "processes ended"
            }
        )
    } else if summary.processes > 0 {
        let why = if filters.is_empty() {
            "is the program built with -finstrument-functions?".to_owned()
        } else {
            format!(
                "no call passed the filters ({}), or the program is not built with \
                 -finstrument-functions",
                filters.join(", ")
            )
        };
        if cut_short > 0 {
            format!("{why} (or its calls were in the buffers never handed over: above)")
        } else {
            why
        }
    } else if summary.static_program {
        format!(
            "{program} is linked statically: the tracing runtime is loaded by the dynamic linker \
             (LD_PRELOAD), which a static program runs without"
        )
    } else {
        "no process loaded the tracing runtime (a set-user-ID program ignores LD_PRELOAD, \
         and a program may clear it before it runs what it runs)"
            .to_owned()
    }
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
    /// Only the calls inside FUNC and the calls it makes, as `trace -F`
    /// records them (repeat for more; `*` matches any characters).
    #[arg(short = 'F', long = "filter", value_name = "FUNC")]
    filter: Vec<String>,
    /// Not FUNC nor the calls it makes, as `trace -N` (repeat for more).
    #[arg(short = 'N', long = "notrace", value_name = "FUNC")]
    notrace: Vec<String>,
    /// Calls only this many levels deep, as `trace -D` (under -F, counted
    /// from the innermost call of a -F function).
    #[arg(short = 'D', long = "depth", value_name = "DEPTH", value_parser = clap::value_parser!(u32).range(1..))]
    depth: Option<u32>,
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
    let mut trace = open(&args.input, args.no_index, quiet)?;
    let filters = CallFilters {
        only: args.filter.clone(),
        not: args.notrace.clone(),
        depth: args.depth,
    };
    restrict(&mut trace, &filters, quiet)
        .with_context(|| format!("cannot replay {}", args.input.display()))?;
    if !quiet {
        // A thread asked for that the trace has not: said, where the
        // replay would print only its header.
        for tid in &args.tid {
            if !trace.profile.threads.keys().any(|&(_, t)| t == *tid) {
                eprintln!(
                    "warning: --tid {tid}: {} has no thread of that id",
                    args.input.display()
                );
            }
        }
    }
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

/// Keeps only the calls `filters` would have recorded in every reading
/// of `trace`, warning (before anything is printed) of each `-N` pattern
/// that hides nothing.
fn restrict(trace: &mut Trace, filters: &CallFilters, quiet: bool) -> Result<()> {
    let unmatched = trace.restrict(filters)?;
    if !quiet {
        for pattern in unmatched {
            eprintln!(
                "warning: -N {pattern}: no function called in the trace is named so; it hides nothing"
            );
        }
    }
    Ok(())
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

/// What `report --trace` writes.
#[derive(Clone, Debug)]
pub enum TraceOutput {
    /// The per-function table, sorted, at most `limit` rows (0: all).
    Top {
        /// The order.
        sort: TraceSort,
        /// At most this many rows.
        limit: usize,
    },
    /// Folded stacks weighted by nanoseconds.
    Folded,
    /// A flame graph of the time.
    Svg(ichnos_profile::report::export::FlamegraphOptions),
    /// Perfetto's protobuf trace.
    Perfetto,
    /// Chrome's trace event JSON.
    Chrome,
}

/// Chrome JSON past this many bytes does not load in Perfetto's UI or
/// `chrome://tracing` (both parse it whole in the browser).
const LARGE_JSON: u64 = 256 << 20;

/// The trace at `path` for `ichnos report --trace`, restricted to the
/// calls `calls` keep.
pub fn open_for_report(
    path: &Path,
    calls: &CallFilters,
    no_index: bool,
    quiet: bool,
) -> Result<Trace> {
    let mut trace = open(path, no_index, quiet)?;
    restrict(&mut trace, calls, quiet)
        .with_context(|| format!("cannot report {}", path.display()))?;
    Ok(trace)
}

/// The header lines of a function trace's table, as the profile's top
/// table has them: what was recorded, where, when, and how much of it.
fn trace_header(
    out: &mut dyn Write,
    trace: &Trace,
    totals: &ichnos_trace::totals::Totals,
    tids: &[u32],
) -> std::io::Result<()> {
    let d = &trace.profile.description;
    let counted = |n: usize, one, many| crate::units::counted(n as u64, one, many);
    let shown = match (tids, trace.is_restricted()) {
        ([], false) => String::new(),
        ([], true) => " (the calls the filters keep)".to_owned(),
        (tids, restricted) => format!(
            " (thread{} {}{})",
            if tids.len() == 1 { "" } else { "s" },
            tids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            if restricted {
                ", the calls the filters keep"
            } else {
                ""
            }
        ),
    };
    writeln!(
        out,
        "# {}: {} of {} over {}{shown}; {}, {}; {} lost",
        trace.path().display(),
        if d.event.ends_with(":ring") {
            "flight-recorder trace"
        } else {
            "function trace"
        },
        crate::units::counted(totals.calls, "call", "calls"),
        ichnos_trace::replay::duration(totals.span_ns).trim_start(),
        counted(totals.processes, "process", "processes"),
        counted(totals.threads, "thread", "threads"),
        crate::units::thousands(totals.lost),
    )?;
    writeln!(
        out,
        "# recorded by {} on {} (Linux {}) at {}{}",
        d.recorder,
        d.host,
        d.kernel,
        crate::units::utc(d.start_realtime_ns),
        if d.command.is_empty() {
            String::new()
        } else {
            format!(": {}", d.command_line())
        }
    )
}

/// `ichnos report --trace`: the per-function table, folded stacks, a
/// flame graph, or a timeline for Perfetto or Chrome's viewers, of
/// threads `tids` (none: all).
pub fn report(
    trace: &Trace,
    what: &TraceOutput,
    tids: &[u32],
    quiet: bool,
    out: &mut dyn Write,
) -> Result<()> {
    use ichnos_trace::export;
    let written = match what {
        TraceOutput::Top { sort, limit } => {
            let sort = match sort {
                TraceSort::Total => TotalsSort::Total,
                TraceSort::SelfTime => TotalsSort::SelfTime,
                TraceSort::Calls => TotalsSort::Calls,
                TraceSort::Avg => TotalsSort::Average,
                TraceSort::Max => TotalsSort::Max,
            };
            let totals = ichnos_trace::totals::totals(trace, tids, sort)?;
            let limit = (*limit > 0).then_some(*limit);
            trace_header(out, trace, &totals, tids)
                .and_then(|()| ichnos_trace::totals::write_totals(&totals.rows, limit, &mut *out))
        }
        TraceOutput::Folded => {
            let lines = export::folded(trace, tids)?;
            lines
                .iter()
                .try_for_each(|(line, ns)| writeln!(out, "{line} {ns}"))
        }
        TraceOutput::Svg(options) => {
            let lines = export::folded(trace, tids)?;
            ichnos_profile::report::export::write_folded_flamegraph(&lines, "ns", options, out)
        }
        TraceOutput::Perfetto | TraceOutput::Chrome => {
            let mut counted = Counted { out, bytes: 0 };
            let summary = if matches!(what, TraceOutput::Perfetto) {
                export::write_perfetto(trace, tids, &mut counted)
            } else {
                export::write_chrome(trace, tids, &mut counted)
            };
            match summary {
                Ok(summary) => {
                    if !quiet {
                        exported(&summary, counted.bytes, matches!(what, TraceOutput::Chrome));
                    }
                    Ok(())
                }
                Err(export::ExportError::Write(e)) => Err(e),
                Err(e) => return Err(e.into()),
            }
        }
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write the report"),
    }
}

/// The line after a timeline export.
fn exported(summary: &ichnos_trace::export::ExportSummary, bytes: u64, json: bool) {
    let open = summary.begun.saturating_sub(summary.ended);
    eprintln!(
        "ichnos: exported {} on {}{}{} ({})",
        crate::units::counted(summary.begun, "call", "calls"),
        crate::units::counted(summary.threads, "thread", "threads"),
        if open > 0 {
            format!(", {} still open at the end", crate::units::thousands(open))
        } else {
            String::new()
        },
        if summary.instants == 1 {
            ", 1 probe or loss".to_owned()
        } else if summary.instants > 0 {
            format!(
                ", {} probes and losses",
                crate::units::thousands(summary.instants)
            )
        } else {
            String::new()
        },
        crate::units::bytes(bytes)
    );
    if json && bytes > LARGE_JSON {
        eprintln!(
            "note: JSON traces this large may not load in Perfetto's UI or chrome://tracing; --format perfetto writes the same calls in a fraction of the size"
        );
    }
}

/// A writer that counts what passes.
struct Counted<'a> {
    out: &'a mut dyn Write,
    bytes: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
