//! The recorder's loop: waits on the rings, drains them through the
//! sorter, and handles each record in time order — the side-band records
//! into the address-space model, each sample unwound, interned and
//! written.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ichnos_code::elf::RowChoice;
use ichnos_code::{FrameKind, Regs, StopReason, UnwindOptions};
use ichnos_data::{LostCause, Record, StackStop};
use ichnos_perf::attr::regs;
use ichnos_perf::monotonic_ns;
use ichnos_perf::record::{
    Record as PerfRecord, Sample, CONTEXT_KERNEL, CONTEXT_USER, MISC_CPUMODE_MASK, MISC_USER,
    REGS_ABI_NONE,
};

use super::events;
use super::intern::Interner;
use super::kernel_frames::{push_kernel_frames, KernelSymbols};
use super::model::Spaces;
use super::off_cpu::OffCpu;
use super::order::{Sorter, MARGIN_NS};
use super::output::Output;
use super::stack_tops::StackTops;
use super::untouched::UntouchedPages;
use super::{RecordError, RecordOptions, Status};
use crate::launch::Child;
use crate::sys::Epoll;

mod chains;
mod stacks;
mod switches;
mod walk;

fn pid_of(tid: u32, pids: &[u32]) -> Option<u32> {
    pids.iter()
        .copied()
        .find(|pid| Path::new(&format!("/proc/{pid}/task/{tid}")).exists())
}

/// When a recording is over.
#[derive(Debug, Default)]
pub(super) struct Ending {
    stop_since: Option<Instant>,
    /// Signals sent to a command that outlived a stop.
    signalled: u8,
    last_alive_check: Option<Instant>,
}

impl Ending {
    /// Whether the recording is over: the command ended, or the processes
    /// attached to did, or a stop was asked for. A command that outlives
    /// a stop by a second is sent SIGTERM, and SIGKILL three seconds
    /// later; the recording ends when it does.
    fn over(&mut self, child: Option<&mut Child>, attached: &[u32], stop: &AtomicBool) -> bool {
        let stopping = stop.load(Ordering::Relaxed);
        // Attached processes (each named by its process id, however `-p`
        // named it) all gone: the recording is over, and a workload
        // bounding it is asked to end (as perf does).
        let mut attached_gone = || {
            if attached.is_empty() {
                return false;
            }
            if self
                .last_alive_check
                .is_some_and(|t| t.elapsed() < Duration::from_millis(500))
            {
                return false;
            }
            self.last_alive_check = Some(Instant::now());
            attached.iter().all(|&p| !crate::sys::alive(p))
        };
        let Some(child) = child else {
            return stopping || attached_gone();
        };
        if child.try_wait().ok().flatten().is_some() {
            return true;
        }
        if attached_gone() {
            child.signal(libc::SIGTERM);
            return true;
        }
        if stopping {
            let since = self.stop_since.get_or_insert_with(Instant::now).elapsed();
            if since >= Duration::from_secs(1) && self.signalled == 0 {
                child.signal(libc::SIGTERM);
                self.signalled = 1;
            }
            if since >= Duration::from_secs(4) && self.signalled == 1 {
                child.signal(libc::SIGKILL);
                self.signalled = 2;
            }
        }
        false
    }
}

