/*
 * ichnos_symbolize_address() from C: for each address given after the
 * object file, prints one line
 *
 *     ADDR FUNCTION START UNNAMED
 *
 * (FUNCTION "-" when no frame names it, START the function's start in hex,
 * 0 if unknown, UNNAMED the enum ichnos_unnamed value), for the test to
 * hold to nm; then checks the size rules. Exits non-zero on a failed
 * check.
 *
 * usage: symbolize_address FILE ADDR...
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	for (int i = 2; i < argc; i++) {
		uint64_t addr = strtoull(argv[i], NULL, 16);
		struct ichnos_address address;
		memset(&address, 0xff, sizeof(address));
		int n = ichnos_symbolize_address(s, argv[1], addr, frames, MAX_FRAMES, &address,
						 sizeof(address));
		if (n < 1 || n > MAX_FRAMES || address.source != ICHNOS_DEBUG_SAME_FILE) {
			fprintf(stderr, "FAIL %s: %d (%s)\n", argv[i], n, ichnos_last_error());
			return 1;
		}
		/* The outermost frame is the function the code lies in. */
		const char *name = frames[n - 1].raw_function;
		printf("0x%" PRIx64 " %s %" PRIx64 " %" PRIu32 "\n", addr, name ? name : "-",
		       address.function_start, address.unnamed);
	}

	/* A struct too small is refused; a larger (newer) one gets the
	 * library's fields and keeps its own bytes. */
	struct {
		struct ichnos_address known;
		uint64_t newer;
	} big;
	memset(&big, 0xab, sizeof(big));
	uint64_t addr = strtoull(argv[2], NULL, 16);
	if (ichnos_symbolize_address(s, argv[1], addr, frames, MAX_FRAMES, &big.known,
				     ICHNOS_ADDRESS_SIZE_VER0 - 1) != -EINVAL ||
	    ichnos_symbolize_address(s, argv[1], addr, frames, MAX_FRAMES, NULL,
				     ICHNOS_ADDRESS_SIZE_VER0) != -EINVAL) {
		fprintf(stderr, "FAIL: a small or NULL address struct was accepted\n");
		return 1;
	}
	if (ichnos_symbolize_address(s, argv[1], addr, frames, MAX_FRAMES, &big.known,
				     sizeof(big)) < 1 ||
	    big.known.source != ICHNOS_DEBUG_SAME_FILE || big.newer != 0xababababababababull) {
		fprintf(stderr, "FAIL: a larger struct was not filled as documented\n");
		return 1;
	}
	if (sizeof(struct ichnos_address) != ICHNOS_ADDRESS_SIZE_VER0) {
		fprintf(stderr, "FAIL: sizeof(struct ichnos_address) %zu\n",
			sizeof(struct ichnos_address));
		return 1;
	}
	ichnos_symbolizer_free(s);
	return 0;
}
