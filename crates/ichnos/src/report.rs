//! `ichnos report`: a recording read, symbolized and printed as a top
//! table, a call tree or folded stacks, or exported as a flame graph,
//! pprof or speedscope file (docs/cli.md).

use std::io::{IsTerminal, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ichnos_profile::report::{self, export, Filter, Profile, Sort, SymbolOptions, Symbolized};

mod compare;
mod function_trace;
mod output;

/// Output formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Functions by self and total time.
    Top,
    /// The call tree, callers to callees.
    Tree,
    /// `thread;frame;...;leaf COUNT` lines, root first.
    Folded,
    /// An interactive flame graph (SVG).
    Svg,
    /// The Firefox Profiler's processed format, gzipped (also opens in
    /// Perfetto).
    Firefox,
    /// pprof's profile.proto, gzipped (`go tool pprof`, Parca, Pyroscope).
    Pprof,
    /// speedscope's JSON file format, one profile per thread.
    Speedscope,
    /// A function trace's calls as Perfetto's protobuf trace (`--trace`).
    Perfetto,
    /// A function trace's calls as Chrome's trace event JSON (`--trace`).
    Chrome,
}

impl Format {
    /// Whether the output is not text for a terminal.
    fn is_binary(self) -> bool {
        matches!(self, Format::Pprof | Format::Firefox | Format::Perfetto)
    }

    /// Its name on the command line.
    fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .map_or_else(String::new, |v| v.get_name().to_owned())
    }
}

/// How the top table is sorted.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Time in the function itself.
    #[value(name = "self")]
    SelfTime,
    /// Time in the function and its callees.
    Total,
    /// Calls (`--trace`).
    Calls,
    /// Average call (`--trace`).
    Avg,
    /// Longest call (`--trace`).
    Max,
}

/// A share in percent, 0 to 100.
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{text}: a share in percent, 0 to 100")),
    }
}

/// Arguments of `ichnos report`.
// Command-line switches are bools by nature.
#[allow(clippy::struct_excessive_bools)]
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The recording: an ichnos recording, or a perf.data file (`perf
    /// record --call-graph dwarf` samples are unwound, `-g` chains kept).
    #[arg(short, long, value_name = "FILE", default_value = "ichnos.data")]
    input: PathBuf,
    /// The recording, as `-i FILE` names it.
    #[arg(value_name = "FILE", conflicts_with = "input")]
    file: Option<PathBuf>,
    /// What to print.
    #[arg(long, value_enum, default_value_t = Format::Top)]
    format: Format,
    /// Print the call tree (`--format tree`).
    #[arg(long, conflicts_with = "format")]
    tree: bool,
    /// Sort the top table by self or total time (default self; with
    /// `--trace` also calls, avg or max, default total).
    #[arg(long, value_enum)]
    sort: Option<SortBy>,
    /// Read a function trace (made by `ichnos trace`): total time, self
    /// time, calls, average and longest call per function; with
    /// `--format` folded stacks or a flame graph of the time, or the
    /// calls for Perfetto (`perfetto`) or Chrome's viewers (`chrome`).
    /// A function trace is read so without it too.
    #[arg(long, conflicts_with_all = ["tree", "diff"])]
    trace: bool,
    /// With a function trace: only the calls inside FUNC and the calls
    /// it makes, as `trace -F` records them (repeat for more; `*` matches
    /// any characters).
    #[arg(
        short = 'F',
        long = "filter",
        value_name = "FUNC",
        conflicts_with = "diff"
    )]
    only_functions: Vec<String>,
    /// With a function trace: not FUNC nor the calls it makes, as `trace
    /// -N` (repeat for more).
    #[arg(
        short = 'N',
        long = "notrace",
        value_name = "FUNC",
        conflicts_with = "diff"
    )]
    not_functions: Vec<String>,
    /// With a function trace: calls only this many levels deep, as `trace
    /// -D` (under -F, counted from the innermost call of a -F function).
    #[arg(
        short = 'D',
        long = "depth",
        value_name = "DEPTH",
        conflicts_with = "diff",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    depth: Option<u32>,
    /// At most this many functions in the top table (0: all; default 50).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// In the SVG flame graph, hang the roots from the top (an icicle
    /// graph).
    #[arg(long)]
    icicle: bool,
    /// The SVG flame graph's title.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// In the tree, fold callees below this share of all samples
    /// (default 0.5).
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    min_percent: Option<f64>,
    /// Only these processes (repeatable, or comma-separated).
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pid: Vec<u32>,
    /// Only these threads (repeatable, or comma-separated).
    #[arg(long, value_name = "TID", value_delimiter = ',')]
    tid: Vec<u32>,
    /// Only threads or processes of this name.
    #[arg(long, value_name = "NAME")]
    comm: Option<String>,
    /// Do not show inlined functions as frames of their own.
    #[arg(long)]
    no_inline: bool,
    /// Show frames as object+address, without names.
    #[arg(long)]
    addresses: bool,
    /// Read and make no symbol index: answer from the DWARF.
    #[arg(long)]
    no_index: bool,
    /// Where symbol indexes are kept (default
    /// `$XDG_CACHE_HOME/ichnos/symbols`).
    #[arg(long, value_name = "DIR")]
    index_dir: Option<PathBuf>,
    /// A directory with separate debug files (besides /usr/lib/debug).
    /// Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
    /// Compare two recordings: the change of each function's share from
    /// BASE to NEW (a table, or a differential flame graph with
    /// `--format svg`).
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"])]
    diff: Option<Vec<PathBuf>>,
    /// Write the report here instead of to standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// A recording read: from an ichnos recording, or from a perf.data file
