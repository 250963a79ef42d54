//! The functions an object file defines, by name: what a function
//! tracer's filters (`ichnos trace -F`/`-N`) are resolved against before
//! the program runs.

use std::path::Path;

use crate::error::SymbolError;

/// A function the file's ELF symbol tables (`.symtab`, `.dynsym`) define.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// Its first instruction, at the file's link-time virtual address.
    pub address: u64,
    /// Its size in bytes (0 where the symbol gives none).
    pub size: u64,
    /// The name as the symbol table holds it.
    pub name: String,
    /// The name demangled (Rust, C++), where it is mangled.
    pub demangled: Option<String>,
}

/// The functions the object file at `path` defines, in address order, one
/// per address (`.symtab`'s name first). A stripped file has only its
/// `.dynsym` functions; one with no symbol tables has none.
///
/// # Errors
/// The file cannot be read or is not an ELF file.
pub fn functions_of(path: &Path) -> Result<Vec<FunctionSymbol>, SymbolError> {
    Ok(crate::object_file::defined_functions(path)?
        .into_iter()
        .map(|s| {
            let demangled = crate::demangle::demangle(&s.name).filter(|d| *d != s.name);
            FunctionSymbol {
                address: s.addr,
                size: s.size,
                name: s.name,
                demangled,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The functions of a C file built here, against binutils' `nm`.
    #[test]
    fn the_functions_are_nms_text_symbols() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("f.c");
        std::fs::write(
            &src,
            "static int hidden(int x) { return x * 3; }\n\
             int visible(int x) { return hidden(x) + 1; }\n\
             int main(int c, char **v) { (void)v; return visible(c); }\n",
        )
        .unwrap();
        let exe = dir.path().join("f");
        let built = std::process::Command::new("gcc")
            .args(["-O0", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap();
        assert!(built.success());
        let nm = std::process::Command::new("nm")
            .arg("--defined-only")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(nm.status.success());
        let nm = String::from_utf8(nm.stdout).unwrap();
        let theirs = |name: &str| -> u64 {
            let line = nm
                .lines()
                .find(|l| l.ends_with(&format!(" {name}")))
                .unwrap_or_else(|| panic!("{name} in {nm}"));
            u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
        };
        let ours = functions_of(&exe).unwrap();
        for name in ["hidden", "visible", "main"] {
            let f = ours
                .iter()
                .find(|f| f.name == name)
                .unwrap_or_else(|| panic!("{name} in {ours:?}"));
            assert_eq!(f.address, theirs(name), "{name}");
            assert!(f.size > 0, "{name}");
        }
        assert!(ours.windows(2).all(|w| w[0].address < w[1].address));
    }

    #[test]
    fn a_file_that_is_not_elf_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-elf");
        std::fs::write(&path, b"#!/bin/sh\necho hi\n").unwrap();
        let err = functions_of(&path).unwrap_err().to_string();
        assert!(err.contains("not-elf"), "{err}");
    }
}
