/* The function-trace benchmark's workload: N calls of a small function
 * (built with -finstrument-functions, so each is an entry and an exit),
 * timed by the program itself; and, with "floor", the cost of two rdtsc
 * reads per call in the same loop shape (the floor a tracer that reads
 * the TSC at each entry and exit cannot go below). Prints seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static volatile unsigned long sink;

__attribute__((noinline)) void small(unsigned long i) { sink += i; }

__attribute__((noinline, no_instrument_function)) static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((no_instrument_function)) int main(int argc, char **argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 10000000;
    int floor = argc > 2 && strcmp(argv[2], "floor") == 0;
    double start = now();
    if (floor) {
        unsigned long acc = 0;
        for (unsigned long i = 0; i < n; i++) {
            acc += __rdtsc();
            acc += __rdtsc();
        }
        sink = acc;
    } else {
        for (unsigned long i = 0; i < n; i++)
            small(i);
    }
    printf("%.6f\n", now() - start);
    return 0;
}
