/* Where the latest raft_load_sql of a node stands: the node keeps it
 * (one load at a time per node) and shows it in raft_status() as "load";
 * the load itself (load_sql.h) records its progress here. */

#ifndef EXT_LOAD_STATUS_H
#define EXT_LOAD_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a load stands. */
enum ext_load_state {
    EXT_LOAD_RUNNING = 1, /* chunks are being written */
    EXT_LOAD_DONE = 2,    /* every chunk applied (or found applied) */
    EXT_LOAD_FAILED = 3,  /* stopped at a chunk: error says why */
};

/* The progress of the latest load of a node. */
struct ext_load_progress {
    char path[4096];      /* the script, as given */
    int state;            /* enum ext_load_state */
    unsigned chunks_done; /* chunks applied or found applied */
    unsigned n_chunks;    /* chunks of the script */
    unsigned n_stmts;     /* statements of the script (transaction
                             control left out) */
    unsigned applied;     /* chunks this run applied */
    unsigned skipped;     /* chunks found applied before (duplicates) */
    uint64_t bytes_done;  /* SQL bytes of the chunks done */
    uint64_t bytes_total; /* SQL bytes of every chunk */
    char error[1200];     /* why it failed, "" otherwise */
};

struct ext_load_status; /* opaque: a node's latest load, one at a time */

/* load_status_new creates an empty load status (no load yet). Errors:
 * RAFT_NOMEM. Any thread. */
int load_status_new(struct ext_load_status **out);

/* load_status_free frees @s. NULL is ignored. Thread: any, once no load
 * runs. */
void load_status_free(struct ext_load_status *s);

/* load_status_get copies the latest load's progress into @out and returns
 * true, or returns false when no load ran yet. Any thread. */
bool load_status_get(struct ext_load_status *s, struct ext_load_progress *out);

/* load_status_begin makes @p, zeroed but for @path (copied) and its state
 * EXT_LOAD_RUNNING, the running load of @s. Errors: RAFT_BUSY when a load
 * already runs on @s (@errmsg, @errmsg_len bytes, names its script). Any
 * thread. */
int load_status_begin(struct ext_load_status *s, const char *path,
                      struct ext_load_progress *p, char *errmsg,
                      size_t errmsg_len);

/* load_status_publish copies @p as @s's latest progress. Any thread. */
void load_status_publish(struct ext_load_status *s,
                         const struct ext_load_progress *p);

#endif /* EXT_LOAD_STATUS_H */
