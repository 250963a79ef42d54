//! Rust and C++ name demangling, as `addr2line -C` does it.
//!
//! C++ names are demangled twice. `cpp_demangle` first, within a bound on
//! what it prints: a name whose demangled form outgrows the bound stays
//! as stored. Then, for a name it took, libiberty's demangler (through
//! libstdc++, [`libiberty`]) gives the name as c++filt, addr2line, gdb
//! and perf print it; `cpp_demangle` spells many names its own way (empty
//! template packs, literals, `std::` abbreviations) and misplaces some
//! pointers and references. `cpp_demangle`'s name, with its templated
//! constructors mended, is shown where libiberty is not asked or gives
//! no answer: no libstdc++, a name libiberty could expand past any bound
//! (see [`libiberty_bounded`]), one longer than it takes (1 KiB).

mod libiberty;

pub(crate) use libiberty::identity as cpp_demangler;

/// The demangled form of `name` if it is a mangled Rust (legacy or v0) or
/// C++ (Itanium) name; `None` for names that are not mangled.
#[must_use]
pub fn demangle(name: &str) -> Option<String> {
    // A PLT stub's name (object_file/plt.rs): the function's, demangled.
    // One suffix only: a name of many is no stub's.
    match name.strip_suffix("@plt") {
        Some(function) => demangle_symbol(function).map(|d| d + "@plt"),
        None => demangle_symbol(name),
    }
}

/// [`demangle`] for a name without a PLT stub's suffix.
fn demangle_symbol(name: &str) -> Option<String> {
    if is_rust(name) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            // Without the hash, as binutils prints Rust names.
            return Some(format!("{d:#}"));
        }
    }
    if name.starts_with("_Z") {
        let demangled = demangle_cpp(name)?;
        if libiberty_bounded(name, demangled.len()) {
            if let Some(libiberty) = libiberty::demangle(name).filter(|d| d.len() <= MAX_DEMANGLED)
            {
                return Some(libiberty);
            }
        }
        return Some(mended(name, demangled));
    }
    None
}

/// Whether libiberty's form of `name`, which `cpp_demangle` printed in
/// `printed` bytes, is known to be small enough to ask for: libiberty
/// cannot be stopped once it prints, and holds all it prints in memory.
///
/// The two print alike, back-references expanded, except for a pack
/// expansion (`Dp` in a type, `sp` in an expression; and the fold
/// expressions `fl`, `fr`, `fL`, `fR` over one): `cpp_demangle` prints its
/// pattern once, the pack written inline, libiberty once per element of
/// the pack. One expansion multiplies its pattern by the pack's length,
/// which is less than the name's; an expansion inside another's pattern
/// multiplies again, and a name of 150 bytes so nested would need a
/// terabyte. So: no expansion, or one, whose bound (what `cpp_demangle`
/// printed, times the name's length) is within [`LIBIBERTY_BUDGET`]. The
/// tokens are counted wherever they appear, in identifiers too (`display`
/// holds `sp`): counting too many only leaves a name with `cpp_demangle`'s
/// spelling. Of 215,798 C++ names of a Debian machine's libraries and
/// programs, 1,458 hold two or more, and 115 of those `cpp_demangle`
/// spells otherwise.
fn libiberty_bounded(name: &str, printed: usize) -> bool {
    let expansions: usize = ["Dp", "sp", "fl", "fr", "fL", "fR"]
        .iter()
        .map(|token| name.matches(token).count())
        .sum();
    match expansions {
        0 => true,
        1 => printed.saturating_mul(name.len() + 1) <= LIBIBERTY_BUDGET,
        _ => false,
    }
}

/// The most libiberty may be asked to print for one name (a bound, not
/// what real names come near: those are at most a few KiB).
const LIBIBERTY_BUDGET: usize = 4 << 20;

