//! The GDB JIT interface as read from an untrusted target: the bytes are
//! the target's memory at 0x10000, the descriptor at the address in the
//! first 8 bytes. Every entry's object found there is read and parsed as
//! an ELF file: loops, runaway lists, entries pointing anywhere, sizes of
//! any value and hostile ELF files give errors, never panics or unbounded
//! work.
#![no_main]

use ichnos_code::gdb_jit::{parse_object, read_entries, read_object};
use ichnos_code::memory::Bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    // The whole input as an object.
    let _ = parse_object(data);
    let descriptor = u64::from_le_bytes(data[..8].try_into().unwrap());
    let mut memory = Bytes { addr: 0x10000, data };
    let Ok(list) = read_entries(&mut memory, descriptor) else {
        return;
    };
    for entry in list.entries.iter().take(8) {
        if let Ok(bytes) = read_object(&mut memory, entry) {
            if let Ok(object) = parse_object(&bytes) {
                if let Some(rows) = object.rows {
                    let _ = rows.find(object.text.start);
                }
            }
        }
    }
});
