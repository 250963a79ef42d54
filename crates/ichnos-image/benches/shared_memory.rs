//! Memory: 100 images holding the same 50 MiB of sections map it once.
//!
//! Every image adds the same 50 sections of 1 MiB through one
//! `SectionCache`, then reads one byte of every page through every image.
//! The resident set should grow by one copy of the file. The same run then
//! does the same with images that each have a cache of their own, which map
//! a copy each, for contrast.
//!
//! Run: `cargo bench -p ichnos-image --bench shared_memory`.

use ichnos_image::{Asid, Image, SectionCache};

const MIB: u64 = 1 << 20;
const SECTIONS: u64 = 50;
const IMAGES: usize = 100;
const PAGE: u64 = 4096;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn touch_all(images: &mut [Image]) -> u64 {
    let mut sum = 0u64;
    let mut buf = [0u8; 1];
    for image in images {
        for addr in (0x1000_0000..0x1000_0000 + SECTIONS * MIB).step_by(PAGE as usize) {
            image.read(&Asid::ANY, addr, &mut buf).unwrap();
            sum += u64::from(buf[0]);
        }
    }
    sum
}

fn measure(label: &str, build: impl Fn() -> (Vec<SectionCache>, Vec<Image>)) -> f64 {
    let before = rss_kib();
    let (caches, mut images) = build();
    let sum = touch_all(&mut images);
    let after = rss_kib();
    let grown = (after - before) as f64 / 1024.0;
    println!("{label:<44} resident set grew by {grown:8.1} MiB  (checksum {sum})");
    drop((caches, images));
    grown
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.bin");
    let bytes: Vec<u8> = (0..SECTIONS * MIB).map(|i| (i / PAGE) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    drop(bytes);
    println!("{IMAGES} images over the same {SECTIONS} MiB file ({SECTIONS} sections of 1 MiB):");

    let cached = measure("ichnos, one SectionCache for all images", || {
        let cache = SectionCache::new(None);
        let images = (0..IMAGES)
            .map(|_| {
                let mut image = Image::new(None);
                for s in 0..SECTIONS {
                    let isid = cache
                        .add_file(&path, s * MIB, MIB, 0x1000_0000 + s * MIB)
                        .unwrap();
                    image.add_cached(&cache, isid, Asid::ANY).unwrap();
                }
                image
            })
            .collect();
        (vec![cache], images)
    });
    let copied = measure("ichnos, Image::copy_from of one cached image", || {
        let cache = SectionCache::new(None);
        let mut first = Image::new(None);
        for s in 0..SECTIONS {
            let isid = cache
                .add_file(&path, s * MIB, MIB, 0x1000_0000 + s * MIB)
                .unwrap();
            first.add_cached(&cache, isid, Asid::ANY).unwrap();
        }
        let images = (0..IMAGES)
            .map(|_| {
                let mut image = Image::new(None);
                image.copy_from(&first);
                image
            })
            .collect();
        (vec![cache], images)
    });
    let separate = measure("ichnos, one SectionCache per image", || {
        (0..IMAGES)
            .map(|_| {
                let cache = SectionCache::new(None);
                let mut image = Image::new(None);
                for s in 0..SECTIONS {
                    let isid = cache
                        .add_file(&path, s * MIB, MIB, 0x1000_0000 + s * MIB)
                        .unwrap();
                    image.add_cached(&cache, isid, Asid::ANY).unwrap();
                }
                (cache, image)
            })
            .unzip()
    });
    let one_copy = (SECTIONS * MIB) as f64 / MIB as f64;
    println!(
        "one copy is {one_copy:.0} MiB: one shared cache {:.2} copies, copy_from {:.2} copies, a cache per image {:.2} copies",
        cached / one_copy,
        copied / one_copy,
        separate / one_copy
    );
}
