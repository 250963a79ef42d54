/*
 * The symbolization C ABI from C: prints addr2line -f -i -C lines for the
 * addresses given after the object file, so the test can compare them
 * with binutils; then checks the error numbers. Exits non-zero on a failed
 * check.
 *
 * usage: symbolize_test FILE JUNK_FILE ADDR...
 */
#define _POSIX_C_SOURCE 200809L /* mkfifo(), alarm() */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ichnos/symbolize.h>

#define MAX_FRAMES 16

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	struct ichnos_symbolizer *s = ichnos_symbolizer_new(NULL);
	if (!s)
		return 3;
	struct ichnos_frame frames[MAX_FRAMES];
	int most = 0;
	for (int i = 3; i < argc; i++) {
		uint64_t addr = strtoull(argv[i], NULL, 16);
		int source = -1;
		int n = ichnos_symbolize(s, argv[1], addr, frames, MAX_FRAMES, &source);
		if (n < 1 || source != ICHNOS_DEBUG_SAME_FILE) {
			fprintf(stderr, "FAIL %s: %d (%s)\n", argv[i], n, ichnos_last_error());
			return 1;
		}
		if (n > most)
			most = n;
		for (int f = 0; f < n && f < MAX_FRAMES; f++) {
			printf("%s\n", frames[f].function ? frames[f].function : "??");
			if (!frames[f].file && !frames[f].function)
				printf("??:0\n");
			else if (frames[f].line)
				printf("%s:%u\n", frames[f].file ? frames[f].file : "??", frames[f].line);
			else
				printf("%s:?\n", frames[f].file ? frames[f].file : "??");
		}
	}
	/* Fewer slots than frames: the count still says how many there are. */
	if (most > 1) {
		for (int i = 3; i < argc; i++) {
			int n = ichnos_symbolize(s, argv[1], strtoull(argv[i], NULL, 16), frames, 1, NULL);
			if (n == most)
				break;
			if (i == argc - 1) {
				fprintf(stderr, "FAIL: max 1 lost the frame count\n");
				return 1;
			}
		}
	}
	if (ichnos_symbolize(s, NULL, 0, frames, 1, NULL) != -EINVAL ||
	    ichnos_symbolize(NULL, argv[1], 0, frames, 1, NULL) != -EINVAL ||
	    ichnos_symbolize(s, argv[1], 0, NULL, 1, NULL) != -EINVAL) {
		fprintf(stderr, "FAIL: NULL arguments\n");
		return 1;
	}
	if (ichnos_symbolize(s, "/no/such/file", 0, frames, 1, NULL) != -ENOENT) {
		fprintf(stderr, "FAIL: missing file\n");
		return 1;
	}
	if (ichnos_symbolize(s, argv[2], 0, frames, 1, NULL) != -EIO ||
	    ichnos_last_error()[0] == '\0') {
		fprintf(stderr, "FAIL: junk file\n");
		return 1;
	}
	/* A FIFO where an object was expected is refused at once, never
	 * waited on for a writer (the alarm ends a hang as a failure). */
	char fifo[4096];
	snprintf(fifo, sizeof(fifo), "%s.fifo", argv[2]);
	if (mkfifo(fifo, 0600) != 0) {
		perror(fifo);
		return 1;
	}
	alarm(20);
	if (ichnos_symbolize(s, fifo, 0, frames, 1, NULL) != -EIO ||
	    strstr(ichnos_last_error(), "a FIFO, not a regular file") == NULL) {
		fprintf(stderr, "FAIL: FIFO: %s\n", ichnos_last_error());
		return 1;
	}
	/* The index of a FIFO, by a symbolizer that keeps indexes (in the
	 * directory the test's files are in). */
	char index_dir[4096];
	snprintf(index_dir, sizeof(index_dir), "%s", argv[2]);
	char *slash = strrchr(index_dir, '/');
	if (slash)
		*slash = '\0';
	struct ichnos_symbolizer_options options = { 0 };
	options.index_dir = index_dir;
	struct ichnos_symbolizer *indexing = NULL;
	if (ichnos_symbolizer_create(&options, sizeof(options), &indexing) != 0) {
		fprintf(stderr, "FAIL: create: %s\n", ichnos_last_error());
		return 1;
	}
	if (ichnos_symbolizer_build_index(indexing, fifo) >= 0 ||
	    strstr(ichnos_last_error(), "a FIFO, not a regular file") == NULL) {
		fprintf(stderr, "FAIL: FIFO index: %s\n", ichnos_last_error());
		return 1;
	}
	ichnos_symbolizer_free(indexing);
	alarm(0);
	ichnos_symbolizer_free(s);
	ichnos_symbolizer_free(NULL);
	return 0;
}