/// Whether `name` is a Rust symbol: v0 (`_R`), or legacy (`_ZN...E`,
/// C++'s form of a nested name) whose last component is the hash rustc
/// adds, `17h` and 16 lower-case hex digits, at least 5 of them distinct,
/// before any `.` suffix (`.llvm.123`): binutils' test. A legacy-form
/// name without the hash is C++'s (`_ZN12_GLOBAL__N_11xE`, a variable in
/// an anonymous namespace).
fn is_rust(name: &str) -> bool {
    if name.starts_with("_R") {
        return true;
    }
    let bytes = name.as_bytes();
    let is_hash = |hash: &[u8]| {
        let mut seen = 0u16;
        for &b in hash {
            let nibble = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                _ => return false,
            };
            seen |= 1 << nibble;
        }
        seen.count_ones() >= 5
    };
    // The path itself may hold `.`s (`..` for `::` inside generic
    // arguments): the hash is the `17h` whose `E` ends the name or comes
    // before a suffix.
    name.starts_with("_ZN")
        && (0..bytes.len()).any(|at| {
            let Some(component) = bytes.get(at..at + 20) else {
                return false;
            };
            component.starts_with(b"17h")
                && component[19] == b'E'
                && matches!(bytes.get(at + 20), None | Some(b'.'))
                && is_hash(&component[3..19])
        })
}

/// `cpp_demangle`'s `demangled` form of `name`, its templated
/// constructors mended: what is shown where libiberty gives no answer.
fn mended(name: &str, demangled: String) -> String {
    templated_constructor(name, &demangled).unwrap_or(demangled)
}

/// `cpp_demangle`'s form of the C++ name `name`.
fn demangle_cpp(name: &str) -> Option<String> {
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    // Back-references let a short name expand exponentially; a name
    // whose demangled form outgrows the bound is shown as stored.
    let mut out = Bounded(String::new());
    symbol
        .structured_demangle(&mut out, &cpp_demangle::DemangleOptions::default())
        .ok()?;
    Some(out.0)
}

/// The right form of a templated constructor or destructor, where
/// `cpp_demangle` (0.5, its issue 129) drops the first parameter:
/// `_ZN1SC1IcEEiT_l` is `S::S<char>(int, char, long)`, which it gives as
/// `S::S<char>(char, long)`. A template function's first type is its
/// return type, but constructors and destructors have none (the Itanium
/// ABI, "Function types"), and `cpp_demangle` takes it as one all the same.
///
/// Mended by handing `cpp_demangle` the name with a `void` return type
/// (`v`, which takes no substitution) put where the function's types
/// start: after the `E` that ends its nested name. That is the `E` after
/// which the `v` leaves the function's name as it was (one inside the
/// name changes it, or leaves no name at all) and adds one parameter in
/// front of the others (one among the parameters adds a `void` after
/// the first). Tried at the first [`MENDING_TRIES`] `E`s of names of at
/// most [`MENDED_LENGTH`] bytes, each try a whole demangling. `None`
/// where `demangled` is no templated constructor or destructor, or no
/// try mends it.
fn templated_constructor(name: &str, demangled: &str) -> Option<String> {
    if name.len() > MENDED_LENGTH {
        return None;
    }
    let (function, parameters) = split_parameters(demangled)?;
    if !is_templated_constructor(function) {
        return None;
    }
    // `(char, long) const` mended is `(int, char, long) const`; `() const`
    // is `(int) const`: the first parameter, then what followed `(`.
    let rest = parameters.strip_prefix('(')?;
    (4..name.len())
        .filter(|&end| name.as_bytes()[end - 1] == b'E')
        .take(MENDING_TRIES)
        .find_map(|end| {
            let mended = demangle_cpp(&format!("{}v{}", &name[..end], &name[end..]))?;
            let (mended_function, mended_parameters) = split_parameters(&mended)?;
            let first = mended_parameters.strip_prefix('(')?.strip_suffix(rest)?;
            let one_more = if rest.starts_with(')') {
                !first.is_empty()
            } else {
                first.len() > 2 && first.ends_with(", ")
            };
            (mended_function == function && one_more).then_some(mended)
        })
}

/// The longest name [`templated_constructor`] mends.
const MENDED_LENGTH: usize = 16 << 10;

/// The `E`s [`templated_constructor`] tries, at most.
const MENDING_TRIES: usize = 64;