/// The recorder's state while running.
pub(super) struct Recorder {
    /// The processes attached to (`-p`), by process id.
    pub(super) attached: Vec<u32>,
    pub(super) spaces: Spaces,
    pub(super) interner: Interner,
    pub(super) output: Output,
    pub(super) sorter: Sorter,
    /// Where a record that wraps the end of a ring is put together.
    pub(super) scratch: Vec<u8>,
    /// Where each thread's stacks end: a sample's stack is kept only
    /// below it.
    pub(super) stack_tops: StackTops,
    pub(super) options: UnwindOptions,
    pub(super) frames: Vec<ichnos_code::Frame>,
    pub(super) stack: Vec<u64>,
    pub(super) samples: u64,
    pub(super) complete: u64,
    /// Samples whose stack went on past the bytes the kernel copied,
    /// where it copied all it was asked for.
    pub(super) past_copy: u64,
    /// Samples whose stack was cut short by the recorder (its thread's
    /// frames reached higher than its complete stacks had).
    pub(super) cut_short: u64,
    /// Samples whose walk stopped at the frame limit.
    pub(super) at_frame_limit: u64,
    /// Stacks past the copy read from the threads' memory ([`None`]:
    /// not read, offline or asked not to).
    pub(super) live_stack: Option<super::live_stack::LiveStack>,
    /// Stack pages a sample's copy could not start on, made present for
    /// the samples after it unless asked not to ([`None`]: offline).
    pub(super) untouched: Option<UntouchedPages>,
    pub(super) lost: u64,
    /// Threads off their CPUs.
    pub(super) off_cpu: OffCpu,
    /// Time in the kernel is sampled: a sample without user registers is
    /// of a kernel thread, or of a task not yet or no longer in user
    /// space (an exec), not a loss.
    pub(super) kernel_sampled: bool,
    /// The kernel's functions, to name the kernel frames that samples
    /// taken there carry ([`None`]: offline, where the kernel that ran is
    /// not this one, and kernel frames are not kept).
    pub(super) kernel_symbols: Option<KernelSymbols>,
    /// Samples whose kernel frames were left out: offline, of a kernel
    /// not running here (no names for them).
    pub(super) kernel_frames_left_out: u64,
}

/// Whether `pid` or `tid` is -1: the kernel's number for a task it has
/// let go of, later still in its exit (`perf_event_pid_type`).
pub(super) fn let_go(pid: u32, tid: u32) -> bool {
    pid == u32::MAX || tid == u32::MAX
}

impl Recorder {
    /// Describes the processes attached to, as they are now; the
    /// recording ends when they have all exited.
    pub(super) fn attach(&mut self, pids: &[u32], tids: &[u32], now: u64) {
        self.attached = pids.to_vec();
        for &pid in pids {
            self.spaces.get_or_synthesize(pid, now, &mut self.output);
        }
        for &tid in tids {
            if let Some(pid) = pid_of(tid, pids) {
                self.spaces.know_thread(pid, tid, now, &mut self.output);
            }
        }
    }

    pub(super) fn new(options: &RecordOptions, output: Output, events: &events::Events) -> Self {
        let formats = events
            .rings
            .iter()
            .map(|(_, event)| events.opened[*event].format())
            .collect();
        let max_frames = options.max_frames.clamp(1, super::MAX_FRAMES);
        Self {
            attached: Vec::new(),
            spaces: Spaces::new(RowChoice::SframeThenEhFrame),
            interner: Interner::default(),
            output,
            sorter: Sorter::new(formats),
            scratch: Vec::new(),
            stack_tops: StackTops::default(),
            options: UnwindOptions {
                max_frames,
                frame_pointer_fallback: true,
            },
            frames: Vec::with_capacity(max_frames),
            stack: Vec::with_capacity(max_frames),
            samples: 0,
            complete: 0,
            past_copy: 0,
            cut_short: 0,
            at_frame_limit: 0,
            live_stack: options
                .stack_reads
                .then(super::live_stack::LiveStack::default),
            untouched: Some(UntouchedPages::new(options.stack_reads)),
            lost: 0,
            off_cpu: OffCpu::new(events.off_cpu_ids.clone()),
            kernel_sampled: events.kernel,
            kernel_symbols: events.kernel.then(KernelSymbols::default),
            kernel_frames_left_out: 0,
        }
    }

    /// When a record without a timestamp happened: now, live; offline
    /// (a file read back) the clock here means nothing, and it counts as
    /// the recording's start.
    fn now(&self) -> u64 {
        if self.spaces.is_offline() {
            0
        } else {
            monotonic_ns()
        }
    }

    /// A recorder of processes that are not running here: the records of
    /// a perf.data file, handed to [`Recorder::handle`] in time order.
    pub(super) fn offline(max_frames: usize, output: Output) -> Self {
        Self {
            attached: Vec::new(),
            spaces: Spaces::offline(RowChoice::SframeThenEhFrame),
            interner: Interner::default(),
            output,
            sorter: Sorter::new(Vec::new()),
            scratch: Vec::new(),
            stack_tops: StackTops::default(),
            options: UnwindOptions {
                max_frames,
                frame_pointer_fallback: true,
            },
            frames: Vec::with_capacity(max_frames),
            stack: Vec::with_capacity(max_frames),
            samples: 0,
            complete: 0,
            past_copy: 0,
            cut_short: 0,
            at_frame_limit: 0,
            live_stack: None,
            untouched: None,
            lost: 0,
            off_cpu: OffCpu::default(),
            kernel_sampled: false,
            kernel_symbols: None,
            kernel_frames_left_out: 0,
        }
    }

