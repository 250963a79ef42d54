//! Processes and descriptors: the few system calls the recorder makes
//! directly, fenced here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use ichnos_profile::ExitStatus;

/// Makes this process the reaper of its orphaned descendants, so that a
/// traced program's children are waited for after it exits.
pub(crate) fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Raises this process's soft limit of open descriptors to its hard
/// limit (nothing changes where that fails).
pub(crate) fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0
        && limit.rlim_cur < limit.rlim_max
    {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: a valid pointer to the limit to set.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) };
    }
}

/// Every child that has ended, with how.
pub(crate) fn reap_children() -> Vec<(u32, ExitStatus)> {
    let mut out = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &raw mut status, libc::WNOHANG) };
        if pid <= 0 {
            return out;
        }
        let how = if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        };
        out.push((pid.cast_unsigned(), how));
    }
}

/// Whether any child is left (running, or ended and not yet reaped).
pub(crate) fn has_children() -> bool {
    // SAFETY: waitid with WNOWAIT only looks.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer; P_ALL ignores the id.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &raw mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    r == 0
}

/// Sends `signal` to `pid`.
pub(crate) fn kill(pid: u32, signal: i32) {
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid.cast_signed(), signal) };
}

/// A pidfd of process `pid`: readable once the process has ended.
/// Fails where there is no such process (`ESRCH`) or the kernel has no
/// pidfds (before Linux 5.3).
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just made, and is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether the process of `pidfd` has ended.
pub(crate) fn has_ended(pidfd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours, no wait.
    let n = unsafe { libc::poll(&raw mut pfd, 1, 0) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// Waits until one of `fds` is readable (or hung up), or `timeout`.
pub(crate) fn wait_readable(fds: impl Iterator<Item = RawFd>, timeout: Duration) {
    let mut pfds: Vec<libc::pollfd> = fds
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: pfds is a valid array of its length.
    unsafe {
        libc::poll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            timeout.as_millis() as libc::c_int,
        )
    };
}
