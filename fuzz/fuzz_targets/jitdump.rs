//! jitdump files from an untrusted runtime: an error naming an offset,
//! never a panic or an allocation the file does not pay for.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dump = ichnos_symbol::jitdump::JitDump::parse(data);
    for c in dump.code.iter().take(16) {
        if let Some(c) = dump.lookup(c.addr) {
            let _ = c.line(c.addr);
        }
    }
});
