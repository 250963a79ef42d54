//! JIT code: machine code emitted at run time into executable memory,
//! described by a JIT unwind table, registered, and unwound through; the
//! table reader's validation of hostile tables; and lookups racing a JIT
//! that appends rows.

#![cfg(target_arch = "x86_64")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use ichnos_code::jit::{read_table_chain, FRE_SIZE, FRE_STRIDE, TABLE_HEADER_LEN};
use ichnos_code::memory::ProcessMemory;
use ichnos_code::row::{UnwindRow, ROW_CFA_BASE_SP};
use ichnos_code::{
    register_loaded_objects, unwind, FrameKind, JitCode, JitUnwindTable, Registry, RowSource,
    StopReason, UnwindOptions,
};

fn sp_row(ip_off: u32, size: u32, cfa_off: i32) -> UnwindRow {
    UnwindRow {
        size,
        ip_off,
        cfa_off,
        ra_off: -8,
        fp_off: 0,
        info: ROW_CFA_BASE_SP,
    }
}

/// An executable page holding `code`.
struct JitPage {
    addr: *mut u8,
}

impl JitPage {
    fn new(code: &[u8]) -> Self {
        // SAFETY: a fresh anonymous mapping, written before it is made
        // executable and never while it is.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(addr, libc::MAP_FAILED);
            std::ptr::copy_nonoverlapping(code.as_ptr(), addr.cast::<u8>(), code.len());
            assert_eq!(
                libc::mprotect(addr, 4096, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            Self { addr: addr.cast() }
        }
    }
}

impl Drop for JitPage {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `new`.
        unsafe { libc::munmap(self.addr.cast(), 4096) };
    }
}

/// The JIT function: `long jit(long (*cb)(void))` with a frame of its own.
const JIT_CODE: &[u8] = &[
    0x53, //                   0: push %rbx           CFA = sp+16 after
    0x48, 0x83, 0xec, 0x20, // 1: sub $0x20,%rsp      CFA = sp+48 after
    0x48, 0x89, 0xf8, //       5: mov %rdi,%rax
    0xff, 0xd0, //             8: call *%rax          returns to 10
    0x48, 0x83, 0xc4, 0x20, // 10: add $0x20,%rsp     CFA = sp+16 after
    0x5b, //                   14: pop %rbx           CFA = sp+8 after
    0xc3, //                   15: ret
];
const JIT_RETURN_OFFSET: u64 = 10;

fn jit_rows() -> Vec<UnwindRow> {
    vec![
        sp_row(0, 1, 8),
        sp_row(1, 4, 16),
        sp_row(5, 9, 48),
        sp_row(14, 1, 16),
        sp_row(15, 1, 8),
    ]
}

struct Captured {
    frames: Vec<ichnos_code::Frame>,
    stop: StopReason,
}

static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
static CAPTURED: std::sync::Mutex<Option<Captured>> = std::sync::Mutex::new(None);

/// Called from JIT code: captures its own registers and unwinds the live
/// stack through the JIT frame.
extern "C" fn native_callback() -> i64 {
    let (ip, sp, fp): (u64, u64, u64);
    // SAFETY: reads rip, rsp and rbp into registers; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {fp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            fp = out(reg) fp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let registry = REGISTRY.get().expect("registry set");
    let options = UnwindOptions {
        max_frames: 128,
        frame_pointer_fallback: false,
    };
    let walk = unwind(
        registry,
        ichnos_code::Regs {
            ip,
            sp,
            fp,
            bx: None,
        },
        &[],
        &mut ProcessMemory::current(),
        &options,
    );
    *CAPTURED.lock().unwrap() = Some(Captured {
        frames: walk.frames,
        stop: walk.stop,
    });
    42
}

#[inline(never)]
fn call_jit(entry: u64) -> i64 {
    // SAFETY: `entry` is JIT_CODE, which takes one function pointer,
    // calls it with the C ABI and returns its result.
    let f: extern "C" fn(extern "C" fn() -> i64) -> i64 = unsafe { std::mem::transmute(entry) };
    let r = f(native_callback);
    std::hint::black_box(r)
}

