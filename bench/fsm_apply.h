/* Shared by the apply-path benchmarks (checksum_apply.c, query_apply.c):
 * the applying thread's CPU clock and one batch applied through the state
 * machine. */

#ifndef BENCH_FSM_APPLY_H
#define BENCH_FSM_APPLY_H

#include <stdio.h>
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

#endif /* BENCH_FSM_APPLY_H */
