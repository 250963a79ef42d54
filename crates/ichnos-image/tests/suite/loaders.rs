//! The ELF and /proc/PID/maps loaders, checked against readelf and against
//! the files themselves.

use std::os::unix::fs::FileExt;
use std::process::Command;

use ichnos_image::{load_segments, parse_maps, Asid, Error, Image, SectionCache};

use super::Files;

/// `(offset, vaddr, filesz)` of each `PT_LOAD`, as binutils readelf reports them.
fn readelf_loads(path: &std::path::Path) -> Vec<(u64, u64, u64)> {
    let out = Command::new("readelf")
        .arg("-lW")
        .arg(path)
        .output()
        .expect("run readelf");
    assert!(out.status.success());
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"LOAD")).then(|| (hex(f[1]), hex(f[2]), hex(f[4])))
        })
        .filter(|&(_, _, filesz)| filesz > 0)
        .collect()
}

#[test]
fn elf_segments_agree_with_readelf() {
    let exe = std::env::current_exe().unwrap();
    let ours: Vec<_> = load_segments(&exe, 0)
        .unwrap()
        .iter()
        .map(|s| (s.offset, s.vaddr, s.filesz))
        .collect();
    assert!(!ours.is_empty());
    assert_eq!(ours, readelf_loads(&exe));
}

#[test]
fn elf_image_reads_the_files_bytes() {
    let exe = std::env::current_exe().unwrap();
    let bias = 0x5555_0000_0000;
    let cache = SectionCache::new(None);
    let mut image = Image::new(None);
    let n = image.add_elf_cached(&cache, &exe, bias, Asid::ANY).unwrap();
    let file = std::fs::File::open(&exe).unwrap();
    for (offset, vaddr, filesz) in readelf_loads(&exe) {
        for probe in [0, filesz / 2, filesz - 1] {
            let mut ours = [0u8; 8];
            let got = image
                .read(&Asid::ANY, bias + vaddr + probe, &mut ours)
                .unwrap();
            let mut want = [0u8; 8];
            file.read_exact_at(&mut want[..got.len], offset + probe)
                .unwrap();
            assert_eq!(ours[..got.len], want[..got.len]);
            assert!(got.len as u64 <= filesz - probe);
        }
    }
    assert_eq!(n, cache.stats().entries);
    // Uncached, the same.
    let mut plain = Image::new(None);
    assert_eq!(plain.add_elf(&exe, bias, Asid::ANY).unwrap(), n);
    assert_eq!(plain.len(), image.len());
}

#[test]
fn elf_bad_input() {
    let files = Files::new();
    let not_elf = files.write("text.bin", b"#!/bin/sh\necho hello\n");
    assert!(matches!(
        load_segments(&not_elf, 0),
        Err(Error::BadElf { .. })
    ));
    // A 64-bit ELF header whose program headers lie past the end of the file.
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let cut = files.write("cut.elf", &exe[..0x48]);
    let mut image = Image::new(None);
    let err = image.add_elf(&cut, 0, Asid::ANY).unwrap_err();
    assert!(matches!(err, Error::BadElf { .. }), "{err:?}");
    assert!(err.to_string().contains("cut.elf"));
    assert!(image.is_empty());
}

