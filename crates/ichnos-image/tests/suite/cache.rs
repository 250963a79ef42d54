//! libipt's ptunit-image_section_cache suite, through the public API.

use ichnos_image::{Error, Isid, SectionCache};

use super::Files;

/// libipt's `dfix`: a 0x90-byte file, sections at offset 0x10 or 0x20 and
/// sizes 0x40 or 0x60.
fn dfix_file(files: &Files) -> std::path::PathBuf {
    files.counting("dfix.bin", 0x90)
}

#[test]
fn name() {
    let mut name = String::from("iscache-name");
    let cache = SectionCache::new(Some(&name));
    name.clear();
    assert_eq!(cache.name(), Some("iscache-name"));
}

#[test]
fn name_none() {
    assert_eq!(SectionCache::new(None).name(), None);
}

#[test]
fn clone_is_another_handle_to_the_same_cache() {
    let files = Files::new();
    let cache = SectionCache::new(Some("c"));
    let other = cache.clone();
    let isid = other.add_file(dfix_file(&files), 0x10, 0x40, 0).unwrap();
    assert!(cache.same_cache(&other));
    assert_eq!(cache.lookup(isid).unwrap().size, 0x40);
    assert!(!cache.same_cache(&SectionCache::new(None)));
}

#[test]
fn add_file() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache.add_file(dfix_file(&files), 0, 1, 0).unwrap();
    assert_eq!(isid.get(), 1);
}

#[test]
fn lookup_returns_what_was_added() {
    let files = Files::new();
    let path = dfix_file(&files);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0x20, 0x60, 0xa000).unwrap();
    let found = cache.lookup(isid).unwrap();
    assert_eq!(found.path, path);
    assert_eq!(
        (found.offset, found.size, found.vaddr),
        (0x20, 0x60, 0xa000)
    );
}

#[test]
fn lookup_bad_isid() {
    let files = Files::new();
    let cache = SectionCache::new(Some("c"));
    let isid = cache.add_file(dfix_file(&files), 0x10, 0x40, 0).unwrap();
    let next = Isid::new(isid.get() + 1).unwrap();
    match cache.lookup(next) {
        Err(Error::UnknownIsid { cache, isid }) => {
            assert_eq!(cache.as_deref(), Some("c"));
            assert_eq!(isid, next.get());
        }
        other => panic!("{other:?}"),
    }
    assert!(Isid::new(0).is_none());
}

#[test]
fn add_file_same() {
    let files = Files::new();
    let path = dfix_file(&files);
    let cache = SectionCache::new(None);
    let a = cache.add_file(&path, 0x10, 0x40, 0).unwrap();
    let b = cache.add_file(&path, 0x10, 0x40, 0).unwrap();
    assert_eq!(a, b);
    assert_eq!(cache.stats().entries, 1);
}

#[test]
fn add_file_same_different_laddr_shares_the_section() {
    let files = Files::new();
    let path = dfix_file(&files);
    let cache = SectionCache::new(None);
    let a = cache.add_file(&path, 0x10, 0x40, 0).unwrap();
    let b = cache.add_file(&path, 0x10, 0x40, 1).unwrap();
    assert_ne!(a, b);
    let stats = cache.stats();
    assert_eq!((stats.entries, stats.sections), (2, 1));
    // One mapping serves both isids.
    let mut buf = [0u8; 1];
    cache.read(a, 0, &mut buf).unwrap();
    cache.read(b, 1, &mut buf).unwrap();
    assert_eq!(cache.stats().mapped_sections, 1);
    assert_eq!(buf[0], 0x10);
}

#[test]
fn add_file_different_same_laddr() {
    let files = Files::new();
    let path = dfix_file(&files);
    let cache = SectionCache::new(None);
    let a = cache.add_file(&path, 0x10, 0x40, 0).unwrap();
    let b = cache.add_file(&path, 0x20, 0x40, 0).unwrap();
    assert_ne!(a, b);
    assert_eq!(cache.stats().sections, 2);
}

