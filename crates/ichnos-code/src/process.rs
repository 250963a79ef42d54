//! Code maps of processes from their file mappings, and stacks of live
//! threads.
//!
//! Most processes register nothing. Their code is found in
//! `/proc/PID/maps`: each executable file mapping becomes a code object
//! whose rows come from the file (SFrame, then `.eh_frame`), converted once
//! per build id and shared. A thread's stack is taken by stopping it for a
//! moment with ptrace, reading its registers and its stack, and letting it
//! go: what `ichnos stack` prints and what a recorder does per sample.

use std::collections::HashMap;
use std::sync::Arc;

use ichnos_image::MapsEntry;

use crate::code_map::{CodeMap, CodeObject, RowSource, Rows};
use crate::elf::{file_rows, RowChoice};
use crate::memory::ProcessMemory;
use crate::row::RowTable;
use crate::unwind::{unwind, Regs, Unwind, UnwindOptions};

/// A mapping that got no code object, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedCode {
    /// The mapped file.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// The code map of a process and what was left out of it.
#[derive(Debug, Default)]
pub struct ProcessCode {
    /// Code objects for the executable file mappings.
    pub map: CodeMap,
    /// Executable mappings without rows (they unwind by frame pointers).
    pub skipped: Vec<SkippedCode>,
}

/// Builds a code map from a process's mappings: one code object per
/// executable file mapping, with the file's rows as `choice` says.
#[must_use]
pub fn code_map_from_maps(entries: &[MapsEntry], choice: RowChoice) -> ProcessCode {
    let mut out = ProcessCode::default();
    let mut per_file: HashMap<&str, Result<(Arc<RowTable>, RowSource), String>> = HashMap::new();
    for (m, origin) in executable_file_mappings(entries) {
        let Some(origin) = origin else {
            out.skipped.push(SkippedCode {
                path: m.name.clone(),
                reason: "no mapping of the file's first page".into(),
            });
            continue;
        };
        let table = per_file
            .entry(m.name.as_str())
            .or_insert_with(|| rows_for_file(&m.name, choice))
            .clone();
        let (table, source) = match table {
            Ok(t) => t,
            Err(reason) => {
                out.skipped.push(SkippedCode {
                    path: m.name.clone(),
                    reason,
                });
                continue;
            }
        };
        let object = CodeObject {
            start: m.range.start,
            end: m.range.end,
            bias: origin,
            rows: Rows::Fixed(table),
            source,
            name: Arc::from(m.name.as_str()),
        };
        if let Err(e) = out.map.insert(Arc::new(object)) {
            out.skipped.push(SkippedCode {
                path: m.name.clone(),
                reason: e.to_string(),
            });
        }
    }
    out
}

/// The file's rows and their main source (SFrame if the file has it and
/// `choice` allows it).
/// The executable mappings of files, each with the file's ELF origin:
/// where its first page is mapped (`None` if it is not).
pub fn executable_file_mappings(
    entries: &[MapsEntry],
) -> impl Iterator<Item = (&MapsEntry, Option<u64>)> {
    entries
        .iter()
        .filter(|m| m.perms.contains('x') && m.name.starts_with('/'))
        .map(|m| {
            let origin = entries
                .iter()
                .find(|o| o.name == m.name && o.offset == 0)
                .map(|o| o.range.start);
            (m, origin)
        })
}

fn rows_for_file(path: &str, choice: RowChoice) -> Result<(Arc<RowTable>, RowSource), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let (build_id, _) = crate::elf::identity(&bytes);
    let table = crate::registry::row_cache().get_or_make(build_id.as_deref(), choice, || {
        file_rows(&bytes, choice)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    })?;
    let sframe = match choice {
        RowChoice::Sframe => true,
        RowChoice::EhFrame => false,
        RowChoice::SframeThenEhFrame => crate::elf::has_section(&bytes, ".sframe"),
    };
    let source = if sframe {
        RowSource::Sframe
    } else {
        RowSource::EhFrame
    };
    Ok((table, source))
}

/// The code map of live process `pid`, from `/proc/PID/maps`.
pub fn code_map_for_process(pid: u32, choice: RowChoice) -> std::io::Result<ProcessCode> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let entries =
        ichnos_image::parse_maps(pid, &text).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(code_map_from_maps(&entries, choice))
}

/// A thread's stack as taken by [`take_stack`].
#[derive(Clone, Debug)]
pub struct ThreadStack {
    /// The thread.
    pub tid: u32,
    /// Its registers when it was stopped.
    pub regs: Regs,
    /// Up to `max_stack` bytes of its stack from SP.
    pub stack: Vec<u8>,
}

/// Stops thread `tid` for as long as it takes to read its registers and
/// up to `max_stack` bytes of its stack, then lets it go (ptrace; needs the
/// permission to trace it).
#[cfg(target_arch = "x86_64")]
pub fn take_stack(tid: u32, max_stack: usize) -> std::io::Result<ThreadStack> {
    crate::sys::with_stopped_thread(tid.cast_signed(), |r| {
        let mut stack = vec![0u8; max_stack];
        // A read running past the end of the stack mapping stops there.
        let n = crate::sys::process_vm_read(tid.cast_signed(), r.sp, &mut stack).unwrap_or(0);
        stack.truncate(n);
        ThreadStack {
            tid,
            regs: Regs {
                ip: r.ip,
                sp: r.sp,
                fp: r.fp,
            },
            stack,
        }
    })
}

/// Unwinds a taken stack against `map`, reading beyond the copy from the
/// live process if it is still there.
#[must_use]
pub fn unwind_thread(map: &CodeMap, stack: &ThreadStack, options: &UnwindOptions) -> Unwind {
    unwind(
        map,
        stack.regs,
        &stack.stack,
        &mut ProcessMemory::new(stack.tid),
        options,
    )
}
