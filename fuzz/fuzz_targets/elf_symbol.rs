//! A symbol looked for in an untrusted ELF file (a file another process
//! maps), as the recorder looks for the code registry and the GDB JIT
//! descriptor: symbol and string tables of any size and content (names
//! at any offset, tables whose strings cannot be read) give an answer or
//! none, never a panic or unbounded work.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for name in [&b"ichnos_code_registry"[..], b"__jit_debug_descriptor", b"a"] {
        let _ = ichnos_code::elf::symbol_offset(data, name);
    }
});
