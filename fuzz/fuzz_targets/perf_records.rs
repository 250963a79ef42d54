//! A buffer of perf records as a ring or a perf.data file would hold them,
//! parsed under a sample format taken from the input: errors, never
//! panics; every view stays inside its record. Samples cut to a shorter
//! stack copy still parse, to a prefix of their stack.
#![no_main]

use ichnos_perf::record::{append_with_stack_cut, parse, Record, Records, SampleFormat};

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
            let keep = u64::from(header.misc) & 0x1ff;
            let mut cut = Vec::new();
            append_with_stack_cut(&format, bytes, keep, &mut cut);
            let Ok(Record::Sample(c)) = parse(&format, &cut) else {
                panic!("a cut sample does not parse");
            };
            let (whole, part) = (s.stack_user.unwrap_or_default(), c.stack_user.unwrap_or_default());
            assert!(whole.starts_with(part));
            assert_eq!(c.ip, s.ip);
        }
    }
});
