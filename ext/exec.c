/* Writes from callers: the waiting caller (any thread), the submission
 * queue, proposing on the leader and forwarding from a follower (thesis
 * §6.2), and handing each caller the result of its own applied entry.
 *
 * Happy path: ext_node_exec queues a waiter and sleeps; the loop proposes
 * it (leader) or forwards it (follower) and learns its index; the apply
 * thread applies that index, finds the waiter by request id and wakes it.
 * Failure modes:
 *   - no leader until the deadline: the request never left this node, so
 *     the caller learns it was not applied;
 *   - a forward without answer, or a leader change: the loop forwards the
 *     same request id again; the state machine applies an id only once;
 *   - the waiter's index is applied with another request (a new leader
 *     overwrote it): retried under the same id;
 *   - the deadline passes after the request left this node: outcome
 *     unknown, and the caller is told so. */

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "node_internal.h"
#include "sqlbridge.h"

/* A forward unanswered for this long is sent again, ms. */
#define RESEND_MIN_MS 500

static bool id_eq(const uint64_t a[2], const uint64_t b[2])
{
    return a[0] == b[0] && a[1] == b[1];
}

/* find_waiter returns the live waiter with request id @id, or NULL. Caller
 * holds mu. */
static struct ext_waiter *find_waiter(struct ext_node *n, const uint64_t id[2])
{
    for (struct ext_waiter *w = n->waiters; w != NULL; w = w->next) {
        if (id_eq(w->id, id)) {
            return w;
        }
    }
    return NULL;
}

