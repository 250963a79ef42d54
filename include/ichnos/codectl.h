/*
 * ichnos: the code registry, a user-space codectl(2).
 *
 * codectl() registers ELF code (text range, SFrame section, path, build id,
 * debug link) and JIT code (text range and a chain of append-only unwind
 * tables) so that profilers can unwind through it and name its addresses.
 * The structures are those of the codectl(2) RFC (LKML, July 2025) with the
 * thread's agreed changes: option 0 unregisters, and JIT tables carry
 * fre_stride and fre_size. Each struct is extensible through info_size in
 * the manner of the kernel's copy_struct_from_user(). Specification:
 * docs/c-abi-codectl.md.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef ICHNOS_CODECTL_H
#define ICHNOS_CODECTL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The operation codectl() performs. */
enum code_opt {
	CODE_UNREGISTER = 0,	/* info: struct code_unregister_info */
	CODE_REGISTER_ELF = 1,	/* info: struct code_elf_info */
	CODE_REGISTER_JIT = 2,	/* info: struct code_jit_info */
};

/*
 * ELF code. text_start..text_end is the executable range described;
 * sframe_start..sframe_end its loaded SFrame section (both 0: none; the
 * registry then converts the .eh_frame of the file at pathname, if any).
 * elf_start..elf_end spans the object's PT_LOAD segments from the page of
 * the first one. Pointers are addresses in the calling process, 0 when
 * unavailable.
 */
struct code_elf_info {
	uint64_t elf_start;
	uint64_t elf_end;
	uint64_t text_start;
	uint64_t text_end;
	uint64_t sframe_start;
	uint64_t sframe_end;
	uint64_t pathname;		/* const char * */
	uint64_t build_id;		/* const unsigned char * */
	uint64_t debug_link_pathname;	/* const char * */
	uint32_t build_id_len;
	uint32_t debug_link_crc;
};
#define CODE_ELF_INFO_SIZE_VER0 80

/* JIT code: its text range and its first unwind table (0: none yet). */
struct code_jit_info {
	uint64_t text_start;	/* text_start <= addr */
	uint64_t text_end;	/* addr < text_end */
	uint64_t unwind_head;	/* struct code_jit_unwind_table * */
	uint64_t name;		/* const char *: the JIT's name for the code, or 0
				 * (version 1, an ichnos extension: symbolizers
				 * name the code by it) */
};
#define CODE_JIT_INFO_SIZE_VER0 24
#define CODE_JIT_INFO_SIZE_VER1 32

/* Removes the registration whose text range starts at text_start. */
struct code_unregister_info {
	uint64_t text_start;
};
#define CODE_UNREGISTER_INFO_SIZE_VER0 8

/*
 * One unwind row: for addresses text_start + ip_off .. + size,
 * CFA = (info & CODE_JIT_FRE_CFA_BASE_SP ? SP : FP) + cfa_off; the return
 * address is at CFA + ra_off (0: the architecture's fixed slot, CFA - 8 on
 * x86-64); the caller's frame pointer at CFA + fp_off (0: unchanged).
 */
struct code_jit_unwind_fre {
	uint32_t size;
	uint32_t ip_off;	/* offset from text_start */
	int32_t cfa_off;
	int32_t ra_off;
	int32_t fp_off;
	uint8_t info;
};
#define CODE_JIT_FRE_SIZE_VER0 21	/* bytes through info */

/* info bits. */
#define CODE_JIT_FRE_CFA_BASE_SP 0x01	/* else FP */
#define CODE_JIT_FRE_OUTERMOST 0x02	/* no caller: stop unwinding */
#define CODE_JIT_FRE_UNEXPRESSIBLE 0x04	/* no rule: use the FP chain */
#define CODE_JIT_FRE_MANGLED_RA 0x80	/* RA is signed (AArch64) */

/*
 * An append-only table of rows. reserved_len and used_len count bytes of
 * fre[]. The JIT writes a row, then publishes it with a store-release of
 * used_len (__atomic_store_n(&t->used_len, n, __ATOMIC_RELEASE)); readers
 * load used_len with acquire and never read past it. Rows are sorted by
 * ip_off and do not overlap, across chained tables too.
 */
struct code_jit_unwind_table {
	uint64_t reserved_len;
	uint64_t used_len;
	uint64_t next;		/* struct code_jit_unwind_table *, or 0 */
	uint32_t fre_stride;	/* bytes from one row to the next */
	uint32_t fre_size;	/* meaningful bytes of a row */
	char fre[];
};

/*
 * Registers or unregisters code. flags must be 0. Returns 0, or a negative
 * errno: -EINVAL (bad option, flags, range or SFrame section), -E2BIG
 * (info_size larger than this library knows with non-zero extra bytes, or
 * larger than a page), -ENOMEM, -EEXIST (text range overlaps a registered
 * one), -ENOENT (nothing registered at text_start), -EFAULT (info, or a
 * range or string it names, cannot be read: every pointer is read as the
 * kernel reads user memory, never trusted), -ENAMETOOLONG (a string with
 * no NUL within 4096 bytes).
 */
int codectl(unsigned int option, void *info, size_t info_size, unsigned int flags);

/* ---- ichnos extensions ---- */

/* Where a row came from. */
enum ichnos_row_source {
	ICHNOS_ROW_NONE = 0,
	ICHNOS_ROW_SFRAME = 1,
	ICHNOS_ROW_EH_FRAME = 2,
	ICHNOS_ROW_JIT = 3,
	ICHNOS_ROW_DEBUG_FRAME = 4,	/* .debug_frame CFI */
	ICHNOS_ROW_GO_PCLNTAB = 5,	/* a Go function table's SP tables */
};

/* The answer of ichnos_code_lookup(). */
struct ichnos_code_lookup {
	uint64_t text_start;	/* the registration containing the address */
	uint64_t text_end;
	uint32_t source;	/* enum ichnos_row_source of the object */
	uint32_t has_row;	/* 1 if row is valid */
	struct code_jit_unwind_fre row;	/* ip_off counts from text_start */
};

/*
 * Looks up addr in the registry without waiting for registrations. Returns
 * 0, or -ENOENT if no registration contains addr, or -EINVAL if out is NULL.
 */
int ichnos_code_lookup(uint64_t addr, struct ichnos_code_lookup *out);

/*
 * Registers every object loaded in the process (dl_iterate_phdr) with its
 * PT_GNU_SFRAME segment, build id and debug link. Returns the number of
 * text ranges registered (objects already registered are skipped).
 */
int ichnos_code_register_loaded_objects(void);

/*
 * Writes /tmp/perf-PID.map, the perf map of the registry's JIT code: one
 * "START SIZE NAME" line (hexadecimal) per JIT registration, the file perf,
 * samply and ichnos read to name JIT frames. Written beside its place and
 * renamed over it; never written through a link. Returns 0, or -errno.
 */
int ichnos_registry_write_perf_map(void);

/*
 * With on != 0: writes the perf map now, then adds a line for every JIT
 * registration as it is made (a removed registration keeps its line: perf
 * maps have no removal). With on == 0: stops. Returns 0, or -errno (the
 * map is then not kept).
 */
int ichnos_registry_keep_perf_map(int on);

/* The message of the last failed call on this thread (see iscache.h). */
const char *ichnos_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* ICHNOS_CODECTL_H */
