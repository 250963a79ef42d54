//! The bytes objects are read from: files mapped so that a truncation
//! under them reads zeros and says so (not SIGBUS), or sections
//! decompressed into memory; and which files a load mapped, so that the
//! loaded object can tell later whether one was cut short.

use std::cell::RefCell;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use crate::error::SymbolError;
use crate::mapped_file::MappedFile;

/// The bytes DWARF is read from: a mapped file, or a decompressed
/// section.
#[derive(Debug)]
pub(crate) enum Buffer {
    Mapped(MappedFile),
    Owned(Vec<u8>),
}

impl Shared {
    /// The file, if this is a mapping a read ran past the end of (the
    /// file was cut short under it; zeros were read).
    pub(crate) fn truncated(&self) -> Option<&Path> {
        match &*self.0 {
            Buffer::Mapped(m) if m.faulted() => Some(m.path()),
            _ => None,
        }
    }

    /// The mapped file, if this is one.
    pub(crate) fn file(&self) -> Option<&MappedFile> {
        match &*self.0 {
            Buffer::Mapped(m) => Some(m),
            Buffer::Owned(_) => None,
        }
    }
}

std::thread_local! {
    /// The files mapped while an object is loaded on this thread
    /// ([`collecting`]), so that the object can tell later whether any of
    /// them was cut short under it.
    static LOADING: RefCell<Option<Vec<Shared>>> = const { RefCell::new(None) };
}

/// Runs `f`, returning with it the files it mapped on this thread. The
/// collector before it is put back however `f` ends (a panic too).
pub(crate) fn collecting<T>(f: impl FnOnce() -> T) -> (T, Vec<Shared>) {
    /// Puts the collector before back when dropped, unless disarmed.
    struct Restore {
        outer: Option<Vec<Shared>>,
        armed: bool,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            if self.armed {
                let outer = self.outer.take();
                LOADING.with(|l| *l.borrow_mut() = outer);
            }
        }
    }
    let mut restore = Restore {
        outer: LOADING.with(|l| l.replace(Some(Vec::new()))),
        armed: true,
    };
    let out = f();
    restore.armed = false;
    let outer = restore.outer.take();
    let mapped = LOADING.with(|l| l.replace(outer)).unwrap_or_default();
    // A load inside a load: the outer one keeps them too.
    LOADING.with(|l| {
        if let Some(outer) = l.borrow_mut().as_mut() {
            outer.extend(mapped.iter().cloned());
        }
    });
    (out, mapped)
}

/// A shared handle on a [`Buffer`], the storage of [`Reader`].
#[derive(Debug, Clone)]
pub(crate) struct Shared(pub(crate) Arc<Buffer>);

impl Deref for Shared {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            Buffer::Mapped(m) => m,
            Buffer::Owned(v) => v,
        }
    }
}

// SAFETY: the bytes live in the `Arc`'s allocation (a mapping or a vector
// that is never changed), so they stay at one address when the handle moves
// or is cloned.
unsafe impl gimli::StableDeref for Shared {}
// SAFETY: as above; clones share the same allocation.
unsafe impl gimli::CloneStableDeref for Shared {}

/// Maps the file at `path`, as one of the files the object being
/// loaded on this thread was read from ([`collecting`]).
pub(crate) fn map(path: &Path) -> Result<Shared, SymbolError> {
    let shared = Shared(Arc::new(Buffer::Mapped(MappedFile::open(path)?)));
    LOADING.with(|l| {
        if let Some(loading) = l.borrow_mut().as_mut() {
            loading.push(shared.clone());
        }
    });
    Ok(shared)
}
