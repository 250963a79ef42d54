//! A recording's samples one by one, in the order recorded: the second
//! pass of the outputs that are timelines, after [`Profile::read`] summed
//! them per stack.

use std::io::Read;

use ichnos_data::{ReadError, Reader, Record};

#[cfg(doc)]
use super::load::Profile;
use super::load::Sample;

/// Reads a recording's samples one by one, in the order recorded, for the
/// outputs that are timelines: a second pass over a recording that
/// [`Profile::read`] read first. Reading stops where that read stopped:
/// at the end, or at a cut (which [`Profile::truncated`] already holds);
/// anything else wrong is the error.
pub fn for_each_sample(input: impl Read, mut f: impl FnMut(Sample)) -> Result<(), ReadError> {
    let mut reader = Reader::new(input)?;
    loop {
        match reader.next_chunk() {
            Ok(Some(chunk)) => {
                for record in chunk.records() {
                    match record? {
                        Record::Sample {
                            time,
                            pid,
                            tid,
                            stack,
                            weight,
                            ..
                        } => f(Sample {
                            time,
                            pid: pid as u32,
                            tid: tid as u32,
                            stack,
                            weight,
                            off_cpu: None,
                        }),
                        Record::OffCpu {
                            time,
                            pid,
                            tid,
                            stack,
                            duration,
                            state,
                            ..
                        } => f(Sample {
                            time,
                            pid: pid as u32,
                            tid: tid as u32,
                            stack,
                            weight: duration,
                            off_cpu: Some(state),
                        }),
                        _ => {}
                    }
                }
            }
            Ok(None) => return Ok(()),
            Err(e) if e.is_truncation() => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
