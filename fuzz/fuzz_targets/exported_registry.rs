//! The exported code registry as read from an untrusted target: the bytes
//! are the target's memory at 0x10000, the header at the address in the
//! first 8 bytes. Any magic, version, entry size, count, entry array and
//! string pointers give registrations or an error naming the field,
//! never a panic, a hang or memory beyond the reader's bound.
#![no_main]

use ichnos_code::export::read_exported_entries_in;
use ichnos_code::memory::Bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let header = u64::from_le_bytes(data[..8].try_into().unwrap());
    let mut memory = Bytes { addr: 0x10000, data };
    if let Ok(entries) = read_exported_entries_in(&mut memory, 1, header) {
        for e in &entries {
            let text = e.registration.text();
            assert!(text.start <= text.end);
        }
    }
});
