//! Names from symbol tables and DWARF, demangled: a bounded answer or the
//! name as stored, never a panic, a hang or an unbounded allocation.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(name) = std::str::from_utf8(data) {
        let _ = ichnos_symbol::demangle(name);
    }
});
