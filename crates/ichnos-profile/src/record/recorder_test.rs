//! The recorder's handling of records, on samples of this very thread:
//! which walks that run off a sample's stack copy count as having gone
//! on past it (the note that suggests a larger `--stack-size`), and the
//! interval off the CPU of a leaving whose switch sample was lost.

use ichnos_data::{Reader, Record as Stored, StackStop};
use ichnos_perf::record::{parse, Record, SampleId, Switch};

use super::alloc_test::{format, recorder, sample_here_copying};
use super::live_stack_test::ends_at_once;
use super::off_cpu::OffCpu;

#[test]
fn a_walk_off_a_copy_that_the_stacks_end_cut_short_is_not_past_the_copy() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    // Asked for 16 KiB and given 256 bytes, as where the kernel's copy
    // ends at the end of the stack's mapping: more would not have come.
    let short = sample_here_copying(&format, start, 16 << 10, 256);
    // Asked for 256 bytes and given them: the stack went on.
    let whole = sample_here_copying(&format, start + 1, 256, 256);
    for record in [&short, &whole] {
        let Ok(sample @ Record::Sample(_)) = parse(&format, record) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
    }
    assert_eq!(recorder.samples, 2);
    // Both walks ran off their copies (this thread's frames take more
    // than 256 bytes).
    assert_eq!(recorder.complete, 0);
    assert_eq!(recorder.past_copy, 1, "only the copy as long as asked for");
    super::close(recorder.output, writer, 0).unwrap();
}

#[test]
fn a_leaving_whose_switch_sample_was_lost_is_an_interval_without_frames() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    // Off-CPU time recorded, its switch samples from event 77: the clock
    // samples here carry no id, so none is a switch sample.
    recorder.off_cpu = OffCpu::new(vec![77]);
    // The thread runs (a sample with its user registers): a program's.
    let record = sample_here_copying(&format, start, 16 << 10, 16 << 10);
    let Ok(sample @ Record::Sample(s)) = parse(&format, &record) else {
        panic!("not a sample");
    };
    recorder.handle(&sample, false);
    let (pid, tid) = (s.id.pid.unwrap(), s.id.tid.unwrap());
    let switch = |out: bool, time: u64| {
        Record::Switch(Switch {
            out,
            preempted: false,
            other: None,
            sample_id: SampleId {
                pid: Some(pid),
                tid: Some(tid),
                time: Some(time),
                id: None,
                stream_id: None,
                cpu: Some(0),
            },
        })
    };
    // It leaves, with no switch sample before the record, and comes back
    // 3 ms later.
    recorder.handle(&switch(true, start + 2_000_000), false);
    recorder.handle(&switch(false, start + 5_000_000), false);
    assert_eq!(recorder.off_cpu.unsampled, 1);
    super::close(recorder.output, writer, 0).unwrap();

    let file = std::fs::File::open(dir.path().join("x.data")).unwrap();
    let mut reader = Reader::new(std::io::BufReader::new(file)).unwrap();
    let mut frameless = Vec::new();
    let mut intervals = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                Stored::Stack(stack) if stack.stop == StackStop::SampleLost => {
                    assert_eq!(stack.frames.iter().count(), 0);
                    frameless.push(stack.id);
                }
                Stored::OffCpu {
                    tid: t,
                    stack,
                    duration,
                    ..
                } => intervals.push((t, stack, duration)),
                _ => {}
            }
        }
    }
    assert_eq!(frameless.len(), 1, "one stack without frames");
    assert_eq!(
        intervals,
        [(u64::from(tid), frameless[0], 3_000_000)],
        "the interval, on that stack"
    );
}

/// Takes a sample of this thread with a copy of `copy` bytes and hands
/// it to `recorder` from here, while the frames the copy ends in are
/// still live (as a sampled thread's outer frames are).
#[inline(never)]
fn sample_and_handle(recorder: &mut super::Recorder, copy: usize, time: u64) {
    let format = format();
    let record = sample_here_copying(&format, time, copy, copy);
    let Ok(sample @ Record::Sample(_)) = parse(&format, &record) else {
        panic!("not a sample");
    };
    recorder.handle(&sample, false);
}

