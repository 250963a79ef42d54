//! Frames from a traced process's shared buffer into the recording: each
//! frame's events become `Calls` records of its thread (functions and
//! span names interned as one-frame stacks of the process's address
//! space); its maps, names and thread-name frames go to `side_band.rs`.
//! Frames are taken whole from the bytes read so far.

use std::collections::hash_map::Entry;

use ichnos_data::wire::{self, event, FrameHeader, EVENT_BYTES, FRAME_HEADER_BYTES};
use ichnos_data::{CallEvent, Calls, Record, StackOut, StackStop};

use super::side_band::{add_maps, add_span_names, resync, thread_named};
use super::{comm, Conn, Out, TraceError};

/// Turns the whole frames at the front of `conn.carry` into records (the
/// tests' way in: the recorder reads through [`frames_read`]).
#[cfg(test)]
pub(super) fn frames(conn: &mut Conn, out: &mut Out) -> Result<(), TraceError> {
    let capacity = conn
        .consumer
        .as_ref()
        .map(ichnos_buf::topa::Consumer::capacity);
    carried_frames(conn, out, capacity)
}

/// [`frames`], no frame larger than `capacity` (the shared buffer's,
/// if known).
fn carried_frames(conn: &mut Conn, out: &mut Out, capacity: Option<u64>) -> Result<(), TraceError> {
    let carry = std::mem::take(&mut conn.carry);
    let at = whole_frames(conn, out, &carry, capacity)?;
    let mut carry = carry;
    carry.drain(..at);
    conn.carry = carry;
    Ok(())
}

/// What [`frames_read`] does with a frame its bytes end inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CutFrame {
    /// Copies it aside (into `conn.carry`), to be completed by the bytes
    /// that follow.
    Carry,
    /// Leaves it where it lies, its length said, for the next read to
    /// begin with it: these bytes are the last piece of a read, whose
    /// tail the caller moves only up to that frame. Only where the read
    /// took something before it (a whole frame, or the end of one begun
    /// earlier), so that every read moves on; else it is carried.
    /// `earlier_pieces`: these bytes are not the read's first piece (the
    /// pieces before them were taken whole, or end in the frame these
    /// complete).
    Leave { earlier_pieces: bool },
}

/// Turns the frames of `bytes` read from the process's shared buffer
/// (of `capacity` bytes) into records where they lie: those begun in an
/// earlier piece completed through `conn.carry`, whole ones read in
/// place, the last, cut short, carried or left as `cut` says. Returns
/// the length of a frame left (0 if none was).
///
/// The process may write `bytes` while they are read (it is not
/// trusted): each value is read from them once (a header decoded into a
/// copy, an event's fields as numbers), and a frame whose body is parsed
/// as text or by lengths inside it is copied first.
pub(super) fn frames_read(
    conn: &mut Conn,
    out: &mut Out,
    mut bytes: &[u8],
    capacity: u64,
    cut: CutFrame,
) -> Result<usize, TraceError> {
    let mut progress = matches!(
        cut,
        CutFrame::Leave {
            earlier_pieces: true
        }
    );
    while !bytes.is_empty() && !conn.closed {
        if conn.carry.is_empty() {
            let took = whole_frames(conn, out, bytes, Some(capacity))?;
            let rest = &bytes[took..];
            if conn.closed || rest.is_empty() {
                return Ok(0);
            }
            if cut != CutFrame::Carry && (took > 0 || progress) {
                // Read again, whole, next time.
                return Ok(rest.len());
            }
            conn.carry.extend_from_slice(rest);
            return Ok(0);
        }
        // Only as much as completes the frame begun, so that what
        // follows it is read in place again.
        let more = rest_of_frame(&conn.carry).min(bytes.len());
        conn.carry.extend_from_slice(&bytes[..more]);
        bytes = &bytes[more..];
        // (Its size checked as soon as its header is whole.)
        carried_frames(conn, out, Some(capacity))?;
        if more == 0 {
            break;
        }
        progress |= conn.carry.is_empty();
    }
    Ok(0)
}

