//! Per-thread slots, the registry of live threads, and the lifecycle
//! hooks: thread exit, process exit (an exit hook, `atexit`'s or one
//! bound to the process: `process_hooks.rs`) and `fork`.
//!
//! Each thread has a fixed [`Table`] of [`Slot`]s in TLS, one per possible
//! buffer handle, so the fast path is a TLS-relative access as with
//! drx_buf's raw TLS slot: buffer 0's slot in the thread's block
//! ([`fast_tls`]: a `thread_local!`, or a program's initial-exec TLS at a
//! fixed offset from the thread pointer), the others in a `thread_local!`
//! table whose address that block keeps. The slots have no destructor (so
//! reaching them costs nothing); a second TLS value, [`ThreadState`], owns the memory
//! and flushes at thread exit. A process's main thread keeps its buffers
//! through its TLS destructors: `exit` runs those before the `atexit`
//! hooks and static destructors, whose records would be lost. So does a
//! thread that says it is about to call `exit` ([`before_exit`]). An
//! `atexit` hook flushes them, and every other thread still running, from
//! the registry.

use super::fast_tls;
use super::mem::Mapping;
use super::slot::Slot;
use super::Shared;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, Weak};

/// How many buffer handles can exist at once (drx_buf is limited by raw
/// TLS slots in the same way).
pub const MAX_BUFFERS: usize = 16;

thread_local! {
    /// The slots of buffers 1 and up (buffer 0's is in [`fast_tls`]).
    static REST: [Slot; MAX_BUFFERS - 1] = const { [const { Slot::new() }; MAX_BUFFERS - 1] };
    static STATE: ThreadState = const { ThreadState::new() };
    /// Set while this thread holds the registry lock, so that a signal
    /// handler interrupting it does not spin on it forever.
    static HOLDS_LOCK: Cell<bool> = const { Cell::new(false) };
    /// Set when this thread is about to call `exit` ([`before_exit`]).
    static CALLS_EXIT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on this thread's slot `index`.
#[inline(always)]
pub(crate) fn with_slot<R>(index: usize, f: impl FnOnce(&Slot) -> R) -> R {
    // SAFETY: the pointer is to this thread's TLS, which lives as long as
    // the thread, and we are on that thread for the duration of `f`.
    f(unsafe { &*Table::mine().slot(index) })
}

/// This thread's slot `index`, from its `block` (the write path's fast
/// path, with no call): null for a slot of the `thread_local!` table
/// before this thread has looked that table up.
#[inline(always)]
pub(crate) fn slot_in_block(block: *const fast_tls::FastTls, index: usize) -> *const Slot {
    let index = index & (MAX_BUFFERS - 1);
    if index == 0 {
        // SAFETY: this thread's block, which lives as long as the thread.
        return unsafe { &raw const (*block).first };
    }
    // SAFETY: as above.
    let rest = unsafe { (*block).rest.get() };
    if rest.is_null() {
        return std::ptr::null();
    }
    // SAFETY: `rest` is this thread's table of MAX_BUFFERS - 1 slots, and
    // 1 <= index < MAX_BUFFERS.
    unsafe { rest.cast::<Slot>().add(index - 1) }
}

/// A thread's slots: where each of them is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    /// Buffer 0's, in the thread's [`fast_tls`] block.
    first: *const Slot,
    /// The others', in the thread's `thread_local!` table.
    rest: *const [Slot; MAX_BUFFERS - 1],
}

impl Table {
    /// The calling thread's slots. The first call on a thread looks its
    /// table up through `thread_local!` (a call to `__tls_get_addr` in a
    /// shared object) and keeps the address in the thread's block.
    #[inline(always)]
    pub(crate) fn mine() -> Table {
        let block = fast_tls::block();
        // SAFETY: this thread's block, which lives as long as the thread.
        let mut rest = unsafe { (*block).rest.get() };
        if rest.is_null() {
            rest = rest_now(block);
        }
        Table {
            // SAFETY: as above.
            first: unsafe { &raw const (*block).first },
            rest,
        }
    }

