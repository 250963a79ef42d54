/*
 * ichnos: image section cache and traced memory images, libipt-compatible.
 *
 * The declarations below keep the names, signatures, structure layouts and
 * error numbers of libipt's intel-pt.h for the pt_iscache_* and pt_image_*
 * functions. A program written against libipt's manual pages for these
 * functions builds by including this header instead of <intel-pt.h> and
 * linking with -lichnos. Differences: docs/c-abi-iscache.md.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef ICHNOS_ISCACHE_H
#define ICHNOS_ISCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes; functions return them negated. Same values as libipt. */
enum pt_error_code {
	pte_ok,
	pte_internal,
	pte_invalid,
	pte_nosync,
	pte_bad_opc,
	pte_bad_packet,
	pte_bad_context,
	pte_eos,
	pte_bad_query,
	pte_nomem,
	pte_bad_config,
	pte_noip,
	pte_ip_suppressed,
	pte_nomap,
	pte_bad_insn,
	pte_no_time,
	pte_no_cbr,
	pte_bad_image,
	pte_bad_lock,
	pte_not_supported,
	pte_retstack_empty,
	pte_bad_retcomp,
	pte_bad_status_update,
	pte_no_enable,
	pte_event_ignored,
	pte_overflow,
	pte_bad_file,
	pte_bad_cpu
};

/* The error code of a status: pte_ok for every status >= 0. */
static inline enum pt_error_code pt_errcode(int status)
{
	return (status >= 0) ? pte_ok : (enum pt_error_code) -status;
}

/* A description of an error code. */
extern const char *pt_errstr(enum pt_error_code);

/* An address space: CR3 and VMCS base. A field holding the "no value"
 * constant is unknown and matches any value. */
struct pt_asid {
	/* The size of this object: set to sizeof(struct pt_asid). */
	size_t size;
	/* The CR3 value. */
	uint64_t cr3;
	/* The VMCS base address. */
	uint64_t vmcs;
};

static const uint64_t pt_asid_no_cr3 = 0xffffffffffffffffull;
static const uint64_t pt_asid_no_vmcs = 0xffffffffffffffffull;

static inline void pt_asid_init(struct pt_asid *asid)
{
	asid->size = sizeof(*asid);
	asid->cr3 = pt_asid_no_cr3;
	asid->vmcs = pt_asid_no_vmcs;
}

/* The image section cache: thread-safe, shared by many images. */
struct pt_image_section_cache;

extern struct pt_image_section_cache *pt_iscache_alloc(const char *name);
extern void pt_iscache_free(struct pt_image_section_cache *iscache);
extern int pt_iscache_set_limit(struct pt_image_section_cache *iscache,
				uint64_t limit);
extern const char *
pt_iscache_name(const struct pt_image_section_cache *iscache);
extern int pt_iscache_add_file(struct pt_image_section_cache *iscache,
			       const char *filename, uint64_t offset,
			       uint64_t size, uint64_t vaddr);
extern int pt_iscache_read(struct pt_image_section_cache *iscache,
			   uint8_t *buffer, uint64_t size, int isid,
			   uint64_t vaddr);

/* A traced memory image: one thread at a time. */
struct pt_image;

extern struct pt_image *pt_image_alloc(const char *name);
extern void pt_image_free(struct pt_image *image);
extern const char *pt_image_name(const struct pt_image *image);
extern int pt_image_add_file(struct pt_image *image, const char *filename,
			     uint64_t offset, uint64_t size,
			     const struct pt_asid *asid, uint64_t vaddr);
extern int pt_image_add_cached(struct pt_image *image,
			       struct pt_image_section_cache *iscache,
			       int isid, const struct pt_asid *asid);
extern int pt_image_copy(struct pt_image *image, const struct pt_image *src);
extern int pt_image_remove_by_filename(struct pt_image *image,
				       const char *filename,
				       const struct pt_asid *asid);
extern int pt_image_remove_by_asid(struct pt_image *image,
				   const struct pt_asid *asid);

/* Reads memory no section covers: returns bytes read or a negative
 * pt_error_code. It must not call pt_image_* functions on the image it
 * reads for. */
typedef int(read_memory_callback_t)(uint8_t *buffer, size_t size,
				    const struct pt_asid *asid, uint64_t ip,
				    void *context);

extern int pt_image_set_callback(struct pt_image *image,
				 read_memory_callback_t *callback,
				 void *context);

/* ichnos extensions (not in libipt). */

/* Reads image memory at vaddr in asid (NULL: any), as libipt's decoders do:
 * returns the bytes read, cut at the end of the section, or a negative
 * pt_error_code; stores the section's isid (0: none) in *isid if isid is not
 * NULL. */
extern int ichnos_image_read(struct pt_image *image, uint8_t *buffer,
			     size_t size, const struct pt_asid *asid,
			     uint64_t vaddr, int *isid);

/* A message naming the file, isid or address of the last failed call on
 * the calling thread; "" if none failed. Valid until the next failure. */
extern const char *ichnos_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* ICHNOS_ISCACHE_H */
