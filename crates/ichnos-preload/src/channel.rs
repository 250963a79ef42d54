//! The process's line to the recorder: a shared region-table buffer
//! (`ichnos-buf`'s topa, in a memfd) that frames are written into, and a
//! Unix socket that carried the memfd to the recorder, carries the
//! wake-ups a sleeping recorder is sent ([`wake_recorder`]), and tells,
//! by closing, that the recorder is gone.
//!
//! One channel per process, behind a lock ([`ChannelLock`]): threads take
//! it only to hand over a full buffer (every few thousand calls). A flush
//! never runs inside a handler that interrupted a flush on the same
//! thread (the fill buffer sees to that); the flight recorder's signal
//! handlers may interrupt a thread holding the lock, and give their
//! frames up at once where they interrupted the holder, after a bounded
//! wait where the holder is another thread, rather than deadlock. After `fork` the
//! child drops the parent's channel without touching it (it may be locked
//! by a thread that does not exist in the child) and opens its own.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ichnos_buf::topa::{AllocFlags, Config as TopaConfig, Mode, Producer, RecordError, TopaBuffer};
use ichnos_data::wire::{self, FrameHeader, Hello};

use crate::channel_lock::ChannelLock;

/// How long a thread waits for the recorder to make room before its
/// buffer counts as lost.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// Threads whose losses are remembered until their next frame.
const LOST_SLOTS: usize = 64;

/// An open channel.
pub(crate) struct Channel {
    socket: OwnedFd,
    /// The recorder's listening socket, asked whether the recorder is
    /// there where the program closed `socket` ([`recorder_is_gone`]).
    listener: libc::sockaddr_un,
    producer: Producer,
    /// Records of frames that could not be written, by thread, to be
    /// reported in the thread's next frame.
    lost: [(u32, u64); LOST_SLOTS],
    /// Records lost by threads beyond the slots, reported as the main
    /// thread's at the end.
    lost_elsewhere: u64,
    /// The recorder is gone: nothing more is sent.
    dead: bool,
}

static LOCK: ChannelLock = ChannelLock::new();
static CHANNEL: AtomicPtr<Channel> = AtomicPtr::new(std::ptr::null_mut());

