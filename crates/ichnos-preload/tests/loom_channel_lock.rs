//! A loom model of the channel lock's protocol (`src/channel_lock.rs`):
//! the futex word holds the holder's thread id, a waiters bit and the
//! hold's generation (counted at each taking, kept at a let-go); a
//! waiter marks the bit before it sleeps, and the holder that lets go of
//! a marked word wakes one. Explored over every interleaving loom
//! simulates, with the kernel's futex modelled as a mutex and a
//! condition variable: two threads in the lock at once show up as a race
//! on the cell it guards, a lost wake-up as a deadlock. Two threads are
//! explored whole; three (what a wake-up lost between two sleepers
//! needs) with loom's bound on preemptions, and with a waiter that gives
//! up after marking the word: it marks the hold given up on and wakes
//! every sleeper, and a waiter that finds the mark gives up too; the
//! model checks that no one is left asleep and that letting go clears
//! the mark. (The spinning before a sleep is left out: it only takes the
//! lock sooner. The check whether the holder exists is a patience that
//! runs out.)
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p ichnos-preload --test loom_channel_lock --release`
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU32, Ordering};
use loom::sync::{Arc, Condvar, Mutex};

const FREE: u32 = 0;
const WAITERS: u32 = 1 << 31;
const GIVEN_UP: u32 = 1 << 30;
const GENERATION: u32 = 0xff << 22;
const HOLDER: u32 = (1 << 22) - 1;

fn taken(free: u32, me: u32) -> u32 {
    (free.wrapping_add(1 << 22) & GENERATION) | me
}

/// The lock's word, and the kernel side of its futex: the value is
/// checked under the bucket lock, after a full barrier.
struct Futex {
    word: AtomicU32,
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl Futex {
    fn wait(&self, expected: u32) {
        let guard = self.bucket.lock().unwrap();
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::SeqCst) == expected {
            drop(self.sleepers.wait(guard).unwrap());
        }
    }

    fn wake_one(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_one();
    }

    fn wake_all(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_all();
    }

    fn replace(&self, from: u32, to: u32) -> Result<(), u32> {
        self.word
            .compare_exchange(from, to, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
    }

    /// `ChannelLock::lock`, with no patience.
    fn lock(&self, me: u32) {
        assert!(self.lock_or_give_up(me, false));
    }

    /// `ChannelLock::lock`; with `impatient`, its patience runs out at the
    /// first sleep it would take: false, having marked the hold given up
    /// on (where that hold ended before the mark, it looks again: a free
    /// lock is taken, a later hold given up on unmarked). False too where
    /// the hold it finds was given up on.
    fn lock_or_give_up(&self, me: u32, impatient: bool) -> bool {
        let mut marked_once = false;
        let mut seen = self.word.load(Ordering::Relaxed);
        if seen & HOLDER == FREE {
            match self.replace(seen, taken(seen, me)) {
                Ok(()) => return true,
                Err(now) => seen = now,
            }
        }
        loop {
            assert_ne!(seen & HOLDER, me, "held by the locking thread");
            if seen & GIVEN_UP != 0 {
                return false;
            }
            if seen & HOLDER == FREE {
                match self.replace(seen, taken(seen, me) | WAITERS) {
                    Ok(()) => return true,
                    Err(now) => {
                        seen = now;
                        continue;
                    }
                }
            }
            if seen & WAITERS == 0 {
                if let Err(now) = self.replace(seen, seen | WAITERS) {
                    seen = now;
                    continue;
                }
                seen |= WAITERS;
            }
            if impatient {
                if marked_once {
                    // The hold it meant to mark ended: its patience is
                    // spent, and a later hold is not marked.
                    return false;
                }
                marked_once = true;
                match self.replace(seen, seen | GIVEN_UP) {
                    Ok(()) => {
                        self.wake_all();
                        return false;
                    }
                    // Let go meanwhile, or marked by another: looked at
                    // anew (a free lock is taken).
                    Err(now) => {
                        seen = now;
                        continue;
                    }
                }
            }
            self.wait(seen);
            seen = self.word.load(Ordering::Relaxed);
        }
    }

    /// `ChannelLock::unlock`.
    fn unlock(&self) {
        if self.word.fetch_and(GENERATION, Ordering::Release) & WAITERS != 0 {
            self.wake_one();
        }
    }

    /// Whether the lock is free, with no bit set but the generation.
    fn is_free(&self) -> bool {
        self.word.load(Ordering::Relaxed) & !GENERATION == FREE
    }
}

#[test]
fn the_lock_lets_one_in_at_a_time_and_loses_no_wake_up() {
    // Two threads, one of them taking the lock twice: the second time it
    // may find the other asleep on a marked word, or marking it. (A third
    // thread makes the search too long to run.)
    loom::model(|| {
        let lock = Arc::new(Futex {
            word: AtomicU32::new(FREE),
            bucket: Mutex::new(()),
            sleepers: Condvar::new(),
        });
        let count = Arc::new(UnsafeCell::new(0u32));
        let other = {
            let (lock, count) = (lock.clone(), count.clone());
            loom::thread::spawn(move || {
                lock.lock(1);
                // SAFETY: under the lock; a second thread in here is a
                // race loom reports.
                count.with_mut(|c| unsafe { *c += 1 });
                lock.unlock();
            })
        };
        for _ in 0..2 {
            lock.lock(2);
            // SAFETY: as above.
            count.with_mut(|c| unsafe { *c += 1 });
            lock.unlock();
        }
        other.join().unwrap();
        // SAFETY: the other thread has finished.
        assert_eq!(count.with(|c| unsafe { *c }), 3);
        assert!(lock.is_free());
    });
}

/// A new lock.
fn new_lock() -> Arc<Futex> {
    Arc::new(Futex {
        word: AtomicU32::new(FREE),
        bucket: Mutex::new(()),
        sleepers: Condvar::new(),
    })
}

/// Three threads, each taking the lock once (the third `impatient` if
/// so), within loom's bound on preemptions.
fn three_threads(impatient: bool) {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(move || {
        let lock = new_lock();
        let count = Arc::new(UnsafeCell::new(0u32));
        let threads: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|me| {
                let (lock, count) = (lock.clone(), count.clone());
                loom::thread::spawn(move || {
                    // A hold given up on by the impatient thread is
                    // given up on by these too.
                    if lock.lock_or_give_up(me, false) {
                        // SAFETY: under the lock.
                        count.with_mut(|c| unsafe { *c += 1 });
                        lock.unlock();
                        1
                    } else {
                        assert!(impatient, "a patient thread gave up with no one impatient");
                        0
                    }
                })
            })
            .collect();
        let mut entered = 0;
        if lock.lock_or_give_up(3, impatient) {
            // SAFETY: under the lock.
            count.with_mut(|c| unsafe { *c += 1 });
            lock.unlock();
            entered += 1;
        }
        for t in threads {
            entered += t.join().unwrap();
        }
        // SAFETY: every thread has finished.
        assert_eq!(count.with(|c| unsafe { *c }), entered);
        // Every hold was let go, which clears a mark.
        assert!(lock.is_free());
    });
}

#[test]
fn three_threads_lose_no_wake_up() {
    three_threads(false);
}

#[test]
fn a_waiter_that_gives_up_after_marking_the_word_strands_no_one() {
    three_threads(true);
}

#[test]
fn a_hold_given_up_on_is_marked_only_while_it_lasts() {
    // Two threads, explored whole: one takes the lock twice, the other
    // gives up once at its first sleep (marking the hold it saw) and then
    // waits with patience. A mark put on a word the holder had let go
    // meanwhile would outlive the hold: the patient lock would give up,
    // or the word stay marked at the end.
    loom::model(|| {
        let lock = new_lock();
        let count = Arc::new(UnsafeCell::new(0u32));
        let other = {
            let (lock, count) = (lock.clone(), count.clone());
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    lock.lock(1);
                    // SAFETY: under the lock.
                    count.with_mut(|c| unsafe { *c += 1 });
                    lock.unlock();
                }
            })
        };
        let mut entered = 2;
        if lock.lock_or_give_up(2, true) {
            // SAFETY: under the lock.
            count.with_mut(|c| unsafe { *c += 1 });
            lock.unlock();
            entered += 1;
        }
        other.join().unwrap();
        lock.lock(2);
        lock.unlock();
        // SAFETY: the other thread has finished.
        assert_eq!(count.with(|c| unsafe { *c }), entered);
        assert!(lock.is_free());
    });
}
