//! A writer that compresses and writes its chunks on a thread of its own
//! (`Writer::compressing_on_a_thread`): the same bytes as the writer that
//! does it itself, whatever the records, chunk sizes and flushes; its
//! output's errors returned, never lost or hung on; what was handed over
//! written even if the writer is dropped unfinished.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use ichnos_data::{Reader, Record, Writer};
use proptest::prelude::*;

/// A record of one of three kinds from generated numbers and a name.
fn record(kind: u8, n: [u64; 3], name: &[u8]) -> Record<'_> {
    match kind % 3 {
        0 => Record::Thread {
            pid: n[0],
            tid: n[1],
            time: n[2],
            name,
        },
        1 => Record::Sample {
            time: n[0],
            pid: n[1],
            tid: n[1],
            cpu: 0,
            stack: n[2],
            weight: 1,
        },
        _ => Record::Exit {
            pid: n[0],
            tid: n[1],
            time: n[2],
            flags: 0,
        },
    }
}

type Generated = (u8, [u64; 3], Vec<u8>, bool);

fn write_all(records: &[Generated], chunk_target: usize, threaded: bool) -> Vec<u8> {
    let mut w = Writer::with_chunk_target(Vec::new(), chunk_target).unwrap();
    if threaded {
        w = w.compressing_on_a_thread();
    }
    for (kind, n, name, flush) in records {
        w.push(&record(*kind, *n, name)).unwrap();
        if *flush {
            w.flush_chunk().unwrap();
        }
    }
    w.finish().unwrap()
}

proptest! {
    #[test]
    fn a_writer_on_a_thread_writes_the_bytes_the_writer_writes_itself(
        records in proptest::collection::vec(
            (any::<u8>(), any::<[u64; 3]>(), proptest::collection::vec(any::<u8>(), 0..40), proptest::bool::weighted(0.05)),
            0..300,
        ),
        chunk_target in prop_oneof![1usize..200, 200usize..5000],
    ) {
        let here = write_all(&records, chunk_target, false);
        let thread = write_all(&records, chunk_target, true);
        prop_assert_eq!(&here, &thread);
        // And they read back, every record.
        let mut reader = Reader::new(&thread[..]).unwrap();
        let mut read = 0;
        while let Some(chunk) = reader.next_chunk().unwrap() {
            read += chunk.records().count();
        }
        prop_assert_eq!(read, records.len());
    }
}

/// An output that takes `room` bytes, then fails as a full disk does.
struct FullAfter {
    room: usize,
    taken: usize,
}

impl Write for FullAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.taken + buf.len() > self.room {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "the disk is full",
            ));
        }
        self.taken += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_threads_write_error_is_returned_and_nothing_hangs() {
    let out = FullAfter {
        room: 10_000,
        taken: 0,
    };
    let mut w = Writer::with_chunk_target(out, 1000)
        .unwrap()
        .compressing_on_a_thread();
    // Incompressible names: each chunk is about 1 KB on disk.
    let mut failed = None;
    for i in 0..10_000u64 {
        let name: Vec<u8> = (0..64).map(|j| ((i * 131 + j * 71) % 251) as u8).collect();
        if let Err(e) = w.push(&record(0, [i, i, i], &name)) {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("a push failed once the output was full");
    assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
    assert_eq!(e.to_string(), "the disk is full");
    // Later calls fail too, and say why; finishing does not hang.
    let again = w.flush_chunk().unwrap_err();
    assert!(again.to_string().contains("earlier write"), "{again}");
    assert!(w.finish().is_err());
}

#[test]
fn a_flush_returns_the_error_of_a_chunk_handed_over_before_it() {
    let out = FullAfter { room: 40, taken: 0 };
    let mut w = Writer::with_chunk_target(out, 1)
        .unwrap()
        .compressing_on_a_thread();
    // Handed over (a chunk of its own), then written past the room.
    w.push(&record(0, [1, 2, 3], &[7; 64])).unwrap();
    let e = w.flush_chunk().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
}

/// An output the test can look into after the writer is gone, and a
/// slow one: a writer that did not wait for its thread when dropped
/// would leave most chunks unwritten.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        std::thread::sleep(std::time::Duration::from_millis(2));
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn chunks_handed_over_are_written_when_the_writer_is_dropped_unfinished() {
    let out = Shared::default();
    let mut w = Writer::with_chunk_target(out.clone(), 100)
        .unwrap()
        .compressing_on_a_thread();
    for i in 0..1000u64 {
        w.push(&record(1, [i, 1, i % 7], b"")).unwrap();
    }
    let pending = w.pending();
    drop(w);
    let bytes = out.0.lock().unwrap().clone();
    let mut reader = Reader::new(&bytes[..]).unwrap();
    let mut read = 0;
    while let Some(chunk) = reader.next_chunk().unwrap() {
        read += chunk.records().count();
    }
    // Every record but those still gathering when it was dropped: fewer
    // than 100 bytes of them, at least 8 bytes each.
    assert!(pending < 100, "{pending}");
    assert!((1000 - 12..=1000).contains(&read), "{read} of 1000 records");
}
