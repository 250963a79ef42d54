//! The notes a recording is told with: how its events were set up, and
//! at its end what the recorder saw (stacks past the copy, threads off
//! their CPUs, JIT code nothing named).

use ichnos_perf::EventKind;

use super::recorder::Recorder;
use super::untouched::UntouchedPages;
use super::{
    events, model, off_cpu, output, EventChoice, RecordOptions, MAX_FRAMES, MAX_STACK_SIZE,
};

/// What the user should know about how the events were set up.
pub(super) fn setup_notes(options: &RecordOptions, events: &events::Events) -> Vec<String> {
    let mut notes = Vec::new();
    if options.event != EventChoice::Exactly(EventKind::CpuClock)
        && events.kind == EventKind::CpuClock
        && !options.off_cpu
    {
        notes.push(
            "no hardware cycle counter here (a virtual machine without a PMU?): sampling cpu-clock"
                .to_owned(),
        );
    }
    if events.off_cpu_kind == Some(EventKind::ContextSwitches) {
        notes.push(
            "tracefs does not show sched:sched_switch (not mounted, or not readable): \
             sampling switches with the software event context-switches, at the same moment"
                .to_owned(),
        );
    }
    if !events.kernel {
        let why = match ichnos_perf::event::paranoid() {
            Some(p) if p > 1 => format!(
                "kernel.perf_event_paranoid {p} allows it to root and CAP_PERFMON only \
                 (sysctl kernel.perf_event_paranoid=1 allows it)"
            ),
            // A lockdown or a security module.
            _ => "the kernel refused it".to_owned(),
        };
        notes.push(format!(
            "time in the kernel (system calls, page faults) is not sampled: {why}"
        ));
    }
    if events.rings_limited() {
        notes.push(format!(
            "the kernel limits locked memory: rings of {} KiB instead of {} KiB (see kernel.perf_event_mlock_kb)",
            events.pages * 4,
            events.planned_pages * 4
        ));
    }
    notes
}

/// The notes of what the recorder saw: stacks read on, threads off
/// their CPUs, JIT code unnamed.
pub(super) fn recorder_notes(recorder: &Recorder) -> Vec<String> {
    let read_on = recorder
        .live_stack
        .as_ref()
        .and_then(|l| read_on_note((l.completed, l.changed, l.unreadable, l.from_kept)));
    read_on
        .into_iter()
        .chain(
            recorder
                .untouched
                .iter()
                .flat_map(|u| untouched_notes(u, recorder.samples)),
        )
        .chain(off_cpu_notes(&recorder.off_cpu))
        .chain(unnamed_jit_note(
            &recorder.spaces.unnamed_jit,
            recorder.spaces.unnamed_jit_processes,
        ))
        .chain(java_skipping_note(
            &recorder.spaces.java_skipping,
            recorder.spaces.java_skipping_processes,
        ))
        .chain(
            recorder
                .kernel_symbols
                .as_ref()
                .and_then(super::kernel_frames::KernelSymbols::unnamed_note),
        )
        .collect()
}

/// The notes on stack pages the kernel's copies stopped at
/// (`untouched.rs`): those read in, and those that could not be.
fn untouched_notes(untouched: &UntouchedPages, samples: u64) -> impl Iterator<Item = String> {
    untouched_note(untouched, samples)
        .into_iter()
        .chain(unread_note(untouched.unread, samples))
}

/// The note on samples whose stack copy stopped at a stack page never
/// touched (more than one in a thousand), and the pages read in for the
/// samples after them (`untouched.rs`).
fn untouched_note(untouched: &UntouchedPages, samples: u64) -> Option<String> {
    let stopped = untouched.stopped;
    if samples == 0 || stopped * 1000 <= samples {
        return None;
    }
    Some(if untouched.reads() {
        format!(
            "{} had {} stack copy stop at a stack page never touched (the unused bottom of a \
             large frame), where the kernel's copy stops: the recorder read such pages in \
             ({} {}) so that the samples after could be copied whole",
            count(stopped, "sample", "samples"),
            if stopped == 1 { "its" } else { "their" },
            untouched.reads_in,
            if untouched.reads_in == 1 {
                "read"
            } else {
                "reads"
            }
        )
    } else {
        format!(
            "{} had none of {} stack copied: the page at the stack pointer was never touched \
             (the unused bottom of a large frame), where the kernel's copy stops; without \
             --no-stack-reads the recorder reads such pages in, and the samples after are \
             copied whole",
            count(stopped, "sample", "samples"),
            if stopped == 1 { "its" } else { "their" }
        )
    })
}