/// Bytes the frame begun in `carry` lacks: its header's first, then its
/// body's (0 if its header is damaged, which [`whole_frames`] refuses).
fn rest_of_frame(carry: &[u8]) -> usize {
    if carry.len() < FRAME_HEADER_BYTES {
        return FRAME_HEADER_BYTES - carry.len();
    }
    FrameHeader::decode(carry).map_or(0, |h| {
        let whole = (FRAME_HEADER_BYTES as u64).saturating_add(h.len);
        usize::try_from(whole.saturating_sub(carry.len() as u64)).unwrap_or(usize::MAX)
    })
}

/// Turns the whole frames at the front of `bytes` into records, and
/// says how many bytes they took (all of them when the stream is
/// refused, `conn.closed` then set). `capacity`: the shared buffer's
/// (`None` only where no buffer is open), which no frame exceeds.
fn whole_frames(
    conn: &mut Conn,
    out: &mut Out,
    bytes: &[u8],
    capacity: Option<u64>,
) -> Result<usize, TraceError> {
    let mut at = 0;
    while bytes.len() - at >= FRAME_HEADER_BYTES {
        let header = match FrameHeader::decode(&bytes[at..]) {
            Ok(h) => h,
            Err(e) => {
                // The stream's framing is broken: nothing after this can
                // be trusted.
                out.refused.push(format!(
                    "process {}: a damaged frame ({e}); the rest of its trace is left out",
                    conn.pid
                ));
                // Dropping the connection: the runtime sees the recorder
                // gone and stops tracing; no second hello is taken.
                conn.closed = true;
                return Ok(bytes.len());
            }
        };
        let whole = (FRAME_HEADER_BYTES as u64).saturating_add(header.len);
        if capacity.is_some_and(|c| whole > c) {
            // The runtime writes frames whole into its shared buffer: one
            // larger than the buffer is no frame, and waiting for the
            // rest of it would hold its length in memory for nothing.
            out.refused.push(format!(
                "process {}: a frame of {whole} bytes, larger than its shared buffer; the rest of its trace is left out",
                conn.pid
            ));
            conn.closed = true;
            return Ok(bytes.len());
        }
        let end = at + FRAME_HEADER_BYTES + header.len as usize;
        if end > bytes.len() {
            break;
        }
        frame(conn, out, &header, &bytes[at + FRAME_HEADER_BYTES..end])?;
        at = end;
    }
    Ok(at)
}

/// One frame: a thread's events as a `Calls` record.
fn frame(conn: &mut Conn, out: &mut Out, h: &FrameHeader, body: &[u8]) -> Result<(), TraceError> {
    let not_events = wire::FRAME_MAPS | wire::FRAME_NAMES | wire::FRAME_THREAD_NAME;
    if h.flags & not_events != 0 && h.lost > 0 {
        // The runtime gives a thread's losses to its next frame, whatever
        // it holds: counted as an empty frame's (they were dropped).
        let loss = FrameHeader {
            flags: 0,
            len: 0,
            ..*h
        };
        calls(conn, out, &loss, &[])?;
    }
    if h.flags & wire::FRAME_THREAD_NAME != 0 {
        return thread_named(conn, out, h.tid, wire::thread_name(body));
    }
    if h.flags & wire::FRAME_MAPS != 0 {
        // The runtime's copy of /proc/self/maps, NUL-padded. Copied out of
        // the shared buffer before it is read as text: the process could
        // change it between the check of its UTF-8 and its copy.
        let body = body.to_vec();
        let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
        let text = String::from_utf8_lossy(&body[..end]).into_owned();
        return add_maps(conn, out, &text);
    }
    if h.flags & wire::FRAME_NAMES != 0 {
        // Lengths and the names they measure: read from a copy.
        let copy = body.to_vec();
        return add_span_names(conn, out, &copy);
    }
    if body.is_empty() && h.flags & EXEC_MARK == EXEC_MARK && conn.exec_marks.len() < MAX_EXEC_MARKS
    {
        // The program's end at an exec, held until the connection ends.
        conn.exec_marks.retain(|m| m.tid != h.tid);
        conn.exec_marks.push(*h);
        return Ok(());
    }
    if body.is_empty() && h.flags == wire::FRAME_END && h.lost == 0 {
        // The last word, in the buffer where the program had closed the
        // socket: everything before it is all there is.
        conn.ended = true;
        return Ok(());
    }
    if body.is_empty() && h.flags & wire::FRAME_RESUMED != 0 {
        if let Some(at) = conn.exec_marks.iter().position(|m| m.tid == h.tid) {
            // The exec failed: the program goes on, and neither is said.
            conn.exec_marks.swap_remove(at);
            return Ok(());
        }
    }
    calls(conn, out, h, body)
}

