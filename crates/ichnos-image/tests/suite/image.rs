//! libipt's ptunit-image suite, through the public API, plus the cases where
//! ichnos deliberately differs (copying split sections).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ichnos_image::{Asid, Error, Image, Isid, SectionCache};

use super::Files;

/// libipt's `ifix`: three mock sections, 16 bytes `00..0f` at file offset 0x10.
struct Fix {
    _files: Files,
    file: [PathBuf; 3],
    cache: SectionCache,
    image: Image,
}

const ASID: [Asid; 3] = [Asid::cr3(0xa000), Asid::cr3(0xb000), Asid::cr3(0xc000)];

impl Fix {
    fn new() -> Fix {
        let files = Files::new();
        let file = [0, 1, 2].map(|i| files.mock_section(&format!("file-{i}")));
        Fix {
            _files: files,
            file,
            cache: SectionCache::new(Some("fix")),
            image: Image::new(Some("image")),
        }
    }

    /// Adds `size` bytes from the start of mock section `f` at `vaddr`.
    fn add_sized(&mut self, f: usize, size: u64, vaddr: u64, asid: Asid) -> Isid {
        let isid = self
            .cache
            .add_file(&self.file[f], 0x10, size, vaddr)
            .unwrap();
        self.image.add_cached(&self.cache, isid, asid).unwrap();
        isid
    }

    fn add(&mut self, f: usize, vaddr: u64, asid: Asid) -> Isid {
        self.add_sized(f, 0x10, vaddr, asid)
    }

    /// Reads up to `n` bytes; returns the bytes and the isid.
    fn read(&mut self, asid: Asid, vaddr: u64, n: usize) -> (Vec<u8>, Option<Isid>) {
        read(&mut self.image, asid, vaddr, n)
    }
}

fn read(image: &mut Image, asid: Asid, vaddr: u64, n: usize) -> (Vec<u8>, Option<Isid>) {
    let mut buf = vec![0xccu8; n];
    let r = image
        .read(&asid, vaddr, &mut buf)
        .unwrap_or_else(|e| panic!("read {vaddr:#x}: {e}"));
    buf.truncate(r.len);
    (buf, r.isid)
}

fn is_nomap(image: &mut Image, asid: Asid, vaddr: u64) -> bool {
    matches!(
        image.read(&asid, vaddr, &mut [0u8; 1]),
        Err(Error::NoMapping { .. })
    )
}

#[test]
fn init_name() {
    let mut name = String::from("image-name");
    let image = Image::new(Some(&name));
    name.clear();
    assert_eq!(image.name(), Some("image-name"));
    assert_eq!(Image::new(None).name(), None);
    assert!(image.is_empty());
}

#[test]
fn read_empty() {
    let mut image = Image::new(None);
    let mut buf = [0xccu8; 2];
    match image.read(&ASID[0], 0x1000, &mut buf) {
        Err(Error::NoMapping { asid, vaddr }) => assert_eq!((asid, vaddr), (ASID[0], 0x1000)),
        other => panic!("{other:?}"),
    }
    assert_eq!(buf, [0xcc, 0xcc]);
}

#[test]
fn overlap_front() {
    let mut f = Fix::new();
    let s0 = f.add(0, 0x1001, ASID[0]);
    let s1 = f.add(1, 0x1000, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x100f, 2), (vec![0x0f], Some(s1)));
    assert_eq!(f.read(ASID[0], 0x1010, 2), (vec![0x0f], Some(s0)));
}

#[test]
fn overlap_back() {
    let mut f = Fix::new();
    let s0 = f.add(0, 0x1000, ASID[0]);
    let s1 = f.add(1, 0x1001, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1000, 2), (vec![0x00], Some(s0)));
    assert_eq!(f.read(ASID[0], 0x1001, 2), (vec![0x00, 0x01], Some(s1)));
    assert_eq!(f.read(ASID[0], 0x1010, 2), (vec![0x0f], Some(s1)));
}

#[test]
fn overlap_multiple() {
    let mut f = Fix::new();
    let a = f.add(0, 0x1000, ASID[0]);
    let b = f.add(0, 0x1010, ASID[0]);
    let c = f.add(0, 0x1008, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1007, 2), (vec![0x07], Some(a)));
    assert_eq!(f.read(ASID[0], 0x1008, 1), (vec![0x00], Some(c)));
    assert_eq!(f.read(ASID[0], 0x1017, 2), (vec![0x0f], Some(c)));
    assert_eq!(f.read(ASID[0], 0x1018, 1), (vec![0x08], Some(b)));
}

