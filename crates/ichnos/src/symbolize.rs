//! `ichnos symbolize`: addresses of an object file to functions, source
//! files and lines, in `addr2line -f -i -C` form or as JSON.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use ichnos_symbol::{Place, Symbolized, Symbolizer, SymbolizerOptions};

/// Arguments of `ichnos symbolize`.
// Command-line switches are bools by nature.
#[allow(clippy::struct_excessive_bools)]
#[derive(clap::Args, Debug)]
// One of -e and -p: the usage line names both.
#[command(group(clap::ArgGroup::new("target").required(true).args(["exe", "pid"])))]
pub struct SymbolizeArgs {
    /// The object file (executable or shared library); addresses are its
    /// own virtual addresses.
    #[arg(short = 'e', long = "exe", value_name = "FILE")]
    exe: Option<PathBuf>,
    /// A live process (`self` for ichnos); addresses are run-time
    /// addresses in it, placed through its mappings (JIT code named from
    /// /tmp/perf-PID.map).
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with = "exe")]
    pid: Option<String>,
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
    /// Make the object's symbol index first if it has none made from this
    /// build: a one-time cost of a few DWARF passes, after which every run
    /// on the same build answers from the index.
    #[arg(long, requires = "exe", conflicts_with = "no_index")]
    index: bool,
    /// Read no symbol index: answer from the DWARF.
    #[arg(long)]
    no_index: bool,
    /// Where symbol indexes are kept (default
    /// `$XDG_CACHE_HOME/ichnos/symbols`, else `~/.cache/ichnos/symbols`).
    #[arg(long, value_name = "DIR")]
    index_dir: Option<PathBuf>,
    /// Addresses in hex (0x optional), as addr2line takes them; read from
    /// standard input, one per line, when none is given.
    #[arg(value_name = "ADDR")]
    addrs: Vec<String>,
}