/// Whether `bytes`, a message on a process's socket, is an empty frame
/// that only carries a loss: a frame header of no events and no flags
/// and a loss, alone. The runtime sends one so where its shared buffer
/// cannot be reached (its lock held for good).
pub(super) fn is_loss_frame(bytes: &[u8]) -> bool {
    bytes.len() == wire::FRAME_HEADER_BYTES
        && FrameHeader::decode(bytes).is_ok_and(|h| h.len == 0 && h.flags == 0 && h.lost > 0)
}

/// Whether `bytes`, a message on a process's socket, is its runtime's
/// last word ([`wire::FRAME_END`]): a frame header of no events, that
/// flag alone, and no loss.
pub(super) fn is_end_frame(bytes: &[u8]) -> bool {
    bytes.len() == wire::FRAME_HEADER_BYTES
        && FrameHeader::decode(bytes)
            .is_ok_and(|h| h.len == 0 && h.flags == wire::FRAME_END && h.lost == 0)
}

/// Takes the loss frame `bytes` ([`is_loss_frame`]) as such a frame from
/// the shared buffer is taken.
pub(super) fn loss_on_socket(
    conn: &mut Conn,
    out: &mut Out,
    bytes: &[u8],
) -> Result<(), TraceError> {
    match FrameHeader::decode(bytes) {
        Ok(h) => calls(conn, out, &h, &[]),
        Err(_) => Ok(()),
    }
}

/// The flags of the empty frame the runtime sends for the calling thread
/// and the main thread before an exec.
const EXEC_MARK: u32 = wire::FRAME_LAST | wire::FRAME_EXEC;

/// Ends of programs at an exec held at most per connection (two are
/// sent per exec); past it they are written as they come.
const MAX_EXEC_MARKS: usize = 64;

/// The connection ended (the process exec'ed, or exited): the ends of
/// its program held since the runtime marked them before an exec are
/// written now, after everything else the program sent.
///
/// The runtime marks the end of the program for the thread that calls
/// exec and for the main thread, whose id the new program takes. The
/// main thread, when it is another, runs on until the exec ends it, and
/// may hand over a full buffer after the mark: written as it came, the
/// mark would end the program before the old program's last events, and
/// a reader would take those for the new program's and nest its calls
/// under them. The connection ends when the exec has gone through, before
/// the new program (which connects anew) sends anything.
pub(super) fn end_of_connection(conn: &mut Conn, out: &mut Out) -> Result<(), TraceError> {
    for h in std::mem::take(&mut conn.exec_marks) {
        calls(conn, out, &h, &[])?;
    }
    Ok(())
}