#[test]
fn proc_maps_image_of_a_child_reads_its_files_and_vdso() {
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    // Wait until the child has exec'd sleep.
    let exe = std::fs::read_link("/usr/bin/sleep").unwrap_or_else(|_| "/usr/bin/sleep".into());
    for _ in 0..200 {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if maps.contains("sleep") && maps.contains("[vdso]") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let result = Image::from_proc_maps(pid);
    let _ = child.kill();
    let _ = child.wait();
    let mut process = result.unwrap();
    assert!(process.skipped.is_empty(), "{:?}", process.skipped);
    let sections: Vec<_> = process
        .image
        .sections()
        .map(|s| (s.path.to_owned(), s.file_offset, s.vaddr, s.size))
        .collect();
    assert!(
        sections
            .iter()
            .any(|(p, ..)| p.ends_with("sleep") || *p == exe),
        "{sections:?}"
    );
    for (path, offset, vaddr, size) in sections {
        let mut ours = vec![0u8; size.min(64) as usize];
        let n = process
            .image
            .read(&Asid::ANY, vaddr, &mut ours)
            .unwrap()
            .len;
        let mut want = vec![0u8; n];
        std::fs::File::open(&path)
            .unwrap()
            .read_exact_at(&mut want, offset)
            .unwrap();
        assert_eq!(ours[..n], want[..], "{} at {vaddr:#x}", path.display());
    }
    // The vDSO comes through the callback, from the (now dead) child's memory:
    // only check that it was offered.
    assert!(!process.live_ranges.is_empty());
}

/// A running executable deleted from its directory: its mappings say
/// `(deleted)`, and the link they give reads the file's bytes (through
/// `/proc/PID/map_files` as root, else `/proc/PID/exe`).
#[test]
fn a_deleted_mapping_is_read_through_the_process_link() {
    let files = Files::new();
    let copy = files.dir.path().join("sleep-copy");
    std::fs::copy("/usr/bin/sleep", &copy).unwrap();
    let bytes = std::fs::read(&copy).unwrap();
    let mut child = Command::new(&copy).arg("30").spawn().unwrap();
    let pid = child.id();
    let mut entries = Vec::new();
    for _ in 0..200 {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        // Once the dynamic loader is done: until then it splits the
        // executable's mappings (RELRO), and a range read before is gone
        // from map_files (seen in CI).
        let settled = maps.contains("sleep-copy") && maps.contains("libc.so") && {
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default() == maps
        };
        if settled {
            std::fs::remove_file(&copy).unwrap();
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
            entries = ichnos_image::parse_maps(pid, &maps).unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let deleted: Vec<_> = entries.iter().filter(|m| m.deleted()).collect();
    let links: Vec<_> = deleted.iter().map(|m| m.deleted_file_link(pid)).collect();
    let read: Vec<_> = links.iter().map(std::fs::read).collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!deleted.is_empty(), "{entries:?}");
    assert!(entries
        .iter()
        .all(|m| m.deleted() == m.name.contains("sleep-copy")));
    for (link, read) in links.iter().zip(read) {
        let read = read.unwrap_or_else(|e| panic!("{}: {e}", link.display()));
        assert!(read == bytes, "{} reads other bytes", link.display());
    }
}

#[test]
fn proc_maps_of_self_reads_anonymous_code_through_the_callback() {
    let len = 4096;
    // SAFETY: an anonymous private mapping, unmapped at the end of the test.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    let code = [0x55u8, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
    // SAFETY: the mapping is writable and at least `code.len()` bytes long.
    unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), ptr.cast::<u8>(), code.len()) };
    let mut process = Image::from_proc_maps(std::process::id()).unwrap();
    let addr = ptr as u64;
    assert!(process.live_ranges.iter().any(|r| r.contains(&addr)));
    let mut buf = [0u8; 6];
    let read = process.image.read(&Asid::ANY, addr, &mut buf).unwrap();
    assert_eq!((read.len, read.isid), (6, None));
    assert_eq!(buf, code);
    // The vDSO starts with an ELF header.
    let vdso = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .find(|l| l.ends_with("[vdso]"))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap());
    if let Some(vdso) = vdso {
        let mut magic = [0u8; 4];
        process.image.read(&Asid::ANY, vdso, &mut magic).unwrap();
        assert_eq!(&magic, b"\x7fELF");
    }
    // SAFETY: the mapping made above, not used after this.
    unsafe { libc::munmap(ptr, len) };
}

#[test]
fn parse_maps_lines_and_errors() {
    let text = "\
55d0c6a00000-55d0c6a02000 r--p 00000000 fd:01 1234                       /usr/bin/sleep
7ffd1c5f3000-7ffd1c5f5000 r-xp 00000000 00:00 0                          [vdso]
7f0000000000-7f0000001000 rw-p 00000000 00:00 0 
7f0000001000-7f0000002000 r-xp 00001000 fd:01 99                         /tmp/with space (deleted)
";
    let entries = parse_maps(1, text).unwrap();
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[0].range, 0x55d0_c6a0_0000..0x55d0_c6a0_2000);
    assert_eq!(
        (entries[0].inode, entries[0].name.as_str()),
        (1234, "/usr/bin/sleep")
    );
    assert!(entries[1].executable() && entries[1].name == "[vdso]");
    assert_eq!(entries[2].name, "");
    assert_eq!(entries[3].name, "/tmp/with space (deleted)");
    assert_eq!(entries[3].offset, 0x1000);
    for (bad, line, reason) in [
        ("zzzz-1000 r--p 0 00:00 0\n", 1, "bad start address"),
        (
            "1000-2000 r--p 0 00:00 0\n1000 r--p 0 00:00 0\n",
            2,
            "address range has no '-'",
        ),
        (
            "2000-1000 r--p 0 00:00 0\n",
            1,
            "empty or inverted address range",
        ),
        (
            "1000-2000 r-p 0 00:00 0\n",
            1,
            "permissions are not 4 letters",
        ),
        ("1000-2000 r--p 0 00:00 x\n", 1, "bad inode number"),
    ] {
        match parse_maps(7, bad) {
            Err(Error::BadProcMaps {
                pid: 7,
                line: l,
                reason: r,
            }) => assert_eq!((l, r), (line, reason)),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn proc_maps_of_a_missing_process() {
    let err = Image::from_proc_maps(u32::MAX - 1).unwrap_err();
    assert!(matches!(err, Error::File { op: "read", .. }), "{err:?}");
}
