/*
 * The fill-buffer C ABI from a libichnos.so loaded with dlopen, as a
 * plugin or a language binding would load it (a library with initial-exec
 * TLS could fail to load so: "cannot allocate memory in static TLS
 * block"). Two buffers (buffer 0's slot lives in each thread's block, the
 * other's in the table of the rest), written by the main thread and by two
 * threads started after the load, each record counted back by the flush.
 * Usage: buf_dlopen PATH_TO_LIBICHNOS_SO
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include <ichnos/buf.h>

typedef struct ichnos_fill_buf *(*create_fn)(size_t, ichnos_flush_fn, void *);
typedef int (*write_fn)(struct ichnos_fill_buf *, const void *, size_t);
typedef int (*flush_fn)(struct ichnos_fill_buf *);

static create_fn create;
static write_fn write_record;
static flush_fn flush;
static struct ichnos_fill_buf *bufs[2];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t sums[2], counts[2];

static void collect(const struct ichnos_flush_info *info, void *arg)
{
	size_t which = (size_t)(uintptr_t)arg;
	const uint64_t *records = info->data;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < info->len / sizeof(uint64_t); i++) {
		sums[which] += records[i];
		counts[which]++;
	}
	pthread_mutex_unlock(&lock);
}

/* 1000 records 1..1000 into each buffer, then a flush. */
static void *writer(void *arg)
{
	(void)arg;
	for (uint64_t i = 1; i <= 1000; i++)
		for (int b = 0; b < 2; b++)
			if (write_record(bufs[b], &i, sizeof i) != 0)
				return (void *)1;
	for (int b = 0; b < 2; b++)
		flush(bufs[b]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		printf("FAIL dlopen: %s\n", dlerror());
		return 1;
	}
	/* POSIX's way to take a function from dlsym under ISO C. */
	*(void **)&create = dlsym(lib, "ichnos_fill_buf_create_trace");
	*(void **)&write_record = dlsym(lib, "ichnos_fill_buf_write");
	*(void **)&flush = dlsym(lib, "ichnos_fill_buf_flush");
	if (!create || !write_record || !flush) {
		printf("FAIL dlsym\n");
		return 1;
	}
	for (int b = 0; b < 2; b++) {
		bufs[b] = create(4096, collect, (void *)(uintptr_t)b);
		if (!bufs[b]) {
			printf("FAIL create %d\n", b);
			return 1;
		}
	}
	pthread_t threads[2];
	for (int t = 0; t < 2; t++) {
		if (pthread_create(&threads[t], 0, writer, 0) != 0) {
			printf("FAIL pthread_create\n");
			return 1;
		}
	}
	int failed = writer(0) != 0;
	for (int t = 0; t < 2; t++) {
		void *result;
		pthread_join(threads[t], &result);
		failed |= result != 0;
	}
	for (int b = 0; b < 2; b++)
		printf("buffer %d: %llu records, sum %llu\n", b, (unsigned long long)counts[b],
		       (unsigned long long)sums[b]);
	return failed;
}
