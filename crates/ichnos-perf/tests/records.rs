//! Records assembled here field by field (the layout of the kernel's
//! `include/uapi/linux/perf_event.h`), parsed back, and broken.

use ichnos_perf::attr::sample;
use ichnos_perf::record::{
    append_sample_with_stack_cut, append_with_stack_cut, parse, Record, RecordProblem, Records,
    SampleFormat, MISC_COMM_EXEC, MISC_MMAP_BUILD_ID, MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT,
    RECORD_COMM, RECORD_EXIT, RECORD_FORK, RECORD_LOST, RECORD_MMAP2, RECORD_SAMPLE, RECORD_SWITCH,
    RECORD_SWITCH_CPU_WIDE, RECORD_THROTTLE,
};

/// A record under construction: header, then fields in order.
struct Builder {
    kind: u32,
    misc: u16,
    body: Vec<u8>,
}

impl Builder {
    fn new(kind: u32, misc: u16) -> Self {
        Self {
            kind,
            misc,
            body: Vec::new(),
        }
    }
    fn u64(mut self, v: u64) -> Self {
        self.body.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32s(mut self, a: u32, b: u32) -> Self {
        self.body.extend_from_slice(&a.to_le_bytes());
        self.body.extend_from_slice(&b.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.body.extend_from_slice(b);
        self
    }
    /// A NUL-terminated string padded to 8 bytes, as the kernel writes it.
    fn string(mut self, s: &[u8]) -> Self {
        self.body.extend_from_slice(s);
        self.body.push(0);
        while !self.body.len().is_multiple_of(8) {
            self.body.push(0);
        }
        self
    }
    /// The `sample_id` trailer of `FORMAT`: pid/tid, time, cpu.
    fn sample_id(self, pid: u32, tid: u32, time: u64, cpu: u32) -> Self {
        self.u32s(pid, tid).u64(time).u32s(cpu, 0)
    }
    fn build(self) -> Vec<u8> {
        let size = u16::try_from(8 + self.body.len()).unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(&self.kind.to_le_bytes());
        out.extend_from_slice(&self.misc.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

/// The format ichnos records with: IP, TID, TIME, CPU, PERIOD, user
/// registers (bp, sp, ip) and stack, `sample_id_all`.
const FORMAT: SampleFormat = SampleFormat {
    sample_type: sample::IP
        | sample::TID
        | sample::TIME
        | sample::CPU
        | sample::PERIOD
        | sample::REGS_USER
        | sample::STACK_USER,
    read_format: 0,
    regs_user: (1 << 6) | (1 << 7) | (1 << 8),
    branch_sample_type: 0,
    sample_id_all: true,
};

fn sample_record(stack: &[u8], dyn_size: u64) -> Vec<u8> {
    Builder::new(RECORD_SAMPLE, 2)
        .u64(0x40_1234)
        .u32s(100, 101)
        .u64(5_000_000)
        .u32s(1, 0)
        .u64(1_000_000)
        .u64(2) // ABI 64
        .u64(0x7ffc_0000_0100) // bp
        .u64(0x7ffc_0000_0000) // sp
        .u64(0x40_1234) // ip
        .u64(stack.len() as u64)
        .bytes(stack)
        .u64(dyn_size)
        .build()
}

#[test]
fn a_sample_with_registers_and_stack_parses() {
    let stack: Vec<u8> = (0..64).collect();
    let bytes = sample_record(&stack, 40);
    let Record::Sample(s) = parse(&FORMAT, &bytes).unwrap() else {
        panic!("not a sample")
    };
    assert_eq!(s.ip, Some(0x40_1234));
    assert_eq!((s.id.pid, s.id.tid), (Some(100), Some(101)));
    assert_eq!(s.id.time, Some(5_000_000));
    assert_eq!(s.id.cpu, Some(1));
    assert_eq!(s.period, Some(1_000_000));
    let regs = s.regs_user.unwrap();
    assert_eq!(regs.abi, 2);
    assert_eq!(regs.get(6), Some(0x7ffc_0000_0100));
    assert_eq!(regs.get(7), Some(0x7ffc_0000_0000));
    assert_eq!(regs.get(8), Some(0x40_1234));
    assert_eq!(regs.get(0), None, "ax was not dumped");
    // Only dyn_size bytes of the copy are the stack.
    assert_eq!(s.stack_user.unwrap(), &stack[..40]);
    assert_eq!(s.stack_user_size, 64);
}

/// A sample's ip, tid, time, period and registers.
type Fields = (Option<u64>, Option<u32>, Option<u64>, Option<u64>, Vec<u64>);

/// The fields of a sample other than its stack.
fn sample_fields(record: &[u8]) -> Fields {
    let Record::Sample(s) = parse(&FORMAT, record).unwrap() else {
        panic!("not a sample")
    };
    let regs = s.regs_user.unwrap();
    (
        s.ip,
        s.id.tid,
        s.id.time,
        s.period,
        (6..=8).map(|r| regs.get(r).unwrap()).collect(),
    )
}

#[test]
fn a_stack_cut_short_parses_as_the_same_sample_with_less_stack() {
    let stack: Vec<u8> = (0..64).collect();
    let whole = sample_record(&stack, 40);
    let cut = |keep: u64| {
        let mut out = vec![0xee; 3];
        let n = append_with_stack_cut(&FORMAT, &whole, keep, &mut out);
        assert_eq!(n, out.len() - 3);
        assert_eq!(&out[..3], &[0xee; 3], "appended after what was there");
        out.split_off(3)
    };
    // 20 bytes kept, rounded up to 24: the copy's size, the header's and
    // the bytes all say so.
    let short = cut(20);
    assert_eq!(short.len(), whole.len() - 40);
    assert_eq!(
        usize::from(u16::from_le_bytes([short[6], short[7]])),
        short.len()
    );
    assert_eq!(sample_fields(&short), sample_fields(&whole));
    let Record::Sample(s) = parse(&FORMAT, &short).unwrap() else {
        panic!()
    };
    assert_eq!(s.stack_user.unwrap(), &stack[..24]);
    assert_eq!(s.stack_user_size, 24);
    // More kept than dyn_size said was copied: dyn_size still bounds it.
    let longer = cut(48);
    let Record::Sample(s) = parse(&FORMAT, &longer).unwrap() else {
        panic!()
    };
    assert_eq!(s.stack_user.unwrap(), &stack[..40]);
    assert_eq!(s.stack_user_size, 48);
    // Nothing kept: an empty copy, without a dyn_size.
    let empty = cut(0);
    assert_eq!(empty.len(), whole.len() - 64 - 8);
    let Record::Sample(s) = parse(&FORMAT, &empty).unwrap() else {
        panic!()
    };
    assert_eq!(s.stack_user.unwrap(), &[] as &[u8]);
    assert_eq!(sample_fields(&empty), sample_fields(&whole));
    // All of it or more: the record as it was; so for other records.
    assert_eq!(cut(64), whole);
    assert_eq!(cut(1 << 20), whole);
    let exit = Builder::new(RECORD_EXIT, 0)
        .u32s(1, 1)
        .u32s(1, 1)
        .u64(9)
        .sample_id(1, 1, 9, 0)
        .build();
    let mut out = Vec::new();
    append_with_stack_cut(&FORMAT, &exit, 0, &mut out);
    assert_eq!(out, exit);
    // A sample parsed from other bytes does not cut this record.
    let other = whole.clone();
    let Record::Sample(parsed) = parse(&FORMAT, &other).unwrap() else {
        panic!()
    };
    let mut out = Vec::new();
    append_sample_with_stack_cut(&whole, &parsed, 8, &mut out);
    assert_eq!(out, whole);
    let Record::Sample(own) = parse(&FORMAT, &whole).unwrap() else {
        panic!()
    };
    out.clear();
    append_sample_with_stack_cut(&whole, &own, 8, &mut out);
    assert_eq!(out.len(), whole.len() - 56);
}

#[test]
fn a_sample_without_user_registers_has_none() {
    let bytes = Builder::new(RECORD_SAMPLE, 1)
        .u64(0xffff_ffff_8100_0000)
        .u32s(0, 0)
        .u64(7)
        .u32s(0, 0)
        .u64(1)
        .u64(0) // ABI none: no values follow
        .u64(0) // no stack
        .build();
    let Record::Sample(s) = parse(&FORMAT, &bytes).unwrap() else {
        panic!()
    };
    let regs = s.regs_user.unwrap();
    assert_eq!(regs.abi, 0);
    assert_eq!(regs.get(7), None);
    assert_eq!(s.stack_user, Some(&[][..]));
}

#[test]
fn side_band_records_parse_with_their_trailer() {
    let mmap = Builder::new(RECORD_MMAP2, 0)
        .u32s(100, 100)
        .u64(0x5555_0000_1000)
        .u64(0x2000)
        .u64(0x1000)
        .u32s(8, 1)
        .u64(42)
        .u64(3)
        .u32s(5, 2) // prot, flags
        .string(b"/usr/bin/true")
        .sample_id(100, 100, 77, 0)
        .build();
    let Record::Mmap(m) = parse(&FORMAT, &mmap).unwrap() else {
        panic!()
    };
    assert_eq!((m.addr, m.len, m.pgoff), (0x5555_0000_1000, 0x2000, 0x1000));
    assert_eq!(m.filename, b"/usr/bin/true");
    assert_eq!(m.inode.unwrap().ino, 42);
    assert_eq!((m.prot, m.flags), (Some(5), Some(2)));
    assert!(m.executable);
    assert_eq!(m.sample_id.time, Some(77));

    let mut id = [0u8; 24];
    id[0] = 20;
    id[4..24].copy_from_slice(&[0xab; 20]);
    let with_id = Builder::new(RECORD_MMAP2, MISC_MMAP_BUILD_ID)
        .u32s(1, 1)
        .u64(0x1000)
        .u64(0x1000)
        .u64(0)
        .bytes(&id)
        .u32s(5, 2)
        .string(b"/lib/x.so")
        .sample_id(1, 1, 9, 0)
        .build();
    let Record::Mmap(m) = parse(&FORMAT, &with_id).unwrap() else {
        panic!()
    };
    assert_eq!(m.build_id, Some(&[0xab; 20][..]));
    assert_eq!(m.inode, None);

    let comm = Builder::new(RECORD_COMM, MISC_COMM_EXEC)
        .u32s(100, 101)
        .string(b"worker-1")
        .sample_id(100, 101, 88, 1)
        .build();
    let Record::Comm(c) = parse(&FORMAT, &comm).unwrap() else {
        panic!()
    };
    assert_eq!(c.name, b"worker-1");
    assert!(c.exec);
    assert_eq!(c.sample_id.cpu, Some(1));

    for kind in [RECORD_FORK, RECORD_EXIT] {
        let task = Builder::new(kind, 0)
            .u32s(100, 50)
            .u32s(102, 100)
            .u64(99)
            .sample_id(100, 102, 99, 0)
            .build();
        let record = parse(&FORMAT, &task).unwrap();
        let t = match record {
            Record::Fork(t) if kind == RECORD_FORK => t,
            Record::Exit(t) if kind == RECORD_EXIT => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (t.pid, t.ppid, t.tid, t.ptid, t.time),
            (100, 50, 102, 100, 99)
        );
        assert_eq!(record.time(), Some(99));
    }

    let lost = Builder::new(RECORD_LOST, 0)
        .u64(3)
        .u64(17)
        .sample_id(0, 0, 5, 0)
        .build();
    assert!(matches!(parse(&FORMAT, &lost).unwrap(), Record::Lost(l) if l.lost == 17));
    let throttle = Builder::new(RECORD_THROTTLE, 0)
        .u64(11)
        .u64(1)
        .u64(2)
        .sample_id(0, 0, 11, 0)
        .build();
    assert!(matches!(parse(&FORMAT, &throttle).unwrap(), Record::Throttle(t) if t.time == 11));
}

#[test]
fn switch_records_say_which_way_and_whether_preempted() {
    // PERF_RECORD_SWITCH: no fields of its own, the thread in the trailer.
    let cases = [
        (0, false, false),
        (MISC_SWITCH_OUT, true, false),
        (MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, true, true),
    ];
    for (misc, out, preempted) in cases {
        let record = Builder::new(RECORD_SWITCH, misc)
            .sample_id(100, 101, 55, 1)
            .build();
        let parsed = parse(&FORMAT, &record).unwrap();
        let Record::Switch(s) = parsed else {
            panic!("{parsed:?}")
        };
        assert_eq!((s.out, s.preempted, s.other), (out, preempted, None));
        assert_eq!((s.sample_id.tid, s.sample_id.cpu), (Some(101), Some(1)));
        assert_eq!(parsed.time(), Some(55));
    }
    // PERF_RECORD_SWITCH_CPU_WIDE: the other thread first.
    let wide = Builder::new(RECORD_SWITCH_CPU_WIDE, MISC_SWITCH_OUT)
        .u32s(200, 202)
        .sample_id(100, 101, 56, 0)
        .build();
    let Record::Switch(s) = parse(&FORMAT, &wide).unwrap() else {
        panic!()
    };
    assert_eq!((s.out, s.other), (true, Some((200, 202))));
    assert_eq!(s.sample_id.tid, Some(101));
    // A CPU-wide record too short for its fields is refused, not read
    // into its trailer.
    let short = Builder::new(RECORD_SWITCH_CPU_WIDE, 0)
        .sample_id(100, 101, 56, 0)
        .build();
    let e = parse(&FORMAT, &short).unwrap_err();
    assert_eq!(e.kind, RECORD_SWITCH_CPU_WIDE);
    assert!(e.to_string().contains("SWITCH_CPU_WIDE"), "{e}");
}

#[test]
fn without_sample_id_all_side_band_records_have_no_trailer() {
    let format = SampleFormat {
        sample_id_all: false,
        ..FORMAT
    };
    let exit = Builder::new(RECORD_EXIT, 0)
        .u32s(7, 1)
        .u32s(8, 7)
        .u64(123)
        .build();
    let Record::Exit(t) = parse(&format, &exit).unwrap() else {
        panic!()
    };
    assert_eq!((t.pid, t.tid, t.time), (7, 8, 123));
    assert_eq!(t.sample_id, ichnos_perf::record::SampleId::default());
    // The same record read as if it had a trailer is too short for it.
    assert!(parse(&FORMAT, &exit).is_err());
}

#[test]
fn errors_name_the_record_the_field_and_the_offset() {
    let stack = [0u8; 16];
    let mut bytes = sample_record(&stack, 16);
    // Claim a stack copy larger than the record.
    let at = 8 + 8 + 8 + 8 + 8 + 8 + 8 + 24;
    bytes[at..at + 8].copy_from_slice(&4096u64.to_le_bytes());
    let e = parse(&FORMAT, &bytes).unwrap_err();
    assert_eq!(e.kind, RECORD_SAMPLE);
    assert_eq!(e.offset, at + 8);
    assert!(matches!(
        e.problem,
        RecordProblem::Truncated {
            field: "stack_user",
            needed: 4096,
            ..
        }
    ));
    assert!(e.to_string().contains("SAMPLE record"), "{e}");

    let unterminated = Builder::new(RECORD_COMM, 0)
        .u32s(1, 1)
        .bytes(b"abcdefgh")
        .sample_id(1, 1, 1, 0)
        .build();
    let e = parse(&FORMAT, &unterminated).unwrap_err();
    assert_eq!(e.problem, RecordProblem::Unterminated { field: "comm" });
    assert_eq!(e.offset, 16);

    // Smaller than its own trailer.
    let short = Builder::new(RECORD_LOST, 0).u64(1).build();
    assert!(parse(&FORMAT, &short).is_err());
}

#[test]
fn framing_stops_at_a_broken_header() {
    let mut buf = sample_record(&[1; 8], 8);
    let first = buf.len();
    buf.extend_from_slice(&[9, 0, 0, 0, 0, 0, 4, 0]); // size 4 < 8
    let mut records = Records::new(&buf);
    let (offset, header, bytes) = records.next().unwrap().unwrap();
    assert_eq!(
        (offset, header.kind, bytes.len()),
        (0, RECORD_SAMPLE, first)
    );
    let e = records.next().unwrap().unwrap_err();
    assert_eq!(e.offset, first);
    assert_eq!(e.problem, RecordProblem::BadSize { size: 4 });
    assert!(records.next().is_none());
}

proptest::proptest! {
    /// Any bytes: an answer or an error, never a panic, and never a view
    /// reaching outside the record.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
                                   kind in 0u32..16, regs in proptest::num::u64::ANY) {
        let mut bytes = bytes;
        if bytes.len() >= 8 {
            bytes[..4].copy_from_slice(&kind.to_le_bytes());
        }
        let format = SampleFormat { regs_user: regs, ..FORMAT };
        if let Ok(Record::Sample(s)) = parse(&format, &bytes) {
            let size = usize::from(u16::from_le_bytes([bytes[6], bytes[7]]));
            proptest::prop_assert!(s.stack_user.unwrap_or_default().len() <= size);
        }
        for (_, _, record) in Records::new(&bytes).flatten() {
            let _ = parse(&format, record);
        }
    }

    /// Any sample cut to any length parses to the same fields and a
    /// prefix of its stack.
    #[test]
    fn a_cut_keeps_a_prefix_of_the_stack(len in 0usize..64, dyn_size in 0u64..80, keep in 0u64..600) {
        let stack: Vec<u8> = (0..len * 8).map(|i| i as u8).collect();
        let whole = sample_record(&stack, dyn_size);
        let mut cut = Vec::new();
        append_with_stack_cut(&FORMAT, &whole, keep, &mut cut);
        proptest::prop_assert_eq!(sample_fields(&cut), sample_fields(&whole));
        let (Ok(Record::Sample(a)), Ok(Record::Sample(b))) = (parse(&FORMAT, &whole), parse(&FORMAT, &cut)) else {
            panic!("not samples")
        };
        let (a, b) = (a.stack_user.unwrap(), b.stack_user.unwrap());
        proptest::prop_assert!(a.starts_with(b));
        proptest::prop_assert_eq!(b.len() as u64, (a.len() as u64).min(keep.div_ceil(8) * 8));
    }
}
