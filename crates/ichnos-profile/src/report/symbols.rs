//! Frames to names, offline: per object in one batch, the object found by
//! build id first, through its symbol index when there is one (made here
//! when the batch is large enough to pay for it).
//!
//! An object that is gone, or whose build id no longer matches, is named
//! in one warning and its frames are kept as `object+offset`. JIT frames
//! take the names the recording captured, and read `[jit]` as their
//! object.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ichnos_data::JitSource;
use ichnos_symbol::{Symbolizer, SymbolizerOptions};

use super::load::{Place, Profile};

/// How to symbolize.
#[derive(Clone, Debug)]
pub struct SymbolOptions {
    /// Inlined functions as frames of their own.
    pub inlines: bool,
    /// Where symbol indexes are kept; `None`: none is read or made.
    pub index_dir: Option<PathBuf>,
    /// Separate debug files (besides `/usr/lib/debug`).
    pub debug_dirs: Vec<PathBuf>,
    /// Show addresses instead of names.
    pub addresses: bool,
}

/// One frame of a report: a function in an object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function (or `object+offset` where it is not known).
    pub function: Arc<str>,
    /// The object's name (file name, `[jit]`, `[vdso]`, `[unknown]`).
    pub object: Arc<str>,
    /// The source file and line, where known.
    pub source: Option<(Arc<str>, u32)>,
    /// Inlined into the frame after it, at the same address. The last
    /// frame of each address is never inlined: a stack's frames split
    /// into its walked frames at the frames that are not.
    pub inlined: bool,
    /// JIT code.
    pub jit: bool,
    /// The kernel's code (the kernel itself, or a module).
    pub kernel: bool,
}

/// Symbolized stacks, by stack number: frames innermost first.
#[derive(Debug, Default)]
pub struct Symbolized {
    /// The frames of each stack.
    pub stacks: Vec<Option<Vec<Frame>>>,
    /// Objects that could not be read, one line each.
    pub warnings: Vec<String>,
    /// Objects made an index for: (object, ranges, seconds).
    pub indexed: Vec<(PathBuf, usize, f64)>,
}

/// Distinct addresses of one object make an index when there are at
/// least this many: below it, reading the DWARF is quicker than making
/// the index (BENCHMARKS.md: the index of a 21 MB binary takes about a
/// second; its DWARF answers 300,000 addresses a second).
pub const INDEX_THRESHOLD: usize = 20_000;

/// An object with at least this much DWARF (as stored) is indexed
/// however few its addresses: reading it costs every report the time to
/// decompress and walk it all (80 ms for glibc's debug file), the index
/// once (0.5 s for glibc) and then a few milliseconds. The libraries
/// that have this much are the ones every program maps.
pub const INDEX_DWARF_BYTES: u64 = 1 << 20;

/// What a mapping's object is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ObjectKey {
    File {
        path: Arc<[u8]>,
        build_id: Arc<[u8]>,
    },
    Jit,
    /// The vDSO, by the build id the recording gives it (empty: unknown).
    Vdso(Arc<[u8]>),
    Other(Arc<[u8]>),
}

/// The short name of an object: its file name.
fn display_name(path: &[u8]) -> Arc<str> {
    let text = String::from_utf8_lossy(path);
    Arc::from(text.rsplit('/').next().unwrap_or(&text))
}

use crate::mapping::hex;

