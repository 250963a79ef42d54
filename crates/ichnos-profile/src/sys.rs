//! The system calls of running and watching a target, fenced: fork and
//! exec with a start signal, waiting for it, epoll, pidfds, and signals.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A pipe with both ends close-on-exec: (read, write).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both are new descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The pipes between a recorder and the child it holds: the child reads
/// its start signal from `go_read` and writes a failed exec's errno to
/// `report_write`; the parent keeps the other ends.
pub(crate) struct LaunchPipes<'a> {
    pub go_read: &'a OwnedFd,
    pub go_write: &'a OwnedFd,
    pub report_read: &'a OwnedFd,
    pub report_write: &'a OwnedFd,
}

/// Forks a child that waits until a byte arrives on `go_read` (or every
/// writer is gone: then it exits with 127), then executes `path` with
/// `argv` and `envp`. If the exec fails, the child writes its errno to
/// `report_write` and exits with 127. The child closes the parent's ends
/// first (so that the parent closing `go_write` is seen), and starts with
/// the default signal mask and the default handling of SIGINT, SIGTERM,
/// SIGPIPE and SIGCHLD (SIGINT and SIGTERM ignored where ichnos started
/// with them ignored).
///
/// Between the fork and the exec the child makes only async-signal-safe
/// calls on memory prepared before the fork, so the parent may have other
/// threads.
pub(crate) fn fork_exec_on_signal(
    path: &CString,
    argv: &[CString],
    envp: &[CString],
    pipes: &LaunchPipes<'_>,
) -> io::Result<libc::pid_t> {
    // Pointer arrays made before the fork: the child must not allocate.
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    let fds = ChildFds {
        go: pipes.go_read.as_raw_fd(),
        report: pipes.report_write.as_raw_fd(),
        close: [pipes.go_write.as_raw_fd(), pipes.report_read.as_raw_fd()],
    };
    // SAFETY: fork has no preconditions here; the child branch below makes
    // only async-signal-safe calls on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: the child: async-signal-safe calls only, on descriptors
        // and buffers that stay valid until exec or _exit.
        unsafe { child_after_fork(path, &argv_ptrs, &envp_ptrs, fds) }
    }
    Ok(pid)
}

/// The child's descriptors: its ends of the pipes, and the parent's to
/// close.
#[derive(Clone, Copy)]
struct ChildFds {
    go: RawFd,
    report: RawFd,
    close: [RawFd; 2],
}

/// The child's side of [`fork_exec_on_signal`]; never returns.
///
/// # Safety
/// Called only in the child of a fork, with pointers to NUL-terminated
/// arrays of C strings.
unsafe fn child_after_fork(
    path: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: ChildFds,
) -> ! {
    // SAFETY: all calls below are async-signal-safe and their arguments
    // are valid for the calls.
    unsafe {
        for fd in fds.close {
            libc::close(fd);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const set, std::ptr::null_mut());
        // The default action for what ichnos catches (or Rust ignores,
        // SIGPIPE); SIGINT and SIGTERM stay ignored where ichnos was
        // started with them ignored, as the command alone would be.
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGPIPE, libc::SIGCHLD] {
            let action = if crate::stop::ignored_at_start(sig) {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            };
            libc::signal(sig, action);
        }
        let mut byte = 0u8;
        loop {
            let n = libc::read(fds.go, (&raw mut byte).cast(), 1);
            if n == 1 {
                break;
            }
            if n == 0 || *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        let errno = *libc::__errno_location();
        let bytes = errno.to_le_bytes();
        libc::write(fds.report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// Writes all of `bytes` to `fd`.
pub(crate) fn write_all(fd: &OwnedFd, bytes: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writing from a live buffer to an open descriptor.
        let n = unsafe {
            libc::write(
                fd.as_raw_fd(),
                bytes[done..].as_ptr().cast(),
                bytes.len() - done,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n.cast_unsigned();
    }
    Ok(())
}

/// Reads until `buf` is full or the writers are gone; the bytes read.
pub(crate) fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: reading into a live buffer from an open descriptor.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[done..].as_mut_ptr().cast(),
                buf.len() - done,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        done += n.cast_unsigned();
    }
    Ok(done)
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// `waitpid(pid, WNOHANG)`: the child's status if it ended.
pub(crate) fn try_wait(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-parameter.
    let r = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r == 0 {
        return Ok(None);
    }
    Ok(Some(if libc::WIFSIGNALED(status) {
        ExitStatus::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    }))
}

/// Sends `sig` to process `pid`.
pub(crate) fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill has no memory preconditions.
    check(unsafe { libc::kill(pid, sig) }).map(|_| ())
}

/// A pidfd for `pid`: readable when it exits (Linux 5.3).
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// An epoll instance.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes flags only.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Watches `fd` for input, reporting `token`.
    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `event` is a valid epoll_event for the call.
        check(unsafe {
            libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut event)
        })
        .map(|_| ())
    }

    /// Stops watching `fd`.
    pub(crate) fn remove(&self, fd: RawFd) -> io::Result<()> {
        // SAFETY: EPOLL_CTL_DEL ignores the event argument.
        check(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        })
        .map(|_| ())
    }

    /// Waits up to `timeout_ms` for any watched descriptor; the tokens of
    /// those ready go into `ready`, with whether the descriptor hung up
    /// (a perf event whose tasks are all gone: it stays ready for ever).
    pub(crate) fn wait(&self, timeout_ms: i32, ready: &mut Vec<(u64, bool)>) -> io::Result<()> {
        const MAX_EVENTS: i32 = 64;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS as usize];
        // SAFETY: `events` has room for the 64 entries the call may fill.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                MAX_EVENTS,
                timeout_ms,
            )
        };
        ready.clear();
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        let hung_up = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
        ready.extend(
            events[..n.cast_unsigned() as usize]
                .iter()
                .map(|e| (e.u64, e.events & hung_up != 0)),
        );
        Ok(())
    }
}

/// The machine's node name and kernel release (`uname`).
#[must_use]
pub fn uname() -> (String, String) {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid out-parameter.
    if unsafe { libc::uname(&raw mut u) } != 0 {
        return (String::new(), String::new());
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c.cast_unsigned())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.nodename), field(&u.release))
}

/// Whether process `pid` is alive: it exists and one of its threads runs
/// on (is neither a zombie nor exiting).
#[must_use]
pub fn alive(pid: u32) -> bool {
    // Any of its threads: a process whose first thread has exited (its
    // `pthread_exit`) shows as a zombie while the others run on.
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .any(|tid| task_alive(pid, tid))
}

/// Whether thread `tid` of process `pid` exists and runs on: it is
/// neither a zombie nor exiting (`PF_EXITING`, set as its exit begins,
/// before it lets go of its memory and descriptors).
pub(crate) fn task_alive(pid: u32, tid: u32) -> bool {
    /// `task_struct.flags`: the task is exiting.
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) else {
        return false;
    };
    // `TID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS ...`; the name
    // may hold parentheses.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first().copied().unwrap_or("X");
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    !matches!(state, "Z" | "X" | "x") && flags & PF_EXITING == 0
}

/// Our effective user id.
#[must_use]
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Whether `path` is executable by us (`access(X_OK)`).
pub(crate) fn executable(path: &CString) -> bool {
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(path.as_ptr(), libc::X_OK) == 0 }
}

/// Raises the soft limit on open files to the hard limit (one event per
/// thread and CPU adds up when attaching to many threads).
pub(crate) fn raise_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-parameter, then a valid input.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0
            && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit);
        }
    }
}
