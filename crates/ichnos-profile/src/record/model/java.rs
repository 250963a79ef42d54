//! Java's compiled code and the frame pointer.
//!
//! HotSpot's compiled methods keep no frame pointer unless the JVM runs
//! with `-XX:+PreserveFramePointer` (to them rbp is one more register),
//! and no table describes their frames to a profiler: a perf map names
//! them (`-XX:+DumpPerfMapAtExit`, `jcmd PID Compiler.perfmap`), nothing
//! unwinds them. A walk out of such code along the frame-pointer chain
//! goes on from whichever frame last kept rbp (the interpreter's, a
//! stub's, the VM's) and skips the compiled callers between: the stack
//! still reaches the thread's start, complete by every count, with frames
//! missing. perf's frame-pointer and DWARF modes fare the same.
//!
//! Which stacks skipped frames cannot be told, nor, without names, which
//! of the JVM's generated code is a compiled method (the interpreter and
//! the stubs live in the same code cache, and keep rbp). The recorder
//! counts the stacks of a Java process walked out of any of its generated
//! code by the frame pointer (every Java thread's stack is, at its call
//! stub: an upper bound) and, where the JVM may compile (no `-Xint`) and
//! was not told to keep the frame pointer, says so at the end. It reads
//! the options much as HotSpot and the `java` launcher do (`launcher.rs`,
//! checked against the launcher and the JVM of the JDK installed).

mod launcher;

/// What a process's stacks walked out of JIT code by the frame pointer
/// say of Java.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct JavaFrames {
    /// The process maps `libjvm.so`: it runs HotSpot.
    jvm: bool,
    /// Stacks walked out of JIT code by the frame pointer, while it did.
    walked: u64,
    /// Whether its compiled code keeps no frame pointer, by its options
    /// (`None` until they could be read).
    compiled_without: Option<bool>,
    /// Times its options could not be read (another user's process:
    /// given up after [`MAX_TRIES`]).
    tries: u8,
}

/// Reads of a process's options tried at most.
const MAX_TRIES: u8 = 4;

impl JavaFrames {
    /// Whether the process maps `libjvm.so`.
    pub fn jvm(&self) -> bool {
        self.jvm
    }

    /// The process mapped the file at `path`.
    pub fn mapped(&mut self, path: &[u8]) {
        self.jvm |= path.ends_with(b"/libjvm.so");
    }

    /// A stack of process `pid` (not running here if `offline`: then
    /// nothing is read of it) was walked out of JIT code by the frame
    /// pointer.
    pub fn walked_out_of_jit(&mut self, pid: u32, offline: bool) {
        if !self.jvm || offline {
            return;
        }
        self.walked += 1;
        if self.compiled_without.is_none() && self.tries < MAX_TRIES {
            // Read while the process runs; tried again at its next such
            // stack if it cannot be, a few times.
            self.tries += 1;
            self.compiled_without = options_of(pid).and_then(|(cmdline, environ)| {
                let read = |path: &[u8], most: u64| argfile_of(pid, path, most);
                let flags = launcher::jvm_flags(&cmdline, &environ, &read)?;
                Some(flags.may_compile && !flags.keeps_frame_pointer)
            });
        }
    }

    /// The stacks that may have skipped compiled callers.
    pub fn may_skip(&self) -> u64 {
        if self.compiled_without == Some(true) {
            self.walked
        } else {
            0
        }
    }
}

/// Process `pid`'s command line and environment, as `/proc` shows them.
fn options_of(pid: u32) -> Option<(Vec<u8>, Vec<u8>)> {
    let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).ok();
    Some((read("cmdline")?, read("environ")?))
}

/// Filesystems whose files are not read as argument files however they
/// look: `/proc` and `/sys` (a read of `/proc/kmsg` takes the kernel's
/// messages from whoever waits for them).
const PSEUDO_FILESYSTEMS: [i64; 2] = [0x9fa0, 0x6265_6572];