/// A demangled function's name and its parameter list with what follows
/// it (`S::S<char>`, `(char, long) const`): split at the `(` that matches
/// the last top-level `)`.
#[must_use]
pub fn split_parameters(demangled: &str) -> Option<(&str, &str)> {
    let close = demangled.rfind(')')?;
    let mut depth = 0usize;
    for (at, c) in demangled[..=close].char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&demangled[..at], &demangled[at..]));
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `function` (a demangled name without its parameters) is a
/// constructor or destructor with template arguments of its own:
/// `A<int>::B::B<char>`, `S::~S<T>`. Its last component, less its
/// template arguments, is the one before it less theirs (or that with a
/// `~`), and it has template arguments.
fn is_templated_constructor(function: &str) -> bool {
    let components = top_level_components(function);
    let [.., class, last] = components.as_slice() else {
        return false;
    };
    let Some(open) = template_start(last) else {
        return false;
    };
    let member = &last[..open];
    let class = template_start(class).map_or(*class, |at| &class[..at]);
    !class.is_empty() && (member == class || member.strip_prefix('~') == Some(class))
}

/// `a<b::c>::d` as `a<b::c>`, `d`: split at the `::` outside template
/// arguments and parentheses.
fn top_level_components(name: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let bytes = name.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b':' if depth == 0 && bytes.get(at + 1) == Some(&b':') => {
                parts.push(&name[start..at]);
                start = at + 2;
                at += 1;
            }
            _ => {}
        }
        at += 1;
    }
    parts.push(&name[start..]);
    parts
}