/// Where to read the object recorded as `path` with `build_id`: the file
/// itself if it is the same build, else a copy by build id in the debug
/// directories (a debug file holds the symbols and DWARF) or perf's build
/// id cache. `Err` says why neither is there.
fn locate(path: &[u8], build_id: &[u8], debug_dirs: &[PathBuf]) -> Result<PathBuf, String> {
    let file = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
    let exists = file.is_file();
    let (now, _) = if exists {
        ichnos_code::elf::identity_of_file(&file)
    } else {
        (None, None)
    };
    if exists && (build_id.is_empty() || now.as_deref() == Some(build_id)) {
        return Ok(file);
    }
    if build_id.len() >= 2 {
        let id = hex(build_id);
        let (head, tail) = id.split_at(2);
        let mut candidates = Vec::new();
        for dir in debug_dirs {
            candidates.push(
                dir.join(".build-id")
                    .join(head)
                    .join(format!("{tail}.debug")),
            );
        }
        for c in candidates {
            if c.is_file() && ichnos_code::elf::identity_of_file(&c).0.as_deref() == Some(build_id)
            {
                return Ok(c);
            }
        }
        if let Some(copy) = crate::mapping::perf_cached_copy(build_id) {
            return Ok(copy);
        }
    }
    Err(if exists {
        format!(
            "{} has changed since the recording (build id {} then, {} now)",
            file.display(),
            hex(build_id),
            now.as_deref().map_or_else(|| "none".to_owned(), hex)
        )
    } else {
        format!("{} is gone", file.display())
    })
}