/// The argument file at `path` as process `pid`'s launcher was given it
/// (a relative one in the process's working directory, an absolute one
/// under its root: a container's files are its own), if it is a regular
/// file of at most `most` bytes on a real filesystem. Checked before it
/// is opened and once open; opened without a controlling terminal and
/// without blocking on a FIFO: the path is the process's to choose.
fn argfile_of(pid: u32, path: &[u8], most: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::ffi::OsStr::from_bytes(path);
    let path = match path.as_bytes().strip_prefix(b"/") {
        Some(inside) => std::path::PathBuf::from(format!("/proc/{pid}/root"))
            .join(std::ffi::OsStr::from_bytes(inside)),
        None => std::path::PathBuf::from(format!("/proc/{pid}/cwd")).join(path),
    };
    let regular = |m: std::fs::Metadata| m.is_file() && m.len() <= most;
    if !regular(std::fs::metadata(&path).ok()?) {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !regular(file.metadata().ok()?) {
        return None;
    }
    // SAFETY: statfs is plain data; zeroed is a valid value to fill.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and a valid out-pointer.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &raw mut fs) } != 0
        || PSEUDO_FILESYSTEMS.contains(&(fs.f_type as i64))
    {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(most + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= most).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::launcher::MAX_ARGFILE_BYTES;
    use super::*;

    /// A child process, killed however the test ends.
    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A process's argument files: relative ones in its working
    /// directory, absolute ones under its root; only regular files of at
    /// most the bytes left, not on /proc (a FIFO must not block the
    /// recorder, nor /proc/kmsg lose the kernel's messages to it).
    #[test]
    fn a_process_argument_file_is_read_only_where_it_is_a_whole_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "-XX:+PreserveFramePointer").unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let child = Child(
            std::process::Command::new("sleep")
                .arg("30")
                .current_dir(dir.path())
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id();
        let keep = Some(&b"-XX:+PreserveFramePointer"[..]);
        assert_eq!(argfile_of(pid, b"keep", 100).as_deref(), keep);
        let absolute = dir.path().join("keep");
        let absolute = absolute.to_str().unwrap().as_bytes();
        assert_eq!(argfile_of(pid, absolute, 100).as_deref(), keep);
        // 25 bytes: not within 24.
        assert_eq!(argfile_of(pid, b"keep", 25).as_deref(), keep);
        assert_eq!(argfile_of(pid, b"keep", 24), None);
        assert_eq!(argfile_of(pid, b"fifo", 100), None);
        assert_eq!(argfile_of(pid, b"missing", 100), None);
        assert_eq!(
            argfile_of(pid, b"/proc/self/status", MAX_ARGFILE_BYTES),
            None
        );
    }

    #[test]
    fn only_a_process_that_maps_libjvm_is_counted_and_only_where_it_runs() {
        let libjvm = b"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
        let mut node = JavaFrames::default();
        node.mapped(b"/usr/bin/node");
        node.walked_out_of_jit(std::process::id(), false);
        assert_eq!((node.walked, node.may_skip()), (0, 0));
        // This test's process, taken for a JVM: its options are read once
        // (what they say depends on the environment it runs in), and
        // both stacks are counted.
        let mut here = JavaFrames::default();
        here.mapped(libjvm);
        here.walked_out_of_jit(std::process::id(), false);
        here.walked_out_of_jit(std::process::id(), false);
        assert_eq!((here.walked, here.tries), (2, 1));
        assert!(here.compiled_without.is_some());
        // Not running here: nothing read, nothing said.
        let mut offline = JavaFrames::default();
        offline.mapped(libjvm);
        offline.walked_out_of_jit(std::process::id(), true);
        assert_eq!(offline.may_skip(), 0);
        // A process whose options cannot be read is tried again later.
        let mut gone = JavaFrames::default();
        gone.mapped(libjvm);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        gone.walked_out_of_jit(pid, false);
        assert_eq!((gone.walked, gone.compiled_without), (1, None));
        // A few times.
        for _ in 0..10 {
            gone.walked_out_of_jit(pid, false);
        }
        assert_eq!(gone.tries, MAX_TRIES);
    }
}