    /// The main loop: until the command or the processes are gone, or a
    /// stop is asked for.
    pub(super) fn run(
        &mut self,
        events: &mut events::Events,
        mut child: Option<&mut Child>,
        stop: &AtomicBool,
        status: &mut dyn FnMut(&Status),
    ) -> Result<(), RecordError> {
        let os = |what| move |source| RecordError::Os { what, source };
        let epoll = Epoll::new().map_err(os("epoll"))?;
        // Every event, not only those that own a ring: an event whose
        // tasks are gone hangs up while the others keep writing into its
        // CPU's ring, and each one's readiness is that ring's.
        for (i, event) in events.opened.iter().enumerate() {
            epoll
                .add(event.as_fd().as_raw_fd(), i as u64)
                .map_err(os("epoll"))?;
        }
        let exit_fd = child.as_ref().and_then(|c| c.exit_fd().ok());
        if let Some(fd) = &exit_fd {
            epoll.add(fd.as_raw_fd(), u64::MAX).map_err(os("epoll"))?;
        }
        let started = Instant::now();
        let mut last_status = Instant::now();
        let mut ending = Ending::default();
        let mut ready = Vec::with_capacity(64);
        loop {
            epoll.wait(100, &mut ready).map_err(os("epoll"))?;
            for &(token, hung_up) in &ready {
                // Rings are drained each round whoever woke; an event whose
                // tasks are gone stays ready for ever, so it leaves the set.
                if let (true, Some(event)) = (hung_up, events.opened.get(token as usize)) {
                    let _ = epoll.remove(event.as_fd().as_raw_fd());
                }
            }
            let now = monotonic_ns();
            self.drain(events, now.saturating_sub(MARGIN_NS));
            if self.output.writer_failed() || self.output.overflowed {
                if let Some(c) = child.as_deref_mut() {
                    c.signal(libc::SIGTERM);
                }
                return Ok(());
            }
            if last_status.elapsed() >= Duration::from_millis(250) {
                last_status = Instant::now();
                status(&Status {
                    elapsed: started.elapsed(),
                    samples: self.samples,
                    lost: self.lost + self.output.dropped,
                    processes: self.spaces.by_pid.len(),
                });
            }
            if ending.over(child.as_deref_mut(), &self.attached, stop) {
                return Ok(());
            }
        }
    }

    /// Reads every ring and handles the records at or before `up_to`.
    pub(super) fn drain(&mut self, events: &mut events::Events, up_to: u64) {
        let now = monotonic_ns();
        let mut broken = 0;
        for (i, (ring, _)) in events.rings.iter_mut().enumerate() {
            let (sorter, tops, untouched) =
                (&mut self.sorter, &mut self.stack_tops, &mut self.untouched);
            let read = ring.read_records(&mut self.scratch, |record| {
                let ended = sorter.stage_record(record, i as u16, now, |sample| {
                    if let Some(untouched) = untouched.as_mut() {
                        untouched.see(sample);
                    }
                    tops.needed(sample)
                });
                if let Some(tid) = ended {
                    tops.end(tid);
                }
            });
            broken += u64::from(read.broken);
        }
        // Before the samples wait their turn: the ones after them find
        // their pages there.
        if let Some(untouched) = self.untouched.as_mut() {
            untouched.make_present();
        }
        if broken > 0 {
            // The rest of a read whose framing broke is dropped: count it.
            self.lost += broken;
            self.output.lost(now, 0, broken, LostCause::Unreadable);
        }
        let mut sorter = std::mem::take(&mut self.sorter);
        sorter.release(up_to, |record, staged| {
            self.handle(record, staged.stack_cut);
        });
        self.sorter = sorter;
        // And for the copies the walks found cut short inside the stack.
        if let Some(untouched) = self.untouched.as_mut() {
            untouched.make_present();
        }
        // JIT code can be named after its first samples (a runtime writes
        // its perf map late): look again while the processes live, not
        // only when a new stack comes. A GDB JIT list is read again on
        // time too: code freed and reused lies under objects still known.
        for space in self.spaces.by_pid.values_mut() {
            space.capture_jit_names(&mut self.output, now, false);
            space.refresh_registry_on_time(now, &mut self.output);
            space.refresh_debugger_jit_on_time(now, &mut self.output);
        }
        // (Names held for code registered after the samples handled so
        // far wait for its samples.)
        self.rename_all(up_to.min(now));
        self.output.tell_drops(now);
    }

