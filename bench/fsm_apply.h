/* Shared by the apply-path benchmarks (checksum_apply.c, query_apply.c):
 * the applying thread's CPU clock and one batch applied through the state
 * machine. */

#ifndef BENCH_FSM_APPLY_H
#define BENCH_FSM_APPLY_H

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "sql/sql.h"

/* Most entries of one batch. */
#define BENCH_BATCH_MAX 64

/* bench_thread_cpu_s returns the calling thread's CPU time in seconds
 * (CLOCK_THREAD_CPUTIME_ID: what other processes move least). */
static inline double bench_thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* bench_kv_params fills @ps[0] and @ps[1] with blob parameters: @key
 * (@key_len bytes) and @value (@value_len bytes), which they point to
 * (the caller keeps them alive while @ps is used). */
static inline void bench_kv_params(struct sql_param ps[2],
                                   const unsigned char *key, size_t key_len,
                                   const unsigned char *value, size_t value_len)
{
    memset(ps, 0, 2 * sizeof ps[0]);
    ps[0].value.type = SQL_BLOB;
    ps[0].value.bytes.p = key;
    ps[0].value.bytes.len = key_len;
    ps[1].value.type = SQL_BLOB;
    ps[1].value.bytes.p = value;
    ps[1].value.bytes.len = value_len;
}

/* bench_apply applies @n (at most BENCH_BATCH_MAX) payloads (@payloads,
 * @lens bytes each) as entries from @index on, one batch, on @f. Returns
 * 0, or -1 when the batch or a request failed (the message goes to
 * stderr after @who). */
static inline int bench_apply(struct sql_fsm *f, uint64_t index,
                              unsigned char **payloads, const size_t *lens,
                              unsigned n, const char *who)
{
    struct sql_fsm_entry e[BENCH_BATCH_MAX];
    struct sql_result r[BENCH_BATCH_MAX];
    int rc;

    memset(e, 0, sizeof e);
    for (unsigned i = 0; i < n; i++) {
        e[i].index = index + i;
        e[i].term = 1;
        e[i].data = payloads[i];
        e[i].len = lens[i];
    }
    rc = sql_fsm_apply(f, e, n, r);
    if (rc != 0) {
        fprintf(stderr, "%s: apply: %s\n", who, sql_fsm_errmsg(f));
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        if (rc == 0 && r[i].rc != SQLITE_OK) {
            fprintf(stderr, "%s: %s\n", who, r[i].errmsg);
            rc = -1;
        }
        sql_result_clear(&r[i]);
    }
    return rc;
}

/* bench_cmp_double orders doubles for qsort (@a, @b point to them). */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* bench_options reads the options of program @who from @argc/@argv:
 * --requests N (-n; rounded down to a multiple of @batch, at least
 * @batch) into *@n and --rounds R (-r; 1 to 64) into *@rounds, which
 * hold the defaults on entry. Returns 0, or 2 after printing the usage
 * to stderr for an unknown option or a value out of range. */
static inline int bench_options(int argc, char **argv, const char *who,
                                long batch, long *n, int *rounds)
{
    static const struct option longs[] = {
        {"requests", required_argument, NULL, 'n'},
        {"rounds", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "n:r:", longs, NULL)) != -1) {
        if (c == 'n' && atol(optarg) >= batch) {
            *n = atol(optarg) / batch * batch;
        } else if (c == 'r' && atoi(optarg) >= 1 && atoi(optarg) <= 64) {
            *rounds = atoi(optarg);
        } else {
            fprintf(stderr, "usage: %s [--requests N] [--rounds R]\n", who);
            return 2;
        }
    }
    return 0;
}

#endif /* BENCH_FSM_APPLY_H */
