//! Sampling this test process through the kernel: events opened per CPU
//! with inherit, rings drained, records parsed, and checked against what
//! the test did (a thread it named and ran, a file it mapped).

use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use ichnos_perf::record::{parse, Records};
use ichnos_perf::{monotonic_ns, online_cpus, EventConfig, EventKind, PerfEvent, Record, Ring};

fn config() -> EventConfig {
    EventConfig {
        kind: EventKind::CpuClock,
        frequency: 1000,
        stack_user: 4096,
        regs_user: EventConfig::UNWIND_REGS,
        inherit: true,
        enable_on_exec: false,
        disabled: true,
        wakeup_watermark: 4096,
        side_band: true,
        build_ids: false,
        context_switches: false,
        kernel: false,
        kernel_stacks: 0,
        exclude_idle: false,
        identify: false,
    }
}

fn tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }).cast_unsigned()
}

#[test]
fn samples_and_side_band_of_a_named_thread_are_captured() {
    let pid = std::process::id();
    let events: Vec<PerfEvent> = online_cpus()
        .into_iter()
        // This thread (the harness runs tests off the main thread), and by
        // inherit the threads it creates.
        .map(|cpu| PerfEvent::open(&config(), tid().cast_signed(), cpu.cast_signed()).unwrap())
        .collect();
    let mut rings: Vec<Ring> = events.iter().map(|e| Ring::new(e, 64).unwrap()).collect();
    let start = monotonic_ns();
    for e in &events {
        e.enable().unwrap();
    }
    // A thread created after enabling (inherit), named, spinning 300 ms.
    let spinner = std::thread::Builder::new()
        .name("spinner-x".into())
        .spawn(|| {
            let until = Instant::now() + Duration::from_millis(300);
            let mut x = 1u64;
            while Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
            }
            tid()
        })
        .unwrap();
    // An executable mapping of a file.
    let file = std::fs::File::open("/bin/true").unwrap();
    let canonical = std::fs::canonicalize("/bin/true").unwrap();
    // SAFETY: a fresh private read-execute mapping of an open file; it is
    // never read here.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let spinner_tid = spinner.join().unwrap();
    for e in &events {
        e.disable().unwrap();
    }
    let end = monotonic_ns();

    let mut samples = 0;
    let mut saw_fork = false;
    let mut saw_comm = false;
    let mut saw_mmap = false;
    let mut last_time = vec![0u64; rings.len()];
    for (i, ring) in rings.iter_mut().enumerate() {
        let format = events[i].format();
        let mut bytes = Vec::new();
        ring.read_into(&mut bytes);
        for r in Records::new(&bytes) {
            let (_, _, record) = r.unwrap();
            let record = parse(&format, record).unwrap();
            if let Some(t) = record.time() {
                assert!(
                    (start..=end).contains(&t),
                    "time {t} outside {start}..{end}"
                );
                // One ring is written in time order.
                assert!(t >= last_time[i]);
                last_time[i] = t;
            }
            match record {
                Record::Sample(s) if s.id.tid == Some(spinner_tid) => {
                    samples += 1;
                    assert_eq!(s.id.pid, Some(pid));
                    let regs = s.regs_user.unwrap();
                    assert_eq!(regs.get(8), s.ip, "rip is the sample's ip");
                    let sp = regs.get(7).unwrap();
                    assert_ne!(sp, 0);
                    let stack = s.stack_user.unwrap();
                    assert!(!stack.is_empty() && stack.len() <= 4096);
                }
                Record::Fork(f) if f.tid == spinner_tid => {
                    assert_eq!(f.pid, pid);
                    saw_fork = true;
                }
                Record::Comm(c) if c.tid == spinner_tid && c.name == b"spinner-x" => {
                    saw_comm = true;
                }
                Record::Mmap(m) if m.filename == canonical.as_os_str().as_bytes() => {
                    assert_eq!(m.addr, map as u64);
                    assert_eq!(m.pgoff, 0);
                    assert!(m.executable);
                    saw_mmap = true;
                }
                _ => {}
            }
        }
    }
    // SAFETY: unmapping what we mapped above.
    unsafe { libc::munmap(map, 4096) };
    assert!(saw_fork, "no FORK record for the spinner");
    assert!(saw_comm, "no COMM record naming the spinner");
    assert!(saw_mmap, "no MMAP2 record for {}", canonical.display());
    // 300 ms at 1 kHz of CPU time; allow for a busy machine.
    assert!(samples >= 50, "{samples} samples of the spinner");
}

#[test]
fn a_frequency_above_the_kernel_limit_is_refused_with_both_numbers() {
    let max = ichnos_perf::event::max_sample_rate().unwrap();
    let config = EventConfig {
        frequency: max + 1,
        ..config()
    };
    let e = PerfEvent::open(&config, 0, -1).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&(max + 1).to_string()) && text.contains(&max.to_string()),
        "{text}"
    );
}

