//! Frames: what an address is, in functions and source lines, and how
//! the frames of an address are read from a loaded object. The
//! symbolizer and the symbol index writer both make their answers here,
//! so that an index answers exactly as the DWARF does.

use std::sync::Arc;

use crate::debug_file::DebugSource;
use crate::object_file::LoadedObject;
use addr2line::LookupContinuation;

/// One frame of an address: a function, and where in the source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled if asked for; `None` if unknown.
    pub function: Option<Arc<str>>,
    /// The function's name as stored.
    pub raw_function: Option<Arc<str>>,
    /// The source file.
    pub file: Option<Arc<str>>,
    /// The line, 0 or `None` when unknown.
    pub line: Option<u32>,
    /// The column.
    pub column: Option<u32>,
    /// Whether this frame was inlined into the next one.
    pub inlined: bool,
    /// For the outermost frame, where its function starts (the address of
    /// the ELF symbol that holds the code, in the object's own terms): the
    /// address asked for is that many bytes into it, as `function+0x12`.
    /// `None` for inlined frames and where no symbol holds the address.
    pub function_start: Option<u64>,
}

/// The frames of one address, innermost (inlined) first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbolized {
    /// The address asked for.
    pub addr: u64,
    /// Its frames; one frame with nothing known for an unknown address.
    pub frames: Vec<Frame>,
    /// Where the answer came from.
    pub source: DebugSource,
    /// For an address nothing is known of (one empty frame), why.
    pub unnamed: Option<Unnamed>,
}

/// Why nothing is known of an address (as blazesym's `Reason` says why
/// it could not symbolize one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unnamed {
    /// No executable mapping of the process holds it: it is in no
    /// mapping, or in memory that holds no code (stack, heap, data).
    Unmapped,
    /// Memory no file backs (or a mapped file that cannot be read) and no
    /// JIT source (jitdump, perf map, code registry) names.
    Anonymous,
    /// Outside every loadable section of its object.
    OutsideSections,
    /// Between functions: in a section, past the end of the function
    /// before it (alignment padding).
    Padding,
    /// In a section, with no symbol and no debug information for it.
    NoSymbol,
}

impl std::fmt::Display for Unnamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unmapped => "in no executable mapping",
            Self::Anonymous => "anonymous memory nothing names",
            Self::OutsideSections => "outside every section",
            Self::Padding => "padding between functions",
            Self::NoSymbol => "no symbol",
        })
    }
}

/// Why nothing is known of `addr` in `object` (an address whose answer is
/// one empty frame).
pub(crate) fn unnamed(object: &LoadedObject, addr: u64) -> Unnamed {
    if addr == u64::MAX || !object.in_alloc_section(addr) {
        Unnamed::OutsideSections
    } else if object.symbol_before(addr).is_some() {
        Unnamed::Padding
    } else {
        Unnamed::NoSymbol
    }
}

