//! Function filters (`-F` traces only the calls inside the functions
//! named, `-N` leaves out the functions named and the calls they make),
//! resolved to addresses of the program's executable before it runs.
//!
//! A pattern names a function as the symbol table spells it, as it reads
//! demangled, or (C++) demangled without its parameters, whole or from
//! any of its scopes on (`helper` names `(anonymous namespace)::helper`,
//! as gdb takes it); `*` in a pattern stands for any run of characters. Only the executable's own
//! functions are resolved: the runtime applies the addresses to the
//! program they were resolved for (same device and inode), and a program
//! it execs into is traced whole.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ichnos_symbol::{functions_of, FunctionSymbol, SymbolError};

/// Why the filters could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The executable's symbols could not be read.
    #[error("cannot read the functions of {}", path.display())]
    Symbols {
        /// The executable.
        path: PathBuf,
        /// Why.
        source: SymbolError,
    },
    /// The executable could not be looked at.
    #[error("cannot read {}: {source}", path.display())]
    Stat {
        /// The executable.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The patterns name more functions than the environment can carry.
    #[error("{flag}: the patterns name {count} functions of {}, more than the {MAX_FILTERED} the runtime takes", path.display())]
    TooMany {
        /// `-F` or `-N`.
        flag: &'static str,
        /// How many.
        count: usize,
        /// The executable.
        path: PathBuf,
    },
    /// A pattern names no function of the executable.
    #[error("{flag} {pattern}: {} defines no function of that name", path.display())]
    NoMatch {
        /// `-F` or `-N`.
        flag: &'static str,
        /// The pattern.
        pattern: String,
        /// The executable.
        path: PathBuf,
    },
}

/// Functions one of `-F`, `-N` names at most: their addresses go in an
/// environment variable, which the kernel takes up to 128 KiB long (at
/// most 13 hex digits and a comma each).
pub(crate) const MAX_FILTERED: usize = 8192;

/// The filters as the runtime takes them: environment variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Link-time addresses of the `-F` functions, sorted.
    pub only: Vec<u64>,
    /// Link-time addresses of the `-N` functions, sorted.
    pub not: Vec<u64>,
    /// The executable's device and inode.
    pub program: (u64, u64),
}

impl Resolved {
    /// The variables that hand the filters to the runtime (none without
    /// filters).
    pub(crate) fn env(&self) -> Vec<(OsString, OsString)> {
        if self.only.is_empty() && self.not.is_empty() {
            return Vec::new();
        }
        let list = |a: &[u64]| {
            OsString::from(
                a.iter()
                    .map(|x| format!("{x:x}"))
                    .collect::<Vec<_>>()
                    .join(","),
            )
        };
        vec![
            (OsString::from("ICHNOS_TRACE_ONLY"), list(&self.only)),
            (OsString::from("ICHNOS_TRACE_NOT"), list(&self.not)),
            (
                OsString::from("ICHNOS_TRACE_FILTER_FOR"),
                OsString::from(format!("{}:{}", self.program.0, self.program.1)),
            ),
        ]
    }
}

/// Resolves `only` (`-F`) and `not` (`-N`) against the executable at
/// `path`; every pattern must name at least one function.
pub(crate) fn resolve(
    path: &Path,
    only: &[String],
    not: &[String],
) -> Result<Resolved, FilterError> {
    if only.is_empty() && not.is_empty() {
        return Ok(Resolved::default());
    }
    let meta = std::fs::metadata(path).map_err(|source| FilterError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    let functions = functions_of(path).map_err(|source| FilterError::Symbols {
        path: path.to_path_buf(),
        source,
    })?;
    let addresses = |flag: &'static str, patterns: &[String]| {
        let mut out = Vec::new();
        for pattern in patterns {
            let before = out.len();
            out.extend(
                functions
                    .iter()
                    .filter(|f| names(f, pattern))
                    .map(|f| f.address),
            );
            if out.len() == before {
                return Err(FilterError::NoMatch {
                    flag,
                    pattern: pattern.clone(),
                    path: path.to_path_buf(),
                });
            }
        }
        out.sort_unstable();
        out.dedup();
        if out.len() > MAX_FILTERED {
            return Err(FilterError::TooMany {
                flag,
                count: out.len(),
                path: path.to_path_buf(),
            });
        }
        Ok(out)
    };
    Ok(Resolved {
        only: addresses("-F", only)?,
        not: addresses("-N", not)?,
        program: (meta.dev(), meta.ino()),
    })
}

/// Whether `pattern` names `f`: its symbol, its demangled name, or that
/// name without its parameters, whole or from a scope on (as gdb takes a
/// name: `helper` names `(anonymous namespace)::helper(int)`, `S::area`
/// names `shapes::S::area(int) const`).
fn names(f: &FunctionSymbol, pattern: &str) -> bool {
    names_by(&f.name, f.demangled.as_deref(), pattern)
}

