//! A writer's chunks compressed and written on a thread of its own: the
//! caller hands over each gathered chunk and goes on gathering the next.
//! Chunks go through a channel in order, at most [`CHUNKS_WAITING`] of
//! them waiting (the caller waits for room past that: memory stays
//! bounded when the disk or the compressor is slower than the caller);
//! their buffers come back emptied to be filled again. The thread stops
//! at its first error, which the caller gets when it next hands over a
//! chunk, flushes or finishes.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::ChunkOut;

/// Chunks handed over that the thread has not taken yet, at most.
const CHUNKS_WAITING: usize = 2;

/// What the thread is asked to do.
enum Job {
    /// Write this chunk of so many records.
    Chunk(Vec<u8>, u32),
    /// Flush the output, then say so.
    Flush(SyncSender<()>),
}

/// The caller's end of the thread.
pub(super) struct ChunkThread<W> {
    /// `None` once stopped.
    jobs: Option<SyncSender<Job>>,
    /// Chunk buffers the thread is done with.
    spare: Option<Receiver<Vec<u8>>>,
    thread: Option<JoinHandle<io::Result<W>>>,
    /// Bytes the thread has written, the file header's included.
    written: Arc<AtomicU64>,
}

impl<W: Write + Send + 'static> ChunkThread<W> {
    /// Starts the thread, which writes through `out` from now on; `out`
    /// back if the thread could not be started.
    pub(super) fn start(out: ChunkOut<W>) -> Result<Self, ChunkOut<W>> {
        // `out` goes to the thread once it runs: a thread that cannot be
        // started leaves it here.
        let (give, take) = mpsc::sync_channel::<ChunkOut<W>>(1);
        let (jobs, jobs_in) = mpsc::sync_channel::<Job>(CHUNKS_WAITING);
        let (spare_out, spare) = mpsc::sync_channel::<Vec<u8>>(CHUNKS_WAITING + 1);
        let written = Arc::new(AtomicU64::new(out.written));
        let counted = Arc::clone(&written);
        let started = std::thread::Builder::new()
            .name("ichnos-chunks".into())
            .spawn(move || {
                let mut out = take
                    .recv()
                    .map_err(|_| io::Error::other("the recording's output never came"))?;
                for job in jobs_in {
                    match job {
                        Job::Chunk(mut raw, records) => {
                            // (Checked below 16 MiB where it was handed over.)
                            let raw_len = raw.len() as u32;
                            out.write_chunk(&raw, raw_len, records)?;
                            // Flushed as the caller's writer flushes each
                            // chunk: a reader sees it even if the process
                            // is killed next.
                            out.out.flush()?;
                            counted.store(out.written, Ordering::Relaxed);
                            raw.clear();
                            // Dropped if the caller has enough.
                            let _ = spare_out.try_send(raw);
                        }
                        Job::Flush(done) => {
                            out.out.flush()?;
                            let _ = done.send(());
                        }
                    }
                }
                Ok(out.out)
            });
        let Ok(thread) = started else {
            return Err(out);
        };
        // The thread takes it: the channel has room for it.
        if let Err(mpsc::TrySendError::Full(out) | mpsc::TrySendError::Disconnected(out)) =
            give.try_send(out)
        {
            return Err(out);
        }
        Ok(Self {
            jobs: Some(jobs),
            spare: Some(spare),
            thread: Some(thread),
            written,
        })
    }
}

impl<W> ChunkThread<W> {
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// A buffer for the next chunk: one the thread is done with, or a new
    /// one of `capacity` bytes.
    pub(super) fn spare_buffer(&self, capacity: usize) -> Vec<u8> {
        self.spare
            .as_ref()
            .and_then(|s| s.try_recv().ok())
            .unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    /// Hands `chunk` (of `records` records) to the thread, waiting while
    /// [`CHUNKS_WAITING`] others do.
    pub(super) fn hand_over(&mut self, chunk: Vec<u8>, records: u32) -> io::Result<()> {
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(Job::Chunk(chunk, records)).is_ok());
        if sent {
            Ok(())
        } else {
            Err(self.stop())
        }
    }

    /// Waits until the thread has written every chunk handed to it and
    /// flushed the output.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        let (done, flushed) = mpsc::sync_channel(1);
        let asked = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(Job::Flush(done)).is_ok());
        if asked && flushed.recv().is_ok() {
            Ok(())
        } else {
            Err(self.stop())
        }
    }

    /// Lets the thread write what it has and end; the output.
    pub(super) fn finish(mut self) -> io::Result<W> {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other(
                "the thread writing the recording panicked",
            )),
            None => Err(io::Error::other("an earlier write of the recording failed")),
        }
    }

    /// The thread stopped (its error) or is stopped now: why.
    fn stop(&mut self) -> io::Error {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Ok(Ok(_))) => io::Error::other("the thread writing the recording stopped"),
            Some(Err(_)) => io::Error::other("the thread writing the recording panicked"),
            None => io::Error::other("an earlier write of the recording failed"),
        }
    }
}

impl<W> Drop for ChunkThread<W> {
    /// A writer dropped unfinished: what was handed over is still
    /// written (the thread ends when it has).
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
