//! A process forked after C++ names were demangled still demangles them
//! as libiberty does, on its copy of the forking thread's stack for
//! libiberty. (A test binary of its own: no other test's thread is
//! demangling when it forks.)

/// libiberty's spelling; `cpp_demangle` writes `std::nullptr_t`.
const NAME: &str = "_ZNSolsEDn";
const LIBIBERTY: &str = "std::ostream::operator<<(decltype(nullptr))";

#[test]
fn a_forked_child_demangles_with_libiberty() {
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