/// The frames of `addr` in `object`, innermost first, as
/// [`Symbolizer::symbolize_file`] answers them: names demangled when
/// `demangle` says, inlined functions as frames of their own when
/// `inlines` says.
pub(crate) fn frames(
    object: &LoadedObject,
    addr: u64,
    demangle: bool,
    inlines: bool,
) -> Vec<Frame> {
    let name = |bytes: &[u8]| object.name(bytes, demangle);
    let mut frames = Vec::new();
    // DWARF describes only addresses in the file's sections: entries of
    // code the linker discarded lie at 0 and would name addresses there
    // (binutils answers `??` outside every section). No DWARF range
    // (half-open) holds the last address, and addr2line's unit search
    // computes `addr + 1` (an overflow panic in debug builds).
    let described = addr != u64::MAX && object.in_alloc_section(addr);
    if let Some(ctx) = object.dwarf.as_ref().filter(|_| described) {
        // Split DWARF: load each .dwo the lookup asks for and resume.
        let mut lookup = ctx.find_frames(addr);
        let found = loop {
            match lookup {
                addr2line::LookupResult::Output(found) => break found,
                addr2line::LookupResult::Load { load, continuation } => {
                    lookup = continuation.resume(object.dwo(&load));
                }
            }
        };
        if let Ok(mut iter) = found {
            while let Ok(Some(f)) = iter.next() {
                let (function, raw_function) = f
                    .function
                    .as_ref()
                    .map(|n| name(without_internal_alias(n.name.bytes())))
                    .unzip();
                frames.push(Frame {
                    function,
                    raw_function,
                    file: f
                        .location
                        .as_ref()
                        .and_then(|l| l.file.map(|file| object.name(file.as_bytes(), false).1)),
                    line: f.location.as_ref().and_then(|l| l.line),
                    column: f.location.as_ref().and_then(|l| l.column),
                    inlined: true,
                    function_start: None,
                });
            }
        }
    }
    // The symbol that holds the code, if one does.
    let holding = object.symbol(addr);
    // The outermost frame is the function itself, not inlined.
    if let Some(last) = frames.last_mut() {
        last.inlined = false;
        // gcc gives a C++ function of internal linkage (in an anonymous
        // namespace, or static) only its short name in DWARF (`helper`):
        // as binutils does, the symbol that holds the code names it
        // (`(anonymous namespace)::helper(int)`), if it is that function's.
        if let Some(s) = holding.filter(|s| {
            last.raw_function
                .as_deref()
                .is_some_and(|short| names_short(&s.name, short))
        }) {
            let (function, raw) = name(s.name.as_bytes());
            last.function = Some(function);
            last.raw_function = Some(raw);
        }
    }
    if !inlines && frames.len() > 1 {
        let location = frames[0].clone();
        let mut outer = frames.pop().unwrap_or_default();
        outer.file = location.file;
        outer.line = location.line;
        outer.column = location.column;
        frames = vec![outer];
    }
    // Where DWARF names no function, the symbol tables may.
    // An address the line table places in a function but DWARF gives no
    // function for (alignment padding after it) is named after the
    // symbol before it, as binutils does; with no line either, only a
    // symbol that covers the address names it.
    let symbol = if frames.first().is_some_and(|f| f.line.is_some()) {
        object.symbol_before(addr)
    } else {
        holding
    };
    if frames.is_empty() {
        frames.push(Frame::default());
    }
    if frames.len() == 1 && frames[0].function.is_none() {
        if let Some(s) = symbol {
            let (function, raw) = name(s.name.as_bytes());
            frames[0].function = Some(function);
            frames[0].raw_function = Some(raw);
            if frames[0].file.is_none() {
                frames[0].file = s
                    .file
                    .as_deref()
                    .map(|f| object.name(f.as_bytes(), false).1);
            }
        }
    }
    // Where the outermost function starts, for a named frame: the symbol
    // that holds the code (whatever its name: a clone such as
    // `foo.constprop.0`, or an alias the table kept), else, for padding
    // named after the symbol before it, that symbol.
    if let Some(last) = frames.last_mut().filter(|f| f.raw_function.is_some()) {
        let holder = holding.or_else(|| {
            symbol.filter(|s| last.raw_function.as_deref() == Some(&*name(s.name.as_bytes()).1))
        });
        last.function_start = holder.map(|s| s.addr);
    }
    frames
}

/// A function's DWARF name without glibc's prefix for its names inside
/// the library (`__GI_setlocale`, an assembler label that DWARF gives as
/// the linkage name): its own name, `setlocale`, which DWARF's
/// `DW_AT_name` holds and gdb's backtrace and perf show.
fn without_internal_alias(name: &[u8]) -> &[u8] {
    match name.strip_prefix(b"__GI_") {
        Some(own) if !own.is_empty() => own,
        _ => name,
    }
}

/// Whether `symbol`, a mangled name, is the function whose DWARF name is
/// the unmangled `short`: demangled, it names `short` with its
/// parameters, alone or after a scope (`ns::short(int)`).
fn names_short(symbol: &str, short: &str) -> bool {
    let mangled = |n: &str| n.starts_with("_Z") || n.starts_with("_R");
    if short.is_empty() || mangled(short) || !mangled(symbol) {
        return false;
    }
    let Some(demangled) = crate::demangle::demangle(symbol) else {
        return false;
    };
    let named = |short: &str, demangled: &str| {
        let call = format!("{short}(");
        demangled
            .match_indices(&call)
            .any(|(at, _)| at == 0 || demangled[..at].ends_with("::"))
    };
    // gcc spells a template's arguments in DWARF as C does
    // (`twice<long int>`), the demangler as C++ does (`twice<long>`):
    // compared without them.
    named(short, &demangled)
        || (short.contains('<')
            && named(
                &without_template_arguments(short),
                &without_template_arguments(&demangled),
            ))
}

/// `name` without what its balanced `<...>` hold (`twice<>` of
/// `twice<long int>`); unbalanced (`operator<`), as it is.
fn without_template_arguments(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' => {
                if depth == 0 {
                    out.push('<');
                }
                depth += 1;
            }
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push('>');
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    if depth == 0 {
        out
    } else {
        name.to_owned()
    }
}
