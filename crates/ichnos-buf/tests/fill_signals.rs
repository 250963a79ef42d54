//! Records written from signal handlers that interrupt a write of the
//! same thread, deterministically (`raise` between reserve and commit) and
//! under a storm of signals from another thread.

use ichnos_buf::fill::{FillBuffer, Flush};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

static DELIVERED: Mutex<Vec<(Vec<u8>, u64)>> = Mutex::new(Vec::new());
static SMALL: OnceLock<FillBuffer> = OnceLock::new();
static LARGE: OnceLock<FillBuffer> = OnceLock::new();
/// Which buffer the handler writes to: 0 = small, 1 = large.
static TARGET: AtomicUsize = AtomicUsize::new(0);
static HANDLER_RUNS: AtomicU64 = AtomicU64::new(0);
/// Serialises the tests: they share the handler's buffers and signals.
static SERIAL: Mutex<()> = Mutex::new(());

fn make(capacity: usize) -> FillBuffer {
    FillBuffer::trace(capacity, |f: &Flush<'_>| {
        // A flush may run inside the handler; this test's sink takes a
        // lock, which is safe only because the handler never runs while
        // this thread holds it (the test writes nothing while holding it).
        DELIVERED
            .lock()
            .unwrap()
            .push((f.data.to_vec(), f.lost_records));
    })
    .unwrap()
}

/// 32 bytes: two records.
fn buffer() -> &'static FillBuffer {
    SMALL.get_or_init(|| make(32))
}

fn large() -> &'static FillBuffer {
    LARGE.get_or_init(|| make(1 << 16))
}

extern "C" fn handler(_: libc::c_int) {
    let n = HANDLER_RUNS.fetch_add(1, Ordering::Relaxed);
    let buf = if TARGET.load(Ordering::Relaxed) == 0 {
        buffer()
    } else {
        large()
    };
    let _ = buf.write_with(16, |r| {
        r[..8].copy_from_slice(&(0x4800_0000_0000_0000 | n).to_le_bytes());
        r[8..].copy_from_slice(&(!(0x4800_0000_0000_0000 | n)).to_le_bytes());
    });
}

fn install(sig: libc::c_int) {
    // SAFETY: a plain handler that only writes to a fill buffer, which is
    // the async-signal-safe use this crate promises.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&raw mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &raw const sa, std::ptr::null_mut()), 0);
    }
}

fn main_record(n: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&n.to_le_bytes());
    r[8..].copy_from_slice(&(!n).to_le_bytes());
    r
}

/// The tests' lock, the SIGUSR1 handler writing to the small buffer, and
/// that buffer flushed and its deliveries cleared.
fn small_buffer_with_handler() -> (std::sync::MutexGuard<'static, ()>, &'static FillBuffer) {
    let serial = SERIAL.lock().unwrap();
    install(libc::SIGUSR1);
    TARGET.store(0, Ordering::Relaxed);
    let buf = buffer();
    buf.flush();
    take_delivered();
    (serial, buf)
}

fn take_delivered() -> Vec<(Vec<u8>, u64)> {
    std::mem::take(&mut *DELIVERED.lock().unwrap())
}

#[test]
fn handler_between_reserve_and_commit_orders_by_reservation() {
    let (_serial, buf) = small_buffer_with_handler();
    let before = HANDLER_RUNS.load(Ordering::Relaxed);
    let ptr = buf.reserve_raw(16).unwrap();
    // SAFETY: raise delivers to this thread before it returns.
    unsafe { libc::raise(libc::SIGUSR1) };
    // SAFETY: 16 bytes reserved above.
    unsafe { std::ptr::copy_nonoverlapping(main_record(7).as_ptr(), ptr, 16) };
    buf.commit_raw(16);
    assert!(buf.flush());
    let got = take_delivered();
    assert_eq!(got.len(), 1);
    let n = 0x4800_0000_0000_0000 | before;
    let mut want = main_record(7).to_vec();
    want.extend_from_slice(&n.to_le_bytes());
    want.extend_from_slice(&(!n).to_le_bytes());
    assert_eq!(got[0], (want, 0));
}

#[test]
fn handler_that_would_need_a_flush_while_a_write_is_open_is_dropped_and_counted() {
    let (_serial, buf) = small_buffer_with_handler();
    buf.write(&main_record(1)).unwrap();
    let ptr = buf.reserve_raw(16).unwrap(); // the buffer (32 bytes) is now full
                                            // SAFETY: as above.
    unsafe { libc::raise(libc::SIGUSR1) };
    // SAFETY: 16 bytes reserved above.
    unsafe { std::ptr::copy_nonoverlapping(main_record(2).as_ptr(), ptr, 16) };
    buf.commit_raw(16);
    assert_eq!(buf.stats().lost_records, 1);
    buf.write(&main_record(3)).unwrap(); // overflows: flushes 1 and 2
    buf.flush();
    let got = take_delivered();
    assert_eq!(
        got[0],
        ([main_record(1), main_record(2)].concat(), 1),
        "lost count rides on the next flush"
    );
    assert_eq!(got[1], (main_record(3).to_vec(), 0));
}

#[test]
fn storm_of_signals_leaves_every_record_whole() {
    let _serial = SERIAL.lock().unwrap();
    install(libc::SIGUSR2);
    let buf = large();
    TARGET.store(1, Ordering::Relaxed);
    buf.flush();
    take_delivered();
    let runs_before = HANDLER_RUNS.load(Ordering::Relaxed);
    // SAFETY: pthread_self has no preconditions.
    let target = unsafe { libc::pthread_self() };
    let done = std::sync::Arc::new(AtomicUsize::new(0));
    let sender = {
        let done = done.clone();
        let target = target as usize;
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while done.load(Ordering::Relaxed) == 0 {
                // SAFETY: the target thread outlives this loop (it waits
                // for us below).
                unsafe { libc::pthread_kill(target as libc::pthread_t, libc::SIGUSR2) };
                sent += 1;
                std::hint::spin_loop();
            }
            sent
        })
    };
    // Write until many signals have landed, wherever they landed.
    let mut records = 0u64;
    while HANDLER_RUNS.load(Ordering::Relaxed) - runs_before < 20_000 {
        buf.write(&main_record(records)).unwrap();
        records += 1;
    }
    done.store(1, Ordering::Relaxed);
    sender.join().unwrap();
    buf.flush();
    let got = take_delivered();
    let runs = HANDLER_RUNS.load(Ordering::Relaxed) - runs_before;
    let lost: u64 = got.iter().map(|g| g.1).sum::<u64>() + buf.stats().lost_records;
    let mut next_main = 0;
    let mut handler_records = 0;
    for (data, _) in &got {
        assert_eq!(data.len() % 16, 0);
        for r in data.chunks(16) {
            let n = u64::from_le_bytes(r[..8].try_into().unwrap());
            assert_eq!(
                u64::from_le_bytes(r[8..].try_into().unwrap()),
                !n,
                "torn record"
            );
            if n >> 56 == 0x48 {
                handler_records += 1;
            } else {
                assert_eq!(n, next_main, "main records in order, none missing");
                next_main += 1;
            }
        }
    }
    assert_eq!(next_main, records);
    eprintln!("storm: {runs} handler runs, {handler_records} delivered, {lost} dropped");
    assert!(handler_records > 0, "the storm reached the writer");
    assert_eq!(
        handler_records + lost,
        runs,
        "every handler record is delivered or counted"
    );
}