    /// Names JIT code still unnamed, while the processes live, ends the
    /// intervals of threads still off their CPUs, and names the kernel's
    /// functions that the stacks have frames in; `now` is when the
    /// recording stopped.
    pub(super) fn finish(&mut self, now: u64) {
        self.off_cpu.finish(now, &mut self.output);
        self.spaces.finish(now, &mut self.output);
        self.rename_all(now);
        if let Some(kernel) = self.kernel_symbols.as_mut() {
            kernel.finish(&mut self.output);
        }
    }

    /// Gives each process that holds names of JIT code put where other
    /// code was named a new address space ([`Spaces::rename`]).
    fn rename_all(&mut self, now: u64) {
        let pids: Vec<u32> = self.spaces.by_pid.keys().copied().collect();
        for pid in pids {
            self.spaces.rename(pid, now, &mut self.output);
        }
    }

    pub(super) fn handle(&mut self, record: &PerfRecord<'_>, stack_cut: bool) {
        match record {
            PerfRecord::Sample(s) => self.sample(s, stack_cut),
            PerfRecord::Mmap(m) if m.executable => {
                let time = m.sample_id.time.unwrap_or_else(|| self.now());
                self.spaces.map(
                    m.pid,
                    m.addr..m.addr.saturating_add(m.len),
                    m.pgoff,
                    m.filename,
                    m.build_id,
                    time,
                    &mut self.output,
                );
            }
            PerfRecord::Comm(c) => {
                let time = c.sample_id.time.unwrap_or_else(|| self.now());
                if c.exec {
                    // A new program: a new stack.
                    self.stack_tops.ended(c.tid);
                    // A thread other than the main one that executes a
                    // program takes the id of the main thread, whose exit
                    // was just recorded: its waits are this thread's.
                    self.off_cpu.born(c.tid);
                }
                if c.exec && c.pid == c.tid {
                    self.spaces.begin(c.pid, c.name, time, &mut self.output);
                    if let Some(live) = self.live_stack.as_mut() {
                        live.new_process(c.pid);
                    }
                    if let Some(untouched) = self.untouched.as_mut() {
                        untouched.forget(c.pid);
                    }
                }
                self.spaces
                    .name_thread(c.pid, c.tid, c.name, time, &mut self.output);
            }
            PerfRecord::Fork(f) => {
                self.off_cpu.born(f.tid);
                if f.pid == f.tid && f.pid != f.ppid {
                    self.spaces
                        .fork(f.pid, f.ppid, f.tid, f.time, &mut self.output);
                    if let Some(live) = self.live_stack.as_mut() {
                        live.new_process(f.pid);
                    }
                    if let Some(untouched) = self.untouched.as_mut() {
                        untouched.forget(f.pid);
                    }
                } else if let Some((_, name)) = self.spaces.threads.get(&f.ptid).cloned() {
                    self.spaces
                        .name_thread(f.pid, f.tid, &name, f.time, &mut self.output);
                } else {
                    self.spaces
                        .know_thread(f.pid, f.tid, f.time, &mut self.output);
                }
            }
            PerfRecord::Exit(e) => {
                self.spaces.exit(e.pid, e.tid, e.time, &mut self.output);
                self.stack_tops.ended(e.tid);
                if let Some(live) = self.live_stack.as_mut() {
                    live.thread_ended(e.tid);
                }
                if let Some(untouched) = self.untouched.as_mut().filter(|_| e.pid == e.tid) {
                    untouched.forget(e.pid);
                }
                self.off_cpu.ended(e.tid);
            }
            PerfRecord::Switch(sw) => self.switch(sw),
            PerfRecord::Lost(l) => {
                self.lost += l.lost;
                let time = l.sample_id.time.unwrap_or_else(|| self.now());
                let cpu = l.sample_id.cpu.unwrap_or(0);
                self.output.lost(time, cpu, l.lost, LostCause::KernelRing);
            }
            PerfRecord::LostSamples(l) => {
                self.lost += l.lost;
                let time = l.sample_id.time.unwrap_or_else(|| self.now());
                let cpu = l.sample_id.cpu.unwrap_or(0);
                self.output
                    .lost(time, cpu, l.lost, LostCause::KernelSamples);
            }
            PerfRecord::Throttle(t) | PerfRecord::Unthrottle(t) => {
                let throttled = matches!(record, PerfRecord::Throttle(_));
                let rel = self.output.rel(t.time);
                self.output.meta(&Record::Throttle {
                    time: rel,
                    cpu: u64::from(t.sample_id.cpu.unwrap_or(0)),
                    throttled,
                });
            }
            _ => {}
        }
    }

