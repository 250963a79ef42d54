//! Demangling C++ names in a process: libiberty runs on a stack mapped
//! for each thread that demangles. A forked child demangles on its copy
//! of the forking thread's; a thread's is let go when it ends. (A test
//! binary of its own: no other test's thread is demangling when it
//! forks, or mapping memory while the threads are counted; its two tests
//! take turns.)

/// libiberty's spelling; `cpp_demangle` writes `std::nullptr_t`.
const NAME: &str = "_ZNSolsEDn";
const LIBIBERTY: &str = "std::ostream::operator<<(decltype(nullptr))";

/// Held by each test while it runs.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_forked_child_demangles_with_libiberty() {
    let _alone = ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(ichnos_symbol::demangle(NAME).as_deref(), Some(LIBIBERTY));
    // SAFETY: the child only demangles (which allocates: this process
    // has no other thread that could hold the allocator's lock) and
    // leaves with `_exit`.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        // A child that hangs is ended by the alarm.
        // SAFETY: plain system calls in the child.
        unsafe { libc::alarm(20) };
        let ok = ichnos_symbol::demangle(NAME).as_deref() == Some(LIBIBERTY)
            && ichnos_symbol::demangle("_Z3fooi").as_deref() == Some("foo(int)");
        // SAFETY: leaves the child without running the test harness's
        // exit handlers.
        unsafe { libc::_exit(i32::from(!ok)) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
}

/// The process's mapped memory, in KiB (`VmSize` in /proc/self/status).
fn mapped_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize")
}

/// Threads that demangle and end leave no stack of theirs mapped: 64
/// threads' 8 MiB stacks for libiberty would add 512 MiB.
#[test]
fn threads_that_end_let_their_stacks_go() {
    let _alone = ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A first thread's, and the C++ runtime loaded, before counting.
    std::thread::spawn(|| ichnos_symbol::demangle(NAME))
        .join()
        .unwrap();
    let before = mapped_kib();
    for _ in 0..64 {
        let answer = std::thread::spawn(|| ichnos_symbol::demangle(NAME))
            .join()
            .unwrap();
        assert_eq!(answer.as_deref(), Some(LIBIBERTY));
    }
    let grown = mapped_kib().saturating_sub(before);
    assert!(grown < 128 << 10, "{grown} KiB more mapped");
}