#[test]
fn overlap_mid() {
    let mut f = Fix::new();
    let s0 = f.add(0, 0x1000, ASID[0]);
    let s1 = f.add_sized(1, 8, 0x1004, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1003, 2), (vec![0x03], Some(s0)));
    assert_eq!(f.read(ASID[0], 0x1004, 1), (vec![0x00], Some(s1)));
    assert_eq!(f.read(ASID[0], 0x100b, 2), (vec![0x07], Some(s1)));
    // The back piece keeps its file offset and its isid.
    assert_eq!(f.read(ASID[0], 0x100c, 1), (vec![0x0c], Some(s0)));
    assert_eq!(f.image.len(), 3);
}

#[test]
fn contained() {
    let mut f = Fix::new();
    f.add_sized(0, 8, 0x1004, ASID[0]);
    let s1 = f.add(1, 0x1000, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1008, 1), (vec![0x08], Some(s1)));
    assert_eq!(f.image.len(), 1);
}

#[test]
fn contained_multiple() {
    let mut f = Fix::new();
    f.add_sized(0, 2, 0x1004, ASID[0]);
    f.add_sized(0, 2, 0x1008, ASID[0]);
    let s = f.add(1, 0x1000, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1004, 1), (vec![0x04], Some(s)));
    assert_eq!(f.read(ASID[0], 0x1008, 1), (vec![0x08], Some(s)));
    assert_eq!(f.image.len(), 1);
}

#[test]
fn contained_back() {
    let mut f = Fix::new();
    f.add_sized(0, 8, 0x1004, ASID[0]);
    let b = f.add_sized(0, 8, 0x100c, ASID[0]);
    let c = f.add(1, 0x1000, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1004, 1), (vec![0x04], Some(c)));
    assert_eq!(f.read(ASID[0], 0x1010, 1), (vec![0x04], Some(b)));
    assert_eq!(f.image.len(), 2);
}

#[test]
fn same() {
    let mut f = Fix::new();
    let s = f.add(0, 0x1000, ASID[0]);
    f.add(0, 0x1000, ASID[0]);
    assert_eq!(f.image.len(), 1);
    assert_eq!(f.read(ASID[0], 0x1000, 1), (vec![0x00], Some(s)));
}

#[test]
fn same_different_isid() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    let other = SectionCache::new(Some("other"));
    other.add_file(&f.file[1], 0x10, 0x10, 0x5000).unwrap();
    let newer = other.add_file(&f.file[0], 0x10, 0x10, 0x1000).unwrap();
    assert_eq!(newer.get(), 2);
    f.image.add_cached(&other, newer, ASID[0]).unwrap();
    assert_eq!(f.image.len(), 1);
    assert_eq!(f.read(ASID[0], 0x1000, 1), (vec![0x00], Some(newer)));
}

#[test]
fn same_different_offset() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    let isid = f.cache.add_file(&f.file[0], 0x18, 8, 0x1000).unwrap();
    f.image.add_cached(&f.cache, isid, ASID[0]).unwrap();
    assert_eq!(f.read(ASID[0], 0x1000, 1), (vec![0x08], Some(isid)));
}

#[test]
fn adjacent() {
    let mut f = Fix::new();
    let a = f.add(0, 0x1000, ASID[0]);
    let b = f.add(1, 0x1010, ASID[0]);
    let c = f.add(2, 0x0ff0, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x0fff, 2), (vec![0x0f], Some(c)));
    assert_eq!(f.read(ASID[0], 0x1000, 1), (vec![0x00], Some(a)));
    assert_eq!(f.read(ASID[0], 0x100f, 2), (vec![0x0f], Some(a)));
    assert_eq!(f.read(ASID[0], 0x1010, 1), (vec![0x00], Some(b)));
}

#[test]
fn read_asid() {
    let mut f = Fix::new();
    let s0 = f.add(0, 0x1000, ASID[0]);
    let s1 = f.add_sized(1, 8, 0x1008, ASID[1]);
    assert_eq!(f.read(ASID[0], 0x1009, 1), (vec![0x09], Some(s0)));
    assert_eq!(f.read(ASID[1], 0x1009, 1), (vec![0x01], Some(s1)));
}

