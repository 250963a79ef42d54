/* The function-trace benchmark on a real multi-threaded program
 * (zstd.sh): zstd's library, built with -finstrument-functions, compresses
 * SIZE bytes of generated text with two worker threads of its own pool
 * (ZSTD_c_nbWorkers), decompresses them and checks the round trip. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], 0, 10) : 8u << 20;
    unsigned char *src = malloc(n);
    unsigned x = 1;
    for (size_t i = 0; i < n; i++) { x = x * 1103515245 + 12345; src[i] = (x >> 16) % 17 + 'a'; }
    size_t cap = ZSTD_compressBound(n);
    unsigned char *dst = malloc(cap), *back = malloc(n);
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_nbWorkers, 2);
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
    size_t z = ZSTD_compress2(c, dst, cap, src, n);
    if (ZSTD_isError(z)) { fprintf(stderr, "%s\n", ZSTD_getErrorName(z)); return 1; }
    size_t d = ZSTD_decompress(back, n, dst, z);
    if (d != n || memcmp(src, back, n)) return 2;
    printf("%zu -> %zu\n", n, z);
    ZSTD_freeCCtx(c);
    return 0;
}
