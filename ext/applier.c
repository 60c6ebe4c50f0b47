/* The apply thread: takes committed entries from the loop thread and
 * applies them to SQLite in batches through the state machine (sql.h),
 * then wakes the callers waiting for them.
 *
 * Happy path: wait for entries -> take every queued one -> sql_fsm_apply
 * (one SQLite transaction, a savepoint per request, the applied index in
 * the same transaction) -> hand each result to its waiter.
 * Failure modes: an environmental error (I/O, disk full) leaves the batch
 * unapplied; the node stops applying, says so in raft_status(), and never
 * skips the entry: a restart applies it again from the log. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "node_internal.h"
#include "sqlbridge.h"

/* Most entries applied in one SQLite transaction. */
#define APPLY_BATCH_MAX 4096

/* log_after_install changes the log after the database took a snapshot
 * reflecting (@index, @term), by paper §7: when the log holds entry @index
 * of @term, only the log through it goes (the entries after it are the
 * leader's and may be committed copies); otherwise the log restarts empty
 * after @index. */
static int log_after_install(struct ext_node *n, uint64_t index,
                             uint64_t term)
{
    raft_index first, last;
    struct raft_entry *e = NULL;
    unsigned cnt = 0;
    bool keep = false;
    if (lmdb_log_bounds(n->log, &first, &last) == 0 && index >= first &&
        index <= last &&
        lmdb_log_entries(n->log, index, index, 0, &e, &cnt) == 0) {
        keep = cnt == 1 && e[0].term == term;
        lmdb_log_entries_free(e, cnt);
    }
    return keep ? lmdb_log_compact(n->log, index)
                : lmdb_log_reset(n->log, index, term);
}