#[test]
fn a_stack_past_its_copy_is_read_on_from_the_threads_memory_where_it_still_holds() {
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    for read_on in [false, true] {
        let (mut recorder, writer) = recorder(format(), dir.path(), start);
        recorder.live_stack = read_on.then(super::live_stack::LiveStack::default);
        // 4 KiB of this thread's stack, asked for and given: its frames
        // go on beyond, in this test and the harness, and are still there
        // when the sample is handled: the walk reaches the thread's start
        // through what is read of them.
        sample_and_handle(&mut recorder, 4 << 10, start);
        assert_eq!(
            (recorder.complete, recorder.past_copy),
            if read_on { (1, 0) } else { (0, 1) },
            "read on: {read_on}"
        );
        if let Some(live) = &recorder.live_stack {
            assert_eq!((live.completed, live.changed), (1, 0));
        }
        super::close(recorder.output, writer, 0).unwrap();
    }
}

/// A process whose memory could not be read is not tried again, until a
/// new process has its id (pid reuse under `-a`).
#[test]
fn a_process_found_unreadable_is_tried_again_once_its_pid_is_a_new_one() {
    use ichnos_code::{Regs, StopReason};
    // A process that is gone: its id reads nothing.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let memory = vec![0u8; 8192];
    let sp = memory.as_ptr() as u64;
    let taken = super::live_stack::Taken {
        pid,
        tid: pid,
        time: ichnos_perf::monotonic_ns(),
        regs: Regs {
            ip: 0,
            sp,
            fp: 0,
            bx: None,
        },
        copy: &memory[..4096],
    };
    let past = StopReason::StackEnd {
        addr: sp + 4096 + 8,
    };
    let mut live = super::live_stack::LiveStack::default();
    let stop = super::live_stack_test::walk_on(&mut live, taken, past, None, &mut ends_at_once());
    assert_eq!(stop, past, "nothing read, no walk");
    assert_eq!(live.unreadable, 1);
    assert!(live.skips(pid));
    // The recorder learns of a new process by its fork record.
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format(), dir.path(), start);
    recorder.live_stack = Some(live);
    let fork = ichnos_perf::record::TaskEvent {
        pid,
        ppid: std::process::id(),
        tid: pid,
        ptid: std::process::id(),
        time: start,
        sample_id: SampleId::default(),
    };
    recorder.handle(&Record::Fork(fork), false);
    assert!(!recorder.live_stack.as_ref().unwrap().skips(pid));
    // And of a new program by an exec: found unreadable again, then the
    // exec's name record.
    let stop = recorder
        .live_stack
        .as_mut()
        .unwrap()
        .walk_on(taken, past, &mut ends_at_once());
    assert_eq!(stop, past);
    assert!(recorder.live_stack.as_ref().unwrap().skips(pid));
    let exec = ichnos_perf::record::Comm {
        pid,
        tid: pid,
        name: b"new",
        exec: true,
        sample_id: SampleId::default(),
    };
    recorder.handle(&Record::Comm(exec), false);
    assert!(!recorder.live_stack.as_ref().unwrap().skips(pid));
    super::close(recorder.output, writer, 0).unwrap();
}

thread_local! {
    /// The recorder and sample time `called_from_jit` hands its sample to.
    static FROM_JIT: std::cell::Cell<(*mut super::Recorder, u64)> =
        const { std::cell::Cell::new((std::ptr::null_mut(), 0)) };
}

