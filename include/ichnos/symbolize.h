/*
 * ichnos: addresses to functions, source files and lines.
 *
 * A symbolizer parses each object file once and answers addresses of it
 * (the file's own virtual addresses, what addr2line -e takes) with frames:
 * inlined functions first, the function they were inlined into last.
 * Debug information comes from the file, or from separate debug files
 * found by build id or .gnu_debuglink (CRC checked). Specification:
 * docs/c-abi-symbolize.md.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef ICHNOS_SYMBOLIZE_H
#define ICHNOS_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque symbolizer; not to be used by two threads at once. */
struct ichnos_symbolizer;

/* One frame. Strings are NUL-terminated, NULL when unknown, and stay valid
 * until the next ichnos_symbolize() call on the same symbolizer. */
struct ichnos_frame {
	const char *function;		/* demangled */
	const char *raw_function;	/* as stored */
	const char *file;
	uint32_t line;			/* 0 when unknown */
	uint32_t column;		/* 0 when unknown */
	int inlined;			/* 1 if inlined into the next frame */
};

/* Where the answer came from. */
enum ichnos_debug_source {
	ICHNOS_DEBUG_SAME_FILE = 0,
	ICHNOS_DEBUG_BUILD_ID = 1,
	ICHNOS_DEBUG_LINK = 2,
	ICHNOS_DEBUG_SYMBOLS_ONLY = 3,
	ICHNOS_DEBUG_MINI_DEBUG_INFO = 4,	/* symbols from .gnu_debugdata */
	/* Where symbolization of a live process answers (not from C yet). */
	ICHNOS_DEBUG_JITDUMP = 5,		/* the process's jitdump file */
	ICHNOS_DEBUG_PERF_MAP = 6,		/* /tmp/perf-PID.map */
	ICHNOS_DEBUG_REGISTRY = 7,		/* names registered with codectl() */
	ICHNOS_DEBUG_NOTHING = 8,		/* nothing names the address */
};

/* A symbolizer. debug_dir: where separate debug files live, or NULL for
 * /usr/lib/debug. Parsed objects are kept (per build id) up to 4 GiB of
 * mapped files, the least recently used dropped beyond; a file changed on
 * disk since it was parsed (inode, size, mtime) is parsed again. NULL only
 * when debug_dir cannot be read (errno EFAULT) or has no NUL within 4096
 * bytes (errno ENAMETOOLONG). Every pointer argument of these calls is
 * read as the kernel reads user memory: one that cannot be read is
 * -EFAULT, a string without a NUL within 4096 bytes -ENAMETOOLONG. */
struct ichnos_symbolizer *ichnos_symbolizer_new(const char *debug_dir);

/* ichnos_symbolizer_options.flags: */
#define ICHNOS_SYMBOLIZE_RAW_NAMES 0x1u	/* function is the name as stored */
#define ICHNOS_SYMBOLIZE_NO_INLINES 0x2u	/* one frame per address: the
						 * function the code lies in, at
						 * the innermost line */

/* Options of ichnos_symbolizer_create(). Zero means the default for every
 * field, and the struct may grow in later versions: pass sizeof(struct
 * ichnos_symbolizer_options) as size. */
struct ichnos_symbolizer_options {
	uint32_t flags;				/* ICHNOS_SYMBOLIZE_* */
	uint32_t reserved;			/* must be 0 */
	const char *const *debug_dirs;		/* at most 256, then NULL; or
						 * NULL for /usr/lib/debug */
	uint64_t max_cached_bytes;		/* 0: 4 GiB */
	/* Version 1: */
	const char *index_dir;			/* where symbol indexes are
						 * kept, or NULL for none */
};

/* sizeof(struct ichnos_symbolizer_options) in its first version: the
 * least size ichnos_symbolizer_create() takes. */
#define ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0 24
/* ... and with index_dir. */
#define ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER1 32