/// made into one (in a temporary file removed as soon as it is made: only
/// the open handle reads it).
pub struct Loaded {
    /// The recording.
    pub profile: Profile,
    /// The recording's file, to read again (the Firefox export's second
    /// pass).
    file: std::fs::File,
}

impl Loaded {
    /// The recording's file again, from its start.
    pub fn reread(&self) -> std::io::Result<std::fs::File> {
        let mut file = self.file.try_clone()?;
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))?;
        Ok(file)
    }
}

/// Whether `file` starts as a perf.data file does.
fn is_perf_data(file: &std::fs::File) -> bool {
    let mut magic = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut magic, 0).is_ok()
        && (&magic == b"PERFILE2" || &magic == b"2ELIFREP")
}

/// Reads the recording at `path` (an ichnos recording, or a perf.data
/// file); a recording cut short is read to its last whole chunk, with the
/// cut reported by the caller.
pub fn load(path: &Path, quiet: bool) -> Result<Loaded> {
    // Not waiting on a FIFO for a writer, nor reading a device.
    let file = ichnos_image::open_regular(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    if is_perf_data(&file) {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let temp =
            std::env::temp_dir().join(format!("ichnos-perf-{}-{nanos}.data", std::process::id()));
        // Created new and never through a link: the directory is
        // everyone's.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)
            .with_context(|| format!("cannot create {}", temp.display()))?;
        // Read back through a handle of its own, and gone from the
        // directory at once: nothing is left behind, however the report
        // ends.
        let reader = std::fs::File::open(&temp);
        let _ = std::fs::remove_file(&temp);
        let reader = reader.with_context(|| format!("cannot open {}", temp.display()))?;
        let started = Instant::now();
        let ichnos_profile::record::PerfDataImport { profile, summary } =
            ichnos_profile::record::import_perf_data(path, file, &temp)?;
        if !quiet && summary.unreadable > 0 {
            eprintln!(
                "warning: {}: {} could not be read (left out)",
                path.display(),
                crate::units::counted(summary.unreadable, "record", "records")
            );
        }
        if !quiet && summary.unknown_id > 0 {
            eprintln!(
                "warning: {}: {} with an event id the header does not name (left out)",
                path.display(),
                crate::units::counted(summary.unknown_id, "sample", "samples")
            );
        }
        if !quiet && summary.no_program > 0 {
            eprintln!(
                "note: {}: {} with no program's time to show (kernel threads, threads past \
                 their exit whose process had ended, without kernel frames to show) left out",
                path.display(),
                crate::units::counted(summary.no_program, "sample", "samples")
            );
        }
        if let (n @ 1.., why) = &summary.kernel_frames_left_out {
            if !quiet {
                eprintln!(
                    "note: {}: the kernel frames of {} are not shown: {}",
                    path.display(),
                    crate::units::counted(*n, "sample", "samples"),
                    why.as_deref()
                        .unwrap_or("the file does not say where its kernel ran")
                );
            }
        }
        if !quiet && !summary.left_out.is_empty() {
            let others: Vec<String> = summary
                .left_out
                .iter()
                .map(|(event, n)| format!("{} of {event}", crate::units::thousands(*n)))
                .collect();
            eprintln!(
                "note: {} holds samples of more than one event: shown are those of {}; left out: {} \
                 (their weights do not add up with its)",
                path.display(),
                summary.event,
                others.join(", ")
            );
        }
        if !quiet && started.elapsed().as_secs() >= 1 {
            eprintln!(
                "note: {} read as perf.data: {} unwound in {:.1} s",
                path.display(),
                crate::units::counted(summary.samples, "sample", "samples"),
                started.elapsed().as_secs_f64()
            );
        }
        // The recording is kept open for the exports that read it again;
        // the profile was made as it was written.
        return Ok(Loaded {
            profile,
            file: reader,
        });
    }
    let profile = Profile::read(std::io::BufReader::with_capacity(
        1 << 20,
        file.try_clone()?,
    ))
    .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Loaded { profile, file })
}

