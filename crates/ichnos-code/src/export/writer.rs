//! The writer of the exported table: the process's own registrations,
//! copied where another process can read them.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Mutex, OnceLock};

use super::{ichnos_code_registry, Entry, ENTRY_ELF, ENTRY_JIT, RETIRED_KEPT};
use crate::registration::{Publish, Registration};
use crate::registry::Registry;

/// What an entry's pointers point at, owned for as long as it is
/// exported (heap memory: it stays where it is when the owner moves).
#[derive(Default)]
struct Held {
    // Never read: they are held for the addresses in the entry.
    #[allow(dead_code)]
    strings: Vec<CString>,
    #[allow(dead_code)]
    id: Option<Box<[u8]>>,
}

/// The exported table: the entry array readers see, and what its entries
/// point at. Entries are added at the end and removed by moving the last
/// into the hole, in place under the generation's odd count (a reader
/// that raced it retries); a full array is copied into one twice its
/// size, and the arrays it replaced are kept for the next
/// [`RETIRED_KEPT`] - 1 replacements. Each change costs O(1) amortized.
#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    held: Vec<Held>,
    index_of: std::collections::HashMap<u64, usize>,
    retired: std::collections::VecDeque<Vec<Entry>>,
    /// What removed entries pointed at, with the update that removed
    /// them: kept for the next [`RETIRED_KEPT`] - 1 updates, as readers
    /// read strings after the table.
    retired_held: std::collections::VecDeque<(u64, Held)>,
    /// Updates so far.
    updates: u64,
}

/// Writes the exported copy of the global registry.
pub struct Exporter {
    table: Mutex<Option<Table>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

fn exporter() -> &'static Exporter {
    static EXPORTER: Exporter = Exporter {
        table: Mutex::new(None),
    };
    &EXPORTER
}

/// The exported entry of `r`, and what its pointers point at.
fn entry_of(r: &Registration) -> (Entry, Held) {
    let mut e = Entry {
        registered_ns: crate::sys::monotonic_ns(),
        ..Entry::default()
    };
    let mut held = Held::default();
    let mut c_string = |bytes: &[u8]| {
        CString::new(bytes).ok().map_or(0, |c| {
            let addr = c.as_ptr() as u64;
            held.strings.push(c);
            addr
        })
    };
    match r {
        Registration::Elf(elf) => {
            e.kind = ENTRY_ELF;
            (e.text_start, e.text_end) = (elf.text.start, elf.text.end);
            (e.elf_start, e.elf_end) = (elf.elf.start, elf.elf.end);
            if let Some(s) = &elf.sframe {
                (e.sframe_start, e.sframe_end) = (s.start, s.end);
            }
            e.pathname = elf
                .path
                .as_deref()
                .map_or(0, |p| c_string(p.as_os_str().as_bytes()));
            e.debug_link_pathname = elf
                .debug_link
                .as_deref()
                .map_or(0, |p| c_string(p.as_os_str().as_bytes()));
            e.debug_link_crc = elf.debug_link_crc;
            if let Some(id) = &elf.build_id {
                let id: Box<[u8]> = id.clone().into_boxed_slice();
                e.build_id = id.as_ptr() as u64;
                e.build_id_len = id.len() as u32;
                held.id = Some(id);
            }
        }
        Registration::Jit {
            text,
            unwind_head,
            name,
        } => {
            e.kind = ENTRY_JIT;
            (e.text_start, e.text_end) = (text.start, text.end);
            e.unwind_head = *unwind_head;
            // A JIT entry's pathname is the code's name.
            e.pathname = name.as_deref().map_or(0, |n| c_string(n.as_bytes()));
        }
    }
    (e, held)
}

impl Exporter {
    /// Runs `change` on the table with the header's generation odd, then
    /// publishes where the array is and how many entries it holds.
    fn update(&self, change: impl FnOnce(&mut Table)) {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let table = table.get_or_insert_with(Table::default);
        let header = &ichnos_code_registry;
        let g = header.generation.load(Ordering::Relaxed);
        header.generation.store(g + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        table.updates += 1;
        let now = table.updates;
        while table
            .retired_held
            .front()
            .is_some_and(|(at, _)| at + (RETIRED_KEPT as u64) <= now)
        {
            table.retired_held.pop_front();
        }
        change(table);
        header
            .entries
            .store(table.entries.as_ptr() as u64, Ordering::Relaxed);
        header
            .count
            .store(table.entries.len() as u64, Ordering::Relaxed);
        header.generation.store(g + 2, Ordering::Release);
    }

    /// Exports registration `r` (its text range not exported yet).
    fn add(&self, r: &Registration) {
        let (entry, held) = entry_of(r);
        self.update(|t| {
            if t.entries.len() == t.entries.capacity() {
                // A reader may be reading the old array: it stays.
                let mut bigger = Vec::with_capacity((2 * t.entries.capacity()).max(16));
                bigger.extend_from_slice(&t.entries);
                t.retired
                    .push_back(std::mem::replace(&mut t.entries, bigger));
                if t.retired.len() >= RETIRED_KEPT {
                    t.retired.pop_front();
                }
            }
            t.index_of.insert(entry.text_start, t.entries.len());
            t.entries.push(entry);
            t.held.push(held);
        });
    }

    /// Stops exporting the registration of the text range starting at
    /// `text_start`.
    fn remove(&self, text_start: u64) {
        self.update(|t| {
            let Some(i) = t.index_of.remove(&text_start) else {
                return;
            };
            t.entries.swap_remove(i);
            // What the entry pointed at goes only once no reader can be
            // reading it: with the array it was in, kept retired.
            let gone = t.held.swap_remove(i);
            if let Some(moved) = t.entries.get(i) {
                t.index_of.insert(moved.text_start, i);
            }
            t.retired_held.push_back((t.updates, gone));
        });
    }
}

impl Publish for Exporter {
    fn added(&self, registration: &Registration) {
        self.add(registration);
    }

    fn removed(&self, text_start: u64) {
        self.remove(text_start);
    }
}

impl Registry {
    /// The registry of this process: the one codectl uses and the one
    /// published through the exported `ichnos_code_registry` symbol.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| Registry::published(exporter()))
    }
}
