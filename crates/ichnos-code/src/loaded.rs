//! Self-registration: every object loaded in this process, registered as a
//! dynamic loader would with codectl.

use std::path::PathBuf;

use crate::elf::ELF_START_ALIGN;
use crate::registration::{path_from_bytes, ElfCode};
use crate::registry::{Registry, RegistryError};
use crate::sys::loaded_objects;

const PT_LOAD: u32 = 1;
const PT_GNU_SFRAME: u32 = 0x6474_e554;
const PF_X: u32 = 1;

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

/// Walks this process's loaded objects (`dl_iterate_phdr`) and registers
/// each executable `PT_LOAD` with the object's `PT_GNU_SFRAME` segment, its
/// build id and debug link (read from the file). Objects already registered
/// are reported as skipped, so calling this again after a `dlopen` adds only
/// the new ones, and after a `dlclose` removes what an earlier walk
/// registered for objects that are gone.
pub fn register_loaded_objects(registry: &Registry) -> LoadedReport {
    let mut report = LoadedReport::default();
    let mut present = std::collections::HashSet::new();
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
        let sframe = object
            .phdrs
            .iter()
            .find(|p| p.p_type == PT_GNU_SFRAME && p.p_memsz > 0)
            .map(|p| object.bias + p.p_vaddr..object.bias + p.p_vaddr + p.p_memsz);
        let readable = std::fs::metadata(&path).is_ok_and(|m| m.is_file());
        let (build_id, debug_link) = crate::elf::identity_of_file(&path);
        for text in loads
            .iter()
            .filter(|p| p.p_flags & PF_X != 0 && p.p_memsz > 0)
        {
            let text = object.bias + text.p_vaddr..object.bias + text.p_vaddr + text.p_memsz;
            let code = ElfCode {
                elf: elf.clone(),
                text: text.clone(),
                sframe: sframe.clone(),
                path: readable.then(|| path.clone()),
                build_id: build_id.clone(),
                debug_link: debug_link.as_ref().map(|(name, _)| path_from_bytes(name)),
                debug_link_crc: debug_link.as_ref().map_or(0, |(_, crc)| *crc),
            };
            present.insert(text.start);
            match registry.register_elf(code) {
                Ok(()) => {
                    registry.loader_texts().insert(text.start);
                    report.registered.push((path.clone(), text));
                }
                Err(e) => report.skipped.push((path.clone(), e)),
            }
        }
    }
    let gone: Vec<u64> = registry
        .loader_texts()
        .iter()
        .copied()
        .filter(|start| !present.contains(start))
        .collect();
    for start in gone {
        registry.loader_texts().remove(&start);
        if registry.unregister(start).is_ok() {
            report.removed.push(start);
        }
    }
    report
}
