//! One traced process's connection (a process between two execs): its
//! hello, its shared buffer read a piece at a time into the recording,
//! its wake-ups and its end.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

use ichnos_buf::topa::{Consumer, TopaBuffer};
use ichnos_data::wire::{self, Hello};
use ichnos_data::Record;
use rustc_hash::FxHashMap;

use super::{frames, Out, TraceError, WAKES_A_TURN};
use crate::{socket, sys};

/// One traced process (one connection: a process between two execs).
pub(super) struct Conn {
    pub(super) socket: OwnedFd,
    pub(super) consumer: Option<Consumer>,
    pub(super) pid: u32,
    pub(super) asid: u64,
    /// Bytes read that do not yet make a whole frame.
    pub(super) carry: Vec<u8>,
    /// Executable ranges known of the address space.
    pub(super) exec: Vec<(u64, u64)>,
    /// The index in `exec` of the range an address was found in last.
    pub(super) exec_hit: usize,
    /// The program's ends the runtime marked before an exec, written
    /// when the connection ends ([`frames::end_of_connection`]).
    pub(super) exec_marks: Vec<ichnos_data::wire::FrameHeader>,
    /// Frames of a catch to come, by thread, where a frame of events
    /// ended amid them.
    pub(super) walks: FxHashMap<u32, frames::Walked>,
    /// The runtime said its last word ([`wire::FRAME_END`]): everything
    /// the process's threads wrote was handed over.
    pub(super) ended: bool,
    /// A pidfd of the process, opened at its hello (`None` where the
    /// kernel has none): readable once it has ended.
    pub(super) pidfd: Option<OwnedFd>,
    /// What tells the connection's end.
    pub(super) end_by: EndBy,
    pub(super) closed: bool,
}

/// What tells a connection's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EndBy {
    /// Its socket's end.
    Socket,
    /// The process's, as its pidfd tells: it closed its end of the
    /// socket and runs on (a program that closes every descriptor, as
    /// daemons do), its runtime writing on into the shared buffer.
    Pidfd,
    /// Ended: running on, the process executed another program, whose
    /// runtime connected ([`greet`]).
    Exec,
}

impl Conn {
    /// A connection just accepted on `socket`: no hello yet.
    pub(super) fn new(socket: OwnedFd) -> Conn {
        Conn {
            socket,
            consumer: None,
            pid: 0,
            asid: 0,
            carry: Vec::new(),
            exec: Vec::new(),
            exec_hit: 0,
            exec_marks: Vec::new(),
            walks: FxHashMap::default(),
            ended: false,
            pidfd: None,
            end_by: EndBy::Socket,
            closed: false,
        }
    }

    /// A connection of a process that is not there (its names and maps
    /// are not read), its code at `exec`: for frames read from elsewhere
    /// (the fuzz target, tests).
    pub(super) fn offline(exec: Vec<(u64, u64)>) -> io::Result<Conn> {
        Ok(Conn {
            pid: u32::MAX - 1,
            asid: 1,
            exec,
            ..Conn::new(OwnedFd::from(File::open("/dev/null")?))
        })
    }
}

/// Takes the hellos of the connections that have not said one yet. A
/// hello from the pid of a process running on without its socket
/// ([`EndBy::Pidfd`]) is of the program that process executed: what the
/// process wrote before is read to the end and its connection ended
/// first, as the socket's end at an exec ends it, before any record of
/// the new program. True if there was anything.
pub(super) fn greet(conns: &mut [Conn], out: &mut Out) -> Result<bool, TraceError> {
    let mut busy = false;
    for i in 0..conns.len() {
        if conns[i].consumer.is_some() || conns[i].closed {
            continue;
        }
        let message = match socket::receive(&conns[i].socket) {
            Ok(None) => continue,
            Ok(Some(m)) if !m.bytes.is_empty() => m,
            // Gone before its hello.
            Ok(Some(_)) | Err(_) => {
                conns[i].closed = true;
                busy = true;
                continue;
            }
        };
        busy = true;
        if let Some(pid) = socket::peer_pid(&conns[i].socket) {
            for old in conns
                .iter_mut()
                .filter(|c| c.end_by == EndBy::Pidfd && c.pid == pid && !c.closed)
            {
                // Its process has not ended: it executed this program
                // (where it has, the pid is another process's now).
                if !old.pidfd.as_ref().is_some_and(sys::has_ended) {
                    old.end_by = EndBy::Exec;
                }
                read_buffer(old, out, true)?;
                end(old, out, false)?;
            }
        }
        welcome(&mut conns[i], out, &message.bytes, message.fd)?;
    }
    Ok(busy)
}

