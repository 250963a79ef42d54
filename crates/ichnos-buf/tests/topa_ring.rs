//! Region-table buffers: producer and consumer against models of the
//! stream, the loss counts and the snapshot, on one thread, two threads
//! and two processes.

use ichnos_buf::topa::{
    AllocError, AllocFlags, Config, Granularity, Mode, RecordError, TailError, TopaBuffer,
    WaitOutcome, WriteOutcome,
};
use proptest::prelude::*;
use std::time::Duration;

const PAGE: u64 = 4096;

fn buffer(pages: &[u64], config: Config) -> TopaBuffer {
    let lens: Vec<u64> = pages.iter().map(|p| p * PAGE).collect();
    TopaBuffer::with_regions(&lens, AllocFlags::default(), config).unwrap()
}

/// The byte at absolute stream position `p`.
fn stream_byte(p: u64) -> u8 {
    (p.wrapping_mul(0x9e37_79b9) >> 13) as u8
}

fn stream(range: std::ops::Range<u64>) -> Vec<u8> {
    range.map(stream_byte).collect()
}

#[test]
fn empty_to_exactly_full_reads_as_full_not_empty() {
    // The Linux driver's 0-byte TRUNCATED bug (fixed October 2024).
    let (mut producer, mut consumer) = buffer(&[2, 1, 1], Config::default()).split().unwrap();
    let capacity = 4 * PAGE;
    assert_eq!(
        producer.write(&stream(0..capacity)),
        WriteOutcome::Written(capacity as usize)
    );
    assert_eq!(consumer.available(), capacity);
    assert_eq!(
        producer.write_record(&[1]),
        Err(RecordError::NoRoom { len: 1, free: 0 })
    );
    let stats = producer.stats();
    assert_eq!(
        (
            stats.written,
            stats.lost_bytes,
            stats.lost_writes,
            stats.truncations
        ),
        (capacity, 1, 1, 1)
    );
    let mut out = Vec::new();
    assert_eq!(consumer.read_into(&mut out), capacity);
    assert_eq!(out, stream(0..capacity));
    // And again, after the wrap.
    assert_eq!(
        producer.write(&stream(capacity..2 * capacity)),
        WriteOutcome::Written(capacity as usize)
    );
    assert_eq!(consumer.available(), capacity);
    out.clear();
    consumer.read_into(&mut out);
    assert_eq!(out, stream(capacity..2 * capacity));
}

/// Read a piece at a time, across region boundaries and the wrap: the
/// stream in order, each read freeing room for the producer at once.
#[test]
fn reads_of_at_most_n_bytes_take_the_stream_in_pieces() {
    let (mut producer, mut consumer) = buffer(&[2, 1, 1], Config::default()).split().unwrap();
    let capacity = 4 * PAGE;
    let mut out = Vec::new();
    let mut written = 0;
    // Pieces of a size prime to the regions', so that they straddle them.
    let piece = 3001;
    for lap in 0..3 {
        let len = capacity - 100 * lap;
        assert_eq!(
            producer.write(&stream(written..written + len)),
            WriteOutcome::Written(len as usize)
        );
        written += len;
        while consumer.available() > 0 {
            let before = consumer.available();
            let n = consumer.read_into_at_most(&mut out, piece);
            assert_eq!(n, before.min(piece));
            assert_eq!(consumer.available(), before - n);
            // What was read is the producer's room again.
            assert_eq!(producer.stats().written - consumer.tail(), before - n);
        }
    }
    assert_eq!(out, stream(0..written));
    assert_eq!(consumer.read_into_at_most(&mut out, piece), 0);
}

