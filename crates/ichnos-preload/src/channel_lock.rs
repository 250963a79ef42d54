//! The lock over the process's channel: a futex word, taken only to hand
//! a full buffer over (every few thousand calls of a thread) and held
//! for the copy of that buffer into the shared buffer (10 to 20 us for
//! 128 KiB), or while the recorder makes room.
//!
//! A thread that finds it held spins a moment, then sleeps in the kernel
//! until the holder lets go, as a mutex does (Drepper's "Futexes Are
//! Tricky"). It used to yield in a loop: with two traced threads busy on
//! a two-CPU machine, the loop's `sched_yield` calls and clock readings
//! took 12% of the program's time in a profile of `benches/threads.c`. A
//! wait is bounded: a holder that can never let go costs a waiter its
//! frame, not a deadlock.
//!
//! The word holds the holder's thread id (as `FUTEX_LOCK_PI`'s does), with
//! a bit for "someone may sleep on it", so that taking it, marking it
//! and letting it go are each one atomic step. The one holder that can
//! never let go, the code a signal handler of the same thread
//! interrupted (`ichnos_snapshot` from a handler while the thread hands a
//! buffer over), is known at once and not waited for; the handlers that
//! save through the saver thread (a crash, `_exit`) ask
//! [`ChannelLock::held_here`] first, since the saver would wait on the
//! interrupted holder. Everything here is async-signal-safe (atomics,
//! `gettid` and the futex system call). The protocol has a loom model,
//! `tests/loom_channel_lock.rs`.

use std::sync::atomic::{AtomicU32, Ordering};

/// Nobody holds it.
const FREE: u32 = 0;
/// Someone may sleep on it: the holder wakes one when it lets go. (Thread
/// ids are below 2^22, the kernel's most.)
const WAITERS: u32 = 1 << 31;
/// The holder's thread id.
const HOLDER: u32 = WAITERS - 1;

/// How many times a thread looks again before it sleeps: a few
/// microseconds, less than a copy of a buffer takes, so a waiter that
/// finds the lock held mostly sleeps, and the CPU goes to the recorder.
const SPINS: u32 = 64;

/// A lock that can be given up on after a time.
pub(crate) struct ChannelLock {
    /// The holder's thread id (0: free), and [`WAITERS`].
    state: AtomicU32,
}

/// The calling thread's id (a system call: async-signal-safe, and right
/// in a child of `fork` or `clone`, where a cached one would be the
/// parent's).
fn this_thread() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }.cast_unsigned() & HOLDER
}

impl ChannelLock {
    /// An unlocked lock.
    pub(crate) const fn new() -> ChannelLock {
        ChannelLock {
            state: AtomicU32::new(FREE),
        }
    }

    /// Takes the lock, waiting at most `patience_ns`; false if it could
    /// not be had by then, or at once where the holder is the code this
    /// thread's signal handler interrupted.
    pub(crate) fn lock(&self, patience_ns: u64) -> bool {
        let me = this_thread();
        let mut seen = match self.replace(FREE, me) {
            Ok(()) => return true,
            Err(seen) => seen,
        };
        for _ in 0..SPINS {
            if seen & HOLDER == me {
                // Held by this thread, which cannot let go while its
                // handler waits.
                return false;
            }
            std::hint::spin_loop();
            seen = self.state.load(Ordering::Relaxed);
            if seen == FREE && self.replace(FREE, me).is_ok() {
                return true;
            }
        }
        let deadline = crate::clock::monotonic_ns().saturating_add(patience_ns);
        loop {
            if seen & HOLDER == me {
                return false;
            }
            if seen == FREE {
                // Taken marked: others may sleep on it still (one needless
                // wake at most).
                match self.replace(FREE, me | WAITERS) {
                    Ok(()) => return true,
                    Err(now) => {
                        seen = now;
                        continue;
                    }
                }
            }
            if seen & WAITERS == 0 {
                // Marked before sleeping, so that the holder's unlock
                // wakes a sleeper.
                if let Err(now) = self.replace(seen, seen | WAITERS) {
                    seen = now;
                    continue;
                }
                seen |= WAITERS;
            }
            let now = crate::clock::monotonic_ns();
            if now >= deadline {
                return false;
            }
            futex_wait(&self.state, seen, deadline - now);
            seen = self.state.load(Ordering::Relaxed);
        }
    }

