/* The function-trace benchmark's workload on several threads: each of
 * THREADS threads makes N calls of a small function (built with
 * -finstrument-functions, so each is an entry and an exit), each on its
 * own data (no cache line shared between the threads); the program
 * times the whole and prints seconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static __thread volatile unsigned long sink;
static unsigned long n;

__attribute__((noinline)) void small(unsigned long i) { sink += i; }

__attribute__((no_instrument_function)) static void *work(void *arg) {
    (void)arg;
    for (unsigned long i = 0; i < n; i++)
        small(i);
    return 0;
}

__attribute__((noinline, no_instrument_function)) static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((no_instrument_function)) int main(int argc, char **argv) {
    n = argc > 1 ? strtoul(argv[1], 0, 10) : 5000000;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    if (threads < 1 || threads > 64)
        return 2;
    pthread_t t[64];
    double start = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], 0, work, 0);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], 0);
    printf("%.6f\n", now() - start);
    return 0;
}
