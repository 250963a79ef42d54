//! The hooks bound in the loaded objects' PLTs at the start, so that no
//! traced call pays for the dynamic linker's first binding of a hook.
//!
//! Code built with `-finstrument-functions` calls the hooks through its
//! object's PLT. Bound lazily (the default, without `-z now`), the first
//! call of each hook from each object goes through the dynamic linker's
//! resolver, 0.3 to 0.7 us here, and the first exit's falls inside the
//! exiting call: a program's first leaf call read 0.3 to 0.7 us where
//! every later one read 0.01. uftrace writes its hooks' addresses into
//! the program's slots at its start for the same reason.
//!
//! At its start the runtime does what the resolver would do at the first
//! call, for every object loaded then: in each `R_X86_64_JUMP_SLOT` of
//! `__cyg_profile_func_enter` or `__cyg_profile_func_exit` it writes the
//! address the global scope binds the name to, and only where that is
//! this library's hook. Left alone: a slot in a read-only region (RELRO:
//! bound when the object was loaded), every slot under `LD_BIND_NOT` (the
//! resolver would not write either) and under `LD_AUDIT` (an auditor may
//! watch calls through the PLT), and objects loaded later by `dlopen`
//! (their first calls resolve as before).
//!
//! The tables read are the dynamic linker's own, of this process; each is
//! checked to lie within its object's loaded segments before it is read,
//! and a slot is written only where it lies in a writable loaded segment
//! outside the object's RELRO region.

use std::ffi::{c_void, CStr};

/// `R_X86_64_JUMP_SLOT`: a PLT slot.
const R_X86_64_JUMP_SLOT: u64 = 7;
/// `PF_W`: a writable segment.
const PF_W: u32 = 2;
/// `PF_X`: an executable segment.
const PF_X: u32 = 1;
/// `DT_RELA`, the only kind of PLT relocation on x86-64.
const DT_RELA: u64 = 7;

/// `Elf64_Dyn`: an entry of the dynamic section.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dyn {
    /// Signed in the ELF structure; every tag read here is positive.
    tag: u64,
    value: u64,
}

/// `Elf64_Rela`: a relocation with an addend.
#[repr(C)]
#[derive(Clone, Copy)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

/// Bytes of an `Elf64_Sym`, whose first field (a `u32`) is its name's
/// offset in the string table.
const SYM_BYTES: usize = 24;

