/* Writes from callers (exec.h): the waiting caller (any thread), the
 * submission queue, proposing on the leader and forwarding from a follower
 * (thesis §6.2; the leader's side is forward.c), and handing each caller
 * the result of its own applied entry.
 *
 * Happy path: exec_submit queues a waiter and sleeps; the loop proposes
 * it (leader) or forwards it (follower) and learns its index; the apply
 * thread applies that index, finds the waiter by request id and wakes it.
 * Each waiter is one call to the leader (leader_call.h): its wait, its
 * deadline and probe, and when a forward goes again are that module's;
 * the request ids, the queue and the words of each answer are exec's.
 * Failure modes:
 *   - no leader until the deadline: the request never left this node, so
 *     the caller learns it was not applied; but a request with a client
 *     id learns "outcome unknown": an earlier request of its caller under
 *     the same id (the try before a retry) may have applied, and without
 *     a leader this node cannot tell;
 *   - a forward without answer, or a leader change: the loop forwards the
 *     same request id again; the state machine applies an id only once;
 *   - the waiter's index is applied with another request (a new leader
 *     overwrote it): retried under the same id;
 *   - the deadline passes after the request left this node: outcome
 *     unknown, and the caller is told so;
 *   - this node is removed from the cluster (its removal committed,
 *     status_removed): new callers are refused at once (RAFTSQL_REMOVED,
 *     never sent), and so are the waiting ones that were never sent;
 *     those whose request left this node learn "outcome unknown" at once
 *     (the cluster may apply it, but this node receives no entries past
 *     an election timeout more, so it may never know), but for those
 *     whose entry lies before the removal's, which this node holds
 *     committed and applies;
 *   - a request of format 3 (a client id or rows wanted) while a member
 *     cannot apply it (wire_gate.h): refused at once, by the leader or
 *     by a follower whose leader speaks an older wire, never sent; while
 *     a member's version is not known yet it waits, and the deadline
 *     says why. */

#include "exec.h"

#include <inttypes.h>
#include <pthread.h>
#include <sqlite3ext.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../raftsql.h"
#include "sqlbridge.h"
#include "wire_gate.h"

SQLITE_EXTENSION_INIT3

/* A forward unanswered for this long is sent again, ms. */
#define EXT__RESEND_MIN_MS 500

/* A caller waiting for its write: one call to the leader
 * (leader_call.h), QUEUED until the loop proposes or forwards it, SENT
 * while a forward waits for the leader's answer, TAKEN once in some
 * leader's log at index/term, DONE once applied here (or failed), its
 * result set. Owned by the caller's stack frame; linked into e->waiters
 * while it waits. Invariant: only touched under e->mu, and never after
 * the caller closed it. */
struct waiter {
    struct ext_leader_call call;   /* where it stands, its wait, and its
                                      request id (this node's id,
                                      sequence) in e->waiters */
    struct raft_buf *payload;      /* encoded request (unstamped) */
    bool seen;                     /* taken from the submission queue by
                                      the loop (dispatched from then on) */
    raft_index index;              /* log index, when TAKEN */
    raft_term term;                /* log term, when TAKEN */
    bool want_rows;                /* the caller wants the rows (JSON) */
    const char *client_id;         /* the caller's request id (its bytes,
                                      alive while it waits), or NULL */
    size_t client_id_len;          /* its length */
    struct ext_exec_result result; /* set when DONE */
    bool lease_held;               /* the leader refused its latest send
                                      behind a write lease (RAFT_BUSY) */
};

struct ext_exec {
    raft_id id;                           /* this server */
    unsigned exec_timeout_ms;             /* a caller's longest wait */
    struct ext_leader_call_policy resend; /* when a forward goes again */
    uint64_t max_request_bytes;           /* larger requests are refused */
    uint64_t log_max_bytes;               /* for the "log full" message */
    struct ext_status *status;            /* log full or not */
    struct ext_propose *propose;          /* the leader's proposals (loop) */
    struct raft_uv_node *driver;          /* set by exec_attach */
    pthread_mutex_t mu;                   /* guards the fields marked (mu) */
    struct waiter *queue[EXT_SUBMIT_QUEUE_MAX]; /* ring (mu) */
    unsigned queue_head;                        /* (mu) */
    unsigned queue_len;                         /* (mu) */
    struct ext_leader_call_table waiters;       /* every waiting caller (mu) */
    uint64_t next_seq; /* request sequence numbers (mu) */
    bool shutdown;     /* no new callers, no wakes (mu) */
    bool held_back;    /* a write lease is in force: the leader proposes
                          none of these requests (exec_hold_back; mu) */
    char removed[256]; /* why this node takes no writes, removed from the
                          cluster (exec_set_removed); "" while a member
                          (mu) */
    struct ext_request_counts counts; /* how requests ended and went
                                         (atomic: no mu) */
};

