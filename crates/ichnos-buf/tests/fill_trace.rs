//! Trace and circular fill buffers on one and many threads, against a
//! model: the records written, in order.

use ichnos_buf::fill::{FillBuffer, FillError, Flush, FlushReason, Kind, WriteError};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
struct Delivered {
    tid: i32,
    seq: u64,
    reason: FlushReason,
    data: Vec<u8>,
    lost: u64,
}

type Sink = Arc<Mutex<Vec<Delivered>>>;

fn trace(capacity: usize) -> (FillBuffer, Sink) {
    let sink: Sink = Arc::default();
    let out = sink.clone();
    let buf = FillBuffer::trace(capacity, move |f: &Flush<'_>| {
        out.lock().unwrap().push(Delivered {
            tid: f.tid,
            seq: f.seq,
            reason: f.reason,
            data: f.data.to_vec(),
            lost: f.lost_records,
        });
    })
    .unwrap();
    (buf, sink)
}

/// A record of `len` bytes whose contents say which record it is.
fn record(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n * 31 + i * 7) as u8).collect()
}

#[test]
fn first_record_fill_to_capacity_then_overflow() {
    let (buf, sink) = trace(64);
    assert_eq!(buf.stats().position, 0, "empty on first use");
    buf.write(&record(0, 16)).unwrap();
    assert_eq!(buf.stats().position, 16);
    for n in 1..4 {
        buf.write(&record(n, 16)).unwrap();
    }
    assert!(
        sink.lock().unwrap().is_empty(),
        "exactly full is not yet a flush"
    );
    buf.write(&record(4, 16)).unwrap();
    {
        let got = sink.lock().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].reason, FlushReason::Full);
        assert_eq!(got[0].seq, 0);
        assert_eq!(
            got[0].data,
            [record(0, 16), record(1, 16), record(2, 16), record(3, 16)].concat()
        );
    }
    // The record that did not fit is at the start of the fresh buffer.
    assert_eq!(buf.stats().position, 16);
    assert!(buf.flush());
    let got = sink.lock().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!((got[1].reason, got[1].seq), (FlushReason::Explicit, 1));
    assert_eq!(got[1].data, record(4, 16));
}

#[test]
fn record_larger_than_capacity_is_refused_and_nothing_is_lost() {
    let (buf, sink) = trace(32);
    buf.write(&record(0, 20)).unwrap();
    assert_eq!(
        buf.write(&record(1, 33)),
        Err(WriteError::Size {
            len: 33,
            capacity: 32,
            stride: 0
        })
    );
    buf.write(&record(2, 12)).unwrap();
    buf.write(&record(3, 32)).unwrap();
    buf.flush();
    let got = sink.lock().unwrap();
    let all: Vec<u8> = got.iter().flat_map(|d| d.data.clone()).collect();
    assert_eq!(all, [record(0, 20), record(2, 12), record(3, 32)].concat());
    assert_eq!(
        got.iter().map(|d| d.data.len()).collect::<Vec<_>>(),
        [32, 32]
    );
}

#[test]
fn aborted_reservation_is_never_seen() {
    let (buf, sink) = trace(64);
    buf.write(&record(0, 8)).unwrap();
    let kept = buf
        .try_write_with(24, |bytes| {
            bytes.fill(0xee);
            false
        })
        .unwrap();
    assert!(!kept);
    buf.write(&record(1, 8)).unwrap();
    buf.flush();
    let got = sink.lock().unwrap();
    assert_eq!(got[0].data, [record(0, 8), record(1, 8)].concat());
}

