//! Read-modify-write operations that are atomic with respect to signal
//! handlers on the same thread, and cheap.
//!
//! A fill buffer's cursor belongs to one thread, but a signal handler on
//! that thread may write a record while the thread is between loading the
//! cursor and storing it back. A single instruction cannot be split by a
//! signal, so on x86-64 the reservation is one `xadd` on memory — without
//! the `lock` prefix, which would make it atomic across CPUs as well and
//! cost several times more. Other threads only ever *read* these words
//! (the aligned 8-byte store is atomic for them), so no lock is needed.
//! Elsewhere, and under Miri, the operations fall back to relaxed atomics,
//! which are correct everywhere and merely slower.

use std::sync::atomic::AtomicUsize;
#[cfg(not(all(target_arch = "x86_64", not(miri))))]
use std::sync::atomic::Ordering;

/// Adds `delta` to `word` and returns the previous value, in one step that
/// no signal handler on this thread can interrupt.
#[inline(always)]
pub(crate) fn fetch_add(word: &AtomicUsize, delta: usize) -> usize {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut value = delta;
        // SAFETY: `word.as_ptr()` is valid and aligned for the lifetime of
        // the borrow. `xadd` reads and writes exactly those 8 bytes; other
        // threads only load this word, and an aligned 8-byte store is
        // single-copy atomic on x86-64, so they see the old or new value.
        unsafe {
            std::arch::asm!(
                "xadd qword ptr [{word}], {value}",
                word = in(reg) word.as_ptr(),
                value = inout(reg) value,
                options(nostack),
            );
        }
        value
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        word.fetch_add(delta, Ordering::AcqRel)
    }
}

/// Adds `delta` to `word` (wrapping), as one signal-atomic step whose store
/// is ordered after every earlier store of this thread (a release store
/// for readers on other threads: x86-64 keeps stores in order).
#[inline(always)]
pub(crate) fn add(word: &AtomicUsize, delta: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: as in `fetch_add`; `add` on memory is one instruction.
    unsafe {
        std::arch::asm!(
            "add qword ptr [{word}], {delta}",
            word = in(reg) word.as_ptr(),
            delta = in(reg) delta,
            options(nostack),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        word.fetch_add(delta, Ordering::AcqRel);
    }
}

/// Replaces `word` with `new` if it still holds `current`, as one
/// signal-atomic step. Returns whether it did.
#[inline]
pub(crate) fn compare_exchange(word: &AtomicUsize, current: usize, new: usize) -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut seen = current;
        // SAFETY: as in `fetch_add`; `cmpxchg` compares `rax` with the
        // word and stores `new` only when they are equal, in one
        // instruction.
        unsafe {
            std::arch::asm!(
                "cmpxchg qword ptr [{word}], {new}",
                word = in(reg) word.as_ptr(),
                new = in(reg) new,
                inout("rax") seen,
                options(nostack),
            );
        }
        seen == current
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

/// Orders a reservation before the record's stores for readers on other
/// threads (circular snapshots). x86-64 keeps stores in order, so only the
/// compiler needs telling; elsewhere a release fence does it.
#[inline(always)]
pub(crate) fn after_reserve() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn operations_do_what_they_say() {
        let w = AtomicUsize::new(10);
        assert_eq!(fetch_add(&w, 5), 10);
        assert_eq!(w.load(Ordering::Relaxed), 15);
        add(&w, 7);
        assert_eq!(w.load(Ordering::Relaxed), 22);
        add(&w, 0usize.wrapping_sub(2));
        assert_eq!(w.load(Ordering::Relaxed), 20);
        assert!(!compare_exchange(&w, 19, 1));
        assert_eq!(w.load(Ordering::Relaxed), 20);
        assert!(compare_exchange(&w, 20, 1));
        assert_eq!(w.load(Ordering::Relaxed), 1);
    }
}