#[test]
fn a_process_that_does_not_exist_is_named() {
    // PIDs are below 2^22 on Linux.
    let e = PerfEvent::open(&config(), 0x7fff_fff0, -1).unwrap_err();
    assert!(
        matches!(
            e,
            ichnos_perf::OpenError::NoSuchProcess {
                pid: 0x7fff_fff0,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn ring_sizes_must_be_a_power_of_two() {
    let event = PerfEvent::open(&config(), 0, -1).unwrap();
    assert!(matches!(
        Ring::new(&event, 3),
        Err(ichnos_perf::RingError::BadSize { data_pages: 3 })
    ));
}

#[test]
fn records_are_read_in_place_and_across_the_end_of_the_ring() {
    // A ring of 8 pages and samples of about 4.2 KiB: as it is read round
    // after round, records keep straddling the end of the data area.
    // This thread on any CPU: one ring (the kernel maps no ring for an
    // inherited event followed across CPUs).
    let config = EventConfig {
        inherit: false,
        ..config()
    };
    let event = PerfEvent::open(&config, tid().cast_signed(), -1).unwrap();
    let format = event.format();
    let mut ring = Ring::new(&event, 8).unwrap();
    let data_size = ring.data_size();
    event.enable().unwrap();
    let mut scratch = Vec::new();
    let (mut samples, mut bytes, mut last) = (0, 0, 0);
    let mut read = |ring: &mut Ring| {
        let got = ring.read_records(&mut scratch, |record| {
            let size = usize::from(u16::from_le_bytes([record[6], record[7]]));
            assert_eq!(size, record.len());
            let parsed = parse(&format, record).unwrap();
            if let Some(t) = parsed.time() {
                assert!(t >= last, "{t} after {last}");
                last = t;
            }
            if let Record::Sample(s) = parsed {
                assert_eq!(s.id.tid, Some(tid()));
                assert_eq!(s.stack_user_size, 4096);
                samples += 1;
            }
        });
        assert!(!got.broken);
        bytes += got.bytes;
    };
    let until = Instant::now() + Duration::from_millis(300);
    let mut x = 1u64;
    while Instant::now() < until {
        for _ in 0..100_000 {
            x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
        }
        read(&mut ring);
    }
    event.disable().unwrap();
    read(&mut ring);
    assert!(samples >= 100, "{samples} samples");
    // Round the ring many times: straddling records were put together.
    assert!(bytes > 8 * data_size, "{bytes} bytes through {data_size}");
}

#[test]
fn a_sleeping_thread_is_sampled_as_it_leaves_its_cpu_with_its_user_registers() {
    // Every switch of this thread: a sample as it leaves (period 1), and
    // the switch records of both directions, all with the event's id.
    let config = EventConfig {
        kind: EventKind::ContextSwitches,
        inherit: false,
        context_switches: true,
        identify: true,
        ..config()
    };
    let event = PerfEvent::open(&config, tid().cast_signed(), -1).unwrap();
    let id = event.id().unwrap();
    let format = event.format();
    let mut ring = Ring::new(&event, 64).unwrap();
    let local = 0u64;
    let here = std::ptr::from_ref(&local) as u64;
    event.enable().unwrap();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(2));
    }
    event.disable().unwrap();
    let mut bytes = Vec::new();
    ring.read_into(&mut bytes);
    let (mut samples, mut outs, mut ins) = (0, 0, 0);
    // Which way the thread went last: switches alternate.
    let mut last_out = None;
    for r in Records::new(&bytes) {
        let (_, _, record) = r.unwrap();
        match parse(&format, record).unwrap() {
            Record::Sample(s) => {
                assert_eq!(s.id.id, Some(id));
                assert_eq!(s.id.tid, Some(tid()));
                assert_eq!(s.period, Some(1));
                // Taken in the kernel, with the registers the thread had
                // when it entered it: its stack pointer is below this
                // frame's locals, and its stack is copied.
                let regs = s.regs_user.unwrap();
                assert_ne!(regs.abi, ichnos_perf::record::REGS_ABI_NONE);
                let sp = regs.get(7).unwrap();
                assert!(
                    sp < here && here - sp < 1 << 20,
                    "sp {sp:#x} here {here:#x}"
                );
                assert!(!s.stack_user.unwrap().is_empty());
                samples += 1;
            }
            Record::Switch(s) => {
                assert_eq!(s.sample_id.tid, Some(tid()));
                assert_eq!(s.sample_id.id, Some(id));
                assert_ne!(last_out, Some(s.out), "two switches the same way");
                last_out = Some(s.out);
                if s.out {
                    outs += 1;
                } else {
                    ins += 1;
                }
            }
            _ => {}
        }
    }
    // Twenty sleeps: at least twenty times off the CPU and back.
    assert!(samples >= 20, "{samples} switch samples");
    assert!(outs >= 20 && ins >= 20, "{outs} out, {ins} in");
}

#[test]
fn the_sched_switch_tracepoint_is_found_in_tracefs_or_said_to_be_missing() {
    let id = ichnos_perf::event::tracepoint_id("sched", "sched_switch");
    // Where tracefs is mounted, its id file is the truth; a tracepoint
    // that does not exist has none.
    let file = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .find_map(|d| std::fs::read_to_string(format!("{d}/events/sched/sched_switch/id")).ok());
    assert_eq!(id, file.map(|t| t.trim().parse().unwrap()));
    assert_eq!(
        ichnos_perf::event::tracepoint_id("sched", "no_such_point"),
        None
    );
}

/// The text symbols of `/proc/kallsyms`, sorted: (address, name).
fn kernel_text_symbols() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut symbols: Vec<(u64, String)> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let address = u64::from_str_radix(words.next()?, 16).ok()?;
            let kind = words.next()?;
            let name = words.next()?;
            matches!(kind, "t" | "T" | "w" | "W").then(|| (address, name.to_owned()))
        })
        .collect();
    symbols.sort();
    symbols
}