/// A frame of a thread's events: `Calls` records.
fn calls(conn: &mut Conn, out: &mut Out, h: &FrameHeader, body: &[u8]) -> Result<(), TraceError> {
    let tid = h.tid;
    if out.threads.insert((conn.pid, tid)) {
        let name = comm(conn.pid, tid);
        let time = out.time();
        out.push(&Record::Thread {
            pid: u64::from(conn.pid),
            tid: u64::from(tid),
            time,
            name: name.as_bytes(),
        })?;
    }
    let mut flags = 0;
    if h.flags & wire::FRAME_RING != 0 {
        flags |= ichnos_data::CALLS_RING;
    }
    if h.flags & wire::FRAME_LAST != 0 {
        flags |= ichnos_data::CALLS_LAST;
    }
    if h.flags & wire::FRAME_RESUMED != 0 {
        flags |= ichnos_data::CALLS_RESUMED;
    }
    if h.flags & wire::FRAME_EXEC != 0 {
        flags |= ichnos_data::CALLS_EXEC;
    }
    let thread = (conn.pid, tid);
    // Rings aside, and the empty frames that only carry a loss (the
    // runtime sends them at its end, for threads that may have ended).
    if h.flags & wire::FRAME_RING == 0 && !(h.flags == 0 && body.is_empty()) {
        if h.flags & wire::FRAME_FIRST != 0 {
            if let Some(ended) = out.open_threads.remove(&thread) {
                // A new thread with the id of one whose last frame never
                // came: that one ended, at its latest frame as far as is
                // known, and its calls still open are not this one's.
                end_thread(conn, out, tid, ended)?;
            }
        }
        if h.flags & wire::FRAME_LAST != 0 {
            out.open_threads.remove(&thread);
        } else {
            out.open_threads.insert(thread, h.ticks);
        }
    }
    // The runtime's count is untrusted: it saturates, never wraps.
    out.lost = out.lost.saturating_add(h.lost);
    // A ring's save: counted for what earlier saves did not hold.
    let ring = (h.flags & wire::FRAME_RING != 0).then(|| {
        let mut seen = out.rings.remove(&thread).unwrap_or_default();
        let read = seen.begin(false);
        (seen, read)
    });
    let mut blocks = Blocks {
        pid: conn.pid,
        tid,
        asid: conn.asid,
        lost: h.lost,
        flags,
        ticks: h.ticks,
        written: 0,
        new_functions: std::mem::take(&mut out.new_functions),
        ring,
    };
    out.encoder.start(h.ticks);
    let converted = convert(conn, out, h, body, &mut blocks);
    if let Some((seen, _)) = blocks.ring.take() {
        out.rings.insert(thread, seen);
    }
    converted?;
    if h.flags & wire::FRAME_LAST != 0 && h.flags & wire::FRAME_RING == 0 && !out.encoder.is_empty()
    {
        // The thread's end is the last frame's time, after its last
        // events: an empty last block carries it (its `first`), for
        // readers that count the calls still open to there.
        blocks.write(out, false)?;
    }
    blocks.write(out, true)?;
    out.new_functions = blocks.new_functions;
    Ok(())
}

/// Ends thread `tid`'s program at `ticks`: the empty last block its last
/// frame would have ended with.
fn end_thread(conn: &Conn, out: &mut Out, tid: u32, ticks: u64) -> Result<(), TraceError> {
    out.encoder.start(ticks);
    let mut blocks = Blocks {
        pid: conn.pid,
        tid,
        asid: conn.asid,
        lost: 0,
        flags: ichnos_data::CALLS_LAST,
        ticks,
        written: 0,
        new_functions: std::mem::take(&mut out.new_functions),
        ring: None,
    };
    blocks.write(out, true)?;
    out.new_functions = blocks.new_functions;
    Ok(())
}

/// A frame's events on their way into `Calls` records: encoded as they
/// come (into `Out::encoder`), a block written whenever
/// [`EVENTS_PER_RECORD`] have gathered, the functions it names for the
/// first time before it; the loss goes with the first block, the
/// thread's end with the last.
struct Blocks {
    pid: u32,
    tid: u32,
    asid: u64,
    lost: u64,
    /// `CALLS_*` flags of the frame.
    flags: u64,
    /// The frame's time: an empty block's `first`.
    ticks: u64,
    /// Blocks written.
    written: usize,
    /// Functions numbered since the last block: (number, address).
    new_functions: Vec<(u64, u64)>,
    /// A ring's save: what the thread's saves before held, and how this
    /// one's events are told new ([`crate::ring_repeats`]).
    ring: Option<(crate::ring_repeats::RingSeen, crate::ring_repeats::SaveRead)>,
}

