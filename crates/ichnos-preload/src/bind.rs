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
//! this library's hook. Left alone: a slot already bound (bound at load,
//! `-z now`; its value leads out of its object's code), one in a
//! read-only region (RELRO) or on a page not writable now, one with an
//! addend; every slot of an object that looks its own symbols up first
//! (`DT_SYMBOLIC`), for which the resolver might choose another hook;
//! every slot while calls through the PLT are watched or counted
//! (`LD_AUDIT`, an auditor named by a loaded object's `DT_AUDIT` or
//! `DT_DEPAUDIT`, `LD_PROFILE`) or left unwritten by the resolver
//! (`LD_BIND_NOT`); and the objects loaded later by `dlopen` (their first
//! calls resolve as before: a wrapper of `dlopen` would be its caller,
//! and `dlopen` finds `$ORIGIN` and the namespace from its caller).
//!
//! The tables read are the dynamic linker's own, of this process; each is
//! checked to lie within its object's loaded segments before it is read.
//! A slot is written only where it lies in a writable loaded segment
//! outside the object's RELRO region, and once the kernel has read it and
//! written its own value back to it (through a pipe, which fails rather
//! than faults where the page is not readable or writable now).

use std::ffi::{c_void, CStr};

/// `R_X86_64_JUMP_SLOT`: a PLT slot.
const R_X86_64_JUMP_SLOT: u64 = 7;
/// `PF_W`: a writable segment.
const PF_W: u32 = 2;
/// `PF_X`: an executable segment.
const PF_X: u32 = 1;
/// `DT_RELA`, the only kind of PLT relocation on x86-64.
const DT_RELA: u64 = 7;
/// `DF_SYMBOLIC` in `DT_FLAGS`.
const DF_SYMBOLIC: u64 = 2;

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
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set("LD_BIND_NOT") || set("LD_AUDIT") || set("LD_PROFILE") {
        return 0;
    }
    let mut audited = false;
    // SAFETY: the callback touches only `audited` and what the loader
    // gives.
    unsafe { libc::dl_iterate_phdr(Some(find_auditor), (&raw mut audited).cast()) };
    if audited {
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
    let Some(probe) = Probe::new() else {
        return 0;
    };
    let mut state: State = (hooks, probe, 0);
    // SAFETY: the callback touches only `state` and what the loader gives.
    unsafe { libc::dl_iterate_phdr(Some(bind_object), (&raw mut state).cast()) };
    state.2
}

