//! JIT unwind table chains read from an untrusted target: the bytes are
//! the target's memory at 0x10000, the first table at the address in the
//! first 8 bytes. Loops, runaway chains, bad strides and hostile rows give
//! problems, never panics or unbounded work.
#![no_main]

use ichnos_code::memory::Bytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let head = u64::from_le_bytes(data[..8].try_into().unwrap());
    let text_len = u64::from(u32::from_le_bytes(data[8..12].try_into().unwrap()));
    let mut memory = Bytes { addr: 0x10000, data };
    let (table, _problems) =
        ichnos_code::jit::read_table_chain(&mut memory, head, 0x7000_0000, 0x7000_0000 + text_len);
    for row in table.rows().iter().take(16) {
        let _ = table.find(0x7000_0000 + u64::from(row.ip_off));
    }
});
