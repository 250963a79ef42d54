/* The built-in demo's native code, built by build.rs with -O2
 * -fomit-frame-pointer and SFrame (-Wa,--gsframe): call chains several
 * levels deep that no frame-pointer walk can follow, and the callback the
 * demo's JIT code calls. Every call is followed by work on its result, so
 * none becomes a tail call and every level keeps its frame. */
#include <stdint.h>
#include <time.h>

static double seconds_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The hot leaf of the native thread. */
__attribute__((noinline)) uint64_t mix_block(uint64_t x, int rounds)
{
	for (int i = 0; i < rounds; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		x ^= x >> 29;
	}
	return x;
}

/* A second leaf, about half as hot. */
__attribute__((noinline)) uint64_t checksum_row(const uint64_t *row, int n)
{
	uint64_t sum = 0;
	for (int round = 0; round < 24; round++)
		for (int i = 0; i < n; i++)
			sum = (sum << 7 | sum >> 57) ^ (row[i] + (uint64_t)round);
	return sum;
}

__attribute__((noinline)) uint64_t hash_row(uint64_t seed, uint64_t *row, int n)
{
	for (int i = 0; i < n; i++)
		row[i] = mix_block(seed + (uint64_t)i, 48);
	uint64_t h = checksum_row(row, n);
	return h ^ seed;
}

__attribute__((noinline)) uint64_t transform_table(uint64_t seed)
{
	uint64_t row[32];
	uint64_t acc = seed;
	for (int r = 0; r < 8; r++)
		acc += hash_row(acc + (uint64_t)r, row, 32);
	return acc * 3;
}

__attribute__((noinline)) uint64_t parse_records(uint64_t seed)
{
	uint64_t v = transform_table(seed);
	return v ^ (v >> 17);
}

/* The native thread: parse_records -> transform_table -> hash_row ->
 * mix_block / checksum_row, for `seconds`. */
uint64_t demo_native_work(double seconds)
{
	double end = seconds_now() + seconds;
	uint64_t acc = 1;
	while (seconds_now() < end)
		acc += parse_records(acc);
	return acc;
}

/* Called back from the JIT code. */
__attribute__((noinline)) uint64_t score_leaf(uint64_t x)
{
	for (int i = 0; i < 1500; i++)
		x = (x ^ (x >> 13)) * 0x9e3779b97f4a7c15ULL;
	return x;
}

__attribute__((noinline)) uint64_t demo_jit_callback(uint64_t x)
{
	uint64_t s = score_leaf(x);
	return s ^ (s >> 31);
}

typedef uint64_t (*jit_loop_fn)(uint64_t n, uint64_t (*cb)(uint64_t));

/* The JIT thread: the generated loop, which calls demo_jit_callback,
 * for `seconds`. */
uint64_t demo_jit_driver(jit_loop_fn loop, double seconds)
{
	double end = seconds_now() + seconds;
	uint64_t acc = 0;
	while (seconds_now() < end)
		acc += loop(200, demo_jit_callback);
	return acc;
}
