//! From the recorder to the file: records encoded on the recorder's
//! thread go through a region-table buffer (`ichnos-buf`) to a writer
//! thread, which gathers them into chunks (`ichnos-data`).
//!
//! Nothing here waits for the writer: a sample that finds no room is
//! dropped and counted (a `Lost` record says how many, and when); every
//! other record — stacks, mappings, names — is kept back and written first
//! when room returns, since later samples name them.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ichnos_buf::topa::{
    AllocFlags, Config, Consumer, Granularity, Mode, Producer, TopaBuffer, WaitOutcome,
};
use ichnos_data::{LostCause, Record, Writer};

/// Pages of the buffer between the recorder and the writer (4 MiB).
const BUFFER_PAGES: usize = 1024;
/// Largest record written: every field that could be longer (names,
/// paths, command lines) is bounded far below it; a record that is not is
/// dropped and counted rather than wait for room that cannot come.
pub(crate) const MAX_RECORD: usize = 256 << 10;
/// Most bytes of records kept back for a writer that is behind: past it
/// the recording stops (the output is stalled, not slow).
pub(crate) const MAX_BACKLOG: usize = 64 << 20;
/// How often the writer writes a chunk at the least.
const CHUNK_INTERVAL: Duration = Duration::from_secs(1);

/// The recorder's end.
pub(crate) struct Output {
    producer: Producer,
    record: Vec<u8>,
    scratch: Vec<u8>,
    backlog: VecDeque<Vec<u8>>,
    backlog_bytes: usize,
    /// The backlog outgrew [`MAX_BACKLOG`].
    pub overflowed: bool,
    start: u64,
    /// Samples written.
    pub samples: u64,
    /// Off-CPU intervals written (through [`Output::sample`], and not
    /// counted in `samples`).
    pub off_cpu: u64,
    /// Samples dropped because the writer was behind.
    pub dropped: u64,
    /// Of those, the ones a `Lost` record already tells of.
    dropped_told: u64,
    /// Records dropped for being larger than [`MAX_RECORD`].
    pub oversized: u64,
    failed: Arc<AtomicBool>,
    /// Wait for the writer rather than drop a sample or keep a record
    /// back (a file converted, where nothing is lost by waiting).
    wait_for_room: bool,
    /// The recording as a report reads it, made from the records as they
    /// are written ([`start_converting`]): a report of a converted file
    /// need not read back the recording it has just written.
    profile: Option<Box<crate::report::Profile>>,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("samples", &self.samples)
            .field("backlog", &self.backlog.len())
            .finish_non_exhaustive()
    }
}

/// The writer thread's outcome: bytes written, or the error that stopped
/// it.
pub(crate) type WriterResult = io::Result<u64>;

/// Starts the writer thread on `file`; returns the recorder's end and the
/// thread. The buffer's pages are mapped in now, so that a recording's
/// samples do not wait for page faults.
pub(crate) fn start(
    file: File,
    start: u64,
) -> Result<(Output, std::thread::JoinHandle<WriterResult>), ichnos_buf::topa::AllocError> {
    start_with(file, start, true)
}

/// [`start`] for a conversion (a perf.data file), which waits for room
/// rather than dropping records and whose recording is often a few
/// KiB: the buffer's pages are mapped in as they are first written
/// (populating all 4 MiB took 1.2 ms of a 26 ms report). The records
/// written also make a [`crate::report::Profile`], which
/// [`Output::end_with_profile`] hands back.
pub(crate) fn start_converting(
    file: File,
) -> Result<(Output, std::thread::JoinHandle<WriterResult>), ichnos_buf::topa::AllocError> {
    let (mut output, writer) = start_with(file, 0, false)?;
    output.wait_for_room();
    output.profile = Some(Box::default());
    Ok((output, writer))
}

fn start_with(
    file: File,
    start: u64,
    populate: bool,
) -> Result<(Output, std::thread::JoinHandle<WriterResult>), ichnos_buf::topa::AllocError> {
    let buffer = TopaBuffer::init(
        0,
        BUFFER_PAGES,
        AllocFlags {
            populate,
            ..AllocFlags::default()
        },
        Config {
            mode: Mode::StopOnFull,
            stop: Granularity::Byte,
            notify: Granularity::Byte,
            wakeup_watermark: 64 << 10,
            pad_byte: 0,
        },
    )?;
    let (producer, consumer) = buffer.split()?;
    let failed = Arc::new(AtomicBool::new(false));
    let flag = FailFlag(Arc::clone(&failed), true);
    let thread = std::thread::Builder::new()
        .name("ichnos-writer".into())
        .spawn(move || {
            let mut flag = flag;
            let result = write_loop(consumer, file);
            // Set on an error, and by the guard's drop on a panic.
            flag.1 = result.is_err();
            result
        })
        .map_err(|source| ichnos_buf::topa::AllocError::Os {
            what: "starting the writer thread",
            source,
        })?;
    Ok((
        Output {
            producer,
            record: Vec::with_capacity(4096),
            scratch: Vec::with_capacity(4096),
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            overflowed: false,
            start,
            samples: 0,
            off_cpu: 0,
            dropped: 0,
            dropped_told: 0,
            oversized: 0,
            failed,
            wait_for_room: false,
            profile: None,
        },
        thread,
    ))
}

/// Raises the flag when dropped with `.1` set: the writer's outcome, seen
/// by the recorder even if the writer panics.
struct FailFlag(Arc<AtomicBool>, bool);

impl Drop for FailFlag {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::Release);
        }
    }
}

