//! The function-trace runtime's records on their way to the recorder:
//! what `libichnos_preload.so` writes into shared memory and `ichnos
//! trace` reads back (`docs/function-trace.md`). Both ends are built from
//! this one definition; the recorder checks everything it reads, as the
//! traced program is not trusted.
//!
//! A program's threads write 16-byte *events* into their own buffers; a
//! full buffer (and what is left at a thread's exit) becomes one *frame*
//! in the process's shared buffer: a 32-byte header, then the events.

/// The first four bytes of every frame header ("ICTR").
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"ICTR");
/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 32;
/// Bytes of an event.
pub const EVENT_BYTES: usize = 16;
/// The largest frame body a recorder accepts (a thread's buffer is at
/// most this large).
pub const MAX_FRAME_BYTES: u64 = 1 << 30;

/// The bytes of each thread's ring the runtime makes for `--ring asked`:
/// a power of two (the ring's places are positions masked), at least a
/// page and at most [`MAX_FRAME_BYTES`] (a ring is sent as one frame).
#[must_use]
pub fn ring_bytes(asked: u64) -> u64 {
    asked.clamp(4096, MAX_FRAME_BYTES).next_power_of_two()
}

/// `FrameHeader.flags`: the events are a flight recorder's ring.
pub const FRAME_RING: u32 = 1;
/// `FrameHeader.flags`: the thread's last frame.
pub const FRAME_LAST: u32 = 2;
/// `FrameHeader.flags`: not events but the text of the process's
/// `/proc/self/maps`, padded with NUL bytes to a multiple of 16 (sent at
/// the start, after a fork and at exit, so that the recorder knows the
/// mappings of a process that is gone before it looks).
pub const FRAME_MAPS: u32 = 4;
/// `FrameHeader.flags`: not events but span names, each a 16-byte head
/// (the name's address, its length in bytes, little-endian) and the name
/// padded with NUL bytes to a multiple of 16 (sent when the process
/// first begins a span of that name, before the span's events).
pub const FRAME_NAMES: u32 = 8;
/// `FrameHeader.flags`: the thread's program goes on after its last
/// frame: the exec that frame was sent before failed (an empty frame).
pub const FRAME_RESUMED: u32 = 16;
/// `FrameHeader.flags`, with [`FRAME_LAST`]: the program is about to
/// exec (an empty frame; a [`FRAME_RESUMED`] one follows if it fails).
pub const FRAME_EXEC: u32 = 32;
/// `FrameHeader.flags`: the thread's first frame of events (its buffer's
/// first hand-over). A thread id whose last frame never came (lost: the
/// recorder fell behind past the runtime's patience) and that a new
/// thread now has is so told from the old thread's.
pub const FRAME_FIRST: u32 = 64;
/// `FrameHeader.flags`: not events but the name of thread `tid` (its
/// `comm`), 16 bytes, NUL-padded: sent before the thread's last frame (at
/// its exit, or the process's), so that a thread gone before the recorder
/// could read its name from `/proc` is named, by its last name.
pub const FRAME_THREAD_NAME: u32 = 128;
/// `FrameHeader.flags`: the process's last word, an empty frame of the
/// main thread's id sent on the socket (not in the shared buffer, which
/// may have no room left; there only where the program closed the
/// socket): everything its threads wrote was handed over or counted lost
/// (at `exit`, `_exit`, or the save before a fatal signal). A process
/// that ends without it, without marking an exec and without executing
/// a program whose runtime connected, ended before its runtime handed
/// its threads' last buffers over (killed by SIGKILL, or
/// ended in a way the runtime does not see): their last events are
/// missing.
pub const FRAME_END: u32 = 256;

/// The name a [`FRAME_THREAD_NAME`] body holds: up to its first NUL, at
/// most 16 bytes.
#[must_use]
pub fn thread_name(body: &[u8]) -> &[u8] {
    let body = &body[..body.len().min(16)];
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    &body[..end]
}

/// The longest span name sent (longer ones are cut).
pub const MAX_SPAN_NAME: usize = 256;

/// The span names of a [`FRAME_NAMES`] body: address and name, as many
/// whole entries as it holds (a damaged one ends the list).
pub fn span_names(body: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let head = body.get(at..at.checked_add(16)?)?;
        let address = u64::from_le_bytes(head[..8].try_into().ok()?);
        let len = usize::try_from(u64::from_le_bytes(head[8..].try_into().ok()?)).ok()?;
        if len > MAX_SPAN_NAME {
            return None;
        }
        let start = at + 16;
        let name = body.get(start..start + len)?;
        at = start + len.next_multiple_of(16);
        Some((address, name))
    })
}

