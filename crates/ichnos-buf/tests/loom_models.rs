//! loom models of the buffers' cross-thread protocols, explored over every
//! interleaving (and every weak-memory outcome loom simulates):
//!
//! 1. the region-table ring: producer and consumer with perf's orderings
//!    (`ring.rs`) and a region-granular stop, over a buffer of two 1-byte
//!    regions. Byte cells are loom `UnsafeCell`s, so loom itself reports any
//!    write to unread data or read of unpublished data as a race.
//! 2. the futex wake-up handshake (`bump_and_wake` / `futex_wait` in
//!    `ring.rs`), with the kernel's futex modelled as a mutex and condition
//!    variable: a lost wake-up shows up as a deadlock.
//! 3. the same for a consumer that polls a descriptor the producer's
//!    wakeup hook makes readable (`Consumer::arm`,
//!    `Producer::set_wakeup_hook`), modelled as a count under a mutex: a
//!    lost wake-up is a deadlock.
//! 4. the fill buffer's circular snapshot (`Slot::ring_snapshot`): a reader
//!    on another thread never accepts a record the writer had not finished
//!    or had overwritten.
//!
//! These model the protocols, with loom's types in place of the shared
//! header's; the code itself is exercised by the stress tests.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p ichnos-buf --test loom_models --release`
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};

/// Region ends of a buffer of two 1-byte regions, as `RegionTable` would
/// give them: the largest boundary at or before `pos`.
fn region_end_at_or_before(pos: u64) -> u64 {
    pos
}

struct Ring {
    cells: [UnsafeCell<u8>; 2],
    head: AtomicU64,
    tail: AtomicU64,
}

#[test]
fn ring_never_overwrites_unread_or_reads_unpublished_bytes() {
    loom::model(|| {
        let ring = Arc::new(Ring {
            cells: [UnsafeCell::new(0), UnsafeCell::new(0)],
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        });
        let capacity = 2u64;
        let producer = {
            let ring = ring.clone();
            loom::thread::spawn(move || {
                let mut head = 0u64;
                let mut stop_at = 0u64;
                let mut written = 0u8;
                // Three one-byte records through two bytes of room: at
                // least one write must wait for the consumer.
                for value in 1..=3u8 {
                    if head + 1 > stop_at {
                        // reset_markers: Acquire the tail, stop at the last
                        // region end before unread data.
                        let tail = ring.tail.load(Ordering::Acquire);
                        stop_at = region_end_at_or_before(tail + capacity);
                    }
                    if head + 1 > stop_at {
                        continue; // lost (counted in the real ring)
                    }
                    ring.cells[(head % capacity) as usize].with_mut(|c| unsafe { *c = value });
                    head += 1;
                    ring.head.store(head, Ordering::Release);
                    written += 1;
                }
                written
            })
        };
        let mut tail = 0u64;
        let mut seen = Vec::new();
        for _ in 0..2 {
            let head = ring.head.load(Ordering::Acquire);
            while tail < head {
                seen.push(ring.cells[(tail % capacity) as usize].with(|c| unsafe { *c }));
                tail += 1;
            }
            ring.tail.store(tail, Ordering::Release);
        }
        let written = producer.join().unwrap();
        // What was read is a prefix of what was written, in order.
        assert!(seen.len() <= written as usize);
        for (i, v) in seen.iter().enumerate() {
            assert!(*v >= 1 && *v <= 3);
            if i > 0 {
                assert!(*v > seen[i - 1]);
            }
        }
    });
}

/// The kernel side of a futex: the value is checked under the bucket lock.
struct Futex {
    word: AtomicU32,
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl Futex {
    fn wait(&self, expected: u32) {
        let guard = self.bucket.lock().unwrap();
        // futex_wait orders the waiter's earlier stores before its read of
        // the word with a full barrier (smp_mb in futex_q_lock).
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::SeqCst) == expected {
            drop(self.sleepers.wait(guard).unwrap());
        }
    }

    fn wake(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_all();
    }
}

