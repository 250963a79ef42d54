//! Probes and named spans for Rust programs traced by `ichnos trace`.
//!
//! `ichnos trace` preloads its runtime (`libichnos_preload.so`), which
//! defines the C functions of `include/ichnos/trace.h`: `ichnos_probe`,
//! `ichnos_span_begin`, `ichnos_span_end` and `ichnos_snapshot`. This
//! crate finds them in the running process the first time it is used
//! (`dlsym` over every loaded object) and calls them; in a program that
//! runs untraced they are not there, and each call costs one atomic load.
//!
//! ```
//! // A value at this moment, in the thread's trace.
//! ichnos_probe::probe!(1, 42);
//! {
//!     // Shows in the replay as a call named "parse" around what runs
//!     // until the guard is dropped.
//!     let _span = ichnos_probe::span!("parse");
//! }
//! ```
//!
//! Nothing here needs the program to be built with
//! `-finstrument-functions`: a Rust program's spans and probes are traced
//! on their own.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A runtime function, found on first use: 0 not looked for yet, 1 not
/// there, else its address.
struct Entry {
    name: &'static CStr,
    address: AtomicUsize,
}

impl Entry {
    const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            address: AtomicUsize::new(0),
        }
    }

    /// The function's address, if the runtime is in the process.
    fn get(&self) -> Option<usize> {
        let mut found = self.address.load(Ordering::Relaxed);
        if found == 0 {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT
            // searches every object loaded, the preloaded runtime first.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, self.name.as_ptr()) } as usize;
            found = if p == 0 { 1 } else { p };
            self.address.store(found, Ordering::Relaxed);
        }
        (found > 1).then_some(found)
    }
}

static PROBE: Entry = Entry::new(c"ichnos_probe");
static SPAN_BEGIN: Entry = Entry::new(c"ichnos_span_begin");
static SPAN_END: Entry = Entry::new(c"ichnos_span_end");
static SNAPSHOT: Entry = Entry::new(c"ichnos_snapshot");

/// Whether the program runs under `ichnos trace` (its runtime is loaded).
#[must_use]
pub fn traced() -> bool {
    PROBE.get().is_some()
}

/// A probe: `id` (below 2^48) and `value` at this moment, in the calling
/// thread's trace. [`probe!`] is the same.
pub fn probe(id: u64, value: u64) {
    if let Some(f) = PROBE.get() {
        // SAFETY: the runtime's `void ichnos_probe(uint64_t, uint64_t)`.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(u64, u64)>(f) };
        f(id, value);
    }
}

/// Hands the trace over now (with `--ring`: every thread's ring).
pub fn snapshot() {
    if let Some(f) = SNAPSHOT.get() {
        // SAFETY: the runtime's `void ichnos_snapshot(void)`.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn()>(f) };
        f();
    }
}

/// A named span, begun when made and ended when dropped ([`span!`]).
#[derive(Debug)]
#[must_use = "the span ends when this is dropped"]
pub struct Span {
    name: &'static CStr,
}

impl Span {
    /// Begins the span called `name` in the calling thread's trace. A
    /// span is known by its name's address: `name` lives as long as the
    /// program, and the same pointer ends it.
    pub fn begin(name: &'static CStr) -> Span {
        call_with_name(&SPAN_BEGIN, name);
        Span { name }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        call_with_name(&SPAN_END, self.name);
    }
}

fn call_with_name(entry: &Entry, name: &'static CStr) {
    if let Some(f) = entry.get() {
        // SAFETY: the runtime's `void ichnos_span_begin/end(const char *)`,
        // given a NUL-terminated string that lives as long as the program.
        let f = unsafe { std::mem::transmute::<usize, extern "C" fn(*const c_char)>(f) };
        f(name.as_ptr());
    }
}

/// A probe: `probe!(id, value)` writes `id` and `value` into the calling
/// thread's trace ([`probe`]).
#[macro_export]
macro_rules! probe {
    ($id:expr, $value:expr) => {
        $crate::probe($id, $value)
    };
}

/// A named span: `let _span = span!("name");` shows as a call named
/// `name` from here until the guard is dropped ([`Span`]).
#[macro_export]
macro_rules! span {
    ($name:literal) => {
        $crate::Span::begin({
            const NAME: &::core::ffi::CStr =
                match ::core::ffi::CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("a span name holds no NUL byte"),
                };
            NAME
        })
    };
}

#[cfg(test)]
mod tests {
    /// Untraced (this test runs without the runtime), every call is a
    /// no-op that finds nothing.
    #[test]
    fn untraced_the_calls_do_nothing() {
        assert!(!super::traced());
        crate::probe!(1, 2);
        let span = crate::span!("nothing");
        assert_eq!(span.name.to_bytes(), b"nothing");
        drop(span);
        super::snapshot();
        assert_eq!(
            super::PROBE
                .address
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }
}
