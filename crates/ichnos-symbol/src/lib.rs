//! Addresses to the names people read.
//!
//! A [`Symbolizer`] turns addresses in an object file (an executable or a
//! shared library, at its link-time virtual addresses) into frames: the
//! function, and where DWARF says so the source file and line, with
//! inlined functions first and the function they were inlined into last —
//! what `addr2line -f -i -C` prints. Names come from DWARF where there is
//! debug information, else from the ELF symbol tables (`.symtab`, then
//! `.dynsym`); Rust and C++ names are demangled, the raw name is kept
//! (without glibc's `__GI_` prefix, below).
//! Two choices differ from binutils' and gdb's, and follow perf's and
//! uftrace's: a name DWARF gives as glibc's internal label
//! (`__GI_setlocale`) is the function's own (`setlocale`), and at an
//! address several symbols name, a global one wins over a local alias.
//!
//! Debug information is found the way distributions ship it: in the file
//! itself, then under `.build-id/xx/yyyy.debug` in the debug directories,
//! then by the `.gnu_debuglink` name (its CRC32 checked) next to the file,
//! in its `.debug/` directory and under the debug directories. Every answer
//! says which file it came from ([`DebugSource`]).
//!
//! Parsed objects are kept per build id (and size; per path without a build
//! id) under a byte bound, so a batch of addresses for one file parses it
//! once. Names without DWARF come from `.symtab`, `.dynsym`, the separate
//! debug file's `.symtab` and MiniDebugInfo, and in a stripped Go program
//! from Go's own function table (`.gopclntab`).
//!
//! A large batch is answered several times faster from a prepared
//! [`SymbolIndex`]: every address range's frames, worked out once per build
//! ([`Symbolizer::build_index`]) and kept in a file keyed by build id, which
//! a symbolizer with an index directory reads instead of the DWARF; its
//! answers are the DWARF's, address for address.
//!
//! JIT code has no object file: [`perf_map`] reads the `/tmp/perf-PID.map`
//! names runtimes write, and [`jitdump`] reads `jit-PID.dump` files (code
//! loads, moves and line information).

mod debug_file;
mod demangle;
mod error;
mod frame;
mod functions;
mod index;
pub mod jitdump;
mod mapped_file;
mod object_file;
pub mod perf_map;
mod process;
mod symbolizer;

pub use debug_file::{crc32_of_file, DebugSource};
pub use demangle::{demangle, split_parameters};
pub use error::SymbolError;
pub use frame::{Frame, Symbolized, Unnamed};
pub use functions::{functions_of, FunctionSymbol};
pub use ichnos_image::error_chain;
pub use index::{FrameRef, SymbolIndex};
pub use process::{Place, ProcessSymbolized, VdsoImage};
pub use symbolizer::{Symbolizer, SymbolizerOptions};
