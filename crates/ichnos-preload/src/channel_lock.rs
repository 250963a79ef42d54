//! The lock over the process's channel: a futex word, taken only to hand
//! a full buffer over (every few thousand calls of a thread) and held
//! for the copy of that buffer into the shared buffer (10 to 20 us for
//! 128 KiB), or while the recorder makes room.
//!
//! A thread that finds it held spins a moment, then sleeps in the kernel
//! until the holder lets go, as a mutex does (Drepper's "Futexes Are
//! Tricky"). It used to yield in a loop: with two traced threads busy on
//! a two-CPU machine, the loop's `sched_yield` calls and clock readings
//! took 12% of the program's time in a profile of `benches/threads.c`.
//!
//! A wait is bounded: a holder that can never let go (one stopped by a
//! debugger, a killed vfork child, a thread cancelled or `longjmp`ed out
//! of a signal handler mid hand-over) costs a waiter its frame, not a
//! deadlock. And it costs that wait once: a waiter that has seen one hold
//! last its whole patience marks it given up on ([`GIVEN_UP`]), and every
//! later waiter that finds the mark gives up at once, until the holder
//! lets go (which clears it). (Before, each later hand-over of the
//! process waited the whole patience, 6 s.) A waiter whose patience runs
//! out over several holds, none stuck (a slow recorder, others taking
//! the lock first), gives its own frame up and marks nothing. Time is
//! counted in sleeps of at most [`SLEEP_NS`], so that a process stopped
//! while a thread waits (Ctrl-Z) gives nothing up for the pause.
//!
//! The word holds the holder's thread id (as `FUTEX_LOCK_PI`'s does), with
//! a bit for "someone may sleep on it", one for "given up on", and the
//! hold's generation, a count of takings, so that taking it, marking it
//! and letting it go are each one atomic step, and each hold's word is
//! its own: the same thread letting go and taking it again, its waiters
//! bit set again by another waiter, makes a word of another generation.
//! So the mark is put only on the hold a waiter saw (a compare-and-swap
//! of the word), never on a later one, and a waiter that wakes to the
//! word it slept on knows it is the same hold. (The generation has 8
//! bits: a waiter could take a later hold for its own only where each of
//! its sleeps through the whole patience woke to the same holder and a
//! generation a multiple of 256 takings on.) The one holder that can
//! never let go, the code a signal handler of the same thread
//! interrupted (`ichnos_snapshot` from a handler while the thread hands a
//! buffer over), is known at once and not waited for; the handlers that
//! save through the saver thread (a crash, `_exit`) ask
//! [`ChannelLock::held_here`] first, since the saver would wait on the
//! interrupted holder. Everything here is async-signal-safe (atomics,
//! `gettid` and the futex system call). The protocol has a loom model,
//! `tests/loom_channel_lock.rs`.

use std::sync::atomic::{AtomicU32, Ordering};

/// Nobody holds it (in a word of any generation).
const FREE: u32 = 0;
/// Someone may sleep on it: the holder wakes one when it lets go.
const WAITERS: u32 = 1 << 31;
/// A waiter gave up on this hold (its patience ran out, or the holder no
/// longer exists): later waiters give up at once. Letting go clears it.
const GIVEN_UP: u32 = 1 << 30;
/// The hold's generation: how many times the lock was taken, modulo 256.
/// Letting go keeps it.
const GENERATION: u32 = 0xff << 22;
/// The holder's thread id: thread ids are below 2^22, the kernel's most
/// (`PID_MAX_LIMIT`).
const HOLDER: u32 = (1 << 22) - 1;

/// The word of a hold of thread `me` taken from the free word `free`.
fn taken(free: u32, me: u32) -> u32 {
    (free.wrapping_add(1 << 22) & GENERATION) | me
}

/// The longest sleep of a waiter, and the most one sleep counts toward
/// its patience: a process stopped (Ctrl-Z, a debugger) while a thread
/// waits has its pause counted as one short sleep, so that its holder,
/// stopped too, is not given up on when they go on.
const SLEEP_NS: u64 = 100_000_000;

/// What a waiter has waited, counting each sleep at most [`SLEEP_NS`].
#[derive(Default)]
struct Waited {
    /// In all.
    total: u64,
    /// On the hold it sees now (the word unchanged since).
    on_hold: u64,
}

impl Waited {
    /// After a sleep of `ns`, which ended on the same hold or on another.
    fn slept(&mut self, ns: u64, same_hold: bool) {
        let ns = ns.min(SLEEP_NS);
        self.total = self.total.saturating_add(ns);
        self.on_hold = if same_hold {
            self.on_hold.saturating_add(ns)
        } else {
            0
        };
    }
}