#[test]
fn snapshot_after_whole_laps_is_the_last_capacity_bytes() {
    let config = Config {
        mode: Mode::Snapshot,
        ..Config::default()
    };
    let buf = buffer(&[1, 2, 1], config);
    let capacity = buf.capacity();
    let (mut producer, consumer) = buf.split().unwrap();
    let mut out = Vec::new();
    for (written, laps) in [
        (100, 0),
        (capacity, 1),
        (3 * capacity, 3),
        (3 * capacity + 777, 3),
    ] {
        let head = producer.head();
        producer.write(&stream(head..written));
        let info = consumer.snapshot(&mut out);
        let from = written.saturating_sub(capacity);
        assert_eq!(info.range, from..written);
        assert_eq!(out, stream(from..written), "after {written} bytes");
        assert_eq!(info.wrapped, written > capacity);
        assert_eq!(info.overwritten_during_copy, 0);
        assert_eq!(written / capacity, laps);
    }
    assert_eq!(producer.stats().lost_bytes, 0);
    assert_eq!(
        producer.stats().overwritten_bytes,
        3 * capacity + 777 - capacity
    );
}

#[test]
fn a_record_across_regions_reads_back_as_two_slices() {
    let (mut producer, consumer) = buffer(&[1, 1], Config::default()).split().unwrap();
    producer.write(&stream(0..PAGE - 10));
    let record = stream(PAGE - 10..PAGE + 30);
    let at = producer.write_record(&record).unwrap();
    assert_eq!(at, PAGE - 10);
    let segments: Vec<&[u8]> = consumer.segments(at..at + 40).collect();
    assert_eq!(segments.len(), 2);
    assert_eq!((segments[0].len(), segments[1].len()), (10, 30));
    assert_eq!([segments[0], segments[1]].concat(), record);
    assert_eq!(producer.read_offset().region, 1);
    assert_eq!(producer.read_offset().offset, 30);
}

#[test]
fn a_record_in_parts_reads_back_whole_or_not_at_all() {
    let (mut producer, mut consumer) = buffer(&[1, 1], Config::default()).split().unwrap();
    producer.write(&stream(0..PAGE - 10));
    let whole = stream(PAGE - 10..PAGE + 30);
    let (head, body) = whole.split_at(16);
    let at = producer.write_record_parts(&[head, &[], body]).unwrap();
    assert_eq!(at, PAGE - 10);
    let mut out = Vec::new();
    consumer.read_into(&mut out);
    assert_eq!(&out[(PAGE - 10) as usize..], &whole[..]);
    // 2 pages, 40 bytes unread: parts of 2 * PAGE - 39 bytes in all do not fit.
    producer.write(&stream(PAGE + 30..PAGE + 70));
    let big = stream(0..2 * PAGE - 39);
    let before = producer.head();
    assert_eq!(
        producer.write_record_parts(&[&big[..100], &big[100..]]),
        Err(RecordError::NoRoom {
            len: big.len(),
            free: 2 * PAGE - 40
        })
    );
    assert_eq!(producer.head(), before);
    assert_eq!(producer.stats().lost_bytes, big.len() as u64);
    assert_eq!(
        producer.write_record_parts(&vec![&[0u8; 8][..]; (1 << 10) + 1]),
        Err(RecordError::TooLarge {
            len: (8 << 10) + 8,
            capacity: 2 * PAGE
        })
    );
}

#[test]
fn advance_is_checked_in_absolute_positions() {
    let (mut producer, mut consumer) = buffer(&[1], Config::default()).split().unwrap();
    producer.write(&stream(0..100));
    assert_eq!(
        consumer.advance(101),
        Err(TailError::BeyondHead {
            head: 100,
            new: 101
        })
    );
    consumer.advance(60).unwrap();
    assert_eq!(
        consumer.advance(59),
        Err(TailError::Backwards {
            current: 60,
            new: 59
        })
    );
    assert_eq!(consumer.available(), 40);
}

