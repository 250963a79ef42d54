/*
 * Exercises the libipt image API as its manual pages describe it. Built
 * twice by the test suite: against ichnos (-DICHNOS, <ichnos/iscache.h>,
 * -lichnos) and, where installed, against libipt (<intel-pt.h>, -lipt), so
 * that both libraries are held to the same expectations. ichnos extensions
 * and the documented deliberate differences are under #ifdef ICHNOS.
 *
 * Usage: iscache_test DIR   (a writable scratch directory)
 */
#define _POSIX_C_SOURCE 200809L /* truncate() */
#ifdef ICHNOS
#include <ichnos/iscache.h>
#else
#include <intel-pt.h>
#endif

/* A file that cannot be examined: libipt 2.0.5 (Debian 12) says
 * pte_invalid, libipt 2.1 and later and ichnos say pte_bad_file. */
#if defined(ICHNOS) || LIBIPT_VERSION >= 0x201
#define MISSING_FILE pte_bad_file
#else
#define MISSING_FILE pte_invalid
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)                                                        \
	do {                                                               \
		if (cond) {                                                \
			passed++;                                          \
		} else {                                                   \
			failed++;                                          \
			fprintf(stderr, "%s:%d: check failed: %s\n",       \
				__FILE__, __LINE__, #cond);                \
		}                                                          \
	} while (0)

#define CHECK_EQ(a, b)                                                     \
	do {                                                               \
		long long va_ = (long long)(a), vb_ = (long long)(b);      \
		if (va_ == vb_) {                                          \
			passed++;                                          \
		} else {                                                   \
			failed++;                                          \
			fprintf(stderr, "%s:%d: %s == %lld, expected %lld\n", \
				__FILE__, __LINE__, #a, va_, vb_);         \
		}                                                          \
	} while (0)

static char file_a[4096], file_b[4096];

/* Writes bytes base, base+1, ... (n bytes) to path. */
static void write_file(const char *path, int n, int base)
{
	FILE *f = fopen(path, "wb");
	int i;

	if (!f) {
		perror(path);
		exit(2);
	}
	for (i = 0; i < n; i++)
		fputc((base + i) & 0xff, f);
	fclose(f);
}

static void test_layout(void)
{
	CHECK_EQ(sizeof(struct pt_asid), 24);
	CHECK_EQ(offsetof(struct pt_asid, size), 0);
	CHECK_EQ(offsetof(struct pt_asid, cr3), 8);
	CHECK_EQ(offsetof(struct pt_asid, vmcs), 16);
	CHECK_EQ(pte_nomap, 13);
	CHECK_EQ(pte_bad_image, 17);
	CHECK_EQ(pte_bad_file, 26);
}

static void test_iscache_nulls(void)
{
	uint8_t buf[4];

	pt_iscache_free(NULL);
	CHECK(pt_iscache_name(NULL) == NULL);
	CHECK_EQ(pt_iscache_set_limit(NULL, 0), -pte_invalid);
	CHECK_EQ(pt_iscache_add_file(NULL, file_a, 0, 1, 0), -pte_invalid);
	CHECK_EQ(pt_iscache_read(NULL, buf, 1, 1, 0), -pte_invalid);
}

static void test_iscache(void)
{
	struct pt_image_section_cache *iscache, *unnamed;
	uint8_t buf[8];
	int isid, isid2, isid3, status;
	char name[] = "session";

	iscache = pt_iscache_alloc(name);
	CHECK(iscache != NULL);
	name[0] = 'X'; /* the name was copied */
	CHECK(strcmp(pt_iscache_name(iscache), "session") == 0);
	unnamed = pt_iscache_alloc(NULL);
	CHECK(unnamed != NULL);
	CHECK(pt_iscache_name(unnamed) == NULL);
	pt_iscache_free(unnamed);

	CHECK_EQ(pt_iscache_add_file(iscache, NULL, 0, 1, 0), -pte_invalid);
	/* offset at the end of the 0x40-byte file */
	CHECK_EQ(pt_iscache_add_file(iscache, file_a, 0x40, 1, 0),
		 -pte_invalid);
	CHECK_EQ(pt_iscache_add_file(iscache, "/nonexistent/ichnos", 0, 1, 0),
		 -MISSING_FILE);

	isid = pt_iscache_add_file(iscache, file_a, 0x10, 0x20, 0xa000);
	CHECK(isid > 0);
	/* identical section: same isid */
	CHECK_EQ(pt_iscache_add_file(iscache, file_a, 0x10, 0x20, 0xa000), isid);
	/* same file range at another address: a new isid */
	isid2 = pt_iscache_add_file(iscache, file_a, 0x10, 0x20, 0xb000);
	CHECK(isid2 > 0 && isid2 != isid);
	/* an oversized request is cut to the file's end and de-duplicated */
	isid3 = pt_iscache_add_file(iscache, file_a, 0x20, 0x1000, 0xc000);
	CHECK(isid3 > 0);
	CHECK_EQ(pt_iscache_add_file(iscache, file_a, 0x20, 0x20, 0xc000), isid3);

	memset(buf, 0xee, sizeof(buf));
	status = pt_iscache_read(iscache, buf, 2, isid, 0xa008);
	CHECK_EQ(status, 2);
	CHECK_EQ(buf[0], 0x18);
	CHECK_EQ(buf[1], 0x19);
	CHECK_EQ(buf[2], 0xee);

	/* a read across the section's end is cut there */
	status = pt_iscache_read(iscache, buf, 8, isid, 0xa01f);
	CHECK_EQ(status, 1);
	CHECK_EQ(buf[0], 0x2f);
	status = pt_iscache_read(iscache, buf, 4, isid2, 0xb000);
	CHECK_EQ(status, 4);
	CHECK_EQ(buf[0], 0x10);

	CHECK_EQ(pt_iscache_read(iscache, buf, 1, isid, 0xa020), -pte_nomap);
	CHECK_EQ(pt_iscache_read(iscache, buf, 1, isid, 0x9fff), -pte_nomap);
	CHECK_EQ(pt_iscache_read(iscache, buf, 1, 100, 0xa000), -pte_bad_image);
	CHECK_EQ(pt_iscache_read(iscache, buf, 1, 0, 0xa000), -pte_bad_image);
	CHECK_EQ(pt_iscache_read(iscache, buf, 1, -1, 0xa000), -pte_bad_image);
	CHECK_EQ(pt_iscache_read(iscache, NULL, 1, isid, 0xa000), -pte_invalid);
	CHECK_EQ(pt_iscache_read(iscache, buf, 0, isid, 0xa000), -pte_invalid);

	CHECK_EQ(pt_iscache_set_limit(iscache, 0), 0);
	/* still readable after everything was unmapped */
	CHECK_EQ(pt_iscache_read(iscache, buf, 1, isid, 0xa000), 1);
	CHECK_EQ(pt_iscache_set_limit(iscache, 1ull << 20), 0);

	pt_iscache_free(iscache);
}

struct callback_log {
	int calls;
	uint64_t ip;
	uint64_t cr3;
};

static int fill_callback(uint8_t *buffer, size_t size,
			 const struct pt_asid *asid, uint64_t ip, void *context)
{
	struct callback_log *log = context;

	log->calls++;
	log->ip = ip;
	log->cr3 = asid ? asid->cr3 : 0;
	if (ip == 0xdead)
		return -pte_nomap;
	memset(buffer, 0xcc, size);
	return (int)size;
}

static void test_image(void)
{
	struct pt_image_section_cache *iscache;
	struct pt_image *image, *copy;
	struct pt_asid asid1, asid2, small;
	int isid, status;
	char name[] = "image";

	pt_image_free(NULL);
	CHECK(pt_image_name(NULL) == NULL);
	image = pt_image_alloc(name);
	CHECK(image != NULL);
	name[0] = 'X';
	CHECK(strcmp(pt_image_name(image), "image") == 0);
	copy = pt_image_alloc(NULL);
	CHECK(pt_image_name(copy) == NULL);

	pt_asid_init(&asid1);
	asid1.cr3 = 0x1000;
	pt_asid_init(&asid2);
	asid2.cr3 = 0x2000;

	CHECK_EQ(pt_image_add_file(NULL, file_a, 0, 1, NULL, 0), -pte_invalid);
	CHECK_EQ(pt_image_add_file(image, NULL, 0, 1, NULL, 0), -pte_invalid);
	CHECK_EQ(pt_image_add_file(image, file_a, 0x40, 1, NULL, 0),
		 -pte_invalid);
	CHECK_EQ(pt_image_add_file(image, "/nonexistent/ichnos", 0, 1, NULL, 0),
		 -MISSING_FILE);

	CHECK_EQ(pt_image_add_file(image, file_a, 0, 0x40, &asid1, 0x1000), 0);
	CHECK_EQ(pt_image_add_file(image, file_b, 0, 0x40, &asid2, 0x1000), 0);

	iscache = pt_iscache_alloc(NULL);
	isid = pt_iscache_add_file(iscache, file_b, 0, 0x10, 0x8000);
	CHECK(isid > 0);
	CHECK_EQ(pt_image_add_cached(NULL, iscache, isid, NULL), -pte_invalid);
	CHECK_EQ(pt_image_add_cached(image, NULL, isid, NULL), -pte_invalid);
	CHECK_EQ(pt_image_add_cached(image, iscache, isid + 1, NULL),
		 -pte_bad_image);
	CHECK_EQ(pt_image_add_cached(image, iscache, isid, NULL), 0);
	CHECK_EQ(pt_image_add_cached(image, iscache, isid, NULL), 0);

	CHECK_EQ(pt_image_copy(NULL, image), -pte_invalid);
	CHECK_EQ(pt_image_copy(copy, NULL), -pte_invalid);
	CHECK_EQ(pt_image_copy(image, image), 0);
	CHECK_EQ(pt_image_copy(copy, image), 0);

	CHECK_EQ(pt_image_set_callback(NULL, NULL, NULL), -pte_invalid);

#ifdef ICHNOS
	{
		struct callback_log log = { 0, 0, 0 };
		uint8_t buf[8];
		int sid = -1;

		/* the asid selects the file */
		status = ichnos_image_read(image, buf, 2, &asid1, 0x1003, &sid);
		CHECK_EQ(status, 2);
		CHECK_EQ(buf[0], 0x03);
		CHECK_EQ(sid, 0);
		status = ichnos_image_read(image, buf, 2, &asid2, 0x1003, &sid);
		CHECK_EQ(status, 2);
		CHECK_EQ(buf[0], 0x83);
		/* read past the end is cut */
		status = ichnos_image_read(image, buf, 8, &asid1, 0x103e, NULL);
		CHECK_EQ(status, 2);
		/* the cached section reports its isid */
		status = ichnos_image_read(image, buf, 1, NULL, 0x8001, &sid);
		CHECK_EQ(status, 1);
		CHECK_EQ(buf[0], 0x81);
		CHECK_EQ(sid, isid);
		/* the copy reads the same */
		status = ichnos_image_read(copy, buf, 1, &asid2, 0x1004, &sid);
		CHECK_EQ(status, 1);
		CHECK_EQ(buf[0], 0x84);
		/* nothing there, no callback */
		CHECK_EQ(ichnos_image_read(image, buf, 1, NULL, 0x5000, &sid),
			 -pte_nomap);
		CHECK(strstr(ichnos_last_error(), "0x5000") != NULL);

		CHECK_EQ(pt_image_set_callback(image, fill_callback, &log), 0);
		status = ichnos_image_read(image, buf, 3, &asid1, 0x5000, &sid);
		CHECK_EQ(status, 3);
		CHECK_EQ(buf[0], 0xcc);
		CHECK_EQ(sid, 0);
		CHECK_EQ(log.calls, 1);
		CHECK_EQ(log.ip, 0x5000);
		CHECK_EQ(log.cr3, 0x1000);
		/* a callback error comes back unchanged */
		CHECK_EQ(ichnos_image_read(image, buf, 3, &asid1, 0xdead, &sid),
			 -pte_nomap);
		CHECK_EQ(pt_image_set_callback(image, NULL, NULL), 0);
		CHECK_EQ(ichnos_image_read(image, buf, 1, NULL, 0x5000, &sid),
			 -pte_nomap);
		CHECK_EQ(log.calls, 2);

		/* a caller's asid of an older, smaller size: only size is
		 * known, so the asid is the wildcard */
		small.size = sizeof(size_t);
		small.cr3 = 0x2000;
		small.vmcs = 0;
		CHECK_EQ(ichnos_image_read(image, buf, 1, &small, 0x8000, &sid),
			 1);
		/* ichnos rejects a section of size 0; libipt accepts one that
		 * can never be read */
		CHECK_EQ(pt_iscache_add_file(iscache, file_a, 0, 0, 0),
			 -pte_invalid);
		CHECK(strstr(ichnos_last_error(), "size 0") != NULL);
	}
#else
	(void)fill_callback;
	(void)small;
	(void)status;
#endif

	/* removal: by file name (textual) and asid */
	CHECK_EQ(pt_image_remove_by_filename(NULL, file_a, NULL), -pte_invalid);
	CHECK_EQ(pt_image_remove_by_filename(image, NULL, NULL), -pte_invalid);
	CHECK_EQ(pt_image_remove_by_filename(image, file_a, &asid2), 0);
	CHECK_EQ(pt_image_remove_by_filename(image, "no-such-file", NULL), 0);
	CHECK_EQ(pt_image_remove_by_filename(image, file_a, &asid1), 1);
	CHECK_EQ(pt_image_remove_by_asid(NULL, NULL), -pte_invalid);
	CHECK_EQ(pt_image_remove_by_asid(image, &asid2), 2);
	CHECK_EQ(pt_image_remove_by_asid(image, NULL), 0);
	CHECK_EQ(pt_image_remove_by_asid(copy, NULL), 3);

	pt_image_free(copy);
	pt_image_free(image);
	/* the cache may go before or after the images that use it */
	pt_iscache_free(iscache);
}

#ifdef ICHNOS
/* The message of an unknown isid names the cache as C wrote it. */
static void test_unknown_isid_message(void)
{
	struct pt_image_section_cache *named = pt_iscache_alloc("c");
	uint8_t buf[1];
	CHECK_EQ(pt_iscache_read(named, buf, 1, 99, 0), -pte_bad_image);
	CHECK(strstr(ichnos_last_error(), "section cache \"c\" has no section with isid 99") != NULL);
	CHECK(strstr(ichnos_last_error(), "Some(") == NULL);
	pt_iscache_free(named);
	struct pt_image_section_cache *unnamed = pt_iscache_alloc(NULL);
	CHECK_EQ(pt_iscache_read(unnamed, buf, 1, 99, 0), -pte_bad_image);
	CHECK(strstr(ichnos_last_error(), "(unnamed)") != NULL);
	CHECK(strstr(ichnos_last_error(), "None") == NULL);
	pt_iscache_free(unnamed);
}

/* A file cut short while mapped: libipt's reads would die of SIGBUS past
 * the new end; ichnos's fail with pte_bad_image and say why. */
static void test_truncated_while_mapped(const char *dir)
{
	char path[4096];
	struct pt_image_section_cache *iscache = pt_iscache_alloc(NULL);
	struct pt_image *image = pt_image_alloc(NULL);
	uint8_t buf[4];
	int isid, status;

	snprintf(path, sizeof(path), "%s/cut.bin", dir);
	write_file(path, 0x3000, 0);
	isid = pt_iscache_add_file(iscache, path, 0, 0x3000, 0x100000);
	CHECK(isid > 0);
	CHECK_EQ(pt_image_add_cached(image, iscache, isid, NULL), 0);
	CHECK_EQ(pt_iscache_read(iscache, buf, 4, isid, 0x102000), 4);
	CHECK_EQ(buf[0], 0x00);
	CHECK_EQ(truncate(path, 0x1000), 0);
	status = pt_iscache_read(iscache, buf, 4, isid, 0x102000);
	CHECK_EQ(status, -pte_bad_image);
	CHECK(strstr(ichnos_last_error(), "cut short while mapped") != NULL);
	status = ichnos_image_read(image, buf, 4, NULL, 0x102000, NULL);
	CHECK_EQ(status, -pte_bad_image);
	pt_image_free(image);
	pt_iscache_free(iscache);
}
#endif

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(file_a, sizeof(file_a), "%s/a.bin", argv[1]);
	snprintf(file_b, sizeof(file_b), "%s/b.bin", argv[1]);
	write_file(file_a, 0x40, 0x00);
	write_file(file_b, 0x40, 0x80);

	test_layout();
	test_iscache_nulls();
	test_iscache();
	test_image();
#ifdef ICHNOS
	test_truncated_while_mapped(argv[1]);
	test_unknown_isid_message();
#endif

	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
