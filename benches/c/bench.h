/* What the benchmark programs of benches/c share: a monotonic clock in
 * seconds, pinning to one CPU, and the comparison qsort needs for a median.
 * Include it first (it asks for _GNU_SOURCE, which sched.h must see). */
#ifndef RMR_BENCH_H
#define RMR_BENCH_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <time.h>

/* CLOCK_MONOTONIC in seconds. */
static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The calling thread on `cpu` only. */
static inline void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

/* qsort's comparison of doubles, ascending. */
static inline int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#endif