static void finish(struct ext_waiter *w, int kind, int sqlite_rc,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void finish(struct ext_waiter *w, int kind, int sqlite_rc,
                   const char *fmt, ...)
{
    va_list ap;
    w->state = EXT_W_DONE;
    w->result.kind = kind;
    w->result.sqlite_rc = sqlite_rc;
    va_start(ap, fmt);
    vsnprintf(w->result.errmsg, sizeof w->result.errmsg, fmt, ap);
    va_end(ap);
    pthread_cond_signal(&w->cond);
}

static void unlink_waiter(struct ext_node *n, struct ext_waiter *w)
{
    if (w->prev != NULL) {
        w->prev->next = w->next;
    } else {
        n->waiters = w->next;
    }
    if (w->next != NULL) {
        w->next->prev = w->prev;
    }
    n->n_waiters--;
    /* A waiter still in the submission ring is skipped by the loop. */
    for (unsigned i = 0; i < n->queue_len; i++) {
        unsigned k = (n->queue_head + i) % EXT_SUBMIT_QUEUE_MAX;
        if (n->queue[k] == w) {
            n->queue[k] = NULL;
        }
    }
}

static int kind_to_rc(int kind)
{
    switch (kind) {
        case EXT_EXEC_OK:
            return 0;
        case EXT_EXEC_SQL_ERROR:
            return RAFT_INVALID;
        case EXT_EXEC_UNKNOWN:
            return RAFT_UNKNOWN;
        default:
            return RAFT_TIMEOUT;
    }
}

int ext_node_exec(struct ext_node *n, const char *sql, size_t sql_len,
                  const struct sql_param *params, unsigned n_params,
                  struct ext_exec_result *out)
{
    struct ext_waiter w;
    pthread_condattr_t ca;
    struct timespec deadline;
    char errmsg[512];
    int rc;

    memset(&w, 0, sizeof w);
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&n->mu);
    w.id[0] = n->cfg.id;
    w.id[1] = n->next_seq++;
    pthread_mutex_unlock(&n->mu);

    rc = sqlbridge_encode(w.id, sql, sql_len, params, n_params,
                          n->cfg.max_request_bytes, &w.payload, errmsg,
                          sizeof errmsg);
    if (rc != 0) {
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = rc == RAFT_TOOBIG ? SQLITE_TOOBIG : SQLITE_ERROR;
        snprintf(out->errmsg, sizeof out->errmsg,
                 "raft_exec: not applied: %s", errmsg);
        return rc;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cond, &ca);
    pthread_condattr_destroy(&ca);
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += n->cfg.exec_timeout_ms / 1000;
    deadline.tv_nsec += (long)(n->cfg.exec_timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }

    pthread_mutex_lock(&n->mu);
    if (n->shutdown) {
        pthread_mutex_unlock(&n->mu);
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = SQLITE_ERROR;
        snprintf(out->errmsg, sizeof out->errmsg,
                 "raft_exec: not applied: the node is shutting down");
        rc = RAFT_SHUTDOWN;
        goto out;
    }
    if (n->status.log_full) {
        pthread_mutex_unlock(&n->mu);
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = SQLITE_FULL;
        snprintf(out->errmsg, sizeof out->errmsg,
                 "raft_exec: not applied: the log is full (log_max_mb=%llu); "
                 "writes resume once compaction frees space, or raise "
                 "log_max_mb and restart the node",
                 (unsigned long long)(n->cfg.log_max_bytes >> 20));
        rc = RAFT_NOSPACE;
        goto out;
    }
    if (n->queue_len == EXT_SUBMIT_QUEUE_MAX) {
        pthread_mutex_unlock(&n->mu);
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = SQLITE_BUSY;
        snprintf(out->errmsg, sizeof out->errmsg,
                 "raft_exec: not applied: busy, %d writes already queued "
                 "on this node; retry later",
                 EXT_SUBMIT_QUEUE_MAX);
        rc = RAFT_BUSY;
        goto out;
    }
    w.state = EXT_W_QUEUED;
    w.next = n->waiters;
    if (n->waiters != NULL) {
        n->waiters->prev = &w;
    }
    n->waiters = &w;
    n->n_waiters++;
    n->queue[(n->queue_head + n->queue_len) % EXT_SUBMIT_QUEUE_MAX] = &w;
    n->queue_len++;
    pthread_mutex_unlock(&n->mu);
    raft_uv_node_wake(n->driver);

    pthread_mutex_lock(&n->mu);
    while (w.state != EXT_W_DONE) {
        if (pthread_cond_timedwait(&w.cond, &n->mu, &deadline) != 0 &&
            w.state != EXT_W_DONE) {
            break;
        }
    }
    if (w.state != EXT_W_DONE) {
        if (!w.left_node) {
            finish(&w, EXT_EXEC_NOT_APPLIED, SQLITE_BUSY,
                   "raft_exec: not applied: no leader reachable within "
                   "exec_timeout_ms (%u ms)",
                   n->cfg.exec_timeout_ms);
        } else {
            finish(&w, EXT_EXEC_UNKNOWN, SQLITE_ERROR,
                   "raft_exec: outcome unknown: not applied on this node "
                   "within exec_timeout_ms (%u ms); the write will be "
                   "applied on all nodes or on none",
                   n->cfg.exec_timeout_ms);
        }
    }
    unlink_waiter(n, &w);
    pthread_mutex_unlock(&n->mu);
    *out = w.result;
    rc = kind_to_rc(out->kind);

out:
    pthread_cond_destroy(&w.cond);
    raft_buf_unref(w.payload);
    return rc;
}

void exec_fail_all(struct ext_node *n, const char *reason)
{
    pthread_mutex_lock(&n->mu);
    n->shutdown = true;
    for (struct ext_waiter *w = n->waiters; w != NULL; w = w->next) {
        if (w->state == EXT_W_DONE) {
            continue;
        }
        if (w->left_node) {
            finish(w, EXT_EXEC_UNKNOWN, SQLITE_ERROR,
                   "raft_exec: outcome unknown: %s; the write will be "
                   "applied on all nodes or on none",
                   reason);
        } else {
            finish(w, EXT_EXEC_NOT_APPLIED, SQLITE_ERROR,
                   "raft_exec: not applied: %s", reason);
        }
    }
    pthread_mutex_unlock(&n->mu);
}

/* ---- Loop thread -------------------------------------------------------- */

/* A request taken from a waiter to propose or forward outside the lock. */
struct outgoing {
    uint64_t id[2];
    struct raft_buf *payload; /* reference */
    bool was_left;            /* left_node before this attempt */
};