impl Blocks {
    /// Adds `event`, after writing the block gathered so far if it is
    /// full.
    #[inline(always)]
    #[allow(clippy::inline_always)] // on every event of a trace
    fn push(&mut self, out: &mut Out, event: &CallEvent) -> Result<bool, TraceError> {
        if out.encoder.len() == EVENTS_PER_RECORD {
            self.write_full(out)?;
        }
        out.encoder.push(event);
        Ok(self.is_new(out.encoder.last_ticks()))
    }

    /// Whether the event just pushed, stored at `ticks`, is new: not one
    /// an earlier save of the thread's ring held (every event of a frame
    /// that is not a ring's is).
    #[inline(always)]
    #[allow(clippy::inline_always)] // on every event of a trace
    fn is_new(&mut self, ticks: u64) -> bool {
        match &mut self.ring {
            None => true,
            Some((seen, read)) => seen.take(read, ticks),
        }
    }

    /// Adds the entry (`enter`) or exit of the function at `address` of
    /// `asid`, numbering the function if it is new.
    #[inline(always)]
    #[allow(clippy::inline_always)] // on every entry and exit of a trace
    fn push_call(
        &mut self,
        out: &mut Out,
        asid: u64,
        ticks: u64,
        address: u64,
        enter: bool,
    ) -> Result<(), TraceError> {
        let function = out.function(asid, address, &mut self.new_functions);
        if out.encoder.len() == EVENTS_PER_RECORD {
            self.write_full(out)?;
        }
        out.encoder.push_call(ticks, function, !enter);
        out.kept += u64::from(self.is_new(out.encoder.last_ticks()));
        Ok(())
    }

    /// [`Blocks::write`] of a full block, out of line.
    #[inline(never)]
    fn write_full(&mut self, out: &mut Out) -> Result<(), TraceError> {
        self.write(out, false)
    }

    /// Writes the block gathered (the frame's `last` if so), and starts
    /// the next.
    fn write(&mut self, out: &mut Out, last: bool) -> Result<(), TraceError> {
        for (id, address) in self.new_functions.drain(..) {
            out.push(&Record::StackOut(StackOut {
                id,
                asid: self.asid,
                stop: StackStop::Complete,
                frames: &[address],
            }))?;
        }
        let flags = if last {
            self.flags
        } else {
            self.flags & !ichnos_data::CALLS_LAST
        } | if self.written > 0 {
            ichnos_data::CALLS_CONTINUED
        } else {
            0
        };
        out.writer
            .push(&Record::Calls(Calls {
                pid: u64::from(self.pid),
                tid: u64::from(self.tid),
                lost: if self.written == 0 { self.lost } else { 0 },
                flags,
                first: out.encoder.first(),
                events: out.encoder.events(),
            }))
            .map_err(|source| TraceError::Write {
                path: out.path.clone(),
                source,
            })?;
        self.written += 1;
        out.encoder.start(self.ticks);
        Ok(())
    }
}

/// Whether `address` is in code the recording has the mapping of (the
/// range that answered last asked first).
#[inline]
fn in_known_code(conn: &mut Conn, address: u64) -> bool {
    if let Some(&(start, end)) = conn.exec.get(conn.exec_hit) {
        if (start..end).contains(&address) {
            return true;
        }
    }
    match conn
        .exec
        .iter()
        .position(|&(start, end)| (start..end).contains(&address))
    {
        Some(at) => {
            conn.exec_hit = at;
            true
        }
        None => false,
    }
}