#[test]
fn a_sleeping_consumer_is_never_left_asleep_with_data() {
    loom::model(|| {
        let futex = Arc::new(Futex {
            word: AtomicU32::new(0),
            bucket: Mutex::new(()),
            sleepers: Condvar::new(),
        });
        let waiting = Arc::new(AtomicU32::new(0));
        let head = Arc::new(AtomicU64::new(0));
        let producer = {
            let (futex, waiting, head) = (futex.clone(), waiting.clone(), head.clone());
            loom::thread::spawn(move || {
                head.store(1, Ordering::Release);
                // bump_and_wake
                futex.word.fetch_add(1, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if waiting.load(Ordering::SeqCst) != 0 {
                    futex.wake();
                }
            })
        };
        // Consumer::wait
        loop {
            let seen = futex.word.load(Ordering::SeqCst);
            if head.load(Ordering::Acquire) > 0 {
                break;
            }
            waiting.fetch_add(1, Ordering::SeqCst);
            futex.wait(seen);
            waiting.fetch_sub(1, Ordering::SeqCst);
        }
        producer.join().unwrap();
    });
}

/// A descriptor the wakeup hook makes readable (a socket): a count, and
/// a poller sleeping until it is not zero.
struct Readable {
    count: Mutex<u64>,
    readable: Condvar,
}

#[test]
fn an_armed_consumer_polling_a_descriptor_is_never_left_asleep_with_data() {
    loom::model(|| {
        let fd = Arc::new(Readable {
            count: Mutex::new(0),
            readable: Condvar::new(),
        });
        let word = Arc::new(AtomicU32::new(0));
        let waiting = Arc::new(AtomicU32::new(0));
        let head = Arc::new(AtomicU64::new(0));
        let producer = {
            let (fd, word, waiting, head) =
                (fd.clone(), word.clone(), waiting.clone(), head.clone());
            loom::thread::spawn(move || {
                head.store(1, Ordering::Release);
                // Producer::notify: bump_and_wake, then the hook.
                word.fetch_add(1, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if waiting.load(Ordering::SeqCst) != 0 {
                    *fd.count.lock().unwrap() += 1;
                    fd.readable.notify_all();
                }
            })
        };
        // Consumer::arm, then poll until readable, then the guard dropped.
        waiting.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if head.load(Ordering::Acquire) == 0 {
            let mut count = fd.count.lock().unwrap();
            while *count == 0 {
                count = fd.readable.wait(count).unwrap();
            }
        }
        waiting.fetch_sub(1, Ordering::SeqCst);
        producer.join().unwrap();
    });
}

#[test]
fn a_circular_snapshot_accepts_only_whole_current_records() {
    loom::model(|| {
        // A ring of two one-word records; a record is (n, !n) in one word
        // here: value = n * 1000 + n, so a torn or mixed one is visible.
        let slots = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let reserved = Arc::new(AtomicUsize::new(0));
        let committed = Arc::new(AtomicUsize::new(0));
        let writer = {
            let (slots, reserved, committed) = (slots.clone(), reserved.clone(), committed.clone());
            loom::thread::spawn(move || {
                for n in 1..=3u64 {
                    let old = reserved.fetch_add(1, Ordering::Relaxed);
                    fence(Ordering::Release); // sigatomic::after_reserve
                    slots[old % 2].store(n * 1000 + n, Ordering::Relaxed);
                    committed.fetch_add(1, Ordering::Release);
                }
            })
        };
        // Slot::ring_snapshot: the records below `committed`, whether or
        // not a write is open (equal counters mean none is; the real
        // snapshot spins a while for that, to include the newest).
        let c = committed.load(Ordering::Acquire);
        let _r = reserved.load(Ordering::Acquire);
        let newest = c;
        let oldest = newest.saturating_sub(2);
        // Newest first, a record (a batch of one) at a time, each kept
        // unless the writer had reserved its place again when its copy
        // was done; the copy stops at the first it had.
        let mut kept = Vec::new();
        for p in (oldest..newest).rev() {
            let value = slots[p % 2].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if reserved.load(Ordering::Acquire).saturating_sub(2) > p {
                break;
            }
            kept.push((p, value));
        }
        for (p, value) in kept {
            let n = p as u64 + 1;
            assert_eq!(
                value,
                n * 1000 + n,
                "position {p}: accepted a record that is not record {n}"
            );
        }
        writer.join().unwrap();
    });
}
