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

#include <stdlib.h>
#include <string.h>

#include "node_internal.h"

/* Most entries applied in one SQLite transaction. */
#define APPLY_BATCH_MAX 4096

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
        fe[i].payload =
            batch[i].type == RAFT_ENTRY_NORMAL ? batch[i].data : NULL;
    }
    rc = sql_fsm_apply(n->fsm, fe, cnt, res);
    if (rc != 0) {
        node_set_error(n,
                       "apply stopped at index %llu, the node applies "
                       "nothing more until restarted: %s",
                       (unsigned long long)batch[0].index,
                       sql_fsm_errmsg(n->fsm));
        goto out;
    }
    atomic_store(&n->applied, batch[cnt - 1].index);
    pthread_mutex_lock(&n->mu);
    for (unsigned i = 0; i < cnt; i++) {
        if (fe[i].payload != NULL) {
            exec_deliver(n, fe[i].index, &res[i]);
        }
    }
    if (exec_requeue_replaced(n, batch[cnt - 1].index) && !n->shutdown) {
        raft_uv_node_wake(n->driver);
    }
    pthread_mutex_unlock(&n->mu);
    for (unsigned i = 0; i < cnt; i++) {
        sql_result_clear(&res[i]);
    }
out:
    free(fe);
    free(res);
    return rc;
}

void *applier_main(void *arg)
{
    struct ext_node *n = arg;
    struct raft_entry *batch = malloc(APPLY_BATCH_MAX * sizeof *batch);
    if (batch == NULL) {
        node_set_error(n, "apply thread: out of memory");
        return NULL;
    }
    pthread_mutex_lock(&n->mu);
    for (;;) {
        unsigned cnt;
        int rc;
        while (!n->apply_stop && (n->n_apply_queue == 0 || n->apply_failed)) {
            pthread_cond_wait(&n->apply_cond, &n->mu);
        }
        if (n->apply_stop) {
            break;
        }
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

        pthread_mutex_lock(&n->mu);
        if (rc != 0) {
            n->apply_failed = true;
        }
    }
    pthread_mutex_unlock(&n->mu);
    free(batch);
    return NULL;
}
