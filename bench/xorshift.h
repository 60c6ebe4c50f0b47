/* The benchmarks' random keys and values (raftsql_bench.c,
 * local_sqlite.c): xorshift64*, seeded per client thread, so that every
 * run writes the same kind of bytes. Not for anything but test data. */

#ifndef BENCH_XORSHIFT_H
#define BENCH_XORSHIFT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* xorshift_next advances the state *@s (never 0) and returns the next
 * 64-bit value (xorshift64*, Vigna 2016). */
static inline uint64_t xorshift_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* xorshift_fill writes @n pseudo-random bytes to @p from the state *@s. */
static inline void xorshift_fill(uint64_t *s, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = xorshift_next(s);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

#endif /* BENCH_XORSHIFT_H */
