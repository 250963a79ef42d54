//! `ichnos stack`: the stacks of a live process's threads, taken for a
//! moment with ptrace and unwound by ichnos (SFrame, `.eh_frame`, JIT
//! tables the process registered, frame pointers), each frame named as
//! `ichnos symbolize -p` names it.

use std::io::Write;

use anyhow::{Context, Result};
use ichnos_code::elf::RowChoice;
use ichnos_code::process::{code_map_for_process, take_stack, unwind_thread, why_untraceable};
use ichnos_code::{CodeMap, FrameKind, RowSource, StopReason, UnwindOptions};

/// Where unwind rows come from.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// SFrame where a file has it, `.eh_frame` elsewhere.
    Both,
    /// SFrame only.
    Sframe,
    /// `.eh_frame` only.
    EhFrame,
}

/// Arguments of `ichnos stack`.
#[derive(clap::Args, Debug)]
pub struct StackArgs {
    /// The process (a number; `self` is refused: a process cannot stop
    /// its own threads).
    #[arg(short, long, value_name = "PID")]
    pid: String,
    /// Only this thread (default: every thread of the process).
    #[arg(long, value_name = "TID")]
    tid: Option<u32>,
    /// Which unwind information to use.
    #[arg(long, value_enum, default_value_t = Rows::Both)]
    rows: Rows,
    /// Do not follow frame pointers where no unwind information applies.
    #[arg(long)]
    no_frame_pointers: bool,
    /// At most this many frames per thread (1 to 16384).
    #[arg(
        long,
        default_value_t = 256,
        value_name = "N",
        value_parser = crate::record::parse_max_frames
    )]
    max_frames: usize,
    /// Print each frame's address and object only, without naming its
    /// function (no symbol table or DWARF is read: the stacks print at
    /// once).
    #[arg(long)]
    no_names: bool,
    /// Read no symbol index when naming: answer from the DWARF.
    #[arg(long, conflicts_with = "no_names")]
    no_index: bool,
    /// Where symbol indexes are kept (default
    /// `$XDG_CACHE_HOME/ichnos/symbols`, else `~/.cache/ichnos/symbols`).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["no_names", "no_index"])]
    index_dir: Option<std::path::PathBuf>,
    /// A directory with separate debug files (default /usr/lib/debug).
    /// Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR", conflicts_with = "no_names")]
    debug_dirs: Vec<std::path::PathBuf>,
}

pub fn stack(args: &StackArgs, verbose: bool) -> Result<()> {
    let choice = match args.rows {
        Rows::Both => RowChoice::SframeThenEhFrame,
        Rows::Sframe => RowChoice::Sframe,
        Rows::EhFrame => RowChoice::EhFrame,
    };
    let pid = crate::parse_pid(&args.pid)?;
    if pid == std::process::id() {
        anyhow::bail!(
            "ichnos cannot stop its own threads to read their stacks: give another process"
        );
    }
    // What /proc says stands in the way (no such thread in the process,
    // a zombie, a kernel thread, another tracer), before trying.
    if let Some(why) = why_untraceable(pid, args.tid.unwrap_or(pid)) {
        anyhow::bail!("cannot read the stacks of process {pid}: {why}");
    }
    let code = code_map_for_process(pid, choice)
        .with_context(|| format!("cannot read the mappings of process {pid}"))?;
    if verbose {
        for s in &code.skipped {
            eprintln!("note: no unwind rows for {}: {}", s.path, s.reason);
        }
    }
    let map = with_registered_jit_code(pid, code.map, verbose);
    let tids = match args.tid {
        Some(tid) => vec![tid],
        None => threads(pid)?,
    };
    let options = UnwindOptions {
        max_frames: args.max_frames,
        frame_pointer_fallback: !args.no_frame_pointers,
    };
    // Every thread is unwound first (each stopped only while it is read),
    // then all their addresses are named in one batch.
    let mut walks = Vec::with_capacity(tids.len());
    for tid in &tids {
        let taken = take_stack(*tid, 256 * 1024);
        // A thread that ended since the threads were listed is left out
        // (one asked for with --tid is not).
        let ended = || !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists();
        if taken.is_err() && args.tid.is_none() && ended() {
            continue;
        }
        let stack = taken.map_err(|e| {
            if let Some(why) = why_untraceable(pid, *tid) {
                return anyhow::anyhow!("cannot stop thread {tid} of process {pid}: {why}");
            }
            let hint = if e.raw_os_error() == Some(libc::EPERM) {
                " (tracing needs the same user and kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE)"
            } else {
                ""
            };
            anyhow::anyhow!("cannot stop thread {tid} of process {pid}: {e}{hint}")
        })?;
        walks.push((*tid, unwind_thread(&map, &stack, &options)));
    }
    let names = if args.no_names {
        std::collections::HashMap::new()
    } else {
        function_names(pid, &walks, &map, args, verbose)
    };
    let mut out = std::io::stdout().lock();
    for (i, (tid, walk)) in walks.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_default();
        writeln!(out, "thread {tid} ({comm})")?;
        for (n, frame) in walk.frames.iter().enumerate() {
            let how = match frame.kind {
                FrameKind::Registers => "registers",
                FrameKind::Row(RowSource::Sframe) => "via sframe",
                FrameKind::Row(RowSource::EhFrame) => "via eh_frame",
                FrameKind::Row(RowSource::DebugFrame) => "via debug_frame",
                FrameKind::Row(RowSource::GoTable) => "via go pclntab",
                FrameKind::Row(RowSource::Jit) => "via jit table",
                FrameKind::Row(RowSource::None) | FrameKind::FramePointer => "via frame pointer",
                FrameKind::Cfi => "via eh_frame cfi",
                FrameKind::Interrupted => "interrupted by a signal",
            };
            let place = map.find(frame.lookup_address()).map_or_else(
                || "?".to_owned(),
                |o| format!("{}+{:#x}", o.name, frame.ip - o.bias),
            );
            if args.no_names {
                writeln!(out, "  #{n:<3} {:#018x}  {place}  [{how}]", frame.ip)?;
                continue;
            }
            let name = names
                .get(&frame.lookup_address())
                .map_or("??", String::as_str);
            writeln!(
                out,
                "  #{n:<3} {:#018x}  {place}  {name}  [{how}]",
                frame.ip
            )?;
        }
        writeln!(out, "  stopped: {}", describe(walk.stop))?;
    }
    Ok(())
}

