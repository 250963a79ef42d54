//! The page a thread's first records go to is present before the thread's
//! first write stores anything: neither that store nor the rest of the
//! page's records take a page fault, as the kernel counts them (the
//! thread's minor faults, `getrusage(RUSAGE_THREAD)`). The fault would
//! fall inside whatever the instrumented code times from its first record.

use std::cell::Cell;

use ichnos_buf::fill::FillBuffer;

const CAPACITY: usize = 256 * 1024;
const RECORD: usize = 16;
const PAGE: usize = 4096;

/// The calling thread's minor page faults so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage fills the struct it is given and nothing else.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is Linux's, for the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut usage) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    usage.ru_minflt
}

/// On a fresh thread: the faults from the moment the first record's
/// place is reserved (its buffer set up) to the end of the first page's
/// records.
fn faults_in_first_page(buf: &FillBuffer) -> i64 {
    let reserved = Cell::new(0);
    buf.write_with(RECORD, |record| {
        reserved.set(minor_faults());
        record.fill(0x5a);
    })
    .unwrap();
    for _ in 1..PAGE / RECORD {
        buf.write(&[0xa5; RECORD]).unwrap();
    }
    minor_faults() - reserved.get()
}

/// [`faults_in_first_page`] on a fresh thread, once the same writes ran
/// on another thread: the code they run is then in memory (its first run
/// may fault on the test's own code pages), and only the buffer's memory,
/// each thread's own, is new.
fn faults_in_a_threads_first_page(buf: FillBuffer) -> i64 {
    let buf = std::sync::Arc::new(buf);
    let warm = buf.clone();
    std::thread::spawn(move || faults_in_first_page(&warm))
        .join()
        .unwrap();
    std::thread::spawn(move || faults_in_first_page(&buf))
        .join()
        .unwrap()
}

#[test]
fn a_trace_buffers_first_page_is_present_before_its_first_record() {
    let buf = FillBuffer::trace(CAPACITY, |_| {}).unwrap();
    assert_eq!(faults_in_a_threads_first_page(buf), 0);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_guarded_trace_buffers_first_page_is_present_before_its_first_record() {
    let buf = FillBuffer::trace_guarded(CAPACITY, |_| {}).unwrap();
    assert_eq!(faults_in_a_threads_first_page(buf), 0);
}

#[test]
fn a_rings_first_page_is_present_before_its_first_record() {
    let buf = FillBuffer::circular(CAPACITY, RECORD).unwrap();
    assert_eq!(faults_in_a_threads_first_page(buf), 0);
}

/// Writes to 32 KiB of stack below the caller's frame, so that a child of
/// `fork` has its own copy of those stack pages before it counts faults.
#[inline(never)]
fn touch_stack() {
    // The point is the stack: a large local array, on purpose.
    #[allow(clippy::large_stack_arrays)]
    std::hint::black_box([0u8; 32 * 1024]);
}

/// One record into `buf`: the faults from its reservation on.
#[inline(never)]
fn faults_writing_one(buf: &FillBuffer) -> i64 {
    let reserved = Cell::new(0);
    let written = buf.write_with(RECORD, |record| {
        reserved.set(minor_faults());
        record.fill(0x5a);
    });
    let faults = minor_faults() - reserved.get();
    if written.is_ok() {
        faults
    } else {
        -1
    }
}

/// A child of `fork` starts its buffers empty, at the page the parent's
/// first records went to, which the two share until it is written: the
/// child's copy is made in `fork`, not in its first record.
#[test]
fn a_fork_childs_first_page_is_present_before_its_first_record() {
    let buf = FillBuffer::trace(CAPACITY, |_| {}).unwrap();
    let warm = FillBuffer::trace(CAPACITY, |_| {}).unwrap();
    let faults = std::thread::spawn(move || {
        // The parent's records in both.
        faults_in_first_page(&buf);
        faults_in_first_page(&warm);
        // SAFETY: the child only writes two records, reads its own counts
        // and leaves with _exit; the buffers' fork handlers leave this
        // thread's slots attached and empty.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // The child maps the code it runs afresh (fork copies no page
            // table of it) and shares the stack until written: both are
            // touched first, through the other buffer. A panic here must
            // not unwind out of the child's only thread as a success.
            let faults = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                touch_stack();
                faults_writing_one(&warm);
                faults_writing_one(&buf)
            }));
            let code = match faults {
                Ok(faults) if faults < 0 => 101,
                Ok(faults) => faults.min(100) as i32,
                Err(_) => 102,
            };
            // SAFETY: leaves the child at once, running nothing of the
            // parent's.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status),
            "the child ended by a signal: {status:#x}"
        );
        libc::WEXITSTATUS(status)
    })
    .join()
    .unwrap();
    assert_eq!(
        faults, 0,
        "the child's first record took {faults} faults (101: refused, 102: panicked)"
    );
}