/// Why a channel could not be opened.
fn os(what: &str) -> impl FnOnce(io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl Channel {
    /// Opens a channel to the recorder at `socket` with a shared buffer
    /// of `shared` bytes.
    pub(crate) fn open(socket: &OsStr, shared: usize, hello: Hello) -> Result<Channel, String> {
        let region = (shared / 4).next_multiple_of(4096) as u64;
        let buffer = TopaBuffer::with_regions(
            &[region; 4],
            AllocFlags::default(),
            TopaConfig {
                mode: Mode::BlockOnFull {
                    timeout: BLOCK_TIMEOUT,
                },
                // The recorder sleeping is woken every two regions written
                // (at each region it woke 70 times a run of 10 million
                // calls, where it finds them itself at its next look, and
                // the program was 1.5% slower), and when a thread waits
                // for room.
                wakeup_watermark: 2 * region,
                ..TopaConfig::default()
            },
        )
        .map_err(|e| {
            format!(
                "cannot create the shared trace buffer ({} KiB): {e}",
                shared >> 10
            )
        })?;
        let mut producer = buffer
            .producer()
            .map_err(|e| format!("shared trace buffer: {e}"))?;
        let listener = socket_address(socket).map_err(os("cannot reach the recorder"))?;
        let socket = connect(&listener).map_err(os("cannot reach the recorder"))?;
        send_with_fd(&socket, &hello.encode(), buffer.fd().as_raw_fd())
            .map_err(os("cannot hand the trace buffer to the recorder"))?;
        wake_through(&socket);
        producer.set_wakeup_hook(wake_recorder);
        Ok(Channel {
            socket,
            listener,
            producer,
            lost: [(0, 0); LOST_SLOTS],
            lost_elsewhere: 0,
            dead: false,
        })
    }

    /// Makes this the process's channel (the one before is leaked: after
    /// a fork it is the parent's).
    pub(crate) fn install(self) {
        let new = Box::into_raw(Box::new(self));
        CHANNEL.store(new, Ordering::Release);
    }

    /// Forgets the process's channel without touching it, and unlocks: in
    /// a child after `fork`.
    pub(crate) fn forget_after_fork() {
        let parents = CHANNEL.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !parents.is_null() {
            // The parent's connection is the parent's: the child's copy
            // of its socket would keep it open, and the recorder would
            // see the parent end only when the child does. (The channel
            // itself stays leaked: its buffer is the parent's.)
            // SAFETY: the channel installed before the fork, never freed.
            let fd = unsafe { (*parents).socket.as_raw_fd() };
            // Only where the number is still the socket: the program may
            // have closed it and opened a file of its own under it.
            if ours(fd) {
                // SAFETY: the socket is closed here once and never used
                // again.
                unsafe { libc::close(fd) };
            }
        }
        WAKE_SOCKET.store(-1, Ordering::Relaxed);
        forget_unsent();
        LOCK.reset();
    }

    /// Whether the calling thread holds the channel: a signal handler
    /// that interrupted a hand-over, for which nothing can be sent until
    /// the interrupted code goes on. Async-signal-safe.
    pub(crate) fn held_here() -> bool {
        LOCK.held_here()
    }

    /// Reports what threads lost and have not reported yet (a thread
    /// whose last frame was lost has no next one): an empty frame each,
    /// which carries the count; what threads beyond the slots lost goes
    /// as the main thread's. At the process's end.
    pub(crate) fn report_losses() {
        let pending = with_channel(|c| {
            let tids: Vec<u32> = c
                .lost
                .iter()
                .filter(|&&(tid, n)| tid != 0 && n > 0)
                .map(|&(tid, _)| tid)
                .collect();
            (tids, std::mem::take(&mut c.lost_elsewhere))
        });
        let empty = |tid: u32, lost: u64| FrameHeader {
            tid,
            flags: 0,
            lost,
            len: 0,
            ticks: crate::clock::ticks(),
        };
        let (tids, elsewhere) = match pending {
            Ok(pending) => pending,
            Err(Refused::Lock) => {
                // Held for good: what was given up at the lock goes on
                // the socket, the one way left to the recorder.
                take_unsent_each(|tid, lost| send_loss_on_socket(&empty(tid, lost)));
                return;
            }
            Err(Refused::NoChannel) => return,
        };
        for tid in tids {
            Channel::send(empty(tid, 0), &[]);
        }
        if elsewhere > 0 {
            // SAFETY: getpid has no preconditions.
            let pid = unsafe { libc::getpid() }.cast_unsigned();
            Channel::send(empty(pid, elsewhere), &[]);
        }
    }

    /// Sends one frame: `header` (its `lost` raised by what this thread
    /// lost before) and the events. False if the frame was lost (and
    /// counted for the thread's next frame), or there is no channel.
    pub(crate) fn send(mut header: FrameHeader, events: &[u8]) -> bool {
        // A maps or names frame holds no events: lost, it loses none.
        let records =
            if header.flags & (wire::FRAME_MAPS | wire::FRAME_NAMES | wire::FRAME_THREAD_NAME) == 0
            {
                (events.len() / wire::EVENT_BYTES) as u64
            } else {
                0
            };
        let sent = with_channel(|c| {
            if c.dead {
                return false;
            }
            let slot = c.lost.iter().position(|&(tid, _)| tid == header.tid);
            if let Some(i) = slot {
                header.lost = header.lost.saturating_add(c.lost[i].1);
            }
            match c.producer.write_record_parts(&[&header.encode(), events]) {
                Ok(_) => {
                    if let Some(i) = slot {
                        c.lost[i] = (0, 0);
                    }
                    true
                }
                Err(e) => {
                    if matches!(e, RecordError::ConsumerGone)
                        || (matches!(e, RecordError::TimedOut { .. }) && recorder_is_gone(c))
                    {
                        c.dead = true;
                        crate::recorder_gone();
                    }
                    let lost = header.lost.saturating_add(records);
                    match slot.or_else(|| c.lost.iter().position(|&(tid, _)| tid == 0)) {
                        Some(i) => c.lost[i] = (header.tid, lost),
                        // No slot: counted all the same, as nobody's.
                        None => c.lost_elsewhere = c.lost_elsewhere.saturating_add(lost),
                    }
                    false
                }
            }
        });
        match sent {
            Ok(sent) => sent,
            Err(Refused::Lock) => {
                // Counted where no lock is needed, for the next frame
                // that gets through.
                count_unsent(header.tid, header.lost.saturating_add(records));
                false
            }
            Err(Refused::NoChannel) => false,
        }
    }

    /// Moves the counts of frames given up at the lock into the
    /// channel's own. Under the lock.
    fn take_unsent(&mut self) {
        take_unsent(&mut self.lost, &mut self.lost_elsewhere);
    }
}

/// Records of frames given up at the lock ([`ChannelLock`]), by thread:
/// counted without it (the lock is what could not be had), in slots a
/// thread claims once by compare-and-swap and keeps, and moved into the
/// channel's counts by the next thread that has the lock. Async-signal-
/// safe. A frame is given up at the lock only where its holder cannot
/// let go (see `channel_lock`), so few threads ever need a slot.
struct Unsent {
    /// The thread (0: a free slot; slots are claimed in order).
    tid: AtomicU32,
    records: AtomicU64,
}

const UNSENT_SLOTS: usize = 16;
static UNSENT: [Unsent; UNSENT_SLOTS] = [const {
    Unsent {
        tid: AtomicU32::new(0),
        records: AtomicU64::new(0),
    }
}; UNSENT_SLOTS];
/// What threads beyond the slots gave up at the lock.
static UNSENT_ELSEWHERE: AtomicU64 = AtomicU64::new(0);

/// Counts `records` that thread `tid` gave up at the lock.
fn count_unsent(tid: u32, records: u64) {
    if records == 0 {
        return;
    }
    for slot in &UNSENT {
        let claimed = match slot
            .tid
            .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(holder) => holder == tid,
        };
        if claimed {
            slot.records.fetch_add(records, Ordering::Relaxed);
            return;
        }
    }
    UNSENT_ELSEWHERE.fetch_add(records, Ordering::Relaxed);
}