/// Symbolizes every stack of `profile`. `progress` is told (objects done,
/// objects in all).
pub fn symbolize(
    profile: &Profile,
    options: &SymbolOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Symbolized {
    let mut debug_dirs = vec![PathBuf::from("/usr/lib/debug")];
    debug_dirs.extend(options.debug_dirs.iter().cloned());
    let symbolizer = Symbolizer::new(SymbolizerOptions {
        debug_dirs: debug_dirs.clone(),
        demangle: true,
        inlines: options.inlines,
        index_dir: options.index_dir.clone(),
        ..SymbolizerOptions::default()
    });
    // Every distinct (object, file offset), each answered once.
    let mut wanted: HashMap<ObjectKey, HashMap<u64, Vec<Frame>>> = HashMap::new();
    let key_of = |mapping: usize| -> ObjectKey {
        let m = &profile.mappings[mapping];
        if crate::mapping::is_anonymous(&m.path) {
            ObjectKey::Jit
        } else if crate::mapping::is_vdso(&m.path) {
            ObjectKey::Vdso(Arc::clone(&m.build_id))
        } else if crate::mapping::is_file(&m.path) {
            ObjectKey::File {
                path: Arc::clone(&m.path),
                build_id: Arc::clone(&m.build_id),
            }
        } else {
            ObjectKey::Other(Arc::clone(&m.path))
        }
    };
    for stack in profile.stacks.iter().flatten() {
        for &(_, place) in &stack.frames {
            if let Place::Mapped { mapping, offset } = place {
                let key = key_of(mapping);
                if matches!(key, ObjectKey::File { .. } | ObjectKey::Vdso(_)) {
                    wanted.entry(key).or_default().entry(offset).or_default();
                }
            }
        }
    }
    let mut out = Symbolized::default();
    let total = wanted.len();
    // The vDSO is in no file: its addresses are named from this process's
    // own vDSO when it is the same build (the same kernel maps the same
    // bytes), known by the build id the recorder read from the target's.
    // Copied only if a recorded vDSO has a build id to compare.
    let own_vdso = std::cell::OnceCell::new();
    for (done, (key, offsets)) in wanted.iter_mut().enumerate() {
        progress(done, total);
        if let ObjectKey::Vdso(build_id) = key {
            if build_id.is_empty() {
                continue;
            }
            let own =
                own_vdso.get_or_init(|| ichnos_symbol::VdsoImage::of_process(std::process::id()));
            if let Some(own) = own
                .as_ref()
                .filter(|own| own.build_id() == Some(&build_id[..]))
            {
                if !options.addresses {
                    let name = Arc::from("[vdso]");
                    name_object(&symbolizer, own.path(), &name, false, offsets, &mut out);
                }
            }
            continue;
        }
        let ObjectKey::File { path, build_id } = key else {
            continue;
        };
        let name = display_name(path);
        let file = match locate(path, build_id, &debug_dirs) {
            Ok(file) => file,
            Err(why) => {
                out.warnings.push(format!(
                    "{why}: its {} addresses are shown as {name}+offset",
                    offsets.len()
                ));
                continue;
            }
        };
        if !options.addresses {
            let indexable = !build_id.is_empty();
            name_object(&symbolizer, &file, &name, indexable, offsets, &mut out);
        }
        // What no name was found for: the object's own address.
        let segments = ichnos_image::load_segments(&file, 0).ok();
        for (offset, frames) in offsets.iter_mut() {
            if frames.is_empty() {
                let addr = segments
                    .as_deref()
                    .and_then(|s| ichnos_image::vaddr_of_file_offset(s, *offset))
                    .unwrap_or(*offset);
                frames.push(unknown(&name, addr));
            }
        }
    }
    progress(total, total);
    for stack in &profile.stacks {
        out.stacks.push(
            stack
                .as_ref()
                .map(|stack| assemble(profile, stack, &wanted, &key_of, options)),
        );
    }
    out
}

/// The symbolized frames of one stack, from the names of its objects'
/// addresses.
fn assemble(
    profile: &Profile,
    stack: &super::load::Stack,
    wanted: &HashMap<ObjectKey, HashMap<u64, Vec<Frame>>>,
    key_of: &dyn Fn(usize) -> ObjectKey,
    options: &SymbolOptions,
) -> Vec<Frame> {
    let mut frames = Vec::with_capacity(stack.frames.len());
    for &(pc, place) in &stack.frames {
        if let Some(span) = span_frame(profile, stack.asid, pc) {
            frames.push(span);
            continue;
        }
        match place {
            Place::Mapped { mapping, offset } => match key_of(mapping) {
                key @ ObjectKey::File { .. } => {
                    match wanted.get(&key).and_then(|o| o.get(&offset)) {
                        Some(named) if !named.is_empty() => frames.extend(named.iter().cloned()),
                        _ => frames.push(unknown(
                            &display_name(&profile.mappings[mapping].path),
                            offset,
                        )),
                    }
                }
                ObjectKey::Jit => frames.push(jit_frame(profile, stack.asid, pc, options)),
                key @ ObjectKey::Vdso(_) => match wanted.get(&key).and_then(|o| o.get(&offset)) {
                    Some(named) if !named.is_empty() => frames.extend(named.iter().cloned()),
                    _ => frames.push(unknown(&Arc::from("[vdso]"), offset)),
                },
                ObjectKey::Other(path) => frames.push(unknown(&display_name(&path), offset)),
            },
            // JIT code the process named, else unknown memory.
            Place::Unmapped if profile.jit_name(stack.asid, pc).is_some() => {
                frames.push(jit_frame(profile, stack.asid, pc, options));
            }
            Place::Kernel => frames.push(kernel_frame(profile, pc, options)),
            Place::Unmapped => frames.push(Frame {
                function: Arc::from(format!("{pc:#x}")),
                object: Arc::from("[unknown]"),
                source: None,
                inlined: false,
                jit: false,
                kernel: false,
            }),
        }
    }
    frames
}

/// Names the addresses of one object, in one batch.
fn name_object(
    symbolizer: &Symbolizer,
    file: &Path,
    name: &Arc<str>,
    indexable: bool,
    offsets: &mut HashMap<u64, Vec<Frame>>,
    out: &mut Symbolized,
) {
    let Ok(segments) = ichnos_image::load_segments(file, 0) else {
        return;
    };
    let mut order: Vec<(u64, u64)> = offsets
        .keys()
        .filter_map(|&off| Some((ichnos_image::vaddr_of_file_offset(&segments, off)?, off)))
        .collect();
    order.sort_unstable();
    // Only an object with a build id is indexed (its index is keyed by
    // it); the cheap checks first.
    if indexable
        && symbolizer.index_dir().is_some()
        && symbolizer.usable_index(file).is_none()
        && (order.len() >= INDEX_THRESHOLD
            || symbolizer
                .dwarf_size(file)
                .is_ok_and(|n| n >= INDEX_DWARF_BYTES))
    {
        let started = std::time::Instant::now();
        if let Ok(index) = symbolizer.build_index(file, &mut |_, _| {}) {
            out.indexed.push((
                file.to_path_buf(),
                index.ranges(),
                started.elapsed().as_secs_f64(),
            ));
        }
    }
    let addrs: Vec<u64> = order.iter().map(|&(a, _)| a).collect();
    let Ok(answers) = symbolizer.symbolize_file(file, &addrs) else {
        return;
    };
    for ((addr, off), answer) in order.into_iter().zip(answers) {
        let frames = offsets.get_mut(&off).expect("asked for");
        for f in answer.frames {
            let Some(function) = f.function else {
                continue;
            };
            frames.push(Frame {
                function,
                object: Arc::clone(name),
                source: f.file.zip(f.line.filter(|&l| l > 0)),
                inlined: f.inlined,
                jit: false,
                kernel: false,
            });
        }
        // A known object with no function for the address.
        if frames.is_empty() {
            frames.push(unknown(name, addr));
        }
        // The last frame of an address is the one the others were
        // inlined into, even where the outermost had no name and was
        // left out: an address's frames never run into the next one's.
        if let Some(last) = frames.last_mut() {
            last.inlined = false;
        }
    }
}

fn unknown(object: &Arc<str>, addr: u64) -> Frame {
    Frame {
        function: Arc::from(format!("{object}+{addr:#x}")),
        object: Arc::clone(object),
        source: None,
        inlined: false,
        jit: false,
        kernel: false,
    }
}

/// The object a function trace's named spans are shown in.
pub const SPAN_OBJECT: &str = "[span]";

/// A function trace's named span at `pc` (the address of its name), if
/// the recording names one there.
fn span_frame(profile: &Profile, asid: u64, pc: u64) -> Option<Frame> {
    if !profile.has_span_names {
        return None;
    }
    let name = profile
        .jit_name(asid, pc)
        .filter(|j| j.source == JitSource::Span && j.start == pc)?;
    Some(Frame {
        function: Arc::clone(&name.name),
        object: Arc::from(SPAN_OBJECT),
        source: None,
        inlined: false,
        jit: false,
        kernel: false,
    })
}

/// The object the kernel's own functions are shown in, as perf names it;
/// a module's are shown in `[module]`.
pub const KERNEL_OBJECT: &str = "[kernel.kallsyms]";

/// A frame in the kernel: by the function the recording names there
/// (from `/proc/kallsyms` as it was), else by its object and address
/// (`[kernel.kallsyms]+0xffffffff81000e05`: the kernel's addresses are
/// its own), as it is with `--addresses`.
fn kernel_frame(profile: &Profile, pc: u64, options: &SymbolOptions) -> Frame {
    let function = profile.kernel_function(pc);
    let object: Arc<str> = match function {
        Some(f) if !f.module.is_empty() => Arc::from(format!("[{}]", f.module)),
        _ => Arc::from(KERNEL_OBJECT),
    };
    let function = match function {
        Some(f) if !options.addresses => Arc::clone(&f.name),
        _ => Arc::from(format!("{object}+{pc:#x}")),
    };
    Frame {
        function,
        object,
        source: None,
        inlined: false,
        jit: false,
        kernel: true,
    }
}

/// The function JIT code that nothing named is shown as (with
/// `--addresses`, its address).
pub const UNNAMED_JIT: &str = "[unnamed JIT code]";

/// A frame in JIT code: by the name the recording captured for it, else
/// as [`UNNAMED_JIT`], all of it one function (each address its own row
/// would scatter its time over as many rows as it has instructions, and
/// hide how much of it there is); by its address with `--addresses`.
fn jit_frame(profile: &Profile, asid: u64, pc: u64, options: &SymbolOptions) -> Frame {
    let function = match profile.jit_name(asid, pc) {
        _ if options.addresses => Arc::from(format!("{pc:#x}")),
        Some(j) => Arc::clone(&j.name),
        None => Arc::from(UNNAMED_JIT),
    };
    Frame {
        function,
        object: Arc::from("[jit]"),
        source: None,
        inlined: false,
        jit: true,
        kernel: false,
    }
}