#[test]
fn find_bad_fields_are_different_entries() {
    // libipt's find_bad_filename/offset/size/laddr: one differing key field
    // is another entry.
    let files = Files::new();
    let path = dfix_file(&files);
    let other = files.counting("other.bin", 0x90);
    let cache = SectionCache::new(None);
    let base = cache.add_file(&path, 0x10, 0x40, 0x1000).unwrap();
    for (p, off, size, laddr) in [
        (&other, 0x10, 0x40, 0x1000),
        (&path, 0x20, 0x40, 0x1000),
        (&path, 0x10, 0x41, 0x1000),
        (&path, 0x10, 0x40, 0x2000),
    ] {
        assert_ne!(cache.add_file(p, off, size, laddr).unwrap(), base);
    }
}

#[test]
fn oversized_request_is_cut_and_deduplicated() {
    let files = Files::new();
    let path = files.counting("small.bin", 0x20);
    let cache = SectionCache::new(None);
    let a = cache.add_file(&path, 0, 0x1000, 0).unwrap();
    let b = cache.add_file(&path, 0, 0x20, 0).unwrap();
    assert_eq!(a, b);
    assert_eq!(cache.lookup(a).unwrap().size, 0x20);
}

#[test]
fn file_names_compare_as_text() {
    // libipt compares file names with strcmp: two spellings, two sections.
    let files = Files::new();
    let path = dfix_file(&files);
    let dotted = files.dir.path().join(".").join("dfix.bin");
    let cache = SectionCache::new(None);
    let a = cache.add_file(&path, 0x10, 0x40, 0).unwrap();
    let b = cache.add_file(&dotted, 0x10, 0x40, 0).unwrap();
    assert_ne!(a, b);
}

#[test]
fn read() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache
        .add_file(dfix_file(&files), 0x10, 0x40, 0xa000)
        .unwrap();
    let mut buf = [0xccu8; 3];
    assert_eq!(cache.read(isid, 0xa008, &mut buf[..2]).unwrap(), 2);
    assert_eq!(buf, [0x18, 0x19, 0xcc]);
}

#[test]
fn read_truncate() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache
        .add_file(dfix_file(&files), 0x10, 0x40, 0xa000)
        .unwrap();
    let mut buf = [0xccu8; 2];
    assert_eq!(cache.read(isid, 0xa03f, &mut buf).unwrap(), 1);
    assert_eq!(buf, [0x4f, 0xcc]);
}

#[test]
fn read_bad_vaddr() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache
        .add_file(dfix_file(&files), 0x10, 0x40, 0xa000)
        .unwrap();
    let mut buf = [0xccu8; 1];
    for vaddr in [0xb000, 0xa040, 0x9fff] {
        match cache.read(isid, vaddr, &mut buf) {
            Err(Error::OutsideSection {
                isid: i,
                vaddr: v,
                begin,
                end,
            }) => {
                assert_eq!((i, v, begin, end), (isid, vaddr, 0xa000, 0xa040));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(buf, [0xcc]);
}

#[test]
fn read_bad_isid() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache
        .add_file(dfix_file(&files), 0x10, 0x40, 0xa000)
        .unwrap();
    let mut buf = [0u8; 1];
    let next = Isid::new(isid.get() + 1).unwrap();
    assert!(matches!(
        cache.read(next, 0xa000, &mut buf),
        Err(Error::UnknownIsid { .. })
    ));
}

#[test]
fn read_empty_buffer() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache
        .add_file(dfix_file(&files), 0x10, 0x40, 0xa000)
        .unwrap();
    assert!(matches!(
        cache.read(isid, 0xa000, &mut []),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Adds sections s0 (0x40 bytes) and s1 (0x60 bytes) of the dfix file.
fn two_sections(files: &Files, cache: &SectionCache) -> (Isid, Isid) {
    let path = dfix_file(files);
    (
        cache.add_file(&path, 0x10, 0x40, 0x1000).unwrap(),
        cache.add_file(&path, 0x20, 0x60, 0x2000).unwrap(),
    )
}

fn map(cache: &SectionCache, isid: Isid) {
    let at = cache.lookup(isid).unwrap().vaddr;
    cache.read(isid, at, &mut [0u8; 1]).unwrap();
}

/// Page-adjusted mapped size of a section at `offset` of `size` bytes.
fn memsize(offset: u64, size: u64) -> u64 {
    size + offset % page_size()
}

fn page_size() -> u64 {
    // The test sections start within the first page, so any page size of
    // at least 0x100 bytes gives the same adjustment.
    4096
}

#[test]
fn lru_map() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    cache.set_limit(0x8000);
    let (s0, _) = two_sections(&files, &cache);
    map(&cache, s0);
    let stats = cache.stats();
    assert_eq!(stats.mapped_sections, 1);
    assert_eq!(stats.mapped_bytes, memsize(0x10, 0x40));
}

#[test]
fn lru_map_nodup() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let (s0, _) = two_sections(&files, &cache);
    map(&cache, s0);
    map(&cache, s0);
    assert_eq!(cache.stats().mapped_sections, 1);
    assert_eq!(cache.stats().mapped_bytes, memsize(0x10, 0x40));
}

#[test]
fn lru_map_too_big() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    cache.set_limit(memsize(0x10, 0x40) - 1);
    let (s0, _) = two_sections(&files, &cache);
    map(&cache, s0);
    assert_eq!(cache.stats().mapped_sections, 0);
    assert_eq!(cache.stats().mapped_bytes, 0);
}

