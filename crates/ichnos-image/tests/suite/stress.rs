//! One cache shared by many threads, each with its own images: adds, reads
//! and limit changes race; every byte read must be the file's.

use std::sync::Arc;

use ichnos_image::{Asid, Image, SectionCache};

use super::Files;

#[test]
fn one_cache_many_threads() {
    const THREADS: usize = 8;
    const ITERATIONS: u64 = 0x800;
    let files = Files::new();
    let path = Arc::new(files.counting("shared.bin", 0x4000));
    let cache = SectionCache::new(Some("stress"));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = cache.clone();
            let path = Arc::clone(&path);
            std::thread::spawn(move || {
                let mut image = Image::new(None);
                for i in 0..ITERATIONS {
                    // Sections overlap between threads: the same file ranges
                    // are de-duplicated across threads.
                    let offset = (i * 0x40 + t as u64 * 0x10) % 0x3000;
                    let vaddr = 0x10_0000 + offset;
                    let isid = cache.add_file(&*path, offset, 0x100, vaddr).unwrap();
                    image.add_cached(&cache, isid, Asid::ANY).unwrap();
                    let mut buf = [0u8; 16];
                    let at = vaddr + (i % 0xf0);
                    let n = image.read(&Asid::ANY, at, &mut buf).unwrap().len;
                    for (k, b) in buf[..n].iter().enumerate() {
                        assert_eq!(*b, (offset + i % 0xf0 + k as u64) as u8);
                    }
                    let n = cache.read(isid, vaddr + 0xff, &mut buf).unwrap();
                    assert_eq!((n, buf[0]), (1, (offset + 0xff) as u8));
                    if t == 0 {
                        cache.set_limit([0x8000, 0x3000, 0x12000, 0, u64::MAX][(i % 5) as usize]);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let stats = cache.stats();
    assert!(stats.mapped_bytes <= stats.limit);
    // 0x3000 / 0x10 distinct offsets at most, each at one address.
    assert!(stats.entries <= 0x300, "{stats:?}");
}
