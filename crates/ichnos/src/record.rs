//! `ichnos record`: flags into `ichnos_profile::RecordOptions`, a live
//! status line while it runs, and one summary line at the end.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use ichnos_perf::EventKind;
use ichnos_profile::{EventChoice, RecordOptions, RecordTarget, Status, Summary};

/// Arguments of `ichnos record`.
#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// Samples per second per thread.
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = 1000)]
    frequency: u64,
    /// The recording to write (an existing one is kept as FILE.old).
    #[arg(short, long, value_name = "FILE", default_value = "ichnos.data")]
    output: PathBuf,
    /// Bytes of user stack copied per sample (a K suffix; a multiple of
    /// 8, at most 65528, which 64K also names). Default: 65528, the most
    /// the kernel copies; 32K
    /// where the kernel limits the memory perf rings may lock, or on
    /// machines of more than 32 CPUs.
    #[arg(long, value_name = "BYTES", value_parser = parse_stack_size)]
    stack_size: Option<u32>,
    /// Keep stacks to what the kernel copied: do not read on from a
    /// thread's memory where its stack goes on past the copy (by default
    /// it is read, and kept where the memory still holds the copy's end),
    /// nor read in a stack page the kernel could not copy from because it
    /// was never touched (by default the samples after are copied whole).
    #[arg(long)]
    no_stack_reads: bool,
    /// The event that triggers samples: `cycles` (hardware; falls back to
    /// `cpu-clock` where the machine has no PMU) or `cpu-clock`.
    #[arg(short, long, value_name = "EVENT", value_parser = parse_event)]
    event: Option<EventKind>,
    /// Attach to running processes (`self` for ichnos itself), all their
    /// threads, until they exit or Ctrl-C, or COMMAND ends.
    #[arg(short, long, value_name = "PID[,PID..]", conflicts_with = "all")]
    pid: Option<String>,
    /// Every process on the machine (one event per CPU; needs
    /// `kernel.perf_event_paranoid` 0 or lower, or root), until Ctrl-C,
    /// or while COMMAND runs (`-a -- sleep 5`).
    #[arg(short, long)]
    all: bool,
    /// Also record where threads wait: each switch off a CPU is sampled
    /// with its stack, and its time off counted beside the time on
    /// (samples `cpu-clock`; needs root, `CAP_PERFMON`, or
    /// `kernel.perf_event_paranoid` 1 or lower).
    #[arg(long)]
    off_cpu: bool,
    /// At most this many frames per stack: deeper stacks are cut there,
    /// and a note at the end counts them.
    #[arg(
        long,
        value_name = "N",
        default_value_t = ichnos_profile::record::DEFAULT_MAX_FRAMES,
        value_parser = parse_max_frames
    )]
    max_frames: usize,
    /// The command to run and record, with its arguments (default: the
    /// built-in demo); with -p or -a, a command run while they are
    /// recorded, whose run bounds the recording (not itself recorded with
    /// -p).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

pub(crate) fn parse_max_frames(text: &str) -> Result<usize, String> {
    let max = ichnos_profile::record::MAX_FRAMES;
    match text.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("a number of frames from 1 to {max}")),
    }
}

fn parse_stack_size(text: &str) -> Result<u32, String> {
    let bytes = crate::units::parse_size(text)?;
    let max = ichnos_profile::record::MAX_STACK_SIZE;
    // `64K` is what one types for the most: the kernel's most is 8
    // bytes less (a sample record's size is 16 bits).
    if bytes == 64 << 10 {
        return Ok(max);
    }
    if bytes == 0 || bytes > u64::from(max) || bytes % 8 != 0 {
        return Err(format!(
            "{text}: the stack copy must be a multiple of 8 between 8 and {max} bytes"
        ));
    }
    Ok(bytes as u32)
}

fn parse_event(text: &str) -> Result<EventKind, String> {
    match text {
        "cycles" => Ok(EventKind::Cycles),
        "cpu-clock" => Ok(EventKind::CpuClock),
        other => Err(format!("{other}: unknown event (cycles or cpu-clock)")),
    }
}

/// The process ids of `-p`.
fn parse_pids(text: &str) -> Result<Vec<u32>> {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(crate::parse_pid)
        .collect()
}

/// The command that runs the built-in demo workload.
pub fn demo_command() -> Result<Vec<OsString>> {
    let exe = std::env::current_exe().context("cannot find the ichnos executable")?;
    Ok(vec![
        exe.into_os_string(),
        OsString::from(crate::demo::WORKLOAD_ARG),
    ])
}