/// Symbolizes `profile`, with a progress bar on a terminal once it takes
/// longer than a moment.
fn symbols(profile: &Profile, args: &ReportArgs, quiet: bool, verbose: bool) -> Symbolized {
    let options = SymbolOptions {
        inlines: !args.no_inline,
        index_dir: crate::symbolize::chosen_index_dir(args.no_index, args.index_dir.as_ref()),
        debug_dirs: args.debug_dirs.clone(),
        addresses: args.addresses,
    };
    let mut progress = crate::progress::Delayed::new(quiet, "symbolizing");
    let symbolized = report::symbolize(profile, &options, &mut |done, total| {
        progress.tick(done, total);
    });
    progress.finish();
    if !quiet {
        for w in &symbolized.warnings {
            eprintln!("warning: {w}");
        }
        for (path, ranges, seconds) in &symbolized.indexed {
            if verbose {
                eprintln!(
                    "note: indexed {} ({ranges} ranges, {seconds:.1} s)",
                    path.display()
                );
            }
        }
    }
    symbolized
}

/// What a recording is of, for the end of its header's second line: the
/// command line, the processes `-p` attached to (with the children they
/// made meanwhile), or the machine.
fn recorded_what(profile: &Profile) -> String {
    const NAMED: usize = 4;
    let d = &profile.description;
    match d.target {
        Some(ichnos_data::Target::Processes) => {
            let mut processes: Vec<_> = profile.processes.iter().collect();
            processes.sort();
            let mut named: Vec<String> = processes
                .iter()
                .take(NAMED)
                .map(|(pid, name)| format!("{pid} ({name})"))
                .collect();
            if processes.len() > NAMED {
                named.push(format!("{} more", processes.len() - NAMED));
            }
            format!(": attached (-p) to {}", named.join(", "))
        }
        Some(ichnos_data::Target::System) => ": every process on the machine (-a)".to_owned(),
        _ if d.command.is_empty() => String::new(),
        _ => format!(": {}", d.command_line()),
    }
}