#[test]
fn the_unwinder_passes_through_a_registered_jit_frame() {
    let page = JitPage::new(JIT_CODE);
    let base = page.addr as u64;
    let registry = REGISTRY.get_or_init(Registry::new);
    let report = register_loaded_objects(registry);
    assert!(!report.registered.is_empty(), "{report:?}");

    // Unregistered JIT code: the walk ends at the JIT return address.
    assert_eq!(call_jit(base), 42);
    let before = CAPTURED.lock().unwrap().take().unwrap();
    let jit_ra = base + JIT_RETURN_OFFSET;
    assert_eq!(before.frames.last().map(|f| f.ip), Some(jit_ra));
    assert_eq!(before.stop, StopReason::NoUnwindInfo { pc: jit_ra - 1 });

    // Registered with its unwind table: the walk continues into call_jit
    // and on to the thread's outermost frame.
    let table = Arc::new(JitUnwindTable::with_capacity(8));
    for row in jit_rows() {
        table.push(row).unwrap();
    }
    registry
        .register_jit(JitCode::with_table(base..base + 4096, &table))
        .unwrap();
    assert_eq!(call_jit(base), 42);
    let after = CAPTURED.lock().unwrap().take().unwrap();
    let i = after
        .frames
        .iter()
        .position(|f| f.ip == jit_ra)
        .expect("the JIT return address is a frame");
    let caller = after.frames[i + 1];
    assert_eq!(caller.kind, FrameKind::Row(RowSource::Jit));
    let call_jit_start = call_jit as *const () as u64;
    assert!(
        (call_jit_start..call_jit_start + 512).contains(&caller.ip),
        "frame after the JIT is {:#x}, call_jit is at {call_jit_start:#x}",
        caller.ip
    );
    assert_eq!(after.stop, StopReason::Outermost, "{:#x?}", after.frames);
    assert!(after.frames.len() > i + 3);

    registry.unregister(base).unwrap();
    drop(page);
}

/// A table laid out by hand in our own memory, as a C JIT would.
struct RawTable {
    words: Vec<u64>,
}

impl RawTable {
    fn new(rows: &[UnwindRow], reserved_rows: usize, stride: u32, size: u32) -> Self {
        // Room for whole rows even when the stride is (wrongly) smaller.
        let bytes = TABLE_HEADER_LEN
            + reserved_rows * stride.max(FRE_STRIDE) as usize
            + FRE_STRIDE as usize;
        let mut words = vec![0u64; bytes.div_ceil(8)];
        let mut t = Self { words: Vec::new() };
        {
            let b = bytemuck_bytes(&mut words);
            b[0..8].copy_from_slice(&((reserved_rows * stride as usize) as u64).to_le_bytes());
            b[8..16].copy_from_slice(&((rows.len() * stride as usize) as u64).to_le_bytes());
            b[24..28].copy_from_slice(&stride.to_le_bytes());
            b[28..32].copy_from_slice(&size.to_le_bytes());
            for (i, r) in rows.iter().enumerate() {
                let at = TABLE_HEADER_LEN + i * stride as usize;
                b[at..at + 4].copy_from_slice(&r.size.to_le_bytes());
                b[at + 4..at + 8].copy_from_slice(&r.ip_off.to_le_bytes());
                b[at + 8..at + 12].copy_from_slice(&r.cfa_off.to_le_bytes());
                b[at + 12..at + 16].copy_from_slice(&r.ra_off.to_le_bytes());
                b[at + 16..at + 20].copy_from_slice(&r.fp_off.to_le_bytes());
                b[at + 20] = r.info;
            }
        }
        t.words = words;
        t
    }

    fn addr(&self) -> u64 {
        self.words.as_ptr() as u64
    }

    fn set_word(&mut self, index: usize, value: u64) {
        self.words[index] = value;
    }
}

fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and any byte pattern is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), words.len() * 8) }
}

fn read(head: u64, text_len: u64) -> (Vec<UnwindRow>, Vec<String>) {
    let (table, problems) = read_table_chain(
        &mut ProcessMemory::current(),
        head,
        0x1000,
        0x1000 + text_len,
    );
    (
        table.rows().to_vec(),
        problems
            .iter()
            .map(|p| format!("{}: {}", p.field, p.detail))
            .collect(),
    )
}