    /// Slot `index` (masked into the table).
    #[inline(always)]
    pub(crate) fn slot(self, index: usize) -> *const Slot {
        match index & (MAX_BUFFERS - 1) {
            0 => self.first,
            // SAFETY: 1 <= i < MAX_BUFFERS, inside `rest`.
            i => unsafe { self.rest.cast::<Slot>().add(i - 1) },
        }
    }

    /// Each slot with its index. The thread must be alive (its TLS).
    fn each(self) -> impl Iterator<Item = (usize, *const Slot)> {
        (0..MAX_BUFFERS).map(move |i| (i, self.slot(i)))
    }
}

/// Looks the thread's table up and keeps its address in `block`.
#[cold]
#[inline(never)]
fn rest_now(block: *const fast_tls::FastTls) -> *const [Slot; MAX_BUFFERS - 1] {
    let rest = REST.with(std::ptr::from_ref);
    // SAFETY: this thread's block. A signal handler that interrupts this
    // stores the same address.
    unsafe { (*block).rest.set(rest) };
    rest
}

/// The memory this thread owns for each slot; dropping it (at thread
/// exit) flushes and unmaps.
struct ThreadState {
    memory: [RefCell<Option<Mapping>>; MAX_BUFFERS],
    registered: Cell<bool>,
}

impl ThreadState {
    const fn new() -> ThreadState {
        ThreadState {
            memory: [const { RefCell::new(None) }; MAX_BUFFERS],
            registered: Cell::new(false),
        }
    }
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        if !self.registered.get() {
            return;
        }
        let tid = current_tid();
        // SAFETY: getpid has no preconditions.
        if tid == unsafe { libc::getpid() } || CALLS_EXIT.try_with(Cell::get).unwrap_or(false) {
            // The main thread, or the thread that called `exit`: `exit`
            // (returning from `main` included) runs the calling thread's
            // TLS destructors first, then the `atexit` hooks and static
            // destructors, which write records too. Its slots stay
            // attached and registered, their memory mapped for the rest of
            // the process (its TLS block lives as long), and the exit
            // hook flushes them. (After a `pthread_exit` of the main
            // thread its last records wait for the process's end.)
            for memory in &self.memory {
                std::mem::forget(memory.borrow_mut().take());
            }
            return;
        }
        let table = Table::mine();
        {
            for (index, slot) in table.each() {
                // SAFETY: this thread's slot; its TLS lives until this
                // destructor returns.
                let slot = unsafe { &*slot };
                let owner = slot.owner.load(Ordering::Relaxed);
                if owner == 0 {
                    continue;
                }
                if !EXITING.load(Ordering::Acquire) {
                    if let Some(shared) = handle(index, owner) {
                        shared.flush_slot(slot, super::FlushReason::ThreadExit, tid);
                    }
                }
                // Wait out a snapshot reader of another thread, then cut
                // the slot off from the memory we are about to unmap.
                while !slot.try_claim() {
                    std::hint::spin_loop();
                }
                slot.retire();
                slot.release();
            }
        }
        while with_registry(|r| r.threads.retain(|t| t.table != table)).is_none() {
            std::thread::yield_now();
        }
        // The exit hook of another thread may have claimed any slot while
        // we were still registered; once we are not, no one can claim one
        // anew, so waiting for each to be free makes the TLS ours to drop.
        for (_, slot) in table.each() {
            // SAFETY: as above.
            let slot = unsafe { &*slot };
            while !slot.try_claim() {
                std::thread::yield_now();
            }
            slot.release();
        }
        for memory in &self.memory {
            memory.borrow_mut().take();
        }
    }
}