/// The header lines of the text reports.
fn header(out: &mut dyn Write, path: &Path, profile: &Profile, shown: Shown) -> Result<()> {
    let d = &profile.description;
    let all = profile.totals();
    let complete: u64 = profile
        .tallies
        .iter()
        .filter(|((stack, _, _), _)| {
            profile
                .stacks
                .get(*stack as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.stop == ichnos_data::StackStop::Complete)
        })
        .map(|(_, t)| t.samples)
        .sum();
    let seconds = profile.end.unwrap_or(profile.last_time) as f64 * 1e-9;
    let threads = profile.threads.len();
    let processes = profile.processes.len();
    writeln!(
        out,
        "# {}: {} of {}{} over {seconds:.2} s; {processes} process{}, {threads} thread{}",
        path.display(),
        crate::units::counted(all.samples, "sample", "samples"),
        d.event,
        // Not known for a perf.data event of a fixed period other than
        // a clock's (`perf record -c N -e page-faults`).
        if d.frequency > 0 {
            format!(" at {} Hz", d.frequency)
        } else {
            String::new()
        },
        if processes == 1 { "" } else { "es" },
        if threads == 1 { "" } else { "s" },
    )?;
    let lost = profile.lost_total();
    writeln!(
        out,
        "# {:.1}% complete stacks; {} lost; recorded by {} on {} (Linux {}){}",
        if all.samples == 0 {
            0.0
        } else {
            100.0 * complete as f64 / all.samples as f64
        },
        crate::units::thousands(lost),
        d.recorder,
        d.host,
        d.kernel,
        recorded_what(profile)
    )?;
    if lost > 0 {
        writeln!(out, "# lost: {}", lost_causes(profile))?;
    }
    if shown.on.samples != all.samples {
        writeln!(
            out,
            "# shown: {} samples ({:.1}%) that the filters keep",
            crate::units::thousands(shown.on.samples),
            100.0 * shown.on.weight as f64 / all.weight.max(1) as f64
        )?;
    }
    if profile.has_off_cpu() {
        let (wait, preempted) = (shown.waiting, shown.preempted);
        let off = wait.weight.saturating_add(preempted.weight);
        let wall = off.saturating_add(shown.on.weight).max(1) as f64;
        writeln!(
            out,
            "# off CPU: {:.3} s in {} intervals through {} ({:.1}% of the time shown; \
             waiting {:.1}%, preempted {:.1}%); on CPU: {:.3} s ({:.1}%)",
            off as f64 * 1e-9,
            crate::units::thousands(wait.samples.saturating_add(preempted.samples)),
            d.off_cpu_event,
            100.0 * off as f64 / wall,
            100.0 * wait.weight as f64 / wall,
            100.0 * preempted.weight as f64 / wall,
            shown.on.weight as f64 * 1e-9,
            100.0 * shown.on.weight as f64 / wall,
        )?;
    }
    Ok(())
}

impl ReportArgs {
    /// The defaults for the recording at `input`, in `format`.
    pub fn for_file(input: &Path, format: Format) -> ReportArgs {
        ReportArgs {
            input: input.to_path_buf(),
            file: None,
            format,
            tree: false,
            trace: false,
            sort: None,
            only_functions: Vec::new(),
            not_functions: Vec::new(),
            depth: None,
            limit: None,
            icicle: false,
            title: None,
            min_percent: None,
            pid: Vec::new(),
            tid: Vec::new(),
            comm: None,
            no_inline: false,
            addresses: false,
            no_index: false,
            index_dir: None,
            debug_dirs: Vec::new(),
            diff: None,
            output: None,
        }
    }

    /// The same with at most `limit` rows in the table.
    pub fn with_limit(mut self, limit: usize) -> ReportArgs {
        self.limit = Some(limit);
        self
    }

    /// The same with the tree's callees folded below `min_percent`.
    pub fn with_min_percent(mut self, min_percent: f64) -> ReportArgs {
        self.min_percent = Some(min_percent);
        self
    }
}

