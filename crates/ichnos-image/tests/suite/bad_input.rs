//! Bad input: each gives its own error, naming what was wrong; none panics.

use ichnos_image::{Asid, Error, FileChange, Image, Isid, SectionCache};

use super::Files;

#[test]
fn missing_file() {
    let cache = SectionCache::new(None);
    match cache.add_file("/nonexistent/ichnos.bin", 0, 1, 0) {
        Err(Error::File { path, op, source }) => {
            assert_eq!(path.to_str(), Some("/nonexistent/ichnos.bin"));
            assert_eq!(op, "stat");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    let mut image = Image::new(None);
    let err = image
        .add_file("/nonexistent/ichnos.bin", 0, 1, Asid::ANY, 0)
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/ichnos.bin"), "{err}");
}

#[test]
fn directory_is_not_a_section() {
    let files = Files::new();
    let cache = SectionCache::new(None);
    assert!(matches!(
        cache.add_file(files.dir.path(), 0, 1, 0),
        Err(Error::File { op: "use", .. })
    ));
}

#[test]
fn offset_past_end_of_file() {
    let files = Files::new();
    let path = files.counting("f.bin", 0x20);
    let cache = SectionCache::new(None);
    for offset in [0x20, 0x21, u64::MAX] {
        match cache.add_file(&path, offset, 1, 0) {
            Err(Error::OffsetPastEnd {
                path: p,
                offset: o,
                file_size,
            }) => {
                assert_eq!((p, o, file_size), (path.clone(), offset, 0x20));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn zero_size() {
    let files = Files::new();
    let path = files.counting("f.bin", 0x20);
    let cache = SectionCache::new(None);
    assert!(matches!(
        cache.add_file(&path, 4, 0, 0),
        Err(Error::EmptySection { offset: 4, .. })
    ));
    let mut image = Image::new(None);
    assert!(matches!(
        image.add_file(&path, 4, 0, Asid::ANY, 0),
        Err(Error::EmptySection { .. })
    ));
}

#[test]
fn empty_file() {
    let files = Files::new();
    let path = files.write("empty.bin", &[]);
    let cache = SectionCache::new(None);
    assert!(matches!(
        cache.add_file(&path, 0, 1, 0),
        Err(Error::OffsetPastEnd { file_size: 0, .. })
    ));
}

#[test]
fn address_overflow() {
    let files = Files::new();
    let path = files.counting("f.bin", 0x20);
    let cache = SectionCache::new(None);
    assert!(matches!(
        cache.add_file(&path, 0, 0x20, u64::MAX - 0x10),
        Err(Error::AddressOverflow { size: 0x20, .. })
    ));
    // A section that ends exactly at the top of the address space is fine.
    let isid = cache.add_file(&path, 0, 0x20, u64::MAX - 0x20).unwrap();
    let mut buf = [0u8; 0x40];
    assert_eq!(cache.read(isid, u64::MAX - 1, &mut buf).unwrap(), 1);
    assert_eq!(buf[0], 0x1f);
}

#[test]
fn unknown_isid() {
    let cache = SectionCache::new(Some("named"));
    let isid = Isid::new(7).unwrap();
    let err = cache.read(isid, 0, &mut [0u8; 1]).unwrap_err();
    assert!(matches!(err, Error::UnknownIsid { isid: 7, .. }));
    assert!(
        err.to_string().contains("named") && err.to_string().contains('7'),
        "{err}"
    );
    let mut image = Image::new(None);
    assert!(matches!(
        image.add_cached(&cache, isid, Asid::ANY),
        Err(Error::UnknownIsid { .. })
    ));
}

#[test]
fn file_truncated_after_add() {
    let files = Files::new();
    let path = files.counting("t.bin", 0x100);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0x80, 0x80, 0x1000).unwrap();
    let mut image = Image::new(None);
    image.add_cached(&cache, isid, Asid::ANY).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0x40)
        .unwrap();
    let mut buf = [0u8; 4];
    for err in [
        cache.read(isid, 0x1000, &mut buf).unwrap_err(),
        image.read(&Asid::ANY, 0x1000, &mut buf).unwrap_err(),
    ] {
        match err {
            Error::FileChanged { path: p, change } => {
                assert_eq!(p, path);
                assert_eq!(
                    change,
                    FileChange::Size {
                        was: 0x100,
                        now: 0x40
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Cuts the file at `path` to `len` bytes, in place.
fn truncate(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_file_truncated_while_mapped_is_an_error_not_sigbus() {
    // Three pages, mapped by a first read; then cut to one page. A read
    // past the new end would raise SIGBUS through a plain mapping.
    let files = Files::new();
    let path = files.counting("mapped.bin", 0x3000);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0, 0x3000, 0x10_0000).unwrap();
    let mut image = Image::new(None);
    image.add_cached(&cache, isid, Asid::ANY).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(cache.read(isid, 0x10_2000, &mut buf).unwrap(), 4);
    assert_eq!(image.read(&Asid::ANY, 0x10_2000, &mut buf).unwrap().len, 4);
    truncate(&path, 0x1000);
    let truncated = |e: Error| {
        assert!(
            matches!(
                &e,
                Error::FileChanged {
                    change: FileChange::Truncated,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("cut short while mapped"), "{e}");
    };
    truncated(image.read(&Asid::ANY, 0x10_2000, &mut buf).unwrap_err());
    truncated(cache.read(isid, 0x10_2004, &mut buf).unwrap_err());
    // A section added after the cut shares the mapping: the same answer.
    let mut later = Image::new(None);
    later.add_cached(&cache, isid, Asid::ANY).unwrap();
    truncated(later.read(&Asid::ANY, 0x10_1000, &mut buf).unwrap_err());
}

#[test]
fn a_file_cut_below_where_it_is_read_is_seen_by_reads_that_follow() {
    let files = Files::new();
    let path = files.counting("below.bin", 0x3000);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0, 0x3000, 0).unwrap();
    let mut buf = [0u8; 4];
    cache.read(isid, 0x10, &mut buf).unwrap();
    truncate(&path, 0x2000);
    // Still below the new end: the bytes are there, but the file is not
    // what the section was. The process looks once a millisecond, at the
    // mapping read then (other tests here read theirs too): within a
    // second of reads, this one is looked at.
    let mut answer = cache.read(isid, 0x10, &mut buf);
    for _ in 0..1000 {
        if answer.is_err() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        answer = cache.read(isid, 0x10, &mut buf);
    }
    assert!(
        matches!(
            answer,
            Err(Error::FileChanged {
                change: FileChange::Size {
                    was: 0x3000,
                    now: 0x2000
                },
                ..
            })
        ),
        "{answer:?}"
    );
    // And every read after it.
    assert!(matches!(
        cache.read(isid, 0x10, &mut buf),
        Err(Error::FileChanged { .. })
    ));
}

#[test]
fn file_rewritten_in_place_after_add() {
    let files = Files::new();
    let path = files.counting("m.bin", 0x100);
    let cache = SectionCache::new(None);
    let isid = cache.add_file(&path, 0, 0x100, 0).unwrap();
    // Same size, new contents and a new modification time.
    let old = std::fs::metadata(&path).unwrap().modified().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_at(&file, &[0xff], 0).unwrap();
    file.set_modified(old + std::time::Duration::from_secs(5))
        .unwrap();
    assert!(matches!(
        cache.read(isid, 0, &mut [0u8; 1]),
        Err(Error::FileChanged {
            change: FileChange::Modified,
            ..
        })
    ));
}

#[test]
fn file_removed_after_add() {
    let files = Files::new();
    let path = files.counting("gone.bin", 0x100);
    let mut image = Image::new(None);
    image.add_file(&path, 0, 0x100, Asid::ANY, 0).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        image.read(&Asid::ANY, 0, &mut [0u8; 1]),
        Err(Error::File { op: "open", .. })
    ));
}

#[test]
fn empty_read_buffer() {
    let files = Files::new();
    let path = files.counting("f.bin", 0x20);
    let mut image = Image::new(None);
    image.add_file(&path, 0, 0x20, Asid::ANY, 0).unwrap();
    assert!(matches!(
        image.read(&Asid::ANY, 0, &mut []),
        Err(Error::InvalidArgument { .. })
    ));
    // Also right after a hit, when the last section is at hand.
    image.read(&Asid::ANY, 0, &mut [0u8; 1]).unwrap();
    assert!(matches!(
        image.read(&Asid::ANY, 1, &mut []),
        Err(Error::InvalidArgument { .. })
    ));
}
