//! Reading a circular buffer's rings while their threads write:
//! [`FillBuffer::newest_first`] (the calling thread's) and
//! [`FillBuffer::snapshot_threads`] (every thread's), and the records
//! they give, [`RingRecords`].

use std::sync::atomic::Ordering;

use super::slot::SnapshotBy;
use super::{thread, FillBuffer, Kind};

impl FillBuffer {
    /// Circular buffers: this thread's records, newest first. `None` for
    /// a trace buffer, or inside a signal handler that interrupted a
    /// write to this buffer.
    #[must_use]
    pub fn newest_first(&self) -> Option<RingRecords> {
        let shared = &*self.shared;
        let Kind::Circular { capacity, stride } = shared.kind else {
            return None;
        };
        thread::with_slot(shared.index, |slot| {
            if slot.owner.load(Ordering::Relaxed) != shared.id {
                return Some(RingRecords::empty(stride));
            }
            let mut bytes = Vec::new();
            let position = slot.ring_snapshot(capacity, stride, &mut bytes, SnapshotBy::Owner)?;
            Some(RingRecords {
                bytes,
                stride,
                position,
            })
        })
    }

    /// Circular buffers: every live thread's records, newest first, read
    /// while the threads go on writing (records overwritten during the
    /// copy, and one being written, are left out). A thread stopped
    /// inside a write for good (it crashed there) gives the records below
    /// the open one; the calling thread, when this runs in a signal
    /// handler that interrupted one of its writes, is skipped.
    #[must_use]
    pub fn snapshot_threads(&self) -> Vec<(i32, RingRecords)> {
        let shared = &*self.shared;
        let Kind::Circular { capacity, stride } = shared.kind else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let me = thread::current_tid();
        thread::for_each_thread_slot(shared.index, |tid, slot| {
            if slot.owner.load(Ordering::Acquire) != shared.id {
                return;
            }
            let mut bytes = Vec::new();
            let by = if tid == me {
                SnapshotBy::Owner
            } else {
                SnapshotBy::OtherThread
            };
            if let Some(position) = slot.ring_snapshot(capacity, stride, &mut bytes, by) {
                out.push((
                    tid,
                    RingRecords {
                        bytes,
                        stride,
                        position,
                    },
                ));
            }
        });
        out
    }
}

/// A circular buffer's records, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingRecords {
    bytes: Vec<u8>,
    stride: usize,
    position: u64,
}

impl RingRecords {
    fn empty(stride: usize) -> RingRecords {
        RingRecords {
            bytes: Vec::new(),
            stride,
            position: 0,
        }
    }

    /// The records, newest first, each `stride` bytes.
    pub fn iter(&self) -> std::slice::Chunks<'_, u8> {
        self.bytes.chunks(self.stride)
    }

    /// How many records.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bytes.len() / self.stride
    }

    /// True when there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Byte position after the newest record: the number of bytes ever
    /// written, so `position / capacity` is how often the ring wrapped.
    #[must_use]
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl<'a> IntoIterator for &'a RingRecords {
    type Item = &'a [u8];
    type IntoIter = std::slice::Chunks<'a, u8>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
