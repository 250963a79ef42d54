//! What code is where in a process, and how to unwind through it.
//!
//! This crate re-creates the codectl(2) proposal (LKML, July 2025) as a
//! user-space mechanism and builds the unwinder on it. A [`Registry`] holds
//! code objects — ELF text ranges with their SFrame section, path, build id
//! and debug link, and JIT text ranges with a chain of JIT unwind tables —
//! and answers "which code object, and which unwind rule, covers this
//! address" without ever making a lookup wait for a registration.
//!
//! Every unwind source becomes the same compact [`UnwindRow`] (the codectl
//! JIT FRE): [`sframe`] decodes SFrame v1, v2 and v3 sections, [`eh_frame`]
//! converts `.eh_frame` CFI where the rule is expressible ([`debug_frame`]
//! converts `.debug_frame`, where Go programs keep their CFI; [`go_pclntab`]
//! reads the function table Go programs keep when stripped), and [`jit`]
//! reads JIT tables as they grow; [`gdb_jit`] reads the objects a JIT gave
//! debuggers through the GDB JIT interface. [`unwind()`](unwind::unwind) then walks a
//! stack from user registers and a stack copy, one binary search and a few
//! loads per frame, with the frame-pointer chain as the fallback.
//!
//! ```
//! use ichnos_code::{row::{RowTable, UnwindRow, ROW_CFA_BASE_SP}, CodeMap, CodeObject,
//!                   RowSource, Rows, unwind::{unwind, Regs, StopReason, UnwindOptions}};
//! use ichnos_code::memory::NoMemory;
//! use std::sync::Arc;
//!
//! // One function at 0x1000..0x1040 whose CFA is SP + 16 everywhere.
//! let mut table = RowTable::new(0x1000);
//! table.push(0x1000, UnwindRow { size: 0x40, cfa_off: 16, info: ROW_CFA_BASE_SP, ..Default::default() }).unwrap();
//! let mut map = CodeMap::new();
//! map.insert(Arc::new(CodeObject { start: 0x1000, end: 0x1040, bias: 0,
//!     rows: Rows::Fixed(Arc::new(table)), source: RowSource::Jit, name: "demo".into() })).unwrap();
//!
//! // The stack at SP = 0x7000: 8 bytes of locals, then the return address 0.
//! let stack = [0u8; 16];
//! let walk = unwind(&map, Regs { ip: 0x1010, sp: 0x7000, fp: 0, bx: None }, &stack, &mut NoMemory,
//!                   &UnwindOptions::default());
//! assert_eq!(walk.frames.len(), 1);
//! assert_eq!(walk.stop, StopReason::Outermost);
//! ```

pub mod cfi;
pub mod code_map;
pub mod debug_frame;
pub mod eh_frame;
pub mod elf;
pub mod export;
mod file_facts;
pub mod gdb_jit;
pub mod go_pclntab;
pub mod jit;
pub mod jitdump;
pub mod lazy;
pub mod loaded;
pub mod memory;
pub mod perf_map;
pub mod process;
mod process_symbols;
pub mod registration;
pub mod registry;
pub mod row;
pub mod sframe;
mod sys;
pub mod unwind;

pub use code_map::{CodeMap, CodeObject, FindRow, Lookup, RowSource, Rows};
pub use jit::{JitRows, JitUnwindTable};
pub use loaded::{register_loaded_objects, LoadedReport};
pub use registry::{
    ElfCode, Invalid, JitCode, ObjectFileError, Registration, Registry, RegistryError,
};
pub use row::{CfaBase, RowTable, UnwindRow};
pub use unwind::{
    unwind, unwind_cached, Frame, FrameKind, Regs, StopReason, Unwind, UnwindCache, UnwindOptions,
};