/// The hooks' names and addresses, as bound in the slots.
fn hooks() -> [(&'static CStr, usize); 2] {
    [
        (c"__cyg_profile_func_enter", crate::hooks::enter_address()),
        (
            c"__cyg_profile_func_exit",
            crate::__cyg_profile_func_exit as *const () as usize,
        ),
    ]
}

/// Binds the hooks' lazy PLT slots of every loaded object (see the
/// module's comment). Returns the slots written.
pub(crate) fn bind_hooks() -> usize {
    if std::env::var_os("LD_BIND_NOT").is_some_and(|v| !v.is_empty())
        || std::env::var_os("LD_AUDIT").is_some_and(|v| !v.is_empty())
    {
        return 0;
    }
    // Only the names the global scope binds to this library's hooks.
    let hooks = hooks().map(|(name, ours)| {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches
        // the global scope, as the resolver does for a loaded object.
        let bound = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
        (name, (bound == ours).then_some(ours))
    });
    if hooks.iter().all(|(_, ours)| ours.is_none()) {
        return 0;
    }
    let mut state: State = (hooks, 0);
    // SAFETY: the callback touches only `state` and what the loader gives.
    unsafe { libc::dl_iterate_phdr(Some(bind_object), (&raw mut state).cast()) };
    state.1
}

/// The hooks (each name with this library's address, where the global
/// scope binds the name to it) and the slots written so far.
type State = ([(&'static CStr, Option<usize>); 2], usize);

/// `dl_iterate_phdr`'s callback: binds one object's slots.
extern "C" fn bind_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    state: *mut c_void,
) -> libc::c_int {
    // SAFETY: `state` is the `State` `bind_hooks` passes; `info` the
    // loader's description of one loaded object.
    let ((hooks, written), info) = unsafe { (&mut *state.cast::<State>(), &*info) };
    if let Some(object) = Object::of(info) {
        *written += object.bind(hooks);
    }
    0
}

/// One loaded object: where it was loaded and its program headers.
struct Object<'a> {
    base: usize,
    headers: &'a [libc::Elf64_Phdr],
}

/// What the object's dynamic section says of its PLT relocations.
#[derive(Default)]
struct Plt {
    relocations: usize,
    relocations_len: usize,
    relocation_kind: u64,
    symbols: usize,
    strings: usize,
    strings_len: usize,
}

impl<'a> Object<'a> {
    fn of(info: &'a libc::dl_phdr_info) -> Option<Object<'a>> {
        if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
            return None;
        }
        // SAFETY: the loader's `dlpi_phnum` headers at `dlpi_phdr`, which
        // live as long as the object stays loaded (through this callback).
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        Some(Object {
            base: info.dlpi_addr as usize,
            headers,
        })
    }

    /// Writes the hooks into this object's lazy slots of them; the slots
    /// written.
    fn bind(&self, hooks: &[(&CStr, Option<usize>); 2]) -> usize {
        let Some(plt) = self.plt() else {
            return 0;
        };
        if plt.relocation_kind != DT_RELA
            || !self.holds(plt.relocations, plt.relocations_len)
            || !self.holds(plt.strings, plt.strings_len)
        {
            return 0;
        }
        let mut written = 0;
        for index in 0..plt.relocations_len / std::mem::size_of::<Rela>() {
            let at = plt.relocations + index * std::mem::size_of::<Rela>();
            // SAFETY: within the relocation table, inside the object's
            // loaded segments (checked above).
            let rela = unsafe { std::ptr::read_unaligned(at as *const Rela) };
            if rela.info & 0xffff_ffff != R_X86_64_JUMP_SLOT {
                continue;
            }
            let Some(name) = self.symbol_name(&plt, (rela.info >> 32) as usize) else {
                continue;
            };
            let Some(hook) = hooks
                .iter()
                .find(|(hook, _)| *hook == name)
                .and_then(|(_, ours)| *ours)
            else {
                continue;
            };
            let slot = self.base.wrapping_add(rela.offset as usize);
            if !self.writable(slot) || !slot.is_multiple_of(std::mem::align_of::<usize>()) {
                continue;
            }
            let slot = slot as *mut usize;
            // SAFETY: an aligned word of a writable segment of the object,
            // outside its RELRO region (checked above): its PLT slot.
            let value = unsafe { slot.read_volatile() };
            // Still lazy: the slot leads into the object's own PLT. (One
            // bound already, to this hook or elsewhere, is left as it is.)
            if !self.in_code(value) {
                continue;
            }
            // SAFETY: as above; the resolver itself would write the slot
            // with one store.
            unsafe { slot.write_volatile(hook) };
            written += 1;
        }
        written
    }

    /// The name of symbol `index` of the dynamic symbol table, if it lies
    /// within the object.
    fn symbol_name(&self, plt: &Plt, index: usize) -> Option<&CStr> {
        let at = plt.symbols.checked_add(index.checked_mul(SYM_BYTES)?)?;
        if index == 0 || !self.holds(at, SYM_BYTES) {
            return None;
        }
        // SAFETY: a symbol table entry inside the object's loaded
        // segments; its name's offset is its first word.
        let offset = unsafe { std::ptr::read_unaligned(at as *const u32) } as usize;
        if offset >= plt.strings_len {
            return None;
        }
        // SAFETY: the string table, inside the object (checked by `bind`),
        // from `offset` to its end.
        let rest = unsafe {
            std::slice::from_raw_parts(
                (plt.strings + offset) as *const u8,
                plt.strings_len - offset,
            )
        };
        CStr::from_bytes_until_nul(rest).ok()
    }

    /// The object's PLT relocations, from its dynamic section.
    fn plt(&self) -> Option<Plt> {
        let dynamic = self.headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC)?;
        let start = self.base.wrapping_add(dynamic.p_vaddr as usize);
        let len = dynamic.p_memsz as usize;
        if !self.holds(start, len) {
            return None;
        }
        // The loader adds the load address to the dynamic section's
        // pointers in place, where the section is writable (glibc's
        // `dl_relocate_ld`), and leaves a read-only one as it is.
        let adjusted = dynamic.p_flags & PF_W != 0;
        let pointer = |value: u64| {
            if adjusted {
                value as usize
            } else {
                self.base.wrapping_add(value as usize)
            }
        };
        let mut plt = Plt::default();
        for index in 0..len / std::mem::size_of::<Dyn>() {
            let at = start + index * std::mem::size_of::<Dyn>();
            // SAFETY: an entry of the dynamic section, inside the object.
            let entry = unsafe { std::ptr::read_unaligned(at as *const Dyn) };
            let value = entry.value;
            match entry.tag {
                0 => break,                                // DT_NULL
                2 => plt.relocations_len = value as usize, // DT_PLTRELSZ
                5 => plt.strings = pointer(value),         // DT_STRTAB
                6 => plt.symbols = pointer(value),         // DT_SYMTAB
                10 => plt.strings_len = value as usize,    // DT_STRSZ
                20 => plt.relocation_kind = value,         // DT_PLTREL
                23 => plt.relocations = pointer(value),    // DT_JMPREL
                _ => {}
            }
        }
        (plt.relocations != 0 && plt.symbols != 0 && plt.strings != 0).then_some(plt)
    }

    /// Whether `address` lies in one of the object's executable segments.
    fn in_code(&self, address: usize) -> bool {
        self.segment_of(address, 1)
            .is_some_and(|segment| segment.p_flags & PF_X != 0)
    }

    /// Whether `len` bytes from `start` lie within one loaded segment.
    fn holds(&self, start: usize, len: usize) -> bool {
        self.segment_of(start, len).is_some()
    }

    /// Whether the word at `at` lies in a writable loaded segment and
    /// outside the object's RELRO region.
    fn writable(&self, at: usize) -> bool {
        let word = std::mem::size_of::<usize>();
        let in_writable = self
            .segment_of(at, word)
            .is_some_and(|segment| segment.p_flags & PF_W != 0);
        let in_relro = self
            .headers
            .iter()
            .filter(|h| h.p_type == libc::PT_GNU_RELRO)
            .any(|h| {
                // The loader protects whole pages from the region's start.
                let page = page_size();
                let start = self.base.wrapping_add(h.p_vaddr as usize) & !(page - 1);
                let end = self
                    .base
                    .wrapping_add((h.p_vaddr + h.p_memsz) as usize)
                    .next_multiple_of(page);
                at.saturating_add(word) > start && at < end
            });
        in_writable && !in_relro
    }

    /// The loaded segment that holds `len` bytes from `start`.
    fn segment_of(&self, start: usize, len: usize) -> Option<&libc::Elf64_Phdr> {
        let end = start.checked_add(len)?;
        self.headers.iter().find(|h| {
            let from = self.base.wrapping_add(h.p_vaddr as usize);
            h.p_type == libc::PT_LOAD
                && start >= from
                && end <= from.wrapping_add(h.p_memsz as usize)
        })
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}