fn parse_addr(text: &str) -> Result<u64> {
    crate::parse_hex(text).map_err(|_| anyhow::anyhow!("{text:?} is not a hex address"))
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
        /// Lines read so far.
        number: u64,
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
                number: 0,
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
    /// flushed at once because the input paused. A line that is not an
    /// address is an entry of its own, answered `??` as addr2line does,
    /// with a warning; reading goes on after it.
    fn next_chunk(&mut self, chunk: &mut Vec<Entry>) -> Result<bool> {
        chunk.clear();
        match self {
            Input::Args(rest) => {
                chunk.extend(rest.take(CHUNK).map(Entry::Addr));
                Ok(false)
            }
            Input::Stdin {
                reader,
                interactive,
                done,
                number,
            } => {
                let mut line = Vec::with_capacity(64);
                while !*done && chunk.len() < CHUNK {
                    let Some(long) = read_bounded_line(reader, &mut line)
                        .context("reading addresses from standard input")?
                    else {
                        *done = true;
                        break;
                    };
                    *number += 1;
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim();
                    if long {
                        eprintln!(
                            "warning: standard input line {number}: longer than {MAX_LINE} bytes, not an address (answered ??)"
                        );
                        chunk.push(Entry::Bad);
                    } else if !text.is_empty() {
                        match parse_addr(text) {
                            Ok(addr) => chunk.push(Entry::Addr(addr)),
                            Err(e) => {
                                eprintln!(
                                    "warning: standard input line {number}: {e} (answered ??)"
                                );
                                chunk.push(Entry::Bad);
                            }
                        }
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

/// The longest line of standard input taken as an address (hex digits,
/// a `0x`, blanks: far below it).
const MAX_LINE: usize = 4096;

/// Reads one line into `line` (its newline dropped), keeping at most
/// [`MAX_LINE`] bytes of it and reading past the rest: `None` at the end
/// of the input, else whether the line was longer.
fn read_bounded_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut long = false;
    let mut any = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(long));
        }
        any = true;
        let (take, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at, Some(at + 1)),
            None => (buf.len(), None),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        long |= take > room;
        line.extend_from_slice(&buf[..take.min(room)]);
        let used = end.unwrap_or(take);
        reader.consume(used);
        if end.is_some() {
            return Ok(Some(long));
        }
    }
}

/// One line of input: an address, or a line that is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Addr(u64),
    Bad,
}

/// The symbol index directory a command uses: none with `--no-index`,
/// else `--index-dir`'s, else the default one.
pub(crate) fn chosen_index_dir(no_index: bool, index_dir: Option<&PathBuf>) -> Option<PathBuf> {
    if no_index {
        None
    } else {
        index_dir.cloned().or_else(default_index_dir)
    }
}

/// Where symbol indexes are kept unless `--index-dir` says.
pub(crate) fn default_index_dir() -> Option<PathBuf> {
    Some(ichnos_profile::cache_dir()?.join("symbols"))
}

/// The process of `-p`, if any, checked to be one whose mappings can be
/// read: a zombie has none to place addresses in, and says so rather
/// than answer `??` for every one.
fn readable_pid(text: Option<&str>) -> Result<Option<u32>> {
    let Some(pid) = text.map(crate::parse_pid).transpose()? else {
        return Ok(None);
    };
    if let Some(why) = ichnos_code::process::why_unreadable(pid, pid) {
        anyhow::bail!("cannot symbolize addresses of process {pid}: {why}");
    }
    Ok(Some(pid))
}

pub fn symbolize(args: &SymbolizeArgs, verbose: bool, quiet: bool) -> Result<()> {
    let pid = readable_pid(args.pid.as_deref())?;
    let mut input = Input::new(args)?;
    let mut options = SymbolizerOptions {
        demangle: !args.no_demangle,
        inlines: !args.no_inlines,
        index_dir: chosen_index_dir(args.no_index, args.index_dir.as_ref()),
        ..SymbolizerOptions::default()
    };
    if !args.debug_dirs.is_empty() {
        options.debug_dirs.clone_from(&args.debug_dirs);
    }
    let symbolizer = Symbolizer::new(options);
    if let (true, Some(exe)) = (args.index, &args.exe) {
        make_index(&symbolizer, exe, quiet)?;
    }
    // Objects whose refused debug files were reported.
    let mut warned = std::collections::HashSet::new();
    // Text answers for one file with an index are written straight from
    // it, without making a string per frame.
    let index = match (&args.exe, args.json) {
        (Some(exe), false) => symbolizer
            .index_of(exe)
            .with_context(|| format!("cannot symbolize {}", exe.display()))?,
        _ => None,
    };
    if let (true, Some(index)) = (verbose, &index) {
        eprintln!(
            "note: answers from {} through the symbol index {}",
            index.source(),
            index.path().display()
        );
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // In chunks: answers are printed and dropped as they come, so neither
    // the addresses nor the answers of a long input are held whole.
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut answers: Vec<u8> = Vec::new();
    for n in 0.. {
        let paused = input.next_chunk(&mut chunk)?;
        if chunk.is_empty() {
            if paused {
                out.flush()?;
                continue;
            }
            break;
        }
        if let Some(index) = &index {
            answer_from_index(index, &chunk, !args.no_demangle, &mut answers).with_context(
                || {
                    let exe = args.exe.as_deref().unwrap_or(std::path::Path::new("?"));
                    format!("cannot symbolize {}", exe.display())
                },
            )?;
            out.write_all(&answers)?;
            if paused {
                out.flush()?;
            }
            continue;
        }
        let addrs: Vec<u64> = chunk
            .iter()
            .filter_map(|e| match e {
                Entry::Addr(a) => Some(*a),
                Entry::Bad => None,
            })
            .collect();
        let (results, places): (Vec<Symbolized>, Vec<Option<Place>>) = match (&args.exe, pid) {
            (Some(exe), _) => {
                let results = symbolizer
                    .symbolize_file(exe, &addrs)
                    .with_context(|| format!("cannot symbolize {}", exe.display()))?;
                warn_refused(&symbolizer, exe, exe, &mut warned);
                let count = results.len();
                (results, vec![None; count])
            }
            (None, Some(pid)) => symbolizer
                .symbolize_process(pid, &addrs)
                .with_context(|| format!("cannot symbolize addresses of process {pid}"))?
                .into_iter()
                .map(|p| (p.symbolized, Some(p.place)))
                .unzip(),
            (None, None) => usage!("give -e FILE or -p PID"),
        };
        for place in places.iter().flatten() {
            warn_refused_in(&symbolizer, place, &mut warned);
        }
        if verbose && n == 0 {
            if let Some(first) = results.first() {
                eprintln!("note: answers from {}", first.source);
            }
        }
        print(&mut out, &chunk, &results, &places, args.json)?;
        if paused {
            out.flush()?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The text answers of `chunk` from `index`, into `answers`. Answered
/// into a buffer before any is printed: an index cut short under its
/// mapping answered from zeros, and those answers are not printed.
fn answer_from_index(
    index: &ichnos_symbol::SymbolIndex,
    chunk: &[Entry],
    demangle: bool,
    answers: &mut Vec<u8>,
) -> Result<()> {
    answers.clear();
    for entry in chunk {
        match *entry {
            Entry::Addr(addr) => {
                for f in index.frame_refs(addr, demangle) {
                    text_frame(answers, f.function, f.file, f.line)?;
                }
            }
            Entry::Bad => text_frame(answers, None, None, None)?,
        }
    }
    if index.truncated() {
        anyhow::bail!(
            "the symbol index {} was cut short while it was read",
            index.path().display()
        );
    }
    Ok(())
}

/// Makes the index of `exe` unless it has one made from this build,
/// showing progress on a terminal.
fn make_index(symbolizer: &Symbolizer, exe: &std::path::Path, quiet: bool) -> Result<()> {
    use std::io::IsTerminal;
    if symbolizer.usable_index(exe).is_some() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let show = !quiet && std::io::stderr().is_terminal();
    let mut progress = |done: usize, all: usize| {
        if show && all > 0 {
            eprint!("\rindexing {}: {}%", exe.display(), done * 100 / all);
        }
    };
    let index = symbolizer.build_index(exe, &mut progress);
    if show {
        eprint!("\r\x1b[K");
    }
    let index = index.with_context(|| format!("cannot index {}", exe.display()))?;
    if !quiet {
        eprintln!(
            "note: indexed {} ({} ranges, {:.1} MiB, {:.1} s): {}",
            exe.display(),
            index.ranges(),
            index.len_bytes() as f64 / f64::from(1 << 20),
            started.elapsed().as_secs_f64(),
            index.path().display()
        );
    }
    Ok(())
}

/// [`warn_refused`] for the object a process's address lies in.
fn warn_refused_in(
    symbolizer: &Symbolizer,
    place: &Place,
    warned: &mut std::collections::HashSet<PathBuf>,
) {
    if let Place::Object {
        path, read_from, ..
    } = place
    {
        warn_refused(symbolizer, path, read_from, warned);
    }
}

/// Says once per object which debug files were found but refused (a CRC
/// that does not match), so a user knows why lines are missing.
fn warn_refused(
    symbolizer: &Symbolizer,
    object: &std::path::Path,
    read_from: &std::path::Path,
    warned: &mut std::collections::HashSet<PathBuf>,
) {
    // Looked up first: under -p this runs for every address. The vDSO
    // is passed over: no debug link names its debug file (one found by
    // build id is never refused), and its copy is gone by now.
    if !warned.contains(object) && object != std::path::Path::new("[vdso]") {
        warned.insert(object.to_path_buf());
        // The object as it was read (a deleted file through the
        // process's link to it, the vDSO through its copy).
        for refused in symbolizer
            .refused_debug_files(read_from)
            .unwrap_or_default()
        {
            eprintln!(
                "warning: {}: debug file refused: {refused}",
                object.display()
            );
        }
    }
}

/// The answers of `chunk`: `results` and `places` of its addresses in
/// order, and `??` for its lines that were not addresses.
fn print(
    out: &mut impl Write,
    chunk: &[Entry],
    results: &[Symbolized],
    places: &[Option<Place>],
    json_output: bool,
) -> Result<()> {
    let mut answers = results.iter().zip(places);
    for entry in chunk {
        if *entry == Entry::Bad {
            if json_output {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"address": null, "frames": []})
                )?;
            } else {
                text_frame(out, None, None, None)?;
            }
            continue;
        }
        let Some((r, place)) = answers.next() else {
            break;
        };
        if json_output {
            writeln!(out, "{}", json(r, place.as_ref()))?;
        } else {
            for f in &r.frames {
                text_frame(
                    out,
                    f.function.as_deref().map(str::as_bytes),
                    f.file.as_deref().map(str::as_bytes),
                    f.line,
                )?;
            }
        }
    }
    Ok(())
}

/// One frame in `addr2line -f -i` form: the function, then `file:line`.
fn text_frame(
    out: &mut impl Write,
    function: Option<&[u8]>,
    file: Option<&[u8]>,
    line: Option<u32>,
) -> std::io::Result<()> {
    // Bytes written as they are: the formatting machinery was a tenth of
    // a large batch.
    out.write_all(function.unwrap_or(b"??"))?;
    out.write_all(b"\n")?;
    match line.filter(|l| *l > 0) {
        _ if file.is_none() && function.is_none() => out.write_all(b"??:0\n"),
        Some(line) => {
            out.write_all(file.unwrap_or(b"??"))?;
            out.write_all(b":")?;
            out.write_all(decimal(line, &mut [0; 10]))?;
            out.write_all(b"\n")
        }
        None => {
            out.write_all(file.unwrap_or(b"??"))?;
            out.write_all(b":?\n")
        }
    }
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
    // The address in the object's own terms, which function starts are in.
    let own = match place {
        Some(Place::Object { file_addr, .. }) => *file_addr,
        _ => r.addr,
    };
    let frames: Vec<serde_json::Value> = r
        .frames
        .iter()
        .map(|f| {
            let mut v = serde_json::json!({
                "function": f.function.as_deref(),
                "raw_function": f.raw_function.as_deref(),
                "file": f.file.as_deref(),
                "line": f.line,
                "column": f.column,
                "inlined": f.inlined,
            });
            if let Some(start) = f.function_start.filter(|&s| s <= own) {
                v["function_offset"] = format!("{:#x}", own - start).into();
            }
            v
        })
        .collect();
    let mut v = serde_json::json!({
        "address": format!("{:#x}", r.addr),
        "source": r.source.to_string(),
        "frames": frames,
    });
    if let Some(why) = r.unnamed {
        v["unnamed"] = why.to_string().into();
    }
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