/// Serves one connection that has said its hello ([`greet`]): its
/// frames, its end. True if it did any work.
pub(super) fn service(conn: &mut Conn, out: &mut Out) -> Result<bool, TraceError> {
    let mut busy = false;
    if conn.consumer.is_none() || conn.closed {
        return Ok(false);
    }
    // Whether the process is gone: looked at before draining, so that
    // what it wrote before it went is all read. Its wake-ups are read on
    // the way, a bounded number a turn (a process that sends nothing but
    // wake-ups keeps the others waiting no longer than a turn).
    let mut gone = false;
    // Losses the runtime could not put in its shared buffer (whose lock a
    // thread holds for good), each an empty frame: written after what the
    // buffer holds, which came before them.
    let mut losses: Vec<Vec<u8>> = Vec::new();
    // Only the socket's end (not anything else on it, which means the
    // process is gone) may be of a process that runs on.
    let mut hung_up = false;
    if conn.end_by == EndBy::Pidfd {
        // No socket to read: its end is the process's.
        gone = conn.pidfd.as_ref().is_none_or(sys::has_ended);
    }
    for _ in 0..WAKES_A_TURN {
        if conn.end_by != EndBy::Socket {
            break;
        }
        match socket::receive(&conn.socket) {
            Ok(None) => break,
            Ok(Some(m)) if m.bytes == wire::WAKE => busy = true,
            Ok(Some(m)) if frames::is_end_frame(&m.bytes) => {
                conn.ended = true;
                busy = true;
            }
            Ok(Some(m)) if frames::is_loss_frame(&m.bytes) => {
                losses.push(m.bytes);
                busy = true;
            }
            Ok(Some(m)) => {
                hung_up = m.bytes.is_empty();
                gone = true;
                break;
            }
            Err(_) => {
                gone = true;
                break;
            }
        }
    }
    // Everything there, where losses came: they come at the end.
    busy |= read_buffer(conn, out, gone || !losses.is_empty())?;
    for loss in &losses {
        frames::loss_on_socket(conn, out, loss)?;
    }
    // Where its socket ended with neither its last word nor an exec's
    // marks, the process was killed, or closed the socket and runs on:
    // its end is waited for on its pidfd (a process that has begun to
    // exit too, which may still hand its last buffers over).
    let mut let_go_running = false;
    if hung_up && !conn.ended && conn.exec_marks.is_empty() {
        if conn.pidfd.is_some() {
            conn.end_by = EndBy::Pidfd;
            return Ok(true);
        }
        // No pidfd: one that runs on is let go; one that has ended may
        // have handed over more since the drain above, read to the end
        // now.
        let_go_running = ichnos_profile::alive(conn.pid);
        read_buffer(conn, out, true)?;
    }
    if gone {
        end(conn, out, let_go_running)?;
        busy = true;
    }
    Ok(busy)
}

/// The connection's end: the process's `Exit` record, flagged where it
/// was cut short; `let_go_running` where it runs on unread (no pidfd to
/// wait on).
fn end(conn: &mut Conn, out: &mut Out, let_go_running: bool) -> Result<(), TraceError> {
    // Neither its last word nor an exec's marks, and not now running
    // another program, nor let go running: the process ended before
    // its runtime handed its threads' last buffers over.
    let cut_short =
        !conn.ended && conn.exec_marks.is_empty() && conn.end_by != EndBy::Exec && !let_go_running;
    if cut_short {
        out.cut_short.push(conn.pid);
    }
    frames::end_of_connection(conn, out)?;
    let time = out.time();
    out.push(&Record::Exit {
        pid: u64::from(conn.pid),
        tid: u64::from(conn.pid),
        time,
        flags: if cut_short {
            ichnos_data::EXIT_CUT_SHORT
        } else {
            0
        },
    })?;
    if !conn.carry.is_empty() {
        out.refused.push(format!(
            "process {}: its last {} not a whole frame",
            conn.pid,
            if conn.carry.len() == 1 {
                "byte was".to_owned()
            } else {
                format!("{} bytes were", conn.carry.len())
            }
        ));
    }
    conn.closed = true;
    Ok(())
}