    /// A sample's process, thread and time; `None` if it lacks one, or
    /// is of a task the kernel let go of (counted: no program's time, and
    /// no thread to keep any state for).
    fn sample_ids(&mut self, s: &Sample<'_>) -> Option<(u32, u32, u64)> {
        let (pid, tid, time) = (s.id.pid?, s.id.tid?, s.id.time?);
        if let_go(pid, tid) {
            self.off_cpu.kernel_threads += 1;
            return None;
        }
        Some((pid, tid, time))
    }

    /// Whether sample `s` of thread `tid` of `pid` has an address space
    /// to go to (`Spaces::sampled`). One that has none, taken on its CPU
    /// past its exit record in a process that ended moments before, is
    /// written there with its kernel frames ([`Self::sample_past_exit`]);
    /// others are counted with the samples of no program's time.
    pub(super) fn has_space_for(
        &mut self,
        s: &Sample<'_>,
        (pid, tid, time, cpu): (u32, u32, u64, u32),
        on_cpu: bool,
    ) -> bool {
        if self.spaces.sampled(pid, tid, time, &mut self.output) {
            return true;
        }
        let ended = self.spaces.ended_lately(pid, time).filter(|_| on_cpu);
        if !ended.is_some_and(|asid| self.sample_past_exit(s, asid, (pid, tid, time, cpu))) {
            self.off_cpu.kernel_threads += 1;
        }
        false
    }