/* first_waiter and next_waiter walk every waiting caller, newest first.
 * Caller holds mu. */
static struct waiter *first_waiter(struct ext_exec *e)
{
    return leader_call_next(&e->waiters, NULL);
}

static struct waiter *next_waiter(struct ext_exec *e, struct waiter *w)
{
    return leader_call_next(&e->waiters, &w->call);
}

static void finish(struct waiter *w, int kind, int sqlite_rc, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

static void finish(struct waiter *w, int kind, int sqlite_rc, const char *fmt,
                   ...)
{
    va_list ap;
    w->result.kind = kind;
    w->result.sqlite_rc = sqlite_rc;
    va_start(ap, fmt);
    vsnprintf(w->result.errmsg, sizeof w->result.errmsg, fmt, ap);
    va_end(ap);
    leader_call_finish(&w->call);
}

/* fail_unsent fails @w, whose request never left this node, for @reason
 * ("interrupted" prefixes the kind of answer when @interrupted): a plain
 * request is not applied, code @code (nothing of it can ever apply); a
 * request with a client id is of outcome unknown, code @unknown_code,
 * since a request sent earlier under the same id (the try before a
 * retry) may have applied and this node cannot tell: what it does not
 * know, it must not deny. Caller holds mu. */
static void fail_unsent(struct waiter *w, bool interrupted, int code,
                        int unknown_code, const char *reason)
{
    const char *how = interrupted ? "interrupted: " : "";

    if (w->client_id != NULL) {
        finish(w, EXT_EXEC_UNKNOWN, unknown_code,
               "raft_exec: %soutcome unknown: %s; this request was not "
               "sent, but one sent earlier under the same request id may "
               "have applied: retry with the same id to learn its outcome",
               how, reason);
    } else {
        finish(w, EXT_EXEC_NOT_APPLIED, code, "raft_exec: %snot applied: %s",
               how, reason);
    }
}

/* drop_queued takes @w, whose caller stops waiting, out of the
 * submission ring: a slot emptied so is skipped by the loop. Caller
 * holds mu. */
static void drop_queued(struct ext_exec *e, struct waiter *w)
{
    for (unsigned i = 0; i < e->queue_len; i++) {
        unsigned k = (e->queue_head + i) % EXT_SUBMIT_QUEUE_MAX;
        if (e->queue[k] == w) {
            e->queue[k] = NULL;
        }
    }
}

/* refusal_of returns the enum ext_refusal_reason of a call that ended in @r
 * (exec_submit's code @rc) without applying and never will, or -1 for
 * one that applied, failed on its SQL, or may have applied. */
static int refusal_of(int rc, const struct ext_exec_result *r)
{
    if (r->kind != EXT_EXEC_NOT_APPLIED && r->sqlite_rc != RAFTSQL_REFUSED) {
        return -1;
    }
    if (r->wire_gated) {
        return EXT_REFUSED_WIRE_GATE;
    }
    switch (r->sqlite_rc) {
        case RAFTSQL_INVALID:
            return EXT_REFUSED_INVALID;
        case RAFTSQL_TOOBIG:
            return EXT_REFUSED_TOO_BIG;
        case RAFTSQL_BUSY:
            return EXT_REFUSED_BUSY;
        case RAFTSQL_FULL:
            return EXT_REFUSED_LOG_FULL;
        case RAFTSQL_REMOVED:
            return EXT_REFUSED_REMOVED;
        case RAFTSQL_DIVERGED:
            return EXT_REFUSED_DIVERGED;
        case RAFTSQL_REFUSED:
            return EXT_REFUSED_POLICY;
        default:
            return rc == RAFT_SHUTDOWN ? EXT_REFUSED_SHUTTING_DOWN
                                       : EXT_REFUSED_OTHER;
    }
}

/* tally counts how the call of @w ended (its wait's @end, -1 when it
 * never waited) with result @r and code @rc: a wait that expired as timed
 * out (behind a write lease, without a leader, or unanswered once it left
 * this node), one refused by its reason; an interrupted call, or one that
 * applied or failed on its SQL, is not counted. Any thread. */
static void tally(struct ext_exec *e, const struct waiter *w, int end,
                  bool lease_held, int rc, const struct ext_exec_result *r)
{
    if (end == EXT_CALL_INTERRUPTED) {
        return;
    }
    if (end == EXT_CALL_EXPIRED && r->kind != EXT_EXEC_OK &&
        r->kind != EXT_EXEC_SQL_ERROR) {
        request_counts_timed_out(&e->counts,
                                 w->call.left_node ? EXT_TIMEOUT_UNANSWERED
                                 : lease_held      ? EXT_TIMEOUT_LEASE
                                                   : EXT_TIMEOUT_NO_LEADER);
        return;
    }
    request_counts_refused(&e->counts, refusal_of(rc, r));
}

struct ext_request_counts *exec_request_counts(struct ext_exec *e)
{
    return &e->counts;
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

/* request_opts checks @opts (may be NULL) and gives the codec's options
 * in @out. Returns 0 or RAFT_INVALID with @errmsg. */
static int request_opts(const struct ext_exec_opts *opts,
                        struct sql_request_opts *out, char *errmsg,
                        size_t errmsg_len)
{
    memset(out, 0, sizeof *out);
    if (opts == NULL) {
        return 0;
    }
    if (opts->request_id != NULL &&
        (opts->request_id_len == 0 ||
         opts->request_id_len > EXT_REQUEST_ID_MAX)) {
        snprintf(errmsg, errmsg_len,
                 "the request id must be 1 to %d bytes, not %zu",
                 EXT_REQUEST_ID_MAX, opts->request_id_len);
        return RAFT_INVALID;
    }
    if (opts->request_id != NULL) {
        out->client_id = opts->request_id;
        out->client_id_len = opts->request_id_len;
    }
    out->flags = opts->want_rows ? SQL_REQUEST_WANT_ROWS : 0;
    return 0;
}

/* is_format3 says whether @w's request is of format 3 (wire_gate.h). */
static bool is_format3(const struct waiter *w)
{
    return w->want_rows || w->client_id != NULL;
}

int exec_submit(struct ext_exec *e, const char *sql, size_t sql_len,
                const struct sql_param *params, unsigned n_params,
                const struct ext_exec_opts *opts,
                const struct ext_exec_probe *probe, struct ext_exec_result *out)
{
    struct sql_request_opts ropts;
    uint64_t id[2];
    struct waiter w;
    char errmsg[512];
    bool cancelled = false;
    char reason[256];
    int end = -1, rc;
    bool lease_held = false;

    memset(&w, 0, sizeof w);
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    id[0] = e->id;
    id[1] = e->next_seq++;
    pthread_mutex_unlock(&e->mu);

    rc = request_opts(opts, &ropts, errmsg, sizeof errmsg);
    if (rc == 0) {
        rc = sqlbridge_encode(id, sql, sql_len, params, n_params, &ropts,
                              e->max_request_bytes, &w.payload, errmsg,
                              sizeof errmsg);
    }
    if (rc != 0) {
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = rc == RAFT_TOOBIG  ? RAFTSQL_TOOBIG
                         : rc == RAFT_NOMEM ? SQLITE_NOMEM
                                            : RAFTSQL_INVALID;
        snprintf(out->errmsg, sizeof out->errmsg, "raft_exec: not applied: %s",
                 errmsg);
        request_counts_refused(&e->counts, refusal_of(rc, out));
        return rc;
    }
    w.want_rows = ropts.flags != 0;
    w.client_id = ropts.client_id;
    w.client_id_len = ropts.client_id_len;

    /* Opened (linked) and closed under mu: nobody sees the call before
     * it is queued. */
    pthread_mutex_lock(&e->mu);
    if (leader_call_open(&e->waiters, &w.call, &w, id, e->exec_timeout_ms,
                         EXT_EXEC_POLL_MS) != 0) {
        pthread_mutex_unlock(&e->mu);
        raft_buf_unref(w.payload);
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = SQLITE_NOMEM;
        snprintf(out->errmsg, sizeof out->errmsg,
                 "raft_exec: not applied: out of memory");
        return RAFT_NOMEM;
    }
    if (is_format3(&w)) {
        /* Only to a server that applies format 3 (wire_gate.h). */
        leader_call_need_wire(&w.call, EXT_WIRE_GATE_VERSION);
    }
    if (e->shutdown) {
        fail_unsent(&w, false, RAFTSQL_NOT_APPLIED, RAFTSQL_UNKNOWN,
                    "the node is shutting down");
        *out = w.result;
        rc = RAFT_SHUTDOWN;
        goto out;
    }
    if (e->removed[0] != '\0') {
        fail_unsent(&w, false, RAFTSQL_REMOVED, RAFTSQL_UNKNOWN, e->removed);
        *out = w.result;
        rc = RAFT_NOTFOUND;
        goto out;
    }
    if (status_log_full(e->status, reason, sizeof reason)) {
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = RAFTSQL_FULL;
        if (strstr(reason, "disk full") != NULL) {
            snprintf(out->errmsg, sizeof out->errmsg,
                     "raft_exec: not applied: disk full: the log's "
                     "filesystem has no room; writes resume by themselves "
                     "once space is freed");
        } else {
            snprintf(out->errmsg, sizeof out->errmsg,
                     "raft_exec: not applied: the log is full "
                     "(log_max_mb=%llu); writes resume once compaction "
                     "frees space, or raise log_max_mb and restart the node",
                     (unsigned long long)(e->log_max_bytes >> 20));
        }
        rc = RAFT_NOSPACE;
        goto out;
    }
    if (e->queue_len == EXT_SUBMIT_QUEUE_MAX) {
        out->kind = EXT_EXEC_NOT_APPLIED;
        out->sqlite_rc = RAFTSQL_BUSY;
        snprintf(out->errmsg, sizeof out->errmsg,
                 "raft_exec: not applied: busy, %d writes already queued "
                 "on this node; retry later",
                 EXT_SUBMIT_QUEUE_MAX);
        rc = RAFT_BUSY;
        goto out;
    }
    e->queue[(e->queue_head + e->queue_len) % EXT_SUBMIT_QUEUE_MAX] = &w;
    e->queue_len++;
    pthread_mutex_unlock(&e->mu);
    raft_uv_node_wake(e->driver);

    pthread_mutex_lock(&e->mu);
    end = leader_call_wait(&w.call, &e->mu, probe);
    if (end == EXT_CALL_INTERRUPTED) {
        if (!w.call.left_node) {
            fail_unsent(&w, true, RAFTSQL_INTERRUPTED,
                        RAFTSQL_INTERRUPTED_UNKNOWN,
                        "the request had not left this node");
        } else {
            finish(&w, EXT_EXEC_UNKNOWN, RAFTSQL_INTERRUPTED_UNKNOWN,
                   "raft_exec: interrupted: outcome unknown: the "
                   "write will be applied on all nodes or on none");
        }
        cancelled = true;
    } else if (end != EXT_CALL_ANSWERED) {
        lease_held = e->held_back || w.lease_held;
        if (!w.call.left_node) {
            char why[160];
            snprintf(why, sizeof why,
                     e->held_back || w.lease_held
                         ? "it waited exec_timeout_ms (%u ms) behind a "
                           "plain SQL write transaction's write lease"
                         : "no leader reachable within exec_timeout_ms (%u "
                           "ms)",
                     e->exec_timeout_ms);
            fail_unsent(&w, false, RAFTSQL_NOT_APPLIED, RAFTSQL_UNKNOWN, why);
        } else {
            finish(&w, EXT_EXEC_UNKNOWN, RAFTSQL_UNKNOWN,
                   "raft_exec: outcome unknown: not applied on this node "
                   "within exec_timeout_ms (%u ms); the write will be "
                   "applied on all nodes or on none",
                   e->exec_timeout_ms);
        }
    }
    drop_queued(e, &w);
    *out = w.result;
    rc = cancelled ? RAFT_CANCELED : kind_to_rc(out->kind);

out:
    tally(e, &w, end, lease_held, rc, out);
    leader_call_close(&e->waiters, &w.call);
    pthread_mutex_unlock(&e->mu);
    raft_buf_unref(w.payload);
    return rc;
}

/* fail_waiter fails waiting caller @w with @reason: not applied, unless
 * its request ever left this node (outcome unknown then) or has a client
 * id (fail_unsent). Caller holds mu. */
static void fail_waiter(struct waiter *w, const char *reason)
{
    if (w->call.left_node) {
        finish(w, EXT_EXEC_UNKNOWN, RAFTSQL_UNKNOWN,
               "raft_exec: outcome unknown: %s; the write will be "
               "applied on all nodes or on none",
               reason);
    } else {
        fail_unsent(w, false, RAFTSQL_NOT_APPLIED, RAFTSQL_UNKNOWN, reason);
    }
}

/* refuse_gated fails @w, a request of format 3 refused while a member
 * cannot apply that format (wire_gate.h), with @why: as fail_waiter, but
 * "not applied" also with a client id, and marked wire_gated. Requests of
 * that format apply nowhere while a member speaks an older wire, so a
 * retry's earlier try applied only if the gate was open for it: the
 * refusal is about this format, documented with its own remedy. Caller
 * holds mu. */
static void refuse_gated(struct waiter *w, const char *why)
{
    if (w->call.left_node) {
        fail_waiter(w, why);
    } else {
        finish(w, EXT_EXEC_NOT_APPLIED, RAFTSQL_NOT_APPLIED,
               "raft_exec: not applied: %s", why);
    }
    w->result.wire_gated = true;
}

/* fail_waiting fails every waiting caller with @reason. Caller holds
 * mu. */
static void fail_waiting(struct ext_exec *e, const char *reason)
{
    for (struct waiter *w = first_waiter(e); w != NULL; w = next_waiter(e, w)) {
        if (w->call.state != EXT_CALL_DONE) {
            fail_waiter(w, reason);
        }
    }
}

void exec_fail_all(struct ext_exec *e, const char *reason)
{
    pthread_mutex_lock(&e->mu);
    e->shutdown = true;
    fail_waiting(e, reason);
    pthread_mutex_unlock(&e->mu);
}

void exec_fail_waiting(struct ext_exec *e, const char *reason)
{
    pthread_mutex_lock(&e->mu);
    fail_waiting(e, reason);
    pthread_mutex_unlock(&e->mu);
}

void exec_set_removed(struct ext_exec *e, bool removed, raft_index conf_index)
{
    pthread_mutex_lock(&e->mu);
    if (!removed) {
        e->removed[0] = '\0'; /* a member, or added again */
        pthread_mutex_unlock(&e->mu);
        return;
    }
    snprintf(e->removed, sizeof e->removed,
             "this node was removed from the cluster (configuration entry "
             "%llu committed) and takes no writes: write on a member",
             (unsigned long long)conf_index);
    for (struct waiter *w = first_waiter(e); w != NULL; w = next_waiter(e, w)) {
        /* An entry before the removal's is committed here and applied:
         * its caller gets its result. */
        int state = w->call.state;
        if (state == EXT_CALL_DONE ||
            (state == EXT_CALL_TAKEN && w->index < conf_index)) {
            continue;
        }
        if (w->call.left_node) {
            finish(w, EXT_EXEC_UNKNOWN, RAFTSQL_UNKNOWN,
                   "raft_exec: outcome unknown: this node was removed from "
                   "the cluster (configuration entry %llu committed) after "
                   "the request left it: the members apply it or not, and "
                   "this node receives no more entries to learn which; "
                   "read on a member",
                   (unsigned long long)conf_index);
        } else {
            fail_unsent(w, false, RAFTSQL_REMOVED, RAFTSQL_UNKNOWN, e->removed);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- Loop thread -------------------------------------------------------- */

/* A request taken from a waiter to propose or forward outside the lock. */
struct outgoing {
    uint64_t id[2];
    struct raft_buf *payload; /* reference */
    bool was_left;            /* it had left this node before this attempt */
};

/* Where take_pending sends: what held needs to know. */
struct hold_ctx {
    raft_id to;           /* the server the calls would go to */
    uint64_t now;         /* loop clock, ms */
    unsigned last_ms;     /* a call the leader held behind a write lease
                            goes no more this close to its deadline */
    struct timespec mono; /* CLOCK_MONOTONIC now */
};

/* held keeps waiter @item back from this dispatch (an
 * ext_leader_call_hold_cb, @data a struct hold_ctx): one the loop has
 * not seen yet (still in the submission queue), or one whose FORWARD is
 * still being written. Caller holds mu. */
static bool held(void *item, void *data)
{
    struct waiter *w = item;
    const struct hold_ctx *h = data;

    if (!w->seen) {
        return true; /* still in the submission queue */
    }
    if (w->lease_held && !w->call.left_node &&
        (w->call.deadline.tv_sec - h->mono.tv_sec) * 1000 +
                (w->call.deadline.tv_nsec - h->mono.tv_nsec) / 1000000 <
            (long)h->last_ms) {
        /* The leader refused it behind a write lease and it never left
         * this node: a send now could still be on its way at the
         * deadline, which would have to say "outcome unknown"; kept, it
         * ends "not applied". */
        return true;
    }
    if (w->call.state == EXT_CALL_SENT && w->call.sent_to == h->to &&
        raft_buf_holders(w->payload) > 1) {
        /* Its FORWARD is still being written to this leader: the
         * transport holds the payload (64 KiB or more) until the write
         * is done. A copy now would queue behind it (twice the bytes, a
         * second proposal of the same id, or "busy" at the queue bound),
         * so its resend clock restarts from there. */
        leader_call_restart_clock(&w->call, h->now);
        return true;
    }
    return false;
}

/* take_pending collects the requests of every waiter the loop has seen
 * that is due to go to @to (leader_call_take_due: never sent, or sent to
 * another leader, or overdue) into a new array, marking them SENT to
 * @to. A request of format 3 that @to cannot take is refused instead
 * (leader_call_take_due's wire gate), with the words of wire_gate.h:
 * the member driver @d knows on an older wire when this node leads, else
 * the leader's. Called on the loop thread of @d; caller holds mu. */
static struct outgoing *take_pending(struct ext_exec *e,
                                     const struct raft_uv_node *d,
                                     const struct ext_leader_call_server *to,
                                     uint64_t now, unsigned *out_n)
{
    struct hold_ctx h = {.to = to->id, .now = now};
    struct outgoing *o = NULL;
    unsigned cnt = 0, cap = 0;
    struct waiter *w = NULL;
    bool refused;

    /* The last stretch before a deadline with no send of a call held
     * behind a write lease: long enough for the leader's refusal of the
     * send before it to come back (a second at most, a third of
     * exec_timeout_ms for a short one). */
    h.last_ms = e->exec_timeout_ms / 3 < 1000 ? e->exec_timeout_ms / 3 : 1000;
    clock_gettime(CLOCK_MONOTONIC, &h.mono);

    while ((w = leader_call_take_due(&e->waiters, w != NULL ? &w->call : NULL,
                                     &e->resend, to, now, held, &h,
                                     &refused)) != NULL) {
        if (refused) {
            char why[256] = "";
            if (to->id == e->id) {
                (void)wire_gate_members(d, e->id, why, sizeof why);
            } else {
                wire_gate_leader_why(to->id, to->wire, why, sizeof why);
            }
            refuse_gated(w, why);
            continue;
        }
        if (cnt == cap) {
            struct outgoing *g;
            cap = cap ? cap * 2 : 16;
            g = realloc(o, cap * sizeof *g);
            if (g == NULL) {
                leader_call_unsend(&w->call);
                break;
            }
            o = g;
        }
        o[cnt].id[0] = w->call.id[0];
        o[cnt].id[1] = w->call.id[1];
        o[cnt].payload = raft_buf_ref(w->payload);
        o[cnt].was_left = w->call.left_before;
        cnt++;
    }
    *out_n = cnt;
    return o;
}

/* dispatch proposes (leader) or forwards (follower) every waiting request.
 */
static void dispatch(struct ext_exec *e, struct raft_uv_node *d)
{
    raft_id self = e->id;
    const struct raft *core = raft_uv_node_core(d);
    raft_id leader = raft_leader_id(core);
    bool is_leader = raft_role(core) == RAFT_LEADER;
    uint64_t now = raft_uv_node_now(d);
    struct ext_leader_call_server to;
    struct outgoing *o;
    unsigned cnt;

    if (raft_uv_node_failed(d) || (leader == 0 && !is_leader)) {
        return;
    }
    /* Leading, the server a request goes to is this node's log, which
     * takes what every member applies. */
    to.id = is_leader ? self : leader;
    to.wire = is_leader ? wire_gate_log_wire(d, self)
                        : raft_uv_node_peer_wire(d, leader);
    pthread_mutex_lock(&e->mu);
    if (is_leader && e->held_back) {
        /* Behind a write lease: they stay QUEUED, never left. */
        pthread_mutex_unlock(&e->mu);
        return;
    }
    o = take_pending(e, d, &to, now, &cnt);
    pthread_mutex_unlock(&e->mu);
    if (cnt == 0) {
        free(o);
        return;
    }
    if (is_leader) {
        struct raft_buf **bufs = malloc(cnt * sizeof *bufs);
        bool *fresh = malloc(cnt * sizeof *fresh);
        raft_index index = 0;
        raft_term term = 0;
        int rc = RAFT_NOMEM;
        if (bufs != NULL && fresh != NULL) {
            for (unsigned i = 0; i < cnt; i++) {
                bufs[i] = o[i].payload;
                /* Never proposed nor forwarded, and held by its waiter
                 * (who reads it no more: a retry stamps it again) and
                 * this dispatch alone. */
                fresh[i] =
                    !o[i].was_left && raft_buf_holders(o[i].payload) == 2;
            }
            rc = propose_batch(e->propose, d, bufs, fresh, cnt, &index, &term);
        }
        free(bufs);
        free(fresh);
        pthread_mutex_lock(&e->mu);
        for (unsigned i = 0; i < cnt; i++) {
            struct waiter *w = leader_call_find(&e->waiters, o[i].id);
            if (w == NULL || w->call.state != EXT_CALL_SENT) {
                continue;
            }
            if (rc == 0) {
                leader_call_taken(&w->call);
                w->index = index + i;
                w->term = term;
            } else {
                leader_call_unsend(&w->call);
            }
        }
        pthread_mutex_unlock(&e->mu);
    } else {
        for (unsigned i = 0; i < cnt; i++) {
            struct raft_frame m = {.type = RAFT_FRAME_FORWARD};
            int rc;
            m.from = self;
            m.to = leader;
            m.forward.request_id[0] = o[i].id[0];
            m.forward.request_id[1] = o[i].id[1];
            m.forward.data = o[i].payload;
            rc = raft_uv_node_send_frame(d, &m);
            if (rc == 0) {
                request_counts_forwarded(&e->counts, o[i].was_left
                                                         ? EXT_FORWARD_AGAIN
                                                         : EXT_FORWARD_FIRST);
            } else {
                /* Not sent at all: back to waiting, as it was. */
                pthread_mutex_lock(&e->mu);
                struct waiter *w = leader_call_find(&e->waiters, o[i].id);
                if (w != NULL && w->call.state == EXT_CALL_SENT) {
                    leader_call_unsend(&w->call);
                }
                pthread_mutex_unlock(&e->mu);
            }
        }
    }
    for (unsigned i = 0; i < cnt; i++) {
        raft_buf_unref(o[i].payload);
    }
    free(o);
}

void exec_on_wake(struct ext_exec *e, struct raft_uv_node *d)
{
    pthread_mutex_lock(&e->mu);
    while (e->queue_len > 0) {
        struct waiter *w = e->queue[e->queue_head];
        e->queue[e->queue_head] = NULL;
        e->queue_head = (e->queue_head + 1) % EXT_SUBMIT_QUEUE_MAX;
        e->queue_len--;
        if (w != NULL) {
            w->seen = true;
        }
    }
    pthread_mutex_unlock(&e->mu);
    dispatch(e, d);
}

void exec_hold_back(struct ext_exec *e, bool held)
{
    pthread_mutex_lock(&e->mu);
    e->held_back = held;
    pthread_mutex_unlock(&e->mu);
}

void exec_on_tick(struct ext_exec *e, struct raft_uv_node *d)
{
    dispatch(e, d);
}

void exec_on_forward_result(struct ext_exec *e, const struct raft_frame *m)
{
    /* FORWARD_RESULT: the leader's answer to one of our requests. */
    pthread_mutex_lock(&e->mu);
    struct waiter *w =
        leader_call_find(&e->waiters, m->forward_result.request_id);
    if (w != NULL && w->call.state == EXT_CALL_SENT) {
        int status = m->forward_result.status;
        if (status == 0) {
            leader_call_taken(&w->call);
            w->index = m->forward_result.index;
            w->term = m->forward_result.term;
        } else if (status == RAFT_TOOBIG) {
            finish(w, EXT_EXEC_NOT_APPLIED, RAFTSQL_TOOBIG,
                   "raft_exec: not applied: the leader refused a request "
                   "larger than its max_request_bytes");
        } else if (status == RAFT_FORMAT) {
            char why[256];
            /* The leader did not append it (wire_gate.h). */
            leader_call_unsend(&w->call);
            wire_gate_refused_why(m->from, why, sizeof why);
            refuse_gated(w, why);
        } else if (status == RAFT_BUSY) {
            /* The leader holds new entries back behind a write lease and
             * did not take it: sent again after the resend interval;
             * this send made its outcome no less known. */
            leader_call_refused(&w->call);
            w->lease_held = true;
        } else if (status == RAFT_CORRUPT) {
            finish(w, EXT_EXEC_NOT_APPLIED, RAFTSQL_NOT_APPLIED,
                   "raft_exec: not applied: the leader refused the request "
                   "as malformed (do the nodes run different raftsql "
                   "versions?)");
        } else {
            /* Not the leader any more, busy, or a failed append: retry
             * with the same id once a leader is known. */
            leader_call_requeue(&w->call);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- Apply thread ------------------------------------------------------- */

/* test_drop_result says whether test fault RAFTSQL_TEST_DROP_ID_RESULT
 * (test builds only) drops result @r for waiter @w: a first outcome
 * that applied (not a duplicate's, not a SQL error), when the waiter's
 * client id starts with the variable's value. The caller then learns at
 * once what its deadline would tell it, "outcome unknown", although the
 * request applied: what a lost answer does, made deterministic. It does
 * not wait out exec_timeout_ms, so that a test can give every other
 * request of the run a generous one. */
static bool test_drop_result(const struct waiter *w, const struct sql_result *r)
{
#ifdef RAFTSQL_TEST_FAULTS
    const char *prefix = getenv("RAFTSQL_TEST_DROP_ID_RESULT");
    size_t len = prefix != NULL ? strlen(prefix) : 0;

    if (len > 0 && w->client_id != NULL && !r->id_duplicate &&
        r->rc == SQLITE_OK && w->client_id_len >= len &&
        memcmp(w->client_id, prefix, len) == 0) {
        fprintf(stderr,
                "raftsql: TEST FAULT RAFTSQL_TEST_DROP_ID_RESULT: the "
                "result of request %llu.%llu is dropped\n",
                (unsigned long long)r->id[0], (unsigned long long)r->id[1]);
        return true;
    }
#else
    (void)w;
    (void)r;
#endif
    return false;
}

/* deliver hands the result @r of an applied entry to its waiter, if one
 * waits here. Caller holds mu. */
static void deliver(struct ext_exec *e, const struct sql_result *r)
{
    struct waiter *w;
    if (r->id[0] != e->id) {
        return; /* only this node's requests have waiters here */
    }
    w = leader_call_find(&e->waiters, r->id);
    if (w == NULL || w->call.state == EXT_CALL_DONE) {
        return;
    }
    if (r->duplicate) {
        /* An earlier copy of this id was applied, and its result given
         * out before this waiter could see it only after a restart. */
        finish(w, EXT_EXEC_UNKNOWN, RAFTSQL_UNKNOWN,
               "raft_exec: outcome unknown: the request was applied "
               "earlier under the same id");
        return;
    }
    if (test_drop_result(w, r)) {
        leader_call_expire(&w->call);
        return;
    }
    w->result.duplicate = r->id_duplicate != 0;
    if (r->rc == SQLITE_OK && w->want_rows) {
        w->result.rows = r->rows != NULL ? strdup(r->rows) : NULL;
        if (w->result.rows == NULL) {
            finish(w, EXT_EXEC_UNKNOWN, RAFTSQL_UNKNOWN,
                   "raft_exec: outcome unknown: applied, but out of memory "
                   "for its rows; retry with the same request id");
            return;
        }
    }
    if (r->rc == SQLITE_OK) {
        w->result.changes = r->changes;
        w->result.last_insert_rowid = r->last_insert_rowid;
        finish(w, EXT_EXEC_OK, SQLITE_OK, "ok");
    } else if ((r->rc & 0xff) == SQLITE_AUTH) {
        /* Only raft_exec's policy refuses on the apply connection (its
         * authorizer, sql_refusal_*): the caller's check refuses the same
         * with the same words and code before the log, unless it could
         * not prepare the request on its connection (a table it does
         * not have yet). */
        w->result.err_at = r->err_at;
        finish(w, EXT_EXEC_SQL_ERROR, RAFTSQL_REFUSED,
               "raft_exec: not applied: %s",
               r->errmsg != NULL ? r->errmsg : sqlite3_errstr(r->rc));
    } else {
        w->result.err_at = r->err_at;
        finish(w, EXT_EXEC_SQL_ERROR, r->rc, "%s",
               r->errmsg != NULL ? r->errmsg : sqlite3_errstr(r->rc));
    }
}

/* requeue_replaced re-queues waiters whose index was applied with another
 * request (their entry was overwritten by a new leader), so they are
 * retried under the same id. Returns true when something was queued (the
 * loop must be woken). Caller holds mu. */
static bool requeue_replaced(struct ext_exec *e, raft_index applied)
{
    bool any = false;
    for (struct waiter *w = first_waiter(e); w != NULL; w = next_waiter(e, w)) {
        if (w->call.state == EXT_CALL_TAKEN && w->index <= applied) {
            leader_call_requeue(&w->call);
            any = true;
        }
    }
    return any;
}

void exec_applied(struct ext_exec *e, const struct sql_fsm_entry *entries,
                  const struct sql_result *results, unsigned n, raft_index last)
{
    pthread_mutex_lock(&e->mu);
    for (unsigned i = 0; i < n; i++) {
        if (entries[i].data != NULL && entries[i].kind == SQL_ENTRY_REQUEST) {
            deliver(e, &results[i]);
        }
    }
    /* The wake happens under mu, so it never races with the stop that
     * sets shutdown before stopping the driver. */
    if (requeue_replaced(e, last) && !e->shutdown) {
        raft_uv_node_wake(e->driver);
    }
    pthread_mutex_unlock(&e->mu);
}

void ext_exec_result_clear(struct ext_exec_result *r)
{
    free(r->rows);
    memset(r, 0, sizeof *r);
}

void exec_counts(struct ext_exec *e, unsigned *out_queue, unsigned *out_waiters)
{
    pthread_mutex_lock(&e->mu);
    *out_queue = e->queue_len;
    *out_waiters = leader_call_count(&e->waiters);
    pthread_mutex_unlock(&e->mu);
}

/* ---- Life cycle ---------------------------------------------------------- */

int exec_new(const struct ext_config *cfg, struct ext_status *status,
             struct ext_propose *propose, uint64_t first_seq,
             struct ext_exec **out)
{
    struct ext_exec *e = calloc(1, sizeof *e);
    if (e == NULL) {
        return RAFT_NOMEM;
    }
    e->id = cfg->id;
    e->exec_timeout_ms = cfg->exec_timeout_ms;
    e->resend.retry_ms = 4u * (uint64_t)cfg->heartbeat_ms;
    if (e->resend.retry_ms < EXT__RESEND_MIN_MS) {
        e->resend.retry_ms = EXT__RESEND_MIN_MS;
    }
    e->resend.follow_leader = true;
    e->max_request_bytes = cfg->max_request_bytes;
    e->log_max_bytes = cfg->log_max_bytes;
    e->status = status;
    e->propose = propose;
    e->next_seq = first_seq;
    pthread_mutex_init(&e->mu, NULL);
    *out = e;
    return 0;
}

void exec_attach(struct ext_exec *e, struct raft_uv_node *d)
{
    pthread_mutex_lock(&e->mu);
    e->driver = d;
    pthread_mutex_unlock(&e->mu);
}

void exec_free(struct ext_exec *e)
{
    if (e == NULL) {
        return;
    }
    pthread_mutex_destroy(&e->mu);
    free(e);
}