/// Recurses `n` times, each frame holding 1 KiB, then samples this thread
/// with a 4 KiB copy: the frames below (the JIT's among them) lie past
/// the copy.
#[inline(never)]
fn deep_then_sample(n: u32) {
    let mut pad = [0u8; 1024];
    std::hint::black_box(&mut pad);
    if n == 0 {
        let (recorder, time) = FROM_JIT.with(std::cell::Cell::get);
        // SAFETY: the recorder the test set, which outlives the call and
        // is not otherwise borrowed while the JIT code runs.
        sample_and_handle(unsafe { &mut *recorder }, 4 << 10, time);
    } else {
        deep_then_sample(n - 1);
    }
    std::hint::black_box(&mut pad);
}

extern "C" fn called_from_jit() {
    deep_then_sample(24);
}

/// `void read_on_jit(void (*callback)(void))`: calls its argument with the
/// stack aligned (sub rsp, 8; call rdi; add rsp, 8; ret).
const JIT_CODE: &[u8] = &[
    0x48, 0x83, 0xec, 0x08, 0xff, 0xd7, 0x48, 0x83, 0xc4, 0x08, 0xc3,
];

/// Executable memory holding [`JIT_CODE`], registered with this process's
/// code registry; unregistered and unmapped on drop.
struct TestJit {
    start: *mut libc::c_void,
    _table: std::sync::Arc<ichnos_code::JitUnwindTable>,
}

impl TestJit {
    fn emit() -> TestJit {
        use ichnos_code::row::{UnwindRow, ROW_CFA_BASE_SP};
        // SAFETY: a new private anonymous mapping; nothing else is touched.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(start, libc::MAP_FAILED);
        // SAFETY: the page mapped above is writable and 4096 bytes long.
        unsafe {
            std::ptr::copy_nonoverlapping(JIT_CODE.as_ptr(), start.cast(), JIT_CODE.len());
            assert_eq!(
                libc::mprotect(start, 4096, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
        }
        // The CFA (SP + offset) over each range; the return address at
        // CFA - 8 throughout.
        let table = std::sync::Arc::new(ichnos_code::JitUnwindTable::with_capacity(3));
        for (ip_off, size, cfa_off) in [(0, 4, 8), (4, 6, 16), (10, 1, 8)] {
            table
                .push(UnwindRow {
                    ip_off,
                    size,
                    cfa_off,
                    ra_off: -8,
                    fp_off: 0,
                    info: ROW_CFA_BASE_SP,
                })
                .unwrap();
        }
        let text = start as u64..start as u64 + JIT_CODE.len() as u64;
        ichnos_code::Registry::global()
            .register_jit(ichnos_code::JitCode::with_table(text, &table).with_name("read_on_jit"))
            .unwrap();
        TestJit {
            start,
            _table: table,
        }
    }

    fn range(&self) -> std::ops::Range<u64> {
        self.start as u64..self.start as u64 + JIT_CODE.len() as u64
    }

    fn call(&self, callback: extern "C" fn()) {
        // SAFETY: the page holds JIT_CODE, a complete System V function
        // of this signature, executable while `self` lives.
        let f: extern "C" fn(extern "C" fn()) = unsafe {
            std::mem::transmute::<*mut libc::c_void, extern "C" fn(extern "C" fn())>(self.start)
        };
        f(callback);
    }
}

impl Drop for TestJit {
    fn drop(&mut self) {
        let _ = ichnos_code::Registry::global().unregister(self.start as u64);
        // SAFETY: the mapping made in `emit`, no longer run.
        unsafe { libc::munmap(self.start, 4096) };
    }
}

/// JIT code registered after the process's first sample, whose frame a
/// sample reaches only past its stack copy, in the thread's memory: the
/// look for JIT code comes after that read too, and the stack is walked
/// through the JIT frame to the thread's start.
#[test]
fn jit_code_reached_past_the_copy_is_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format(), dir.path(), start);
    recorder.live_stack = Some(super::live_stack::LiveStack::default());
    // The process's first sample, before the JIT code exists: complete
    // through what is read on.
    sample_and_handle(&mut recorder, 4 << 10, start);
    assert_eq!(recorder.complete, 1);
    let jit = TestJit::emit();
    FROM_JIT.with(|f| f.set((&raw mut recorder, start + 1_000_000_000)));
    jit.call(called_from_jit);
    FROM_JIT.with(|f| f.set((std::ptr::null_mut(), 0)));
    let through_jit = recorder
        .frames
        .iter()
        .any(|f| jit.range().contains(&f.lookup_address()));
    assert!(
        through_jit,
        "the JIT frame is in the stack: {:x?}",
        recorder.frames
    );
    assert_eq!(recorder.complete, 2, "the second sample is complete");
    // Read on once for each (the walk over the first read, which ended in
    // the JIT code then unknown, is neither completed nor changed).
    let live = recorder.live_stack.as_ref().unwrap();
    assert_eq!((live.completed, live.changed, live.unreadable), (2, 0, 0));
    drop(jit);
    super::close(recorder.output, writer, 0).unwrap();
}