#[test]
fn read_bad_asid() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    assert!(is_nomap(&mut f.image, ASID[1], 0x1000));
}

#[test]
fn read_wildcard_asid_sees_every_address_space_newest_first() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    let s1 = f.add_sized(1, 8, 0x1008, ASID[1]);
    assert_eq!(f.read(Asid::ANY, 0x1009, 1), (vec![0x01], Some(s1)));
    // Where only the older section lies, it answers, and the read runs to
    // its end.
    assert_eq!(f.read(Asid::ANY, 0x1002, 16).0.len(), 14);
}

#[test]
fn specific_asid_punches_a_hole_in_a_wildcard_section() {
    let mut f = Fix::new();
    f.add(0, 0x1000, Asid::ANY);
    f.add_sized(1, 4, 0x1004, ASID[0]);
    assert!(is_nomap(&mut f.image, ASID[1], 0x1005));
    assert_eq!(f.read(ASID[1], 0x1008, 1).0, vec![0x08]);
    assert_eq!(f.read(ASID[1], 0x1003, 4).0, vec![0x03]);
}

#[test]
fn wildcard_section_replaces_all_address_spaces() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    f.add(1, 0x1000, ASID[1]);
    let any = f.add_sized(2, 8, 0x1004, Asid::ANY);
    assert_eq!(f.read(ASID[0], 0x1004, 1), (vec![0x00], Some(any)));
    assert_eq!(f.read(ASID[1], 0x1004, 1), (vec![0x00], Some(any)));
    assert_eq!(f.image.len(), 5);
}

#[test]
fn read_callback() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    f.image.set_callback(Some(Box::new(
        move |buf: &mut [u8], asid: &Asid, vaddr: u64| {
            log.lock().unwrap().push((*asid, vaddr));
            buf.fill(0xcc);
            Ok(buf.len())
        },
    )));
    assert_eq!(f.read(ASID[0], 0x3000, 2), (vec![0xcc, 0xcc], None));
    // Covered memory does not go to the callback.
    assert_eq!(
        f.read(ASID[0], 0x1000, 1),
        (vec![0x00], f.read(ASID[0], 0x1000, 1).1)
    );
    assert_eq!(*seen.lock().unwrap(), vec![(ASID[0], 0x3000)]);
    f.image.set_callback(None);
    assert!(is_nomap(&mut f.image, ASID[0], 0x3000));
}

#[test]
fn read_callback_error_is_returned() {
    let mut image = Image::new(None);
    image.set_callback(Some(Box::new(|_: &mut [u8], _: &Asid, vaddr: u64| {
        Err(Error::Callback {
            vaddr,
            message: "no such page".into(),
            code: None,
        })
    })));
    assert!(matches!(
        image.read(&Asid::ANY, 0x10, &mut [0u8; 1]),
        Err(Error::Callback { vaddr: 0x10, .. })
    ));
}

#[test]
fn read_nomem_and_truncated() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    assert!(is_nomap(&mut f.image, ASID[0], 0x1010));
    assert_eq!(f.read(ASID[0], 0x100f, 2).0, vec![0x0f]);
}

#[test]
fn repeated_reads_follow_changes_to_the_image() {
    // Reads keep the last section at hand; adding and removing must not
    // leave a stale answer behind.
    let mut f = Fix::new();
    let s0 = f.add(0, 0x1000, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1004, 1), (vec![0x04], Some(s0)));
    let s1 = f.add_sized(1, 2, 0x1004, ASID[0]);
    assert_eq!(f.read(ASID[0], 0x1004, 1), (vec![0x00], Some(s1)));
    assert_eq!(f.read(ASID[0], 0x1006, 1), (vec![0x06], Some(s0)));
    f.image.remove_by_asid(ASID[0]);
    assert!(is_nomap(&mut f.image, ASID[0], 0x1006));
}

#[test]
fn remove_by_filename() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    f.add(0, 0x2000, ASID[1]);
    let name = f.file[0].clone();
    assert_eq!(f.image.remove_by_filename(&name, ASID[0]), 1);
    assert!(is_nomap(&mut f.image, ASID[0], 0x1000));
    assert_eq!(f.read(ASID[1], 0x2000, 1).0, vec![0x00]);
}