fn write_loop(mut consumer: Consumer, file: File) -> WriterResult {
    let mut writer = Writer::new(file)?;
    let mut bytes = Vec::new();
    let mut last_chunk = Instant::now();
    loop {
        let outcome = consumer.wait(Some(Duration::from_millis(200)));
        bytes.clear();
        consumer.read_into(&mut bytes);
        writer.push_encoded(&bytes)?;
        if last_chunk.elapsed() >= CHUNK_INTERVAL {
            writer.flush_chunk()?;
            last_chunk = Instant::now();
        }
        if outcome == WaitOutcome::ProducerGone && consumer.available() == 0 {
            writer.flush_chunk()?;
            return Ok(writer.written());
        }
    }
}

impl Output {
    /// `time` (`CLOCK_MONOTONIC`) as the recording counts it: from the
    /// start.
    pub fn rel(&self, time: u64) -> u64 {
        time.saturating_sub(self.start)
    }

    /// Whether the writer thread stopped on an error.
    pub fn writer_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Counts times from `start` (a converted file's first timestamp):
    /// only the first call counts.
    pub fn set_start(&mut self, start: u64) {
        if self.start == 0 {
            self.start = start;
        }
    }

    /// From now on, waits for the writer to make room rather than drop
    /// samples or keep records back: for a recording made from a file,
    /// where waiting loses nothing.
    pub fn wait_for_room(&mut self) {
        self.wait_for_room = true;
    }

    /// With [`Output::wait_for_room`], waits until the record encoded
    /// fits, or the writer has stopped; whether it was written.
    fn write_waiting(&mut self) -> bool {
        loop {
            if self.flush_backlog() && self.producer.write_record(&self.record).is_ok() {
                return true;
            }
            if self.writer_failed() {
                return false;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Writes a record that later records may refer to: kept back if the
    /// writer is behind, never dropped (unless it could never fit).
    pub fn meta(&mut self, record: &Record<'_>) {
        self.record.clear();
        record.encode(&mut self.record, &mut self.scratch);
        if self.record.len() > MAX_RECORD {
            self.oversized += 1;
            return;
        }
        if self.wait_for_room {
            if self.write_waiting() {
                self.also_to_profile(record);
            }
            return;
        }
        if self.flush_backlog() && self.producer.write_record(&self.record).is_ok() {
            return;
        }
        if self.writer_failed() {
            return;
        }
        if self.backlog_bytes + self.record.len() > MAX_BACKLOG {
            self.overflowed = true;
            return;
        }
        self.backlog_bytes += self.record.len();
        self.backlog.push_back(self.record.clone());
    }

    /// Whether records are being kept back: samples that would add stacks
    /// had better be dropped before they do.
    pub fn behind(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Counts a sample dropped before it was encoded.
    pub fn drop_sample(&mut self) {
        self.dropped += 1;
    }

    /// Writes a sample (or an off-CPU interval); dropped and counted if
    /// the writer is behind.
    pub fn sample(&mut self, record: &Record<'_>) {
        self.record.clear();
        record.encode(&mut self.record, &mut self.scratch);
        let written = if self.wait_for_room {
            self.write_waiting()
        } else {
            self.flush_backlog() && self.producer.write_record(&self.record).is_ok()
        };
        match (written, record) {
            (false, _) => self.dropped += 1,
            (true, Record::OffCpu { .. }) => self.off_cpu += 1,
            (true, _) => self.samples += 1,
        }
        if written {
            self.also_to_profile(record);
        }
    }

    /// A record written: into the profile too, where one is made (only
    /// while waiting for room, where records are written in order, none
    /// kept back).
    fn also_to_profile(&mut self, record: &Record<'_>) {
        if let Some(profile) = self.profile.as_mut() {
            profile.add(record);
        }
    }

    /// Tells, in a `Lost` record, of the samples dropped since it last did
    /// (once the writer has caught up: one record for a whole stall).
    pub fn tell_drops(&mut self, time: u64) {
        let new = self.dropped - self.dropped_told;
        if new > 0 && !self.behind() {
            self.dropped_told = self.dropped;
            self.lost(time, 0, new, LostCause::Recorder);
        }
    }

    /// Counts lost samples or records.
    pub fn lost(&mut self, time: u64, cpu: u32, count: u64, cause: LostCause) {
        self.meta(&Record::Lost {
            time: self.rel(time),
            cpu: u64::from(cpu),
            count,
            cause,
        });
    }

    /// Writes what was kept back; whether all of it went.
    fn flush_backlog(&mut self) -> bool {
        while let Some(record) = self.backlog.front() {
            if self.producer.write_record(record).is_err() {
                return false;
            }
            self.backlog_bytes -= record.len();
            self.backlog.pop_front();
        }
        true
    }

    /// Writes the last records and lets the writer finish (which is
    /// `writer`): waits while it makes room, not once it has stopped.
    pub fn close(mut self, writer: &std::thread::JoinHandle<WriterResult>) {
        while !self.flush_backlog() && !self.writer_failed() && !writer.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(self.producer);
    }

    /// Ends the recording: its end record (at `time`, a clock time, with
    /// the samples written and `lost` samples lost), then closes the
    /// buffer and waits for `writer`, whose outcome is returned.
    pub fn end(
        self,
        writer: std::thread::JoinHandle<WriterResult>,
        time: u64,
        lost: u64,
    ) -> WriterResult {
        self.end_with_profile(writer, time, lost).0
    }

    /// [`Output::end`], handing back the profile made of the records
    /// written, where one was made ([`start_converting`]).
    pub fn end_with_profile(
        mut self,
        writer: std::thread::JoinHandle<WriterResult>,
        time: u64,
        lost: u64,
    ) -> (WriterResult, Option<crate::report::Profile>) {
        let samples = self.samples;
        self.meta(&Record::End {
            time: self.rel(time),
            samples,
            lost,
        });
        let profile = self.profile.take().map(|p| *p);
        self.close(&writer);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the writer thread panicked")));
        (written, profile)
    }
}