#[test]
fn fields_stored_in_any_order_land_as_one_record() {
    let (buf, sink) = trace(4096);
    for i in 0u64..100 {
        buf.write_with(24, |rec| {
            // Highest offset first, as drx_buf users must do today.
            rec[16..24].copy_from_slice(&(i ^ 0x5a5a).to_le_bytes());
            rec[0..8].copy_from_slice(&i.to_le_bytes());
            rec[8..12].copy_from_slice(&u32::try_from(i).unwrap().to_le_bytes());
            rec[12..14].copy_from_slice(&u16::try_from(i).unwrap().to_le_bytes());
            rec[14] = i as u8;
            rec[15] = 0x41;
        })
        .unwrap();
    }
    buf.flush();
    let got = sink.lock().unwrap();
    let data: Vec<u8> = got.iter().flat_map(|d| d.data.clone()).collect();
    assert_eq!(data.len(), 2400);
    for (i, rec) in data.chunks(24).enumerate() {
        let i = i as u64;
        let mut want = Vec::new();
        want.extend_from_slice(&i.to_le_bytes());
        want.extend_from_slice(&(i as u32).to_le_bytes());
        want.extend_from_slice(&(i as u16).to_le_bytes());
        want.extend_from_slice(&[i as u8, 0x41]);
        want.extend_from_slice(&(i ^ 0x5a5a).to_le_bytes());
        assert_eq!(rec, &want[..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random record sizes against the model: flushes concatenate to the
    /// records in order, each flush is whole records only, and a flush
    /// happens exactly when the next record does not fit.
    #[test]
    fn trace_buffer_matches_model(capacity in 1usize..300, lens in proptest::collection::vec(1usize..300, 0..200)) {
        let (buf, sink) = trace(capacity);
        let mut written = Vec::new();
        let mut model_fill = 0usize;
        let mut model_flushes: Vec<Vec<u8>> = Vec::new();
        let mut pending = Vec::new();
        for (n, &len) in lens.iter().enumerate() {
            let rec = record(n, len);
            let result = buf.write(&rec);
            if len > capacity {
                prop_assert!(result.is_err());
                continue;
            }
            prop_assert!(result.is_ok());
            if model_fill + len > capacity {
                model_flushes.push(std::mem::take(&mut pending));
                model_fill = 0;
            }
            model_fill += len;
            pending.extend_from_slice(&rec);
            written.push(rec);
        }
        buf.flush();
        if !pending.is_empty() {
            model_flushes.push(pending);
        }
        let got = sink.lock().unwrap();
        let got_data: Vec<Vec<u8>> = got.iter().map(|d| d.data.clone()).collect();
        prop_assert_eq!(got_data, model_flushes);
        for (i, d) in got.iter().enumerate() {
            prop_assert_eq!(d.seq, i as u64);
            prop_assert_eq!(d.lost, 0);
        }
    }
}

#[test]
fn circular_buffer_checks_its_shape() {
    assert_eq!(
        FillBuffer::circular(1000, 8).unwrap_err(),
        FillError::CapacityNotPowerOfTwo(1000)
    );
    assert_eq!(
        FillBuffer::circular(1024, 24).unwrap_err(),
        FillError::StrideDoesNotDivide {
            capacity: 1024,
            stride: 24
        }
    );
    assert_eq!(FillBuffer::circular(0, 8).unwrap_err(), FillError::Zero);
    // Sizes no thread's buffer can have are refused at creation, not
    // discovered by every write being dropped.
    for capacity in [1usize << 63, usize::MAX] {
        let e = FillBuffer::trace(capacity, |_| {}).unwrap_err();
        assert_eq!(
            e,
            FillError::Alloc {
                capacity,
                errno: libc::ENOMEM
            }
        );
        assert!(e.to_string().contains(&capacity.to_string()), "{e}");
    }
    assert!(matches!(
        FillBuffer::circular(1 << 63, 8).unwrap_err(),
        FillError::Alloc { .. }
    ));
    #[cfg(target_arch = "x86_64")]
    assert!(matches!(
        FillBuffer::trace_guarded(usize::MAX, |_| {}).unwrap_err(),
        FillError::Alloc { .. }
    ));
    // 1 TiB: refused where the kernel will not map it (this machine's
    // overcommit heuristic, with less memory); where it does, writes go in.
    match FillBuffer::trace(1 << 40, |_| {}) {
        Err(e) => assert!(matches!(e, FillError::Alloc { .. }), "{e}"),
        Ok(big) => assert_eq!(big.write(&[1; 16]), Ok(())),
    }
    let ring = FillBuffer::circular(1024, 16).unwrap();
    assert_eq!(
        ring.kind(),
        Kind::Circular {
            capacity: 1024,
            stride: 16
        }
    );
    assert!(matches!(
        ring.write(&[0; 8]),
        Err(WriteError::Size { len: 8, .. })
    ));
}

/// Record `i` of a ring of `stride`-byte records: its number's bytes
/// over and over, each mixed with its place, so that any record read in
/// another's place, or any part of one, is seen.
fn ring_record(i: u64, stride: usize) -> Vec<u8> {
    let bytes = i.to_le_bytes();
    (0..stride)
        .map(|j| bytes[j % 8] ^ (j as u8).wrapping_mul(37))
        .collect()
}

#[test]
fn circular_buffer_reads_newest_first_after_any_number_of_writes() {
    // Rings of one snapshot batch (512 bytes) and of many, records of a
    // word (copied a word at a time), of less (a byte at a time) and of
    // more than a batch.
    for (capacity, stride) in [(256, 16), (4096, 16), (2048, 4), (8192, 64), (4096, 1024)] {
        let slots = capacity / stride;
        for k in [
            0,
            1,
            slots - 1,
            slots,
            slots + 1,
            3 * slots,
            3 * slots + 5,
            1000,
        ] {
            // A fresh thread per case, so each starts with an empty ring.
            std::thread::spawn(move || {
                let ring = FillBuffer::circular(capacity, stride).unwrap();
                for i in 0..k as u64 {
                    ring.write_with(stride, |r| r.copy_from_slice(&ring_record(i, stride)))
                        .unwrap();
                }
                let records = ring.newest_first().unwrap();
                let want: Vec<Vec<u8>> = (0..k as u64)
                    .rev()
                    .take(slots)
                    .map(|i| ring_record(i, stride))
                    .collect();
                let got: Vec<Vec<u8>> = records.iter().map(<[u8]>::to_vec).collect();
                assert_eq!(
                    got, want,
                    "{capacity}-byte ring of {stride}: after {k} writes"
                );
                assert_eq!(records.position(), (k * stride) as u64);
                assert_eq!(ring.stats().position, k as u64);
            })
            .join()
            .unwrap();
        }
    }
}

#[test]
fn many_threads_each_record_delivered_once_in_order() {
    const THREADS: usize = 8;
    const RECORDS: u64 = 5000;
    let (buf, sink) = trace(1000);
    // Joined with pthread_join (JoinHandle::join), which waits for the
    // TLS destructors that flush; std::thread::scope returns before them.
    let handles: Vec<_> = (0..THREADS as u64)
        .map(|t| {
            let buf = buf.clone();
            std::thread::spawn(move || {
                for i in 0..RECORDS {
                    buf.write_with(16, |r| {
                        r[..8].copy_from_slice(&t.to_le_bytes());
                        r[8..].copy_from_slice(&i.to_le_bytes());
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // The threads have exited: each flushed its rest (ThreadExit).
    let got = sink.lock().unwrap();
    let mut per_tid: std::collections::HashMap<i32, Vec<&Delivered>> =
        std::collections::HashMap::new();
    for d in got.iter() {
        per_tid.entry(d.tid).or_default().push(d);
    }
    assert_eq!(per_tid.len(), THREADS);
    for flushes in per_tid.values() {
        let mut writer = None;
        let mut next = 0u64;
        for (i, d) in flushes.iter().enumerate() {
            assert_eq!(
                d.seq, i as u64,
                "flush sequence numbers count up per thread"
            );
            let last = i + 1 == flushes.len();
            assert_eq!(
                d.reason,
                if last {
                    FlushReason::ThreadExit
                } else {
                    FlushReason::Full
                }
            );
            assert_eq!(d.data.len() % 16, 0);
            for rec in d.data.chunks(16) {
                let t = u64::from_le_bytes(rec[..8].try_into().unwrap());
                assert_eq!(*writer.get_or_insert(t), t, "one writer per buffer");
                assert_eq!(u64::from_le_bytes(rec[8..].try_into().unwrap()), next);
                next += 1;
            }
        }
        assert_eq!(next, RECORDS);
        // 62 records fit in 1000 bytes: one Full flush per 62, one at exit.
        assert_eq!(flushes.len() as u64, RECORDS.div_ceil(62));
    }
}

#[test]
fn snapshots_taken_while_the_owner_writes_are_consistent() {
    let ring = FillBuffer::circular(4096, 16).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let ring = ring.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ring.write_with(16, |r| {
                    r[..8].copy_from_slice(&i.to_le_bytes());
                    r[8..].copy_from_slice(&(!i).to_le_bytes());
                })
                .unwrap();
                i += 1;
            }
            i
        })
    };
    let mut checked = 0;
    let mut nonempty = 0;
    // Until enough snapshots held records: on a loaded machine the writer
    // may not run at all during the first thousands (bounded in time).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (checked < 2000 || nonempty < 200) && std::time::Instant::now() < deadline {
        for (_tid, records) in ring.snapshot_threads() {
            let values: Vec<u64> = records
                .iter()
                .map(|r| {
                    let n = u64::from_le_bytes(r[..8].try_into().unwrap());
                    assert_eq!(
                        u64::from_le_bytes(r[8..].try_into().unwrap()),
                        !n,
                        "torn record"
                    );
                    n
                })
                .collect();
            assert!(values.len() <= 256);
            for pair in values.windows(2) {
                assert_eq!(pair[0], pair[1] + 1, "newest first, consecutive");
            }
            if let Some(&newest) = values.first() {
                assert_eq!(records.position(), (newest + 1) * 16);
                nonempty += 1;
            }
            checked += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(
        written > 0 && nonempty >= 200,
        "{written} written, {nonempty} seen"
    );
}

#[test]
fn handles_created_and_dropped_concurrently_never_share_a_slot() {
    let handles: Vec<_> = (0..6u64)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..2_000u64 {
                    let (buf, sink) = trace(64);
                    let rec = [t.to_le_bytes(), round.to_le_bytes()].concat();
                    buf.write(&rec).unwrap();
                    buf.flush();
                    let got = sink.lock().unwrap();
                    assert_eq!(got.len(), 1, "thread {t} round {round}");
                    assert_eq!(got[0].data, rec, "another handle's data in ours");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_panic_while_filling_a_record_leaves_the_buffer_usable() {
    let (buf, sink) = trace(64);
    buf.write(&record(0, 8)).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = buf.write_with(8, |bytes| {
            bytes[0] = 0xff;
            panic!("filling failed");
        });
    }));
    assert!(result.is_err());
    buf.write(&record(1, 8)).unwrap();
    assert!(buf.flush(), "the open reservation was closed by the unwind");
    let got = sink.lock().unwrap();
    assert_eq!(
        got[0].data,
        [record(0, 8), vec![0; 8], record(1, 8)].concat(),
        "the broken record became zero padding"
    );
}

#[test]
fn records_written_in_batches_arrive_whole_and_in_order() {
    let (buf, sink) = trace(1000);
    for batch in 0..40u64 {
        buf.write_records::<16>(5, |recs| {
            for (j, r) in recs.iter_mut().enumerate() {
                let n = batch * 5 + j as u64;
                r[..8].copy_from_slice(&n.to_le_bytes());
                r[8..].copy_from_slice(&(!n).to_le_bytes());
            }
        })
        .unwrap();
    }
    assert!(matches!(
        buf.write_records::<16>(63, |_| {}),
        Err(WriteError::Size { len: 1008, .. })
    ));
    buf.flush();
    let got = sink.lock().unwrap();
    // A batch is one reservation: never split across flushes (80-byte
    // batches, 12 per 1000-byte buffer).
    assert!(got.iter().all(|d| d.data.len() % 80 == 0));
    let all: Vec<u8> = got.iter().flat_map(|d| d.data.clone()).collect();
    for (n, r) in all.chunks(16).enumerate() {
        assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), n as u64);
        assert_eq!(u64::from_le_bytes(r[8..].try_into().unwrap()), !(n as u64));
    }
    assert_eq!(all.len(), 200 * 16);
}

#[test]
fn a_panic_in_try_write_with_also_leaves_the_buffer_usable() {
    let (buf, sink) = trace(64);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = buf.try_write_with(8, |_| panic!("filling failed"));
    }));
    assert!(result.is_err());
    buf.write(&record(1, 8)).unwrap();
    assert!(buf.flush(), "the open reservation was closed by the unwind");
    assert_eq!(
        sink.lock().unwrap()[0].data,
        [vec![0; 8], record(1, 8)].concat()
    );
}

/// This program provides no thread block: no buffer has a writer (they
/// exist for buffer 0 of a provided block only), and `write_with` serves.
#[test]
fn no_writer_without_a_provided_thread_block() {
    let ring = FillBuffer::circular(4096, 16).unwrap();
    assert!(ring.ring_writer::<16>().is_none());
    let (buffer, _sink) = trace(4096);
    assert!(buffer.trace_writer::<16>().is_none());
}