#[test]
fn region_granular_stop_leaves_the_partial_region_unused() {
    let config = Config {
        stop: Granularity::Region,
        ..Config::default()
    };
    let (mut producer, mut consumer) = buffer(&[1, 1, 1, 1], config).split().unwrap();
    producer.write(&stream(0..4 * PAGE));
    // The consumer frees one and a half regions: only one whole region
    // can be filled, as the hardware's STOP bit allows.
    consumer.advance(PAGE + PAGE / 2).unwrap();
    assert_eq!(
        producer.write(&stream(4 * PAGE..6 * PAGE)),
        WriteOutcome::Stopped {
            written: PAGE as usize,
            lost: PAGE as usize
        }
    );
    assert_eq!(producer.markers().stop_at, 5 * PAGE);
    assert!(producer.handle_status().truncated);
    assert!(
        !producer.handle_status().truncated,
        "status is cleared once read"
    );
}

/// One step of a stop-on-full run.
#[derive(Debug, Clone)]
enum Step {
    Record(usize),
    Read(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            3 => (1usize..9000).prop_map(Step::Record),
            1 => (0u64..20_000).prop_map(Step::Read),
        ],
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Stop-on-full against a model: a record fits exactly when the model
    /// says there is room (byte: up to tail + capacity; region: up to the
    /// last region end at or before it); what the consumer reads is the
    /// accepted records in order; losses are counted exactly.
    #[test]
    fn stop_on_full_matches_model(
        pages in proptest::collection::vec(1u64..4, 1..6),
        region in any::<bool>(),
        steps in steps(),
    ) {
        let granularity = if region { Granularity::Region } else { Granularity::Byte };
        let config = Config { stop: granularity, ..Config::default() };
        let buf = buffer(&pages, config);
        let table = buf.table().clone();
        let capacity = buf.capacity();
        let (mut producer, mut consumer) = buf.split().unwrap();
        let (mut head, mut tail) = (0u64, 0u64);
        let mut accepted = Vec::new();
        let mut read = Vec::new();
        let (mut lost_bytes, mut lost_writes, mut next) = (0u64, 0u64, 0u64);
        for step in steps {
            match step {
                Step::Record(len) => {
                    let record = stream(next..next + len as u64);
                    next += len as u64;
                    let limit = match granularity {
                        Granularity::Byte => tail + capacity,
                        Granularity::Region => table.region_end_at_or_before(tail + capacity),
                    };
                    let fits = len as u64 <= capacity && head + len as u64 <= limit;
                    let got = producer.write_record(&record);
                    prop_assert_eq!(got.is_ok(), fits, "record of {} at head {} tail {}", len, head, tail);
                    if fits {
                        prop_assert_eq!(got.unwrap(), head);
                        head += len as u64;
                        accepted.extend_from_slice(&record);
                    } else if len as u64 <= capacity {
                        lost_bytes += len as u64;
                        lost_writes += 1;
                    }
                }
                Step::Read(n) => {
                    let to = (tail + n).min(head);
                    for s in consumer.segments(tail..to) {
                        read.extend_from_slice(s);
                    }
                    consumer.advance(to).unwrap();
                    tail = to;
                }
            }
        }
        consumer.read_into(&mut read);
        prop_assert_eq!(read, accepted);
        let stats = producer.stats();
        prop_assert_eq!((stats.written, stats.lost_bytes, stats.lost_writes), (head, lost_bytes, lost_writes));
    }
}

#[test]
fn notifications_come_once_per_watermark_when_the_consumer_keeps_up() {
    let config = Config {
        wakeup_watermark: 1024,
        ..Config::default()
    };
    let (mut producer, mut consumer) = buffer(&[2, 1, 1], config).split().unwrap();
    let mut out = Vec::new();
    let total = 100_000u64;
    for i in 0..total / 8 {
        producer.write_record(&i.to_le_bytes()).unwrap();
        consumer.read_into(&mut out);
    }
    assert_eq!(producer.stats().notifications, total / 1024);
}