/// Runs `ichnos report`.
pub fn report(args: &ReportArgs, quiet: bool, verbose: bool) -> Result<()> {
    let format = if args.tree { Format::Tree } else { args.format };
    if format.is_binary()
        && args.output.as_ref().is_none_or(|o| o.as_os_str() == "-")
        && std::io::stdout().is_terminal()
    {
        bail!(
            "--format {} writes a binary file: name it with -o FILE (or redirect standard output)",
            format.name()
        );
    }
    if (args.icicle || args.title.is_some()) && format != Format::Svg {
        usage!("--icicle and --title draw flame graphs: use them with --format svg");
    }
    if args.icicle && args.diff.is_some() {
        usage!("--icicle is not drawn for --diff: the differential flame graph stands upright");
    }
    if let Some(paths) = &args.diff {
        return compare::compare(args, format, &paths[0], &paths[1], quiet, verbose);
    }
    let input = args.file.as_ref().unwrap_or(&args.input);
    if args.trace {
        return function_trace::report(args, format, input, quiet);
    }
    let loaded = load(input, quiet)?;
    let profile = &loaded.profile;
    if profile.description.event.starts_with("function-trace") {
        // A function trace holds calls, not samples: read as one.
        drop(loaded);
        return function_trace::report(args, format, input, quiet);
    }
    function_trace::refuse_for_a_profile(args, format, input)?;
    let symbolized = symbols(profile, args, quiet, verbose);
    let samples = report::weighted(profile, &symbolized, &args.filter());
    let shown = sum(profile, &args.filter());
    let mut out = output(args)?;
    match format {
        Format::Top => {
            header(&mut out, input, profile, shown)?;
            let sort = match args.sort.unwrap_or(SortBy::SelfTime) {
                SortBy::Total => Sort::Total,
                // The others were refused before anything was written.
                _ => Sort::SelfTime,
            };
            let rows = report::top(&samples, sort);
            report::write_top(&mut out, &rows, whole(&samples), args.limit())?;
        }
        Format::Tree => {
            header(&mut out, input, profile, shown)?;
            report::tree(&mut out, &samples, whole(&samples), args.min_percent())?;
        }
        Format::Folded => {
            for (line, count) in report::folded(&samples) {
                writeln!(out, "{line} {count}")?;
            }
        }
        Format::Svg => {
            let options = export::FlamegraphOptions {
                title: args.title.clone(),
                icicle: args.icicle,
            };
            export::write_flamegraph(&samples, &options, &mut out)?;
        }
        Format::Pprof => {
            let options = export::PprofOptions {
                comment: Some(format!("exported from {}", input.display())),
            };
            export::write_pprof(profile, &samples, &options, &mut out)?;
        }
        Format::Speedscope => export::write_speedscope(profile, &samples, &mut out)?,
        Format::Perfetto | Format::Chrome => unreachable!("refused above"),
        Format::Firefox => {
            // A timeline: the samples are read again, one by one, as
            // often as the export's memory budget needs.
            export::write_firefox(
                profile,
                &symbolized,
                &args.filter(),
                || {
                    let again = loaded.reread()?;
                    Ok(std::io::BufReader::with_capacity(1 << 20, again))
                },
                firefox_sample_budget(),
                &mut out,
            )
            .with_context(|| format!("cannot export {}", input.display()))?;
        }
    }
    out.flush()?;
    drop(out);
    finished(input, profile)
}

/// The bytes of sample-table text the Firefox export holds at once:
/// `$ICHNOS_FIREFOX_SAMPLE_BUDGET` where it is a number, else the
/// library's bound (docs/export-formats.md).
fn firefox_sample_budget() -> usize {
    std::env::var("ICHNOS_FIREFOX_SAMPLE_BUDGET")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(export::SAMPLE_TEXT_BUDGET)
}

/// What was lost, by cause, as the loss records tell (the end record's
/// count where it counts more, as the recorder's own).
fn lost_causes(profile: &Profile) -> String {
    use ichnos_data::LostCause;
    let mut causes: Vec<(LostCause, u64)> = profile
        .lost
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(&c, &n)| (c, n))
        .collect();
    causes.sort_unstable_by_key(|&(c, n)| (std::cmp::Reverse(n), format!("{c:?}")));
    let mut parts: Vec<String> = causes
        .iter()
        .map(|&(cause, n)| {
            let what = match cause {
                LostCause::KernelRing => "records of a full kernel ring",
                LostCause::KernelSamples => "samples the kernel lost",
                LostCause::Recorder => "samples the recorder could not keep up with",
                LostCause::NoUserRegisters => "samples without user registers",
                LostCause::Unreadable => "records the recorder could not read",
                LostCause::Unknown(_) => "of a cause this version does not know",
            };
            format!("{} {what}", crate::units::thousands(n))
        })
        .collect();
    let told: u64 = causes.iter().map(|&(_, n)| n).sum();
    let total = profile.lost_total();
    if total > told {
        parts.push(format!(
            "{} the recording's end counts besides",
            crate::units::thousands(total - told)
        ));
    }
    parts.join(", ")
}