/// Moves the counts of frames given up at the lock into `lost` (by
/// thread, as [`Channel::lost`]) and `elsewhere`.
fn take_unsent(lost: &mut [(u32, u64); LOST_SLOTS], elsewhere: &mut u64) {
    let mut nobodys = 0;
    take_unsent_each(|tid, n| {
        let at = lost.iter().position(|&(t, _)| t == tid);
        match at.or_else(|| lost.iter().position(|&(t, _)| t == 0)) {
            Some(i) => lost[i] = (tid, lost[i].1.saturating_add(n)),
            // No slot: counted all the same, as nobody's.
            None => nobodys += n,
        }
    });
    *elsewhere = elsewhere.saturating_add(nobodys);
}

/// Takes the counts of frames given up at the lock, each thread's to `f`
/// (what threads beyond the slots gave up, as the main thread's).
fn take_unsent_each(mut f: impl FnMut(u32, u64)) {
    for slot in &UNSENT {
        let tid = slot.tid.load(Ordering::Acquire);
        if tid == 0 {
            break;
        }
        let n = slot.records.swap(0, Ordering::Relaxed);
        if n > 0 {
            f(tid, n);
        }
    }
    let elsewhere = UNSENT_ELSEWHERE.swap(0, Ordering::Relaxed);
    if elsewhere > 0 {
        // SAFETY: getpid has no preconditions.
        f(unsafe { libc::getpid() }.cast_unsigned(), elsewhere);
    }
}

/// Forgets the counts of frames given up at the lock: in a child after
/// `fork`, where they are the parent's to report.
fn forget_unsent() {
    for slot in &UNSENT {
        slot.records.store(0, Ordering::Relaxed);
        slot.tid.store(0, Ordering::Relaxed);
    }
    UNSENT_ELSEWHERE.store(0, Ordering::Relaxed);
}

/// Why [`with_channel`] did not run its function.
enum Refused {
    /// There is no channel (none was opened, or this is a copy of the
    /// parent's).
    NoChannel,
    /// The lock could not be had: its holder cannot let go.
    Lock,
}

/// How long a thread waits for the lock before it gives the frame up: a
/// holder keeps it at most [`BLOCK_TIMEOUT`] while the recorder is there,
/// so only a holder that can never let go makes anyone wait this long:
/// one that died or is stopped in the hand-over (a killed vfork child, a
/// thread cancelled in it, one stopped by a debugger), and only the first
/// waiter on such a hold: it marks the hold given up on, and later ones
/// give up at once. The code a signal handler of the same thread
/// interrupted is known at once and not waited for. A frame given up at
/// the lock is counted ([`count_unsent`]) for its thread's next frame
/// that gets through.
const LOCK_PATIENCE_NS: u64 = 3 * BLOCK_TIMEOUT.as_nanos() as u64;

