//! The recorder's per-sample path allocates nothing: samples of this very
//! thread, as the kernel would deliver them, go through the sorter, the
//! address-space model, the unwinder, the interner and the buffer to the
//! writer, under an allocator that counts this thread's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ichnos_perf::record::{SampleFormat, RECORD_SAMPLE};
use ichnos_perf::{EventConfig, EventKind};

use super::model::Spaces;
use super::order::Sorter;
use super::{output, Interner, Recorder};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a
// thread-local Cell (no allocation, no lock).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// The registers of this point of this thread and a copy of its stack,
/// as a sample record of `format` (what the kernel writes).
#[inline(never)]
fn sample_here(format: &SampleFormat, time: u64) -> Vec<u8> {
    sample_here_copying(format, time, 16 << 10, 16 << 10)
}

/// As [`sample_here`], with a copy of `size` bytes asked for, of which
/// at most `most` are copied (the kernel copies less where the stack's
/// mapping ends).
#[inline(never)]
pub(super) fn sample_here_copying(
    format: &SampleFormat,
    time: u64,
    size: usize,
    most: usize,
) -> Vec<u8> {
    let (ip, sp, bp, bx): (u64, u64, u64, u64);
    // SAFETY: reads four registers into locals; no memory is touched.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            "mov {bx}, rbx",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            bx = out(reg) bx,
        );
    }
    let mut stack = vec![0u8; size];
    let n = {
        use ichnos_code::memory::Memory as _;
        let mut m = ichnos_code::memory::ProcessMemory::current();
        // Up to the end of the stack mapping, as the kernel copies: the
        // longest read that succeeds (halving until one did dropped up to
        // half the stack, and the walk, through a debug build's large
        // frames, ran off the copy where this thread's stack lay near its
        // mapping's end).
        let (mut good, mut bad) = (0, most.min(size) + 8);
        while bad - good > 8 {
            let mid = usize::midpoint(good, bad) / 8 * 8;
            if m.read(sp, &mut stack[..mid]).is_ok() {
                good = mid;
            } else {
                bad = mid;
            }
        }
        good
    };
    let pid = std::process::id();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() }.cast_unsigned();
    let mut r = Vec::new();
    let push = |r: &mut Vec<u8>, v: u64| r.extend_from_slice(&v.to_le_bytes());
    push(&mut r, 0); // header, filled below
    push(&mut r, ip);
    r.extend_from_slice(&pid.to_le_bytes());
    r.extend_from_slice(&tid.to_le_bytes());
    push(&mut r, time);
    push(&mut r, 0); // cpu, res
    push(&mut r, 1_000_000); // period
    push(&mut r, 2); // regs ABI 64
    push(&mut r, bx);
    push(&mut r, bp);
    push(&mut r, sp);
    push(&mut r, ip);
    push(&mut r, stack.len() as u64);
    r.extend_from_slice(&stack);
    push(&mut r, n as u64);
    let size = u16::try_from(r.len()).unwrap();
    r[..4].copy_from_slice(&RECORD_SAMPLE.to_le_bytes());
    r[6..8].copy_from_slice(&size.to_le_bytes());
    assert_eq!(format.regs_user.count_ones(), 4);
    r
}

/// The format of the samples [`sample_here`] makes.
pub(super) fn format() -> SampleFormat {
    let config = EventConfig {
        kind: EventKind::CpuClock,
        frequency: 1000,
        stack_user: 16 << 10,
        regs_user: EventConfig::UNWIND_REGS,
        inherit: false,
        enable_on_exec: false,
        disabled: true,
        wakeup_watermark: 1,
        side_band: true,
        build_ids: false,
        context_switches: false,
        kernel: false,
        kernel_stacks: 0,
        exclude_idle: false,
        identify: false,
    };
    SampleFormat::of(&config.attr())
}

/// A recorder of samples of `format` from `start` on, writing to a file
/// in `dir`.
pub(super) fn recorder(
    format: SampleFormat,
    dir: &std::path::Path,
    start: u64,
) -> (Recorder, std::thread::JoinHandle<output::WriterResult>) {
    let file = std::fs::File::create(dir.join("x.data")).unwrap();
    let (output, writer) = output::start(file, start).unwrap();
    let recorder = Recorder {
        attached: Vec::new(),
        spaces: Spaces::new(ichnos_code::elf::RowChoice::SframeThenEhFrame),
        interner: Interner::default(),
        output,
        sorter: Sorter::new(vec![format]),
        options: ichnos_code::UnwindOptions::default(),
        frames: Vec::with_capacity(256),
        stack: Vec::with_capacity(256),
        samples: 0,
        complete: 0,
        past_copy: 0,
        cut_short: 0,
        at_frame_limit: 0,
        live_stack: None,
        untouched: Some(super::untouched::UntouchedPages::new(true)),
        lost: 0,
        scratch: Vec::new(),
        stack_tops: super::stack_tops::StackTops::default(),
        off_cpu: super::off_cpu::OffCpu::default(),
        kernel_sampled: false,
        kernel_symbols: None,
        kernel_frames_left_out: 0,
    };
    (recorder, writer)
}

#[test]
fn a_sample_seen_before_costs_no_allocation() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    let record = sample_here(&format, start);
    let round = |recorder: &mut Recorder, records: usize| {
        for _ in 0..records {
            // Staged as drain stages: the stack cut where the thread's
            // complete stacks end, once one has.
            let (tops, untouched) = (&recorder.stack_tops, &mut recorder.untouched);
            recorder.sorter.stage_record(&record, 0, start, |sample| {
                if let Some(untouched) = untouched.as_mut() {
                    untouched.see(sample);
                }
                tops.needed(sample)
            });
        }
        if let Some(untouched) = recorder.untouched.as_mut() {
            untouched.make_present();
        }
        let mut sorter = std::mem::take(&mut recorder.sorter);
        sorter.release(u64::MAX, |r, staged| recorder.handle(r, staged.stack_cut));
        recorder.sorter = sorter;
        if let Some(untouched) = recorder.untouched.as_mut() {
            untouched.make_present();
        }
    };
    // The first rounds build the process's model, intern the stack and
    // grow the buffers.
    for _ in 0..3 {
        round(&mut recorder, 32);
    }
    assert_eq!(recorder.samples, 96);
    assert_eq!(recorder.complete, 96, "this thread's stack unwinds whole");
    let before = allocations();
    for _ in 0..20 {
        round(&mut recorder, 32);
    }
    assert_eq!(allocations() - before, 0, "allocations per 640 samples");
    assert_eq!(recorder.samples, 736);
    assert_eq!(recorder.interner.len(), 1);
    // The stacks after the first were staged cut to what the frames
    // need, and still unwound whole, to the same stack.
    let Ok(ichnos_perf::Record::Sample(sample)) = ichnos_perf::record::parse(&format, &record)
    else {
        panic!("not a sample")
    };
    let need = recorder.stack_tops.needed(&sample).expect("a cut");
    assert!(
        need < sample.stack_user_size,
        "{need} of {}",
        sample.stack_user_size
    );
    assert_eq!(recorder.complete, 736);
    super::close(recorder.output, writer, 0).unwrap();
}
