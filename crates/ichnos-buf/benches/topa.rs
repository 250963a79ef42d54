//! Region-table buffer with producer and consumer on two threads, against
//! rtrb and a perf-style single-region ring (one power-of-two array,
//! masked positions, the same head/tail protocol), same run: 64 MiB per
//! iteration in records of 8, 64 and 4096 bytes, through a 4 MiB buffer.
//!
//! Every consumer has the same policy, the region-table buffer's: it
//! wakes once the producer has written half the buffer (the watermark)
//! since it last woke, or is done, and then reads everything readable in
//! one batch. The region-table consumer sleeps on its futex, which the
//! producer bumps at the watermark; the peers, which have no wake-up,
//! yield in between (each look loads the producer's position, so they are
//! busy where ichnos sleeps). Every buffer's memory is faulted in before
//! the clock starts (ichnos: `populate`; rtrb: one pass of writes and
//! reads over the whole ring; the single-region ring: written when made),
//! and rtrb is written through `write_chunk_uninit`, each byte once.
//! `CONSUMER=poll` gives every consumer the peers' own policy instead
//! (take whatever is readable, as soon as it is).
//!
//! `cargo bench -p ichnos-buf --bench topa` prints criterion's report and
//! then GB/s, records/s and the ratio to rtrb.

use criterion::{black_box, Criterion, Throughput};
use ichnos_buf::topa::{AllocFlags, Config, Mode, TopaBuffer, WaitOutcome};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../../../tools/bench/estimates.rs"]
mod estimates;

const TOTAL: u64 = 64 << 20;
const BUFFER: usize = 4 << 20;

/// Whether consumers take whatever is readable at once (`CONSUMER=poll`)
/// rather than waiting for the watermark.
fn polling() -> bool {
    std::env::var("CONSUMER").is_ok_and(|v| v == "poll")
}

/// Bytes a consumer waits for before it reads: half the buffer, or one
/// byte when polling. The last bytes of a run are read when the producer
/// is done, whatever their number.
fn watermark() -> u64 {
    if polling() {
        1
    } else {
        BUFFER as u64 / 2
    }
}

fn ichnos(record: usize) -> Duration {
    let config = Config {
        mode: Mode::BlockOnFull {
            timeout: Duration::from_secs(10),
        },
        ..Config::default()
    };
    // 1024 pages: regions of 2 MiB, 1 MiB, ... as pt_buffer_init_topa makes.
    let buf = TopaBuffer::init(
        0,
        BUFFER / 4096,
        AllocFlags {
            populate: true,
            ..AllocFlags::default()
        },
        config,
    )
    .unwrap();
    let (mut producer, mut consumer) = buf.split().unwrap();
    let poll = polling();
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        let rec = vec![0x5au8; record];
        for _ in 0..TOTAL / record as u64 {
            producer.write_record(&rec).unwrap();
        }
    });
    let mut sum = 0u64;
    while consumer.tail() < TOTAL {
        // Waiting, the consumer sleeps on the futex until the producer has
        // written a watermark's worth since its last notification (or is
        // gone), then reads everything there is; polling, it reads
        // whatever there is as soon as there is any.
        if consumer.available() == 0 {
            if poll {
                std::thread::yield_now();
                continue;
            }
            if consumer.wait(None) == WaitOutcome::ProducerGone && consumer.available() == 0 {
                break;
            }
        }
        let head = consumer.head();
        for s in consumer.segments(consumer.tail()..head) {
            sum += u64::from(s[0]) + u64::from(s[s.len() - 1]);
        }
        consumer.advance(head).unwrap();
    }
    writer.join().unwrap();
    black_box(sum);
    start.elapsed()
}

fn rtrb(record: usize) -> Duration {
    let (mut tx, mut rx) = rtrb::RingBuffer::<u8>::new(BUFFER);
    // Fault the ring's memory in, as the region-table buffer's is.
    if let Ok(mut chunk) = tx.write_chunk(BUFFER) {
        let (a, b) = chunk.as_mut_slices();
        a.fill(1);
        b.fill(1);
        chunk.commit_all();
    }
    rx.read_chunk(BUFFER).unwrap().commit_all();
    let watermark = watermark();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = Instant::now();
    let writer_done = Arc::clone(&done);
    let writer = std::thread::spawn(move || {
        let rec = vec![0x5au8; record];
        for _ in 0..TOTAL / record as u64 {
            loop {
                // The uninitialised chunk: `write_chunk` would first write
                // a default into every slot, each byte twice.
                if let Ok(mut chunk) = tx.write_chunk_uninit(record) {
                    let (a, b) = chunk.as_mut_slices();
                    let split = a.len();
                    // SAFETY: MaybeUninit<u8> has u8's layout; the copies
                    // fill both slices whole from `rec`, which is
                    // `record` bytes long, as a and b together are.
                    unsafe {
                        std::ptr::copy_nonoverlapping(rec.as_ptr(), a.as_mut_ptr().cast(), split);
                        std::ptr::copy_nonoverlapping(
                            rec.as_ptr().add(split),
                            b.as_mut_ptr().cast(),
                            b.len(),
                        );
                        // SAFETY: every slot of the chunk was written above.
                        chunk.commit_all();
                    }
                    break;
                }
                std::hint::spin_loop();
            }
        }
        writer_done.store(true, Ordering::Release);
    });
    let mut got = 0u64;
    let mut sum = 0u64;
    // Where the producer was when the consumer last woke: as ichnos's
    // futex, it wakes once a watermark's worth more has been written.
    let mut woke_at = 0u64;
    while got < TOTAL {
        let n = rx.slots();
        let written = got + n as u64;
        if n == 0 || (written - woke_at < watermark && !done.load(Ordering::Acquire)) {
            std::thread::yield_now();
            continue;
        }
        woke_at = written;
        let chunk = rx.read_chunk(n).unwrap();
        let (a, b) = chunk.as_slices();
        for s in [a, b] {
            if !s.is_empty() {
                sum += u64::from(s[0]) + u64::from(s[s.len() - 1]);
            }
        }
        chunk.commit_all();
        got += n as u64;
    }
    writer.join().unwrap();
    black_box(sum);
    start.elapsed()
}

