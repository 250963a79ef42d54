//! The frames of a traced process that are not events: its mappings
//! (and the resync from `/proc` where events name code the recorder has
//! no mapping of), the span names it sends before a span's first events,
//! and each thread's name before the thread's last frame.

use std::path::Path;

use ichnos_data::wire;
use ichnos_data::{JitSource, Record};

use super::{Conn, Out, TraceError};

/// Records the executable mappings of the process it does not have yet,
/// from `/proc/PID/maps` (while the process lives).
pub(super) fn resync(conn: &mut Conn, out: &mut Out) -> Result<(), TraceError> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{}/maps", conn.pid)) else {
        return Ok(());
    };
    add_maps(conn, out, &text)
}

/// Records the executable mappings of `text` (as `/proc/PID/maps`
/// lists them) the process does not have yet.
pub(super) fn add_maps(conn: &mut Conn, out: &mut Out, text: &str) -> Result<(), TraceError> {
    let Ok(entries) = ichnos_image::parse_maps(conn.pid, text) else {
        out.refused.push(format!(
            "process {}: its list of mappings could not be read",
            conn.pid
        ));
        return Ok(());
    };
    let time = out.time();
    for m in entries.iter().filter(|m| m.perms.contains('x')) {
        let range = (m.range.start, m.range.end);
        if conn.exec.contains(&range) {
            continue;
        }
        conn.exec.push(range);
        let path: &[u8] = if m.name.is_empty() {
            b"//anon"
        } else {
            m.name.as_bytes()
        };
        let build_id = if path.first() == Some(&b'/') {
            ichnos_code::elf::identity_of_file(Path::new(&m.name))
                .0
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        out.push(&Record::Mapping {
            asid: conn.asid,
            start: m.range.start,
            len: m.range.end - m.range.start,
            pgoff: m.offset,
            time,
            path,
            build_id: &build_id,
            flags: ichnos_data::MAPPING_EXECUTABLE,
        })?;
    }
    Ok(())
}

/// Span names recorded at most (over all processes); past it, spans go
/// unnamed.
const MAX_SPAN_NAMES: usize = 1 << 16;

/// A thread's name as the runtime sent it, before the thread's last
/// frame: the thread's `Thread` record (again, where the name changed).
pub(super) fn thread_named(
    conn: &Conn,
    out: &mut Out,
    tid: u32,
    name: &[u8],
) -> Result<(), TraceError> {
    if name.is_empty() {
        return Ok(());
    }
    let mut key = [0u8; 16];
    key[..name.len()].copy_from_slice(name);
    if out.thread_names.insert((conn.pid, tid), key) == Some(key) {
        return Ok(());
    }
    out.threads.insert((conn.pid, tid));
    let time = out.time();
    out.push(&Record::Thread {
        pid: u64::from(conn.pid),
        tid: u64::from(tid),
        time,
        name,
    })
}

/// A names frame: each span name new to the address space becomes a
/// `JitCode` record (source: span) over the one byte at its address.
pub(super) fn add_span_names(conn: &Conn, out: &mut Out, body: &[u8]) -> Result<(), TraceError> {
    for (address, name) in wire::span_names(body) {
        if out.span_names.len() >= MAX_SPAN_NAMES {
            break;
        }
        let address = address & wire::MAX_ADDRESS;
        if !out.span_names.insert((conn.asid, address)) {
            continue;
        }
        out.push(&Record::JitCode {
            asid: conn.asid,
            start: address,
            end: address + 1,
            source: JitSource::Span,
            name,
        })?;
    }
    Ok(())
}
