//! The records of a function trace: a thread's entries, exits and probes
//! as one block (`Calls`), and the pairing of the trace's clock with the
//! recording's (`Clock`).

use super::{Body, BodyError};
use crate::varint::{put_u, Cursor};

/// One event of a thread's function trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallEvent {
    /// A function was entered.
    Enter {
        /// When, in ticks of the trace's clock.
        ticks: u64,
        /// The function: a stack number (a stack of one frame, the
        /// function's address).
        function: u64,
    },
    /// A function returned.
    Exit {
        /// When.
        ticks: u64,
        /// The function, as in `Enter`.
        function: u64,
    },
    /// An explicit probe (`ichnos_probe(id, value)`).
    Probe {
        /// When.
        ticks: u64,
        /// The probe's number.
        id: u64,
        /// Its value.
        value: u64,
    },
    /// `setjmp` saved the thread's place into `buffer` (`long` false), or
    /// `longjmp` went back to the place `buffer` holds (`long` true): the
    /// calls entered since the `setjmp` ended without exits.
    Jump {
        /// When.
        ticks: u64,
        /// The `jmp_buf`'s address (below 2^63).
        buffer: u64,
        /// A `longjmp`, not a `setjmp`.
        long: bool,
    },
    /// A C++ exception was caught: the calls above the innermost open
    /// call of `function` were unwound without exits (clang's
    /// instrumentation does not call the exit hook as an exception
    /// unwinds).
    Catch {
        /// When.
        ticks: u64,
        /// The function of the innermost call left open, as in `Enter`
        /// (below 2^62 - 1); `None`: no call is.
        function: Option<u64>,
    },
    /// A call of `function` whose frame is on the stack the next `Catch`
    /// leaves: the runtime walked that stack, and these events, outermost
    /// first, name the traced functions of its frames. A reader that has
    /// them before a catch keeps the open calls they account for (each
    /// matched in order to the next frame of its function) and ends the
    /// rest, which is right where the catching function is not traced or
    /// is open more than once.
    Live {
        /// When (the catch's time).
        ticks: u64,
        /// The function, as in `Enter` (below 2^62).
        function: u64,
    },
}

impl CallEvent {
    /// When it happened, in ticks.
    #[must_use]
    pub fn ticks(&self) -> u64 {
        match *self {
            CallEvent::Enter { ticks, .. }
            | CallEvent::Exit { ticks, .. }
            | CallEvent::Probe { ticks, .. }
            | CallEvent::Jump { ticks, .. }
            | CallEvent::Catch { ticks, .. }
            | CallEvent::Live { ticks, .. } => ticks,
        }
    }
}

/// `Calls.flags` bit: the block is a flight recorder's ring (the
/// thread's events before its first are gone, so its first exits may
/// close calls whose entries are not there).
pub const CALLS_RING: u64 = 1;
/// `Calls.flags` bit: the thread's last block (it exited, or the process
/// did).
pub const CALLS_LAST: u64 = 2;
/// `Calls.flags`: the block goes on from the one before it of the thread
/// (one buffer or ring, written as several blocks).
pub const CALLS_CONTINUED: u64 = 4;
/// `Calls.flags`: the thread's program goes on after its last block (the
/// exec it was written before failed): a reader does not start the
/// thread afresh.
pub const CALLS_RESUMED: u64 = 8;
/// `Calls.flags`, with [`CALLS_LAST`]: the last block was written before
/// an exec; whether the program ended there says the thread's next block
/// ([`CALLS_RESUMED`]: it did not).
pub const CALLS_EXEC: u64 = 16;

/// One thread's events, as read: decoded on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallEvents<'a> {
    count: u64,
    first: u64,
    encoded: &'a [u8],
}