/// The note on samples of which the kernel copied no stack and whose
/// place could not be read in (more than one in a thousand).
fn unread_note(unread: u64, samples: u64) -> Option<String> {
    if samples == 0 || unread * 1000 <= samples {
        return None;
    }
    Some(format!(
        "{} had none of {} stack copied, and the recorder could not read the stack page in \
         for the samples after: the stack pointer lay outside the process's stack mappings \
         (a main thread's frame deeper than its stack had grown, which only the program's \
         own touch grows), or the process could not be read",
        count(unread, "sample", "samples"),
        if unread == 1 { "its" } else { "their" }
    ))
}

/// The processes a note tells of: the three largest of `items` by
/// `size`, each as `show` words it, then how many more of `processes`
/// there were in all. Empty where there are none.
fn largest_three<T>(
    items: &[T],
    processes: usize,
    size: impl Fn(&T) -> u64,
    show: impl Fn(&T) -> String,
) -> Vec<String> {
    let mut largest: Vec<&T> = items.iter().collect();
    largest.sort_by_key(|&item| std::cmp::Reverse(size(item)));
    let mut told: Vec<String> = largest.iter().take(3).map(|&item| show(item)).collect();
    if !told.is_empty() && processes > told.len() {
        told.push(format!("{} more processes", processes - told.len()));
    }
    told
}

/// The note on Java processes whose compiled code keeps no frame
/// pointer, through which stacks were walked by it (`model/java.rs`).
fn java_skipping_note(skipping: &[model::JavaSkipping], processes: usize) -> Option<String> {
    let told = largest_three(
        skipping,
        processes,
        |j| j.stacks,
        |j| {
            format!(
                "{} stack{} in process {} ({})",
                j.stacks,
                if j.stacks == 1 { "" } else { "s" },
                j.pid,
                String::from_utf8_lossy(&j.name)
            )
        },
    );
    if told.is_empty() {
        return None;
    }
    Some(format!(
        "Java's compiled code keeps no frame pointer without -XX:+PreserveFramePointer, and \
         stacks walked out of the JVM's generated code by it may miss compiled methods \
         (every Java thread's is, at its call stub): {}; run java with \
         -XX:+PreserveFramePointer",
        told.join(", ")
    ))
}

/// The note on JIT code that nothing named (no perf map, jitdump file or
/// code registry), with how the runtimes people profile most name theirs
/// (where no file of theirs was read: one that was did not name it).
fn unnamed_jit_note(unnamed: &[model::UnnamedJit], processes: usize) -> Option<String> {
    let told = largest_three(
        unnamed,
        processes,
        |u| u.addresses as u64,
        |u| {
            format!(
                "{} address{} in process {} ({}){}",
                u.addresses,
                if u.addresses == 1 { "" } else { "es" },
                u.pid,
                String::from_utf8_lossy(&u.name),
                if u.files {
                    ", which its perf map and jitdump file do not name"
                } else {
                    ""
                }
            )
        },
    );
    if told.is_empty() {
        return None;
    }
    let without_files = |runtime: &[u8]| unnamed.iter().any(|u| !u.files && u.name == runtime);
    let mut how = Vec::new();
    if without_files(b"node") {
        how.push("node --perf-basic-prof (a perf map) or --perf-prof (a jitdump file)");
    }
    if without_files(b"java") {
        how.push(
            "java -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit, or jcmd PID \
             Compiler.perfmap while it runs",
        );
    }
    if how.is_empty() {
        how.push(
            "a runtime names its code in /tmp/perf-PID.map, a jitdump file, or through \
             codectl() (docs/c-abi-codectl.md)",
        );
    }
    Some(format!(
        "JIT code without a name, shown as one function, [unnamed JIT code] (report \
         --addresses shows each address): {}; {}",
        told.join(", "),
        how.join("; ")
    ))
}