/// A [`FRAME_NAMES`] entry for `name` at `address`, appended to `out`.
pub fn push_span_name(out: &mut Vec<u8>, address: u64, name: &[u8]) {
    let name = &name[..name.len().min(MAX_SPAN_NAME)];
    out.extend_from_slice(&address.to_le_bytes());
    out.extend_from_slice(&(name.len() as u64).to_le_bytes());
    out.extend_from_slice(name);
    out.resize(out.len().next_multiple_of(16), 0);
}

/// Event kinds (the low four bits of an event's second word).
pub mod event {
    /// A function was entered; the address is the function's.
    pub const ENTER: u8 = 0;
    /// A function returned; the address is the function's.
    pub const EXIT: u8 = 1;
    /// A probe; the address field holds its id. The next event is its
    /// [`VALUE`].
    pub const PROBE: u8 = 2;
    /// The value of the probe before it, in the ticks field.
    pub const VALUE: u8 = 3;
    /// `setjmp`/`sigsetjmp` saved the thread's place; the address is the
    /// `jmp_buf`'s.
    pub const SETJMP: u8 = 4;
    /// `longjmp`/`siglongjmp` goes back to a place; the address is the
    /// `jmp_buf`'s.
    pub const LONGJMP: u8 = 5;
    /// A named span began; the address is its name's (a NUL-terminated
    /// string the process keeps, named by a [`super::FRAME_NAMES`] frame).
    pub const SPAN_BEGIN: u8 = 6;
    /// The named span whose name is at the address ended.
    pub const SPAN_END: u8 = 7;
    /// A C++ exception was caught; the address is the catching
    /// function's (the calls above its innermost open one were unwound).
    pub const CATCH: u8 = 8;
    /// A frame on the stack a catch leaves, written just before the
    /// [`CATCH`], outermost first, when the runtime walked the stack
    /// there: the address is the start of the frame's function (by its
    /// unwind entry).
    pub const LIVE: u8 = 9;
    /// No event: the place of one a signal handler interrupted and a
    /// `longjmp` out of the handler left unfinished, marked so by the
    /// runtime (its bytes were stale or half written). Readers pass over
    /// it, as over any kind they do not know.
    pub const ABANDONED: u8 = 10;
}

/// The largest address or probe id an event holds (48 bits).
pub const MAX_ADDRESS: u64 = (1 << 48) - 1;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The thread that wrote the events.
    pub tid: u32,
    /// [`FRAME_RING`], [`FRAME_LAST`].
    pub flags: u32,
    /// Events the thread lost since its previous frame.
    pub lost: u64,
    /// Bytes of events that follow (a multiple of [`EVENT_BYTES`]).
    pub len: u64,
    /// The clock when the frame was made (dates a loss when there are
    /// no events).
    pub ticks: u64,
}

/// What is wrong with bytes read as a frame header or a hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than a header.
    #[error("{0} bytes are too short for a header")]
    Short(usize),
    /// The magic is not there.
    #[error("bad magic {0:#010x}")]
    Magic(u32),
    /// The length is not a whole number of events, or too large.
    #[error("bad frame length {0}")]
    Length(u64),
    /// A hello of a version this recorder does not speak.
    #[error("runtime speaks version {0}; this recorder speaks {WIRE_VERSION}")]
    Version(u32),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl FrameHeader {
    /// The header's bytes: magic, tid, lost, len (32 bits), flags, ticks.
    #[must_use]
    pub fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut b = [0u8; FRAME_HEADER_BYTES];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.tid.to_le_bytes());
        b[8..16].copy_from_slice(&self.lost.to_le_bytes());
        b[16..20].copy_from_slice(&(self.len.min(u64::from(u32::MAX)) as u32).to_le_bytes());
        b[20..24].copy_from_slice(&self.flags.to_le_bytes());
        b[24..32].copy_from_slice(&self.ticks.to_le_bytes());
        b
    }

    /// Reads a header, checking its magic and length.
    pub fn decode(b: &[u8]) -> Result<FrameHeader, WireError> {
        if b.len() < FRAME_HEADER_BYTES {
            return Err(WireError::Short(b.len()));
        }
        let magic = u32_at(b, 0);
        if magic != FRAME_MAGIC {
            return Err(WireError::Magic(magic));
        }
        let len = u64::from(u32_at(b, 16));
        if !len.is_multiple_of(EVENT_BYTES as u64) || len > MAX_FRAME_BYTES {
            return Err(WireError::Length(len));
        }
        Ok(FrameHeader {
            tid: u32_at(b, 4),
            lost: u64_at(b, 8),
            len,
            flags: u32_at(b, 20),
            ticks: u64_at(b, 24),
        })
    }
}

/// An event's bytes: the ticks, then `kind | address << 16`.
#[inline(always)]
#[must_use]
#[allow(clippy::inline_always)] // on the traced program's every call
pub fn encode_event(ticks: u64, kind: u8, address: u64) -> [u8; EVENT_BYTES] {
    let mut b = [0u8; EVENT_BYTES];
    store_event(&mut b, ticks, event_word(kind, address));
    b
}