impl<'a> CallEvents<'a> {
    /// How many events.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The events, in the order they happened (checked whole when the
    /// record was read, so decoding cannot fail here).
    pub fn iter(&self) -> impl Iterator<Item = CallEvent> + 'a {
        let mut c = Cursor::new(self.encoded);
        let mut ticks = self.first;
        (0..self.count).map(move |_| next_event(&mut c, &mut ticks))
    }

    /// The events as an iterator that owns their encoded bytes (a few
    /// bytes an event, where decoded ones take 24): for a reader that
    /// holds many threads' blocks at once, reading each a little at a
    /// time.
    #[must_use]
    pub fn to_owned_iter(&self) -> OwnedCallEvents {
        OwnedCallEvents {
            left: self.count,
            ticks: self.first,
            at: 0,
            encoded: self.encoded.into(),
        }
    }
}

/// The next event after `ticks` at `c` (in a record checked whole).
fn next_event(c: &mut Cursor<'_>, ticks: &mut u64) -> CallEvent {
    let head = c.u().unwrap_or(0);
    *ticks = ticks.wrapping_add(head >> 2);
    let ticks = *ticks;
    let a = c.u().unwrap_or(0);
    match head & 3 {
        0 => CallEvent::Enter { ticks, function: a },
        1 => CallEvent::Exit { ticks, function: a },
        3 if a & 3 == 2 => CallEvent::Catch {
            ticks,
            function: (a >> 2).checked_sub(1),
        },
        3 if a & 3 == 3 => CallEvent::Live {
            ticks,
            function: a >> 2,
        },
        3 => CallEvent::Jump {
            ticks,
            buffer: a >> 1,
            long: a & 1 != 0,
        },
        _ => CallEvent::Probe {
            ticks,
            id: a,
            value: c.u().unwrap_or(0),
        },
    }
}

/// A thread's events that own their encoded bytes
/// ([`CallEvents::to_owned_iter`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedCallEvents {
    left: u64,
    ticks: u64,
    at: usize,
    encoded: Box<[u8]>,
}

impl Iterator for OwnedCallEvents {
    type Item = CallEvent;

    fn next(&mut self) -> Option<CallEvent> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut c = Cursor::new(self.encoded.get(self.at..).unwrap_or_default());
        let event = next_event(&mut c, &mut self.ticks);
        self.at += c.pos();
        Some(event)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.left).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// A block of one thread's trace, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calls<'a> {
    /// The process.
    pub pid: u64,
    /// The thread.
    pub tid: u64,
    /// Records the thread lost just before this block (the recorder fell
    /// behind, or a signal handler's record could not be kept).
    pub lost: u64,
    /// [`CALLS_RING`], [`CALLS_LAST`], [`CALLS_CONTINUED`],
    /// [`CALLS_RESUMED`], [`CALLS_EXEC`].
    pub flags: u64,
    /// Ticks the first event counts from (when there is none, when the
    /// loss was noticed).
    pub first: u64,
    /// The events.
    pub events: CallEvents<'a>,
}

/// A block of one thread's trace, to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallsOut<'a> {
    /// The process.
    pub pid: u64,
    /// The thread.
    pub tid: u64,
    /// Records lost just before.
    pub lost: u64,
    /// [`CALLS_RING`], [`CALLS_LAST`], [`CALLS_CONTINUED`],
    /// [`CALLS_RESUMED`], [`CALLS_EXEC`].
    pub flags: u64,
    /// Ticks the first event counts from: at most its ticks.
    pub first: u64,
    /// The events, in order. An event earlier than the one before it is
    /// stored at the time of the one before (times in a block never go
    /// back).
    pub events: &'a [CallEvent],
}

/// The largest tick difference between two events of a block.
const MAX_DELTA: u64 = u64::MAX >> 2;

/// Values below this take one or two bytes of varint.
const SHORT: u64 = 1 << 14;

/// `v` (below [`SHORT`]) as varint bytes in a little-endian word, and
/// how many bytes it takes.
#[inline]
fn short_varint(v: u64) -> (u32, usize) {
    debug_assert!(v < SHORT);
    let v = v as u32;
    if v < 0x80 {
        (v, 1)
    } else {
        ((v & 0x7f) | 0x80 | ((v >> 7) << 8), 2)
    }
}

