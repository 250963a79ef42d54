//! `ichnos`: records what native programs do and turns the record into
//! answers. This binary is the command line only: it parses flags into
//! library configuration and maps errors to the exit codes of
//! `docs/cli.md` (0 success, 1 user error, 2 usage error).

// Everything unsafe lives in the libraries, fenced there.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

/// `eprintln!` that cannot panic: with standard error closed, a pipe
/// nobody reads or a full device, the message is lost and the exit code
/// stays what docs/cli.md says (the standard macro panics, exit 101).
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that cannot panic (see `eprintln!`).
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

/// A command line that asks for what cannot be (options that do not go
/// together, a value out of range): exit status 2, as clap's own checks
/// give, where other errors give 1 (docs/cli.md).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns a [`UsageError`] made as `format!` makes a string.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new(crate::UsageError(format!($($arg)*))))
    };
}

/// `println!` that cannot panic: output that cannot be written is lost
/// (the reports themselves write through handles and report errors).
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod demo;
mod ending;
mod progress;
mod record;
mod report;
mod stack;
mod status_line;
mod symbolize;
mod trace;
mod units;
use ichnos_image::{Asid, Image, ImageSection, SectionCache};

#[derive(Parser, Debug)]
#[command(name = "ichnos", version, about = "Profile and trace native programs")]
struct Cli {
    /// Print only errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Print more detail.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List an image's sections (and optionally read memory through it).
    Image(ImageArgs),
    /// Print the stacks of a live process's threads.
    Stack(stack::StackArgs),
    /// Turn addresses of an object file into functions, files and lines.
    Symbolize(symbolize::SymbolizeArgs),
    /// Run a command (or attach to processes) and record where its time
    /// goes, with complete stacks.
    Record(record::RecordArgs),
    /// Show where a recording's time went: a top table, the call tree, or
    /// folded stacks.
    Report(report::ReportArgs),
    /// Run a command built with -finstrument-functions and record every
    /// function entry and exit.
    Trace(trace::TraceArgs),
    /// Print a function trace's calls per thread, with durations.
    Replay(trace::ReplayArgs),
    /// Record the built-in demo (native call chains without frame
    /// pointers, a JIT thread) and show its report.
    Demo(demo::DemoArgs),
    /// The built-in demo's workload (run by `ichnos record` and `ichnos
    /// demo`).
    #[command(name = "__demo-workload", hide = true)]
    DemoWorkload,
}

#[derive(clap::Args, Debug)]
struct ImageArgs {
    /// An ELF file whose `PT_LOAD` segments to load, at an optional load bias
    /// (hex, `0x` optional). Repeatable.
    #[arg(long = "elf", value_name = "FILE[:BIAS]", conflicts_with = "pid")]
    elf: Vec<String>,
    /// A live process whose mappings to load (`self` for ichnos itself).
    #[arg(short, long, value_name = "PID")]
    pid: Option<String>,
    /// Read LEN bytes (default 0x10) at ADDR through the image and print
    /// them in hex; both hex, `0x` optional. Repeatable.
    #[arg(long, value_name = "ADDR[:LEN]")]
    read: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(if e.downcast_ref::<UsageError>().is_some() {
                2
            } else {
                1
            })
        }
    }
}

