//! The registry in this process: self-registration of loaded objects
//! (a library of ours with SFrame, dlopen'ed), rows shared per build id,
//! lookups that never wait for a registration, and argument checks.

mod support;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ichnos_code::elf::{file_rows, RowChoice};
use ichnos_code::{
    register_loaded_objects, ElfCode, Invalid, Registry, RegistryError, RowSource, Rows,
};

/// Held by every test that walks the loaded objects: a walk opens every
/// loaded file, which the test that watches for opens must not see from
/// another test's walk.
fn walking() -> std::sync::MutexGuard<'static, ()> {
    static WALKS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    WALKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds the fixture library, copies it under `name` (so that no other
/// test holds that file open) and loads the copy into this process: the
/// directory, the copy's path and the dlopen handle.
fn load_copy_of_libfix(name: &str) -> (tempfile::TempDir, PathBuf, *mut libc::c_void) {
    let dir = tempfile::tempdir().unwrap();
    support::build_prog(dir.path());
    let lib = dir.path().join(name);
    std::fs::copy(dir.path().join("libfix.so"), &lib).unwrap();
    let c = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library of ours with no constructors.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", lib.display());
    (dir, lib, handle)
}

/// The text range of `lib` that `report` registered.
fn registered_text(report: &ichnos_code::LoadedReport, lib: &Path) -> std::ops::Range<u64> {
    report
        .registered
        .iter()
        .find(|(p, _)| p == lib)
        .map_or_else(
            || panic!("{} not registered: {report:?}", lib.display()),
            |(_, t)| t.clone(),
        )
}

/// Builds the fixture library and loads it into this process.
fn load_libfix() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    support::build_prog(dir.path());
    let lib = dir.path().join("libfix.so");
    let c = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library of ours whose constructors do nothing.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null(), "dlopen {}", lib.display());
    (dir, lib)
}

#[test]
fn loaded_objects_are_registered_with_their_sframe_and_identity() {
    let _walk = walking();
    let (_dir, lib) = load_libfix();
    let registry = Registry::new();
    let report = register_loaded_objects(&registry);
    // (Other tests of this process load and unload libraries meanwhile; a
    // library closed during the walk may be skipped, ours may not.)
    assert!(
        report.skipped.iter().all(|(p, _)| *p != lib),
        "{:?}",
        report.skipped
    );
    let ours = registry
        .registrations()
        .into_iter()
        .find_map(|r| match r {
            ichnos_code::Registration::Elf(e) if e.path.as_deref() == Some(lib.as_path()) => {
                Some(e)
            }
            _ => None,
        })
        .expect("libfix.so registered");
    assert!(ours.sframe.is_some());
    let bytes = std::fs::read(&lib).unwrap();
    let (build_id, _) = ichnos_code::elf::identity(&bytes);
    assert_eq!(ours.build_id, build_id);

    // Rows read from the loaded SFrame segment equal the rows read from the
    // file's .sframe section, address for address.
    let from_file = file_rows(&bytes, RowChoice::Sframe).unwrap();
    let object = registry.lookup(ours.text.start).unwrap();
    assert_eq!(object.source, RowSource::Sframe);
    let mut compared = 0;
    for pc in ours.text.clone() {
        let want = from_file
            .find(pc - ours.elf.start)
            .map(|r| (r.cfa_off, r.fp_off, r.info));
        let got = object.find_row(pc).map(|r| (r.cfa_off, r.fp_off, r.info));
        assert_eq!(got, want, "at {pc:#x}");
        compared += usize::from(got.is_some());
    }
    // lib_inner, lib_call and the PLT: 72 bytes of code with rows.
    assert!(compared >= 64, "{compared} addresses with rows");

    // A second walk registers nothing it registered before (other tests of
    // this process may load libraries meanwhile): those are skipped as
    // already there.
    let again = register_loaded_objects(&registry);
    for (path, text) in &report.registered {
        assert!(
            !again.registered.iter().any(|(_, t)| t == text),
            "{} registered twice",
            path.display()
        );
    }
    assert!(again
        .skipped
        .iter()
        .filter(|(p, _)| *p == lib)
        .all(|(_, e)| matches!(e, RegistryError::Overlap(_))));
}

