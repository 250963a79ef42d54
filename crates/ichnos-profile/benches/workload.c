/* The profiler benchmark's workload: two threads, each running a fixed
 * amount of work through call chains five levels deep, built by
 * record.sh with -O2 -fomit-frame-pointer -Wa,--gsframe. It measures
 * itself: at exit it writes "ELAPSED_NS CPU_NS PARENT_CPU_NS" (wall time of
 * the work on CLOCK_MONOTONIC, its own CPU time, and the CPU time its
 * parent, the profiler, used while the work ran) to the file named by
 * $WORKLOAD_OUT, so profilers' output cannot mix with it.
 *
 * Usage: workload ROUNDS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define UNIT 20000

static inline __attribute__((always_inline)) uint64_t work(uint64_t x, int n)
{
	for (int i = 0; i < n * UNIT; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) uint64_t leaf_heavy(uint64_t x) { return work(x, 3) + 1; }
__attribute__((noinline)) uint64_t leaf_light(uint64_t x) { return work(x, 1) + 2; }

__attribute__((noinline)) uint64_t stage_b(uint64_t x)
{
	uint64_t y = leaf_heavy(x);
	y += leaf_light(y);
	return y ^ (y >> 7);
}

__attribute__((noinline)) uint64_t stage_a(uint64_t x)
{
	uint64_t y = stage_b(x + 1);
	return y * 3 + 1;
}

__attribute__((noinline)) uint64_t run(long rounds)
{
	uint64_t acc = 1;
	for (long i = 0; i < rounds; i++)
		acc += stage_a(acc + (uint64_t)i);
	return acc;
}

static long rounds;

static void *worker(void *arg)
{
	(void)arg;
	return (void *)(uintptr_t)run(rounds);
}

static uint64_t ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The CPU time the parent process's threads have run, in nanoseconds:
 * the first field of each /proc/PPID/task/TID/schedstat (the scheduler's
 * own account, exact where rusage counts ticks). A profiler's threads
 * live for the whole run, so the difference of two reads is what it took
 * from the machine in between. */
static uint64_t parent_cpu_ns(void)
{
	char path[32];
	snprintf(path, sizeof path, "/proc/%d/task", (int)getppid());
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char stat[300];
		snprintf(stat, sizeof stat, "%s/%s/schedstat", path, e->d_name);
		FILE *f = fopen(stat, "r");
		unsigned long long run;
		if (f && fscanf(f, "%llu", &run) == 1)
			sum += run;
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

int main(int argc, char **argv)
{
	rounds = argc > 1 ? atol(argv[1]) : 4000;
	uint64_t parent_start = parent_cpu_ns();
	uint64_t start = ns(CLOCK_MONOTONIC);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], 0, worker, 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], 0);
	uint64_t elapsed = ns(CLOCK_MONOTONIC) - start;
	uint64_t parent_end = parent_cpu_ns();
	/* A read that failed (0), or a parent thread that exited in between,
	 * gives no figure rather than a wrapped one. */
	uint64_t parent = parent_start && parent_end >= parent_start ? parent_end - parent_start : 0;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	uint64_t cpu = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
		       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
	const char *out = getenv("WORKLOAD_OUT");
	FILE *f = out ? fopen(out, "w") : stderr;
	if (f) {
		fprintf(f, "%llu %llu %llu\n", (unsigned long long)elapsed, (unsigned long long)cpu,
			(unsigned long long)parent);
		if (f != stderr)
			fclose(f);
	}
	return 0;
}