    pub(super) fn sample(&mut self, s: &Sample<'_>, stack_cut: bool) {
        let Some((pid, tid, time)) = self.sample_ids(s) else {
            return;
        };
        let leaving = self.off_cpu.is_switch_sample(s.id.id);
        if !leaving {
            // Running: whatever wait it was in is over (its switch record
            // back was lost, or is in a ring not read yet).
            self.off_cpu.back(tid, time, false, &mut self.output);
        }
        // A writer that is behind would be handed the sample's new stack
        // to keep back, and the sample itself dropped: drop it whole.
        if self.output.behind() {
            self.output.drop_sample();
            return;
        }
        let cpu = s.id.cpu.unwrap_or(0);
        let regs = s.regs_user.filter(|r| r.abi != REGS_ABI_NONE);
        let Some(regs) = regs.and_then(|r| {
            Some(Regs {
                ip: r.get(regs::IP)?,
                sp: r.get(regs::SP)?,
                fp: r.get(regs::BP)?,
                bx: r.get(regs::BX),
            })
        }) else {
            if !leaving && self.kernel_only_sample(s, pid, tid, time, cpu) {
                return;
            }
            if leaving || self.off_cpu.enabled() || self.kernel_sampled {
                // A kernel thread (sampled in the kernel, or switching):
                // no program's time.
                self.off_cpu.kernel_threads += 1;
                return;
            }
            if s.callchain.is_some() {
                // perf record -g: the kernel's frame-pointer chain.
                self.sample_chain(s, s.callchain(), (pid, tid, time, cpu));
                return;
            }
            if let Some(ip) = s.ip.filter(|_| s.misc & MISC_CPUMODE_MASK == MISC_USER) {
                // perf record with no call graph: where the thread was,
                // a stack of one frame.
                self.sample_chain(s, [CONTEXT_USER, ip].into_iter(), (pid, tid, time, cpu));
                return;
            }
            self.lost += 1;
            self.output.lost(time, cpu, 1, LostCause::NoUserRegisters);
            return;
        };
        self.off_cpu.user_thread(tid);
        let stack = s.stack_user.unwrap_or_default();
        if !self.has_space_for(s, (pid, tid, time, cpu), !leaving) {
            return;
        }
        let in_kernel = s.misc & MISC_CPUMODE_MASK != MISC_USER;
        if in_kernel
            && !leaving
            && self
                .spaces
                .by_pid
                .get(&pid)
                .is_some_and(|space| !space.is_mapped(regs.ip))
        {
            // Taken in the kernel with user registers that are of no code
            // of the process: an exec past the new memory and before the
            // new program's first instruction (the registers are the old
            // program's). Time of no user code.
            self.off_cpu.kernel_threads += 1;
            return;
        }
        // The kernel copied less than asked for: the stack's mapping ended
        // (or a page of it was never touched).
        let copy_short = (stack.len() as u64) < s.stack_user_size;
        let stop = self.walk_sample(pid, tid, time, regs, stack, !stack_cut && !copy_short);
        let mut stop = stack_stop(stop);
        if stop == StackStop::StackEnd && copy_short && !stack_cut {
            self.ran_off_copy(pid, regs.sp, s, !leaving);
        }
        let space = self.spaces.by_pid.get_mut(&pid).expect("still there");
        // A frame-pointer chain through code that does not keep one reads
        // whatever rbp holds: a "return address" in no mapping is not one,
        // and the stack ends before it rather than with made-up frames.
        if let Some(bad) = self
            .frames
            .iter()
            .position(|f| f.kind == FrameKind::FramePointer && !space.is_mapped(f.lookup_address()))
        {
            self.frames.truncate(bad);
            stop = StackStop::NoUnwindInfo;
        }
        // Out of JIT code by the frame pointer, on a CPU: a Java
        // process's compiled code may not keep it (`model/java.rs`).
        if !leaving
            && space.maps_jvm()
            && self.frames.windows(2).any(|w| {
                w[1].kind == FrameKind::FramePointer && space.may_be_jit(w[0].lookup_address())
            })
        {
            space.walked_out_of_jit();
        }
        self.store_stack(s, in_kernel);
        if leaving {
            if let Some(stack) = self.intern_stack(pid, time, stop) {
                self.off_cpu
                    .left(pid, tid, cpu, time, stack, stop == StackStop::Complete);
            }
        } else {
            let weight = self.off_cpu.sample_weight(tid, time, s.period.unwrap_or(1));
            self.write_sample(pid, tid, cpu, time, stop, weight);
        }
        self.learn(tid, stop, stack_cut, copy_short, leaving);
    }

    /// Puts the walked frames in `self.stack` as stacks are stored, after
    /// the kernel's frames of sample `s` where it was taken in the kernel
    /// (`in_kernel`) with them.
    fn store_stack(&mut self, s: &Sample<'_>, in_kernel: bool) {
        self.stack.clear();
        // Taken in the kernel: the kernel's frames first, where it gave
        // them; the user code's address where it entered the kernel is
        // then no longer the first frame, and is stored plus one as an
        // interrupted one is.
        if in_kernel && self.kernel_symbols.is_none() && s.callchain().any(|a| a == CONTEXT_KERNEL)
        {
            self.kernel_frames_left_out += 1;
        }
        if in_kernel && self.kernel_symbols.is_some() {
            // (Up to as many as the event asks for: a stack holds them
            // besides its walked frames.)
            let most = usize::from(ichnos_perf::event::KERNEL_STACK_FRAMES);
            push_kernel_frames(s.callchain(), most, &mut self.stack);
        }
        let entered = !self.stack.is_empty();
        let frames = &self.frames;
        self.stack.extend(frames.iter().enumerate().map(|(i, f)| {
            match f.kind {
                // Stored plus one so that "minus one" finds the instruction.
                FrameKind::Interrupted => f.ip.wrapping_add(1),
                _ if i == 0 && entered => f.ip.wrapping_add(1),
                // The signal trampoline (`__restore_rt`), below the frame
                // it interrupted: the handler returns to its first
                // instruction, which no call precedes (its unwind entry
                // starts a byte early for unwinders that look up minus
                // one, and that byte is no function's): plus one, so that
                // the trampoline is named.
                _ if frames
                    .get(i + 1)
                    .is_some_and(|next| next.kind == FrameKind::Interrupted) =>
                {
                    f.ip.wrapping_add(1)
                }
                _ => f.ip,
            }
        }));
    }