/// Gives this thread's slot `index` memory of `len` bytes for buffer
/// `owner`. Returns false if that cannot be done here and now (the thread
/// is exiting, the registry is held by the code this signal handler
/// interrupted, or the memory could not be mapped).
///
/// `guarded_for`: the handle, for a guard-page buffer (its memory ends at
/// an inaccessible page, and the fault handler finds the handle in the slot).
pub(crate) fn attach(
    slot: &Slot,
    index: usize,
    owner: u64,
    len: usize,
    limit: usize,
    guarded_for: Option<*const ()>,
) -> bool {
    let attached = STATE.try_with(|state| {
        if !state.registered.get() {
            let tid = current_tid();
            let table = Table::mine();
            if with_registry(|r| r.threads.push(ThreadEntry { tid, table })).is_none() {
                return false;
            }
            state.registered.set(true);
        }
        let Ok(mut memory) = state.memory[index].try_borrow_mut() else {
            return false;
        };
        let (mapping, base, guard) = if guarded_for.is_some() {
            let Ok(guarded) = Mapping::guarded(len) else {
                return false;
            };
            guarded
        } else {
            let Ok(mapping) = Mapping::anonymous(len) else {
                return false;
            };
            let base = mapping.as_ptr();
            (mapping, base, std::ptr::null_mut())
        };
        // The first records' page present before the first write, so
        // that it does not fault (see `mem`).
        mapping.populate(base, crate::page_size().min(len));
        slot.guard.store(guard, Ordering::Relaxed);
        slot.handle.store(
            guarded_for.unwrap_or(std::ptr::null()).cast_mut(),
            Ordering::Relaxed,
        );
        slot.install(owner, base, limit);
        // The old mapping (of a freed handle) is unmapped only now that
        // the slot points elsewhere.
        *memory = Some(mapping);
        true
    });
    attached.unwrap_or(false)
}

/// Whether `ptr` is the address of one of this thread's slots. Called
/// from the guard-page SIGSEGV handler: it reads only the thread's block
/// and does not look the table up. (A first `thread_local!` access in a
/// `dlopen`ed object may allocate; the block itself, where it is a
/// `thread_local!`, was reached on this thread already by the write the
/// handler is called for.) A thread whose table was never looked up has
/// had no slot attached but buffer 0's, which is in its block.
pub(crate) fn is_own_slot(ptr: usize) -> bool {
    let block = fast_tls::block();
    // SAFETY: this thread's block, which lives as long as the thread.
    let (first, rest) = unsafe { (&raw const (*block).first, (*block).rest.get()) };
    if ptr == first as usize {
        return true;
    }
    if rest.is_null() {
        return false;
    }
    let (start, size) = (rest as usize, std::mem::size_of::<Slot>());
    ptr >= start && ptr < start + (MAX_BUFFERS - 1) * size && (ptr - start).is_multiple_of(size)
}

/// This thread's id (what `gettid` returns).
pub(crate) fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A live thread with buffers, as the registry knows it.
struct ThreadEntry {
    tid: i32,
    /// The thread's slots. Valid while the entry is registered: the
    /// thread removes it (under the registry lock) before its TLS dies.
    table: Table,
}

/// Live threads and buffer handles.
struct Registry {
    threads: Vec<ThreadEntry>,
    handles: [Option<Weak<Shared>>; MAX_BUFFERS],
}

/// The registry is guarded by a spin lock rather than a `Mutex` because
/// `fork` needs it held from the prepare handler to the parent and child
/// handlers, which a guard object cannot span.
static LOCK: AtomicBool = AtomicBool::new(false);
static mut REGISTRY: Registry = Registry {
    threads: Vec::new(),
    handles: [const { None }; MAX_BUFFERS],
};
/// Set by the exit hook: buffers have been flushed for the last time.
pub(crate) static EXITING: AtomicBool = AtomicBool::new(false);

/// The calling thread is about to call `exit`: its TLS destructors, which
/// `exit` runs before the exit hooks, keep its buffers for the last
/// flush's hook, as the main thread's do.
pub(crate) fn before_exit() {
    let _ = CALLS_EXIT.try_with(|c| c.set(true));
}

fn lock() -> bool {
    // The flag is raised before trying and lowered after releasing, so a
    // signal handler arriving anywhere in between sees it and backs off
    // instead of spinning on a lock its own thread holds.
    if HOLDS_LOCK.try_with(|h| h.replace(true)).unwrap_or(true) {
        return false;
    }
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    true
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
    let _ = HOLDS_LOCK.try_with(|h| h.set(false));
}

/// Runs `f` with the registry locked; `None` if this thread already holds
/// the lock (a signal handler interrupted it).
fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> Option<R> {
    if !lock() {
        return None;
    }
    // SAFETY: LOCK is held, so this is the only reference to REGISTRY.
    let registry = unsafe { &mut *std::ptr::addr_of_mut!(REGISTRY) };
    let result = f(registry);
    unlock();
    Some(result)
}

