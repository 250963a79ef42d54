/*
 * The main thread writes records and returns from main without flushing:
 * the records must still be flushed, once, at exit (exit() runs the main
 * thread's TLS destructors, then ichnos's atexit hook). A second thread,
 * still running when main returns, has its committed records flushed too.
 * Prints one line per flush; the Rust test checks them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <ichnos/buf.h>

static void print_flush(const struct ichnos_flush_info *info, void *arg)
{
	const uint64_t *records = info->data;
	size_t n = info->len / sizeof(uint64_t);
	(void)arg;
	printf("flush %s reason=%u records=%zu first=%llu last=%llu\n",
	       info->tid == getpid() ? "main" : "other", info->reason, n,
	       n ? (unsigned long long)records[0] : 0ULL,
	       n ? (unsigned long long)records[n - 1] : 0ULL);
	fflush(stdout);
}

static struct ichnos_fill_buf *buf;
static volatile int other_ready;

static void *other(void *arg)
{
	(void)arg;
	for (uint64_t i = 1000; i < 1005; i++)
		ichnos_fill_buf_write(buf, &i, sizeof i);
	other_ready = 1;
	for (;;)
		pause();
	return NULL;
}

int main(void)
{
	pthread_t t;
	buf = ichnos_fill_buf_create_trace(4096, print_flush, NULL);
	if (!buf)
		return 1;
	for (uint64_t i = 0; i < 10; i++)
		ichnos_fill_buf_write(buf, &i, sizeof i);
	pthread_create(&t, NULL, other, NULL);
	while (!other_ready)
		usleep(1000);
	return 0; /* no flush, no free: exit must do it */
}