/// Appends `event` to a block's encoded events; `prev` is the time of
/// the event before it (the block's `first` before its first), moved on
/// to this one's.
#[inline]
fn put_event(b: &mut Vec<u8>, prev: &mut u64, event: &CallEvent) {
    let delta = event.ticks().saturating_sub(*prev).min(MAX_DELTA);
    *prev = prev.saturating_add(delta);
    let (kind, a) = match *event {
        CallEvent::Enter { function, .. } => (0, function),
        CallEvent::Exit { function, .. } => (1, function),
        CallEvent::Probe { id, .. } => (2, id),
        // A jump's buffer is even (bit 1 of `a` clear where
        // `long` is), so that a catch's `a & 3` is 2.
        CallEvent::Jump { buffer, long, .. } => (3, ((buffer & !1) << 1) | u64::from(long)),
        CallEvent::Catch { function, .. } => {
            (3, (function.map_or(0, |f| f.saturating_add(1)) << 2) | 2)
        }
        // A longjmp's `a & 3` is 1 (its buffer is even), so 3 is
        // free for these.
        CallEvent::Live { function, .. } => (3, (function.min((1 << 62) - 1) << 2) | 3),
    };
    put_u(b, (delta << 2) | kind);
    put_u(b, a);
    if let CallEvent::Probe { value, .. } = *event {
        put_u(b, value);
    }
}

impl CallsOut<'_> {
    pub(super) fn encode(&self, b: &mut Vec<u8>) {
        for v in [
            self.pid,
            self.tid,
            self.lost,
            self.flags,
            self.first,
            self.events.len() as u64,
        ] {
            put_u(b, v);
        }
        // At most 21 bytes an event (three varints, a probe's value the
        // third): one reservation for all.
        b.reserve(self.events.len().saturating_mul(21));
        let mut prev = self.first;
        for event in self.events {
            put_event(b, &mut prev, event);
        }
    }
}

/// A block's events encoded as they come, for a writer that has them one
/// at a time: written as a [`Calls`] record ([`CallEventsEncoder::events`]),
/// the same bytes as a [`CallsOut`] of the same events, without holding
/// them decoded first.
#[derive(Clone, Debug, Default)]
pub struct CallEventsEncoder {
    encoded: Vec<u8>,
    count: u64,
    first: u64,
    prev: u64,
}

impl CallEventsEncoder {
    /// An empty encoder (its block's `first` is 0 until [`Self::start`]).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a new block, empty, whose `first` is `ticks` until an event
    /// comes (then the first event's time).
    pub fn start(&mut self, ticks: u64) {
        self.encoded.clear();
        self.count = 0;
        self.first = ticks;
        self.prev = ticks;
    }

    /// Appends `event` (one earlier than the one before it is stored at
    /// the time of the one before, as [`CallsOut`] does).
    #[inline]
    pub fn push(&mut self, event: &CallEvent) {
        if self.count == 0 {
            self.first = event.ticks();
            self.prev = self.first;
        }
        self.count += 1;
        put_event(&mut self.encoded, &mut self.prev, event);
    }

    /// Appends the entry (`exit` false) or exit of `function` at `ticks`:
    /// the same bytes as [`Self::push`] of the `CallEvent::Enter` or
    /// `Exit`, on a path of their own, for the function tracer's recorder,
    /// which converts tens of millions of them a second (inlined into its
    /// loop: as a call, saving and restoring registers cost more than
    /// the encoding).
    #[inline(always)]
    #[allow(clippy::inline_always)]
    pub fn push_call(&mut self, ticks: u64, function: u64, exit: bool) {
        if self.count == 0 {
            self.first = ticks;
            self.prev = ticks;
        }
        self.count += 1;
        let delta = ticks.saturating_sub(self.prev).min(MAX_DELTA);
        self.prev = self.prev.saturating_add(delta);
        let head = (delta << 2) | u64::from(exit);
        if head < SHORT && function < SHORT {
            // Both one or two bytes of varint (nearly every call: times
            // a few hundred ticks apart, a few thousand functions): one
            // four-byte store, then the length cut to what they take.
            let (head, head_len) = short_varint(head);
            let (function, function_len) = short_varint(function);
            let word = head | (function << (8 * head_len));
            let len = self.encoded.len();
            self.encoded.extend_from_slice(&word.to_le_bytes());
            self.encoded.truncate(len + head_len + function_len);
        } else {
            put_u(&mut self.encoded, head);
            put_u(&mut self.encoded, function);
        }
    }