#[test]
fn chained_tables_are_read_in_order() {
    let mut second = RawTable::new(&[sp_row(0x40, 8, 24)], 4, FRE_STRIDE, FRE_SIZE);
    second.set_word(2, 0);
    let mut first = RawTable::new(
        &[sp_row(0, 8, 8), sp_row(0x10, 8, 16)],
        2,
        FRE_STRIDE,
        FRE_SIZE,
    );
    first.set_word(2, second.addr());
    let (rows, problems) = read(first.addr(), 0x100);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        rows.iter().map(|r| r.cfa_off).collect::<Vec<_>>(),
        [8, 16, 24]
    );
}

#[test]
fn a_wider_stride_from_a_newer_abi_is_read() {
    // A future row with 8 more bytes: stride 32, fre_size 29.
    let table = RawTable::new(&[sp_row(0, 8, 8), sp_row(8, 8, 16)], 2, 32, 29);
    let (rows, problems) = read(table.addr(), 0x100);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].cfa_off, 16);
}

#[test]
fn hostile_tables_are_rejected_for_the_affected_range_only() {
    // used_len beyond reserved_len: the table is ignored, the next is read.
    let ok = RawTable::new(&[sp_row(0x40, 8, 24)], 1, FRE_STRIDE, FRE_SIZE);
    let mut bad = RawTable::new(&[sp_row(0, 8, 8)], 1, FRE_STRIDE, FRE_SIZE);
    bad.set_word(1, 1000);
    bad.set_word(2, ok.addr());
    let (rows, problems) = read(bad.addr(), 0x100);
    assert_eq!(rows.len(), 1, "only the good table's row");
    assert!(problems[0].starts_with("used_len"), "{problems:?}");

    // A stride smaller than the row.
    let table = RawTable::new(&[sp_row(0, 8, 8)], 1, 16, FRE_SIZE);
    let (rows, problems) = read(table.addr(), 0x100);
    assert!(rows.is_empty());
    assert!(problems[0].starts_with("fre_stride"), "{problems:?}");

    // fre_size smaller than the fields we read.
    let table = RawTable::new(&[sp_row(0, 8, 8)], 1, FRE_STRIDE, 12);
    let (_, problems) = read(table.addr(), 0x100);
    assert!(problems[0].starts_with("fre_size"), "{problems:?}");

    // Unsorted and overlapping rows, a row past the text, unknown info bits:
    // each row is dropped, the others kept.
    let mut unknown = sp_row(0x60, 8, 7);
    unknown.info |= 0x40;
    let rows_in = [
        sp_row(0x10, 8, 1),
        sp_row(0x00, 8, 2), // before the previous one
        sp_row(0x14, 8, 3), // overlaps the first
        sp_row(0x20, 8, 4),
        sp_row(0xfc, 8, 5), // runs past the 0x100 bytes of text
        unknown,
        sp_row(0x70, 8, 6),
    ];
    let table = RawTable::new(&rows_in, rows_in.len(), FRE_STRIDE, FRE_SIZE);
    let (rows, problems) = read(table.addr(), 0x100);
    assert_eq!(
        rows.iter().map(|r| r.cfa_off).collect::<Vec<_>>(),
        [1, 4, 6]
    );
    assert_eq!(problems.len(), 4, "{problems:?}");

    // A chain that loops back on itself stops, with its rows read once.
    let mut a = RawTable::new(&[sp_row(0, 8, 8)], 1, FRE_STRIDE, FRE_SIZE);
    let mut b = RawTable::new(&[sp_row(0x10, 8, 16)], 1, FRE_STRIDE, FRE_SIZE);
    b.set_word(2, a.addr());
    let b_addr = b.addr();
    a.set_word(2, b_addr);
    let (rows, problems) = read(a.addr(), 0x100);
    assert_eq!(rows.len(), 2);
    assert!(problems.iter().any(|p| p.contains("loops")), "{problems:?}");

    // `next` pointing at unmapped memory: an error, not a fault.
    let mut c = RawTable::new(&[sp_row(0, 8, 8)], 1, FRE_STRIDE, FRE_SIZE);
    c.set_word(2, 0x10);
    let (rows, problems) = read(c.addr(), 0x100);
    assert_eq!(rows.len(), 1);
    assert!(
        problems.iter().any(|p| p.contains("unreadable")),
        "{problems:?}"
    );
}