/// An event's second word: `kind | address << 16`.
#[inline(always)]
#[must_use]
#[allow(clippy::inline_always)] // on every traced call
pub fn event_word(kind: u8, address: u64) -> u64 {
    u64::from(kind) | (address << 16)
}

/// Stores an event, its ticks and its [`event_word`], into `dst` (its
/// first [`EVENT_BYTES`] bytes) where it lies: two 8-byte stores. A
/// writer that builds the event apart and copies it makes the copy read
/// 16 bytes that two stores just wrote, which the processor cannot
/// forward from its store buffer.
///
/// # Panics
/// If `dst` is shorter than [`EVENT_BYTES`].
#[inline(always)]
#[allow(clippy::inline_always)] // on every traced call
pub fn store_event(dst: &mut [u8], ticks: u64, word: u64) {
    dst[..8].copy_from_slice(&ticks.to_le_bytes());
    dst[8..EVENT_BYTES].copy_from_slice(&word.to_le_bytes());
}

/// An event read back: (ticks, kind, address).
#[must_use]
#[inline]
pub fn decode_event(b: &[u8; EVENT_BYTES]) -> (u64, u8, u64) {
    let word = u64_at(b, 8);
    (u64_at(b, 0), (word & 0xf) as u8, word >> 16)
}

/// The version of this protocol.
pub const WIRE_VERSION: u32 = 1;
/// The first four bytes of a hello ("ICHL").
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"ICHL");
/// Bytes of a hello.
pub const HELLO_BYTES: usize = 16;
/// `Hello.clock`: ticks are the time-stamp counter.
pub const CLOCK_TSC: u32 = 1;
/// `Hello.clock`: ticks are `CLOCK_MONOTONIC` nanoseconds.
pub const CLOCK_MONOTONIC: u32 = 2;

/// What a traced process says after its hello, as often as its shared
/// buffer's wakeup asks (the recorder sleeping, a wakeup watermark
/// crossed or a thread waiting for room): this one byte, which the
/// recorder reads and takes as a wake-up.
pub const WAKE: &[u8] = b"w";

/// What a traced process says first on the recorder's socket, with its
/// shared buffer's memfd attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The process.
    pub pid: u32,
    /// [`CLOCK_TSC`] or [`CLOCK_MONOTONIC`].
    pub clock: u32,
    /// The buffer is a flight recorder's: frames come at the end.
    pub ring: bool,
}

impl Hello {
    /// The hello's bytes: magic, version, pid, clock (low 8 bits) and
    /// flags (bit 8: ring).
    #[must_use]
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&WIRE_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        let word = (self.clock & 0xff) | (u32::from(self.ring) << 8);
        b[12..16].copy_from_slice(&word.to_le_bytes());
        b
    }

    /// Reads a hello.
    pub fn decode(b: &[u8]) -> Result<Hello, WireError> {
        if b.len() < HELLO_BYTES {
            return Err(WireError::Short(b.len()));
        }
        let magic = u32_at(b, 0);
        if magic != HELLO_MAGIC {
            return Err(WireError::Magic(magic));
        }
        let version = u32_at(b, 4);
        if version != WIRE_VERSION {
            return Err(WireError::Version(version));
        }
        let word = u32_at(b, 12);
        Ok(Hello {
            pid: u32_at(b, 8),
            clock: word & 0xff,
            ring: word & 0x100 != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_a_power_of_two_of_a_page_at_least() {
        assert_eq!(ring_bytes(16), 4096);
        assert_eq!(ring_bytes(4096), 4096);
        assert_eq!(ring_bytes(5000), 8192);
        assert_eq!(ring_bytes(1 << 20), 1 << 20);
        assert_eq!(ring_bytes(u64::MAX), MAX_FRAME_BYTES);
    }

    #[test]
    fn headers_events_and_hellos_read_back_and_bad_ones_are_named() {
        let h = FrameHeader {
            tid: 42,
            flags: FRAME_LAST,
            lost: 7,
            len: 160,
            ticks: 1 << 40,
        };
        assert_eq!(FrameHeader::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[16] = 17;
        assert_eq!(FrameHeader::decode(&bad), Err(WireError::Length(17)));
        bad[0] = 0;
        assert!(matches!(
            FrameHeader::decode(&bad),
            Err(WireError::Magic(_))
        ));
        assert_eq!(FrameHeader::decode(&[0; 31]), Err(WireError::Short(31)));
        let e = encode_event(123, event::EXIT, 0x7fff_1234_5678);
        assert_eq!(decode_event(&e), (123, event::EXIT, 0x7fff_1234_5678));
        let hello = Hello {
            pid: 9,
            clock: CLOCK_TSC,
            ring: true,
        };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
        let mut old = hello.encode();
        old[4] = 9;
        assert_eq!(Hello::decode(&old), Err(WireError::Version(9)));
    }
}
