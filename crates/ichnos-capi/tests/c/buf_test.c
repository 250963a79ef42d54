/*
 * The fill-buffer C ABI from C: trace buffers written by several threads
 * and flushed at thread exit, reserve/commit, size errors, circular
 * buffers read newest first, and -finstrument-functions hooks that record
 * every function entry and exit (this file is compiled with
 * -finstrument-functions), checked for balance and depth.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ichnos/buf.h>

static int passed, failed;

#define CHECK(cond)                                                   \
	do {                                                          \
		if (cond) {                                           \
			passed++;                                     \
		} else {                                              \
			failed++;                                     \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		}                                                     \
	} while (0)

#define NO_TRACE __attribute__((no_instrument_function))

/* ---- what the trace buffer's flush function collected ---- */

struct record {
	uint64_t thread;
	uint64_t seq;
};

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static struct record *sink;
static size_t sink_len, sink_cap;
static unsigned flushes_by_reason[4];

NO_TRACE static void collect(const struct ichnos_flush_info *info, void *arg)
{
	size_t n = info->len / sizeof(struct record);
	(void)arg;
	pthread_mutex_lock(&sink_lock);
	if (sink_len + n > sink_cap) {
		sink_cap = (sink_len + n) * 2;
		sink = realloc(sink, sink_cap * sizeof *sink);
	}
	memcpy(sink + sink_len, info->data, n * sizeof(struct record));
	sink_len += n;
	if (info->reason < 4)
		flushes_by_reason[info->reason]++;
	pthread_mutex_unlock(&sink_lock);
}

#define THREADS 4
#define RECORDS 10000

static struct ichnos_fill_buf *trace_buf;

NO_TRACE static void *writer(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;
	for (uint64_t i = 0; i < RECORDS; i++) {
		struct record *r = ichnos_fill_buf_reserve(trace_buf, sizeof *r);
		if (!r)
			return (void *)1;
		r->thread = t;
		r->seq = i;
		ichnos_fill_buf_commit(trace_buf, sizeof *r);
	}
	return NULL;
}

NO_TRACE static void test_trace_threads(void)
{
	pthread_t threads[THREADS];
	uint64_t next[THREADS] = {0};
	int ordered = 1;

	trace_buf = ichnos_fill_buf_create_trace(1000, collect, NULL);
	CHECK(trace_buf != NULL);
	for (uintptr_t t = 0; t < THREADS; t++)
		CHECK(pthread_create(&threads[t], NULL, writer, (void *)t) == 0);
	for (int t = 0; t < THREADS; t++) {
		void *ret;
		CHECK(pthread_join(threads[t], &ret) == 0 && ret == NULL);
	}
	CHECK(sink_len == THREADS * RECORDS);
	for (size_t i = 0; i < sink_len; i++) {
		uint64_t t = sink[i].thread;
		if (t >= THREADS || sink[i].seq != next[t]++)
			ordered = 0;
	}
	CHECK(ordered);
	/* 62 records of 16 bytes fit in 1000: 161 full flushes per thread,
	 * then one at thread exit with the remaining 18. */
	CHECK(flushes_by_reason[ICHNOS_FLUSH_FULL] == THREADS * (RECORDS / 62));
	CHECK(flushes_by_reason[ICHNOS_FLUSH_THREAD_EXIT] == THREADS);
	ichnos_fill_buf_free(trace_buf);
}

