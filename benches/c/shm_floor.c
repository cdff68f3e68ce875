/* The floor of a one-way message between two processes of one node: a
 * ping-pong of an 8-byte counter on one shared cache line (a fresh shared
 * anonymous mapping, fork), each side spinning on loads; no library, no
 * queue, no event. Half the round trip, in microseconds, median of 5 runs
 * of ITERS round trips each.
 *   ./shm_floor [ITERS]   -> "lat_us X" */
#include "bench.h"
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    volatile long *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile long *ping = line, *pong = line + 16; /* two cache lines */
    *ping = 0;
    *pong = 0;
    pid_t child = fork();
    if (child == 0) {
        pin(1);
        for (long i = 1; i <= 5 * (iters + 1000); i++) {
            while (*ping != i) {}
            *pong = i;
        }
        _exit(0);
    }
    pin(0);
    double runs[5];
    long k = 0;
    for (int r = 0; r < 5; r++) {
        for (int w = 0; w < 1000; w++) { k++; *ping = k; while (*pong != k) {} }
        double t0 = now();
        for (long i = 0; i < iters; i++) { k++; *ping = k; while (*pong != k) {} }
        runs[r] = (now() - t0) / iters / 2 * 1e6;
    }
    waitpid(child, NULL, 0);
    qsort(runs, 5, sizeof runs[0], cmp);
    printf("lat_us %.3f\n", runs[2]);
    return 0;
}