/// A frame's events as `CallEvent`s into `blocks`, each function seen for
/// the first time numbered on the way.
fn convert(
    conn: &mut Conn,
    out: &mut Out,
    h: &FrameHeader,
    body: &[u8],
    blocks: &mut Blocks,
) -> Result<(), TraceError> {
    let mut probe: Option<(u64, u64)> = None;
    let mut resynced = false;
    // The thread's frames of a catch to come, from the frame before
    // this one if it ended amid them: broken if events were lost since.
    let mut walked = conn.walks.remove(&h.tid).unwrap_or_default();
    walked.broken |= h.lost > 0 && walked.frames > 0;
    let (events, _) = body.as_chunks::<EVENT_BYTES>();
    // Each event decoded once, where it is read: the process may change
    // it meanwhile.
    let mut i = 0;
    let mut next = events.first().map(wire::decode_event);
    while let Some((ticks, kind, address)) = next {
        if kind == event::ENTER || kind == event::EXIT {
            // Nearly every event: taken first, by two comparisons (the
            // `match` below is a jump through a table), and the run of
            // them converted on a path of its own.
            walked = Walked::default();
            probe = None;
            (i, next) = call_run(
                conn,
                out,
                blocks,
                events,
                i,
                (ticks, kind, address),
                &mut resynced,
            )?;
            continue;
        }
        i += 1;
        next = events.get(i).map(wire::decode_event);
        if kind != event::LIVE && kind != event::CATCH {
            // A catch's frames come right before it: a run that anything
            // else interrupted is of no catch (as a reader takes it).
            walked = Walked::default();
        }
        if kind == event::VALUE {
            // A value event carries the value where a time would be.
            let value = ticks;
            if let Some((ticks, id)) = probe.take() {
                if blocks.push(out, &CallEvent::Probe { ticks, id, value })? {
                    out.kept += 1;
                }
            }
            continue;
        }
        probe = None;
        match kind {
            event::SPAN_BEGIN | event::SPAN_END => {
                // A span is named by its name's address, interned as a
                // function is (its name came in a names frame), and
                // written as a call.
                blocks.push_call(out, conn.asid, ticks, address, kind == event::SPAN_BEGIN)?;
            }
            event::PROBE => probe = Some((ticks, address)),
            event::SETJMP | event::LONGJMP => {
                blocks.push(
                    out,
                    &CallEvent::Jump {
                        ticks,
                        buffer: address,
                        long: kind == event::LONGJMP,
                    },
                )?;
            }
            event::LIVE => {
                // A frame the catch after these leaves: only the frames of
                // functions traced (entered before, so numbered) can hold
                // an open call; the others are left out.
                walked.frames = walked.frames.saturating_add(1);
                if let Some(&function) = out.functions.get(&(conn.asid, address)) {
                    blocks.push(out, &CallEvent::Live { ticks, function })?;
                    walked.innermost = Some(function);
                }
            }
            event::CATCH => {
                let function = if walked.frames > 0 && !walked.broken {
                    // The stack was walked: the innermost traced frame
                    // left is the innermost call left open (which a
                    // reader that passes over the live frames goes by).
                    walked.innermost
                } else {
                    // The function left open is one that was entered, so
                    // its address needs no look at the mappings.
                    (address != 0)
                        .then(|| out.function(conn.asid, address, &mut blocks.new_functions))
                };
                walked = Walked::default();
                blocks.push(out, &CallEvent::Catch { ticks, function })?;
            }
            _ => {}
        }
    }
    // Kept for the thread's next frame (bounded: a runtime that sends
    // frames of catches that never come for ever more threads is not
    // followed past it).
    if walked.frames > 0 && h.flags & wire::FRAME_LAST == 0 && conn.walks.len() < MAX_WALKS {
        conn.walks.insert(h.tid, walked);
    }
    Ok(())
}

/// An event as [`wire::decode_event`] gives it: (ticks, kind, address).
type Decoded = (u64, u8, u64);