/// The note on stacks that went on past the copy and were read on from
/// their threads' memory, from (read on, changed, unreadable, of those
/// two completed over what was kept of an earlier read).
fn read_on_note(
    (completed, changed, unreadable, from_kept): (u64, u64, u64, u64),
) -> Option<String> {
    if completed + changed + unreadable == 0 {
        return None;
    }
    let changed = if changed > 0 {
        format!(
            "; {} had changed by then",
            count(changed, "other", "others")
        )
    } else {
        String::new()
    };
    let unreadable = if unreadable > 0 {
        format!(
            "; {unreadable} could not be read ({} process had exited, or does not let \
             ichnos read its memory: ptrace access, see kernel.yama.ptrace_scope)",
            if unreadable == 1 { "its" } else { "their" }
        )
    } else {
        String::new()
    };
    let ends = match (changed.is_empty() && unreadable.is_empty(), from_kept) {
        (true, _) => String::new(),
        (false, 0) => "; those end at the copy".to_owned(),
        (false, n) => format!(
            "; of those, {n} {} completed over what an earlier sample of {} thread \
             read, the rest end at the copy or short of their first frame",
            were(n),
            if n == 1 { "its" } else { "their" }
        ),
    };
    Some(format!(
        "{} went on past the copy and {} read on from {} memory{changed}{unreadable}{ends} \
         (--no-stack-reads keeps only the copy)",
        count(completed, "stack", "stacks"),
        were(completed),
        if completed == 1 {
            "its thread's"
        } else {
            "their threads'"
        }
    ))
}

/// The notes a recording ends with: stacks that went past the copy, that
/// the recorder cut short, or that reached the frame limit
/// (`at_frame_limit` samples, at `max_frames`), and records left out.
pub(super) fn closing_notes(
    stack_size: u32,
    lock_limited: bool,
    samples: u64,
    [past_copy, cut_short, oversized]: [u64; 3],
    (at_frame_limit, max_frames): (u64, usize),
) -> Vec<String> {
    let mut notes = Vec::new();
    // Any: a deep recursion's samples are otherwise incomplete stacks
    // with nothing said of why.
    if at_frame_limit > 0 {
        notes.push(format!(
            "{} ({:.1}%) reached the limit of {max_frames} frames and {} cut there: \
             --max-frames N walks deeper (up to {MAX_FRAMES})",
            count(at_frame_limit, "stack", "stacks"),
            100.0 * at_frame_limit as f64 / samples.max(1) as f64,
            were(at_frame_limit)
        ));
    }
    // More than the completeness the defaults aim at: say what helps.
    if samples > 0 && past_copy * 1000 > samples {
        let share = 100.0 * past_copy as f64 / samples as f64;
        notes.push(if stack_size < MAX_STACK_SIZE {
            format!(
                "{share:.1}% of stacks went on past the {} KiB of stack copied per sample: \
                 --stack-size {MAX_STACK_SIZE} copies the most the kernel allows{}",
                stack_size >> 10,
                if lock_limited {
                    // The default where rings are held back: the larger
                    // copy halves the samples they hold.
                    " (in rings the kernel's limit on locked memory holds back, where it \
                     leaves fewer samples a ring: see kernel.perf_event_mlock_kb)"
                } else {
                    ""
                }
            )
        } else {
            format!(
                "{share:.1}% of stacks went on past the stack copied per sample (the kernel \
                 copies at most {MAX_STACK_SIZE} bytes, and stops at a stack page never touched)"
            )
        });
    }
    if samples > 0 && cut_short * 1000 > samples {
        notes.push(format!(
            "{} reached above where {} earlier stacks ended and {} cut short ({} \
             stacks are now kept whole)",
            count(cut_short, "stack", "stacks"),
            if cut_short == 1 {
                "its thread's"
            } else {
                "their threads'"
            },
            were(cut_short),
            if cut_short == 1 {
                "that thread's"
            } else {
                "those threads'"
            }
        ));
    }
    if oversized > 0 {
        notes.push(format!(
            "{} larger than {} KiB {} left out",
            count(oversized, "record", "records"),
            output::MAX_RECORD >> 10,
            were(oversized)
        ));
    }
    notes
}