/// The function of each frame's address (the instruction for frame 0,
/// the call for callers), as `symbolize -p` names it: the innermost
/// function, and those it was inlined into (`f (inlined into g)`).
/// Addresses that cannot be named are left out (`??` when printed).
/// With `verbose`, says which objects (found in `map`) are named through
/// a symbol index.
fn function_names(
    pid: u32,
    walks: &[(u32, ichnos_code::Unwind)],
    map: &CodeMap,
    args: &StackArgs,
    verbose: bool,
) -> std::collections::HashMap<u64, String> {
    let mut addrs: Vec<u64> = walks
        .iter()
        .flat_map(|(_, w)| w.frames.iter().map(ichnos_code::Frame::lookup_address))
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let mut options = ichnos_symbol::SymbolizerOptions {
        index_dir: crate::symbolize::chosen_index_dir(args.no_index, args.index_dir.as_ref()),
        ..ichnos_symbol::SymbolizerOptions::default()
    };
    if !args.debug_dirs.is_empty() {
        options.debug_dirs.clone_from(&args.debug_dirs);
    }
    let symbolizer = ichnos_symbol::Symbolizer::new(options);
    if verbose {
        // (The index found is kept: the batch below answers from it.)
        let mut seen = std::collections::HashSet::new();
        let objects = walks
            .iter()
            .flat_map(|(_, w)| &w.frames)
            .filter_map(|f| map.find(f.lookup_address()));
        for object in objects {
            if !seen.insert(&object.name) {
                continue;
            }
            if let Some(index) = symbolizer.usable_index(std::path::Path::new(&*object.name)) {
                eprintln!(
                    "note: {} is named through the symbol index {}",
                    object.name,
                    index.path().display()
                );
            }
        }
    }
    let answers = match symbolizer.symbolize_process(pid, &addrs) {
        Ok(answers) => answers,
        Err(e) => {
            // (The process may have exited since its stacks were read.)
            eprintln!("note: cannot name the frames of process {pid}: {e}");
            return std::collections::HashMap::new();
        }
    };
    addrs
        .into_iter()
        .zip(answers)
        .filter_map(|(addr, answer)| {
            let mut frames = answer.symbolized.frames.iter();
            let first = frames.next()?.function.as_deref()?.to_owned();
            let name = frames.fold(first, |name, outer| {
                let outer = outer.function.as_deref().unwrap_or("??");
                format!("{name} (inlined into {outer})")
            });
            Some((addr, name))
        })
        .collect()
}

/// Adds the JIT code the process registered (if it exports a registry).
fn with_registered_jit_code(pid: u32, mut map: CodeMap, verbose: bool) -> CodeMap {
    let Ok((registry, _)) = ichnos_code::Registry::from_process(pid) else {
        return map;
    };
    for object in registry.snapshot().objects() {
        if object.source == RowSource::Jit {
            if let Err(e) = map.insert(std::sync::Arc::clone(object)) {
                if verbose {
                    eprintln!("note: registered JIT code left out: {e}");
                }
            }
        }
    }
    map
}

fn threads(pid: u32) -> Result<Vec<u32>> {
    let dir = format!("/proc/{pid}/task");
    let mut tids: Vec<u32> = std::fs::read_dir(&dir)
        .with_context(|| format!("process {pid} does not exist or cannot be read ({dir})"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

fn describe(stop: StopReason) -> String {
    match stop {
        StopReason::Outermost => "outermost frame".into(),
        StopReason::Loop => "the stack pointer did not move up (loop or corrupt stack)".into(),
        StopReason::DepthLimit => "frame limit (--max-frames)".into(),
        StopReason::StackEnd { addr } => format!("cannot read the stack at {addr:#x}"),
        StopReason::NoUnwindInfo { pc } => format!("no unwind information for {pc:#x}"),
        StopReason::BadAddress => "an address overflowed (corrupt registers or rows)".into(),
    }
}