/// The options `args` ask for.
fn options(args: &RecordArgs) -> Result<RecordOptions> {
    if args.output.as_os_str() == "-" {
        usage!("-o -: a recording is written to a file, not to standard output");
    }
    // With -p or -a, a command bounds the recording (perf's `-a -- sleep
    // 5`): it runs once the events are on, and the recording ends with it.
    let target = if let Some(pids) = &args.pid {
        let pids = parse_pids(pids)?;
        if pids.is_empty() {
            usage!("-p needs at least one process id");
        }
        RecordTarget::Pids(pids)
    } else if args.all {
        RecordTarget::System
    } else if args.command.is_empty() {
        RecordTarget::Command(demo_command()?)
    } else {
        RecordTarget::Command(args.command.clone())
    };
    if args.frequency == 0 {
        usage!("-F must be at least 1 Hz");
    }
    let mut options = RecordOptions::new(target);
    options.frequency = args.frequency;
    options.stack_size = args.stack_size;
    options.event = args
        .event
        .map_or(EventChoice::Default, EventChoice::Exactly);
    options.output.clone_from(&args.output);
    options.max_frames = args.max_frames;
    options.off_cpu = args.off_cpu;
    options.stack_reads = !args.no_stack_reads;
    options.command_line = match &options.target {
        RecordTarget::Command(c) => c.clone(),
        // (What ran is ichnos's own command line: the workload alone
        // would read as the command recorded.)
        _ if !args.command.is_empty() => std::env::args_os().collect(),
        _ => Vec::new(),
    };
    if !matches!(options.target, RecordTarget::Command(_)) && !args.command.is_empty() {
        options.workload = Some(args.command.clone());
    }
    Ok(options)
}

/// Runs `ichnos record`; the exit status is the command's.
pub fn record(args: &RecordArgs, quiet: bool, verbose: bool) -> Result<u8> {
    let options = options(args)?;
    if args.command.is_empty() && args.pid.is_none() && !args.all && !quiet {
        // A command forgotten should not pass for one recorded.
        eprintln!(
            "note: no command given: recording the built-in demo (ichnos record -- COMMAND records a command)"
        );
    }
    let summary = run(&options, quiet, verbose)?;
    Ok(exit_code(&summary))
}

/// Records with `options`, showing progress unless `quiet`.
pub fn run(options: &RecordOptions, quiet: bool, verbose: bool) -> Result<Summary> {
    let stop = ichnos_profile::catch_stop_signals();
    let mut status_line = crate::status_line::StatusLine::start(quiet);
    let mut show = |s: &Status| {
        if let Some(line) = status_line.as_mut() {
            line.show(&format!(
                "recording: {:.1} s, {}, {} lost, {}",
                s.elapsed.as_secs_f64(),
                crate::units::counted(s.samples, "sample", "samples"),
                crate::units::thousands(s.lost),
                crate::units::counted(s.processes as u64, "process", "processes")
            ));
        }
    };
    let result = ichnos_profile::record(options, stop, &mut show);
    drop(status_line);
    let summary = result.with_context(|| match &options.target {
        RecordTarget::Command(c) => format!(
            "cannot record {}",
            c.first()
                .map_or_else(String::new, |p| p.to_string_lossy().into_owned())
        ),
        RecordTarget::Pids(p) => format!(
            "cannot record process{} {}",
            if p.len() == 1 { "" } else { "es" },
            p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        ),
        RecordTarget::System => "cannot record the machine".to_owned(),
    })?;
    if !quiet {
        for note in &summary.notes {
            eprintln!("note: {note}");
        }
        eprintln!("{}", summary_line(&summary));
        if let Some(note) = crate::ending::signal_note(summary.exit, stop.load(Ordering::Relaxed)) {
            eprintln!("note: {note}");
        }
        if let Some(line) = off_cpu_line(&summary) {
            eprintln!("{line}");
        }
        if verbose {
            eprintln!("note: event {}", summary.event);
        }
    }
    Ok(summary)
}

/// The one line printed at the end.
pub fn summary_line(s: &Summary) -> String {
    if s.samples == 0 {
        // No share of no stacks: a 0% would read as broken stacks.
        return format!(
            "recorded no samples in {:.2} s ({} lost; a command that ran less than a \
             sampling period of CPU time, or slept, has none) to {} ({})",
            s.duration.as_secs_f64(),
            crate::units::thousands(s.lost),
            s.path.display(),
            crate::units::bytes(s.bytes)
        );
    }
    let share = 100.0 * s.complete as f64 / s.samples as f64;
    format!(
        "recorded {} in {:.2} s ({share:.1}% complete stacks, {} lost) to {} ({})",
        crate::units::counted(s.samples, "sample", "samples"),
        s.duration.as_secs_f64(),
        crate::units::thousands(s.lost),
        s.path.display(),
        crate::units::bytes(s.bytes)
    )
}

/// The line on off-CPU time, where it was recorded.
pub fn off_cpu_line(s: &Summary) -> Option<String> {
    let off = s.off_cpu?;
    let share = if off.intervals == 0 {
        0.0
    } else {
        100.0 * off.complete as f64 / off.intervals as f64
    };
    Some(format!(
        "recorded {} off CPU through {} ({share:.1}% complete stacks)",
        crate::units::counted(off.intervals, "interval", "intervals"),
        off.event
    ))
}

/// The command's exit status as ours: its code, or 128 + the signal
/// that killed it, as shells report it.
pub fn exit_code(s: &Summary) -> u8 {
    crate::ending::exit_code(s.exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_sizes_are_multiples_of_8_up_to_the_kernels_most() {
        assert_eq!(parse_stack_size("8K"), Ok(8192));
        assert_eq!(parse_stack_size("65528"), Ok(65528));
        // What one types for the most.
        assert_eq!(parse_stack_size("64K"), Ok(65528));
        for bad in ["0", "65530", "65544", "1M", "12"] {
            assert!(parse_stack_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_max_frames("1"), Ok(1));
        assert_eq!(parse_max_frames("16384"), Ok(16384));
        assert!(parse_max_frames("0").is_err());
        assert!(parse_max_frames("16385").is_err());
    }
}
