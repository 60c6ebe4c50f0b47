/* The leader's proposals (propose.h): stamp, then append as one batch. */

#include "propose.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../sql/sql.h"

#include "sqlbridge.h"

void propose_init(struct ext_propose *p, uint64_t seed, uint64_t max_steps)
{
    p->seed_state = seed;
    p->max_steps = max_steps;
    atomic_init(&p->floor_ms, INT64_MIN);
}

void propose_floor_raise(struct ext_propose *p, int64_t time_ms)
{
    int64_t cur = atomic_load(&p->floor_ms);

    /* A failed exchange reloads @cur: stop once it is not below. */
    while (cur < time_ms &&
           !atomic_compare_exchange_weak(&p->floor_ms, &cur, time_ms)) {
    }
}

void propose_floor_note(struct ext_propose *p, const struct raft_entry *entries,
                        unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        int64_t t;

        if (entries[i].type == RAFT_ENTRY_NORMAL && entries[i].data != NULL &&
            sql_request_time(entries[i].data->data, entries[i].data->len, &t) ==
                0) {
            propose_floor_raise(p, t);
        }
    }
}

bool propose_floor(struct ext_propose *p, int64_t *out)
{
    int64_t v = atomic_load(&p->floor_ms);

    if (v == INT64_MIN) {
        return false;
    }
    *out = v;
    return true;
}

void propose_set_ids(struct ext_propose *p, uint64_t id_window,
                     uint64_t id_window_ms, uint64_t max_result_bytes)
{
    p->id_window = id_window;
    p->id_window_ms = id_window_ms;
    p->max_result_bytes = max_result_bytes;
}

/* next_seed returns the next entry seed (splitmix64). */
static uint64_t next_seed(struct ext_propose *p)
{
    uint64_t z = (p->seed_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#ifdef RAFTSQL_TEST_FAULTS
/* test_clock_offset_ms returns the offset (ms, signed) in the file named
 * by the environment variable RAFTSQL_TEST_CLOCK_FILE, read at every
 * call, 0 without the variable or a readable number: a test-only skew of
 * this node's wall clock, which the test jumps by rewriting the file
 * (tests/faults/nemesis.py, kind clock). Sanitizer builds only. */
static int64_t test_clock_offset_ms(void)
{
    const char *path = getenv("RAFTSQL_TEST_CLOCK_FILE");
    long long offset = 0;
    FILE *f;

    if (path == NULL || (f = fopen(path, "r")) == NULL) {
        return 0;
    }
    if (fscanf(f, "%lld", &offset) != 1) {
        offset = 0;
    }
    fclose(f);
    return (int64_t)offset;
}
#else
#define test_clock_offset_ms() ((int64_t)0)
#endif

/* wall_ms returns the wall clock (ms since the epoch), the "now" this
 * leader stamps into its entries; in test builds skewed by
 * test_clock_offset_ms. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 +
           test_clock_offset_ms();
}

int propose_batch(struct ext_propose *p, struct raft_uv_node *d,
                  struct raft_buf *const *payloads, const bool *fresh,
                  unsigned n, raft_index *out_index, raft_term *out_term)
{
    struct raft_buf **stamped = calloc(n, sizeof *stamped);
    int64_t floor_ms;
    struct sql_stamp stamp = {.time_ms = wall_ms(),
                              .max_steps = p->max_steps,
                              .id_window = p->id_window,
                              .id_window_ms = p->id_window_ms,
                              .max_result_bytes = p->max_result_bytes};
    int rc = 0;

    if (stamped == NULL) {
        return RAFT_NOMEM;
    }
    /* Never below a stamp the log holds: "now" does not run backwards
     * when this clock is behind the previous leader's or steps back. */
    if (propose_floor(p, &floor_ms) && floor_ms > stamp.time_ms) {
        stamp.time_ms = floor_ms;
    }
    for (unsigned i = 0; i < n; i++) {
        stamp.seed = next_seed(p);
        if (fresh != NULL && fresh[i]) {
            /* sql_request_stamp checks the whole header before it
             * writes: a payload it refuses is unchanged. */
            rc = sqlbridge_rc(sql_request_stamp(payloads[i]->data,
                                                payloads[i]->len, &stamp,
                                                payloads[i]->data));
            stamped[i] = rc == 0 ? raft_buf_ref(payloads[i]) : NULL;
        } else {
            rc = sqlbridge_stamp(payloads[i], &stamp, &stamped[i]);
        }
        if (rc != 0) {
            goto out;
        }
    }
    rc = raft_uv_node_propose(d, stamped, n, out_index, out_term);
    if (rc == 0) {
        /* The appended callback noted the entries already, when wired. */
        propose_floor_raise(p, stamp.time_ms);
    }
out:
    for (unsigned i = 0; i < n; i++) {
        raft_buf_unref(stamped[i]);
    }
    free(stamped);
    return rc;
}