/// The perf data ring's shape: one region, positions masked.
struct SingleRing {
    data: Box<[std::cell::UnsafeCell<u8>]>,
    head: padded::Padded<AtomicU64>,
    tail: padded::Padded<AtomicU64>,
}

// SAFETY: the producer writes only [head, tail + cap) and the consumer
// reads only [tail, head), ordered by the Release/Acquire pairs below.
unsafe impl Sync for SingleRing {}

mod padded {
    /// A value on a cache line of its own.
    #[repr(align(64))]
    pub struct Padded<T>(pub T);
}

fn single_region(record: usize) -> Duration {
    let ring = Arc::new(SingleRing {
        // Written with a byte that is not 0, so that the pages are really
        // touched (a zeroed allocation may be left unfaulted).
        data: (0..BUFFER).map(|_| std::cell::UnsafeCell::new(1)).collect(),
        head: padded::Padded(AtomicU64::new(0)),
        tail: padded::Padded(AtomicU64::new(0)),
    });
    let mask = BUFFER as u64 - 1;
    let watermark = watermark();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = Instant::now();
    let writer = {
        let ring = ring.clone();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let rec = vec![0x5au8; record];
            let base = std::cell::UnsafeCell::raw_get(ring.data.as_ptr());
            let mut head = 0u64;
            let mut tail = 0u64;
            for _ in 0..TOTAL / record as u64 {
                while head + record as u64 > tail + BUFFER as u64 {
                    tail = ring.tail.0.load(Ordering::Acquire);
                    std::hint::spin_loop();
                }
                let at = (head & mask) as usize;
                let first = record.min(BUFFER - at);
                // SAFETY: [head, head + record) is free space (checked above).
                unsafe {
                    std::ptr::copy_nonoverlapping(rec.as_ptr(), base.add(at), first);
                    if first < record {
                        std::ptr::copy_nonoverlapping(
                            rec.as_ptr().add(first),
                            base,
                            record - first,
                        );
                    }
                }
                head += record as u64;
                ring.head.0.store(head, Ordering::Release);
            }
            done.store(true, Ordering::Release);
        })
    };
    let base = ring.data.as_ptr().cast::<u8>();
    let mut tail = 0u64;
    // As rtrb's consumer: woken once a watermark's worth more is written.
    let mut woke_at = 0u64;
    let mut sum = 0u64;
    while tail < TOTAL {
        let finished = done.load(Ordering::Acquire);
        let head = ring.head.0.load(Ordering::Acquire);
        if head == tail || (head - woke_at < watermark && !finished) {
            std::thread::yield_now();
            continue;
        }
        woke_at = head;
        // SAFETY: [tail, head) is published (Acquire above).
        unsafe {
            sum += u64::from(*base.add((tail & mask) as usize))
                + u64::from(*base.add(((head - 1) & mask) as usize));
        }
        tail = head;
        ring.tail.0.store(tail, Ordering::Release);
    }
    writer.join().unwrap();
    black_box(sum);
    start.elapsed()
}

fn main() {
    // Only this run's estimates go into its table.
    let run = estimates::Run::start();
    let mut c = Criterion::default().configure_from_args();
    for record in [8usize, 64, 4096] {
        let mut group = c.benchmark_group(format!("topa/{record}"));
        group.throughput(Throughput::Bytes(TOTAL));
        group.sample_size(10);
        group.bench_function("ichnos_region_table", |b| {
            b.iter_custom(|n| (0..n).map(|_| ichnos(record)).sum());
        });
        group.bench_function("rtrb", |b| {
            b.iter_custom(|n| (0..n).map(|_| rtrb(record)).sum());
        });
        group.bench_function("single_region_ring", |b| {
            b.iter_custom(|n| (0..n).map(|_| single_region(record)).sum());
        });
        group.finish();
    }
    c.final_summary();

    let policy = if polling() {
        "every consumer polling"
    } else {
        "every consumer waiting for the watermark"
    };
    println!("\n64 MiB through a 4 MiB buffer, producer and consumer on two threads, {policy}, this run:");
    for record in [8usize, 64, 4096] {
        let group = format!("topa/{record}");
        let rtrb_ns = run.mean_ns(&group, "rtrb");
        for f in ["ichnos_region_table", "rtrb", "single_region_ring"] {
            let Some(ns) = run.mean_ns(&group, f) else {
                continue;
            };
            let gbs = TOTAL as f64 / ns;
            let mrec = (TOTAL / record as u64) as f64 / ns * 1e3;
            let ratio = rtrb_ns.map_or("-".to_owned(), |r| format!("{:.2}x", r / ns));
            println!("{record:>5}-byte records  {f:<20} {gbs:>6.2} GB/s {mrec:>8.1} M records/s  {ratio:>6} of rtrb's speed");
        }
    }
}