#[test]
fn a_sample_in_the_kernel_carries_the_kernel_frames_of_the_call_it_is_in() {
    // This thread reads /dev/zero a MiB at a time: most of its samples
    // are taken in the kernel, inside read(2). Each must carry its kernel
    // frames (and no user part); samples in user space none.
    let config = EventConfig {
        inherit: false,
        kernel: true,
        kernel_stacks: ichnos_perf::event::kernel_stack_frames(),
        ..config()
    };
    assert!(config.kernel_stacks > 0);
    let event = PerfEvent::open(&config, tid().cast_signed(), -1)
        .expect("sampling the kernel needs root or kernel.perf_event_paranoid 1 or lower");
    let format = event.format();
    let mut ring = Ring::new(&event, 256).unwrap();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    event.enable().unwrap();
    let until = Instant::now() + Duration::from_millis(300);
    let mut bytes = Vec::new();
    while Instant::now() < until {
        std::io::Read::read_exact(&mut &zero, &mut buf).unwrap();
        ring.read_into(&mut bytes);
    }
    event.disable().unwrap();
    ring.read_into(&mut bytes);
    // PERF_CONTEXT_KERNEL and PERF_CONTEXT_USER of the kernel's ABI.
    let (context_kernel, context_user) = (u64::MAX - 127, u64::MAX - 511);
    assert_eq!(
        (
            ichnos_perf::record::CONTEXT_KERNEL,
            ichnos_perf::record::CONTEXT_USER
        ),
        (context_kernel, context_user)
    );
    let symbols = kernel_text_symbols();
    let name_of = |address: u64| {
        let i = symbols.partition_point(|(a, _)| *a <= address);
        (i > 0).then(|| symbols[i - 1].1.as_str())
    };
    let (mut in_kernel, mut in_user, mut through_read) = (0, 0, 0);
    for r in Records::new(&bytes) {
        let (_, _, record) = r.unwrap();
        let Record::Sample(s) = parse(&format, record).unwrap() else {
            continue;
        };
        let chain: Vec<u64> = s.callchain().collect();
        if s.misc & ichnos_perf::record::MISC_CPUMODE_MASK == ichnos_perf::record::MISC_USER {
            assert!(chain.is_empty(), "a user-space sample with {chain:x?}");
            in_user += 1;
            continue;
        }
        in_kernel += 1;
        assert_eq!(chain.first(), Some(&context_kernel), "{chain:x?}");
        assert!(!chain.contains(&context_user), "{chain:x?}");
        assert!(chain.len() <= 1 + usize::from(config.kernel_stacks));
        // The sampled address first: the sample's own.
        assert_eq!(chain.get(1).copied(), s.ip, "{chain:x?}");
        for &address in &chain[1..] {
            assert!(address >= 1 << 63, "{address:#x} is no kernel address");
        }
        // The callers, as the kernel's own symbol table names them,
        // include the read system call's.
        let callers: Vec<&str> = chain[2..].iter().filter_map(|&a| name_of(a - 1)).collect();
        if callers.contains(&"ksys_read") && callers.contains(&"vfs_read") {
            through_read += 1;
        }
    }
    assert!(in_kernel >= 100, "{in_kernel} samples in the kernel");
    // Nearly all of it is in read(2).
    assert!(
        through_read * 10 >= in_kernel * 9,
        "{through_read} of {in_kernel} kernel samples through ksys_read and vfs_read ({in_user} in user space)"
    );
}
