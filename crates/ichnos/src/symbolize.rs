//! `ichnos symbolize`: addresses of an object file to functions, source
//! files and lines, in `addr2line -f -i -C` form or as JSON.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use ichnos_symbol::{Place, Symbolized, Symbolizer, SymbolizerOptions};

/// Arguments of `ichnos symbolize`.
#[derive(clap::Args, Debug)]
pub struct SymbolizeArgs {
    /// The object file (executable or shared library); addresses are its
    /// own virtual addresses.
    #[arg(
        short = 'e',
        long = "exe",
        value_name = "FILE",
        required_unless_present = "pid"
    )]
    exe: Option<PathBuf>,
    /// A live process; addresses are run-time addresses in it, placed
    /// through its mappings (JIT code named from /tmp/perf-PID.map).
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with = "exe")]
    pid: Option<u32>,
    /// Print JSON, one object per address, instead of addr2line's lines.
    #[arg(long)]
    json: bool,
    /// Do not demangle Rust and C++ names.
    #[arg(long)]
    no_demangle: bool,
    /// Print only the outermost function, not inlined ones.
    #[arg(long)]
    no_inlines: bool,
    /// A directory with separate debug files (default /usr/lib/debug).
    /// Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
    /// Addresses in hex (0x optional), as addr2line takes them; read from
    /// standard input, one per line, when none is given.
    #[arg(value_name = "ADDR")]
    addrs: Vec<String>,
}

fn parse_addr(text: &str) -> Result<u64> {
    let hex = text
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X");
    u64::from_str_radix(hex, 16).with_context(|| format!("{text:?} is not a hex address"))
}

/// Where addresses come from: the command line, or standard input read
/// in chunks. A chunk ends at 4,096 addresses, or — when standard input is
/// a pipe or terminal — as soon as no more input is waiting, so that a
/// program driving ichnos as a coprocess (one address, then its answer, as
/// with addr2line) gets each answer without closing its end.
enum Input {
    Args(std::vec::IntoIter<u64>),
    Stdin {
        reader: std::io::BufReader<std::io::StdinLock<'static>>,
        interactive: bool,
        done: bool,
    },
}

const CHUNK: usize = 4096;

impl Input {
    fn new(args: &SymbolizeArgs) -> Result<Input> {
        if args.addrs.is_empty() {
            // A regular file never makes a read wait: read it in full chunks.
            let interactive = !std::fs::metadata("/proc/self/fd/0").is_ok_and(|m| m.is_file());
            return Ok(Input::Stdin {
                reader: std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock()),
                interactive,
                done: false,
            });
        }
        let addrs = args
            .addrs
            .iter()
            .map(|a| parse_addr(a))
            .collect::<Result<Vec<_>>>()?;
        Ok(Input::Args(addrs.into_iter()))
    }

    /// The next chunk (empty at the end), and whether an answer should be
    /// flushed at once because the input paused.
    fn next_chunk(&mut self, chunk: &mut Vec<u64>) -> Result<bool> {
        chunk.clear();
        match self {
            Input::Args(rest) => {
                chunk.extend(rest.take(CHUNK));
                Ok(false)
            }
            Input::Stdin {
                reader,
                interactive,
                done,
            } => {
                let mut line = String::new();
                while !*done && chunk.len() < CHUNK {
                    line.clear();
                    if reader
                        .read_line(&mut line)
                        .context("reading addresses from standard input")?
                        == 0
                    {
                        *done = true;
                        break;
                    }
                    let text = line.trim();
                    if !text.is_empty() {
                        chunk.push(parse_addr(text)?);
                    }
                    if *interactive && reader.buffer().is_empty() {
                        // The next read would wait: answer what we have.
                        return Ok(true);
                    }
                }
                Ok(false)
            }
        }
    }
}