/// A `used_len` in the middle of a row (a buggy JIT) yields the whole rows
/// and keeps the table: rows published later are still read.
#[test]
fn a_partial_used_len_does_not_lose_later_rows() {
    let rows = [sp_row(0, 8, 8), sp_row(8, 8, 16), sp_row(16, 8, 24)];
    let mut t = RawTable::new(&rows, 3, FRE_STRIDE, FRE_SIZE);
    t.set_word(1, u64::from(FRE_STRIDE) + 7);
    let jit = ichnos_code::JitRows::new(std::process::id(), 0x1000, 0x1100, t.addr());
    assert!(jit.refresh());
    assert_eq!(jit.rows().len(), 1);
    assert!(jit.problems().iter().any(|p| p.field == "used_len"));
    t.set_word(1, 3 * u64::from(FRE_STRIDE));
    assert!(jit.refresh());
    assert_eq!(jit.rows().len(), 3);
}

/// A frozen reader (its registration gone, its table's memory reused for
/// other code) keeps the rows it read and reads no more: not on a miss,
/// not on a refresh.
#[test]
fn a_frozen_reader_keeps_its_rows_and_reads_no_more() {
    let mut t = RawTable::new(
        &[sp_row(0, 8, 8), sp_row(8, 8, 16)],
        2,
        FRE_STRIDE,
        FRE_SIZE,
    );
    // One row published so far.
    t.set_word(1, u64::from(FRE_STRIDE));
    let jit = ichnos_code::JitRows::new(std::process::id(), 0x1000, 0x1100, t.addr());
    assert_eq!(jit.find(0x1000).map(|r| r.cfa_off), Some(8));
    jit.freeze();
    assert!(jit.is_frozen());
    // The second row published: a reader not frozen reads it on a miss.
    t.set_word(1, 2 * u64::from(FRE_STRIDE));
    assert_eq!(jit.find(0x1008), None);
    assert!(!jit.refresh());
    assert_eq!(jit.rows().len(), 1);
    assert_eq!(jit.find(0x1004).map(|r| r.cfa_off), Some(8));
    let fresh = ichnos_code::JitRows::new(std::process::id(), 0x1000, 0x1100, t.addr());
    assert_eq!(fresh.find(0x1008).map(|r| r.cfa_off), Some(16));
}

#[test]
fn the_rust_builder_keeps_a_chain_sorted() {
    let a = Arc::new(JitUnwindTable::with_capacity(2));
    let b = Arc::new(JitUnwindTable::with_capacity(2));
    a.push(sp_row(0x10, 8, 8)).unwrap();
    assert!(matches!(
        a.push(sp_row(0x0, 8, 8)),
        Err(ichnos_code::jit::JitTableError::Unsorted { .. })
    ));
    assert!(
        a.chain(Arc::clone(&a)).is_err(),
        "a table cannot follow itself"
    );
    b.push(sp_row(0x40, 8, 8)).unwrap();
    assert!(
        a.chain(Arc::clone(&b)).is_err(),
        "the next table must be empty"
    );
    let c = Arc::new(JitUnwindTable::with_capacity(2));
    a.chain(Arc::clone(&c)).unwrap();
    // The first table is closed; the next starts after its last row.
    assert!(a.push(sp_row(0x100, 8, 8)).is_err());
    assert!(c.push(sp_row(0x8, 8, 8)).is_err());
    c.push(sp_row(0x18, 8, 16)).unwrap();
    let (rows, problems) = read(a.address(), 0x200);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        rows.iter().map(|r| r.ip_off).collect::<Vec<_>>(),
        [0x10, 0x18]
    );
}

#[test]
fn a_runaway_chain_is_cut() {
    // MAX_TABLES + 10 empty tables in a row.
    let n = ichnos_code::jit::MAX_TABLES + 10;
    let mut tables: Vec<RawTable> = (0..n)
        .map(|_| RawTable::new(&[], 0, FRE_STRIDE, FRE_SIZE))
        .collect();
    for i in (0..n - 1).rev() {
        let next = tables[i + 1].addr();
        tables[i].set_word(2, next);
    }
    let (_, problems) = read(tables[0].addr(), 0x100);
    assert!(
        problems.iter().any(|p| p.contains("more than")),
        "{problems:?}"
    );
}