#[test]
fn remove_by_filename_bad_asid_and_none() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    let name = f.file[0].clone();
    assert_eq!(f.image.remove_by_filename(&name, ASID[2]), 0);
    assert_eq!(
        f.image
            .remove_by_filename(Path::new("no-such-file"), Asid::ANY),
        0
    );
    // Textual comparison: another spelling of the same file is another name.
    let dotted = name.parent().unwrap().join(".").join("file-0");
    assert_eq!(f.image.remove_by_filename(&dotted, Asid::ANY), 0);
    assert_eq!(f.image.len(), 1);
}

#[test]
fn remove_all_by_filename_counts_split_pieces() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    f.add_sized(1, 4, 0x1004, ASID[0]);
    let name = f.file[0].clone();
    assert_eq!(f.image.remove_by_filename(&name, Asid::ANY), 2);
    assert_eq!(f.image.len(), 1);
}

#[test]
fn remove_by_asid() {
    let mut f = Fix::new();
    f.add(0, 0x1000, ASID[0]);
    f.add(1, 0x2000, ASID[1]);
    assert_eq!(f.image.remove_by_asid(ASID[0]), 1);
    assert_eq!(f.read(ASID[1], 0x2000, 1).0, vec![0x00]);
    assert_eq!(f.image.remove_by_asid(Asid::ANY), 1);
    assert!(f.image.is_empty());
}

#[test]
fn copy_empty() {
    let mut image = Image::new(None);
    image.copy_from(&Image::new(None));
    assert!(is_nomap(&mut image, Asid::ANY, 0x1000));
}

#[test]
fn copy() {
    let mut f = Fix::new();
    let s0 = f.add(0, 0x1000, ASID[0]);
    let s1 = f.add(1, 0x2000, ASID[1]);
    let mut copy = Image::new(None);
    copy.copy_from(&f.image);
    assert_eq!(
        read(&mut copy, ASID[0], 0x1003, 2),
        (vec![0x03, 0x04], Some(s0))
    );
    assert_eq!(
        read(&mut copy, ASID[1], 0x2003, 2),
        (vec![0x03, 0x04], Some(s1))
    );
}

#[test]
fn copy_shrink_split_merge_overlap_replace() {
    let f = Fix::new();
    let cache = &f.cache;
    let isid = |file: usize, size: u64, vaddr: u64| {
        cache.add_file(&f.file[file], 0x10, size, vaddr).unwrap()
    };
    // Destination: file-0 at 0x1000 and 0x1010, file-1 (4 bytes) at 0x1024.
    let mut dst = Image::new(None);
    let d0 = isid(0, 0x10, 0x1000);
    let d1 = isid(0, 0x10, 0x1010);
    let d2 = isid(1, 4, 0x1024);
    for d in [d0, d1, d2] {
        dst.add_cached(cache, d, ASID[0]).unwrap();
    }
    // Source: file-2 (8 bytes) across the boundary at 0x1010, and a
    // 16-byte file-2 over the small destination section.
    let mut src = Image::new(None);
    let s0 = isid(2, 8, 0x100c);
    let s1 = isid(2, 0x10, 0x1020);
    src.add_cached(cache, s0, ASID[0]).unwrap();
    src.add_cached(cache, s1, ASID[0]).unwrap();
    dst.copy_from(&src);
    assert_eq!(read(&mut dst, ASID[0], 0x100b, 2), (vec![0x0b], Some(d0)));
    assert_eq!(read(&mut dst, ASID[0], 0x100c, 1), (vec![0x00], Some(s0)));
    assert_eq!(read(&mut dst, ASID[0], 0x1013, 2), (vec![0x07], Some(s0)));
    assert_eq!(read(&mut dst, ASID[0], 0x1014, 1), (vec![0x04], Some(d1)));
    assert_eq!(read(&mut dst, ASID[0], 0x1024, 1), (vec![0x04], Some(s1)));
    assert_eq!(dst.len(), 4);
}