/// Where the template arguments that end `name` (`b<c<d>>`) begin: the
/// `<` matching its last `>`.
fn template_start(name: &str) -> Option<usize> {
    if !name.ends_with('>') {
        return None;
    }
    let mut depth = 0usize;
    for (at, c) in name.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// Longest demangled C++ name kept (real ones, even of heavy templates,
/// are a few KiB). rustc-demangle bounds Rust names itself.
const MAX_DEMANGLED: usize = 64 << 10;

/// A string that refuses to grow beyond [`MAX_DEMANGLED`].
struct Bounded(String);

impl std::fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.0.len() + s.len() > MAX_DEMANGLED {
            return Err(std::fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn rust_and_cpp_names() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE").as_deref(),
            Some("core::fmt::write")
        );
        assert_eq!(demangle("_Z3fooi").as_deref(), Some("foo(int)"));
        assert_eq!(demangle("main"), None);
    }

    /// A legacy Rust name is told from a C++ one of the same form by its
    /// hash, found before a suffix and past the `..` of its path; without
    /// one the name is C++'s, as binutils reads it.
    #[test]
    fn rust_names_by_their_hash() {
        assert_eq!(
            demangle("_ZN4core3ptr42drop_in_place$LT$alloc..string..String$GT$17h0123456789abcdefE.llvm.42")
                .as_deref(),
            Some("core::ptr::drop_in_place<alloc::string::String>")
        );
        assert_eq!(
            demangle("_RNvCs1234_7mycrate3foo").as_deref(),
            Some("mycrate::foo")
        );
        assert_eq!(
            demangle("_ZN12_GLOBAL__N_16hiddenE").as_deref(),
            Some("(anonymous namespace)::hidden")
        );
        // Not a hash: 15 digits, or a `g`.
        assert_eq!(
            demangle("_ZN3foo16h0123456789abcdeE").as_deref(),
            Some("foo::h0123456789abcde")
        );
        assert_eq!(
            demangle("_ZN3foo17h0123456789abcdegE").as_deref(),
            Some("foo::h0123456789abcdeg")
        );
        // Upper-case digits, or fewer than 5 distinct: binutils takes
        // neither for rustc's hash.
        assert_eq!(
            demangle("_ZN3foo17h0123456789ABCDEFE").as_deref(),
            Some("foo::h0123456789ABCDEF")
        );
        assert_eq!(
            demangle("_ZN3foo17h0000111122223333E").as_deref(),
            Some("foo::h0000111122223333")
        );
        assert_eq!(
            demangle("_ZN3foo17h0000111122223334E").as_deref(),
            Some("foo")
        );
    }

    /// `f<int x 8>(void (*)(int)..., void (*)(int, void (*)(int))..., ...)`:
    /// each of `levels` pack expansions refers to the one before it.
    /// libiberty prints each pattern once per element of the pack, so
    /// what it prints grows 8 times a level (329 MB at 8 levels, about a
    /// terabyte at 12); `cpp_demangle` prints each pattern once.
    fn nested_expansions(levels: u32) -> String {
        let mut name = String::from("_Z1fIJiiiiiiiiEEvDpPFvT_E");
        for level in 1..levels {
            name.push_str("DpPFvT_");
            name.push_str(&substitution(3 + 4 * (i64::from(level) - 1)));
            name.push('E');
        }
        name
    }

    /// A name whose pack expansions nest is not handed to libiberty,
    /// which would print past any bound (and for hours): its answer is
    /// `cpp_demangle`'s. One expansion is, and reads as c++filt's.
    #[test]
    fn nested_pack_expansions_stay_with_cpp_demangle() {
        let name = nested_expansions(12);
        assert_eq!(name.len(), 148, "{name}");
        let started = std::time::Instant::now();
        let ours = demangle(&name).expect("cpp_demangle takes it");
        assert!(ours.starts_with("void f<int, int, int"), "{ours}");
        assert!(ours.len() < 8 << 10, "{}", ours.len());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let one = nested_expansions(1);
        assert_eq!(
            demangle(&one).as_deref(),
            cxxfilt(std::slice::from_ref(&one))
                .first()
                .map(String::as_str)
        );
        assert_eq!(
            demangle(&one).as_deref(),
            Some(
                "void f<int, int, int, int, int, int, int, int>(void (*)(int), void (*)(int), \
                 void (*)(int), void (*)(int), void (*)(int), void (*)(int), void (*)(int), \
                 void (*)(int))"
            )
        );
    }

    /// A PLT stub's suffix is taken once: a name made of many is no
    /// stub's, and costs no recursion per suffix.
    #[test]
    fn many_plt_suffixes() {
        let name = format!("_Z3fooi{}", "@plt".repeat(100_000));
        assert_eq!(demangle(&name), None);
        assert_eq!(demangle("_Z3fooi@plt").as_deref(), Some("foo(int)@plt"));
    }

    /// `names` as `c++filt -i` prints them: libiberty's demangler with
    /// the options addr2line and perf use (no verbose expansions). A name
    /// it does not take comes back as it is.
    fn cxxfilt(names: &[String]) -> Vec<String> {
        use std::io::Write;
        let mut child = std::process::Command::new("c++filt")
            .arg("-i")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("c++filt runs");
        let mut stdin = child.stdin.take().unwrap();
        let input = names.join("\n") + "\n";
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The C++ names `nm` lists in `file` (`-D`: its dynamic symbols),
    /// without symbol versions.
    fn cpp_names(file: &std::path::Path, dynamic: bool) -> Vec<String> {
        let mut nm = std::process::Command::new("nm");
        if dynamic {
            nm.args(["-D", "--defined-only"]);
        }
        let out = nm.arg(file).output().expect("nm runs");
        assert!(out.status.success(), "nm {}", file.display());
        let mut names: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .map(|n| n.split('@').next().unwrap_or(n).to_owned())
            .filter(|n| n.starts_with("_Z"))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Every C++ name libstdc++ exports, and those of a program built
    /// with what `cpp_demangle` spells its own way or gets wrong (empty
    /// template packs, literal template arguments, `std::` abbreviations
    /// and `std::nullptr_t`, a pointer to a nested type, an anonymous
    /// namespace, a lambda), demangles exactly as `c++filt -i` prints it.
    /// (On this machine `cpp_demangle` alone spelled 404 of libstdc++'s
    /// and gdb's 5,872 names otherwise.) binutils carries its own copy of
    /// libiberty, libstdc++ GCC's: where the two copies differ in age they
    /// may spell a rare name apart (6 of 215,798 names here, all in
    /// `decltype` expressions, none of libstdc++'s own).
    #[test]
    fn cpp_names_as_cxxfilt_prints_them() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("constructs.cc");
        std::fs::write(
            &source,
            r"
#include <cstddef>
#include <iostream>
#include <string>
template <typename... T> struct Pack {};
template <typename... T> void packed(Pack<T...>) {}
template void packed(Pack<>);
template void packed(Pack<int, long>);
template <unsigned N> struct Literal {};
void literal(Literal<1>) {}
struct Outer { struct Inner {}; };
template <typename T> void nested(T *, typename T::Inner *, typename T::Inner &) {}
template void nested(Outer *, Outer::Inner *, Outer::Inner &);
void null(std::nullptr_t) {}
void streams(std::string, std::istream &, std::ostream &, std::iostream &) {}
namespace { int hidden; }
int *where() { return &hidden; }
template <typename F> void call(F f) { f(); }
int main() { call([] {}); return 0; }
",
        )
        .unwrap();
        let object = dir.path().join("constructs.o");
        let built = std::process::Command::new("g++")
            .args(["-O0", "-c", "-o"])
            .arg(&object)
            .arg(&source)
            .status()
            .expect("g++ runs");
        assert!(built.success());
        let libstdcxx = std::process::Command::new("g++")
            .arg("-print-file-name=libstdc++.so")
            .output()
            .expect("g++ runs");
        let libstdcxx =
            std::path::PathBuf::from(String::from_utf8(libstdcxx.stdout).unwrap().trim());
        let mut names = cpp_names(&object, false);
        assert!(names.len() >= 10, "{names:#?}");
        let exported = cpp_names(&libstdcxx, true);
        assert!(
            exported.len() > 3000,
            "{}: {}",
            libstdcxx.display(),
            exported.len()
        );
        names.extend(exported);
        let theirs = cxxfilt(&names);
        assert_eq!(theirs.len(), names.len());
        let differing: Vec<String> = names
            .iter()
            .zip(&theirs)
            .filter_map(|(name, theirs)| {
                let ours = demangle(name).unwrap_or_else(|| name.clone());
                (ours != *theirs).then(|| format!("{name}: {ours} against {theirs}"))
            })
            .collect();
        assert!(
            differing.is_empty(),
            "{} names: {differing:#?}",
            differing.len()
        );
    }

    /// The Itanium ABI's back-reference to the substitution after the
    /// first `i + 1` (`S_` for -1, the first; then `S<i in base 36>_`).
    pub(super) fn substitution(i: i64) -> String {
        if i < 0 {
            return "S_".into();
        }
        let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let (mut i, mut id) = (i.unsigned_abs(), Vec::new());
        loop {
            id.insert(0, digits[(i % 36) as usize]);
            i /= 36;
            if i == 0 {
                break;
            }
        }
        format!("S{}_", String::from_utf8(id).unwrap())
    }

    /// How many parameters a list `(a, b<c, d>) const` holds.
    fn parameters(list: &str) -> usize {
        let inner = &list[1..list.rfind(')').unwrap_or(1)];
        if inner.trim().is_empty() {
            return 0;
        }
        let mut depth = 0i32;
        1 + inner
            .chars()
            .filter(|&c| {
                match c {
                    '<' | '(' => depth += 1,
                    '>' | ')' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .count()
    }

    /// `cpp_demangle`'s form of `name`, mended: what is shown without
    /// libstdc++.
    fn without_libiberty(name: &str) -> Option<String> {
        super::demangle_cpp(name).map(|d| super::mended(name, d))
    }

    /// Templated constructors keep their first parameter (`cpp_demangle`
    /// drops it, taking it for a return type, and the mending puts it
    /// back where libstdc++ is missing): every one a C++ program's
    /// object names (its own, and libstdc++'s it instantiates) demangles
    /// as c++filt demangles it.
    #[test]
    fn templated_constructors_as_cxxfilt_gives_them() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("ctors.cc");
        std::fs::write(
            &source,
            r#"
#include <algorithm>
#include <map>
#include <string>
#include <vector>
struct S { int a; template <typename T> S(int x, T y, long z); };
template <typename T> S::S(int x, T y, long z) : a(x + y + z) {}
template S::S(int, char, long);
template <typename K> struct Box {
    struct Inner { template <typename U> Inner(K k, U u, const Box &b); };
};
template <typename K> template <typename U> Box<K>::Inner::Inner(K, U, const Box &) {}
template Box<int>::Inner::Inner(int, double, const Box<int> &);
int main() {
    std::map<std::string, long> m;
    m["a"] = 1;
    std::vector<std::string> v(3, "x");
    std::sort(v.begin(), v.end());
    std::string s(5, 'c');
    return int(m.size() + s.size());
}
"#,
        )
        .unwrap();
        let object = dir.path().join("ctors.o");
        let built = std::process::Command::new("g++")
            .args(["-O0", "-c", "-o"])
            .arg(&object)
            .arg(&source)
            .status()
            .expect("g++ runs");
        assert!(built.success());
        let nm = std::process::Command::new("nm")
            .arg(&object)
            .output()
            .unwrap();
        let names: Vec<String> = String::from_utf8(nm.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter(|n| n.starts_with("_Z"))
            .map(str::to_owned)
            .collect();
        let cxxfilt = std::process::Command::new("c++filt")
            .args(&names)
            .output()
            .unwrap();
        let theirs: Vec<String> = String::from_utf8(cxxfilt.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(theirs.len(), names.len());
        let mut checked = 0;
        for (name, theirs) in names.iter().zip(&theirs) {
            let constructor = super::split_parameters(theirs)
                .is_some_and(|(function, _)| super::is_templated_constructor(function));
            // Not `C5`, the name gcc gives a constructor's COMDAT group
            // (not a function's), which cpp_demangle does not read.
            if constructor && !name.contains("C5") {
                // As many parameters: how the two spell template
                // arguments inside them differs apart (`(unsigned long)0`
                // and `0ul`, packs).
                let mended = without_libiberty(name).unwrap_or_default();
                assert_eq!(
                    super::split_parameters(&mended).map(|(_, p)| parameters(p)),
                    super::split_parameters(theirs).map(|(_, p)| parameters(p)),
                    "{name}: {mended} against {theirs}"
                );
                checked += 1;
            }
        }
        // Ours, whole.
        for (mangled, whole) in [
            ("_ZN1SC1IcEEiT_l", "S::S<char>(int, char, long)"),
            (
                "_ZN3BoxIiE5InnerC2IdEEiT_RKS0_",
                "Box<int>::Inner::Inner<double>(int, double, Box<int> const&)",
            ),
        ] {
            assert!(names.iter().any(|n| n == mangled), "{names:#?}");
            assert_eq!(demangle(mangled).as_deref(), Some(whole));
            assert_eq!(without_libiberty(mangled).as_deref(), Some(whole));
        }
        // S's, Inner's, and libstdc++'s basic_string(n, c, alloc) at least.
        assert!(
            checked >= 3,
            "{checked} templated constructors: {theirs:#?}"
        );
    }

    /// A PLT stub's name demangles as its function's (as `objdump -C`
    /// prints it); one of a C function stays as it is.
    #[test]
    fn plt_stub_names() {
        let plt = demangle("_ZdlPv@plt");
        let cxxfilt = std::process::Command::new("c++filt")
            .arg("_ZdlPv")
            .output()
            .unwrap();
        let function = String::from_utf8(cxxfilt.stdout).unwrap();
        assert_eq!(plt, Some(format!("{}@plt", function.trim())));
        assert_eq!(demangle("puts@plt"), None);
    }

    /// `f<B<X, X>>` with `X` nested `n` deep through back-references: the
    /// demangled form grows about 1.6 times per level (c++filt prints
    /// 15,613 bytes for `n` = 14 and 107,019 for 18).
    fn exponential(n: u32) -> String {
        let mut x = String::from("S_IiiE");
        for k in 2..i64::from(n) {
            x = format!("S_I{x}{}E", substitution(k - 2));
        }
        format!("_Z1fI1BI{x}{}EEvT_", substitution(i64::from(n) - 2))
    }

    #[test]
    fn a_cpp_name_that_expands_past_the_bound_stays_mangled() {
        let long = demangle(&exponential(14)).expect("a 15 KiB name is within the bound");
        assert_eq!(long.len(), 15_613);
        assert_eq!(demangle(&exponential(18)), None);
        assert_eq!(demangle(&exponential(40)), None);
    }
}