#[test]
fn lookups_racing_a_jit_see_whole_rows_or_nothing() {
    const ROWS: u32 = 20_000;
    let registry = Arc::new(Registry::new());
    let text = 0x7000_0000_0000u64..0x7000_0000_0000 + u64::from(ROWS) * 16;
    let first = Arc::new(JitUnwindTable::with_capacity(ROWS as usize / 2));
    registry
        .register_jit(JitCode::with_table(text.clone(), &first))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let registry = Arc::clone(&registry);
            let done = Arc::clone(&done);
            let seen = Arc::clone(&seen);
            let text = text.clone();
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_u64 + t;
                let mut max_found = 0;
                while !done.load(Ordering::Acquire) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = (x % u64::from(ROWS)) as u32;
                    let pc = text.start + u64::from(i) * 16 + 5;
                    let object = registry.lookup(pc).expect("the JIT range is registered");
                    if let Some(row) = object.find_row(pc) {
                        // Whole and right, never torn or another row's.
                        assert_eq!(row.ip_off, i * 16);
                        assert_eq!(row.size, 16);
                        assert_eq!(row.cfa_off, i.cast_signed() * 8 + 8);
                        max_found = max_found.max(i);
                        seen.fetch_add(1, Ordering::Relaxed);
                    }
                }
                max_found
            })
        })
        .collect();
    let mut current = Arc::clone(&first);
    for i in 0..ROWS {
        let row = sp_row(i * 16, 16, i.cast_signed() * 8 + 8);
        if current.push(row).is_err() {
            let next = Arc::new(JitUnwindTable::with_capacity(ROWS as usize / 2 + 1));
            current.chain(Arc::clone(&next)).unwrap();
            current = next;
            current.push(row).unwrap();
        }
    }
    // Let readers see the finished table for a moment.
    std::thread::sleep(std::time::Duration::from_millis(50));
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert!(seen.load(Ordering::Relaxed) > 0);
    // Every row is found once the JIT is done.
    let object = registry.lookup(text.start).unwrap();
    for i in 0..ROWS {
        let pc = text.start + u64::from(i) * 16 + 15;
        assert_eq!(
            object.find_row(pc).map(|r| r.cfa_off),
            Some(i.cast_signed() * 8 + 8),
            "row {i}"
        );
    }
}

mod growth {
    //! A JIT that publishes its rows a few at a time: whatever the batches,
    //! every address gets the rule one table of all the rows gives it.
    use super::*;
    use ichnos_code::row::RowTable;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn rows_read_in_batches_answer_like_one_table(
            // (gap before the row, its size, its CFA offset in words)
            shapes in proptest::collection::vec((0u32..3, 1u32..6, 1i32..4), 1..120),
            batches in proptest::collection::vec(1usize..9, 1..60),
        ) {
            let mut rows = Vec::new();
            let mut at = 0u32;
            for (gap, size, words) in shapes {
                at += gap * 4;
                rows.push(sp_row(at, size * 4, words * 8));
                at += size * 4;
            }
            let text_len = u64::from(at) + 16;
            let table = Arc::new(JitUnwindTable::with_capacity(rows.len()));
            let jit = ichnos_code::JitRows::new(std::process::id(), 0x10_0000, 0x10_0000 + text_len, table.address());
            let mut whole = RowTable::new(0x10_0000);
            let mut published = 0;
            for n in batches.iter().cycle() {
                if published == rows.len() {
                    break;
                }
                for row in &rows[published..(published + n).min(rows.len())] {
                    table.push(*row).unwrap();
                    whole.push(0x10_0000 + u64::from(row.ip_off), *row).unwrap();
                }
                published = (published + n).min(rows.len());
                prop_assert!(jit.refresh());
                for pc in 0x10_0000..0x10_0000 + text_len {
                    let ours = jit.find(pc).map(|r| (r.cfa_off, r.ra_off, r.fp_off, r.info));
                    let truth = whole.find(pc).map(|r| (r.cfa_off, r.ra_off, r.fp_off, r.info));
                    prop_assert_eq!(ours, truth, "pc {:#x} after {} rows", pc, published);
                    if let Some(r) = jit.find(pc) {
                        let start = 0x10_0000 + u64::from(r.ip_off);
                        prop_assert!((start..start + u64::from(r.size)).contains(&pc));
                    }
                }
            }
            prop_assert_eq!(&*jit.rows(), &whole);
        }
    }
}

