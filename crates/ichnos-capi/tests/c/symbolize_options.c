/*
 * The symbolizer's options from C. In the modes "default", "raw" and
 * "noinline" it prints addr2line-style lines (function, then file:line)
 * for the addresses given after the object file, through a symbolizer made
 * with no flags, ICHNOS_SYMBOLIZE_RAW_NAMES or ICHNOS_SYMBOLIZE_NO_INLINES;
 * the test compares them with binutils. The mode "index" does the same
 * through a symbol index it makes first in DIR. In the mode "errors" it
 * checks the layout and every error number of ichnos_symbolizer_create()
 * and ichnos_symbolizer_build_index(). Exits non-zero on a failed check.
 *
 * usage: symbolize_options MODE [FILE ADDR...]
 *        symbolize_options index DIR FILE ADDR...
 *        symbolize_options errors [NO_DWARF_FILE]
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ichnos/symbolize.h>

static_assert(offsetof(struct ichnos_symbolizer_options, flags) == 0, "flags");
static_assert(offsetof(struct ichnos_symbolizer_options, reserved) == 4, "reserved");
static_assert(offsetof(struct ichnos_symbolizer_options, debug_dirs) == 8, "debug_dirs");
static_assert(offsetof(struct ichnos_symbolizer_options, max_cached_bytes) == 16, "max_cached_bytes");
static_assert(offsetof(struct ichnos_symbolizer_options, index_dir) == 24, "index_dir");
static_assert(sizeof(struct ichnos_symbolizer_options) == 32, "size");

#define MAX_FRAMES 16

static int fail(const char *what)
{
	fprintf(stderr, "FAIL %s (%s)\n", what, ichnos_last_error());
	return 1;
}

static int errors(const char *no_dwarf)
{
	struct ichnos_symbolizer_options o;
	struct ichnos_symbolizer *s = NULL;

	memset(&o, 0, sizeof(o));
	if (ichnos_symbolizer_create(NULL, sizeof(o), &s) != -EINVAL)
		return fail("NULL options");
	if (ichnos_symbolizer_create(&o, sizeof(o), NULL) != -EINVAL)
		return fail("NULL out");
	o.flags = 0x4;
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -EINVAL)
		return fail("unknown flag");
	o.flags = 0;
	o.reserved = 1;
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -EINVAL)
		return fail("reserved not 0");
	o.reserved = 0;

	/* A newer caller's struct: zero tail accepted, non-zero refused. */
	unsigned char bigger[sizeof(o) + 16];
	memset(bigger, 0, sizeof(bigger));
	memcpy(bigger, &o, sizeof(o));
	if (ichnos_symbolizer_create((const void *)bigger, sizeof(bigger), &s) != 0 || !s)
		return fail("larger struct with a zero tail");
	ichnos_symbolizer_free(s);
	s = NULL;
	bigger[sizeof(o) + 3] = 1;
	if (ichnos_symbolizer_create((const void *)bigger, sizeof(bigger), &s) != -E2BIG || s)
		return fail("larger struct with a non-zero tail");
	if (ichnos_symbolizer_create(&o, 8192, &s) != -E2BIG)
		return fail("size above a page");

	/* Bad pointers are -EFAULT, as the kernel answers them, never a
	 * crash: a struct that runs into an unmapped page, a debug_dirs
	 * array that does, an entry that points nowhere, and a string with
	 * no NUL before an unmapped page. */
	{
		long page = sysconf(_SC_PAGESIZE);
		char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (two == MAP_FAILED || munmap(two + page, page) != 0)
			return fail("mmap");
		memset(two, 0, page);
		/* A struct of a larger version whose tail lies past the page. */
		if (ichnos_symbolizer_create((const void *)(two + page - 16), 64, &s) != -EFAULT)
			return fail("struct over an unmapped page");
		/* debug_dirs: one entry, then the array runs off the page. */
		const char **dirs = (const char **)(two + page - sizeof(char *));
		dirs[0] = "/tmp";
		o.debug_dirs = dirs;
		if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -EFAULT)
			return fail("debug_dirs without its NULL before an unmapped page");
		const char *nowhere[] = {(const char *)8, NULL};
		o.debug_dirs = nowhere;
		if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -EFAULT)
			return fail("a debug_dirs entry at address 8");
		char *unterminated = two + page - 5;
		memcpy(unterminated, "/tmpX", 5);
		const char *cut[] = {unterminated, NULL};
		o.debug_dirs = cut;
		if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -EFAULT)
			return fail("a debug_dirs entry with no NUL before an unmapped page");
		o.debug_dirs = NULL;
		o.index_dir = (const char *)16;
		if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -EFAULT)
			return fail("index_dir at address 16");
		o.index_dir = NULL;
		errno = 0;
		if (ichnos_symbolizer_new((const char *)8) != NULL || errno != EFAULT)
			return fail("ichnos_symbolizer_new at address 8");
		munmap(two, page);
		s = NULL;
	}

	/* Shorter than the first version: it would cut debug_dirs. */
	static_assert(ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER1 == sizeof(o), "second version");
	static_assert(ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0 == offsetof(struct ichnos_symbolizer_options, index_dir),
		      "first version");
	s = NULL;
	if (ichnos_symbolizer_create(&o, 8, &s) != -EINVAL ||
	    ichnos_symbolizer_create(&o, 12, &s) != -EINVAL ||
	    ichnos_symbolizer_create(&o, ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0 - 1, &s) != -EINVAL || s)
		return fail("size below the first version");

	/* Debug directory lists: 256 paths are taken, 257 are too many. */
	static const char *dirs256[257], *dirs257[258];
	for (size_t i = 0; i < 257; i++)
		dirs257[i] = "/nonexistent";
	for (size_t i = 0; i < 256; i++)
		dirs256[i] = "/nonexistent";
	dirs256[256] = NULL;
	dirs257[257] = NULL;
	o.debug_dirs = dirs256;
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != 0 || !s)
		return fail("256 debug_dirs");
	ichnos_symbolizer_free(s);
	o.debug_dirs = dirs257;
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != -E2BIG)
		return fail("257 debug_dirs");
	const char *dirs[] = { "/nonexistent", "/usr/lib/debug", NULL };
	o.debug_dirs = dirs;
	o.max_cached_bytes = 1 << 20;
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != 0 || !s)
		return fail("debug_dirs and a cache bound");
	/* No index_dir: nowhere to keep an index. */
	if (ichnos_symbolizer_build_index(s, "/bin/true") != -EINVAL ||
	    ichnos_symbolizer_build_index(NULL, "/bin/true") != -EINVAL ||
	    ichnos_symbolizer_build_index(s, NULL) != -EINVAL)
		return fail("build_index without index_dir or with NULL");
	ichnos_symbolizer_free(s);

	/* Between the versions, index_dir would be cut in two. */
	if (ichnos_symbolizer_create(&o, ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0 + 4, &s) != -EINVAL ||
	    ichnos_symbolizer_create(&o, ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER1 - 1, &s) != -EINVAL)
		return fail("size between the versions");
	/* A file that is not ELF. */
	o.index_dir = "/nonexistent-index-dir";
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != 0)
		return fail("index_dir");
	if (ichnos_symbolizer_build_index(s, "/etc/passwd") != -EIO)
		return fail("build_index of a file that is not ELF");
	ichnos_symbolizer_free(s);

	/* A first-version struct leaves index_dir unread (and NULL). */
	o.index_dir = "/nonexistent-index-dir";
	if (ichnos_symbolizer_create(&o, ICHNOS_SYMBOLIZER_OPTIONS_SIZE_VER0, &s) != 0 ||
	    ichnos_symbolizer_build_index(s, "/bin/true") != -EINVAL)
		return fail("index_dir of a first-version struct");
	ichnos_symbolizer_free(s);
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != 0)
		return fail("index_dir");
	if (ichnos_symbolizer_build_index(s, "/nonexistent/file") != -ENOENT)
		return fail("build_index of a missing file");
	if (no_dwarf && ichnos_symbolizer_build_index(s, no_dwarf) != -ENODATA)
		return fail("build_index of a file without DWARF");
	ichnos_symbolizer_free(s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "errors") == 0)
		return errors(argc >= 3 ? argv[2] : NULL);
	if (argc < 3)
		return 2;
	struct ichnos_symbolizer_options o;
	memset(&o, 0, sizeof(o));
	if (strcmp(argv[1], "index") == 0) {
		if (argc < 4)
			return 2;
		o.index_dir = argv[2];
		argv++;
		argc--;
	} else if (strcmp(argv[1], "raw") == 0)
		o.flags = ICHNOS_SYMBOLIZE_RAW_NAMES;
	else if (strcmp(argv[1], "noinline") == 0)
		o.flags = ICHNOS_SYMBOLIZE_NO_INLINES;
	else if (strcmp(argv[1], "default") != 0)
		return 2;
	struct ichnos_symbolizer *s = NULL;
	if (ichnos_symbolizer_create(&o, sizeof(o), &s) != 0)
		return fail("create");
	if (o.index_dir && ichnos_symbolizer_build_index(s, argv[2]) != 0)
		return fail("build_index");
	struct ichnos_frame frames[MAX_FRAMES];
	for (int i = 3; i < argc; i++) {
		int n = ichnos_symbolize(s, argv[2], strtoull(argv[i], NULL, 16), frames, MAX_FRAMES, NULL);
		if (n < 1)
			return fail(argv[i]);
		for (int f = 0; f < n && f < MAX_FRAMES; f++) {
			printf("%s\n", frames[f].function ? frames[f].function : "??");
			if (frames[f].line)
				printf("%s:%u\n", frames[f].file ? frames[f].file : "??", frames[f].line);
			else
				printf("%s:?\n", frames[f].file ? frames[f].file : "??");
		}
	}
	ichnos_symbolizer_free(s);
	return 0;
}