static uint64_t next_seed(struct ext_node *n)
{
    /* splitmix64: a seed per entry for the deterministic random(). */
    uint64_t z = (n->seed_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* propose stamps @n_bufs payloads with the leader's time and seeds and
 * appends them to the log. On success @out_index and @out_term give the first
 * entry. */
static int propose(struct ext_node *n, struct raft_buf *const *payloads,
                   unsigned n_bufs, raft_index *out_index,
                   raft_term *out_term)
{
    struct raft_buf **stamped = calloc(n_bufs, sizeof *stamped);
    int64_t now = wall_ms();
    int rc = 0;
    unsigned i;

    if (stamped == NULL) {
        return RAFT_NOMEM;
    }
    for (i = 0; i < n_bufs; i++) {
        rc = sqlbridge_stamp(payloads[i], now, next_seed(n), &stamped[i]);
        if (rc != 0) {
            goto out;
        }
    }
    rc = raft_uv_node_propose(n->driver, stamped, n_bufs, out_index,
                              out_term);
out:
    for (unsigned k = 0; k < n_bufs; k++) {
        raft_buf_unref(stamped[k]);
    }
    free(stamped);
    return rc;
}

/* take_pending collects the requests of every PENDING waiter (and of every
 * SENT one when @resend says so) into a new array, marking them SENT to
 * @to. Caller holds mu. */
static struct outgoing *take_pending(struct ext_node *n, raft_id to,
                                     uint64_t now, unsigned *out_n)
{
    struct outgoing *o = NULL;
    unsigned cnt = 0, cap = 0;
    uint64_t resend_after = 4u * n->cfg.heartbeat_ms;
    if (resend_after < RESEND_MIN_MS) {
        resend_after = RESEND_MIN_MS;
    }
    for (struct ext_waiter *w = n->waiters; w != NULL; w = w->next) {
        bool take = w->state == EXT_W_PENDING;
        if (w->state == EXT_W_SENT &&
            (w->sent_to != to || now >= w->sent_at + resend_after)) {
            take = true;
        }
        if (!take) {
            continue;
        }
        if (cnt == cap) {
            struct outgoing *g;
            cap = cap ? cap * 2 : 16;
            g = realloc(o, cap * sizeof *g);
            if (g == NULL) {
                break;
            }
            o = g;
        }
        o[cnt].id[0] = w->id[0];
        o[cnt].id[1] = w->id[1];
        o[cnt].payload = raft_buf_ref(w->payload);
        o[cnt].was_left = w->left_node;
        cnt++;
        w->state = EXT_W_SENT;
        w->left_node = true;
        w->sent_at = now;
        w->sent_to = to;
    }
    *out_n = cnt;
    return o;
}

/* dispatch proposes (leader) or forwards (follower) every waiting request.
 */
static void dispatch(struct ext_node *n)
{
    raft_id self = n->cfg.id;
    raft_id leader = raft_leader_id(n->core);
    bool is_leader = raft_role(n->core) == RAFT_LEADER;
    uint64_t now = raft_uv_node_now(n->driver);
    struct outgoing *o;
    unsigned cnt;

    if (raft_uv_node_failed(n->driver) || (leader == 0 && !is_leader)) {
        return;
    }
    pthread_mutex_lock(&n->mu);
    o = take_pending(n, is_leader ? self : leader, now, &cnt);
    pthread_mutex_unlock(&n->mu);
    if (cnt == 0) {
        free(o);
        return;
    }
    if (is_leader) {
        struct raft_buf **bufs = malloc(cnt * sizeof *bufs);
        raft_index index = 0;
        raft_term term = 0;
        int rc = RAFT_NOMEM;
        if (bufs != NULL) {
            for (unsigned i = 0; i < cnt; i++) {
                bufs[i] = o[i].payload;
            }
            rc = propose(n, bufs, cnt, &index, &term);
            free(bufs);
        }
        pthread_mutex_lock(&n->mu);
        for (unsigned i = 0; i < cnt; i++) {
            struct ext_waiter *w = find_waiter(n, o[i].id);
            if (w == NULL || w->state != EXT_W_SENT) {
                continue;
            }
            if (rc == 0) {
                w->state = EXT_W_APPENDED;
                w->index = index + i;
                w->term = term;
            } else {
                w->state = EXT_W_PENDING;
                w->left_node = o[i].was_left;
            }
        }
        pthread_mutex_unlock(&n->mu);
    } else {
        for (unsigned i = 0; i < cnt; i++) {
            struct raft_message m = {.type = RAFT_MSG_FORWARD};
            int rc;
            m.from = self;
            m.to = leader;
            m.forward.request_id[0] = o[i].id[0];
            m.forward.request_id[1] = o[i].id[1];
            m.forward.data = o[i].payload;
            rc = raft_uv_node_send(n->driver, &m);
            if (rc != 0) {
                /* Not sent at all: back to waiting, as it was. */
                pthread_mutex_lock(&n->mu);
                struct ext_waiter *w = find_waiter(n, o[i].id);
                if (w != NULL && w->state == EXT_W_SENT) {
                    w->state = EXT_W_PENDING;
                    w->left_node = o[i].was_left;
                }
                pthread_mutex_unlock(&n->mu);
            }
        }
    }
    for (unsigned i = 0; i < cnt; i++) {
        raft_buf_unref(o[i].payload);
    }
    free(o);
}

/* propose_forwarded proposes the followers' requests held since the last
 * wake as one batch and answers each. */
static void propose_forwarded(struct ext_node *n)
{
    struct raft_buf **bufs;
    raft_index index = 0;
    raft_term term = 0;
    unsigned cnt = n->n_fwd;
    int rc = RAFT_NOTLEADER;

    if (cnt == 0) {
        return;
    }
    if (raft_role(n->core) == RAFT_LEADER && !raft_uv_node_failed(n->driver)) {
        bufs = malloc(cnt * sizeof *bufs);
        rc = RAFT_NOMEM;
        if (bufs != NULL) {
            for (unsigned i = 0; i < cnt; i++) {
                bufs[i] = n->fwd[i].data;
            }
            rc = propose(n, bufs, cnt, &index, &term);
            free(bufs);
        }
    }
    for (unsigned i = 0; i < cnt; i++) {
        struct ext_forwarded *f = &n->fwd[i];
        struct raft_message m = {.type = RAFT_MSG_FORWARD_RESULT};
        m.from = n->cfg.id;
        m.to = f->from;
        m.forward_result.request_id[0] = f->request_id[0];
        m.forward_result.request_id[1] = f->request_id[1];
        m.forward_result.status = rc;
        m.forward_result.index = rc == 0 ? index + i : 0;
        m.forward_result.term = rc == 0 ? term : 0;
        raft_uv_node_send(n->driver, &m);
        raft_buf_unref(f->data);
    }
    n->n_fwd = 0;
}

void exec_drop_forwarded(struct ext_node *n)
{
    for (unsigned i = 0; i < n->n_fwd; i++) {
        raft_buf_unref(n->fwd[i].data);
    }
    free(n->fwd);
    n->fwd = NULL;
    n->n_fwd = 0;
    n->cap_fwd = 0;
}

void exec_on_wake(struct ext_node *n)
{
    propose_forwarded(n);
    pthread_mutex_lock(&n->mu);
    while (n->queue_len > 0) {
        struct ext_waiter *w = n->queue[n->queue_head];
        n->queue[n->queue_head] = NULL;
        n->queue_head = (n->queue_head + 1) % EXT_SUBMIT_QUEUE_MAX;
        n->queue_len--;
        if (w != NULL && w->state == EXT_W_QUEUED) {
            w->state = EXT_W_PENDING;
        }
    }
    pthread_mutex_unlock(&n->mu);
    dispatch(n);
}

void exec_on_tick(struct ext_node *n)
{
    propose_forwarded(n);
    dispatch(n);
}

/* answer_forward sends the FORWARD_RESULT for @req. */
static void answer_forward(struct ext_node *n, const struct raft_message *req,
                           int status, raft_index index, raft_term term)
{
    struct raft_message m = {.type = RAFT_MSG_FORWARD_RESULT};
    m.from = n->cfg.id;
    m.to = req->from;
    m.forward_result.request_id[0] = req->forward.request_id[0];
    m.forward_result.request_id[1] = req->forward.request_id[1];
    m.forward_result.status = status;
    m.forward_result.index = index;
    m.forward_result.term = term;
    raft_uv_node_send(n->driver, &m);
}

void exec_on_forward(struct ext_node *n, const struct raft_message *m)
{
    if (m->type == RAFT_MSG_FORWARD) {
        struct ext_forwarded *f;
        uint64_t id[2];
        if (raft_role(n->core) != RAFT_LEADER ||
            raft_uv_node_failed(n->driver)) {
            answer_forward(n, m, RAFT_NOTLEADER, 0, 0);
            return;
        }
        if (m->forward.data == NULL ||
            m->forward.data->len > n->cfg.max_request_bytes + 4096) {
            answer_forward(n, m, RAFT_TOOBIG, 0, 0);
            return;
        }
        /* Refused alone: a malformed request held with others would fail
         * their whole proposal at the next wake (the stamp checks the
         * same header). */
        if (sql_request_id(m->forward.data->data, m->forward.data->len,
                           id) != 0) {
            answer_forward(n, m, RAFT_CORRUPT, 0, 0);
            return;
        }
        if (n->n_fwd == n->cap_fwd) {
            unsigned cap = n->cap_fwd ? n->cap_fwd * 2 : 64;
            f = realloc(n->fwd, cap * sizeof *f);
            if (f == NULL) {
                answer_forward(n, m, RAFT_NOMEM, 0, 0);
                return;
            }
            n->fwd = f;
            n->cap_fwd = cap;
        }
        /* Held until the next wake: every request read before it goes
         * into one proposal. */
        if (n->n_fwd == 0) {
            raft_uv_node_wake(n->driver);
        }
        f = &n->fwd[n->n_fwd++];
        f->from = m->from;
        f->request_id[0] = m->forward.request_id[0];
        f->request_id[1] = m->forward.request_id[1];
        f->data = raft_buf_ref(m->forward.data);
        return;
    }

    /* FORWARD_RESULT: the leader's answer to one of our requests. */
    pthread_mutex_lock(&n->mu);
    struct ext_waiter *w = find_waiter(n, m->forward_result.request_id);
    if (w != NULL && w->state == EXT_W_SENT) {
        int status = m->forward_result.status;
        if (status == 0) {
            w->state = EXT_W_APPENDED;
            w->index = m->forward_result.index;
            w->term = m->forward_result.term;
        } else if (status == RAFT_TOOBIG) {
            finish(w, EXT_EXEC_NOT_APPLIED, SQLITE_TOOBIG,
                   "raft_exec: not applied: the leader refused a request "
                   "larger than its max_request_bytes");
        } else if (status == RAFT_CORRUPT) {
            finish(w, EXT_EXEC_NOT_APPLIED, SQLITE_ERROR,
                   "raft_exec: not applied: the leader refused the request "
                   "as malformed (do the nodes run different raftsql "
                   "versions?)");
        } else {
            /* Not the leader any more, busy, or a failed append: retry
             * with the same id once a leader is known. */
            w->state = EXT_W_PENDING;
        }
    }
    pthread_mutex_unlock(&n->mu);
}

/* ---- Apply thread ------------------------------------------------------- */

void exec_deliver(struct ext_node *n, raft_index index,
                  const struct sql_result *r)
{
    struct ext_waiter *w;
    (void)index;
    if (r->id[0] != n->cfg.id) {
        return; /* only this node's requests have waiters here */
    }
    w = find_waiter(n, r->id);
    if (w == NULL || w->state == EXT_W_DONE) {
        return;
    }
    if (r->duplicate) {
        /* An earlier copy of this id was applied, and its result given
         * out before this waiter could see it only after a restart. */
        finish(w, EXT_EXEC_UNKNOWN, SQLITE_ERROR,
               "raft_exec: outcome unknown: the request was applied "
               "earlier under the same id");
        return;
    }
    if (r->rc == SQLITE_OK) {
        w->result.changes = r->changes;
        w->result.last_insert_rowid = r->last_insert_rowid;
        finish(w, EXT_EXEC_OK, SQLITE_OK, "ok");
    } else {
        finish(w, EXT_EXEC_SQL_ERROR, r->rc, "%s",
               r->errmsg != NULL ? r->errmsg : sqlite3_errstr(r->rc));
    }
}

bool exec_requeue_replaced(struct ext_node *n, raft_index applied)
{
    bool any = false;
    for (struct ext_waiter *w = n->waiters; w != NULL; w = w->next) {
        if (w->state == EXT_W_APPENDED && w->index <= applied) {
            w->state = EXT_W_PENDING;
            any = true;
        }
    }
    return any;
}