/// A chain that grows table by table (a JIT that allocates a table per
/// batch of code) is read as it grows; a refresh starts at the last table
/// reached, and a loop closed later is still caught.
#[test]
fn a_chain_growing_table_by_table_is_read_as_it_grows() {
    let first = Arc::new(JitUnwindTable::with_capacity(1));
    let jit = ichnos_code::JitRows::new(
        std::process::id(),
        0x20_0000,
        0x20_0000 + 0x10_000,
        first.address(),
    );
    let mut last = Arc::clone(&first);
    for i in 0..300u32 {
        if i > 0 {
            let next = Arc::new(JitUnwindTable::with_capacity(1));
            last.chain(Arc::clone(&next)).unwrap();
            last = next;
        }
        last.push(sp_row(i * 16, 16, 8 + 8 * (i.cast_signed() % 4)))
            .unwrap();
        let row = jit
            .find(0x20_0000 + u64::from(i) * 16 + 4)
            .expect("the newest row");
        assert_eq!(
            (row.ip_off, row.cfa_off),
            (i * 16, 8 + 8 * (i.cast_signed() % 4))
        );
    }
    assert_eq!(jit.rows().len(), 300);
    assert!(jit.problems().is_empty(), "{:?}", jit.problems());

    // Two raw tables read once; then the second is pointed back at the
    // first: the next refresh, which starts at the second, sees the loop.
    let a = RawTable::new(&[sp_row(0, 8, 8)], 1, FRE_STRIDE, FRE_SIZE);
    let mut b = RawTable::new(&[sp_row(8, 8, 16)], 2, FRE_STRIDE, FRE_SIZE);
    let mut a = a;
    a.set_word(2, b.addr());
    let jit = ichnos_code::JitRows::new(std::process::id(), 0x1000, 0x1100, a.addr());
    assert!(jit.refresh());
    assert_eq!(jit.rows().len(), 2);
    b.set_word(2, a.addr());
    assert!(!jit.refresh());
    assert!(
        jit.problems().iter().any(|p| p.detail.contains("loops")),
        "{:?}",
        jit.problems()
    );
}

/// A header read that takes `used_len` before the writer's last push and
/// `next` after its chain call (one copy of 32 bytes has no order between
/// its words): the reader must not leave the table with its last rows
/// unread.
#[test]
fn a_header_read_racing_the_last_push_and_the_chain_loses_no_row() {
    /// This process's memory, except that the first read of one table's
    /// header sees an older `used_len`.
    struct Racing {
        header: u64,
        stale_used: u64,
        raced: bool,
    }
    impl ichnos_code::memory::Memory for Racing {
        fn read(
            &mut self,
            addr: u64,
            buf: &mut [u8],
        ) -> Result<(), ichnos_code::memory::MemoryError> {
            ProcessMemory::current().read(addr, buf)?;
            if addr == self.header && buf.len() == TABLE_HEADER_LEN && !self.raced {
                self.raced = true;
                buf[8..16].copy_from_slice(&self.stale_used.to_le_bytes());
            }
            Ok(())
        }
    }
    let b = RawTable::new(&[sp_row(32, 8, 8)], 1, FRE_STRIDE, FRE_SIZE);
    let mut a = RawTable::new(
        &[sp_row(0, 8, 8), sp_row(8, 8, 16), sp_row(16, 8, 24)],
        3,
        FRE_STRIDE,
        FRE_SIZE,
    );
    a.set_word(2, b.addr());
    let mut memory = Racing {
        header: a.addr(),
        stale_used: u64::from(FRE_STRIDE),
        raced: false,
    };
    let (rows, problems) = read_table_chain(&mut memory, a.addr(), 0x1000, 0x1100);
    assert!(memory.raced);
    assert!(problems.is_empty(), "{problems:?}");
    let offs: Vec<u32> = rows.rows().iter().map(|r| r.ip_off).collect();
    assert_eq!(offs, [0, 8, 16, 32]);
}