/// [`names`] of a function called `name` in its symbol, `demangled`
/// where that is mangled (a trace's names are demangled already: both).
pub(crate) fn names_by(name: &str, demangled: Option<&str>, pattern: &str) -> bool {
    if glob(pattern, name) {
        return true;
    }
    let Some(demangled) = demangled else {
        return false;
    };
    // The name without its parameters is the start of the name with
    // them: each scope starts in both.
    let bare = without_parameters(demangled);
    if scopes(bare).any(|from| glob(pattern, &bare[from..]) || glob(pattern, &demangled[from..])) {
        return true;
    }
    // A template's instance by its template's name (`twice` names
    // `int twice<int>(int)`, as gdb's `break twice` takes every instance).
    let plain = without_template_arguments(bare);
    plain.len() < bare.len() && scopes(plain).any(|from| glob(pattern, &plain[from..]))
}

/// A name without the template arguments it ends with: `ns::twice` of
/// `ns::twice<std::pair<int, int> >`. Others (`operator>>`, a name with
/// none) are themselves.
fn without_template_arguments(name: &str) -> &str {
    if !name.ends_with('>') {
        return name;
    }
    let mut depth = 0usize;
    for (at, c) in name.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    let head = name[..at].trim_end();
                    // `operator<` itself, not its arguments.
                    return if head.is_empty() || head.ends_with("operator") {
                        name
                    } else {
                        head
                    };
                }
            }
            // An operator's symbols, or a mismatch: not arguments.
            '(' | ')' if depth == 0 => return name,
            _ => {}
        }
    }
    name
}

/// Whether the demangled `name` ends with its parameters (and their
/// qualifiers): `shapes::S::area(int) const`, not `main`.
pub(crate) fn has_parameters(name: &str) -> bool {
    without_parameters(name).len() < name.len()
}

/// A demangled C++ name without its parameters and what follows them
/// (`const`, `&`, a clone's ` [clone .cold]`): `ns::f<int>` of
/// `ns::f<int>(std::function<void (int)>) const`. A name without
/// parameters is itself.
fn without_parameters(demangled: &str) -> &str {
    let mut end = demangled.len();
    // A clone's note, then the qualifiers after the parameters.
    while let Some(at) = demangled[..end].rfind(" [clone ") {
        if !demangled[..end].ends_with(']') {
            break;
        }
        end = at;
    }
    let mut name = demangled[..end].trim_end();
    for qualifier in [" &&", " &", " volatile", " const"] {
        name = name.strip_suffix(qualifier).unwrap_or(name);
    }
    if !name.ends_with(')') {
        return demangled;
    }
    // Before the `(` that opens the last parameter list.
    ichnos_symbol::split_parameters(name).map_or(demangled, |(function, _)| function)
}

/// Where each way of naming `name` starts: at its start, and after each
/// `::` or space (a template's return type) outside template arguments
/// and parentheses. An operator's name (`operator<<`, `operator()`,
/// `operator new[]`, `operator std::string`) is one word: its symbols do
/// not open or close anything, and its spaces start nothing.
fn scopes(name: &str) -> impl Iterator<Item = usize> + '_ {
    const OPERATOR: &[u8] = b"operator";
    let bytes = name.as_bytes();
    let mut depth = 0i32;
    let mut starts = vec![0];
    let mut i = 0;
    while i < bytes.len() {
        let word_start = i == 0 || matches!(bytes[i - 1], b':' | b' ');
        if depth == 0 && word_start && bytes[i..].starts_with(OPERATOR) {
            i += OPERATOR.len();
            if bytes[i..].starts_with(b"()") || bytes[i..].starts_with(b"[]") {
                i += 2;
            } else if bytes.get(i) == Some(&b' ') {
                // A conversion, `new` or `delete`: up to the parameters.
                while i < bytes.len() && bytes[i] != b'(' {
                    i += 1;
                }
            } else {
                while i < bytes.len() && b"<>=!+-*/%^&|~,".contains(&bytes[i]) {
                    i += 1;
                }
            }
            continue;
        }
        match bytes[i] {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                starts.push(i + 2);
                i += 1;
            }
            // After a template's return type (`void run<int>`).
            b' ' if depth == 0 => starts.push(i + 1),
            _ => {}
        }
        i += 1;
    }
    starts.into_iter()
}

