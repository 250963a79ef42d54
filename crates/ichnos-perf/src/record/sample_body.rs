//! A sample's body: parsed field by field as the event's `sample_type`
//! lays it out, and rewritten with its user stack copy cut short.

use super::{
    attr, parse, sample, Fields, Record, RecordError, RecordProblem, Sample, SampleFormat,
    SampleId, UserRegs, HEADER_LEN, REGS_ABI_NONE,
};

pub(super) fn parse_sample<'a>(
    format: &SampleFormat,
    misc: u16,
    f: &mut Fields<'a>,
) -> Result<Sample<'a>, RecordError> {
    let mut s = Sample {
        misc,
        ip: None,
        id: SampleId::default(),
        addr: None,
        period: None,
        callchain: None,
        raw: None,
        regs_user: None,
        stack_user: None,
        stack_user_size: 0,
    };
    if format.has(sample::IDENTIFIER) {
        s.id.id = Some(f.u64("identifier")?);
    }
    if format.has(sample::IP) {
        s.ip = Some(f.u64("ip")?);
    }
    if format.has(sample::TID) {
        let (pid, tid) = f.pair("pid")?;
        (s.id.pid, s.id.tid) = (Some(pid), Some(tid));
    }
    if format.has(sample::TIME) {
        s.id.time = Some(f.u64("time")?);
    }
    if format.has(sample::ADDR) {
        s.addr = Some(f.u64("addr")?);
    }
    if format.has(sample::ID) {
        s.id.id = Some(f.u64("id")?);
    }
    if format.has(sample::STREAM_ID) {
        s.id.stream_id = Some(f.u64("stream_id")?);
    }
    if format.has(sample::CPU) {
        s.id.cpu = Some(f.pair("cpu")?.0);
    }
    if format.has(sample::PERIOD) {
        s.period = Some(f.u64("period")?);
    }
    if format.has(sample::READ) {
        skip_read(format.read_format, f)?;
    }
    if format.has(sample::CALLCHAIN) {
        s.callchain = Some(f.words("callchain")?);
    }
    if format.has(sample::RAW) {
        let n = f.u32("raw.size")?;
        s.raw = Some(f.take("raw", u64::from(n))?);
    }
    if format.has(sample::BRANCH_STACK) {
        let n = f.u64("branch_stack.nr")?;
        if format.branch_sample_type & attr::BRANCH_HW_INDEX != 0 {
            f.u64("branch_stack.hw_idx")?;
        }
        let bytes = n.checked_mul(24).ok_or_else(|| {
            f.error(RecordProblem::TooLong {
                field: "branch_stack.nr",
                value: n,
            })
        })?;
        f.take("branch_stack", bytes)?;
    }
    if format.has(sample::REGS_USER) {
        let abi = f.u64("regs_user.abi")?;
        let values = if abi == REGS_ABI_NONE {
            &[][..]
        } else {
            f.take("regs_user", u64::from(format.regs_user.count_ones()) * 8)?
        };
        s.regs_user = Some(UserRegs {
            abi,
            mask: format.regs_user,
            values,
        });
    }
    if format.has(sample::STACK_USER) {
        let size = f.u64("stack_user.size")?;
        let data = f.take("stack_user", size)?;
        let dyn_size = if size == 0 {
            0
        } else {
            f.u64("stack_user.dyn_size")?
        };
        s.stack_user_size = size;
        // `dyn_size` cannot exceed what was copied.
        s.stack_user = Some(&data[..usize::try_from(dyn_size.min(size)).unwrap_or(0)]);
    }
    Ok(s)
}

/// Appends `record` to `out` with its user stack copy cut to the first
/// `keep` bytes (rounded up to a multiple of 8): the size field, the
/// bytes, `dyn_size` and the header's size are rewritten, and what
/// follows the stack is kept as it is, so the result parses as the same
/// sample with less stack. A record that is not a sample with a longer
/// stack copy, or that does not parse, is appended as it is. Returns the
/// bytes appended.
///
/// The kernel copies the whole requested size on every sample, however
/// little of it holds frames; a consumer that knows where a thread's
/// outermost frame lies keeps only the bytes below it.
pub fn append_with_stack_cut(
    format: &SampleFormat,
    record: &[u8],
    keep: u64,
    out: &mut Vec<u8>,
) -> usize {
    if let Ok(Record::Sample(sample)) = parse(format, record) {
        append_sample_with_stack_cut(record, &sample, keep, out)
    } else {
        out.extend_from_slice(record);
        record.len()
    }
}

/// As [`append_with_stack_cut`], for a sample already parsed from
/// `record` (one parsed from other bytes is appended whole).
pub fn append_sample_with_stack_cut(
    record: &[u8],
    sample: &Sample<'_>,
    keep: u64,
    out: &mut Vec<u8>,
) -> usize {
    let whole = |out: &mut Vec<u8>| {
        out.extend_from_slice(record);
        record.len()
    };
    let (Some(stack), size) = (sample.stack_user, sample.stack_user_size) else {
        return whole(out);
    };
    let keep = keep.div_ceil(8).saturating_mul(8);
    if keep >= size {
        return whole(out);
    }
    // Where the copy lies: its bytes start where the parsed slice does,
    // the size field before them, dyn_size after all `size` of them.
    let Some(data) = (stack.as_ptr() as usize).checked_sub(record.as_ptr() as usize) else {
        return whole(out);
    };
    let (Ok(size_len), Ok(keep_len)) = (usize::try_from(size), usize::try_from(keep)) else {
        return whole(out);
    };
    let Some(tail) = data
        .checked_add(size_len)
        .and_then(|end| end.checked_add(8))
    else {
        return whole(out);
    };
    if data < HEADER_LEN + 8 || tail > record.len() {
        return whole(out);
    }
    // An empty copy has no dyn_size field.
    let dyn_len = if keep_len == 0 { 0 } else { 8 };
    let new_len = record.len() - (size_len - keep_len) - (8 - dyn_len);
    let Ok(new_size) = u16::try_from(new_len) else {
        return whole(out);
    };
    let dyn_size = (stack.len() as u64).min(keep);
    let start = out.len();
    out.extend_from_slice(&record[..6]);
    out.extend_from_slice(&new_size.to_le_bytes());
    out.extend_from_slice(&record[HEADER_LEN..data - 8]);
    out.extend_from_slice(&keep.to_le_bytes());
    out.extend_from_slice(&record[data..data + keep_len]);
    if dyn_len > 0 {
        out.extend_from_slice(&dyn_size.to_le_bytes());
    }
    out.extend_from_slice(&record[tail..]);
    out.len() - start
}

/// Skips a sample's `read_format` values.
fn skip_read(read_format: u64, f: &mut Fields<'_>) -> Result<(), RecordError> {
    use attr::read_format as rf;
    let per_value =
        1 + u64::from(read_format & rf::ID != 0) + u64::from(read_format & rf::LOST != 0);
    let times = u64::from(read_format & rf::TOTAL_TIME_ENABLED != 0)
        + u64::from(read_format & rf::TOTAL_TIME_RUNNING != 0);
    if read_format & rf::GROUP != 0 {
        let nr = f.u64("read.nr")?;
        f.take("read.times", times * 8)?;
        let bytes = nr.checked_mul(per_value * 8).ok_or_else(|| {
            f.error(RecordProblem::TooLong {
                field: "read.nr",
                value: nr,
            })
        })?;
        f.take("read.values", bytes)?;
    } else {
        f.take("read", (per_value + times) * 8)?;
    }
    Ok(())
}
