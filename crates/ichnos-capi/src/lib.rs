//! The C ABI of ichnos: `libichnos.so` and `libichnos.a`.
//!
//! Four headers: `include/ichnos/iscache.h` (image section cache and
//! images, libipt-compatible), `include/ichnos/codectl.h` (the code
//! registry, a user-space codectl(2)), `include/ichnos/symbolize.h`
//! (addresses to functions, files and lines) and `include/ichnos/buf.h`
//! (per-thread fill buffers for instrumented code).
//!
//! This crate only converts and checks arguments; every behaviour lives in
//! the library crates. The image functions keep libipt's names, signatures,
//! structure layouts and negative `pte_*` error numbers, so that a program
//! written against libipt's `pt_iscache_*` and `pt_image_*` manual pages
//! builds against `include/ichnos/iscache.h` by changing its include line
//! and its link line. Deliberate differences are listed in
//! `docs/c-abi-iscache.md`.
//!
//! Where libipt's ABI has no way to say more than an error number,
//! `ichnos_last_error()` returns a message of the last failure on the calling
//! thread that names the file, isid or address involved.

// The C names are libipt's and stay as they are.
#![allow(non_camel_case_types)]

mod buf;
mod codectl;
mod error;
mod image;
mod iscache;
mod sized_struct;
mod symbolize;
mod user_memory;

pub use buf::*;
pub use codectl::*;
pub use error::{ichnos_last_error, pt_errstr};
pub use image::*;
pub use iscache::*;
pub use symbolize::*;
