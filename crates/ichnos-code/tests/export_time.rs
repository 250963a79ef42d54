//! When each registration was made, as the exported registry says: read
//! back from this process as a recorder reads another's, on the clock
//! perf samples carry (`CLOCK_MONOTONIC`), and absent from the 96-byte
//! entries of the first writers.

use ichnos_code::export::{find_exported_registry, read_exported_entries};
use ichnos_code::{JitCode, Registration, Registry};

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap()
}

/// The registration time exported for the JIT code starting at `start`.
fn registered_at(start: u64) -> Option<u64> {
    let pid = std::process::id();
    let at = find_exported_registry(pid).unwrap();
    let entries = read_exported_entries(pid, at).unwrap();
    let entry = entries
        .iter()
        .find(|e| e.registration.text().start == start)
        .expect("exported");
    entry.registered_ns
}

#[test]
fn each_registration_is_exported_with_the_time_it_was_made() {
    let registry = Registry::global();
    let (a, b) = (0x6100_0000_0000u64, 0x6100_0001_0000u64);
    let t0 = monotonic_ns();
    registry
        .register_jit(JitCode::new(a..a + 0x100, 0).with_name("a".to_owned()))
        .unwrap();
    let t1 = monotonic_ns();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let t2 = monotonic_ns();
    registry
        .register_jit(JitCode::new(b..b + 0x100, 0).with_name("b".to_owned()))
        .unwrap();
    let t3 = monotonic_ns();
    let (at_a, at_b) = (registered_at(a).unwrap(), registered_at(b).unwrap());
    assert!((t0..=t1).contains(&at_a), "{t0} <= {at_a} <= {t1}");
    assert!((t2..=t3).contains(&at_b), "{t2} <= {at_b} <= {t3}");
    // Registered again (the same code, anew): a new time.
    registry.unregister(a).unwrap();
    let t4 = monotonic_ns();
    registry
        .register_jit(JitCode::new(a..a + 0x100, 0).with_name("a".to_owned()))
        .unwrap();
    let again = registered_at(a).unwrap();
    assert!(again >= t4 && again > at_a, "{again} after {t4}");
    registry.unregister(a).unwrap();
    registry.unregister(b).unwrap();
}

/// A header and one JIT entry laid out as the first writers of version 1
/// laid them (96-byte entries, nothing past `reserved`).
#[repr(C)]
struct OldRegistry {
    magic: [u8; 8],
    version: u32,
    entry_size: u32,
    generation: u64,
    entries: u64,
    count: u64,
}

#[test]
fn entries_of_96_bytes_are_read_without_a_time() {
    let name = c"old_jit";
    let mut entry = [0u8; 96];
    entry[0..4].copy_from_slice(&2u32.to_le_bytes());
    entry[8..16].copy_from_slice(&0x5000u64.to_le_bytes());
    entry[16..24].copy_from_slice(&0x5100u64.to_le_bytes());
    entry[64..72].copy_from_slice(&(name.as_ptr() as u64).to_le_bytes());
    let header = OldRegistry {
        magic: *b"ICHNOSRG",
        version: 1,
        entry_size: 96,
        generation: 2,
        entries: entry.as_ptr() as u64,
        count: 1,
    };
    let addr = std::ptr::from_ref(&header) as u64;
    let entries = read_exported_entries(std::process::id(), addr).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].registered_ns, None);
    match &entries[0].registration {
        Registration::Jit { text, name, .. } => {
            assert_eq!(*text, 0x5000..0x5100);
            assert_eq!(name.as_deref(), Some("old_jit"));
        }
        Registration::Elf(_) => panic!("a JIT entry"),
    }
    // A size below the first writers' is refused, naming the field.
    let short = OldRegistry {
        entry_size: 88,
        ..header
    };
    let err = read_exported_entries(std::process::id(), std::ptr::from_ref(&short) as u64)
        .unwrap_err()
        .to_string();
    assert!(err.contains("entry_size"), "{err}");
}

/// A table laid out by hand in bytes (as a core or a fuzzer gives it):
/// every field of both kinds of entry read where the docs put it.
#[test]
fn a_table_in_bytes_reads_every_field_where_the_docs_put_it() {
    use ichnos_code::export::read_exported_entries_in;
    use ichnos_code::memory::Bytes;
    let base = 0x10000u64;
    let entries_at = base + 40;
    let strings_at = entries_at + 2 * 104;
    let (name, path) = (strings_at, strings_at + 7);
    let (build_id, link) = (path + 14, path + 18);
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"ICHNOSRG");
    for word in [1u32, 104] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    for word in [2u64, entries_at, 2] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    let entry = |kind: u32, id_len: u32, words: [u64; 10], crc: u32, time: u64| {
        let mut e = Vec::new();
        e.extend_from_slice(&kind.to_le_bytes());
        e.extend_from_slice(&id_len.to_le_bytes());
        for w in words {
            e.extend_from_slice(&w.to_le_bytes());
        }
        e.extend_from_slice(&crc.to_le_bytes());
        e.extend_from_slice(&0u32.to_le_bytes());
        e.extend_from_slice(&time.to_le_bytes());
        assert_eq!(e.len(), 104);
        e
    };
    bytes.extend(entry(
        2,
        0,
        [0x7000, 0x7100, 0, 0, 0, 0, 0x9000, name, 0, 0],
        0,
        123_456_789,
    ));
    bytes.extend(entry(
        1,
        4,
        [
            0x40_1000, 0x40_2000, 0x40_0000, 0x40_3000, 0x40_2000, 0x40_2100, 0, path, build_id,
            link,
        ],
        0xdead_beef,
        0,
    ));
    bytes.extend_from_slice(b"jit_fn\0/usr/lib/x.so\0\x01\x02\x03\x04dbg.debug\0");
    let mut memory = Bytes {
        addr: base,
        data: &bytes,
    };
    let entries = read_exported_entries_in(&mut memory, 1, base).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].registered_ns, Some(123_456_789));
    assert_eq!(
        entries[0].registration,
        Registration::Jit {
            text: 0x7000..0x7100,
            unwind_head: 0x9000,
            name: Some("jit_fn".to_owned()),
        }
    );
    assert_eq!(entries[1].registered_ns, None, "0 is not a time");
    let Registration::Elf(elf) = &entries[1].registration else {
        panic!("an ELF entry");
    };
    assert_eq!(elf.text, 0x40_1000..0x40_2000);
    assert_eq!(elf.elf, 0x40_0000..0x40_3000);
    assert_eq!(elf.sframe, Some(0x40_2000..0x40_2100));
    assert_eq!(
        elf.path.as_deref(),
        Some(std::path::Path::new("/usr/lib/x.so"))
    );
    assert_eq!(elf.build_id.as_deref(), Some(&[1u8, 2, 3, 4][..]));
    assert_eq!(
        elf.debug_link.as_deref(),
        Some(std::path::Path::new("dbg.debug"))
    );
    assert_eq!(elf.debug_link_crc, 0xdead_beef);
}
