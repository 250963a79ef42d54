//! perf map and jitdump readers on files written here, from the formats'
//! specifications (perf's jit-interface.txt and jitdump-specification.txt).

use ichnos_symbol::jitdump::JitDump;
use ichnos_symbol::perf_map::{PerfMap, PerfMapError};
use proptest::prelude::*;

#[test]
fn perf_map_lines_names_and_errors() {
    let text = "\
7f0000001000 40 LazyCompile:~run node:internal/main:1
7f0000001040 10 py::helper:/srv/app.py
not hex 10 x
7f0000002000 zz bad size
7f0000001000 40 LazyCompile:*run (optimised)
7f0000003000

ffffffffffffffff 10 overflow
";
    let map = PerfMap::parse(text, "perf-1.map");
    assert_eq!(map.entries().len(), 3);
    // A name keeps its spaces; the line written later for the same start wins.
    assert_eq!(
        map.lookup(0x7f00_0000_1010).unwrap().name,
        "LazyCompile:*run (optimised)"
    );
    assert_eq!(
        map.lookup(0x7f00_0000_1045).unwrap().name,
        "py::helper:/srv/app.py"
    );
    assert!(map.lookup(0x7f00_0000_1050).is_none());
    assert!(map.lookup(0x7f00_0000_0fff).is_none());
    let lines: Vec<usize> = map.errors().iter().map(|e| e.line).collect();
    assert_eq!(lines, [3, 4, 6, 8]);
    assert!(map.errors()[0].to_string().starts_with("perf-1.map:3: "));
}

#[test]
fn a_perf_map_of_another_user_is_refused() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perf.map");
    std::fs::write(&path, "1000 10 f\n").unwrap();
    let me = std::process::id();
    let map = PerfMap::read_owned(&path, me).unwrap();
    assert_eq!(map.lookup(0x1008).unwrap().name, "f");
    // A link is not followed (another user could point it anywhere).
    let link = dir.path().join("link.map");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(matches!(
        PerfMap::read_owned(&link, me),
        Err(PerfMapError::Io { .. })
    ));
    let my_uid = std::fs::metadata("/proc/self").unwrap().uid();
    // The user given: no process to look at (a pid that is no more).
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    assert!(matches!(
        PerfMap::read_owned(&path, gone_pid),
        Err(PerfMapError::Io { .. })
    ));
    let map = PerfMap::read_owned_by(&path, gone_pid, Some(my_uid)).unwrap();
    assert_eq!(map.lookup(0x1008).unwrap().name, "f");
    assert!(matches!(
        PerfMap::read_owned_by(&path, gone_pid, Some(my_uid + 1)),
        Err(PerfMapError::NotOwned { .. })
    ));
    // A process still there is taken as /proc shows it (its user may
    // have changed since it was last seen).
    assert!(PerfMap::read_owned_by(&path, me, Some(my_uid + 1)).is_ok());
    let other = my_uid + 1;
    if std::os::unix::fs::chown(&path, Some(other), None).is_ok() {
        match PerfMap::read_owned(&path, me) {
            Err(PerfMapError::NotOwned { file_uid, .. }) => assert_eq!(file_uid, other),
            r => panic!("expected NotOwned, got {r:?}"),
        }
    } else {
        eprintln!("skipped the other-owner case: chown needs root");
    }
}

#[test]
fn a_fifo_in_place_of_a_perf_map_is_an_error_not_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perf.map");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Opening a FIFO for reading blocks until a writer comes: the read
    // must neither open it that way nor read from it.
    match PerfMap::read_owned(&path, std::process::id()) {
        Err(PerfMapError::Io { source, .. }) => {
            assert!(
                source.to_string().contains("not a regular file"),
                "{source}"
            );
        }
        r => panic!("expected an error, got {r:?}"),
    }
}

/// A jitdump file, little- or big-endian, written from the specification.
struct Writer {
    out: Vec<u8>,
    big: bool,
}

impl Writer {
    fn new(big: bool, pid: u32) -> Self {
        Self::with_flags(big, pid, 0)
    }
    fn with_flags(big: bool, pid: u32, flags: u64) -> Self {
        let mut w = Writer {
            out: Vec::new(),
            big,
        };
        w.u32(0x4A69_5444);
        w.u32(1);
        w.u32(40);
        w.u32(62); // EM_X86_64
        w.u32(0);
        w.u32(pid);
        w.u64(1);
        w.u64(flags);
        w
    }
    fn u32(&mut self, v: u32) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend(b);
    }
    fn u64(&mut self, v: u64) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend(b);
    }
    fn record(&mut self, id: u32, ts: u64, body: impl FnOnce(&mut Writer)) {
        let start = self.out.len();
        self.u32(id);
        self.u32(0);
        self.u64(ts);
        body(self);
        let size = (self.out.len() - start) as u32;
        let b = if self.big {
            size.to_be_bytes()
        } else {
            size.to_le_bytes()
        };
        self.out[start + 4..start + 8].copy_from_slice(&b);
    }
    fn load(&mut self, ts: u64, addr: u64, size: u64, index: u64, name: &str) {
        self.record(0, ts, |w| {
            w.u32(7);
            w.u32(7);
            w.u64(addr);
            w.u64(addr);
            w.u64(size);
            w.u64(index);
            w.out.extend(name.as_bytes());
            w.out.push(0);
            w.out.extend(std::iter::repeat_n(0x90u8, size as usize));
        });
    }
    fn debug(&mut self, ts: u64, addr: u64, lines: &[(u64, u32, &str)]) {
        self.record(2, ts, |w| {
            w.u64(addr);
            w.u64(lines.len() as u64);
            for (a, line, file) in lines {
                w.u64(*a);
                w.u32(*line);
                w.u32(0);
                w.out.extend(file.as_bytes());
                w.out.push(0);
            }
        });
    }
    fn mv(&mut self, ts: u64, old: u64, new: u64, size: u64, index: u64) {
        self.record(1, ts, |w| {
            w.u32(7);
            w.u32(7);
            w.u64(new);
            w.u64(old);
            w.u64(new);
            w.u64(size);
            w.u64(index);
        });
    }
}