#[test]
fn two_threads_stream_without_loss_or_corruption() {
    let (mut producer, mut consumer) = buffer(&[4, 2, 1, 1], Config::default()).split().unwrap();
    let total: u64 = 20 << 20;
    let writer = std::thread::spawn(move || {
        let mut pos = 0u64;
        let mut lost = 0u64;
        let mut len = 1u64;
        while pos < total {
            let n = len.min(total - pos);
            match producer.write_record(&stream(pos..pos + n)) {
                Ok(at) => {
                    assert_eq!(at, pos);
                    pos += n;
                }
                Err(RecordError::NoRoom { .. }) => {
                    lost += 1;
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
            len = len * 7 % 5003 + 1;
        }
        (lost, producer.stats())
    });
    let mut got = 0u64;
    let mut checked = Vec::new();
    while got < total {
        if consumer.wait(Some(Duration::from_secs(10))) != WaitOutcome::Ready {
            break;
        }
        checked.clear();
        let from = consumer.tail();
        consumer.read_into(&mut checked);
        assert_eq!(
            checked,
            stream(from..from + checked.len() as u64),
            "stream corrupted at {from}"
        );
        got += checked.len() as u64;
    }
    let (lost, stats) = writer.join().unwrap();
    assert_eq!(got, total);
    assert_eq!(stats.lost_writes, lost, "every refused record is counted");
}

#[test]
fn snapshots_while_the_producer_runs_hold_only_intact_bytes() {
    let config = Config {
        mode: Mode::Snapshot,
        ..Config::default()
    };
    let (mut producer, consumer) = buffer(&[1, 2, 1], config).split().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut pos = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                producer.write(&stream(pos..pos + 24));
                pos += 24;
            }
        })
    };
    let mut out = Vec::new();
    let mut raced = 0;
    for _ in 0..300 {
        let info = consumer.snapshot(&mut out);
        assert_eq!(out.len() as u64, info.range.end - info.range.start);
        assert_eq!(out, stream(info.range.clone()), "snapshot {:?}", info.range);
        raced += u64::from(info.overwritten_during_copy > 0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("{raced} of 300 snapshots lost bytes to the running producer");
}

#[test]
fn block_on_full_waits_for_room_times_out_and_sees_the_consumer_go() {
    let config = Config {
        mode: Mode::BlockOnFull {
            timeout: Duration::from_millis(50),
        },
        ..Config::default()
    };
    let (mut producer, mut consumer) = buffer(&[1], config).split().unwrap();
    producer.write(&stream(0..PAGE));
    let start = std::time::Instant::now();
    assert_eq!(
        producer.write_record(&[0; 8]),
        Err(RecordError::TimedOut { len: 8 })
    );
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert_eq!(producer.stats().lost_writes, 1);
    // A consumer that frees room wakes the waiting producer.
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        consumer.advance(100).unwrap();
        consumer
    });
    producer.write_record(&[7; 8]).unwrap();
    let consumer = reader.join().unwrap();
    drop(consumer);
    producer.write(&stream(0..92));
    assert_eq!(
        producer.write_record(&[0; 8]),
        Err(RecordError::ConsumerGone)
    );
}