/// The total of what the report shows, as its shares count it (time off
/// CPUs as the samples the clock would have taken in it).
fn whole(samples: &[report::Weighted<'_>]) -> report::Tally {
    samples
        .iter()
        .fold(report::Tally::default(), |a, w| report::Tally {
            samples: a.samples.saturating_add(w.tally.samples),
            weight: a.weight.saturating_add(w.tally.weight),
        })
}

/// What the report shows: samples on CPUs, and intervals off them (their
/// count and nanoseconds) by why.
#[derive(Clone, Copy, Debug, Default)]
struct Shown {
    on: report::Tally,
    waiting: report::Tally,
    preempted: report::Tally,
}

/// The samples' totals.
fn sum(profile: &Profile, filter: &Filter) -> Shown {
    let mut shown = Shown::default();
    let add = |t: &mut report::Tally, by: &report::Tally| {
        t.samples = t.samples.saturating_add(by.samples);
        t.weight = t.weight.saturating_add(by.weight);
    };
    for (&(stack, pid, tid), tally) in &profile.tallies {
        if filter.keeps(profile, stack, pid, tid) {
            add(&mut shown.on, tally);
        }
    }
    for (&(stack, pid, tid, state), tally) in &profile.off_cpu {
        if filter.keeps(profile, stack, pid, tid) {
            match state {
                ichnos_data::OffCpuState::Preempted => add(&mut shown.preempted, tally),
                _ => add(&mut shown.waiting, tally),
            }
        }
    }
    shown
}

/// Where the report goes: `-o FILE` or standard output. FILE is refused
/// where it is the recording being read (made anew, it would be empty
/// before it was read).
fn output(args: &ReportArgs) -> Result<Box<dyn Write>> {
    use std::os::unix::fs::MetadataExt;
    let inputs: Vec<&PathBuf> = match &args.diff {
        Some(paths) => paths.iter().collect(),
        None => vec![args.file.as_ref().unwrap_or(&args.input)],
    };
    if let Some(out) = &args.output {
        if let Ok(written) = std::fs::metadata(out) {
            let same = |input: &&PathBuf| {
                std::fs::metadata(input)
                    .is_ok_and(|i| i.dev() == written.dev() && i.ino() == written.ino())
            };
            if inputs.iter().any(same) {
                bail!(
                    "-o {}: that is a recording being read; write the report to another file",
                    out.display()
                );
            }
        }
    }
    Ok(match &args.output {
        // `-o -`: standard output, as most tools take it.
        Some(path) if path.as_os_str() != "-" => Box::new(output::Named::new(
            std::io::BufWriter::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            ),
            path.display().to_string(),
        )),
        _ => Box::new(output::Named::new(
            std::io::BufWriter::new(std::io::stdout().lock()),
            "standard output".to_owned(),
        )),
    })
}

impl ReportArgs {
    /// Rows of a table (`--limit`, 50 unless given).
    fn limit(&self) -> usize {
        self.limit.unwrap_or(50)
    }

    /// The tree's fold (`--min-percent`, 0.5 unless given).
    fn min_percent(&self) -> f64 {
        self.min_percent.unwrap_or(0.5)
    }

    /// The calls of a function trace `-F`, `-N` and `-D` keep.
    fn call_filters(&self) -> ichnos_trace::CallFilters {
        ichnos_trace::CallFilters {
            only: self.only_functions.clone(),
            not: self.not_functions.clone(),
            depth: self.depth,
        }
    }

    /// The samples the filters keep.
    fn filter(&self) -> Filter {
        Filter {
            pids: self.pid.clone(),
            tids: self.tid.clone(),
            comm: self.comm.clone(),
        }
    }
}

/// A recording that did not finish: everything was reported, and the
/// exit status says it was not whole.
fn finished(path: &Path, profile: &Profile) -> Result<()> {
    if let Some(cut) = &profile.truncated {
        bail!(
            "{} is cut short ({cut}): the recorder did not finish; the report covers everything before the cut",
            path.display()
        );
    }
    if profile.end.is_none() {
        bail!(
            "{} has no end record: the recorder did not finish; the report covers what it wrote",
            path.display()
        );
    }
    if profile.orphans > 0 {
        eprintln!(
            "warning: {} the recording does not hold (left out)",
            if profile.orphans == 1 {
                "1 sample names a stack".to_owned()
            } else {
                format!(
                    "{} samples name stacks",
                    crate::units::thousands(profile.orphans)
                )
            }
        );
    }
    if profile.misnumbered_stacks > 0 {
        eprintln!(
            "warning: {} stack records are numbered out of order (left out)",
            profile.misnumbered_stacks
        );
    }
    if profile.uncopied_spaces > 0 {
        eprintln!(
            "warning: {} address spaces (forked processes, or a process's after its JIT reused memory) start without their parents' mappings: the recording copies more than a report holds",
            profile.uncopied_spaces
        );
    }
    Ok(())
}