#[test]
fn copy_of_split_sections_copies_the_exact_windows() {
    // libipt's pt_image_copy re-adds split pieces as whole sections: the
    // copy shows file A's bytes where the source shows file B's and gains
    // bytes the source never had. ichnos copies the windows.
    let files = Files::new();
    let a = files.counting("a.bin", 0x10);
    let b = files.write("b.bin", &[0xb0, 0xb1, 0xb2, 0xb3]);
    let mut src = Image::new(None);
    src.add_file(&a, 0, 0x10, Asid::ANY, 0x1000).unwrap();
    src.add_file(&b, 0, 4, Asid::ANY, 0x1004).unwrap();
    // Reads reorder libipt's list; do some here too.
    for at in [0x100c, 0x1000, 0x1005] {
        read(&mut src, Asid::ANY, at, 1);
    }
    let mut copy = Image::new(None);
    copy.copy_from(&src);
    for at in 0x1000..0x1010 {
        assert_eq!(
            read(&mut copy, Asid::ANY, at, 1),
            read(&mut src, Asid::ANY, at, 1),
            "at {at:#x}"
        );
    }
    assert!(is_nomap(&mut copy, Asid::ANY, 0x1010));
    let sections: Vec<_> = copy
        .sections()
        .map(|s| (s.vaddr, s.size, s.file_offset))
        .collect();
    assert_eq!(
        sections,
        vec![(0x1000, 4, 0), (0x1004, 4, 0), (0x1008, 8, 8)]
    );
}

#[test]
fn add_cached_twice_and_wildcard() {
    let mut f = Fix::new();
    let isid = f.cache.add_file(&f.file[0], 0x10, 0x10, 0x1000).unwrap();
    f.image.add_cached(&f.cache, isid, Asid::ANY).unwrap();
    f.image.add_cached(&f.cache, isid, Asid::ANY).unwrap();
    assert_eq!(f.image.len(), 1);
    assert_eq!(f.read(ASID[2], 0x1000, 1), (vec![0x00], Some(isid)));
}

#[test]
fn add_cached_bad_isid() {
    let mut f = Fix::new();
    let isid = f.cache.add_file(&f.file[0], 0x10, 0x10, 0x1000).unwrap();
    let bad = Isid::new(isid.get() + 1).unwrap();
    assert!(matches!(
        f.image.add_cached(&f.cache, bad, Asid::ANY),
        Err(Error::UnknownIsid { .. })
    ));
    assert!(f.image.is_empty());
}

#[test]
fn find_asid() {
    let mut f = Fix::new();
    let a = f.add(0, 0x1000, ASID[0]);
    let b = f.add(0, 0x2008, ASID[1]);
    assert_eq!(f.read(ASID[0], 0x1009, 1), (vec![0x09], Some(a)));
    assert_eq!(f.read(ASID[1], 0x2009, 1), (vec![0x01], Some(b)));
    assert!(is_nomap(&mut f.image, ASID[0], 0x2009));
}

#[test]
fn add_file_sections_have_no_isid() {
    let f = Fix::new();
    let mut image = Image::new(None);
    image
        .add_file(&f.file[0], 0x10, 0x10, Asid::ANY, 0x1000)
        .unwrap();
    assert_eq!(read(&mut image, Asid::ANY, 0x1001, 1), (vec![0x01], None));
}

#[test]
fn sections_lists_windows_in_address_order() {
    let mut f = Fix::new();
    f.add(1, 0x2000, ASID[1]);
    f.add(0, 0x1000, ASID[0]);
    let listed: Vec<_> = f
        .image
        .sections()
        .map(|s| (s.vaddr, s.size, s.asid, s.path.to_owned()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (0x1000, 0x10, ASID[0], f.file[0].clone()),
            (0x2000, 0x10, ASID[1], f.file[1].clone())
        ]
    );
}

#[test]
fn image_is_send_and_cache_is_send_sync() {
    fn send<T: Send>() {}
    fn sync<T: Send + Sync>() {}
    send::<Image>();
    sync::<SectionCache>();
}

#[test]
fn callback_survives_being_called_again_and_again() {
    let mut image = Image::new(None);
    let calls = Arc::new(Mutex::new(0));
    let count = Arc::clone(&calls);
    image.set_callback(Some(Box::new(move |buf: &mut [u8], _: &Asid, _: u64| {
        *count.lock().unwrap() += 1;
        buf.fill(1);
        Ok(buf.len())
    })));
    for at in 0..3 {
        assert_eq!(read(&mut image, Asid::ANY, at, 2), (vec![1, 1], None));
    }
    assert_eq!(*calls.lock().unwrap(), 3);
}