/// Runs `f` on the channel under the lock; refused when there is none,
/// the lock could not be had, or this process has a copy of its parent's
/// (a child of vfork or of `clone(CLONE_VM)` shares its parent's, and
/// writes through it as a thread of its parent would).
fn with_channel<T>(f: impl FnOnce(&mut Channel) -> T) -> Result<T, Refused> {
    // The lock's wait, the producer's wait for room, the wake-up and the
    // hang-up check set errno; a signal handler (ichnos_snapshot in one)
    // must leave it as the interrupted code had it.
    let _errno = ichnos_buf::fill::ErrnoGuard::save();
    if !crate::ending::owning_process() && !crate::ending::shares_owners_memory() {
        // A copy of the parent's channel, made without fork's handlers:
        // the parent's shared buffer is not this process's to write.
        crate::untraced_copy();
        return Err(Refused::NoChannel);
    }
    if !LOCK.lock(LOCK_PATIENCE_NS) {
        return Err(Refused::Lock);
    }
    let p = CHANNEL.load(Ordering::Acquire);
    // SAFETY: the pointer is from `install` (a leaked Box, never freed) or
    // null; the lock gives this thread the only reference.
    let out = unsafe { p.as_mut() }.map(|c| {
        c.take_unsent();
        f(c)
    });
    LOCK.unlock();
    out.ok_or(Refused::NoChannel)
}

/// The socket the recorder is woken through, and its inode (-1: none).
/// The program owns the descriptor numbers: it may close ours and open
/// something else under the number, which must not get our byte.
static WAKE_SOCKET: AtomicI32 = AtomicI32::new(-1);
static WAKE_INODE: AtomicU64 = AtomicU64::new(0);

/// Makes `socket` the one the recorder is woken through.
fn wake_through(socket: &OwnedFd) {
    if let Some(inode) = socket_inode(socket.as_raw_fd()) {
        WAKE_INODE.store(inode, Ordering::Relaxed);
        WAKE_SOCKET.store(socket.as_raw_fd(), Ordering::Relaxed);
    }
}