fn sample(big: bool) -> Vec<u8> {
    let mut w = Writer::new(big, 4242);
    w.debug(1, 0x1000, &[(0x1000, 10, "a.js"), (0x1008, 11, "a.js")]);
    w.load(2, 0x1000, 16, 1, "jitted:add");
    w.load(3, 0x2000, 32, 2, "jitted:mul");
    w.record(3, 4, |_| {}); // CLOSE-like record of no interest
    w.mv(5, 0x2000, 0x3000, 32, 2);
    w.out
}

#[test]
fn jitdump_loads_moves_and_lines() {
    for big in [false, true] {
        let dump = JitDump::parse(&sample(big));
        assert_eq!(dump.error, None, "big endian: {big}");
        assert_eq!(dump.pid, 4242);
        let add = dump.lookup(0x100a).unwrap();
        assert_eq!(add.name, "jitted:add");
        assert_eq!(add.line(0x100a).unwrap().line, 11);
        assert_eq!(add.line(0x1002).unwrap().file, "a.js");
        assert!(dump.lookup(0x2010).is_none(), "moved away");
        assert_eq!(dump.lookup(0x3010).unwrap().name, "jitted:mul");
    }
}

/// The header's flags say whose clock the records' timestamps are:
/// `JITDUMP_FLAGS_ARCH_TIMESTAMP` (bit 0) the TSC's, else `CLOCK_MONOTONIC`
/// (perf's jitdump-specification.txt); code is from its load, or from its
/// last move where it moved.
#[test]
fn jitdump_timestamps_and_their_clock() {
    for big in [false, true] {
        let dump = JitDump::parse(&sample(big));
        assert!(!dump.arch_timestamps);
        assert_eq!(dump.lookup(0x1000).unwrap().timestamp, 2);
        // Loaded at 3, moved there at 5.
        assert_eq!(dump.lookup(0x3000).unwrap().timestamp, 5);
        // Code moved where other code was loaded after it was, but before
        // the move: the moved code is there now.
        let mut w = Writer::new(big, 1);
        w.load(2, 0x2000, 32, 1, "moved");
        w.load(4, 0x3000, 32, 2, "there");
        w.mv(5, 0x2000, 0x3000, 32, 1);
        let dump = JitDump::parse(&w.out);
        assert_eq!(dump.lookup(0x3008).unwrap().name, "moved");
        let mut w = Writer::with_flags(big, 1, 1);
        w.load(9, 0x1000, 16, 1, "f");
        let dump = JitDump::parse(&w.out);
        assert_eq!(dump.error, None);
        assert!(dump.arch_timestamps);
    }
}

/// A debug entry whose name is "\xff\0" reuses the previous entry's file.
#[test]
fn jitdump_same_file_marker() {
    let mut w = Writer::new(false, 1);
    w.debug(1, 0x1000, &[(0x1000, 10, "a.js"), (0x1004, 11, "\u{ff}")]);
    w.load(2, 0x1000, 16, 1, "f");
    // The writer wrote "\u{ff}" as UTF-8 (c3 bf): make it the raw 0xff.
    let at = w.out.windows(2).position(|b| b == [0xc3, 0xbf]).unwrap();
    w.out[at] = 0xff;
    w.out.remove(at + 1);
    let size_at = 40 + 4;
    let size = u32::from_le_bytes(w.out[size_at..size_at + 4].try_into().unwrap()) - 1;
    w.out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    let dump = JitDump::parse(&w.out);
    assert_eq!(dump.error, None);
    let f = dump.lookup(0x1006).unwrap();
    assert_eq!(f.line(0x1006).unwrap().file, "a.js");
    assert_eq!(f.line(0x1006).unwrap().line, 11);
}