/*
 * A symbolizer with options. size is the caller's sizeof(*options): at
 * least ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0; a struct of a later version
 * than this library knows is accepted only if the bytes it does not know
 * are 0. Stores the symbolizer in *out and returns 0, or a negative errno:
 * -EINVAL (options or out NULL, size below the first version or between
 * the first and the second, unknown flags, reserved not 0), -E2BIG (unknown non-zero bytes, size above 4096,
 * more than 256 debug_dirs before their NULL).
 */
int ichnos_symbolizer_create(const struct ichnos_symbolizer_options *options, size_t size,
			     struct ichnos_symbolizer **out);

/* Frees a symbolizer and everything it returned. NULL is allowed. */
void ichnos_symbolizer_free(struct ichnos_symbolizer *symbolizer);

/*
 * Symbolizes address addr of the object file at path. Fills up to max
 * frames (innermost first) and, if source is not NULL, where the answer
 * came from. Returns the number of frames the address has (at least 1;
 * more than max means frames were left out), or a negative errno: -EINVAL
 * (NULL argument), -ENOENT (file missing), -EIO (file unreadable or not
 * ELF, message in ichnos_last_error()).
 */
int ichnos_symbolize(struct ichnos_symbolizer *symbolizer, const char *path, uint64_t addr,
		     struct ichnos_frame *frames, size_t max, int *source);

/* Why no frame names an address (struct ichnos_address.unnamed). */
enum ichnos_unnamed {
	ICHNOS_NAMED = 0,			/* a frame names it */
	ICHNOS_UNNAMED_OUTSIDE_SECTIONS = 1,	/* outside every loadable section */
	ICHNOS_UNNAMED_PADDING = 2,		/* between functions (alignment) */
	ICHNOS_UNNAMED_NO_SYMBOL = 3,		/* in a section; no symbol, no DWARF */
	/* Where symbolization of a live process answers (not from C yet). */
	ICHNOS_UNNAMED_UNMAPPED = 4,		/* in no executable mapping */
	ICHNOS_UNNAMED_ANONYMOUS = 5,		/* anonymous memory nothing names */
};

/* What is known of an address as a whole (docs/c-abi-symbolize.md). */
struct ichnos_address {
	int32_t source;			/* enum ichnos_debug_source */
	uint32_t unnamed;		/* enum ichnos_unnamed */
	uint64_t function_start;	/* where the function holding the address
					 * starts (its ELF symbol's address, in
					 * the file's terms; past the symbol's
					 * end, the symbol the line table names
					 * it after); 0 if unknown */
};

/* sizeof(struct ichnos_address) in its first version. */
#define ICHNOS_ADDRESS_SIZE_VER0 16

/*
 * As ichnos_symbolize(), and fills *address (the caller's
 * sizeof(struct ichnos_address) in size, at least
 * ICHNOS_ADDRESS_SIZE_VER0; bytes past this library's struct are left as
 * they are): where the address's function starts, so that it can be
 * printed as function+0x12, and why nothing names it. Same return values;
 * also -EINVAL if address is NULL or size is too small.
 */
int ichnos_symbolize_address(struct ichnos_symbolizer *symbolizer, const char *path, uint64_t addr,
			     struct ichnos_frame *frames, size_t max,
			     struct ichnos_address *address, size_t size);

/*
 * Makes the symbol index of the object file at path in the symbolizer's
 * index_dir (docs/symbol-index.md), replacing an older one; from then on,
 * this and every symbolizer with that index_dir answers for the same build
 * of the file from the index, without reading its DWARF. Returns 0, or a
 * negative errno: -EINVAL (NULL argument, or no index_dir), -ENOENT (file
 * missing), -ENODATA (not indexed: no build id, no DWARF, or debug
 * information found incomplete), -EIO (file unreadable or not ELF, or the
 * index not written); the message is in ichnos_last_error().
 */
int ichnos_symbolizer_build_index(struct ichnos_symbolizer *symbolizer, const char *path);

/* The message of the last failed call on this thread (see iscache.h). */
const char *ichnos_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* ICHNOS_SYMBOLIZE_H */
