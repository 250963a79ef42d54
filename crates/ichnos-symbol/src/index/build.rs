//! Building an index: every address at which an answer can change, and
//! the answer from each one up to the next.
//!
//! An address's frames depend on the line-table row, the compilation
//! unit, the functions and inlined functions, and the symbol that contain
//! it. Between two consecutive starts or ends of any of these, all of them
//! stay the same, so the answer does too: asking the live symbolizer once
//! per such interval gives an index that answers every address exactly as
//! it would.

use std::collections::HashMap;
use std::sync::Arc;

use super::format::{
    self, Contents, Identity, RawFrame, HAS_COLUMN, HAS_LINE, HAS_START, INLINED, LAST, NONE,
};
use crate::frame::{frames, Frame};
use crate::object_file::{LoadedObject, Reader};

/// Why an object was not indexed.
pub(crate) type Refusal = String;

/// The index contents for `object` (with this build id and file size).
/// `progress` is told (intervals done, intervals in all) as the work goes.
pub(crate) fn build(
    object: &LoadedObject,
    build_id: &[u8],
    object_size: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Contents, Refusal> {
    let Some(sections) = &object.sections else {
        return Err(
            "no DWARF: its symbol tables are read directly, with nothing to gain from an index"
                .into(),
        );
    };
    if let Some(first) = object.refused.first() {
        return Err(format!("its debug information is incomplete ({first})"));
    }
    let Some(source_kind) = format::source_kind(&object.source) else {
        return Err(format!("answers from {}", object.source));
    };
    if build_id.is_empty() || build_id.len() > format::MAX_BUILD_ID {
        return Err(format!("build id of {} bytes", build_id.len()));
    }
    let bounds = boundaries(object, sections).map_err(|e| format!("reading its DWARF: {e}"))?;
    let mut out = Contents {
        identity: Identity {
            build_id: build_id.to_vec(),
            object_size,
            source_kind,
            source_path: NONE,
            generator: format::generator(),
            ..Identity::default()
        },
        ..Contents::default()
    };
    let mut strings = Strings::default();
    if let crate::DebugSource::BuildId(p) | crate::DebugSource::DebugLink(p) = &object.source {
        // Stored whole, so that the check on opening does not depend on
        // the directory a later run starts in.
        let p = &std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let (size, mtime_ns) = super::stamp(p)
            .ok_or_else(|| format!("{}: cannot read its size and time", p.display()))?;
        (out.identity.debug_size, out.identity.debug_mtime_ns) = (size, mtime_ns);
        // Index strings are UTF-8; a path changed to fit would name
        // another file, and the index would never be used.
        let Some(text) = p.to_str() else {
            return Err(format!(
                "its debug file's path {} is not UTF-8",
                p.display()
            ));
        };
        out.identity.source_path = strings.id(Some(&Arc::from(text)));
    }
    let unknown = vec![Frame::default()];
    // Answers already stored, by a hash of their frames: the first frame
    // of one with that hash (compared before it is shared).
    let mut answers: HashMap<u64, u32> = HashMap::new();
    let mut previous: Option<(Vec<RawFrame>, Option<u32>)> = None;
    let mut raw = Vec::new();
    for (done, &start) in bounds.iter().enumerate() {
        if done % 65536 == 0 {
            progress(done, bounds.len());
        }
        let answer = frames(object, start, true, true);
        raw.clear();
        if answer != unknown {
            stored_frames(&answer, &mut strings, &mut raw);
        }
        if raw.len() > format::MAX_ANSWER_FRAMES {
            return Err(format!(
                "the address {start:#x} has {} frames, more than an index holds ({})",
                raw.len(),
                format::MAX_ANSWER_FRAMES
            ));
        }
        let why = raw
            .is_empty()
            .then(|| format::unknown_answer(crate::frame::unnamed(object, start)));
        if previous
            .as_ref()
            .is_some_and(|(r, w)| *r == raw && *w == why)
        {
            continue;
        }
        let first = match why {
            Some(code) => code,
            None => shared(&raw, &mut answers, &mut out.frames)?,
        };
        out.ranges.push((start, first));
        previous = Some((raw.clone(), why));
    }
    progress(bounds.len(), bounds.len());
    if out.ranges.is_empty() {
        out.ranges.push((0, NONE));
    }
    if out.frames.len() >= NONE as usize
        || out.ranges.len() >= NONE as usize
        || strings.list.len() >= NONE as usize
        || strings.bytes >= u64::from(NONE)
    {
        return Err("more than an index holds".into());
    }
    out.strings = strings.list;
    Ok(out)
}

/// The first frame of `raw` in `frames`: an answer already stored with the
/// same frames (found by their hash in `answers`), else `raw` appended.
fn shared(
    raw: &[RawFrame],
    answers: &mut HashMap<u64, u32>,
    frames: &mut Vec<RawFrame>,
) -> Result<u32, String> {
    let hash = hash_of(raw);
    let stored = answers
        .get(&hash)
        .copied()
        .filter(|&id| frames.get(id as usize..id as usize + raw.len()) == Some(raw));
    if let Some(id) = stored {
        return Ok(id);
    }
    let id = u32::try_from(frames.len())
        .ok()
        .filter(|&id| !format::is_unknown(id))
        .ok_or("more frames than an index holds")?;
    frames.extend_from_slice(raw);
    answers.insert(hash, id);
    Ok(id)
}

/// `answer`'s frames as stored, appended to `raw`.
fn stored_frames(answer: &[Frame], strings: &mut Strings, raw: &mut Vec<RawFrame>) {
    raw.extend(answer.iter().enumerate().map(|(i, f)| {
        RawFrame {
            function: strings.id(f.function.as_ref()),
            raw_function: strings.id(f.raw_function.as_ref()),
            file: strings.id(f.file.as_ref()),
            line: f.line.unwrap_or(0),
            column: f.column.unwrap_or(0),
            function_start: f.function_start.unwrap_or(0),
            flags: [
                (f.inlined, INLINED),
                (f.line.is_some(), HAS_LINE),
                (f.column.is_some(), HAS_COLUMN),
                (i + 1 == answer.len(), LAST),
                (f.function_start.is_some(), HAS_START),
            ]
            .iter()
            .filter(|(set, _)| *set)
            .fold(0, |flags, (_, flag)| flags | flag),
        }
    }));
}

fn hash_of(frames: &[RawFrame]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(frames)
}

/// The strings of an index, each stored once.
#[derive(Default)]
struct Strings {
    ids: HashMap<Arc<str>, u32>,
    list: Vec<Arc<str>>,
    bytes: u64,
}

impl Strings {
    fn id(&mut self, s: Option<&Arc<str>>) -> u32 {
        let Some(s) = s else { return NONE };
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = u32::try_from(self.list.len()).unwrap_or(NONE);
        self.bytes += s.len() as u64;
        self.list.push(Arc::clone(s));
        self.ids.insert(Arc::clone(s), id);
        id
    }
}

/// Every address at which what contains it may change: starts and ends
/// of symbols, their sections and the allocated sections, unit ranges
/// (and `.debug_aranges`), line-table rows, and the
/// ranges of functions and inlined functions (in split DWARF files too).
/// Sorted, each once.
fn boundaries(
    object: &LoadedObject,
    sections: &Arc<gimli::Dwarf<Reader>>,
) -> Result<Vec<u64>, String> {
    // From address 0: what lies below every other bound is answered (and
    // its reason kept) as the DWARF path answers it, not left to readers.
    let mut out = vec![0];
    for s in &object.symbols {
        out.extend([s.addr, s.addr.saturating_add(s.size), s.section_end]);
    }
    for &(start, end) in &object.alloc_ranges {
        out.extend([start, end]);
    }
    let dwarf: &gimli::Dwarf<Reader> = sections;
    arange_boundaries(dwarf, &mut out);
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let at = header.offset();
        let unit = dwarf
            .unit(header)
            .map_err(|e| format!("unit at {at:?}: {e}"))?;
        unit_boundaries(dwarf, &unit, &mut out).map_err(|e| format!("unit at {at:?}: {e}"))?;
        let Some(dwo_id) = unit.dwo_id else { continue };
        let path = unit
            .dwo_name()
            .ok()
            .flatten()
            .and_then(|name| dwarf.attr_string(&unit, name).ok());
        let load = addr2line::SplitDwarfLoad {
            dwo_id,
            comp_dir: unit.comp_dir.clone(),
            path,
            parent: Arc::clone(sections),
        };
        let Some(dwo) = object.dwo(&load) else {
            return Err(format!(
                "the split DWARF file of the unit at {at:?} (dwo id {:#x}) is not found",
                dwo_id.0
            ));
        };
        let mut dwo_units = dwo.units();
        while let Some(header) = dwo_units.next().map_err(|e| e.to_string())? {
            let mut split = dwo.unit(header).map_err(|e| e.to_string())?;
            split.copy_relocated_attributes(&unit);
            unit_boundaries(&dwo, &split, &mut out).map_err(|e| e.to_string())?;
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// [`boundaries`] of one unit: its ranges, its line rows, and the ranges
/// of its functions and inlined functions.
fn unit_boundaries(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
    out: &mut Vec<u64>,
) -> gimli::Result<()> {
    if let Some(program) = unit.line_program.clone() {
        let mut rows = program.rows();
        while let Some((_, row)) = rows.next_row()? {
            out.push(row.address());
        }
    }
    let mut entries = unit.entries();
    let mut root = true;
    while let Some(entry) = entries.next_dfs()? {
        // The unit's own DIE first: its ranges are the unit's.
        if root
            || matches!(
                entry.tag(),
                gimli::DW_TAG_subprogram
                    | gimli::DW_TAG_inlined_subroutine
                    | gimli::DW_TAG_entry_point
            )
        {
            die_bounds(dwarf, unit, entry, out)?;
        }
        root = false;
    }
    Ok(())
}

/// The starts and ends of a DIE's address ranges (`DW_AT_low_pc` with
/// `DW_AT_high_pc`, or `DW_AT_ranges`). gimli's `die_ranges` adds a
/// `high_pc` size unchecked, which panics on a crafted or tombstoned
/// `low_pc` near the top in debug builds; addresses wrap here, as in
/// addr2line.
fn die_bounds(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
    entry: &gimli::DebuggingInformationEntry<Reader>,
    out: &mut Vec<u64>,
) -> gimli::Result<()> {
    let (mut low, mut high, mut size) = (None, None, None);
    for attr in entry.attrs() {
        match attr.name() {
            gimli::DW_AT_low_pc => low = dwarf.attr_address(unit, attr.value())?,
            gimli::DW_AT_high_pc => match attr.value() {
                gimli::AttributeValue::Udata(n) => size = Some(n),
                value => high = dwarf.attr_address(unit, value)?,
            },
            gimli::DW_AT_ranges => {
                if let Some(mut ranges) = dwarf.attr_ranges(unit, attr.value())? {
                    while let Some(r) = ranges.next()? {
                        out.extend([r.begin, r.end]);
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(low) = low {
        out.push(low);
        out.extend(size.map(|n| low.wrapping_add(n)).or(high));
    }
    Ok(())
}

/// The starts and ends of every `.debug_aranges` entry: addr2line takes a
/// unit's ranges from there when the unit has no `DW_AT_ranges`. Entries
/// it cannot read it passes over, and so does this.
fn arange_boundaries(dwarf: &gimli::Dwarf<Reader>, out: &mut Vec<u64>) {
    let mut headers = dwarf.debug_aranges.headers();
    while let Ok(Some(header)) = headers.next() {
        let mut entries = header.entries();
        while let Ok(Some(entry)) = entries.next() {
            if entry.length() > 0 {
                out.extend([
                    entry.address(),
                    entry.address().wrapping_add(entry.length()),
                ]);
            }
        }
    }
}