/// A sample taken in the kernel whose user registers are of no code of
/// the process (an exec's, between the new memory and the new program's
/// first instruction, carries the old program's) is left out as time of
/// no user code; the same sample taken in user space is kept.
#[test]
fn a_kernel_sample_with_registers_of_no_code_is_left_out() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    let mut record = sample_here_copying(&format, start, 256, 256);
    let Ok(Record::Sample(s)) = parse(&format, &record) else {
        panic!("not a sample");
    };
    // The instruction pointer, in the sample and in its registers, made
    // one that no mapping holds.
    let ip = s.ip.unwrap().to_le_bytes();
    let mut at = 0;
    let mut replaced = 0;
    while let Some(found) = record[at..].windows(8).position(|w| w == ip) {
        record[at + found..at + found + 8].copy_from_slice(&0x10u64.to_le_bytes());
        at += found + 8;
        replaced += 1;
    }
    // The sample's, its registers' (and any copy on the stack).
    assert!(replaced >= 2, "{replaced} found");
    for (misc, kept) in [(1u16, false), (ichnos_perf::record::MISC_USER, true)] {
        record[4..6].copy_from_slice(&misc.to_le_bytes());
        let Ok(sample @ Record::Sample(_)) = parse(&format, &record) else {
            panic!("not a sample");
        };
        let (samples, left_out) = (recorder.samples, recorder.off_cpu.kernel_threads);
        recorder.handle(&sample, false);
        assert_eq!(recorder.samples - samples, u64::from(kept), "misc {misc}");
        assert_eq!(
            recorder.off_cpu.kernel_threads - left_out,
            u64::from(!kept),
            "misc {misc}"
        );
    }
    super::close(recorder.output, writer, 0).unwrap();
}