/// `n` and the noun for that many.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The verb for `n` of them.
fn were(n: u64) -> &'static str {
    if n == 1 {
        "was"
    } else {
        "were"
    }
}

/// The notes on off-CPU time: intervals and samples left out.
fn off_cpu_notes(off: &off_cpu::OffCpu) -> Vec<String> {
    let mut notes = Vec::new();
    if off.unended > 0 {
        notes.push(format!(
            "{} off CPU {} left out: {} back {} lost",
            count(off.unended, "interval", "intervals"),
            were(off.unended),
            if off.unended == 1 {
                "its thread's switch"
            } else {
                "their threads' switches"
            },
            were(off.unended)
        ));
    }
    if off.unsampled > 0 {
        let one = off.unsampled == 1;
        notes.push(format!(
            "{} off CPU lost {}: {} time is counted, where {} waited is not known",
            count(off.unsampled, "interval", "intervals"),
            if one {
                "its switch sample"
            } else {
                "their switch samples"
            },
            if one { "its" } else { "their" },
            if one { "its thread" } else { "their threads" }
        ));
    }
    if off.unseen_leavings > 0 {
        notes.push(format!(
            "{} a thread came back onto a CPU it was not seen leaving (its switch \
             was lost): that time off the CPU is not counted",
            if off.unseen_leavings == 1 {
                "once".to_owned()
            } else {
                count(off.unseen_leavings, "time", "times")
            }
        ));
    }
    if off.kernel_threads > 0 {
        notes.push(format!(
            "{} taken in the kernel with no user code to show (kernel threads, programs \
             between exec and their first instruction, threads past their exit that the \
             kernel had let go of, or whose process had ended, without kernel frames to show) \
             {} left out",
            count(off.kernel_threads, "sample", "samples"),
            were(off.kernel_threads)
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::super::model::UnnamedJit;
    use super::unnamed_jit_note;

    #[test]
    fn unnamed_jit_code_is_told_of_with_the_runtimes_own_switch() {
        let jit = |pid, name: &[u8], addresses, files| UnnamedJit {
            pid,
            name: name.to_vec(),
            addresses,
            files,
        };
        assert_eq!(unnamed_jit_note(&[], 0), None);
        let node = unnamed_jit_note(&[jit(7, b"node", 61, false)], 1).unwrap();
        assert!(node.contains("61 addresses in process 7 (node)"), "{node}");
        assert!(node.contains("--perf-basic-prof"), "{node}");
        assert!(!node.contains("DumpPerfMapAtExit"), "{node}");
        let java = unnamed_jit_note(&[jit(8, b"java", 1, false)], 1).unwrap();
        assert!(java.contains("1 address in process 8 (java)"), "{java}");
        assert!(java.contains("-XX:+DumpPerfMapAtExit"), "{java}");
        // A runtime whose perf map was read is not told to write one.
        let mapped = unnamed_jit_note(&[jit(9, b"node", 3, true)], 1).unwrap();
        assert!(
            mapped.contains("its perf map and jitdump file do not name"),
            "{mapped}"
        );
        assert!(!mapped.contains("--perf-basic-prof"), "{mapped}");
        // The largest first, and how many more there were in all.
        let many: Vec<UnnamedJit> = (0..5)
            .map(|i| jit(i, b"jit", i as usize + 1, false))
            .collect();
        let many = unnamed_jit_note(&many, 20).unwrap();
        assert!(
            many.starts_with(
                "JIT code without a name, shown as one function, [unnamed JIT code] \
                 (report --addresses shows each address): 5 addresses in process 4"
            ),
            "{many}"
        );
        assert!(many.contains("17 more processes"), "{many}");
        assert!(many.contains("/tmp/perf-PID.map"), "{many}");
    }
}
