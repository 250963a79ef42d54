//! The writers of buffer 0 in a thread block the program provides
//! (`RingWriter`, `TraceWriter`): made only where their checks hold, and
//! writing what `write_with` writes — first writes, wraps, flushes, a
//! slot left by a buffer that is gone, and records written by signal
//! handlers in the middle of the thread's own.
//!
//! The block is this test program's own initial-exec TLS, declared as the
//! trace runtime declares it; it is provided before any buffer is made.
#![cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]

use ichnos_buf::fill::{FillBuffer, Flush, FlushReason, THREAD_BLOCK_ALIGN, THREAD_BLOCK_SIZE};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

core::arch::global_asm!(
    ".pushsection .tbss.test_thread_block,\"awT\",@nobits",
    ".p2align {align}",
    ".globl test_thread_block",
    ".hidden test_thread_block",
    ".type test_thread_block,@object",
    ".size test_thread_block,{size}",
    "test_thread_block:",
    ".zero {size}",
    ".popsection",
    size = const THREAD_BLOCK_SIZE,
    align = const THREAD_BLOCK_ALIGN.trailing_zeros(),
);

/// Provides the block (once, before any buffer) and serialises the
/// tests: a writer exists only for the buffer holding index 0, so each
/// test makes its buffers while no other test's exist, its first one
/// takes index 0, and it drops them all before it ends.
fn serial() -> MutexGuard<'static, ()> {
    static PROVIDE: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    PROVIDE.call_once(|| {
        let offset: isize;
        // SAFETY: reads the GOT entry that holds the block's offset from
        // the thread pointer.
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + test_thread_block@GOTTPOFF]",
                o = out(reg) offset,
                options(nostack, preserves_flags, readonly, pure),
            );
        }
        // SAFETY: this program's own initial-exec TLS, zeroed in every
        // thread, used by nothing else.
        unsafe { ichnos_buf::fill::provide_thread_block(offset) }.unwrap();
    });
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Record `n`: `n`, then `!n` (a torn record shows as a mismatch).
fn fill(n: u64) -> impl FnOnce(&mut [u8; 16]) {
    move |r| {
        r[..8].copy_from_slice(&n.to_le_bytes());
        r[8..].copy_from_slice(&(!n).to_le_bytes());
    }
}

/// The records' numbers, each checked whole.
fn numbers(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(16)
        .map(|r| {
            let n = u64::from_le_bytes(r[..8].try_into().unwrap());
            let not = u64::from_le_bytes(r[8..].try_into().unwrap());
            assert_eq!(not, !n, "a torn record");
            n
        })
        .collect()
}

type Deliveries = Arc<Mutex<Vec<(Vec<u8>, FlushReason, u64)>>>;

/// A trace buffer whose flushes are kept.
fn trace(capacity: usize) -> (FillBuffer, Deliveries) {
    let out: Deliveries = Arc::default();
    let sink = out.clone();
    let buffer = FillBuffer::trace(capacity, move |f: &Flush<'_>| {
        sink.lock()
            .unwrap()
            .push((f.data.to_vec(), f.reason, f.lost_records));
    })
    .unwrap();
    (buffer, out)
}

