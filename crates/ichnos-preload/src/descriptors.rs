//! The runtime's own descriptors, kept out of the program's way.
//!
//! A descriptor takes the lowest free number: in a program started with a
//! standard stream closed (a daemon's start, `exec 2>&-`), the runtime's
//! socket or its saver's pipe would be 0, 1 or 2, and the program's
//! `dup2` of `/dev/null` over it would close the runtime's line to the
//! recorder (its trace then lost), or have the saver's wake-up byte
//! written into the program's file. Numbers a program picks for itself
//! (a shell's `exec 3>file`, its saved descriptors from 10 up, bash's
//! 255) are low too. So the runtime's descriptors are moved to 256 or
//! above, where a limit allows, else to 3 or above.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Where the runtime's descriptors go, where the limit allows.
const HIGH: i32 = 256;

/// `fd`, moved out of the program's way (a new number, close-on-exec, the
/// old one closed); as it is where it cannot be moved.
pub(crate) fn out_of_the_way(fd: OwnedFd) -> OwnedFd {
    match moved(fd.as_raw_fd()) {
        // SAFETY: a descriptor just made by F_DUPFD_CLOEXEC, ours alone;
        // the old one closes as `fd` drops.
        Some(new) => unsafe { OwnedFd::from_raw_fd(new) },
        None => fd,
    }
}

/// [`out_of_the_way`] for a raw descriptor of the runtime's own: the new
/// number (the old one closed), or `fd` where it cannot be moved.
pub(crate) fn raw_out_of_the_way(fd: i32) -> i32 {
    match moved(fd) {
        Some(new) => {
            // SAFETY: the runtime's own descriptor, replaced by `new`.
            unsafe { libc::close(fd) };
            new
        }
        None => fd,
    }
}

/// A copy of `fd` at `HIGH` or above, else at 3 or above (close-on-exec).
fn moved(fd: i32) -> Option<i32> {
    if fd >= HIGH {
        return None;
    }
    for lowest in [HIGH, 3] {
        if fd >= lowest {
            return None;
        }
        // SAFETY: fcntl of a descriptor the caller owns.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) };
        if new >= 0 {
            return Some(new);
        }
    }
    None
}
