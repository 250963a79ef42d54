//! A region-table buffer's shared header as another (broken or hostile)
//! process could leave it: the input becomes the first page of a sealed
//! memfd followed by 64 KiB of regions. Opening it, claiming both ends and
//! driving them must give errors or nothing to read, never a panic, an
//! out-of-bounds access or unbounded work.
#![no_main]

use ichnos_buf::topa::TopaBuffer;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut page = [0u8; 4096];
    let n = data.len().min(4096);
    page[..n].copy_from_slice(&data[..n]);
    // SAFETY: a memfd of our own, written and sealed here.
    let fd = unsafe {
        let raw = libc::memfd_create(c"fuzz".as_ptr(), libc::MFD_ALLOW_SEALING);
        assert!(raw >= 0);
        libc::ftruncate(raw, 4096 + 65536);
        libc::pwrite(raw, page.as_ptr().cast(), page.len(), 0);
        libc::fcntl(raw, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
        OwnedFd::from_raw_fd(raw)
    };
    let _ = fd.as_raw_fd();
    let Ok(buf) = TopaBuffer::open(fd) else { return };
    if let Ok(mut consumer) = buf.consumer() {
        let head = consumer.head();
        let tail = consumer.tail();
        // Walked: the slices are found as the iterator goes.
        for segment in consumer.segments(tail..head.min(tail + 65536)) {
            std::hint::black_box(segment.len());
        }
        let mut out = Vec::new();
        let _ = consumer.snapshot(&mut out);
        // Read where they lie, a piece at a time, as the function
        // tracer's recorder reads its processes' buffers.
        for _ in 0..4 {
            let segments = consumer.next_segments(3001);
            let end = segments.end();
            for segment in segments {
                std::hint::black_box(segment.len());
            }
            if consumer.consume(end).is_err() {
                break;
            }
        }
    }
    if let Ok(mut producer) = buf.producer() {
        let _ = producer.write_record(&data[..data.len().min(5000)]);
        let _ = producer.write(&data[..data.len().min(100)]);
    }
});