#[test]
fn consumer_wait_reports_data_timeout_and_producer_exit() {
    let (mut producer, consumer) = buffer(&[1], Config::default()).split().unwrap();
    assert_eq!(
        consumer.wait(Some(Duration::from_millis(20))),
        WaitOutcome::TimedOut
    );
    producer.write_record(&[1, 2, 3]).unwrap();
    assert_eq!(
        consumer.wait(Some(Duration::from_millis(20))),
        WaitOutcome::Ready
    );
    let (mut producer, consumer) = buffer(&[1], Config::default()).split().unwrap();
    let tid = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let waiter_tid = std::sync::Arc::clone(&tid);
    let t = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        waiter_tid.store(
            unsafe { libc::gettid() },
            std::sync::atomic::Ordering::SeqCst,
        );
        let started = std::time::Instant::now();
        let first = consumer.wait(None);
        (first, started.elapsed(), consumer)
    });
    // The waiter really waits: announced in the buffer, and asleep in the
    // kernel (not merely not yet scheduled).
    let asleep = |producer: &ichnos_buf::topa::Producer| {
        let tid = tid.load(std::sync::atomic::Ordering::SeqCst);
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"));
        // The state follows the parenthesised name.
        let state = stat
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('S')));
        producer.consumer_waiting() && state == Some(true)
    };
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    while !asleep(&producer) {
        assert!(
            std::time::Instant::now() < give_up,
            "the waiter never went to sleep"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Below the watermark (half the capacity) nothing wakes a sleeper...
    producer.write_record(&[1; 100]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !t.is_finished() && asleep(&producer),
        "woken before the watermark"
    );
    // ...reaching it does.
    producer.write_record(&[1; 2048 - 100]).unwrap();
    let (first, waited, consumer) = t.join().unwrap();
    assert_eq!(first, WaitOutcome::Ready);
    assert!(waited >= Duration::from_millis(20), "waited {waited:?}");
    assert_eq!(producer.stats().notifications, 1);
    let t = std::thread::spawn(move || {
        let mut consumer = consumer;
        consumer.advance(consumer.head()).unwrap();
        consumer.wait(None)
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(producer);
    assert_eq!(t.join().unwrap(), WaitOutcome::ProducerGone);
}

/// How many times [`wake`] ran: the wakeup hook of the test below.
static WAKES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn wake() {
    WAKES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// The wakes since the last look.
fn wakes() -> usize {
    WAKES.swap(0, std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn an_armed_consumer_is_woken_through_the_wakeup_hook() {
    // Watermark: half the page.
    let config = Config {
        mode: Mode::BlockOnFull {
            timeout: Duration::from_millis(30),
        },
        ..Config::default()
    };
    let (mut producer, mut consumer) = buffer(&[1], config).split().unwrap();
    producer.set_wakeup_hook(wake);
    // Nobody armed: crossing the watermark runs no hook.
    producer.write_record(&[1; 2100]).unwrap();
    assert_eq!(producer.stats().notifications, 1);
    assert_eq!(wakes(), 0);
    // Something to read: arming says so instead of arming.
    assert!(consumer.arm().is_none());
    consumer.advance(consumer.head()).unwrap();
    // Armed: data below the watermark does not wake, reaching it does.
    let armed = consumer.arm().expect("nothing to read: armed");
    assert!(producer.consumer_waiting());
    producer.write_record(&[2; 100]).unwrap();
    assert_eq!(wakes(), 0, "woken below the watermark");
    producer.write_record(&[3; 2000]).unwrap();
    assert_eq!(wakes(), 1);
    drop(armed);
    assert!(!producer.consumer_waiting(), "disarmed when dropped");
    // A producer with no room wakes an armed consumer as it starts to
    // wait (here it times out: nobody reads).
    consumer.advance(consumer.head()).unwrap();
    producer.write_record(&[4; 2048]).unwrap();
    consumer.advance(consumer.head()).unwrap();
    producer.write_record(&[5; 4000]).unwrap();
    consumer.advance(consumer.head()).unwrap();
    let _ = wakes();
    let armed = consumer.arm().expect("armed");
    producer.write_record(&[6; 90]).unwrap();
    assert_eq!(wakes(), 0);
    assert_eq!(
        producer.write_record(&[7; 4096]),
        Err(RecordError::TimedOut { len: 4096 })
    );
    assert!(wakes() >= 1, "not woken while blocked");
    drop(armed);
    // The producer's end wakes an armed consumer that read all, and an
    // ended producer is no reason not to sleep (its socket, or a
    // timeout, tells the consumer).
    consumer.advance(consumer.head()).unwrap();
    let armed = consumer.arm().expect("armed");
    drop(producer);
    assert_eq!(wakes(), 1);
    drop(armed);
    assert!(consumer.arm().is_some());
}

#[test]
fn pad_region_fills_the_abandoned_tail() {
    let config = Config {
        pad_byte: 0xaa,
        ..Config::default()
    };
    let (mut producer, mut consumer) = buffer(&[1, 1], config).split().unwrap();
    producer.write(&[1; 100]);
    assert_eq!(producer.pad_region(), PAGE - 100);
    assert_eq!(producer.pad_region(), 0, "already at a region start");
    assert_eq!(producer.read_offset().region, 1);
    let mut out = Vec::new();
    consumer.read_into(&mut out);
    assert!(out[..100].iter().all(|&b| b == 1) && out[100..].iter().all(|&b| b == 0xaa));
    assert_eq!(producer.stats().padded_bytes, PAGE - 100);
}

#[test]
fn init_allocates_descending_power_of_two_regions() {
    let page = PAGE;
    let buf = TopaBuffer::init(
        0,
        11,
        AllocFlags {
            populate: true,
            ..AllocFlags::default()
        },
        Config::default(),
    )
    .unwrap();
    let lens: Vec<u64> = buf.table().regions().map(|r| r.len / page).collect();
    // max order is ilog2(11) - 1 = 2 in stop-on-full mode (two regions at least).
    assert_eq!(lens, [4, 4, 2, 1]);
    let snap = TopaBuffer::init(
        0,
        8,
        AllocFlags::default(),
        Config {
            mode: Mode::Snapshot,
            ..Config::default()
        },
    )
    .unwrap();
    assert_eq!(snap.table().len(), 1);
    assert!(matches!(
        TopaBuffer::init(0, 0, AllocFlags::default(), Config::default()),
        Err(AllocError::Invalid(_))
    ));
    assert!(matches!(
        TopaBuffer::init(1 << 20, 4, AllocFlags::default(), Config::default()),
        Err(AllocError::Invalid(m)) if m.contains("cpu 1048576")
    ));
    assert!(matches!(
        TopaBuffer::with_regions(&[4096, 100], AllocFlags::default(), Config::default()),
        Err(AllocError::NotPageSized {
            index: 1,
            len: 100,
            ..
        })
    ));
    let mut dump = String::new();
    buf.dump(&mut dump).unwrap();
    assert_eq!(dump.lines().count(), 1 + 4, "{dump}");
    assert!(
        dump.contains("size 0x4000") && dump.contains("size 0x1000"),
        "{dump}"
    );
}

const CHILD: &str = "ICHNOS_TOPA_CHILD_FD";

/// The producer half of the two-process test, run in a child process:
/// not a test of its own, so ignored by a plain run.
#[test]
#[ignore = "the child process of producer_and_consumer_in_two_processes, run by it"]
fn producer_child_entry() {
    let fd = std::env::var(CHILD).expect("run by producer_and_consumer_in_two_processes");
    // SAFETY: the parent passed this descriptor to us, open and unused.
    let fd = unsafe {
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd.parse().unwrap())
    };
    let buf = TopaBuffer::open(fd).unwrap();
    let mut producer = buf.producer().unwrap();
    let mut pos = 0u64;
    while pos < 4_000_000 {
        if producer.write_record(&stream(pos..pos + 1000)).is_ok() {
            pos += 1000;
        } else {
            std::thread::yield_now();
        }
    }
}

#[test]
fn producer_and_consumer_in_two_processes() {
    use std::os::fd::AsRawFd;
    let buf = buffer(&[4, 2, 2], Config::default());
    // SAFETY: F_DUPFD without FD_CLOEXEC, so the child inherits the copy.
    let inherited = unsafe { libc::fcntl(buf.fd().as_raw_fd(), libc::F_DUPFD, 100) };
    assert!(inherited >= 0);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "producer_child_entry",
            "--ignored",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD, inherited.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // SAFETY: our copy is no longer needed once the child has it.
    unsafe { libc::close(inherited) };
    let mut consumer = buf.consumer().unwrap();
    let mut out = Vec::new();
    let total = 4_000_000;
    while consumer.tail() < total {
        match consumer.wait(Some(Duration::from_secs(20))) {
            WaitOutcome::Ready => {
                let from = consumer.tail();
                out.clear();
                consumer.read_into(&mut out);
                assert_eq!(out, stream(from..from + out.len() as u64));
            }
            other => panic!("child stopped producing: {other:?} at {}", consumer.tail()),
        }
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(consumer.stats().written, total);
}

#[test]
fn one_producer_and_one_consumer_at_a_time() {
    let buf = buffer(&[1], Config::default());
    let producer = buf.producer().unwrap();
    assert!(matches!(buf.producer(), Err(AllocError::Taken("producer"))));
    let consumer = buf.consumer().unwrap();
    assert!(matches!(buf.consumer(), Err(AllocError::Taken("consumer"))));
    drop(producer);
    let mut again = buf.producer().unwrap();
    again.write_record(&[1, 2, 3]).unwrap();
    assert_eq!(consumer.available(), 3);
}

#[test]
fn block_on_full_streams_a_write_larger_than_the_buffer() {
    let config = Config {
        mode: Mode::BlockOnFull {
            timeout: Duration::from_secs(5),
        },
        ..Config::default()
    };
    let (mut producer, mut consumer) = buffer(&[1, 1], config).split().unwrap();
    let total = 10 * 2 * PAGE;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        while (out.len() as u64) < total {
            consumer.wait(Some(Duration::from_millis(5)));
            consumer.read_into(&mut out);
        }
        out
    });
    assert_eq!(
        producer.write(&stream(0..total)),
        WriteOutcome::Written(total as usize)
    );
    assert_eq!(reader.join().unwrap(), stream(0..total));
    assert_eq!(producer.stats().lost_writes, 0);
    // And a timed-out raw write is counted once.
    let config = Config {
        mode: Mode::BlockOnFull {
            timeout: Duration::from_millis(10),
        },
        ..Config::default()
    };
    let (mut producer, _consumer) = buffer(&[1], config).split().unwrap();
    assert_eq!(
        producer.write(&stream(0..PAGE + 10)),
        WriteOutcome::Stopped {
            written: PAGE as usize,
            lost: 10
        }
    );
    let stats = producer.stats();
    assert_eq!(
        (stats.lost_writes, stats.lost_bytes, stats.truncations),
        (1, 10, 1)
    );
}

/// Writes `value` at `offset` of the buffer's memfd, as a broken or
/// hostile peer process could (offsets from docs/topa-buffer.md).
fn poke(buf: &TopaBuffer, offset: i64, value: u64) {
    use std::os::fd::AsRawFd;
    let bytes = value.to_le_bytes();
    // SAFETY: pwrite of 8 bytes from a local array to our own memfd.
    let n = unsafe { libc::pwrite(buf.fd().as_raw_fd(), bytes.as_ptr().cast(), 8, offset) };
    assert_eq!(n, 8);
}

/// Writes the u32 `value` at `offset`, as `poke` does.
fn poke32(buf: &TopaBuffer, offset: i64, value: u32) {
    use std::os::fd::AsRawFd;
    let bytes = value.to_le_bytes();
    // SAFETY: pwrite of 4 bytes from a local array to our own memfd.
    let n = unsafe { libc::pwrite(buf.fd().as_raw_fd(), bytes.as_ptr().cast(), 4, offset) };
    assert_eq!(n, 4);
}

const MODE_OFFSET: i64 = 24;
const HEAD_OFFSET: i64 = 64;
const AHEAD_OFFSET: i64 = 72;

#[test]
fn positions_a_peer_corrupted_are_refused_not_trusted() {
    let buf = buffer(&[1, 1], Config::default());
    let consumer = buf.consumer().unwrap();
    poke(&buf, HEAD_OFFSET, u64::MAX - 4097);
    assert!(
        matches!(buf.producer(), Err(AllocError::BadHeader(_))),
        "a producer must not start from that head"
    );
    assert_eq!(
        consumer.available(),
        0,
        "the consumer reads nothing rather than garbage"
    );
    assert_eq!(consumer.segments(0..0).count(), 0);
    poke(&buf, HEAD_OFFSET, 3 * PAGE); // more than a capacity ahead of the tail
    assert_eq!(consumer.available(), 0);
    poke(&buf, HEAD_OFFSET, 100);
    assert_eq!(consumer.available(), 100, "a sane head is read as it is");
}

#[test]
fn a_mode_a_peer_changes_after_the_consumer_opened_is_not_taken() {
    let buf = buffer(&[1, 1], Config::default());
    let mut consumer = buf.consumer().unwrap();
    // Snapshot mode lets the head run past a capacity; a peer that says so
    // now must not make a head 3 pages ahead readable.
    poke32(&buf, MODE_OFFSET, 1);
    poke(&buf, HEAD_OFFSET, 3 * PAGE);
    assert_eq!(consumer.available(), 0);
    let mut out = Vec::new();
    assert_eq!(consumer.read_into(&mut out), 0);
    assert!(out.is_empty());
    // The consumer still reads as in the mode it opened: a sane head is
    // read, bytes and all.
    poke(&buf, HEAD_OFFSET, 100);
    assert_eq!(consumer.read_into(&mut out), 100);
    assert_eq!(out.len(), 100);
}

#[test]
fn a_snapshot_leaves_out_what_the_producer_announced_it_is_overwriting() {
    // The producer raises `ahead` before it copies; one stopped half way
    // through a write leaves `ahead` above `head`.
    let config = Config {
        mode: Mode::Snapshot,
        ..Config::default()
    };
    let buf = buffer(&[1], config);
    let (mut producer, consumer) = (buf.producer().unwrap(), buf.consumer().unwrap());
    producer.write(&stream(0..2 * PAGE));
    poke(&buf, AHEAD_OFFSET, 2 * PAGE + 100);
    let mut out = Vec::new();
    let info = consumer.snapshot(&mut out);
    assert_eq!(info.range, PAGE + 100..2 * PAGE);
    assert_eq!(out, stream(PAGE + 100..2 * PAGE));
    assert_eq!(info.overwritten_during_copy, 100);
}

/// In snapshot mode the producer overwrites what has not been read: no
/// slice of the regions is handed out as if it were stable, and reading
/// goes through `snapshot` only.
#[test]
fn snapshot_mode_hands_out_no_slices_of_bytes_being_overwritten() {
    let config = Config {
        mode: Mode::Snapshot,
        ..Config::default()
    };
    let buf = buffer(&[1], config);
    let (mut producer, mut consumer) = (buf.producer().unwrap(), buf.consumer().unwrap());
    producer.write(&stream(0..100));
    assert_eq!(consumer.available(), 100);
    assert_eq!(consumer.segments(0..100).count(), 0);
    let mut out = Vec::new();
    assert_eq!(consumer.read_into(&mut out), 0);
    assert!(out.is_empty());
    consumer.snapshot(&mut out);
    assert_eq!(out, stream(0..100));
}

#[test]
fn open_refuses_an_unsealed_or_foreign_memfd() {
    // SAFETY: creating and sizing a memfd of our own.
    let fd = unsafe {
        let raw = libc::memfd_create(c"not-a-buffer".as_ptr(), 0);
        assert!(raw >= 0);
        libc::ftruncate(raw, 64 * 1024);
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw)
    };
    assert!(matches!(TopaBuffer::open(fd), Err(AllocError::BadHeader(m)) if m.contains("sealed")));
    // SAFETY: as above, with sealing allowed and a shrink seal, but no header.
    let fd = unsafe {
        let raw = libc::memfd_create(c"not-a-buffer".as_ptr(), libc::MFD_ALLOW_SEALING);
        libc::ftruncate(raw, 64 * 1024);
        libc::fcntl(raw, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK);
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw)
    };
    assert!(matches!(TopaBuffer::open(fd), Err(AllocError::BadHeader(m)) if m.contains("magic")));
}
