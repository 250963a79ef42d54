//! Capture from the Linux kernel: sampling events opened with
//! `perf_event_open`, their mmap ring buffers, and the records the kernel
//! writes into them.
//!
//! This is the part of `perf record` that talks to the kernel, re-created
//! as a library: an [`EventConfig`] says what to sample (the CPU clock or
//! cycles, at a frequency, with user registers and a copy of the user
//! stack), [`PerfEvent::open`] opens it for a task or a CPU and explains a
//! refusal (`kernel.perf_event_paranoid`, missing PMU, the sample-rate
//! limit), [`Ring`] drains its ring buffer without copying records twice,
//! and [`record::parse`] turns each record into a borrowed view. The
//! syscall wrapper is our own small module (`sys.rs`: `perf_event_open`,
//! three ioctls, `mmap`): the attribute is one struct, and owning it keeps
//! every unsafe line in one place.
//!
//! ```
//! use ichnos_perf::record::{parse, Record, SampleFormat};
//! // A COMM record: pid 7, tid 7, "demo", no sample_id trailer.
//! let mut bytes = vec![3, 0, 0, 0, 0, 0, 24, 0, 7, 0, 0, 0, 7, 0, 0, 0];
//! bytes.extend_from_slice(b"demo\0\0\0\0");
//! let Record::Comm(comm) = parse(&SampleFormat::default(), &bytes).unwrap() else { panic!() };
//! assert_eq!(comm.name, b"demo");
//! ```

pub mod attr;
pub mod event;
pub mod record;
pub mod ring;
mod sys;

pub use event::{EventConfig, EventKind, OpenError, PerfEvent};
pub use record::{Record, SampleFormat};
pub use ring::{Ring, RingError};
pub use sys::{monotonic_ns, online_cpus, realtime_ns};