#[test]
fn jitdump_errors_name_the_offset() {
    let good = sample(false);
    // Every truncation inside a record is reported at an offset within it.
    let mut errors = 0;
    for len in 40..good.len() {
        let dump = JitDump::parse(&good[..len]);
        if let Some(e) = dump.error {
            assert!(e.offset <= len, "{e}");
            errors += 1;
        }
    }
    assert!(errors > good.len() / 2);
    // A bad magic, a wrong version, a count that cannot fit.
    let mut bad = good.clone();
    bad[0] = 0;
    assert_eq!(JitDump::parse(&bad).error.unwrap().offset, 0);
    let mut bad = good.clone();
    bad[4] = 9;
    assert!(JitDump::parse(&bad)
        .error
        .unwrap()
        .what
        .contains("version 9"));
    let mut bad = good.clone();
    // nr_entry of the first record (header 40, record header 16, code_addr 8).
    bad[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = JitDump::parse(&bad).error.unwrap();
    assert_eq!(e.offset, 72);
    assert!(e.what.contains("nr_entry"), "{e}");
}

proptest! {
    #[test]
    fn any_bytes_parse_without_panicking(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..16),
        cut in any::<prop::sample::Index>(),
        text in ".{0,200}",
    ) {
        let mut bytes = sample(false);
        for (i, v) in &flips {
            let at = i.index(bytes.len());
            bytes[at] = *v;
        }
        let len = cut.index(bytes.len() + 1);
        let dump = JitDump::parse(&bytes[..len]);
        for c in &dump.code {
            let _ = dump.lookup(c.addr);
        }
        let map = PerfMap::parse(&text, "fuzz");
        let _ = map.lookup(0x1000);
    }
}

/// Found by `cargo fuzz run jitdump`: a code size near 2^64 overflowed the
/// bounds check of a load record.
#[test]
fn fuzz_regression_huge_code_size() {
    let data = [
        0x44, 0x54, 0x69, 0x4a, 0x01, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xcd, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x2b, 0x98, 0x44, 0x54, 0xb8, 0xb8, 0x69, 0x4a, 0x01, 0x00,
        0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x4a, 0x69, 0x54, 0x44, 0x00,
        0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x28, 0x54, 0x69,
        0x4a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x28, 0x54, 0x69, 0x4a, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4, 0xd4,
        0x00, 0x00, 0x00, 0x2b, 0x98, 0x44, 0x54, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2b, 0x98, 0x44, 0x54, 0x48, 0xb8, 0xb8,
        0x69, 0x4a, 0x01, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x44, 0x54, 0x69, 0x4a,
        0x01, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00,
        0x00, 0xfe, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xa2, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x98, 0xb8, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x0c, 0x2b,
    ];
    let dump = JitDump::parse(&data);
    assert!(dump.error.is_some());
}

/// Found by `cargo fuzz run jitdump`: a record shorter than its own fixed
/// fields made the reader compute a negative room.
#[test]
fn fuzz_regression_record_shorter_than_its_fields() {
    let data = [
        0x44, 0x54, 0x69, 0x4a, 0x01, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xcd, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x19, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x28, 0x54, 0x69, 0x4a, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0xcd, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
        0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x19, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x28, 0x54, 0x69, 0x4a, 0x00, 0x00, 0x00, 0x00,
    ];
    let dump = JitDump::parse(&data);
    assert!(dump.error.is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Lookups agree with the definition — the newest load covering the
    /// address — for overlapping code reloaded at random addresses.
    #[test]
    fn jitdump_lookup_is_the_newest_code_covering_the_address(
        loads in proptest::collection::vec((0u64..64, 1u64..24), 1..40),
        probes in proptest::collection::vec(0u64..96, 1..64),
    ) {
        let mut w = Writer::new(false, 1);
        for (i, &(addr, size)) in loads.iter().enumerate() {
            w.load(i as u64 + 1, 0x1000 + addr, size, i as u64, &format!("f{i}"));
        }
        let dump = JitDump::parse(&w.out);
        prop_assert!(dump.error.is_none());
        for p in probes {
            let addr = 0x1000 + p;
            let want = loads
                .iter()
                .enumerate()
                .filter(|(_, &(a, s))| 0x1000 + a <= addr && addr < 0x1000 + a + s)
                .map(|(i, _)| format!("f{i}"))
                .next_back();
            prop_assert_eq!(dump.lookup(addr).map(|c| c.name.clone()), want, "address {:#x}", addr);
        }
    }
}

/// JIT code named only by its `codectl()` registration (no perf map, no
/// jitdump): `symbolize_process` finds the name through the process's
/// exported code registry — here this test process's own.
#[test]
fn jit_code_is_named_by_its_codectl_registration() {
    use ichnos_code::{JitCode, Registry};
    use ichnos_symbol::{Place, Symbolizer, SymbolizerOptions};
    // SAFETY: a fresh anonymous mapping of our own; nothing runs in it.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as u64;
    assert_ne!(page, libc::MAP_FAILED as u64);
    Registry::global()
        .register_jit(JitCode::new(page..page + 4096, 0).with_name("wasm:fib"))
        .unwrap();
    let symbolizer = Symbolizer::new(SymbolizerOptions::default());
    let got = symbolizer
        .symbolize_process(std::process::id(), &[page + 16, page + 4095])
        .unwrap();
    Registry::global().unregister(page).unwrap();
    for g in &got {
        assert_eq!(g.place, Place::Anonymous);
        assert_eq!(g.symbolized.frames[0].function.as_deref(), Some("wasm:fib"));
    }
}