    /// The walk of sample `s` of `pid`, stack pointer `sp`, ran off its
    /// copy, which the kernel cut short: at the stack mapping's end, or at
    /// a page never touched, which a read makes present for the samples
    /// after (an empty copy was read for when it was staged). `on_cpu`: a
    /// sample on a CPU.
    fn ran_off_copy(&mut self, pid: u32, sp: u64, s: &Sample<'_>, on_cpu: bool) {
        let copied = s.stack_user.map_or(0, <[u8]>::len) as u64;
        if let Some(untouched) = self.untouched.as_mut().filter(|_| copied > 0) {
            let (from, to) = (
                sp.saturating_add(copied),
                sp.saturating_add(s.stack_user_size),
            );
            untouched.ran_off(pid, sp, from, to, on_cpu);
        }
    }

    /// What the walk of a sample of thread `tid` that ended with `stop`
    /// says of its thread's stacks (`stack_cut`: staged cut short;
    /// `copy_short`: the kernel copied less than asked for; `leaving`: a
    /// switch sample), and counts.
    fn learn(
        &mut self,
        tid: u32,
        stop: StackStop,
        stack_cut: bool,
        copy_short: bool,
        leaving: bool,
    ) {
        // What is learnt of the thread's stack serves both kinds; the
        // counts are of samples on CPUs (off them, of intervals written).
        match stop {
            StackStop::Complete => {
                self.complete += u64::from(!leaving);
                if let Some(outermost) = self.frames.last() {
                    self.stack_tops.learn(tid, outermost.sp);
                }
            }
            // Cut too soon: this thread's stacks are copied whole from now.
            StackStop::StackEnd if stack_cut => {
                self.cut_short += u64::from(!leaving);
                self.stack_tops.never_cut(tid);
            }
            // The kernel copied less than asked for where the stack's
            // mapping ended: a walk that ran off that copy ran off the
            // stack itself (through code it could not follow), and a
            // larger copy would not take it further. (Or where a page of
            // the stack was never touched: `untouched.rs` reads it in for
            // the samples after.)
            StackStop::StackEnd if copy_short => {}
            StackStop::StackEnd => self.past_copy += u64::from(!leaving),
            StackStop::DepthLimit => self.at_frame_limit += u64::from(!leaving),
            _ => {}
        }
    }
}

impl Recorder {
    /// Writes a sample of `pid`'s thread `tid` whose stack is the one in
    /// `self.stack`: interned (written first if it is new, its JIT frames
    /// noted for naming), then the sample itself.
    fn write_sample(
        &mut self,
        pid: u32,
        tid: u32,
        cpu: u32,
        time: u64,
        stop: StackStop,
        weight: u64,
    ) {
        let Some(id) = self.intern_stack(pid, time, stop) else {
            return;
        };
        self.write_sample_of(id, (pid, tid, time, cpu), weight);
    }

    /// A sample of stack `id`, of thread `tid` of `pid` on `cpu` at
    /// `time`, weighing `weight`.
    fn write_sample_of(
        &mut self,
        id: u32,
        (pid, tid, time, cpu): (u32, u32, u64, u32),
        weight: u64,
    ) {
        let rel = self.output.rel(time);
        self.output.sample(&Record::Sample {
            time: rel,
            pid: u64::from(pid),
            tid: u64::from(tid),
            cpu: u64::from(cpu),
            stack: u64::from(id),
            weight,
        });
        self.samples += 1;
    }
}

fn stack_stop(stop: StopReason) -> StackStop {
    match stop {
        StopReason::Outermost => StackStop::Complete,
        StopReason::StackEnd { .. } => StackStop::StackEnd,
        StopReason::NoUnwindInfo { .. } => StackStop::NoUnwindInfo,
        StopReason::Loop => StackStop::Loop,
        StopReason::DepthLimit => StackStop::DepthLimit,
        StopReason::BadAddress => StackStop::BadAddress,
    }
}
