//! Fill buffer fast path against a plain store loop into a preallocated
//! array (the limit), rtrb and crossbeam's `ArrayQueue`, same run, 8- and
//! 16-byte records. Each measured iteration writes one batch of 4096
//! records; the peers' queues are drained outside the timed part.
//!
//! `cargo bench -p ichnos-buf --bench fill` prints criterion's report and
//! then a table of nanoseconds per record and ratios to the store loop.

use criterion::{black_box, Criterion, Throughput};
use ichnos_buf::fill::FillBuffer;
use std::time::{Duration, Instant};

#[path = "../../../tools/bench/estimates.rs"]
mod estimates;

const BATCH: usize = 4096;

fn record<const N: usize>(i: u64) -> [u8; N] {
    let mut r = [0u8; N];
    r[..8].copy_from_slice(&i.to_le_bytes());
    if N >= 16 {
        r[8..16].copy_from_slice(&(!i).to_le_bytes());
    }
    r
}

fn bench_size<const N: usize>(c: &mut Criterion) {
    let name = format!("fill/{N}");
    let mut group = c.benchmark_group(&name);
    group.throughput(Throughput::Elements(BATCH as u64));

    let mut array = vec![[0u8; N]; BATCH];
    group.bench_function("plain_store", |b| {
        b.iter(|| {
            let base = black_box(7u64);
            for (i, slot) in array.iter_mut().enumerate() {
                *slot = record::<N>(base + i as u64);
            }
            black_box(&mut array);
        });
    });

    let ring = FillBuffer::circular(1 << 16, N).unwrap();
    group.bench_function("ichnos_circular", |b| {
        b.iter(|| {
            let base = black_box(7u64);
            for i in 0..BATCH as u64 {
                let rec = record::<N>(base + i);
                let _ = ring.write_with(N, |r| r.copy_from_slice(&rec));
            }
        });
    });

    let trace = FillBuffer::trace(1 << 20, |f| {
        black_box(f.data.len());
    })
    .unwrap();
    group.bench_function("ichnos_trace", |b| {
        b.iter(|| {
            let base = black_box(7u64);
            for i in 0..BATCH as u64 {
                let rec = record::<N>(base + i);
                let _ = trace.write_with(N, |r| r.copy_from_slice(&rec));
            }
        });
    });

    let guarded = FillBuffer::trace_guarded(1 << 20, |f| {
        black_box(f.data.len());
    })
    .unwrap();
    group.bench_function("ichnos_trace_guarded", |b| {
        b.iter(|| {
            let base = black_box(7u64);
            for i in 0..BATCH as u64 {
                let _ = guarded.write(&record::<N>(base + i));
            }
        });
    });

    // Several entries with one pointer adjust: 64 records per reservation.
    group.bench_function("ichnos_trace_64_per_commit", |b| {
        b.iter(|| {
            let base = black_box(7u64);
            for chunk in 0..(BATCH / 64) as u64 {
                let _ = trace.write_records::<N>(64, |recs| {
                    for (j, slot) in recs.iter_mut().enumerate() {
                        *slot = record::<N>(base + chunk * 64 + j as u64);
                    }
                });
            }
        });
    });

    let (mut tx, mut rx) = rtrb::RingBuffer::<[u8; N]>::new(BATCH);
    group.bench_function("rtrb", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let base = black_box(7u64);
                let start = Instant::now();
                for i in 0..BATCH as u64 {
                    let _ = tx.push(record::<N>(base + i));
                }
                total += start.elapsed();
                while rx.pop().is_ok() {}
            }
            total
        });
    });

    let queue = crossbeam_queue::ArrayQueue::<[u8; N]>::new(BATCH);
    group.bench_function("crossbeam_array_queue", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let base = black_box(7u64);
                let start = Instant::now();
                for i in 0..BATCH as u64 {
                    let _ = queue.push(record::<N>(base + i));
                }
                total += start.elapsed();
                while queue.pop().is_some() {}
            }
            total
        });
    });
    group.finish();
}

fn main() {
    // Only this run's estimates go into its table.
    let run = estimates::Run::start();
    let mut c = Criterion::default().configure_from_args();
    bench_size::<8>(&mut c);
    bench_size::<16>(&mut c);
    c.final_summary();

    let functions = [
        "plain_store",
        "ichnos_circular",
        "ichnos_trace",
        "ichnos_trace_guarded",
        "ichnos_trace_64_per_commit",
        "rtrb",
        "crossbeam_array_queue",
    ];
    println!("\nnanoseconds per record (and time over the plain store loop's), this run:");
    for size in [8, 16] {
        let group = format!("fill/{size}");
        let per_record = |f| run.mean_ns(&group, f).map(|ns| ns / BATCH as f64);
        let limit = per_record("plain_store");
        for f in functions {
            let show = per_record(f).map_or("-".to_owned(), |v| format!("{v:.2}"));
            let ratio = match (per_record(f), limit) {
                (Some(v), Some(l)) => format!("{:.2}x", v / l),
                _ => "-".to_owned(),
            };
            println!("{size:>3}-byte  {f:<28} {show:>7} ns  {ratio:>7}");
        }
    }
}