/// The hooks (each name with this library's address, where the global
/// scope binds the name to it), the probe of slots' pages, and the slots
/// written so far.
type State = ([(&'static CStr, Option<usize>); 2], Probe, usize);

/// `dl_iterate_phdr`'s callback: notes whether the object names an
/// auditor (`DT_AUDIT`, `DT_DEPAUDIT`).
extern "C" fn find_auditor(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    audited: *mut c_void,
) -> libc::c_int {
    // SAFETY: `audited` is the flag `bind_hooks` passes; `info` the
    // loader's description of one loaded object.
    let (audited, info) = unsafe { (&mut *audited.cast::<bool>(), &*info) };
    if let Some(plt) = Object::of(info).and_then(|object| object.plt()) {
        *audited |= plt.auditor;
    }
    0
}

/// `dl_iterate_phdr`'s callback: binds one object's slots.
extern "C" fn bind_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    state: *mut c_void,
) -> libc::c_int {
    // SAFETY: `state` is the `State` `bind_hooks` passes; `info` the
    // loader's description of one loaded object.
    let ((hooks, probe, written), info) = unsafe { (&mut *state.cast::<State>(), &*info) };
    if let Some(object) = Object::of(info) {
        *written += object.bind(hooks, probe);
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
    /// It looks its own symbols up first (`DT_SYMBOLIC`, `DF_SYMBOLIC`).
    symbolic: bool,
    /// It names an auditor (`DT_AUDIT`, `DT_DEPAUDIT`).
    auditor: bool,
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
    fn bind(&self, hooks: &[(&CStr, Option<usize>); 2], probe: &Probe) -> usize {
        let Some(plt) = self.plt() else {
            return 0;
        };
        if plt.relocations == 0
            || plt.symbols == 0
            || plt.strings == 0
            || plt.relocation_kind != DT_RELA
            || plt.symbolic
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
            if rela.info & 0xffff_ffff != R_X86_64_JUMP_SLOT || rela.addend != 0 {
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
            let Some(value) = probe.word(slot) else {
                continue;
            };
            // Still lazy: the slot leads into the object's own PLT. (One
            // bound already, to this hook or elsewhere, is left as it is.)
            if !self.in_code(value) {
                continue;
            }
            // SAFETY: an aligned word of a writable segment of the object,
            // outside its RELRO region, on a page writable now (all checked
            // above): its PLT slot, which the resolver itself would write
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

    /// What the object's dynamic section says of its PLT relocations and
    /// its lookups (none: it has no dynamic section within it).
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
                0 => break,                                      // DT_NULL
                2 => plt.relocations_len = value as usize,       // DT_PLTRELSZ
                5 => plt.strings = pointer(value),               // DT_STRTAB
                6 => plt.symbols = pointer(value),               // DT_SYMTAB
                10 => plt.strings_len = value as usize,          // DT_STRSZ
                16 => plt.symbolic = true,                       // DT_SYMBOLIC
                20 => plt.relocation_kind = value,               // DT_PLTREL
                23 => plt.relocations = pointer(value),          // DT_JMPREL
                30 => plt.symbolic |= value & DF_SYMBOLIC != 0,  // DT_FLAGS
                0x6fff_fefb | 0x6fff_fefc => plt.auditor = true, // DT_DEPAUDIT, DT_AUDIT
                _ => {}
            }
        }
        Some(plt)
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
                // The loader protects the whole pages within the region
                // (its end rounded down); taken here to its end rounded
                // up, which can only leave more slots alone.
                let page = crate::page_size();
                let start = self.base.wrapping_add(h.p_vaddr as usize) & !(page - 1);
                let end = self
                    .base
                    .wrapping_add(h.p_vaddr.wrapping_add(h.p_memsz) as usize)
                    .checked_next_multiple_of(page)
                    .unwrap_or(usize::MAX);
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

/// The kernel's look at a slot's page before the runtime touches it: a
/// pipe, through which a slot's word is read out and written back with
/// `write` and `read`, which fail (`EFAULT`) rather than fault where the
/// page is not readable or not writable now (made so since the object
/// was loaded, say). Plain `write` and `read` are allowed where a
/// sandbox's system-call filter allows anything; `process_vm_writev`,
/// which would do it in one call, is often not.
struct Probe {
    read: libc::c_int,
    write: libc::c_int,
    /// Bytes may be left in the pipe (a drain failed): no word read
    /// through it can be trusted, and none is.
    spoilt: std::cell::Cell<bool>,
}

impl Probe {
    fn new() -> Option<Probe> {
        let mut ends = [0; 2];
        // SAFETY: pipe2 fills the two descriptors it is given.
        let made =
            unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0;
        made.then_some(Probe {
            read: ends[0],
            write: ends[1],
            spoilt: std::cell::Cell::new(false),
        })
    }

    /// The word at `slot`, when its page is readable and writable now
    /// (the kernel read it out and wrote the same bytes back, so that a
    /// word torn by the copy still reads as it was).
    fn word(&self, slot: *mut usize) -> Option<usize> {
        let word = std::mem::size_of::<usize>();
        if self.spoilt.get() {
            return None;
        }
        let _errno = ichnos_buf::fill::ErrnoGuard::save();
        // SAFETY: the kernel reads `word` bytes at `slot` into our own
        // pipe, or fails with EFAULT.
        let out = unsafe { libc::write(self.write, slot.cast(), word) };
        if usize::try_from(out) != Ok(word) {
            return None;
        }
        // SAFETY: the kernel writes back the bytes it read from `slot` to
        // `slot`, or fails with EFAULT and leaves them in the pipe.
        let back = unsafe { libc::read(self.read, slot.cast(), word) };
        if usize::try_from(back) != Ok(word) {
            let mut drained = 0usize;
            // SAFETY: reads the bytes left in our pipe into a local.
            let drain = unsafe { libc::read(self.read, (&raw mut drained).cast(), word) };
            if usize::try_from(drain) != Ok(word) {
                self.spoilt.set(true);
            }
            return None;
        }
        // SAFETY: the word is readable (the kernel just read it).
        Some(unsafe { slot.read_volatile() })
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        // SAFETY: our own two descriptors, closed once.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
    }
}

#[cfg(test)]
mod tests {
    //! A made-up object in two pages of this process's memory, laid out
    //! as the dynamic linker leaves a loaded one: program headers, a
    //! dynamic section (its pointers relocated, as for a writable one),
    //! a symbol and string table, one PLT relocation and its slot, which
    //! leads into the object's code while it is lazy.

    use super::*;

    const PAGE: usize = 4096;
    const DYNAMIC: usize = 0;
    const SYMBOLS: usize = 512;
    const STRINGS: usize = 768;
    const RELOCATIONS: usize = 1024;
    /// The object's code: the rest of the first page.
    const CODE: usize = 3584;
    /// The slot: the second page, writable unless a test protects it.
    const SLOT: usize = PAGE;
    const HOOK: usize = 0x0dea_dbee_f000;

    /// How to spoil the object.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Spoil {
        Nothing,
        /// The relocation has an addend.
        Addend,
        /// `DF_SYMBOLIC` in `DT_FLAGS`.
        Symbolic,
        /// The slot's page in a RELRO region.
        Relro,
        /// The slot's segment not writable by its header.
        SegmentReadOnly,
        /// The slot's page not writable now (its header says it is).
        PageReadOnly,
        /// The slot's page not even readable now.
        PageUnreadable,
        /// The slot bound already (it leads out of the object's code).
        Bound,
        /// The relocation of another symbol.
        OtherSymbol,
    }

    /// Two pages, unmapped on drop.
    struct Pages(*mut u8);

    impl Drop for Pages {
        fn drop(&mut self) {
            // SAFETY: the two pages `object` mapped.
            unsafe { libc::munmap(self.0.cast(), 2 * PAGE) };
        }
    }

    fn header(kind: u32, flags: u32, offset: usize, size: usize) -> libc::Elf64_Phdr {
        libc::Elf64_Phdr {
            p_type: kind,
            p_flags: flags,
            p_offset: offset as u64,
            p_vaddr: offset as u64,
            p_paddr: offset as u64,
            p_filesz: size as u64,
            p_memsz: size as u64,
            p_align: PAGE as u64,
        }
    }

    /// Binds the made-up object spoilt so: the slots written and the
    /// slot's value after.
    fn bind(spoil: Spoil) -> (usize, usize) {
        // SAFETY: a fresh anonymous mapping of two pages.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let pages = Pages(base.cast());
        let base = pages.0 as usize;
        let put = |offset: usize, value: u64| {
            // SAFETY: an aligned word within the two pages.
            unsafe { ((base + offset) as *mut u64).write(value) };
        };
        let strings = b"\0__cyg_profile_func_exit\0__cyg_profile_func_entry\0";
        let dynamic: [(u64, u64); 8] = [
            (23, (base + RELOCATIONS) as u64), // DT_JMPREL
            (2, 24),                           // DT_PLTRELSZ
            (20, DT_RELA),                     // DT_PLTREL
            (6, (base + SYMBOLS) as u64),      // DT_SYMTAB
            (5, (base + STRINGS) as u64),      // DT_STRTAB
            (10, strings.len() as u64),        // DT_STRSZ
            (
                30,
                if spoil == Spoil::Symbolic {
                    DF_SYMBOLIC
                } else {
                    0
                },
            ), // DT_FLAGS
            (0, 0),                            // DT_NULL
        ];
        for (i, (tag, value)) in dynamic.iter().enumerate() {
            put(DYNAMIC + 16 * i, *tag);
            put(DYNAMIC + 16 * i + 8, *value);
        }
        // Symbol 1 is the exit hook, symbol 2 another name.
        put(SYMBOLS + 24, 1);
        put(SYMBOLS + 48, 25);
        // SAFETY: the string table's bytes, within the first page.
        unsafe {
            std::ptr::copy_nonoverlapping(
                strings.as_ptr(),
                (base + STRINGS) as *mut u8,
                strings.len(),
            );
        };
        let symbol = if spoil == Spoil::OtherSymbol { 2 } else { 1 };
        put(RELOCATIONS, SLOT as u64);
        put(RELOCATIONS + 8, symbol << 32 | R_X86_64_JUMP_SLOT);
        put(RELOCATIONS + 16, if spoil == Spoil::Addend { 8 } else { 0 });
        let lazy = base + CODE + 16;
        let value = if spoil == Spoil::Bound {
            0x7f00_0000_1000
        } else {
            lazy
        };
        put(SLOT, value as u64);
        let protect = |protection| {
            // SAFETY: the second of our own two pages.
            let rc = unsafe { libc::mprotect((base + PAGE) as *mut c_void, PAGE, protection) };
            assert_eq!(rc, 0);
        };
        match spoil {
            Spoil::PageReadOnly => protect(libc::PROT_READ),
            Spoil::PageUnreadable => protect(libc::PROT_NONE),
            _ => {}
        }
        let (r, rw, rx) = (4, 6, 5);
        let mut headers = vec![
            header(libc::PT_LOAD, rw, 0, CODE),
            header(libc::PT_LOAD, rx, CODE, PAGE - CODE),
            header(
                libc::PT_LOAD,
                if spoil == Spoil::SegmentReadOnly {
                    r
                } else {
                    rw
                },
                PAGE,
                PAGE,
            ),
            header(libc::PT_DYNAMIC, rw, DYNAMIC, 16 * dynamic.len()),
        ];
        if spoil == Spoil::Relro {
            headers.push(header(libc::PT_GNU_RELRO, r, PAGE, 8));
        }
        let object = Object {
            base,
            headers: &headers,
        };
        let hooks = [
            (c"__cyg_profile_func_enter", Some(HOOK + 8)),
            (c"__cyg_profile_func_exit", Some(HOOK)),
        ];
        let written = object.bind(&hooks, &Probe::new().unwrap());
        protect(libc::PROT_READ);
        // SAFETY: the slot, readable in every case.
        let after = unsafe { ((base + SLOT) as *const usize).read() };
        drop(pages);
        (written, after)
    }

    #[test]
    fn a_lazy_slot_of_a_hook_is_bound_to_it() {
        assert_eq!(bind(Spoil::Nothing), (1, HOOK));
    }

    #[test]
    fn a_slot_that_must_not_be_written_is_left_as_it_is() {
        let lazy = |spoil| {
            let (written, after) = bind(spoil);
            assert_eq!(written, 0, "{spoil:?}");
            assert_ne!(after, HOOK, "{spoil:?}");
        };
        lazy(Spoil::Addend);
        lazy(Spoil::Symbolic);
        lazy(Spoil::Relro);
        lazy(Spoil::SegmentReadOnly);
        lazy(Spoil::PageReadOnly);
        lazy(Spoil::PageUnreadable);
        lazy(Spoil::OtherSymbol);
        // Bound already: left with its value.
        assert_eq!(bind(Spoil::Bound), (0, 0x7f00_0000_1000));
    }

    #[test]
    fn an_auditor_named_by_an_object_is_seen() {
        // DT_AUDIT, then DT_NULL.
        let mut memory = vec![0x6fff_fefc_u64, 1, 0, 0];
        let headers = [
            header(libc::PT_LOAD, 6, 0, 32),
            header(libc::PT_DYNAMIC, 6, 0, 32),
        ];
        let auditor = |memory: &[u64]| {
            let object = Object {
                base: memory.as_ptr() as usize,
                headers: &headers,
            };
            object.plt().map(|plt| plt.auditor)
        };
        assert_eq!(auditor(&memory), Some(true));
        memory[0] = 0x6fff_fefb; // DT_DEPAUDIT
        assert_eq!(auditor(&memory), Some(true));
        memory[0] = 1; // DT_NEEDED
        assert_eq!(auditor(&memory), Some(false));
    }
}