pub fn symbolize(args: &SymbolizeArgs, verbose: bool) -> Result<()> {
    let mut input = Input::new(args)?;
    let mut options = SymbolizerOptions {
        demangle: !args.no_demangle,
        inlines: !args.no_inlines,
        ..SymbolizerOptions::default()
    };
    if !args.debug_dirs.is_empty() {
        options.debug_dirs.clone_from(&args.debug_dirs);
    }
    let symbolizer = Symbolizer::new(options);
    // Objects whose refused debug files were reported.
    let mut warned = std::collections::HashSet::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // In chunks: answers are printed and dropped as they come, so neither
    // the addresses nor the answers of a long input are held whole.
    let mut chunk = Vec::with_capacity(CHUNK);
    for n in 0.. {
        let paused = input.next_chunk(&mut chunk)?;
        if chunk.is_empty() {
            if paused {
                out.flush()?;
                continue;
            }
            break;
        }
        let (results, places): (Vec<Symbolized>, Vec<Option<Place>>) = match (&args.exe, args.pid) {
            (Some(exe), _) => {
                let results = symbolizer
                    .symbolize_file(exe, &chunk)
                    .with_context(|| format!("cannot symbolize {}", exe.display()))?;
                warn_refused(&symbolizer, exe, &mut warned);
                let count = results.len();
                (results, vec![None; count])
            }
            (None, Some(pid)) => symbolizer
                .symbolize_process(pid, &chunk)
                .with_context(|| format!("cannot symbolize addresses of process {pid}"))?
                .into_iter()
                .map(|p| (p.symbolized, Some(p.place)))
                .unzip(),
            (None, None) => anyhow::bail!("give -e FILE or -p PID"),
        };
        for place in places.iter().flatten() {
            if let Place::Object { path, .. } = place {
                warn_refused(&symbolizer, path, &mut warned);
            }
        }
        if verbose && n == 0 {
            if let Some(first) = results.first() {
                eprintln!("note: answers from {}", first.source);
            }
        }
        print(&mut out, &results, &places, args.json)?;
        if paused {
            out.flush()?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Says once per object which debug files were found but refused (a CRC
/// that does not match), so a user knows why lines are missing.
fn warn_refused(
    symbolizer: &Symbolizer,
    object: &std::path::Path,
    warned: &mut std::collections::HashSet<PathBuf>,
) {
    // Looked up first: under -p this runs for every address.
    if !warned.contains(object) {
        warned.insert(object.to_path_buf());
        for refused in symbolizer.refused_debug_files(object).unwrap_or_default() {
            eprintln!(
                "warning: {}: debug file refused: {refused}",
                object.display()
            );
        }
    }
}

fn print(
    out: &mut impl Write,
    results: &[Symbolized],
    places: &[Option<Place>],
    json_output: bool,
) -> Result<()> {
    for (r, place) in results.iter().zip(places) {
        if json_output {
            writeln!(out, "{}", json(r, place.as_ref()))?;
        } else {
            for f in &r.frames {
                // Bytes written as they are: the formatting machinery was
                // a tenth of a large batch.
                out.write_all(f.function.as_deref().unwrap_or("??").as_bytes())?;
                out.write_all(b"\n")?;
                let file = f.file.as_deref().unwrap_or("??").as_bytes();
                match f.line.filter(|l| *l > 0) {
                    _ if f.file.is_none() && f.function.is_none() => out.write_all(b"??:0\n")?,
                    Some(line) => {
                        out.write_all(file)?;
                        out.write_all(b":")?;
                        out.write_all(decimal(line, &mut [0; 10]))?;
                        out.write_all(b"\n")?;
                    }
                    None => {
                        out.write_all(file)?;
                        out.write_all(b":?\n")?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// `n` in decimal, written into the end of `buf`.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

fn json(r: &Symbolized, place: Option<&Place>) -> String {
    let frames: Vec<serde_json::Value> = r
        .frames
        .iter()
        .map(|f| {
            serde_json::json!({
                "function": f.function.as_deref(),
                "raw_function": f.raw_function.as_deref(),
                "file": f.file.as_deref(),
                "line": f.line,
                "column": f.column,
                "inlined": f.inlined,
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "address": format!("{:#x}", r.addr),
        "source": r.source.to_string(),
        "frames": frames,
    });
    if let Some(place) = place {
        v["object"] = match place {
            Place::Object { path, .. } => path.display().to_string().into(),
            Place::Anonymous => "[anonymous]".into(),
            Place::Unmapped => serde_json::Value::Null,
        };
        if let Place::Object { file_addr, .. } = place {
            v["object_address"] = format!("{file_addr:#x}").into();
        }
    }
    v.to_string()
}