/// `pattern` matches all of `text`, `*` standing for any run of
/// characters (the classic two-pointer walk: linear with one `*` to go
/// back to, quadratic at worst, on names of a few hundred bytes).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, demangled: Option<&str>) -> FunctionSymbol {
        FunctionSymbol {
            address: 0,
            size: 1,
            name: name.to_owned(),
            demangled: demangled.map(str::to_owned),
        }
    }

    #[test]
    fn a_glob_matches_whole_names_only() {
        assert!(glob("leaf", "leaf"));
        assert!(!glob("leaf", "leafy"));
        assert!(!glob("leaf", "a_leaf"));
        assert!(glob("*leaf", "a_leaf"));
        assert!(glob("le*", "leaf"));
        assert!(glob("l*a*f", "lxxaxxf"));
        assert!(!glob("l*a*f", "lxxaxxg"));
        assert!(glob("*", ""));
        assert!(!glob("a", ""));
        assert!(glob("a**b", "ab"));
    }

    #[test]
    fn a_cxx_function_is_named_with_or_without_its_parameters() {
        let g = f("_ZN2ns7throwerEi", Some("ns::thrower(int)"));
        assert!(names(&g, "ns::thrower"));
        assert!(names(&g, "ns::thrower(int)"));
        assert!(names(&g, "_ZN2ns7throwerEi"));
        assert!(names(&g, "ns::*"));
        assert!(names(&g, "*thrower"));
        // From a scope on, as gdb takes names; not a part of one.
        assert!(names(&g, "thrower"));
        assert!(!names(&g, "hrower"));
        assert!(!names(&g, "s::thrower"));
    }

    /// A template's instances by the template's name, as gdb's `break`
    /// takes them; operators whose symbols are angle brackets are not
    /// taken apart.
    #[test]
    fn template_instances_are_named_by_their_template() {
        let twice = f("_Z5twiceIiET_S0_", Some("int twice<int>(int)"));
        assert!(names(&twice, "twice"));
        assert!(names(&twice, "twice<int>"));
        assert!(!names(&twice, "twic"));
        let nested = f("_Z1x", Some("void ns::keep<std::pair<int, int> >(int)"));
        assert!(names(&nested, "ns::keep"));
        assert!(names(&nested, "keep"));
        assert!(!names(&nested, "pair"));
        assert_eq!(without_template_arguments("S::operator>>"), "S::operator>>");
        assert_eq!(without_template_arguments("S::operator>"), "S::operator>");
        assert_eq!(
            without_template_arguments("S::operator<=>"),
            "S::operator<=>"
        );
        assert_eq!(without_template_arguments("operator< <int>"), "operator<");
        assert_eq!(without_template_arguments("main"), "main");
        assert!(has_parameters("shapes::S::area(int) const"));
        assert!(has_parameters("int twice<int>(int)"));
        assert!(has_parameters("f() &&"));
        assert!(!has_parameters("main"));
    }

    /// Names that open with a parenthesis (an anonymous namespace),
    /// methods with qualifiers, templates with parentheses inside, clones.
    #[test]
    fn names_are_taken_apart_at_their_own_parameters_and_scopes() {
        let anon = f(
            "_ZN12_GLOBAL__N_16helperEi",
            Some("(anonymous namespace)::helper(int)"),
        );
        assert!(names(&anon, "helper"));
        assert!(names(&anon, "(anonymous namespace)::helper"));
        assert!(names(&anon, "helper(int)"));
        let method = f("_ZNK6shapes1S4areaEi", Some("shapes::S::area(int) const"));
        assert!(names(&method, "S::area"));
        assert!(names(&method, "area"));
        assert!(!names(&method, "shapes::area"));
        let template = f(
            "_Z3runIiEvSt8functionIFviEE",
            Some("void run<int>(std::function<void (int)>)"),
        );
        assert_eq!(
            without_parameters("void run<int>(std::function<void (int)>)"),
            "void run<int>"
        );
        assert!(names(&template, "void run<int>"));
        assert!(names(&template, "run<int>"));
        assert!(names(&template, "run*"));
        let inner = f("_Z1gv", Some("ns::Outer<a::B>::g() [clone .cold]"));
        assert!(names(&inner, "g"));
        assert!(names(&inner, "Outer<a::B>::g"));
        assert!(!names(&inner, "B>::g"));
        // Operators are one word each, their symbols not brackets.
        let shift = f(
            "_ZNK2ns1SlsEi",
            Some("ns::S::operator<<(int) const::{lambda(int)#1}::operator()(int) const"),
        );
        assert!(names(&shift, "operator()"));
        assert!(names(&shift, "{lambda(int)#1}::operator()"));
        assert!(!names(&shift, "int"));
        let conversion = f("_ZNK2ns1ScviEv", Some("ns::S::operator int() const"));
        assert!(names(&conversion, "operator int"));
        assert!(names(&conversion, "S::operator int"));
        assert!(!names(&conversion, "int"));
        let new = f("_Znwm", Some("operator new(unsigned long)"));
        assert!(names(&new, "operator new"));
        assert!(!names(&new, "new"));
        assert_eq!(without_parameters("plain"), "plain");
        assert_eq!(without_parameters("f() &&"), "f");
    }
}