#[test]
fn a_closed_library_is_unregistered_by_the_next_walk() {
    let _walk = walking();
    let (_dir, lib, handle) = load_copy_of_libfix("libclosed.so");
    let registry = Registry::new();
    let first = register_loaded_objects(&registry);
    let text = registered_text(&first, &lib);
    // SAFETY: the handle from dlopen above; nothing of the library is used.
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    let second = register_loaded_objects(&registry);
    assert!(second.removed.contains(&text.start), "{:?}", second.removed);
    assert!(registry.lookup(text.start).is_none());
}

/// The names of the files opened in `dir` since the inotify instance
/// `fd` began watching it (`IN_OPEN` events, as the kernel reports them).
fn opened(fd: i32) -> Vec<String> {
    let mut buf = [0u8; 8192];
    let mut names = Vec::new();
    loop {
        // SAFETY: reads into a buffer of ours of the length given.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(n) = usize::try_from(n) else {
            break; // EAGAIN: nothing more
        };
        if n == 0 {
            break;
        }
        let mut at = 0;
        // struct inotify_event: wd, mask, cookie, len, then len bytes of
        // name padded with NULs.
        while at + 16 <= n {
            let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
            let name = &buf[at + 16..(at + 16 + len).min(n)];
            let name = name.split(|&b| b == 0).next().unwrap_or_default();
            names.push(String::from_utf8_lossy(name).into_owned());
            at += 16 + len;
        }
    }
    names
}

/// A second walk of the same loaded objects reads none of their files:
/// the kernel, watching the library's directory, reports no open of it
/// (and does report the open a fresh registry's walk makes).
#[test]
fn a_second_walk_reads_no_file_of_what_it_registered() {
    let _walk = walking();
    let (dir, lib, handle) = load_copy_of_libfix("libwatched.so");
    let registry = Registry::new();
    let first = register_loaded_objects(&registry);
    let text = registered_text(&first, &lib);

    // SAFETY: plain system calls on a descriptor of ours.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    let watched = CString::new(dir.path().to_str().unwrap()).unwrap();
    // SAFETY: as above, with a NUL-terminated path.
    assert!(unsafe { libc::inotify_add_watch(fd, watched.as_ptr(), libc::IN_OPEN) } >= 0);

    let second = register_loaded_objects(&registry);
    assert!(!second.registered.iter().any(|(p, _)| *p == lib));
    assert!(second.skipped.iter().any(|(p, _)| *p == lib));
    assert!(registry.lookup(text.start).is_some());
    let seen = opened(fd);
    assert!(!seen.iter().any(|n| n == "libwatched.so"), "{seen:?}");

    // Not vacuous: a walk that has not registered it reads the file, and
    // the watch sees that.
    let fresh = Registry::new();
    register_loaded_objects(&fresh);
    let seen = opened(fd);
    assert!(seen.iter().any(|n| n == "libwatched.so"), "{seen:?}");
    // SAFETY: our descriptor and the handle from dlopen above.
    unsafe {
        libc::close(fd);
        libc::dlclose(handle);
    }
}

/// What a walk registered and then changed (its file touched: another
/// modification time) or was unregistered by someone else is registered
/// again by the next walk, the changed one after its old registration is
/// removed.
#[test]
fn a_changed_or_unregistered_object_is_registered_again() {
    let _walk = walking();
    let (_dir, lib, handle) = load_copy_of_libfix("libchanged.so");
    let registry = Registry::new();
    let first = register_loaded_objects(&registry);
    let text = registered_text(&first, &lib);

    // Unregistered by someone else: the next walk registers it again.
    registry.unregister(text.start).unwrap();
    let second = register_loaded_objects(&registry);
    assert!(
        second.registered.iter().any(|(_, t)| *t == text),
        "{second:?}"
    );

    // Its file changed under the same path (a later modification time):
    // the old registration goes, and the object is registered anew.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&lib)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let third = register_loaded_objects(&registry);
    assert!(third.removed.contains(&text.start), "{third:?}");
    assert!(
        third.registered.iter().any(|(_, t)| *t == text),
        "{third:?}"
    );
    // And then it is the same again: skipped, nothing removed.
    let fourth = register_loaded_objects(&registry);
    assert!(!fourth.removed.contains(&text.start));
    assert!(!fourth.registered.iter().any(|(_, t)| *t == text));
    // SAFETY: the handle from dlopen above.
    unsafe { libc::dlclose(handle) };
}

