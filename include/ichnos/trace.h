/*
 * ichnos: what a program traced by `ichnos trace` can call in the tracing
 * runtime (libichnos_preload.so, which `ichnos trace` preloads).
 *
 * The functions are declared weak: a program built with this header runs
 * without the runtime too, and then they are null. Call them through the
 * ICHNOS_* macros below, which check.
 *
 * docs/function-trace.md specifies the events they write.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */
#ifndef ICHNOS_TRACE_H
#define ICHNOS_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A probe: `id` (below 2^48) and `value` at this moment, in the calling
 * thread's trace (the replay prints it as a probe line). */
void ichnos_probe(uint64_t id, uint64_t value) __attribute__((weak));

/* Begins the span called `name` in the calling thread's trace: it shows
 * as a call named `name` until the ichnos_span_end() with the same
 * pointer. `name` must live as long as the process (a string literal):
 * the span is known by its address, and its first use sends the name.
 * The first use of a name is not async-signal-safe. */
void ichnos_span_begin(const char *name) __attribute__((weak));

/* Ends the innermost span called `name` (the same pointer). */
void ichnos_span_end(const char *name) __attribute__((weak));

/* Hands the trace over now: with --ring, every thread's ring; else the
 * calling thread's buffer. */
void ichnos_snapshot(void) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#define ICHNOS_PROBE(id, value) \
	do { \
		if (ichnos_probe) \
			ichnos_probe((id), (value)); \
	} while (0)
#define ICHNOS_SPAN_BEGIN(name) \
	do { \
		if (ichnos_span_begin) \
			ichnos_span_begin(name); \
	} while (0)
#define ICHNOS_SPAN_END(name) \
	do { \
		if (ichnos_span_end) \
			ichnos_span_end(name); \
	} while (0)
#define ICHNOS_SNAPSHOT() \
	do { \
		if (ichnos_snapshot) \
			ichnos_snapshot(); \
	} while (0)

#endif
