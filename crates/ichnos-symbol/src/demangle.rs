//! Rust and C++ name demangling, as `addr2line -C` does it.

/// The demangled form of `name` if it is a mangled Rust (legacy or v0) or
/// C++ (Itanium) name; `None` for names that are not mangled.
#[must_use]
pub fn demangle(name: &str) -> Option<String> {
    // A PLT stub's name (object_file/plt.rs): the function's, demangled.
    if let Some(function) = name.strip_suffix("@plt") {
        return demangle(function).map(|d| d + "@plt");
    }
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // Without the hash, as binutils prints Rust names.
        return Some(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        let demangled = demangle_cpp(name)?;
        return Some(templated_constructor(name, &demangled).unwrap_or(demangled));
    }
    None
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

    /// Templated constructors keep their first parameter (`cpp_demangle`
    /// drops it, taking it for a return type): every one a C++ program's
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
                let ours = demangle(name).unwrap_or_default();
                assert_eq!(
                    super::split_parameters(&ours).map(|(_, p)| parameters(p)),
                    super::split_parameters(theirs).map(|(_, p)| parameters(p)),
                    "{name}: {ours} against {theirs}"
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
        fn substitution(i: i64) -> String {
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