    /// How many events the block has.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether it has none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The block's `first`: its first event's time, or the time it was
    /// started with.
    #[must_use]
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The time the last event pushed is stored at, as a reader reads it:
    /// its own, or the one before it where it was earlier (times in a
    /// block never go back) or further on than one step stores.
    #[must_use]
    pub fn last_ticks(&self) -> u64 {
        self.prev
    }

    /// The events, for a [`Calls`] record.
    #[must_use]
    pub fn events(&self) -> CallEvents<'_> {
        CallEvents {
            count: self.count,
            first: self.first,
            encoded: &self.encoded,
        }
    }
}

impl<'a> Calls<'a> {
    pub(super) fn encode(&self, b: &mut Vec<u8>) {
        for v in [
            self.pid,
            self.tid,
            self.lost,
            self.flags,
            self.first,
            self.events.count,
        ] {
            put_u(b, v);
        }
        b.extend_from_slice(self.events.encoded);
    }

    pub(super) fn decode(body: &'a [u8], b: &mut Body<'a>) -> Result<Self, BodyError> {
        let pid = b.u("pid")?;
        let tid = b.u("tid")?;
        let lost = b.u("lost")?;
        let flags = b.u("flags")?;
        let first = b.u("first")?;
        let count = b.u("count")?;
        let start = b.c.pos();
        // Checked whole now, so iterating later cannot fail; a count beyond
        // the body fails at its first missing event.
        for _ in 0..count {
            let head = b.u("event")?;
            b.u("event")?;
            if head & 3 == 2 {
                b.u("probe value")?;
            }
        }
        Ok(Calls {
            pid,
            tid,
            lost,
            flags,
            first,
            events: CallEvents {
                count,
                first,
                encoded: &body[start..b.c.pos()],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jumps and catches share type 3, told apart by `a`'s low two bits
    /// as the recording format's page gives them.
    #[test]
    fn jumps_and_catches_are_written_as_the_format_page_says() {
        let events = [
            CallEvent::Jump {
                ticks: 10,
                buffer: 0x1000,
                long: false,
            },
            CallEvent::Jump {
                ticks: 11,
                buffer: 0x1000,
                long: true,
            },
            CallEvent::Catch {
                ticks: 12,
                function: Some(7),
            },
            CallEvent::Catch {
                ticks: 12,
                function: None,
            },
            CallEvent::Live {
                ticks: 13,
                function: 5,
            },
        ];
        let out = CallsOut {
            pid: 1,
            tid: 2,
            lost: 0,
            flags: 0,
            first: 10,
            events: &events,
        };
        let mut body = Vec::new();
        out.encode(&mut body);
        // pid, tid, lost, flags, first, count; then (delta << 2 | 3, a):
        // setjmp 0x1000 << 1 (two bytes of varint), longjmp that | 1,
        // catch of stack 7: (7 + 1) << 2 | 2, catch of none: 2, stack 5
        // live: 5 << 2 | 3.
        let expected = [
            1,
            2,
            0,
            0,
            10,
            5, //
            3,
            0x80,
            0x40, //
            (1 << 2) | 3,
            0x81,
            0x40, //
            (1 << 2) | 3,
            34, //
            3,
            2, //
            (1 << 2) | 3,
            (5 << 2) | 3,
        ];
        assert_eq!(body, expected);
        let mut b = Body {
            c: Cursor::new(&body),
        };
        let calls = Calls::decode(&body, &mut b).unwrap();
        assert_eq!(calls.events.iter().collect::<Vec<_>>(), events);
    }
}