/// The error and its causes, joined by `: `. Nothing is said twice: a
/// cause whose text its error already holds (library errors that name
/// their source, at the end or before a remark) is left out, and a cause that starts by naming the file
/// its error ended with ("cannot load /x" then "/x: cannot open: ...")
/// leaves the name out.
fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let Some(last) = parts.last() else {
            parts.push(text);
            continue;
        };
        if last.contains(&text) {
            continue;
        }
        let named = last.rsplit(' ').next().unwrap_or_default();
        let text = match text.strip_prefix(named).and_then(|t| t.strip_prefix(": ")) {
            Some(rest) if !named.is_empty() => rest.to_owned(),
            _ => text,
        };
        parts.push(text);
    }
    parts.join(": ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Runs the subcommand; the exit status (a recorded command's own, or 0).
fn run(cli: &Cli) -> Result<u8> {
    match &cli.command {
        Command::Image(args) => image(cli, args).map(|()| 0),
        Command::Stack(args) => stack::stack(args, cli.verbose).map(|()| 0),
        Command::Symbolize(args) => symbolize::symbolize(args, cli.verbose, cli.quiet).map(|()| 0),
        Command::Record(args) => record::record(args, cli.quiet, cli.verbose),
        Command::Report(args) => report::report(args, cli.quiet, cli.verbose).map(|()| 0),
        Command::Demo(args) => demo::demo(args, cli.quiet, cli.verbose),
        Command::Trace(args) => trace::trace(args, cli.quiet),
        Command::Replay(args) => trace::replay(args, cli.quiet).map(|()| 0),
        Command::DemoWorkload => demo::workload().map(|()| 0),
    }
}

/// An address, length or bias as every command reads them: hex, with or
/// without `0x`, as addr2line reads addresses.
pub(crate) fn parse_hex(text: &str) -> Result<u64> {
    let hex = text
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X");
    u64::from_str_radix(hex, 16).with_context(|| format!("{text:?} is not a hex number"))
}

/// A process id as every `-p` takes it: a number, or `self` for ichnos.
pub(crate) fn parse_pid(text: &str) -> Result<u32> {
    if text == "self" {
        return Ok(std::process::id());
    }
    match text.trim().parse() {
        Ok(pid) => Ok(pid),
        Err(_) => usage!("{text:?} is not a process id (a number, or self)"),
    }
}

fn image(cli: &Cli, args: &ImageArgs) -> Result<()> {
    let cache = SectionCache::new(Some("ichnos image"));
    let mut image = Image::new(None);
    if let Some(pid) = &args.pid {
        let pid = parse_pid(pid)?;
        if let Some(why) = ichnos_code::process::why_unreadable(pid, pid) {
            bail!("cannot build the image of process {pid}: {why}");
        }
        let process = Image::from_proc_maps_cached(pid, &cache)
            .with_context(|| format!("cannot build the image of process {pid}"))?;
        for skipped in &process.skipped {
            if cli.verbose {
                eprintln!(
                    "note: skipped {:#x}-{:#x} {}: {}",
                    skipped.entry.range.start,
                    skipped.entry.range.end,
                    skipped.entry.name,
                    skipped.reason
                );
            }
        }
        if !cli.quiet && !process.skipped.is_empty() && !cli.verbose {
            eprintln!(
                "note: {} could not be loaded (-v lists them)",
                crate::units::counted(process.skipped.len() as u64, "mapping", "mappings")
            );
        }
        image = process.image;
        print_sections(image.sections(), &process.live_ranges)?;
    } else if args.elf.is_empty() {
        usage!("nothing to load: give --elf FILE[:BIAS] or -p PID");
    } else {
        for spec in &args.elf {
            let (path, bias) = match spec.rsplit_once(':') {
                Some((path, bias)) if !path.is_empty() => (path, parse_hex(bias)?),
                _ => (spec.as_str(), 0),
            };
            image
                .add_elf_cached(&cache, path, bias, Asid::ANY)
                .with_context(|| format!("cannot load {path}"))?;
        }
        print_sections(image.sections(), &[])?;
    }
    for spec in &args.read {
        let (addr, len) = match spec.split_once(':') {
            Some((addr, len)) => (parse_hex(addr)?, parse_hex(len)?),
            None => (parse_hex(spec)?, 16),
        };
        dump(&mut image, addr, len)?;
    }
    Ok(())
}

fn print_sections<'a>(
    sections: impl Iterator<Item = ImageSection<'a>>,
    live: &[std::ops::Range<u64>],
) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<18} {:<18} {:>10} {:>10} {:>5}  FILE",
        "START", "END", "SIZE", "OFFSET", "ISID"
    )?;
    for s in sections {
        let isid = s.isid.map_or_else(|| "-".to_owned(), |i| i.to_string());
        writeln!(
            out,
            "{:#018x} {:#018x} {:>#10x} {:>#10x} {:>5}  {}",
            s.vaddr,
            s.vaddr + s.size,
            s.size,
            s.file_offset,
            isid,
            s.path.display()
        )?;
    }
    for r in live {
        writeln!(
            out,
            "{:#018x} {:#018x} {:>#10x} {:>10} {:>5}  [process memory]",
            r.start,
            r.end,
            r.end - r.start,
            "-",
            "-"
        )?;
    }
    Ok(())
}

/// Prints `len` bytes at `addr`, 16 to a line, reading on across sections.
fn dump(image: &mut Image, addr: u64, len: u64) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut bytes = Vec::new();
    let mut at = addr;
    while (bytes.len() as u64) < len {
        let mut buf = vec![0u8; (len - bytes.len() as u64).min(4096) as usize];
        let read = image
            .read(&Asid::ANY, at, &mut buf)
            .with_context(|| format!("cannot read {len} bytes at {addr:#x}"))?;
        bytes.extend_from_slice(&buf[..read.len]);
        at += read.len as u64;
    }
    for (i, line) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(out, "{:#018x}  {}", addr + 16 * i as u64, hex.join(" "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose text holds its source's, the way thiserror messages
    /// of the libraries do.
    #[derive(Debug)]
    struct Holding(std::io::Error);

    impl std::fmt::Display for Holding {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "cannot write /x: {} (the recording holds what was written before)",
                self.0
            )
        }
    }

    impl std::error::Error for Holding {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_is_said_once() {
        let full = || std::io::Error::from_raw_os_error(libc::ENOSPC);
        // Held in the middle of its error's text.
        let e = anyhow::Error::new(Holding(full())).context("cannot record ./hot");
        assert_eq!(
            error_text(&e),
            "cannot record ./hot: cannot write /x: No space left on device (os error 28) \
             (the recording holds what was written before)"
        );
        // At its end, as before; and a cause said nowhere is kept.
        let e = anyhow::Error::new(full()).context(format!("cannot write /y: {}", full()));
        assert_eq!(
            error_text(&e),
            "cannot write /y: No space left on device (os error 28)"
        );
        let e = anyhow::Error::new(full()).context("cannot write /z");
        assert_eq!(
            error_text(&e),
            "cannot write /z: No space left on device (os error 28)"
        );
    }
}
