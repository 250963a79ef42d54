//! The recorder's reading of a traced process's shared buffer, driven
//! from bytes alone: what the fuzz target `fuzz/fuzz_targets/trace_frames.rs`
//! calls. The bytes are what a process (untrusted: it writes its shared
//! buffer as it likes) could have left there; they are read a piece at a
//! time as the recorder reads them, into a recording.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustc_hash::FxHashMap;

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
    let options = TraceOptions {
        command: vec!["fuzzed".into()],
        output: path.to_path_buf(),
        preload: path.with_extension("so"),
        buffer: None,
        ring: None,
        depth: None,
        min_duration: None,
        only: Vec::new(),
        not: Vec::new(),
        monotonic: true,
        compress_on_a_thread: Some(false),
    };
    let mut out = open_output(path, &options, false)?;
    let socket = File::open("/dev/null").map_err(TraceError::Socket)?;
    let mut conn = Conn {
        socket: OwnedFd::from(socket),
        consumer: None,
        // A process that is not there: its names and maps are not read.
        pid: u32::MAX - 1,
        asid: 1,
        carry: Vec::new(),
        exec: vec![(0x1000, 0x10_0000)],
        exec_hit: 0,
        exec_marks: Vec::new(),
        walks: FxHashMap::default(),
        closed: false,
    };
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