/// Converts the run of entries and exits that begins at `events[i]`
/// (`first`: it, decoded), and says where it ends: the index of the
/// event after it, and that event decoded. The recorder keeps up with a
/// program making tens of millions of calls a second only if an event
/// costs it a few nanoseconds (BENCHMARKS.md, issue 16): the code range
/// the last address was in is kept at hand, the frame fetched ahead, the
/// event encoded on the encoder's path for calls.
#[inline(always)]
#[allow(clippy::inline_always)] // the loop of nearly every event
fn call_run(
    conn: &mut Conn,
    out: &mut Out,
    blocks: &mut Blocks,
    events: &[[u8; EVENT_BYTES]],
    mut i: usize,
    first: Decoded,
    resynced: &mut bool,
) -> Result<(usize, Option<Decoded>), TraceError> {
    let mut known = conn.exec.get(conn.exec_hit).copied().unwrap_or((0, 0));
    let (mut ticks, mut kind, mut address) = first;
    loop {
        if !*resynced && !(known.0..known.1).contains(&address) {
            if in_known_code(conn, address) {
                known = conn.exec[conn.exec_hit];
            } else {
                // Code mapped since the last look (dlopen).
                resync(conn, out)?;
                *resynced = true;
            }
        }
        blocks.push_call(out, conn.asid, ticks, address, kind == event::ENTER)?;
        i += 1;
        let Some(chunk) = events.get(i) else {
            return Ok((i, None));
        };
        if i.is_multiple_of(64 / EVENT_BYTES) {
            prefetch(chunk.as_ptr().wrapping_add(PREFETCH_AHEAD));
        }
        (ticks, kind, address) = wire::decode_event(chunk);
        if kind != event::ENTER && kind != event::EXIT {
            return Ok((i, Some((ticks, kind, address))));
        }
    }
}

/// How far ahead of the event being converted its frame is fetched into
/// the cache: the process wrote the frame on another CPU, and the load
/// of each event's cache line was the loop's largest cost.
const PREFETCH_AHEAD: usize = 4096;

/// Asks for the cache line at `at` (any address: a prefetch never
/// faults).
#[inline]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and never faults,
    // whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Slots of [`Out::function`]'s recent functions.
pub(super) const RECENT_FUNCTIONS: usize = 256;

/// Threads of a connection whose frames of a catch to come are kept
/// across frames, at most.
const MAX_WALKS: usize = 4096;

/// A thread's frames of a catch to come, as far as they came.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Walked {
    /// How many came.
    frames: u32,
    /// The innermost of a traced function's, as its number.
    innermost: Option<u64>,
    /// Events were lost amid them (the innermost may be gone): the catch
    /// is named by its own function.
    broken: bool,
}

impl Out {
    /// The number of the one-frame stack at `address` of `asid`, a new
    /// one noted in `new` (written before the events that use it).
    #[inline]
    fn function(&mut self, asid: u64, address: u64, new: &mut Vec<(u64, u64)>) -> u64 {
        // Every entry and exit is looked up, mostly among a few functions
        // called often: a slot by address answers before the map.
        let slot = (address ^ (address >> 12)) as usize % RECENT_FUNCTIONS;
        let recent = &self.recent_functions[slot];
        if recent.0 == asid && recent.1 == address {
            return recent.2;
        }
        self.function_in_map(slot, asid, address, new)
    }

    /// [`Out::function`] past its recent slot `slot`, out of line.
    #[inline(never)]
    fn function_in_map(
        &mut self,
        slot: usize,
        asid: u64,
        address: u64,
        new: &mut Vec<(u64, u64)>,
    ) -> u64 {
        let id = match self.functions.entry((asid, address)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(v) => {
                let id = self.next_stack;
                self.next_stack += 1;
                v.insert(id);
                new.push((id, address));
                id
            }
        };
        self.recent_functions[slot] = (asid, address, id);
        id
    }
}

/// Events of one `Calls` record at most: 64 Ki events, about 21 bytes
/// each encoded at worst, fit far inside a chunk of the recording (16
/// MiB).
pub(super) const EVENTS_PER_RECORD: usize = 1 << 16;
