//! Threads: their names as the recording gives them, their exits, and
//! samples of threads the kernel takes after their exit record.

use ichnos_data::Record;

use super::{Output, Spaces};

/// How long after a thread's exit a sample of its number is taken for
/// one past its exit (those come within milliseconds); a later one is of
/// a new thread of that number whose fork record was lost.
const EXITED_KEPT_NS: u64 = 1_000_000_000;

/// Exits kept before those older than [`EXITED_KEPT_NS`] are swept.
pub(super) const MANY_EXITED: usize = 4096;

impl Spaces {
    /// Thread `tid` of `pid` is now called `name`.
    pub fn name_thread(&mut self, pid: u32, tid: u32, name: &[u8], time: u64, out: &mut Output) {
        if self
            .threads
            .get(&tid)
            .is_some_and(|(p, n)| *p == pid && n == name)
        {
            return;
        }
        self.threads.insert(tid, (pid, name.to_vec()));
        self.exited.remove(&tid);
        if tid == pid {
            if let Some(space) = self.by_pid.get_mut(&pid) {
                space.name = name.to_vec();
            }
        }
        out.meta(&Record::Thread {
            pid: u64::from(pid),
            tid: u64::from(tid),
            time: out.rel(time),
            name,
        });
    }

    /// Makes sure thread `tid` of `pid` has a name in the recording.
    pub fn know_thread(&mut self, pid: u32, tid: u32, time: u64, out: &mut Output) {
        if self.threads.get(&tid).is_some_and(|(p, _)| *p == pid) {
            return;
        }
        let name = self
            .comm(pid, tid)
            .or_else(|| self.threads.get(&pid).map(|(_, n)| n.clone()))
            .unwrap_or_default();
        self.name_thread(pid, tid, &name, time, out);
    }

    /// Makes sure a sample of thread `tid` of `pid` taken at `time` has
    /// an address space to go to, and its thread a name; `false` where
    /// it has none: a thread sampled after its exit record whose process
    /// has ended, or one the kernel no longer numbers. A thread sampled
    /// after its exit record in a process that runs on keeps the name it
    /// had: named afresh, it would be named from `/proc` (gone by then)
    /// or after its process, and a leader that exited would take its
    /// process's name along (the last name of a thread is the one a
    /// report shows).
    pub fn sampled(&mut self, pid: u32, tid: u32, time: u64, out: &mut Output) -> bool {
        // -1: the kernel's number for a task it has let go of, later
        // still in its exit.
        if pid == u32::MAX || tid == u32::MAX {
            return false;
        }
        if self.exited_lately(pid, tid, time) {
            return self.by_pid.contains_key(&pid);
        }
        self.get_or_synthesize(pid, time, out);
        self.know_thread(pid, tid, time, out);
        true
    }

    /// A thread ended (the process, if `tid == pid`).
    pub fn exit(&mut self, pid: u32, tid: u32, time: u64, out: &mut Output) {
        out.meta(&Record::Exit {
            pid: u64::from(pid),
            tid: u64::from(tid),
            time: out.rel(time),
            flags: 0,
        });
        self.threads.remove(&tid);
        self.forget_exits_before(time.saturating_sub(EXITED_KEPT_NS));
        self.exited.insert(tid, (pid, time));
        // The process ends with its last thread: a leader that exits while
        // others run leaves them its address space (exit_group's threads
        // often end after their leader).
        let others = self.threads.values().any(|(p, _)| *p == pid);
        let Some(space) = self.by_pid.get_mut(&pid) else {
            return;
        };
        if tid == pid && others {
            space.leader_exited = true;
        } else if !others && (tid == pid || space.leader_exited) {
            if let Some(mut space) = self.by_pid.remove(&pid) {
                self.ended_lately_at.insert(pid, (space.asid, time));
                self.ended(&mut space, time, out);
            }
        }
    }

