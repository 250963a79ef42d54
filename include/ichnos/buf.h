/*
 * ichnos: per-thread fill buffers for instrumented code, in the manner of
 * DynamoRIO's drx_buf.
 *
 * A buffer is a handle; every thread that writes through it gets its own
 * memory on its first write. A record is written by reserving its bytes,
 * storing them, and committing: no lock, no system call, safe inside a
 * signal handler. Trace buffers hand their filled bytes to a flush
 * function when full, at thread exit, at exit() and on request; circular
 * buffers overwrite their oldest records. Specification: docs/c-abi-buf.md.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef ICHNOS_BUF_H
#define ICHNOS_BUF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque buffer handle, usable from every thread. */
struct ichnos_fill_buf;

/* Why a flush function was called. */
enum ichnos_flush_reason {
	ICHNOS_FLUSH_FULL = 0,		/* the next record did not fit */
	ICHNOS_FLUSH_EXPLICIT = 1,	/* ichnos_fill_buf_flush() */
	ICHNOS_FLUSH_THREAD_EXIT = 2,	/* the writing thread is exiting */
	ICHNOS_FLUSH_PROCESS_EXIT = 3	/* exit(), or a return from main */
};

/* What a flush function receives; valid only during the call. */
struct ichnos_flush_info {
	const void *data;	/* the committed records, in reservation order */
	size_t len;		/* bytes at data */
	int32_t tid;		/* the thread that wrote them */
	uint32_t reason;	/* enum ichnos_flush_reason */
	uint64_t seq;		/* 0, 1, 2, ... per thread and buffer */
	uint64_t lost_records;	/* records dropped since the previous flush */
	uint64_t lost_bytes;	/* their bytes */
};

/* Called on the writing thread (at process exit, on the exiting one),
 * possibly inside a signal handler if handlers write records. It may write
 * to other buffers, not to the one being flushed. */
typedef void (*ichnos_flush_fn)(const struct ichnos_flush_info *info, void *arg);

/* A thread's counters for one buffer. */
struct ichnos_fill_stats {
	uint64_t lost_records;
	uint64_t lost_bytes;
	uint64_t flushes;
	uint64_t position;	/* circular: records written; trace: bytes since the last flush */
};

/* A trace buffer of `capacity` bytes per thread. NULL on failure, with
 * errno set: EINVAL (capacity 0), EMFILE (all handles in use), ENOMEM (a
 * thread's buffer of that size cannot be mapped). */
struct ichnos_fill_buf *ichnos_fill_buf_create_trace(size_t capacity, ichnos_flush_fn flush, void *arg);

/* A circular buffer of `capacity` bytes per thread (a power of two) of
 * records of `stride` bytes (dividing capacity). NULL on failure, with
 * errno set as for ichnos_fill_buf_create_trace (EINVAL also for a
 * capacity or stride out of those rules). */
struct ichnos_fill_buf *ichnos_fill_buf_create_circular(size_t capacity, size_t stride);

/* Frees the handle. Threads' memory is released at their exit; nothing is
 * flushed (flush first). NULL is accepted. */
void ichnos_fill_buf_free(struct ichnos_fill_buf *buf);

/* Reserves `len` bytes in the calling thread's buffer and returns where to
 * store the record; ichnos_fill_buf_commit(buf, len) must follow on this
 * thread. NULL if the record is larger than the buffer (or not the stride
 * of a circular buffer), or was dropped (see docs/c-abi-buf.md). */
void *ichnos_fill_buf_reserve(struct ichnos_fill_buf *buf, size_t len);

/* Commits the `len` bytes reserved last. */
void ichnos_fill_buf_commit(struct ichnos_fill_buf *buf, size_t len);

/* Reserve, copy and commit. 0, -EMSGSIZE (does not fit), -ENOBUFS
 * (dropped and counted), -EINVAL (NULL arguments). */
int ichnos_fill_buf_write(struct ichnos_fill_buf *buf, const void *record, size_t len);

/* Flushes the calling thread's committed records now (trace buffers).
 * 1 if flushed, 0 if there was nothing it could do. */
int ichnos_fill_buf_flush(struct ichnos_fill_buf *buf);

/* The calling thread's counters. 0, or -EINVAL. */
int ichnos_fill_buf_stats(const struct ichnos_fill_buf *buf, struct ichnos_fill_stats *out);

/* Circular buffers: copies the calling thread's records, newest first, into
 * out (out_len bytes) and returns how many records it copied (at most
 * out_len / stride), or a negative errno: -EINVAL (not circular, NULL), or
 * -EBUSY (called from a signal handler that interrupted a write). */
int64_t ichnos_fill_buf_newest_first(const struct ichnos_fill_buf *buf, void *out, size_t out_len);

#ifdef __cplusplus
}
#endif

#endif /* ICHNOS_BUF_H */
