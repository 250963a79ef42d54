//! The recorder's reading of a traced process's shared buffer, driven
//! from bytes alone: what the fuzz target `fuzz/fuzz_targets/trace_frames.rs`
//! calls. The bytes are what a process (untrusted: it writes its shared
//! buffer as it likes) could have left there; they are read a piece at a
//! time as the recorder reads them, into a recording.

use std::path::Path;

use super::frames::{self, CutFrame};
use super::{open_output, Conn, TraceError, TraceOptions};
use ichnos_data::Record;

/// Reads `bytes` as a process's shared buffer of `capacity` bytes would
/// hold them, into a recording at `path`: in pieces ending at `cuts`
/// (offsets into `bytes`; a piece's cut frame left for the next piece
/// where `leave` says so for it, as the recorder leaves the end of a
/// read's last piece), then the connection's end. What the recorder
/// refused of them, said as it says it.
///
/// # Errors
/// The recording could not be written.
pub fn read_shared_buffer(
    bytes: &[u8],
    cuts: &[usize],
    leave: &[bool],
    capacity: u64,
    path: &Path,
) -> Result<Vec<String>, TraceError> {
    let options = TraceOptions::offline(path);
    let mut out = open_output(path, &options, false)?;
    let mut conn = Conn::offline(vec![(0x1000, 0x10_0000)]).map_err(TraceError::Socket)?;
    let mut start = 0;
    let ends = cuts
        .iter()
        .map(|&c| c.min(bytes.len()))
        .chain([bytes.len()]);
    for (i, end) in ends.enumerate() {
        if end <= start {
            continue;
        }
        let cut = if leave.get(i).copied().unwrap_or(false) {
            CutFrame::Leave {
                earlier_pieces: false,
            }
        } else {
            CutFrame::Carry
        };
        let left = frames::frames_read(&mut conn, &mut out, &bytes[start..end], capacity, cut)?;
        start = end - left;
    }
    if start < bytes.len() {
        frames::frames_read(
            &mut conn,
            &mut out,
            &bytes[start..],
            capacity,
            CutFrame::Carry,
        )?;
    }
    frames::end_of_connection(&mut conn, &mut out)?;
    let time = out.time();
    out.push(&Record::End {
        time,
        samples: out.kept,
        lost: out.lost,
    })?;
    let refused = std::mem::take(&mut out.refused);
    out.writer.finish().map_err(|source| TraceError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(refused)
}