/// A library without SFrame, whose rows come from its `.eh_frame`: a
/// second registry finds them by the build id in its loaded notes, with
/// nothing of the file read (it is renamed away first).
#[test]
fn eh_frame_rows_made_once_serve_a_registration_without_the_file() {
    rows_made_once_serve_a_registration_without_the_file(&[], RowSource::EhFrame);
}

/// The same for a library built without asynchronous unwind tables,
/// whose CFI is in `.debug_frame`: both registrations name that source,
/// the second from the cache, though it reads nothing of the file.
#[test]
fn debug_frame_rows_keep_their_source_when_they_serve_another_registration() {
    rows_made_once_serve_a_registration_without_the_file(
        &["-fno-asynchronous-unwind-tables", "-g"],
        RowSource::DebugFrame,
    );
}

/// Builds a library with `flags`, registers it in two registries (the
/// file renamed away for the second) and checks that both give its code
/// the rows made once, from `source`.
fn rows_made_once_serve_a_registration_without_the_file(flags: &[&str], source: RowSource) {
    let _walk = walking();
    let dir = tempfile::tempdir().unwrap();
    let c_file = dir.path().join("noframe.c");
    std::fs::write(&c_file, "int noframe_work(int x) { return x * 3 + 1; }\n").unwrap();
    let lib = dir.path().join("libnoframe.so");
    let built = std::process::Command::new("gcc")
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-fomit-frame-pointer",
            "-Wl,--build-id",
        ])
        .args(flags)
        .arg("-o")
        .arg(&lib)
        .arg(&c_file)
        .status()
        .unwrap();
    assert!(built.success());
    let c = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library of ours with no constructors.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null());
    let text_of = |r: &Registry| {
        r.registrations().into_iter().find_map(|reg| match reg {
            ichnos_code::Registration::Elf(e)
                if e.build_id.is_some()
                    && e.sframe.is_none()
                    && e.text.contains(&(noframe_addr(handle))) =>
            {
                Some(e.text)
            }
            _ => None,
        })
    };
    let a = Registry::new();
    register_loaded_objects(&a);
    let text = text_of(&a).expect("the library registered with a build id");
    let in_a = a.lookup(text.start).unwrap();
    assert_eq!(in_a.source, source);
    let kept = dir.path().join("kept.so");
    std::fs::rename(&lib, &kept).unwrap();
    let b = Registry::new();
    register_loaded_objects(&b);
    let in_b = b.lookup(text.start).unwrap();
    std::fs::rename(&kept, &lib).unwrap();
    assert_eq!(in_b.source, source);
    assert!(in_a.rows.same(&in_b.rows), "converted again");
    // The function's row, whichever section it came from.
    assert!(in_a.find_row(noframe_addr(handle)).is_some());
    // SAFETY: the handle from dlopen above; nothing of it is used after.
    unsafe { libc::dlclose(handle) };
}

/// The address of `noframe_work` in the library `handle` holds.
fn noframe_addr(handle: *mut libc::c_void) -> u64 {
    // SAFETY: a symbol lookup in a handle of ours.
    let sym = unsafe { libc::dlsym(handle, c"noframe_work".as_ptr()) };
    assert!(!sym.is_null());
    sym as u64
}

/// The path this process maps libc from.
fn libc_path() -> String {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libc.so"))
        .unwrap()
        .to_string()
}

/// A registrant that gives a file another build's id lends no rows under
/// that id: the file's `.eh_frame` is not kept for it, and a later
/// registration with that id and no file gets none.
#[test]
fn a_misstated_build_id_keeps_no_rows_for_others() {
    let libc = libc_path();
    let bogus = b"not libc's build id, nor anyone's".to_vec();
    let registry = Registry::new();
    let base = 0x20_0000_0000u64;
    registry
        .register_elf(ElfCode {
            elf: base..base + 0x100_0000,
            text: base + 0x1000..base + 0x10_0000,
            path: Some(libc.into()),
            build_id: Some(bogus.clone()),
            ..ElfCode::default()
        })
        .unwrap();
    assert_eq!(
        registry.lookup(base + 0x2000).unwrap().source,
        RowSource::None
    );
    let other = 0x30_0000_0000u64;
    registry
        .register_elf(ElfCode {
            elf: other..other + 0x100_0000,
            text: other + 0x1000..other + 0x10_0000,
            build_id: Some(bogus),
            ..ElfCode::default()
        })
        .unwrap();
    assert_eq!(
        registry.lookup(other + 0x2000).unwrap().source,
        RowSource::None
    );
}