/// The live handle that owns slot `index` with id `owner`, if any.
fn handle(index: usize, owner: u64) -> Option<std::sync::Arc<Shared>> {
    with_registry(|r| r.handles[index].as_ref().and_then(Weak::upgrade))
        .flatten()
        .filter(|shared| shared.id == owner)
}

/// Claims a free slot index for a new handle.
pub(crate) fn claim_index(shared: &Weak<Shared>) -> Option<usize> {
    install_hooks();
    with_registry(|r| {
        // Only an empty entry is free: a Weak whose count is 0 may belong
        // to a handle still being built (new_cyclic) or being dropped.
        let index = r.handles.iter().position(Option::is_none)?;
        r.handles[index] = Some(shared.clone());
        Some(index)
    })
    .flatten()
}

/// Gives slot `index` back when the handle at `shared` is dropped (only
/// if the entry is still that handle's).
pub(crate) fn release_index(index: usize, shared: *const Shared) {
    with_registry(|r| {
        if r.handles[index]
            .as_ref()
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), shared))
        {
            r.handles[index] = None;
        }
    });
}

/// Calls `f` on slot `index` of every registered thread, with the tid.
/// `f` runs with the registry locked and must not write to buffers.
pub(crate) fn for_each_thread_slot(index: usize, mut f: impl FnMut(i32, &Slot)) {
    with_registry(|r| {
        for thread in &r.threads {
            // SAFETY: the entry is registered, so its thread has not yet
            // torn down its TLS (it unregisters under this lock first).
            f(thread.tid, unsafe { &*thread.table.slot(index) });
        }
    });
}

/// The process's exit and fork hooks, registered with the first buffer.
static HOOKS: Once = Once::new();

fn install_hooks() {
    HOOKS.call_once(|| {
        super::process_hooks::register(at_exit, before_fork, after_fork_parent, after_fork_child);
    });
}

/// Whether the exit and fork hooks are registered (a buffer was made).
pub(crate) fn hooks_installed() -> bool {
    HOOKS.is_completed()
}

/// Flushes every trace buffer of every registered thread for the last
/// time: the calling thread's completely, other threads' up to what they
/// had committed when we looked.
extern "C" fn at_exit() {
    flush_for_the_last_time();
}

/// How many 50 µs steps the last flush waits for another thread's slot
/// that thread's slow path holds (100 ms in all, for a hand-over that
/// waits for room in the recorder's channel).
const BUSY_PATIENCE_STEPS: u32 = 2000;

/// [`at_exit`], for a process that ends without its `atexit` hooks. Once:
/// a second call (the hook after an explicit call) hands nothing over
/// again, since another thread's buffer is read up to what it had
/// committed, not emptied.
pub(crate) fn flush_for_the_last_time() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(entries) = with_registry(|r| {
        let handles: Vec<_> = r
            .handles
            .iter()
            .map(|h| h.as_ref().and_then(Weak::upgrade))
            .collect();
        let threads: Vec<_> = r.threads.iter().map(|t| (t.tid, t.table)).collect();
        (handles, threads)
    }) else {
        return;
    };
    let (handles, threads) = entries;
    // From here on slow paths drop records: nothing will flush them again.
    EXITING.store(true, Ordering::Release);
    // Flushes run without the lock, since a flush function may write to
    // other buffers; each thread is checked to be still registered just
    // before its slot is read, and an exiting thread waits for `busy`.
    let me = current_tid();
    for (tid, table) in threads {
        for (index, shared) in handles.iter().enumerate() {
            let Some(shared) = shared else { continue };
            // Claim the slot while the thread is known to be registered:
            // an exiting thread waits for `busy` before it unregisters
            // and frees its TLS. A slot busy in its thread's slow path (a
            // full buffer being handed over: a thread making calls without
            // pause is there a good share of the time) is let go in
            // moments: it is waited for, at most BUSY_PATIENCE_STEPS steps
            // of 50 µs, so that its buffer is not left out. (One whose
            // thread stopped there, in a signal handler waiting for this
            // flush, never is.)
            let mut claimed = None;
            for _ in 0..BUSY_PATIENCE_STEPS {
                claimed = with_registry(|r| {
                    r.threads.iter().any(|t| t.table == table)
                        // SAFETY: the thread is registered (checked under the lock).
                        && unsafe { (*table.slot(index)).try_claim() }
                });
                if claimed != Some(false) || tid == me {
                    break;
                }
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 50_000,
                };
                // SAFETY: a valid timespec; the remainder is not wanted.
                unsafe { libc::nanosleep(&raw const pause, std::ptr::null_mut()) };
            }
            if claimed != Some(true) {
                continue;
            }
            // SAFETY: claimed above; the thread cannot free it meanwhile.
            let slot = unsafe { &*table.slot(index) };
            if slot.owner.load(Ordering::Acquire) == shared.id {
                let flush =
                    || shared.flush_claimed(slot, super::FlushReason::ProcessExit, tid, tid == me);
                if tid == me {
                    // The own buffer's counters are reset: as any flush
                    // of one's own, with signals blocked.
                    shared.with_signals_blocked(flush);
                } else {
                    flush();
                }
            }
            slot.release();
        }
    }
}