#[test]
fn lru_map_add_front_and_move_front() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let (s0, s1) = two_sections(&files, &cache);
    map(&cache, s0);
    map(&cache, s1);
    assert_eq!(cache.mapped_isids(), vec![s1, s0]);
    map(&cache, s0);
    assert_eq!(cache.mapped_isids(), vec![s0, s1]);
}

#[test]
fn lru_map_evict() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    cache.set_limit(memsize(0x10, 0x40) + memsize(0x20, 0x60) - 1);
    let (s0, s1) = two_sections(&files, &cache);
    map(&cache, s0);
    map(&cache, s1);
    assert_eq!(cache.mapped_isids(), vec![s1]);
    assert_eq!(cache.stats().mapped_bytes, memsize(0x20, 0x60));
}

#[test]
fn lru_limit_evict() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let (s0, s1) = two_sections(&files, &cache);
    map(&cache, s0);
    map(&cache, s1);
    assert_eq!(cache.mapped_isids().len(), 2);
    cache.set_limit(memsize(0x10, 0x40) + memsize(0x20, 0x60) - 1);
    assert_eq!(cache.mapped_isids(), vec![s1]);
}

#[test]
fn lru_limit_zero_unmaps_everything_and_keeps_nothing() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let (s0, s1) = two_sections(&files, &cache);
    map(&cache, s0);
    map(&cache, s1);
    cache.set_limit(0);
    assert_eq!(cache.stats().mapped_sections, 0);
    assert_eq!(cache.stats().mapped_bytes, 0);
    // Reads still work; they map and unmap around the read.
    let mut buf = [0u8; 1];
    assert_eq!(cache.read(s0, 0x1001, &mut buf).unwrap(), 1);
    assert_eq!(buf[0], 0x11);
    assert_eq!(cache.stats().mapped_sections, 0);
}

#[test]
fn lru_prune_cuts_at_the_first_overflow() {
    // Three sections, most recent first: s2 (small), s1 (big), s0 (small).
    // A limit that fits s2 and s0 but not s2 and s1 cuts at s1: s0 goes
    // too, as in libipt.
    let files = Files::new();
    let path = files.counting("three.bin", 0x3000);
    let cache = SectionCache::new(None);
    let s0 = cache.add_file(&path, 0, 0x10, 0x1000).unwrap();
    let s1 = cache.add_file(&path, 0x1000, 0x1000, 0x2000).unwrap();
    let s2 = cache.add_file(&path, 0x2000, 0x10, 0x3000).unwrap();
    for s in [s0, s1, s2] {
        map(&cache, s);
    }
    cache.set_limit(0x20);
    assert_eq!(cache.mapped_isids(), vec![s2]);
}