/// The inode of descriptor `fd` if it is a socket (each has its own).
/// Async-signal-safe.
fn socket_inode(fd: i32) -> Option<u64> {
    // SAFETY: stat is plain data; zeroed is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into the stat we own; async-signal-safe.
    let r = unsafe { libc::fstat(fd, &raw mut st) };
    (r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(st.st_ino)
}

/// The shared buffer's wakeup hook (`Producer::set_wakeup_hook`): the
/// recorder sleeps, and a wakeup watermark was crossed or a thread waits
/// for room. One byte ([`wire::WAKE`]) on the socket, which the recorder
/// polls; never blocking (a full socket means the recorder has wake-ups
/// to read already), never a cancellation point (a raw system call, not
/// glibc's `send`), and only where the descriptor is still our socket
/// (a program that closes it and makes another socket under its number
/// between the check and the send, from another thread, would get the
/// byte: a window of two system calls). Async-signal-safe, `errno` kept:
/// it runs inside the hand-over, under the channel's lock, possibly in a
/// signal handler.
fn wake_recorder() {
    let _errno = ichnos_buf::fill::ErrnoGuard::save();
    send_on_socket(wire::WAKE);
}

/// The process's last word to the recorder, on the socket
/// ([`wire::FRAME_END`]): everything its threads wrote has been handed
/// over or counted lost. Sent last at each of the process's ends (on the
/// socket, so that a shared buffer with no room left cannot drop it);
/// only by the process the channel is of (a child of `vfork` shares the
/// socket). A socket with no room (a recorder stalled while wake-ups
/// piled up) is waited for half a second at most: without the last word
/// the process reads as cut short. Where the program closed the socket
/// (and ran on: the recorder reads its shared buffer until it ends), the
/// last word goes in the shared buffer, after everything else there.
/// Async-signal-safe, `errno` kept.
pub(crate) fn say_ended() {
    if !crate::ending::owning_process() {
        return;
    }
    let _errno = ichnos_buf::fill::ErrnoGuard::save();
    let header = FrameHeader {
        // SAFETY: getpid has no preconditions.
        tid: unsafe { libc::getpid() }.cast_unsigned(),
        flags: wire::FRAME_END,
        lost: 0,
        len: 0,
        ticks: crate::clock::ticks(),
    };
    for _ in 0..5 {
        match send_on_socket(&header.encode()) {
            OnSocket::NoRoom => wait_for_room(100),
            OnSocket::NotOurs => {
                // Refused where the lock is held for good: then the last
                // hand-overs were given up too, and the process rightly
                // reads as cut short.
                let _ = with_channel(|c| {
                    if !c.dead {
                        let _ = c.producer.write_record_parts(&[&header.encode()]);
                    }
                });
                return;
            }
            OnSocket::Sent | OnSocket::Failed => return,
        }
    }
}

/// What became of a message sent on the socket ([`send_on_socket`]).
enum OnSocket {
    Sent,
    /// The socket had no room: not sent, and could be later.
    NoRoom,
    /// The descriptor is not the socket the runtime connected (the
    /// program closed it, and may have reused the number): not sent.
    NotOurs,
    /// Any other failure (the recorder gone).
    Failed,
}

/// Waits up to `ms` milliseconds for room on the socket the recorder is
/// woken through.
fn wait_for_room(ms: i64) {
    poll_one(WAKE_SOCKET.load(Ordering::Relaxed), libc::POLLOUT, ms);
}

/// Polls descriptor `fd` for `events`, waiting up to `ms` milliseconds:
/// the events it has (0 where none came, or the poll failed). A raw
/// system call: async-signal-safe, and not glibc's `poll`, a
/// cancellation point.
fn poll_one(fd: i32, events: libc::c_short, ms: i64) -> libc::c_short {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let wait = libc::timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    };
    // SAFETY: one pollfd and a timeout of ours that outlive the call; no
    // signal mask.
    let n = unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            &raw mut pfd,
            1,
            &raw const wait,
            std::ptr::null::<libc::sigset_t>(),
            0,
        )
    };
    if n > 0 {
        pfd.revents
    } else {
        0
    }
}

/// Sends the empty frame `header`, which only carries a loss, on the
/// socket: where the shared buffer cannot be reached (its lock is held
/// for good). The recorder takes it as it takes such a frame from the
/// buffer.
fn send_loss_on_socket(header: &FrameHeader) {
    send_on_socket(&header.encode());
}

/// Sends `bytes`, one message, on the socket the recorder is woken
/// through: never blocking, and only where the descriptor is still our
/// socket (see [`wake_recorder`]). Async-signal-safe.
fn send_on_socket(bytes: &[u8]) -> OnSocket {
    let fd = WAKE_SOCKET.load(Ordering::Relaxed);
    if !ours(fd) {
        return OnSocket::NotOurs;
    }
    // SAFETY: a send of bytes we hold, with no address.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            bytes.as_ptr(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::sockaddr>(),
            0,
        )
    };
    if sent >= 0 {
        return OnSocket::Sent;
    }
    // SAFETY: errno is this thread's.
    if unsafe { *libc::__errno_location() } == libc::EAGAIN {
        OnSocket::NoRoom
    } else {
        OnSocket::Failed
    }
}

/// Whether descriptor `fd` is the socket the runtime connected (the
/// program may have closed it and reused the number). Async-signal-safe.
fn ours(fd: i32) -> bool {
    fd >= 0 && socket_inode(fd) == Some(WAKE_INODE.load(Ordering::Relaxed))
}

/// Whether the recorder is gone, where a hand-over waited for room in
/// vain. Under the channel's lock; raw system calls (not glibc's `poll`
/// or `connect`, cancellation points), async-signal-safe.
///
/// Known from the socket where it is still the runtime's: the recorder
/// closed its end. Where the program closed it (its number may be
/// another file's now, with bytes to read), the recorder's listening
/// socket is asked instead: a killed recorder's refuses connections.
/// (Else the program would wait for room for every buffer, for ever,
/// after a recorder killed by SIGKILL.)
fn recorder_is_gone(c: &Channel) -> bool {
    let fd = c.socket.as_raw_fd();
    if ours(fd) {
        return poll_one(fd, libc::POLLIN, 0) & (libc::POLLHUP | libc::POLLERR | libc::POLLIN) != 0;
    }
    listener_gone(&c.listener)
}

