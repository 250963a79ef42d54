//! A perf sample record made for the tests of what reads samples as they
//! are staged (`stack_tops.rs`, `untouched.rs`).

use ichnos_perf::attr::{regs, sample};
use ichnos_perf::record::{parse, Record, Sample, SampleFormat};

/// A sample of thread `tid` (its own process), taken in user mode, with
/// stack pointer `sp` and `copied` bytes of stack of the `asked` asked
/// for, parsed and handed to `f`.
pub(super) fn with_sample<T>(
    tid: u32,
    sp: u64,
    asked: u64,
    copied: u64,
    f: impl FnOnce(&Sample<'_>) -> T,
) -> T {
    let format = SampleFormat {
        sample_type: sample::TID | sample::REGS_USER | sample::STACK_USER,
        regs_user: 1 << regs::SP,
        ..SampleFormat::default()
    };
    // PERF_RECORD_SAMPLE, misc PERF_RECORD_MISC_USER; the size after.
    let mut record = vec![9, 0, 0, 0, 2, 0, 0, 0];
    record.extend_from_slice(&tid.to_le_bytes());
    record.extend_from_slice(&tid.to_le_bytes());
    // PERF_SAMPLE_REGS_ABI_64, the stack pointer, the copy's size.
    for v in [2u64, sp, asked] {
        record.extend_from_slice(&v.to_le_bytes());
    }
    if asked > 0 {
        record.extend(std::iter::repeat_n(0, usize::try_from(asked).unwrap()));
        record.extend_from_slice(&copied.to_le_bytes());
    }
    let len = u16::try_from(record.len()).unwrap();
    record[6..8].copy_from_slice(&len.to_le_bytes());
    let Ok(Record::Sample(s)) = parse(&format, &record) else {
        panic!("not a sample")
    };
    f(&s)
}
