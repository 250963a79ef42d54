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
        let symbol = cpp_demangle::Symbol::new(name).ok()?;
        // Back-references let a short name expand exponentially; a name
        // whose demangled form outgrows the bound is shown as stored.
        let mut out = Bounded(String::new());
        symbol
            .structured_demangle(&mut out, &cpp_demangle::DemangleOptions::default())
            .ok()?;
        return Some(out.0);
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