/// Whether no recorder listens at `listener`: a connection to it is
/// refused (a killed recorder leaves its socket's file behind). A
/// connection made is closed at once (the recorder takes it for one that
/// ended before its hello); anything else (a full queue, no descriptor
/// left, the path not reached from where the program now is: a chroot,
/// another mount namespace, a uid the directory refuses) is taken for a
/// recorder there: a recorder that ended normally says so in the shared
/// buffer. Async-signal-safe.
fn listener_gone(listener: &libc::sockaddr_un) -> bool {
    // SAFETY: a raw socket creation.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: the address is a valid sockaddr_un of its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_connect,
            fd,
            std::ptr::from_ref(listener),
            std::mem::size_of::<libc::sockaddr_un>(),
        )
    };
    // SAFETY: errno is this thread's.
    let error = unsafe { *libc::__errno_location() };
    // SAFETY: the descriptor made above, closed once.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    r != 0 && error == libc::ECONNREFUSED
}

/// The address of the recorder's socket at `path`.
fn socket_address(path: &OsStr) -> io::Result<libc::sockaddr_un> {
    let bytes = path.as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s.cast_signed();
    }
    Ok(addr)
}

/// A `SOCK_SEQPACKET` connection to `addr`, close-on-exec.
fn connect(addr: &libc::sockaddr_un) -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just created and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: addr is a valid sockaddr_un of the given size.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            std::ptr::from_ref(addr).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(crate::descriptors::out_of_the_way(fd))
}

/// Sends `bytes` with descriptor `fd` attached (`SCM_RIGHTS`), never
/// raising SIGPIPE.
fn send_with_fd(socket: &OwnedFd, bytes: &[u8], fd: i32) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // Room for one descriptor's control message, aligned as cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: msghdr is plain data; zeroed is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg_control points at `space` bytes we own; CMSG_FIRSTHDR
    // returns a header inside them, and CMSG_DATA room for one i32.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
    }
    // SAFETY: msg describes valid buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_given_up_at_the_lock_are_counted_for_their_threads() {
        // The only test that touches the process's slots.
        count_unsent(7, 5);
        count_unsent(9, 1);
        count_unsent(7, 3);
        count_unsent(11, 0);
        let mut lost = [(0, 0); LOST_SLOTS];
        lost[0] = (9, 2);
        let mut elsewhere = 0;
        take_unsent(&mut lost, &mut elsewhere);
        // Added to what thread 9 had pending; thread 7 given a slot.
        assert_eq!(lost[0], (9, 3));
        assert_eq!(lost[1], (7, 8));
        assert_eq!(lost[2], (0, 0));
        assert_eq!(elsewhere, 0);
        // Taken once: a second look finds nothing more.
        take_unsent(&mut lost, &mut elsewhere);
        assert_eq!(lost[1], (7, 8));

        // Threads beyond the slots are counted as nobody's, and so are
        // the channel's threads beyond its own slots.
        for tid in 100..100 + UNSENT_SLOTS as u32 + 2 {
            count_unsent(tid, 1);
        }
        let mut full = [(1, 1); LOST_SLOTS];
        take_unsent(&mut full, &mut elsewhere);
        // Two slots were claimed before (7 and 9), so 14 of the 18
        // threads had one; none had a place in the full `lost`.
        assert_eq!(elsewhere, 18);
        assert!(full.iter().all(|&slot| slot == (1, 1)));

        // A fork child forgets the parent's: nothing left to take, and
        // every slot free for its own threads.
        count_unsent(7, 4);
        count_unsent(500, 1);
        forget_unsent();
        let mut lost = [(0, 0); LOST_SLOTS];
        let mut elsewhere = 0;
        take_unsent(&mut lost, &mut elsewhere);
        assert_eq!((lost[0], elsewhere), ((0, 0), 0));
        for tid in 1..=UNSENT_SLOTS as u32 {
            count_unsent(tid, 1);
        }
        take_unsent(&mut lost, &mut elsewhere);
        assert_eq!(elsewhere, 0, "a slot still held by a parent's thread");
        assert_eq!(lost[UNSENT_SLOTS - 1], (UNSENT_SLOTS as u32, 1));
    }
}
