/* The limit of a one-sided write on one node: single-thread memcpy of SIZE
 * bytes between two buffers of that size, reused (as a stream of RDMA
 * writes reuses its source and target), for about half a second.
 *   ./memcpy_bw SIZE   -> "gbit_s X" (10^9 bit/s) */
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : 1 << 20;
    char *a = aligned_alloc(4096, size), *b = aligned_alloc(4096, size);
    memset(a, 1, size);
    memset(b, 2, size);
    long n = 0;
    for (int i = 0; i < 16; i++) memcpy(b, a, size);
    double t0 = now(), t;
    do {
        for (int i = 0; i < 16; i++, n++) {
            memcpy(b, a, size);
            __asm__ volatile("" ::"r"(b) : "memory");
        }
        t = now();
    } while (t - t0 < 0.5);
    printf("gbit_s %.3f\n", (double)size * n * 8 / (t - t0) / 1e9);
    return b[size - 1] == 3;
}
