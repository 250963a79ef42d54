//! Self-registration: every object loaded in this process, registered as a
//! dynamic loader would with codectl.

use std::path::PathBuf;

use crate::code_map::Overlap;
use crate::elf::ELF_START_ALIGN;
use crate::registration::{path_from_bytes, ElfCode};
use crate::registry::{Registry, RegistryError};
use crate::sys::loaded_objects;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const PT_GNU_SFRAME: u32 = 0x6474_e554;
const PF_X: u32 = 1;
/// `NT_GNU_BUILD_ID`, in a note named `GNU`.
const NT_GNU_BUILD_ID: u32 = 3;
/// Most bytes of notes read from one segment.
const MAX_NOTES: u64 = 64 << 10;

/// The GNU build id in the loaded notes of an object (its `PT_NOTE`
/// segments, at `bias` plus their addresses): the id of the code that is
/// loaded, read from memory, whatever the file on disk holds now.
fn build_id_in_memory(phdrs: &[libc::Elf64_Phdr], bias: u64) -> Option<Vec<u8>> {
    for note in phdrs.iter().filter(|p| p.p_type == PT_NOTE) {
        let len = usize::try_from(note.p_memsz.min(MAX_NOTES)).ok()?;
        let mut bytes = vec![0u8; len];
        let pid = libc::pid_t::try_from(std::process::id()).ok()?;
        let read =
            crate::sys::process_vm_read(pid, bias.wrapping_add(note.p_vaddr), &mut bytes).ok()?;
        if let Some(id) = gnu_build_id(&bytes[..read], note.p_align) {
            return Some(id);
        }
    }
    None
}

/// The `NT_GNU_BUILD_ID` descriptor among the ELF notes `notes` (each a
/// name and descriptor after three 32-bit words, padded to 8 bytes in a
/// segment aligned to 8, else to 4, as glibc reads them).
fn gnu_build_id(mut notes: &[u8], align: u64) -> Option<Vec<u8>> {
    let pad = if align == 8 { 8 } else { 4 };
    let word = |b: &[u8], at: usize| -> Option<usize> {
        usize::try_from(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?)).ok()
    };
    while notes.len() >= 12 {
        let (name_len, desc_len) = (word(notes, 0)?, word(notes, 4)?);
        let kind = word(notes, 8)?;
        // Offsets from the note's start, each rounded up to the padding
        // (glibc's ELF_NOTE_DESC_OFFSET and ELF_NOTE_NEXT_OFFSET).
        let name_end = 12usize
            .checked_add(name_len)?
            .checked_next_multiple_of(pad)?;
        let desc_end = name_end
            .checked_add(desc_len)?
            .checked_next_multiple_of(pad)?;
        let name = notes.get(12..12usize.checked_add(name_len)?)?;
        let desc = notes.get(name_end..name_end.checked_add(desc_len)?)?;
        if kind == NT_GNU_BUILD_ID as usize && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc.to_vec());
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

/// What [`register_loaded_objects`] did.
#[derive(Debug, Default)]
pub struct LoadedReport {
    /// Text ranges registered, with the object's path.
    pub registered: Vec<(PathBuf, std::ops::Range<u64>)>,
    /// Text ranges not registered (already registered, unreadable SFrame…).
    pub skipped: Vec<(PathBuf, RegistryError)>,
    /// Text starts that an earlier walk registered and that are no longer
    /// loaded (`dlclose`d): unregistered, so a library loaded there later
    /// is not unwound with the old one's rows.
    pub removed: Vec<u64>,
}

/// A text range an earlier walk registered: the object it belongs to, as
/// the loader and the file system show it without reading the file (its
/// address range, path, the build id in its loaded notes, and its file's
/// device, inode, size and modification time), and the range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoadedText {
    elf: std::ops::Range<u64>,
    path: PathBuf,
    build_id: Option<Vec<u8>>,
    file: Option<(u64, u64, u64, i64, i64)>,
    text: std::ops::Range<u64>,
}

/// One loaded object as a walk sees it.
struct Seen {
    path: PathBuf,
    elf: std::ops::Range<u64>,
    texts: Vec<std::ops::Range<u64>>,
    sframe: Option<std::ops::Range<u64>>,
    loaded_id: Option<Vec<u8>>,
    file: Option<std::fs::Metadata>,
}

impl Seen {
    fn text(&self, text: &std::ops::Range<u64>) -> LoadedText {
        use std::os::unix::fs::MetadataExt;
        LoadedText {
            elf: self.elf.clone(),
            path: self.path.clone(),
            build_id: self.loaded_id.clone(),
            file: self
                .file
                .as_ref()
                .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())),
            text: text.clone(),
        }
    }
}

/// The loaded objects with executable text, as the loader lists them.
fn seen_objects() -> Vec<Seen> {
    let mut out = Vec::new();
    for object in loaded_objects() {
        let path = if object.name.is_empty() {
            std::fs::read_link("/proc/self/exe").unwrap_or_default()
        } else {
            path_from_bytes(&object.name)
        };
        let loads: Vec<_> = object
            .phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .collect();
        let Some(min_vaddr) = loads.iter().map(|p| p.p_vaddr).min() else {
            continue;
        };
        let max_end = loads
            .iter()
            .map(|p| p.p_vaddr + p.p_memsz)
            .max()
            .unwrap_or(min_vaddr);
        let elf = object.bias + (min_vaddr & !(ELF_START_ALIGN - 1))..object.bias + max_end;
        let texts = loads
            .iter()
            .filter(|p| p.p_flags & PF_X != 0 && p.p_memsz > 0)
            .map(|p| object.bias + p.p_vaddr..object.bias + p.p_vaddr + p.p_memsz)
            .collect();
        let sframe = object
            .phdrs
            .iter()
            .find(|p| p.p_type == PT_GNU_SFRAME && p.p_memsz > 0)
            .map(|p| object.bias + p.p_vaddr..object.bias + p.p_vaddr + p.p_memsz);
        let file = std::fs::metadata(&path)
            .ok()
            .filter(std::fs::Metadata::is_file);
        out.push(Seen {
            loaded_id: build_id_in_memory(&object.phdrs, object.bias),
            path,
            elf,
            texts,
            sframe,
            file,
        });
    }
    out
}

