//! Rust and C++ name demangling, as `addr2line -C` does it.

/// The demangled form of `name` if it is a mangled Rust (legacy or v0) or
/// C++ (Itanium) name; `None` for names that are not mangled.
#[must_use]
pub fn demangle(name: &str) -> Option<String> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // Without the hash, as binutils prints Rust names.
        return Some(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        let symbol = cpp_demangle::Symbol::new(name).ok()?;
        return symbol.demangle().ok();
    }
    None
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
}