int applier_install(struct ext_node *n, const char *path, uint64_t index,
                    char *errmsg, size_t errmsg_len)
{
    uint64_t got_index = 0, got_term = 0;
    unsigned keep = 0;
    int rc;

    if (index <= atomic_load(&n->applied)) {
        /* Nothing new in it: change nothing (raft.h SNAPSHOT_INSTALLED). */
        return 0;
    }
    /* Take the apply connection from the apply thread. */
    pthread_mutex_lock(&n->mu);
    n->installing = true;
    while (n->apply_busy) {
        pthread_cond_wait(&n->idle_cond, &n->mu);
    }
    pthread_mutex_unlock(&n->mu);

    rc = sqlbridge_rc(
        sql_fsm_snapshot_install(n->fsm, path, &got_index, &got_term));
    if (rc != 0) {
        snprintf(errmsg, errmsg_len, "install: %s", sql_fsm_errmsg(n->fsm));
        if (rc != RAFT_NOMEM && rc != RAFT_IOERR) {
            rc = RAFT_CORRUPT; /* refused: the database is unchanged */
        }
        goto out;
    }
    rc = log_after_install(n, got_index, got_term);
    if (rc != 0) {
        /* The database is ahead of the log: a restart repairs that. */
        snprintf(errmsg, errmsg_len, "change the log after the snapshot: %s",
                 lmdb_log_errmsg(n->log));
        rc = RAFT_IOERR;
    }
    atomic_store(&n->applied, got_index);
    atomic_store(&n->durable, sql_fsm_durable(n->fsm));

out:
    pthread_mutex_lock(&n->mu);
    if (rc == 0) {
        /* Entries the snapshot covers will not be applied again. */
        for (unsigned i = 0; i < n->n_apply_queue; i++) {
            if (n->apply_queue[i].index <= got_index) {
                raft_buf_unref(n->apply_queue[i].data);
            } else {
                n->apply_queue[keep++] = n->apply_queue[i];
            }
        }
        n->n_apply_queue = keep;
    }
    n->installing = false;
    pthread_cond_signal(&n->apply_cond);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

int applier_push(struct ext_node *n, const struct raft_entry *entries,
                 unsigned count)
{
    pthread_mutex_lock(&n->mu);
    if (n->n_apply_queue + count > n->cap_apply_queue) {
        unsigned cap = (n->n_apply_queue + count) * 2;
        struct raft_entry *q = realloc(n->apply_queue, cap * sizeof *q);
        if (q == NULL) {
            pthread_mutex_unlock(&n->mu);
            return RAFT_NOMEM;
        }
        n->apply_queue = q;
        n->cap_apply_queue = cap;
    }
    for (unsigned i = 0; i < count; i++) {
        n->apply_queue[n->n_apply_queue++] = entries[i];
        raft_buf_ref(entries[i].data);
    }
    pthread_cond_signal(&n->apply_cond);
    pthread_mutex_unlock(&n->mu);
    return 0;
}

/* apply_batch applies @cnt entries; returns 0 or the state machine's
 * error. Called without mu. */
static int apply_batch(struct ext_node *n, struct raft_entry *batch,
                       unsigned cnt)
{
    struct sql_fsm_entry *fe = calloc(cnt, sizeof *fe);
    struct sql_result *res = calloc(cnt, sizeof *res);
    int rc = RAFT_NOMEM;
    if (fe == NULL || res == NULL) {
        node_set_error(n, "apply: out of memory");
        goto out;
    }
    for (unsigned i = 0; i < cnt; i++) {
        fe[i].index = batch[i].index;
        fe[i].term = batch[i].term;
        if (batch[i].type == RAFT_ENTRY_NORMAL && batch[i].data != NULL) {
            fe[i].data = batch[i].data->data;
            fe[i].len = batch[i].data->len;
        }
    }
    rc = sqlbridge_rc(sql_fsm_apply(n->fsm, fe, cnt, res));
    if (rc != 0) {
        node_set_error(n,
                       "apply stopped at index %llu, the node applies "
                       "nothing more until restarted: %s",
                       (unsigned long long)batch[0].index,
                       sql_fsm_errmsg(n->fsm));
        goto out;
    }
    atomic_store(&n->applied, batch[cnt - 1].index);
    atomic_store(&n->durable, sql_fsm_durable(n->fsm));
    pthread_mutex_lock(&n->mu);
    for (unsigned i = 0; i < cnt; i++) {
        if (fe[i].data != NULL) {
            exec_deliver(n, fe[i].index, &res[i]);
        }
    }
    if (exec_requeue_replaced(n, batch[cnt - 1].index) && !n->shutdown) {
        raft_uv_node_wake(n->driver);
    }
    pthread_mutex_unlock(&n->mu);
    /* The durable point: the background checkpointer moves it as the WAL
     * fills; when it falls behind (a WAL under its threshold, readers
     * holding frames back), checkpoint here, after the callers have their
     * results, so the log can be compacted up to what the file holds. */
    if (batch[cnt - 1].index - atomic_load(&n->durable) >=
        n->cfg.snapshot_threshold / 2) {
        uint64_t durable;
        if (sql_fsm_checkpoint(n->fsm, &durable) == 0) {
            atomic_store(&n->durable, durable);
        }
    }
    for (unsigned i = 0; i < cnt; i++) {
        sql_result_clear(&res[i]);
    }
out:
    free(fe);
    free(res);
    return rc;
}

/* follower_pace holds a follower's next batch until @ms after the end of
 * the previous one (@last_end, CLOCK_MONOTONIC), so that everything
 * committed meanwhile is applied in one SQLite transaction: fewer
 * commits, and fewer pages written per row (the internal tables' pages,
 * page 1, the table's last leaf are written once per transaction). Under
 * a light load (batches further apart than @ms) nothing waits. It returns
 * at once on the leader (its callers wait for the apply), when a caller
 * waits on this node (its write must be applied at once: it is on its way
 * through the queue), or when the queue holds a full batch. A caller
 * arriving or the node becoming leader does not wake it: the caller's
 * entry arrives through applier_push, which does, and any wait ends
 * within @ms. Caller holds mu. */
static void follower_pace(struct ext_node *n, const struct timespec *last_end,
                          unsigned ms)
{
    struct timespec until = *last_end;

    if (ms == 0) {
        return;
    }
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (!n->apply_stop && !n->want_checkpoint && !n->installing &&
           !n->apply_failed && n->status.role != RAFT_LEADER &&
           n->n_waiters == 0 && n->n_apply_queue > 0 &&
           n->n_apply_queue < APPLY_BATCH_MAX) {
        if (pthread_cond_timedwait(&n->apply_cond, &n->mu, &until) != 0) {
            break; /* ETIMEDOUT: the pace is kept */
        }
    }
}

void *applier_main(void *arg)
{
    struct ext_node *n = arg;
    struct raft_entry *batch = malloc(APPLY_BATCH_MAX * sizeof *batch);
    /* Named for top -H and perf (best effort). */
    pthread_setname_np(pthread_self(), "raftsql-apply");
    if (batch == NULL) {
        node_set_error(n, "apply thread: out of memory");
        return NULL;
    }
    struct timespec last_end = {0, 0};

    pthread_mutex_lock(&n->mu);
    for (;;) {
        unsigned cnt;
        int rc;
        while (!n->apply_stop && !n->want_checkpoint &&
               (n->n_apply_queue == 0 || n->apply_failed || n->installing)) {
            pthread_cond_wait(&n->apply_cond, &n->mu);
        }
        follower_pace(n, &last_end, n->cfg.follower_apply_ms);
        if (n->apply_stop) {
            break;
        }
        if (!n->want_checkpoint &&
            (n->n_apply_queue == 0 || n->apply_failed || n->installing)) {
            continue; /* an install took the queue while it paced */
        }
        if (n->want_checkpoint) {
            uint64_t durable;
            n->want_checkpoint = false;
            if (!n->installing) {
                n->apply_busy = true;
                pthread_mutex_unlock(&n->mu);
                if (sql_fsm_checkpoint(n->fsm, &durable) == 0) {
                    atomic_store(&n->durable, durable);
                }
                pthread_mutex_lock(&n->mu);
                n->apply_busy = false;
                pthread_cond_broadcast(&n->idle_cond);
            }
            continue;
        }
        n->apply_busy = true;
        cnt = n->n_apply_queue < APPLY_BATCH_MAX ? n->n_apply_queue
                                                 : APPLY_BATCH_MAX;
        memcpy(batch, n->apply_queue, cnt * sizeof *batch);
        memmove(n->apply_queue, n->apply_queue + cnt,
                (n->n_apply_queue - cnt) * sizeof *batch);
        n->n_apply_queue -= cnt;
        pthread_mutex_unlock(&n->mu);

        rc = apply_batch(n, batch, cnt);
        for (unsigned i = 0; i < cnt; i++) {
            raft_buf_unref(batch[i].data);
        }
        clock_gettime(CLOCK_MONOTONIC, &last_end);

        pthread_mutex_lock(&n->mu);
        n->apply_busy = false;
        pthread_cond_broadcast(&n->idle_cond);
        if (rc != 0) {
            n->apply_failed = true;
        }
    }
    pthread_mutex_unlock(&n->mu);
    free(batch);
    return NULL;
}
