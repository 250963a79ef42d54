//! How much of a busy thread's ring a snapshot keeps: the share of what
//! a flight recorder saves from threads that go on writing while it
//! copies them (`FillBuffer::snapshot_threads`, the path of SIGUSR2,
//! `ichnos_snapshot()`, a crash and the process's exit).
//!
//! Writer threads write 16-byte records (a TSC reading and a count, as a
//! trace runtime's hooks write theirs) without pause into a circular
//! buffer; the main thread takes snapshots 2 ms apart and counts the
//! records each kept of those its ring held (a full ring). The owner
//! overwrites the oldest records while the copy runs newest first, so
//! the share kept is set by how fast the copy goes against the writer.
//!
//! `cargo bench -p ichnos-buf --bench ring_snapshot [-- SNAPSHOTS]`
//! prints, per ring size and number of writers, the median share kept
//! with its quartiles, and the writers' records per second.

use ichnos_buf::fill::FillBuffer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const STRIDE: usize = 16;

/// One measurement: the shares kept by `snapshots` snapshots of full
/// rings, sorted, and the records written per second.
fn measure(capacity: usize, writers: usize, snapshots: usize) -> (Vec<f64>, f64) {
    let ring = FillBuffer::circular(capacity, STRIDE).expect("a ring");
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|_| {
            let (ring, stop) = (ring.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let tsc = now();
                    // A record dropped is counted by the buffer; none is
                    // here (the ring never refuses a record of its stride).
                    let _ = ring.write_with(STRIDE, |r| {
                        r[..8].copy_from_slice(&tsc.to_le_bytes());
                        r[8..].copy_from_slice(&count.to_le_bytes());
                    });
                    count += 1;
                }
                count
            })
        })
        .collect();
    let mut shares = Vec::with_capacity(snapshots * writers);
    let deadline = Instant::now() + Duration::from_secs(30);
    while shares.len() < snapshots * writers && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        for (_tid, records) in ring.snapshot_threads() {
            if records.position() >= capacity as u64 {
                shares.push(records.iter().count() as f64 / (capacity / STRIDE) as f64);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    let rate = written as f64 / started.elapsed().as_secs_f64();
    shares.sort_by(f64::total_cmp);
    (shares, rate)
}

/// The TSC (a clock reading where it has none).
fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc reads a counter; it has no preconditions.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    return std::time::UNIX_EPOCH
        .elapsed()
        .map_or(0, |d| d.as_nanos() as u64);
}

fn main() {
    // `cargo bench` passes `--bench`; a number is the snapshots to take.
    let snapshots = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(300);
    println!(
        "| ring | writers | kept: median | quartiles | snapshots | records written per second |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for capacity in [64 << 10, 1 << 20] {
        for writers in [1, 2] {
            let (shares, rate) = measure(capacity, writers, snapshots);
            if shares.is_empty() {
                println!("| {} KiB | {writers} | - | - | 0 | - |", capacity >> 10);
                continue;
            }
            // The quartile's index: (len - 1) * q for q of 1/4, 1/2, 3/4.
            let at = |quarters: usize| shares[(shares.len() - 1) * quarters / 4];
            println!(
                "| {} KiB | {writers} | {:.1}% | {:.1}% .. {:.1}% | {} | {:.1} M |",
                capacity >> 10,
                100.0 * at(2),
                100.0 * at(1),
                100.0 * at(3),
                shares.len(),
                rate / 1e6
            );
        }
    }
}