/// A sample taken in the kernel with the kernel's frames: they come first
/// in its stack, innermost first, and the user address it entered the
/// kernel at follows them stored plus one (a reader looks a frame after
/// the first up minus one); the same sample taken in user space has its
/// address first, as it is.
#[test]
fn kernel_frames_come_first_and_the_user_address_after_them_is_stored_plus_one() {
    use ichnos_perf::attr::sample;
    let user_format = format();
    let format = ichnos_perf::record::SampleFormat {
        sample_type: user_format.sample_type | sample::CALLCHAIN,
        ..user_format
    };
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    recorder.kernel_symbols = Some(super::kernel_frames::KernelSymbols::default());
    let user = sample_here_copying(&user_format, start, 16 << 10, 16 << 10);
    let Ok(Record::Sample(s)) = parse(&user_format, &user) else {
        panic!("not a sample");
    };
    let ip = s.ip.unwrap();
    // The marker, then two kernel addresses.
    let kernel = [0xffff_ffff_8120_0010u64, 0xffff_ffff_8130_0020];
    let chain = [ichnos_perf::record::CONTEXT_KERNEL, kernel[0], kernel[1]];
    for (misc, chain) in [
        (1u16, &chain[..]),
        (ichnos_perf::record::MISC_USER, &[][..]),
    ] {
        // The callchain goes after the period: header, ip, pid and tid,
        // time, cpu and period are 48 bytes.
        let mut record = user[..48].to_vec();
        record.extend_from_slice(&(chain.len() as u64).to_le_bytes());
        for address in chain {
            record.extend_from_slice(&address.to_le_bytes());
        }
        record.extend_from_slice(&user[48..]);
        record[4..6].copy_from_slice(&misc.to_le_bytes());
        let size = u16::try_from(record.len()).unwrap();
        record[6..8].copy_from_slice(&size.to_le_bytes());
        let Ok(sample @ Record::Sample(_)) = parse(&format, &record) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
    }
    assert_eq!(recorder.samples, 2);
    super::close(recorder.output, writer, 0).unwrap();

    let file = std::fs::File::open(dir.path().join("x.data")).unwrap();
    let mut reader = Reader::new(std::io::BufReader::new(file)).unwrap();
    let mut stacks = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            if let Stored::Stack(stack) = record.unwrap() {
                stacks.push(stack.frames.iter().collect::<Vec<u64>>());
            }
        }
    }
    assert_eq!(stacks.len(), 2, "{stacks:x?}");
    assert_eq!(
        stacks[0][..3],
        [kernel[0], kernel[1], ip + 1],
        "{stacks:x?}"
    );
    assert_eq!(stacks[1][0], ip, "{stacks:x?}");
    // The same walk after them.
    assert_eq!(stacks[0][3..], stacks[1][1..], "{stacks:x?}");
}