    /// Lets the lock go, waking one sleeper if any may sleep.
    pub(crate) fn unlock(&self) {
        if self.state.swap(FREE, Ordering::Release) & WAITERS != 0 {
            futex_wake_one(&self.state);
        }
    }

    /// Whether the calling thread holds the lock (its signal handler
    /// interrupted the holder). Async-signal-safe.
    pub(crate) fn held_here(&self) -> bool {
        let holder = self.state.load(Ordering::Relaxed) & HOLDER;
        holder != FREE && holder == this_thread()
    }

    /// Frees the lock without waking anyone: in a child after `fork`,
    /// where its holder may be a thread that does not exist.
    pub(crate) fn reset(&self) {
        self.state.store(FREE, Ordering::Release);
    }

    /// Puts `to` where the word holds `from` (Acquire: when it takes
    /// the lock); the word's value where it did not hold `from`.
    fn replace(&self, from: u32, to: u32) -> Result<(), u32> {
        self.state
            .compare_exchange(from, to, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout_ns`; returns
/// early on a wake, a signal, or a changed word.
fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: i64::try_from(timeout_ns / 1_000_000_000).unwrap_or(i64::MAX),
        tv_nsec: i64::try_from(timeout_ns % 1_000_000_000).unwrap_or(0),
    };
    // SAFETY: FUTEX_WAIT on an aligned u32 that lives as long as the
    // process (the lock is a static), with a valid relative timeout. The
    // lock is the process's own (threads, and vfork children sharing its
    // memory), so the private futex suffices.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &raw const ts,
        );
    }
}

/// Wakes one thread sleeping on `word`.
fn futex_wake_one(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on an aligned u32 of ours; no other argument is
    // read.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_that_wait_take_turns_and_none_is_lost() {
        // Four threads add to a counter under the lock, by a read and a
        // write apart: with a lock that let two in at once, additions
        // would be lost.
        struct Shared {
            lock: ChannelLock,
            count: std::cell::UnsafeCell<u64>,
        }
        // SAFETY: `count` is touched only under `lock`.
        unsafe impl Sync for Shared {}
        let shared = Arc::new(Shared {
            lock: ChannelLock::new(),
            count: std::cell::UnsafeCell::new(0),
        });
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = shared.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        assert!(s.lock.lock(10_000_000_000));
                        // SAFETY: under the lock.
                        unsafe {
                            let v = std::ptr::read_volatile(s.count.get());
                            std::hint::spin_loop();
                            std::ptr::write_volatile(s.count.get(), v + 1);
                        }
                        s.lock.unlock();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: every thread has finished.
        assert_eq!(unsafe { *shared.count.get() }, 80_000);
    }

    #[test]
    fn a_lock_never_let_go_is_given_up_on_after_the_patience() {
        let lock = Arc::new(ChannelLock::new());
        assert!(lock.lock(0));
        let other = lock.clone();
        let waited = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            assert!(!other.lock(30_000_000));
            start.elapsed()
        })
        .join()
        .unwrap();
        assert!(waited >= std::time::Duration::from_millis(30), "{waited:?}");
        // The holder's own thread (as its signal handler would) gives up
        // at once, not after its patience.
        assert!(lock.held_here());
        let start = std::time::Instant::now();
        assert!(!lock.lock(60_000_000_000));
        let waited = start.elapsed();
        assert!(waited < std::time::Duration::from_secs(1), "{waited:?}");
        lock.unlock();
        assert!(!lock.held_here());
        assert!(lock.lock(0), "free again once let go");
        lock.reset();
        assert!(lock.lock(0), "free after a reset");
    }

    #[test]
    fn a_sleeper_is_woken_when_the_holder_lets_go() {
        let lock = Arc::new(ChannelLock::new());
        assert!(lock.lock(0));
        let l = lock.clone();
        let waiter = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            assert!(l.lock(20_000_000_000));
            l.unlock();
            start.elapsed()
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        lock.unlock();
        // Woken by the unlock, long before its 20 s patience.
        let slept = waiter.join().unwrap();
        assert!(slept < std::time::Duration::from_secs(10), "{slept:?}");
    }
}