#[test]
fn writers_are_made_only_for_buffer_0_of_their_kind_and_size() {
    let _serial = serial();
    let ring = FillBuffer::circular(4096, 16).unwrap();
    assert!(ring.ring_writer::<16>().is_some());
    assert!(ring.ring_writer::<8>().is_none(), "another stride");
    assert!(ring.trace_writer::<16>().is_none(), "another kind");
    // Buffer 1: its slot is not in the block.
    let (second, _) = trace(4096);
    assert!(second.trace_writer::<16>().is_none());
    drop(ring);
    // Buffer 0 is free again: the next buffer made is it.
    let (first, _) = trace(64);
    assert!(first.trace_writer::<16>().is_some());
    assert!(first.trace_writer::<64>().is_some());
    assert!(
        first.trace_writer::<65>().is_none(),
        "larger than the buffer"
    );
    assert!(first.ring_writer::<16>().is_none(), "another kind");
    drop(first);
    let guarded = FillBuffer::trace_guarded(4096, |_: &Flush<'_>| {}).unwrap();
    assert!(guarded.trace_writer::<16>().is_none(), "guard-page mode");
}

#[test]
fn a_ring_writer_keeps_the_newest_records_from_the_first_write_on() {
    let _serial = serial();
    let ring = FillBuffer::circular(1024, 16).unwrap();
    // A thread of its own: its first write sets its ring up.
    std::thread::scope(|s| {
        s.spawn(|| {
            let writer = ring.ring_writer::<16>().unwrap();
            for n in 0..1000 {
                assert!(writer.write(fill(n)));
            }
            assert_eq!(ring.stats().position, 1000);
            let newest = ring.newest_first().unwrap();
            let expected: Vec<u64> = (936..1000).rev().collect();
            assert_eq!(
                numbers(&newest.iter().flatten().copied().collect::<Vec<_>>()),
                expected
            );
        });
    });
}

#[test]
fn a_trace_writer_hands_over_every_record_in_order() {
    let _serial = serial();
    // 16 records a buffer: 1000 records make 62 full flushes and one at
    // the thread's exit.
    let (buffer, out) = trace(256);
    // Joined, not scoped: a scoped thread counts as done before its
    // thread-local destructors (where its exit flush is) have run.
    let buffer = Arc::new(buffer);
    let theirs = buffer.clone();
    std::thread::spawn(move || {
        let writer = theirs.trace_writer::<16>().unwrap();
        for n in 0..1000 {
            assert!(writer.write(fill(n)));
        }
    })
    .join()
    .unwrap();
    let delivered = out.lock().unwrap();
    assert_eq!(delivered.len(), 63);
    assert!(delivered[..62]
        .iter()
        .all(|(d, r, _)| d.len() == 256 && *r == FlushReason::Full));
    assert_eq!(delivered[62].1, FlushReason::ThreadExit);
    assert!(delivered.iter().all(|&(_, _, lost)| lost == 0));
    let all: Vec<u8> = delivered.iter().flat_map(|(d, _, _)| d.clone()).collect();
    assert_eq!(numbers(&all), (0..1000).collect::<Vec<u64>>());
}

/// A thread's slot still set up for a buffer that is gone serves the
/// next buffer 0 only once set up afresh for it: nothing lands in the
/// old memory, nothing of the old records in the new buffer.
#[test]
fn a_slot_left_by_a_buffer_that_is_gone_is_set_up_afresh() {
    let _serial = serial();
    let (old, old_out) = trace(4096);
    let writer = old.trace_writer::<16>().unwrap();
    for n in 0..5 {
        assert!(writer.write(fill(n)));
    }
    old.flush();
    drop(old);
    assert_eq!(numbers(&old_out.lock().unwrap()[0].0), [0, 1, 2, 3, 4]);

    let (new, new_out) = trace(4096);
    let writer = new.trace_writer::<16>().unwrap();
    for n in 100..103 {
        assert!(writer.write(fill(n)));
    }
    new.flush();
    assert_eq!(
        old_out.lock().unwrap().len(),
        1,
        "nothing more for the old buffer"
    );
    let delivered = new_out.lock().unwrap();
    assert_eq!(delivered.len(), 1);
    assert_eq!(numbers(&delivered[0].0), [100, 101, 102]);
}

/// The buffer the signal handler writes to, while the test runs.
static HANDLED: AtomicPtr<FillBuffer> = AtomicPtr::new(std::ptr::null_mut());
/// What the handler wrote and dropped.
static HANDLER_WROTE: AtomicU64 = AtomicU64::new(0);
static HANDLER_DROPPED: AtomicU64 = AtomicU64::new(0);
/// The number of the handler's next record (its records are numbered
/// from [`HANDLER_BASE`], apart from the thread's own).
static HANDLER_NEXT: AtomicU64 = AtomicU64::new(HANDLER_BASE);
const HANDLER_BASE: u64 = 1 << 40;
/// The thread's own records.
const OWN: u64 = 100_000;

extern "C" fn handler(_: libc::c_int) {
    // SAFETY: the test's buffer, freed only after the last signal and
    // once the pointer is cleared.
    let Some(buffer) = (unsafe { HANDLED.load(Ordering::Acquire).as_ref() }) else {
        return;
    };
    let writer = buffer
        .trace_writer::<16>()
        .expect("buffer 0, a trace buffer");
    let n = HANDLER_NEXT.fetch_add(1, Ordering::Relaxed);
    if writer.write(fill(n)) {
        HANDLER_WROTE.fetch_add(1, Ordering::Relaxed);
    } else {
        HANDLER_DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Frees the handler's buffer when dropped.
struct Free;

impl Drop for Free {
    fn drop(&mut self) {
        let buffer = HANDLED.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !buffer.is_null() {
            // SAFETY: from Box::into_raw in the test; cleared first, so no
            // handler sees it from here on, and freed once.
            drop(unsafe { Box::from_raw(buffer) });
        }
    }
}

/// A signal handler writes through the same writer while the thread's
/// own write is open (raised between its reservation and its commit, on
/// every 7th record): every record stays whole, the thread's own arrive
/// all and in order, each handler's record right after the record it
/// interrupted, and a handler's record that would need a flush while the
/// interrupted write is open is dropped and counted (not lost silently).
#[test]
fn a_handler_writing_inside_an_open_write_keeps_both_records_whole() {
    let _serial = serial();
    let (buffer, out) = trace(4096);
    HANDLED.store(Box::into_raw(Box::new(buffer)), Ordering::Release);
    // Freed however the test ends: a buffer left holding index 0 would
    // fail every later test for want of a writer, hiding this failure.
    let free = Free;
    // SAFETY: a handler that only writes to a fill buffer.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&raw mut sa.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &raw const sa, std::ptr::null_mut()),
            0
        );
    }
    // A thread of its own, joined (so its exit flush is done) before the
    // deliveries are read.
    std::thread::spawn(|| {
        // SAFETY: the pointer just stored, live until after the join.
        let buffer = unsafe { &*HANDLED.load(Ordering::Acquire) };
        let writer = buffer.trace_writer::<16>().unwrap();
        for n in 0..OWN {
            assert!(writer.write(|r| {
                fill(n)(r);
                if n % 7 == 0 {
                    // SAFETY: raise has no preconditions; the handler
                    // runs before it returns.
                    unsafe { libc::raise(libc::SIGUSR2) };
                }
            }));
        }
    })
    .join()
    .unwrap();
    drop(free);

    let delivered = out.lock().unwrap();
    let all: Vec<u8> = delivered.iter().flat_map(|(d, _, _)| d.clone()).collect();
    let numbers = numbers(&all);
    let own: Vec<u64> = numbers
        .iter()
        .copied()
        .filter(|&n| n < HANDLER_BASE)
        .collect();
    // The first difference, not two vectors of a hundred thousand.
    let first_wrong = own.iter().zip(0..).position(|(&n, i)| n != i);
    assert_eq!(
        (own.len() as u64, first_wrong),
        (OWN, None),
        "the thread's own records"
    );
    let wrote = HANDLER_WROTE.load(Ordering::Relaxed);
    let dropped = HANDLER_DROPPED.load(Ordering::Relaxed);
    assert_eq!(wrote + dropped, OWN.div_ceil(7), "one handler a 7th record");
    assert!(wrote > dropped, "{wrote} written, {dropped} dropped");
    assert_eq!(numbers.len() as u64, OWN + wrote);
    // Each handler record right after the record it interrupted.
    for (i, pair) in numbers.windows(2).enumerate() {
        if pair[1] >= HANDLER_BASE {
            assert!(
                pair[0] < HANDLER_BASE && pair[0] % 7 == 0,
                "record {i}: {pair:?}"
            );
        }
    }
    let lost: u64 = delivered.iter().map(|&(_, _, l)| l).sum();
    assert_eq!(lost, dropped, "every dropped record counted");
}