/// How many times a thread looks again before it sleeps: a few
/// microseconds, less than a copy of a buffer takes, so a waiter that
/// finds the lock held mostly sleeps, and the CPU goes to the recorder.
const SPINS: u32 = 64;

/// A lock that can be given up on after a time.
pub(crate) struct ChannelLock {
    /// The holder's thread id (0: free), [`WAITERS`], [`GIVEN_UP`] and
    /// the [`GENERATION`].
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

    /// Takes the lock, waiting at most `patience_ns` (sleeps counted as
    /// [`Waited`] counts them); false if it could not be had by then
    /// (marking the hold given up on where that one hold lasted the
    /// whole patience), and at once where the holder is the code this
    /// thread's signal handler interrupted, or its hold was given up on
    /// by an earlier waiter.
    pub(crate) fn lock(&self, patience_ns: u64) -> bool {
        let me = this_thread();
        let mut seen = self.state.load(Ordering::Relaxed);
        if seen & HOLDER == FREE {
            match self.replace(seen, taken(seen, me)) {
                Ok(()) => return true,
                Err(now) => seen = now,
            }
        }
        for _ in 0..SPINS {
            if seen & HOLDER == me {
                // Held by this thread, which cannot let go while its
                // handler waits.
                return false;
            }
            std::hint::spin_loop();
            seen = self.state.load(Ordering::Relaxed);
            if seen & HOLDER == FREE && self.replace(seen, taken(seen, me)).is_ok() {
                return true;
            }
        }
        let mut waited = Waited::default();
        loop {
            if seen & HOLDER == me || seen & GIVEN_UP != 0 {
                return false;
            }
            if seen & HOLDER == FREE {
                // Taken marked: others may sleep on it still (one needless
                // wake at most).
                match self.replace(seen, taken(seen, me) | WAITERS) {
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
            if waited.on_hold >= patience_ns {
                match self.give_up_on(seen) {
                    Ok(()) => return false,
                    // Let go meanwhile (or marked by another waiter): the
                    // word says which. A free lock is taken; a mark is
                    // given up on; a new hold, the patience being spent,
                    // is given up on unmarked.
                    Err(now) => {
                        waited.slept(0, false);
                        seen = now;
                        continue;
                    }
                }
            }
            if waited.total >= patience_ns {
                // Several holds, none of them stuck: this frame is given
                // up, the hold is not.
                return false;
            }
            let before = crate::clock::monotonic_ns();
            futex_wait(
                &self.state,
                seen,
                (patience_ns - waited.total).min(SLEEP_NS),
            );
            let slept = crate::clock::monotonic_ns().saturating_sub(before);
            let now = self.state.load(Ordering::Relaxed);
            // The same word is the same hold: a later one is of another
            // generation.
            waited.slept(slept, now == seen);
            seen = now;
        }
    }

    /// Marks the hold `seen` given up on, if the word still holds it, and
    /// wakes every sleeper, to give up too; else the word as it is.
    fn give_up_on(&self, seen: u32) -> Result<(), u32> {
        self.replace(seen, seen | GIVEN_UP)?;
        futex_wake(&self.state, i32::MAX);
        Ok(())
    }

    /// Lets the lock go, waking one sleeper if any may sleep: the word
    /// keeps its generation, and nothing else.
    pub(crate) fn unlock(&self) {
        if self.state.fetch_and(GENERATION, Ordering::Release) & WAITERS != 0 {
            futex_wake(&self.state, 1);
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
    /// the lock, after the last let-go's Release); the word's value
    /// where it did not hold `from`.
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

/// Wakes up to `n` threads sleeping on `word`.
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE on an aligned u32 of ours; no other argument is
    // read.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
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

    /// A lock held by a thread that keeps it until told to let go.
    fn held_elsewhere() -> (
        Arc<ChannelLock>,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let lock = Arc::new(ChannelLock::new());
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let l = lock.clone();
        let holder = std::thread::spawn(move || {
            assert!(l.lock(0));
            taken_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            l.unlock();
        });
        taken_rx.recv().unwrap();
        (lock, go_tx, holder)
    }

    /// Whether `lock(patience)` fails within `within`.
    fn gives_up_within(lock: &ChannelLock, patience_ns: u64, within: Duration) -> bool {
        let start = std::time::Instant::now();
        let took = lock.lock(patience_ns);
        let waited = start.elapsed();
        assert!(!took, "taken after {waited:?}");
        waited < within
    }

    use std::time::Duration;

    #[test]
    fn a_hold_given_up_on_is_not_waited_for_again_until_let_go() {
        let (lock, go, holder) = held_elsewhere();
        let start = std::time::Instant::now();
        assert!(!lock.lock(40_000_000));
        assert!(start.elapsed() >= Duration::from_millis(40));
        // The same hold: later waiters give up at once, not after their
        // minute of patience.
        assert!(gives_up_within(
            &lock,
            60_000_000_000,
            Duration::from_secs(5)
        ));
        assert!(gives_up_within(
            &lock,
            60_000_000_000,
            Duration::from_secs(5)
        ));
        go.send(()).unwrap();
        holder.join().unwrap();
        // Letting go cleared the mark: the next holder is waited for.
        assert!(lock.lock(0));
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (l, r) = (lock.clone(), released.clone());
        let waiter = std::thread::spawn(move || {
            assert!(l.lock(60_000_000_000));
            l.unlock();
            r.load(Ordering::Relaxed)
        });
        std::thread::sleep(Duration::from_millis(100));
        released.store(true, Ordering::Relaxed);
        lock.unlock();
        assert!(waiter.join().unwrap(), "taken while held");
    }

    #[test]
    fn sleepers_are_woken_to_give_up_when_a_waiter_gives_up_on_the_hold() {
        let (lock, go, holder) = held_elsewhere();
        let l = lock.clone();
        let sleeper = std::thread::spawn(move || {
            gives_up_within(&l, 60_000_000_000, Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!lock.lock(50_000_000));
        assert!(sleeper.join().unwrap(), "the sleeper slept on");
        go.send(()).unwrap();
        holder.join().unwrap();
    }

    #[test]
    fn a_wait_counts_each_sleep_short_and_each_hold_apart() {
        let mut waited = Waited::default();
        waited.slept(30_000_000, true);
        // A process stopped for a minute while asleep: one sleep's worth.
        waited.slept(60_000_000_000, true);
        assert_eq!((waited.total, waited.on_hold), (130_000_000, 130_000_000));
        // The holder let go and someone took it: a new hold.
        waited.slept(20_000_000, false);
        assert_eq!((waited.total, waited.on_hold), (150_000_000, 0));
        waited.slept(5_000_000, true);
        assert_eq!((waited.total, waited.on_hold), (155_000_000, 5_000_000));
    }

    #[test]
    fn a_waiter_whose_patience_runs_out_over_several_holds_marks_none() {
        // Two threads take turns holding it, 20 ms each, for 900 ms; a
        // waiter with 300 ms of patience sees no hold last that long.
        let lock = Arc::new(ChannelLock::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let (l, stop) = (lock.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if l.lock(10_000_000_000) {
                            std::thread::sleep(Duration::from_millis(20));
                            l.unlock();
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10));
        let mut marked = 0;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(900) {
            if lock.lock(300_000_000) {
                lock.unlock();
            } else if lock.state.load(Ordering::Relaxed) & GIVEN_UP != 0 {
                marked += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in holders {
            h.join().unwrap();
        }
        assert_eq!(
            marked, 0,
            "a hold of 20 ms given up on with 300 ms of patience"
        );
    }

    #[test]
    fn a_hold_taken_again_by_its_thread_is_another_hold() {
        let lock = ChannelLock::new();
        assert!(lock.lock(0));
        // A waiter sets the waiters bit and is about to mark the hold.
        let first = lock.state.load(Ordering::Relaxed);
        assert!(lock.replace(first, first | WAITERS).is_ok());
        let seen = first | WAITERS;
        // The holder lets go and takes it again, and another waiter sets
        // the bit: the same holder, the same bits, another hold.
        lock.unlock();
        assert!(lock.lock(0));
        let second = lock.state.load(Ordering::Relaxed);
        assert!(lock.replace(second, second | WAITERS).is_ok());
        assert_eq!(second & HOLDER, first & HOLDER);
        assert_ne!(
            second | WAITERS,
            seen,
            "a waiter would take it for its hold"
        );
        // The first waiter's mark misses it.
        assert_eq!(lock.give_up_on(seen), Err(second | WAITERS));
        assert_eq!(lock.state.load(Ordering::Relaxed) & GIVEN_UP, 0);
        lock.unlock();
        // Round the generation's 8 bits: each hold is its holder's alone,
        // and letting go leaves no bit but the generation.
        let me = this_thread();
        for _ in 0..600 {
            assert!(lock.lock(0));
            let word = lock.state.load(Ordering::Relaxed);
            assert_eq!(word & !GENERATION, me, "{word:#x}");
            lock.unlock();
            assert_eq!(lock.state.load(Ordering::Relaxed) & !GENERATION, FREE);
        }
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