NO_TRACE static void test_errors(void)
{
	struct ichnos_fill_buf *b = ichnos_fill_buf_create_trace(64, collect, NULL);
	struct ichnos_fill_stats st;
	char big[65] = {0};

	CHECK(ichnos_fill_buf_write(b, big, 65) == -EMSGSIZE);
	CHECK(ichnos_fill_buf_reserve(b, 65) == NULL);
	CHECK(ichnos_fill_buf_write(b, big, 64) == 0);
	CHECK(ichnos_fill_buf_write(NULL, big, 1) == -EINVAL);
	CHECK(ichnos_fill_buf_stats(b, &st) == 0 && st.position == 64 && st.lost_records == 0);
	CHECK(ichnos_fill_buf_newest_first(b, big, sizeof big) == -EINVAL);
	ichnos_fill_buf_free(b);
	errno = 0;
	CHECK(ichnos_fill_buf_create_trace(0, collect, NULL) == NULL && errno == EINVAL);
	/* A size no thread's buffer can have: refused at creation. */
	errno = 0;
	CHECK(ichnos_fill_buf_create_trace((size_t)1 << 63, collect, NULL) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(ichnos_fill_buf_create_circular((size_t)1 << 63, 8) == NULL && errno == ENOMEM);
	CHECK(ichnos_fill_buf_create_trace(64, NULL, NULL) == NULL);
	CHECK(ichnos_fill_buf_create_circular(1000, 8) == NULL && errno == EINVAL);
	CHECK(ichnos_fill_buf_create_circular(1024, 24) == NULL);
	ichnos_fill_buf_free(NULL);
}

NO_TRACE static void test_circular(void)
{
	struct ichnos_fill_buf *ring = ichnos_fill_buf_create_circular(256, 8);
	uint64_t out[64];
	int64_t n;
	int newest_first = 1;

	CHECK(ring != NULL);
	for (uint64_t i = 0; i < 1000; i++)
		CHECK(ichnos_fill_buf_write(ring, &i, 8) == 0);
	CHECK(ichnos_fill_buf_write(ring, out, 4) == -EMSGSIZE);
	n = ichnos_fill_buf_newest_first(ring, out, sizeof out);
	CHECK(n == 32);
	for (int64_t i = 0; i < n; i++)
		if (out[i] != (uint64_t)(999 - i))
			newest_first = 0;
	CHECK(newest_first);
	CHECK(ichnos_fill_buf_newest_first(ring, out, 3 * 8) == 3 && out[2] == 997);
	ichnos_fill_buf_free(ring);
}

/* ---- -finstrument-functions: one record per function entry and exit ---- */

static struct ichnos_fill_buf *calls;
static __thread int depth;

struct call_record {
	uint64_t fn;	/* function address */
	uint32_t depth;
	uint32_t exit;	/* 0 on entry, 1 on exit */
};

NO_TRACE void __cyg_profile_func_enter(void *fn, void *site)
{
	struct call_record *r;
	(void)site;
	if (!calls)
		return;
	r = ichnos_fill_buf_reserve(calls, sizeof *r);
	if (r) {
		r->fn = (uint64_t)(uintptr_t)fn;
		r->depth = (uint32_t)depth;
		r->exit = 0;
		ichnos_fill_buf_commit(calls, sizeof *r);
	}
	depth++;
}

NO_TRACE void __cyg_profile_func_exit(void *fn, void *site)
{
	struct call_record *r;
	(void)site;
	if (!calls)
		return;
	depth--;
	r = ichnos_fill_buf_reserve(calls, sizeof *r);
	if (r) {
		r->fn = (uint64_t)(uintptr_t)fn;
		r->depth = (uint32_t)depth;
		r->exit = 1;
		ichnos_fill_buf_commit(calls, sizeof *r);
	}
}

/* Instrumented: recursion of known shape. */
static int __attribute__((noinline)) fib(int n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

static struct call_record call_log[100000];
static size_t call_len;

NO_TRACE static void collect_calls(const struct ichnos_flush_info *info, void *arg)
{
	size_t n = info->len / sizeof(struct call_record);
	(void)arg;
	if (call_len + n <= sizeof call_log / sizeof call_log[0])
		memcpy(call_log + call_len, info->data, info->len);
	call_len += n;
}

NO_TRACE static void test_instrument_functions(void)
{
	int64_t stack[64];
	int sp = 0, balanced = 1;
	size_t enters = 0;

	calls = ichnos_fill_buf_create_trace(4096, collect_calls, NULL);
	CHECK(calls != NULL);
	CHECK(fib(15) == 610);
	ichnos_fill_buf_flush(calls);
	{
		struct ichnos_fill_buf *done = calls;
		calls = NULL;
		ichnos_fill_buf_free(done);
	}
	/* fib(15) makes 1973 calls: one entry and one exit each. */
	CHECK(call_len == 2 * 1973);
	for (size_t i = 0; i < call_len && i < sizeof call_log / sizeof call_log[0]; i++) {
		uint64_t fn = call_log[i].fn;
		if (call_log[i].exit) {
			if (sp == 0 || stack[sp - 1] != (int64_t)fn || call_log[i].depth != (uint32_t)(sp - 1))
				balanced = 0;
			sp--;
		} else {
			enters++;
			if (call_log[i].depth != (uint32_t)sp || sp == 64)
				balanced = 0;
			else
				stack[sp++] = (int64_t)fn;
		}
		if (fn != (uint64_t)(uintptr_t)fib)
			balanced = 0;
	}
	CHECK(balanced && sp == 0 && enters == 1973);
}

NO_TRACE int main(void)
{
	test_trace_threads();
	test_errors();
	test_circular();
	test_instrument_functions();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