/// A CPU-wide event samples a thread in its exit after its exit record.
/// Such a sample goes to its process while that runs on, without naming
/// the thread anew (a phantom thread would keep the process from ending,
/// and a new name would be the one a report shows); once the process has
/// ended it is counted as no program's time, and the process is not
/// made again, unless it has kernel frames: then it is the kernel
/// letting the process's memory go, written to the process's last address
/// space with those frames (as perf counts it to the process). A sample
/// numbered -1 (a task the kernel let go of) is counted likewise.
#[test]
fn samples_past_an_exit_record_name_nothing_and_make_no_process() {
    // On a thread of its own: its number is not the process's.
    std::thread::spawn(|| {
        let dir = tempfile::tempdir().unwrap();
        let start = ichnos_perf::monotonic_ns();
        let (mut recorder, writer) = recorder(format(), dir.path(), start);
        let pid = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() }.cast_unsigned();
        sample_and_handle(&mut recorder, 256, start + 1_000);
        assert!(recorder.spaces.threads.contains_key(&tid));
        let exit = |tid, time| {
            Record::Exit(ichnos_perf::record::TaskEvent {
                pid,
                ppid: pid,
                tid,
                ptid: pid,
                time,
                sample_id: SampleId::default(),
            })
        };
        recorder.handle(&exit(tid, start + 2_000), false);
        let samples = recorder.samples;
        sample_and_handle(&mut recorder, 256, start + 3_000);
        assert_eq!(recorder.samples, samples + 1, "kept, in its process");
        assert!(!recorder.spaces.threads.contains_key(&tid), "named anew");
        // The first thread exits: the process has no other, and ends.
        let asid = recorder.spaces.by_pid[&pid].asid;
        recorder.handle(&exit(pid, start + 4_000), false);
        assert!(!recorder.spaces.by_pid.contains_key(&pid));
        let left_out = recorder.off_cpu.kernel_threads;
        sample_and_handle(&mut recorder, 256, start + 5_000);
        assert_eq!(recorder.samples, samples + 1, "kept past its process");
        assert_eq!(recorder.off_cpu.kernel_threads, left_out + 1);
        assert!(!recorder.spaces.by_pid.contains_key(&pid), "made again");
        // With kernel frames (the marker, then two addresses), taken in
        // the kernel: written to the process that ended.
        recorder.kernel_symbols = Some(super::kernel_frames::KernelSymbols::default());
        let chained = ichnos_perf::record::SampleFormat {
            sample_type: format().sample_type | ichnos_perf::attr::sample::CALLCHAIN,
            ..format()
        };
        let user = sample_here_copying(&format(), start + 5_500, 256, 256);
        let kernel = [0xffff_ffff_8120_0010u64, 0xffff_ffff_8130_0020];
        // The callchain goes after the period (48 bytes in).
        let mut record = user[..48].to_vec();
        for word in [3, ichnos_perf::record::CONTEXT_KERNEL, kernel[0], kernel[1]] {
            record.extend_from_slice(&word.to_le_bytes());
        }
        record.extend_from_slice(&user[48..]);
        record[4..6].copy_from_slice(&1u16.to_le_bytes());
        let size = u16::try_from(record.len()).unwrap();
        record[6..8].copy_from_slice(&size.to_le_bytes());
        let Ok(sample @ Record::Sample(_)) = parse(&chained, &record) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
        assert_eq!(
            recorder.samples,
            samples + 2,
            "written to the ended process"
        );
        assert_eq!(recorder.off_cpu.kernel_threads, left_out + 1);
        assert!(!recorder.spaces.by_pid.contains_key(&pid), "made again");
        // The same as perf record -g takes it, the chain alone (no
        // registers, no stack): written there too.
        let chain_only = ichnos_perf::record::SampleFormat {
            sample_type: chained.sample_type
                & !(ichnos_perf::attr::sample::REGS_USER | ichnos_perf::attr::sample::STACK_USER),
            regs_user: 0,
            ..chained
        };
        let mut bare = record[..48 + 4 * 8].to_vec();
        let size = u16::try_from(bare.len()).unwrap();
        bare[6..8].copy_from_slice(&size.to_le_bytes());
        let Ok(sample @ Record::Sample(_)) = parse(&chain_only, &bare) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
        assert_eq!(recorder.samples, samples + 3, "written without registers");
        assert_eq!(recorder.off_cpu.kernel_threads, left_out + 1);
        // -1 for both numbers.
        let mut record = sample_here_copying(&format(), start + 6_000, 256, 256);
        record[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        let Ok(sample @ Record::Sample(_)) = parse(&format(), &record) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
        assert_eq!(recorder.off_cpu.kernel_threads, left_out + 2);
        assert!(!recorder.spaces.by_pid.contains_key(&u32::MAX));
        super::close(recorder.output, writer, 0).unwrap();
        // Read back: the last stack is the kernel's frames, in the
        // process's address space, and the last sample is of that stack.
        let (stacks, last_sample) = stacks_and_last_sample(&dir.path().join("x.data"));
        let (id, in_space, frames) = stacks.last().unwrap().clone();
        assert_eq!((in_space, frames), (asid, kernel.to_vec()));
        assert_eq!(
            last_sample,
            Some((u64::from(pid), u64::from(tid), id)),
            "{stacks:x?}"
        );
    })
    .join()
    .unwrap();
}

/// The stacks of the recording at `path` (id, address space, frames), and
/// its last sample's process, thread and stack.
#[allow(clippy::type_complexity)]
fn stacks_and_last_sample(
    path: &std::path::Path,
) -> (Vec<(u64, u64, Vec<u64>)>, Option<(u64, u64, u64)>) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = Reader::new(std::io::BufReader::new(file)).unwrap();
    let (mut stacks, mut last_sample) = (Vec::new(), None);
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for record in chunk.records() {
            match record.unwrap() {
                Stored::Stack(stack) => stacks.push((
                    stack.id,
                    stack.asid,
                    stack.frames.iter().collect::<Vec<u64>>(),
                )),
                Stored::Sample {
                    pid, tid, stack, ..
                } => last_sample = Some((pid, tid, stack)),
                _ => {}
            }
        }
    }
    (stacks, last_sample)
}
