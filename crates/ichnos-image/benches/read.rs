//! Small reads (1 to 16 bytes at random addresses) through images of 1, 100
//! and 10,000 sections: ichnos against libipt in the same run.
//!
//! libipt has no public function that reads through an image (its decoders
//! call the internal `pt_image_read`), so the peer is libipt's public
//! `pt_iscache_read` with the isid computed by this harness from the address
//! in one division — a lookup far cheaper than libipt's own list walk, which
//! favours libipt. ichnos is measured both ways: `Image::read` (address
//! lookup included) and `SectionCache::read` (the same work as the peer).
//!
//! libipt is loaded at run time (`libipt.so.2`, Debian's libipt2, which gdb
//! depends on); without it the peer is skipped with a note.
//!
//! Run: `cargo bench -p ichnos-image --bench read`. The ratio table at the
//! end is computed from criterion's estimates of this run.

use std::ffi::{c_char, c_int, c_void, CString};
use std::hint::black_box;
use std::path::Path;

use criterion::{BenchmarkId, Criterion};
use ichnos_image::{Asid, Image, Isid, SectionCache};

#[path = "../../../tools/bench/estimates.rs"]
mod estimates;

const SECTION: u64 = 4096;
const BASE: u64 = 0x40_0000;
const PROBES: usize = 1 << 14;

type IscacheAlloc = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type IscacheAddFile = unsafe extern "C" fn(*mut c_void, *const c_char, u64, u64, u64) -> c_int;
type IscacheRead = unsafe extern "C" fn(*mut c_void, *mut u8, u64, c_int, u64) -> c_int;
type IscacheFree = unsafe extern "C" fn(*mut c_void);

struct Libipt {
    _lib: libloading::Library,
    alloc: IscacheAlloc,
    add_file: IscacheAddFile,
    read: IscacheRead,
    free: IscacheFree,
}

impl Libipt {
    fn load() -> Option<Libipt> {
        // SAFETY: loading Debian's libipt runs only its ELF constructors,
        // which have no preconditions; the symbols are looked up with the
        // signatures of intel-pt.h.
        unsafe {
            let lib = libloading::Library::new("libipt.so.2").ok()?;
            Some(Libipt {
                alloc: *lib.get::<IscacheAlloc>(b"pt_iscache_alloc\0").ok()?,
                add_file: *lib.get::<IscacheAddFile>(b"pt_iscache_add_file\0").ok()?,
                read: *lib.get::<IscacheRead>(b"pt_iscache_read\0").ok()?,
                free: *lib.get::<IscacheFree>(b"pt_iscache_free\0").ok()?,
                _lib: lib,
            })
        }
    }
}

/// Deterministic (address, length) probes spread over `sections` sections.
fn probes(sections: u64) -> Vec<(u64, usize)> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..PROBES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let addr = BASE + x % (sections * SECTION);
            (addr, 1 + (x >> 40) as usize % 16)
        })
        .collect()
}

fn bench(c: &mut Criterion, file: &Path, libipt: Option<&Libipt>) {
    for sections in [1u64, 100, 10_000] {
        let mut group = c.benchmark_group(format!("read/{sections}"));
        let probes = probes(sections);
        let cache = SectionCache::new(None);
        let mut image = Image::new(None);
        let isids: Vec<Isid> = (0..sections)
            .map(|i| {
                let isid = cache
                    .add_file(file, i * SECTION, SECTION, BASE + i * SECTION)
                    .unwrap();
                image.add_cached(&cache, isid, Asid::ANY).unwrap();
                isid
            })
            .collect();
        let mut buf = [0u8; 16];
        let mut next = 0usize;
        group.bench_function(BenchmarkId::from_parameter("ichnos_image"), |b| {
            b.iter(|| {
                let (addr, len) = probes[next % PROBES];
                next += 1;
                black_box(image.read(&Asid::ANY, addr, &mut buf[..len]).unwrap().len)
            });
        });
        group.bench_function(BenchmarkId::from_parameter("ichnos_cache"), |b| {
            b.iter(|| {
                let (addr, len) = probes[next % PROBES];
                next += 1;
                let isid = isids[((addr - BASE) / SECTION) as usize];
                black_box(cache.read(isid, addr, &mut buf[..len]).unwrap())
            });
        });
        if let Some(ipt) = libipt {
            let name = CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: libipt's documented API; the cache is freed below and
            // the buffer is 16 bytes, the largest probe.
            unsafe {
                let iscache = (ipt.alloc)(std::ptr::null());
                let ipt_isids: Vec<c_int> = (0..sections)
                    .map(|i| {
                        (ipt.add_file)(
                            iscache,
                            name.as_ptr(),
                            i * SECTION,
                            SECTION,
                            BASE + i * SECTION,
                        )
                    })
                    .collect();
                assert!(ipt_isids.iter().all(|&i| i > 0));
                group.bench_function(BenchmarkId::from_parameter("libipt_iscache"), |b| {
                    b.iter(|| {
                        let (addr, len) = probes[next % PROBES];
                        next += 1;
                        let isid = ipt_isids[((addr - BASE) / SECTION) as usize];
                        black_box((ipt.read)(
                            iscache,
                            buf.as_mut_ptr(),
                            len as u64,
                            isid,
                            addr,
                        ))
                    });
                });
                (ipt.free)(iscache);
            }
        }
        group.finish();
    }
}

fn main() {
    // Only this run's estimates go into its table.
    let run = estimates::Run::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sections.bin");
    let bytes: Vec<u8> = (0..10_000 * SECTION).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, bytes).unwrap();
    let libipt = Libipt::load();
    if libipt.is_none() {
        eprintln!("note: libipt.so.2 not found (apt-get install libipt2); measuring ichnos alone");
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &file, libipt.as_ref());
    c.final_summary();

    println!("\nreads per second, ichnos vs libipt (pt_iscache_read), this run:");
    println!(
        "{:>9}  {:>14} {:>14} {:>14}  {:>8} {:>8}",
        "sections", "ichnos image", "ichnos cache", "libipt", "image/x", "cache/x"
    );
    for sections in [1, 100, 10_000] {
        // Criterion stores group "read/N" under the directory "read_N".
        let group = format!("read_{sections}");
        let rate = |f| run.mean_ns(&group, f).map(|ns| 1e9 / ns);
        let (img, cache, ipt) = (
            rate("ichnos_image"),
            rate("ichnos_cache"),
            rate("libipt_iscache"),
        );
        let show = |r: Option<f64>| match r {
            Some(r) if r >= 1e6 => format!("{:.1}M", r / 1e6),
            Some(r) => format!("{:.1}k", r / 1e3),
            None => "-".to_owned(),
        };
        let ratio = |a: Option<f64>| match (a, ipt) {
            (Some(a), Some(b)) => format!("{:.2}x", a / b),
            _ => "-".to_owned(),
        };
        println!(
            "{sections:>9}  {:>14} {:>14} {:>14}  {:>8} {:>8}",
            show(img),
            show(cache),
            show(ipt),
            ratio(img),
            ratio(cache)
        );
    }
}