/// Walks this process's loaded objects (`dl_iterate_phdr`) and registers
/// each executable `PT_LOAD` with the object's `PT_GNU_SFRAME` segment, its
/// build id (from its loaded notes) and debug link (from the file).
///
/// What an earlier walk registered and is still loaded the same (the
/// loader's view and the file's identity say so) is reported as skipped,
/// and its file is not read again; what it registered that is gone or
/// changed (`dlclose`d, or another object at its place) is unregistered
/// first, so that a library loaded there is not unwound with the old one's
/// rows. So calling this again after a `dlopen` reads and adds only the
/// new objects.
pub fn register_loaded_objects(registry: &Registry) -> LoadedReport {
    let mut report = LoadedReport::default();
    let objects = seen_objects();
    let present: std::collections::HashMap<u64, LoadedText> = objects
        .iter()
        .flat_map(|o| o.texts.iter().map(|t| (t.start, o.text(t))))
        .collect();
    // Gone or changed since the walk that registered them: out first.
    let stale: Vec<u64> = registry
        .loader_texts()
        .iter()
        .filter(|(start, was)| present.get(start) != Some(was))
        .map(|(&start, _)| start)
        .collect();
    for start in stale {
        registry.loader_texts().remove(&start);
        if registry.unregister(start).is_ok() {
            report.removed.push(start);
        }
    }
    for object in objects {
        // Registered by an earlier walk, the same object still, and not
        // unregistered since (unregistering drops the entry): nothing to
        // read.
        let earlier = !object.texts.is_empty() && {
            let registered = registry.loader_texts();
            object
                .texts
                .iter()
                .all(|t| registered.get(&t.start) == Some(&object.text(t)))
        };
        if earlier {
            for text in &object.texts {
                let overlap = Overlap {
                    start: text.start,
                    end: text.end,
                    other_start: text.start,
                    other_end: text.end,
                };
                report
                    .skipped
                    .push((object.path.clone(), RegistryError::Overlap(overlap)));
            }
            continue;
        }
        // The build id of the loaded code, from memory; the debug link is
        // in no loaded segment, so from the file. A file that is no longer
        // the loaded code (replaced on disk) gives it no rows: they would
        // be kept under the loaded code's id.
        let (file_build_id, debug_link) = crate::elf::identity_of_file(&object.path);
        let replaced = matches!((&object.loaded_id, &file_build_id), (Some(a), Some(b)) if a != b);
        let readable = object.file.is_some() && !replaced;
        let build_id = object.loaded_id.clone().or(file_build_id);
        for text in &object.texts {
            let code = ElfCode {
                elf: object.elf.clone(),
                text: text.clone(),
                sframe: object.sframe.clone(),
                path: readable.then(|| object.path.clone()),
                build_id: build_id.clone(),
                debug_link: debug_link.as_ref().map(|(name, _)| path_from_bytes(name)),
                debug_link_crc: debug_link.as_ref().map_or(0, |(_, crc)| *crc),
            };
            match registry.register_elf(code) {
                Ok(()) => {
                    registry
                        .loader_texts()
                        .insert(text.start, object.text(text));
                    report.registered.push((object.path.clone(), text.clone()));
                }
                Err(e) => report.skipped.push((object.path.clone(), e)),
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [name.len() as u32, desc.len() as u32, kind] {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend_from_slice(desc);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    #[test]
    fn the_build_id_note_is_found_among_others_and_bad_notes_are_none() {
        let mut notes = note(b"GNU\0", 1, &[0, 0, 0, 0, 3, 0, 0, 0]);
        notes.extend(note(
            b"GNU\0",
            NT_GNU_BUILD_ID,
            &[0xde, 0xad, 0xbe, 0xef, 1],
        ));
        assert_eq!(
            gnu_build_id(&notes, 4),
            Some(vec![0xde, 0xad, 0xbe, 0xef, 1])
        );
        // Another vendor's note of the same type is not it.
        assert_eq!(
            gnu_build_id(&note(b"Go\0\0", NT_GNU_BUILD_ID, &[1; 8]), 4),
            None
        );
        // Sizes that run past the end: none, no panic.
        let mut cut = note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]);
        cut[4] = 0xff;
        assert_eq!(gnu_build_id(&cut, 4), None);
        assert_eq!(gnu_build_id(&[0xff; 12], 4), None);
        assert_eq!(gnu_build_id(&[0xff; 12], 8), None);
        // In a segment aligned to 8, a 12-byte descriptor is padded to 16.
        let mut eight = note(b"GNU\0", 5, &[7; 12]);
        eight.extend([0; 4]);
        eight.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[9; 8]));
        assert_eq!(gnu_build_id(&eight, 8), Some(vec![9; 8]));
    }
}
