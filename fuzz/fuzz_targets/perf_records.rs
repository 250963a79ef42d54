//! A buffer of perf records as a ring or a perf.data file would hold them,
//! parsed under a sample format taken from the input: errors, never
//! panics; every view stays inside its record.
#![no_main]

use ichnos_perf::record::{parse, Record, Records, SampleFormat};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((head, records)) = data.split_first_chunk::<24>() else {
        return;
    };
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap());
    let format = SampleFormat {
        sample_type: word(0),
        read_format: word(1) & 0x1f,
        regs_user: word(2),
        branch_sample_type: word(1) >> 32,
        sample_id_all: word(1) & 0x20 != 0,
    };
    for (_, header, bytes) in Records::new(records).flatten() {
        if let Ok(Record::Sample(s)) = parse(&format, bytes) {
            assert!(s.stack_user.unwrap_or_default().len() <= usize::from(header.size));
            let _ = s.callchain().count();
        }
    }
});