extern "C" fn before_fork() {
    // Held across fork so that the child's copy of the registry is whole.
    while !lock() {
        // Only a fork from inside a signal handler that interrupted the
        // registry lock could get here; waiting is all we can do.
        std::thread::yield_now();
    }
}

extern "C" fn after_fork_parent() {
    unlock();
}

/// The child has one thread, the one that called `fork`. Its buffers start
/// empty (the parent keeps and flushes what was in them); the other
/// threads' buffers are abandoned, never flushed twice.
extern "C" fn after_fork_child() {
    // SAFETY: the lock is held (taken in `before_fork`) and the child has
    // only this thread.
    let registry = unsafe { &mut *std::ptr::addr_of_mut!(REGISTRY) };
    let mine = Table::mine();
    let tid = current_tid();
    registry.threads.retain(|t| t.table == mine);
    for thread in &mut registry.threads {
        thread.tid = tid;
    }
    let page = crate::page_size();
    for (_, slot) in mine.each() {
        // SAFETY: this thread's slot.
        let slot = unsafe { &*slot };
        // The page the child's first records go to (the buffer's start)
        // is the parent's, shared until written: its copy is made now,
        // not in the child's first write (see `mem`). Before the slot is
        // emptied: until then no record of a signal handler's goes there
        // to be overwritten by an older kernel's read and write back.
        let base = slot.base.load(Ordering::Relaxed) as usize;
        if slot.owner.load(Ordering::Relaxed) != 0 && base != 0 {
            let first = base & !(page - 1);
            // SAFETY: the page holding the buffer's start lies within its
            // mapping (mapped from a page boundary, or ending at a guard
            // page past this one), writable, and only this thread (the
            // child's only one) writes it.
            unsafe { super::mem::make_present(first, first + page) };
        }
        {
            slot.reserved.store(0, Ordering::Relaxed);
            slot.committed.store(0, Ordering::Relaxed);
            slot.lost_records.store(0, Ordering::Relaxed);
            slot.lost_bytes.store(0, Ordering::Relaxed);
            slot.flushes.store(0, Ordering::Relaxed);
            slot.busy.store(false, Ordering::Relaxed);
        }
    }
    unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_slots_are_told_from_other_addresses_without_a_lookup() {
        // A fresh thread: its table not looked up yet, buffer 0's slot
        // is known all the same.
        std::thread::spawn(|| {
            let first = fast_tls::block() as usize;
            assert!(is_own_slot(first));
            let table = Table::mine();
            for index in 0..MAX_BUFFERS {
                assert!(is_own_slot(table.slot(index) as usize), "slot {index}");
            }
            let third = table.slot(3) as usize;
            assert!(!is_own_slot(third + 8), "inside a slot");
            assert!(!is_own_slot(first + 8), "inside buffer 0's slot");
            let other = std::thread::spawn(|| Table::mine().slot(2) as usize)
                .join()
                .unwrap();
            assert!(!is_own_slot(other), "another thread's");
        })
        .join()
        .unwrap();
    }
}