#[test]
fn rows_are_converted_once_per_build_id() {
    let _walk = walking();
    let (_dir, lib) = load_libfix();
    let (a, b) = (Registry::new(), Registry::new());
    register_loaded_objects(&a);
    register_loaded_objects(&b);
    let text = a
        .registrations()
        .into_iter()
        .find_map(|r| match r {
            ichnos_code::Registration::Elf(e) if e.path.as_deref() == Some(lib.as_path()) => {
                Some(e.text)
            }
            _ => None,
        })
        .unwrap();
    let (oa, ob) = (a.lookup(text.start).unwrap(), b.lookup(text.start).unwrap());
    assert!(
        matches!(oa.rows, Rows::Fixed(_) | Rows::Lazy(_)),
        "file rows expected"
    );
    assert!(oa.rows.same(&ob.rows), "two conversions");
}

#[test]
fn lookups_go_on_while_a_registration_is_in_progress() {
    let registry = Arc::new(Registry::new());
    registry
        .register_elf(ElfCode {
            text: 0x1000..0x2000,
            ..ElfCode::default()
        })
        .unwrap();
    let registering = Arc::new(AtomicBool::new(false));
    let during = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (registry, registering, during, stop) = (
            Arc::clone(&registry),
            Arc::clone(&registering),
            Arc::clone(&during),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                assert!(registry.lookup(0x1800).is_some());
                if registering.load(Ordering::Acquire) {
                    during.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // Registrations that read a large .eh_frame (libc's) from the file,
    // without a build id so nothing is cached, until the reader has made
    // its lookups during them. (A registration takes tens of
    // microseconds, so how many it takes depends on the machine.)
    let libc_path = libc_path();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while during.load(Ordering::Relaxed) <= 100 && std::time::Instant::now() < deadline {
        let base = 0x10_0000_0000;
        // The one before it goes, so that the same range is free again.
        let _ = registry.unregister(base + 0x1000);
        registering.store(true, Ordering::Release);
        registry
            .register_elf(ElfCode {
                elf: base..base + 0x100_0000,
                text: base + 0x1000..base + 0x10_0000,
                path: Some(libc_path.clone().into()),
                ..ElfCode::default()
            })
            .unwrap();
        registering.store(false, Ordering::Release);
    }
    stop.store(true, Ordering::Release);
    reader.join().unwrap();
    assert!(
        during.load(Ordering::Relaxed) > 100,
        "only {} lookups completed during registrations",
        during.load(Ordering::Relaxed)
    );
    assert_eq!(
        registry.lookup(0x10_0000_2000).unwrap().source,
        RowSource::EhFrame
    );
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // a reversed range is the point
fn bad_registrations_are_refused_with_the_right_error() {
    let r = Registry::new();
    let err = |code| r.register_elf(code).unwrap_err();
    let e = err(ElfCode {
        text: 0x2000..0x1000,
        ..ElfCode::default()
    });
    assert_eq!(e.errno(), -libc::EINVAL);
    assert!(e.to_string().contains("empty or reversed"), "{e}");
    assert!(
        matches!(
            &e,
            RegistryError::InvalidArgument(Invalid::EmptyRange { what: "text", range })
                if *range == (0x2000..0x1000)
        ),
        "{e:?}"
    );
    let e = err(ElfCode {
        elf: 0x1000..0x1800,
        text: 0x1000..0x2000,
        ..ElfCode::default()
    });
    assert_eq!(e.errno(), -libc::EINVAL);
    r.register_elf(ElfCode {
        text: 0x1000..0x2000,
        ..ElfCode::default()
    })
    .unwrap();
    let e = err(ElfCode {
        text: 0x1fff..0x3000,
        ..ElfCode::default()
    });
    assert_eq!(e.errno(), -libc::EEXIST);
    assert!(e.to_string().contains("overlaps"), "{e}");
    assert_eq!(r.unregister(0x1001).unwrap_err().errno(), -libc::ENOENT);
    r.unregister(0x1000).unwrap();
    assert!(r.lookup(0x1800).is_none());
}