#[test]
fn file_changed_before_first_map_is_reported() {
    let files = Files::new();
    let path = files.counting("changing.bin", 0x100);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0, 0x100, 0).unwrap();
    files.counting("changing.bin", 0x80);
    match cache.read(isid, 0, &mut [0u8; 4]) {
        Err(Error::FileChanged { path: p, change }) => {
            assert_eq!(p, path);
            assert_eq!(
                change,
                ichnos_image::FileChange::Size {
                    was: 0x100,
                    now: 0x80
                }
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn readding_a_changed_file_makes_a_new_entry() {
    let files = Files::new();
    let path = files.counting("rebuilt.bin", 0x100);
    let cache = SectionCache::new(None);
    let old = cache.add_file(&path, 0, 0x100, 0).unwrap();
    // Replace the file by renaming a new one over it, as linkers do.
    let fresh = files.write("rebuilt.new", &[0xab; 0x100]);
    std::fs::rename(&fresh, &path).unwrap();
    let new = cache.add_file(&path, 0, 0x100, 0).unwrap();
    assert_ne!(old, new);
    let mut buf = [0u8; 1];
    cache.read(new, 0, &mut buf).unwrap();
    assert_eq!(buf[0], 0xab);
    assert!(matches!(
        cache.read(old, 0, &mut buf),
        Err(Error::FileChanged { .. })
    ));
}

#[test]
fn sections_outlive_the_cache() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    let isid = cache
        .add_file(dfix_file(&files), 0x10, 0x40, 0x1000)
        .unwrap();
    let mut image = ichnos_image::Image::new(None);
    image
        .add_cached(&cache, isid, ichnos_image::Asid::ANY)
        .unwrap();
    drop(cache);
    let mut buf = [0u8; 2];
    let read = image
        .read(&ichnos_image::Asid::ANY, 0x1000, &mut buf)
        .unwrap();
    assert_eq!((read.len, read.isid), (2, Some(isid)));
    assert_eq!(buf, [0x10, 0x11]);
}

/// Mappings of `path` in this process, per `/proc/self/maps`.
fn mappings_of(path: &std::path::Path) -> usize {
    let name = path.to_str().unwrap();
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.ends_with(name))
        .count()
}

#[test]
fn many_images_share_one_mapping() {
    let files = Files::new();
    let path = files.counting("once.bin", 0x3000);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0x1000, 0x1000, 0x40_0000).unwrap();
    let mut images: Vec<ichnos_image::Image> =
        (0..20).map(|_| ichnos_image::Image::new(None)).collect();
    for image in &mut images {
        image
            .add_cached(&cache, isid, ichnos_image::Asid::ANY)
            .unwrap();
        let mut buf = [0u8; 1];
        image
            .read(&ichnos_image::Asid::ANY, 0x40_0010, &mut buf)
            .unwrap();
        assert_eq!(buf[0], 0x10);
    }
    let mut copies: Vec<ichnos_image::Image> = (0..20)
        .map(|_| {
            let mut copy = ichnos_image::Image::new(None);
            copy.copy_from(&images[0]);
            copy.read(&ichnos_image::Asid::ANY, 0x40_0020, &mut [0u8; 1])
                .unwrap();
            copy
        })
        .collect();
    assert_eq!(mappings_of(&path), 1);
    // Contrast: images that each add the file themselves map it each.
    let mut separate: Vec<ichnos_image::Image> =
        (0..5).map(|_| ichnos_image::Image::new(None)).collect();
    for image in &mut separate {
        image
            .add_file(&path, 0x1000, 0x1000, ichnos_image::Asid::ANY, 0x40_0000)
            .unwrap();
        image
            .read(&ichnos_image::Asid::ANY, 0x40_0010, &mut [0u8; 1])
            .unwrap();
    }
    assert_eq!(mappings_of(&path), 6);
    drop((separate, copies.pop()));
    assert_eq!(mappings_of(&path), 1);
    // The cache alone keeps the one mapping; a limit of 0 lets it go.
    drop((images, copies));
    assert_eq!(mappings_of(&path), 1);
    cache.set_limit(0);
    assert_eq!(mappings_of(&path), 0);
}
