/* Latency percentiles of the benchmarks (raftsql_bench.c, local_sqlite.c):
 * samples are request latencies in microseconds, as uint32_t. */

#ifndef BENCH_LATENCY_H
#define BENCH_LATENCY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* latency_cmp orders two uint32_t samples (a qsort comparator). */
static inline int latency_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* latency_sort sorts @n samples @v (µs) in place, ascending. */
static inline void latency_sort(uint32_t *v, size_t n)
{
    qsort(v, n, sizeof *v, latency_cmp);
}

/* latency_pct_ms returns the @p quantile (0 < p <= 1, nearest rank) of
 * the @n sorted samples @v (µs), in milliseconds; 0 when n is 0. */
static inline double latency_pct_ms(const uint32_t *v, size_t n, double p)
{
    size_t i;
    if (n == 0) {
        return 0.0;
    }
    i = (size_t)(p * (double)n + 0.999999);
    if (i == 0) {
        i = 1;
    }
    if (i > n) {
        i = n;
    }
    return v[i - 1] / 1000.0;
}

#endif /* BENCH_LATENCY_H */