    /// The last address space of process `pid` if it ended at most
    /// [`EXITED_KEPT_NS`] before `time`.
    pub fn ended_lately(&self, pid: u32, time: u64) -> Option<u64> {
        let &(asid, when) = self.ended_lately_at.get(&pid)?;
        (time.saturating_sub(when) <= EXITED_KEPT_NS).then_some(asid)
    }

    /// Whether thread `tid` of `pid` exited at most [`EXITED_KEPT_NS`]
    /// before `time` (a later sample is of a new thread of that number
    /// whose fork record was lost).
    pub(super) fn exited_lately(&self, pid: u32, tid: u32, time: u64) -> bool {
        self.exited
            .get(&tid)
            .is_some_and(|&(p, when)| p == pid && time.saturating_sub(when) <= EXITED_KEPT_NS)
    }

    /// Forgets the exits before `time` once many are kept (samples of a
    /// thread past its exit come within milliseconds of it); the next
    /// time at twice as many as are left, so that a machine where more
    /// threads than that exit in a second costs no sweep per exit.
    fn forget_exits_before(&mut self, time: u64) {
        if self.exited.len() >= self.forget_at {
            self.exited.retain(|_, (_, when)| *when >= time);
            self.ended_lately_at.retain(|_, (_, when)| *when >= time);
            self.forget_at = (2 * self.exited.len()).max(MANY_EXITED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Spaces;
    use ichnos_code::elf::RowChoice;

    /// A CPU-wide event samples threads in the kernel's `do_exit` after
    /// their exit records. Such a sample of a worker whose process runs
    /// on goes to that process, and of the last thread of one that ended
    /// to none; neither renames a thread or the process (a report's
    /// `--comm` would then lose the process's other threads).
    #[test]
    fn samples_past_a_threads_exit_keep_the_names() {
        // A process that is gone: /proc knows nothing of it.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.data");
        let file = std::fs::File::create(&path).unwrap();
        let (mut out, writer) = crate::record::output::start(file, 0).unwrap();
        let mut spaces = Spaces::new(RowChoice::EhFrame);
        spaces.begin(pid, b"machine_work", 1, &mut out);
        spaces.name_thread(pid, pid, b"machine_work", 1, &mut out);
        spaces.name_thread(pid, pid + 1, b"worker-a", 1, &mut out);
        spaces.name_thread(pid, pid + 2, b"worker-b", 1, &mut out);
        spaces.exit(pid, pid + 1, 2, &mut out);
        assert!(spaces.sampled(pid, pid + 1, 3, &mut out), "runs on");
        spaces.exit(pid, pid + 2, 4, &mut out);
        spaces.exit(pid, pid, 5, &mut out);
        assert!(!spaces.by_pid.contains_key(&pid), "ended");
        assert!(!spaces.sampled(pid, pid, 6, &mut out), "ended");
        assert!(!spaces.by_pid.contains_key(&pid), "not made again");
        assert!(!spaces.sampled(u32::MAX, u32::MAX, 6, &mut out));
        assert!(!spaces.by_pid.contains_key(&u32::MAX));
        // A new thread of the same number, of a process that runs, is
        // named as any.
        spaces.begin(pid + 5, b"other", 7, &mut out);
        spaces.name_thread(pid + 5, pid + 1, b"reused", 7, &mut out);
        assert!(spaces.sampled(pid + 5, pid + 1, 8, &mut out));
        crate::record::close(out, writer, 0).unwrap();
        let profile = crate::report::Profile::read(std::fs::File::open(&path).unwrap()).unwrap();
        let name = |tid| {
            let (thread, process) = profile.thread_name(pid, tid);
            (
                thread.map(ToString::to_string),
                process.map(ToString::to_string),
            )
        };
        let process = Some("machine_work".to_owned());
        assert_eq!(name(pid + 1), (Some("worker-a".into()), process.clone()));
        assert_eq!(name(pid + 2), (Some("worker-b".into()), process.clone()));
        assert_eq!(name(pid), (process.clone(), process));
    }
}