/// Reads the connection's shared buffer, if it has one ([`read_frames`]):
/// to the end where the process is `gone`.
fn read_buffer(conn: &mut Conn, out: &mut Out, gone: bool) -> Result<bool, TraceError> {
    let Some(mut consumer) = conn.consumer.take() else {
        return Ok(false);
    };
    let read = read_frames(conn, out, &mut consumer, gone);
    conn.consumer = Some(consumer);
    read
}

/// Reads the frames in the process's shared buffer where they lie, a
/// piece at a time: one piece a turn while the process runs; once it is
/// gone, every piece up to where its head was then. True if there was
/// anything.
///
/// A frame cut short by the end of a piece is left in the buffer for the
/// next read, which takes it whole where it lies (copying it aside to be
/// completed was 5% of the recorder's time); only a frame cut by the end
/// of one of the buffer's regions, or larger than a piece, is copied
/// ([`frames::CutFrame`]).
pub(super) fn read_frames(
    conn: &mut Conn,
    out: &mut Out,
    consumer: &mut Consumer,
    gone: bool,
) -> Result<bool, TraceError> {
    let mut busy = false;
    let capacity = consumer.capacity();
    // Once it is gone, up to where its head is now: a process that only
    // seems gone (it wrote to its socket) and keeps writing is not
    // followed for ever in one turn.
    let drain_to = gone.then(|| consumer.tail() + consumer.available());
    loop {
        let tail = consumer.tail();
        let max = drain_to.map_or(out.read_piece, |to| {
            to.saturating_sub(tail).min(out.read_piece)
        });
        let segments = consumer.next_segments(max);
        let end = segments.end();
        if end == tail {
            break;
        }
        busy = true;
        let mut left = 0;
        let mut segments = segments.enumerate().peekable();
        while let Some((n, segment)) = segments.next() {
            let cut = if segments.peek().is_none() {
                frames::CutFrame::Leave {
                    earlier_pieces: n > 0,
                }
            } else {
                frames::CutFrame::Carry
            };
            left = frames::frames_read(conn, out, segment, capacity, cut)?;
        }
        // Read: the runtime may write there again. (A read leaves a
        // frame only after taking one: it always moves on.)
        let read_to = end - left as u64;
        if consumer.consume(read_to).is_err() || !gone || conn.closed {
            break;
        }
    }
    Ok(busy)
}

/// A process's hello: its buffer opened, its address space recorded.
fn welcome(
    conn: &mut Conn,
    out: &mut Out,
    bytes: &[u8],
    fd: Option<OwnedFd>,
) -> Result<(), TraceError> {
    let refuse = |out: &mut Out, conn: &mut Conn, why: String| {
        out.refused.push(why);
        conn.closed = true;
    };
    let mut hello = match Hello::decode(bytes) {
        Ok(h) => h,
        Err(e) => {
            refuse(
                out,
                conn,
                format!("a traced process said something else: {e}"),
            );
            return Ok(());
        }
    };
    // The process is the one the kernel saw connect, whatever it says.
    let peer_pid = socket::peer_pid(&conn.socket);
    if let Some(pid) = peer_pid {
        hello.pid = pid;
    }
    let Some(fd) = fd else {
        refuse(out, conn, format!("process {} sent no buffer", hello.pid));
        return Ok(());
    };
    let consumer = TopaBuffer::open(fd).and_then(|b| b.consumer());
    let consumer = match consumer {
        Ok(c) => c,
        Err(e) => {
            refuse(out, conn, format!("process {}: its buffer: {e}", hello.pid));
            return Ok(());
        }
    };
    conn.consumer = Some(consumer);
    conn.pid = hello.pid;
    // Opened while the process is certainly this one (it is connected),
    // and only for the pid the kernel gave: one the process says itself
    // may be another namespace's, another process's.
    conn.pidfd = peer_pid
        .is_some()
        .then(|| sys::pidfd_open(hello.pid).ok())
        .flatten();
    conn.asid = out.next_asid;
    out.next_asid += 1;
    out.processes.insert(hello.pid);
    let name = comm(hello.pid, hello.pid);
    let time = out.time();
    out.push(&Record::Process {
        asid: conn.asid,
        pid: u64::from(hello.pid),
        parent: 0,
        time,
        name: name.as_bytes(),
    })?;
    out.push(&Record::Thread {
        pid: u64::from(hello.pid),
        tid: u64::from(hello.pid),
        time,
        name: name.as_bytes(),
    })?;
    out.threads.insert((hello.pid, hello.pid));
    Ok(())
}

pub(super) fn comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}
