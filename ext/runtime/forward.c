/* The leader's side of forwarding (forward.h).
 *
 * Happy path: a follower's FORWARD frame arrives -> checked and held -> the
 * loop's next wake proposes everything held as one batch -> each sender
 * gets FORWARD_RESULT with its index and term.
 * Failure modes: not the leader (or its log failed), a request too big or
 * malformed, a request of format 3 while a member cannot apply it
 * (RAFT_FORMAT) or may not (RAFT_NOCONN, wire_gate.h), no memory:
 * answered at once with the error, alone (a
 * malformed request held with others would fail their whole proposal);
 * a failed proposal answers every held request with its error, and the
 * followers retry under the same request ids. A copy of a request that is
 * still held is dropped (the held one is answered); a copy of one of the
 * last EXT__FORWARD_RECENT proposed gets the answer the first one got. */

#include "forward.h"

#include <stdlib.h>

#include "../../sql/sql.h"

/* Headroom over max_request_bytes for the request's own header. */
#define EXT__FORWARD_HEADER_SLACK 4096

/* Proposed requests remembered for a copy that arrives later. */
#define EXT__FORWARD_RECENT 256

/* A follower's request held until the loop's next wake. */
struct held {
    raft_id from;           /* the follower that sent it */
    uint64_t request_id[2]; /* its id (origin, sequence) */
    struct raft_buf *data;  /* the request (reference) */
};

/* A follower's request proposed, and the answer it was given. */
struct recent {
    raft_id from;           /* the follower, 0 for an empty slot */
    uint64_t request_id[2]; /* its id (origin, sequence) */
    raft_index index;       /* where it was appended */
    raft_term term;         /* in this term */
};

struct ext_forward {
    raft_id self;                              /* this server */
    struct recent recent[EXT__FORWARD_RECENT]; /* ring (loop) */
    unsigned next_recent;                      /* next slot (loop) */
    uint64_t max_request_bytes;                /* larger requests are refused */
    struct ext_propose *propose;               /* the node's (loop) */
    struct ext_forward_ops ops;                /* the node */
    struct held *held;                         /* in arrival order (loop) */
    unsigned n_held;                           /* (loop) */
    unsigned cap_held;                         /* (loop) */
};

int forward_new(raft_id self, uint64_t max_request_bytes,
                struct ext_propose *propose, const struct ext_forward_ops *ops,
                struct ext_forward **out)
{
    struct ext_forward *f = calloc(1, sizeof *f);
    if (f == NULL) {
        return RAFT_NOMEM;
    }
    f->self = self;
    f->max_request_bytes = max_request_bytes;
    f->propose = propose;
    f->ops = *ops;
    *out = f;
    return 0;
}

void forward_free(struct ext_forward *f)
{
    if (f == NULL) {
        return;
    }
    for (unsigned i = 0; i < f->n_held; i++) {
        raft_buf_unref(f->held[i].data);
    }
    free(f->held);
    free(f);
}

unsigned forward_n_held(const struct ext_forward *f)
{
    return f->n_held;
}

/* can_propose says whether @d leads and its log takes writes. */
static bool can_propose(struct raft_uv_node *d)
{
    return raft_role(raft_uv_node_core(d)) == RAFT_LEADER &&
           !raft_uv_node_failed(d);
}

/* answer sends a FORWARD_RESULT for request @id to follower @to through
 * @d (a lost answer is resent by the follower's retry). */
static void answer(struct ext_forward *f, struct raft_uv_node *d, raft_id to,
                   const uint64_t id[2], int status, raft_index index,
                   raft_term term)
{
    struct raft_frame m = {.type = RAFT_FRAME_FORWARD_RESULT};
    m.from = f->self;
    m.to = to;
    m.forward_result.request_id[0] = id[0];
    m.forward_result.request_id[1] = id[1];
    m.forward_result.status = status;
    m.forward_result.index = index;
    m.forward_result.term = term;
    raft_uv_node_send_frame(d, &m);
}

void forward_on_request(struct ext_forward *f, struct raft_uv_node *d,
                        const struct raft_frame *m)
{
    const uint64_t *id = m->forward.request_id;
    unsigned version;
    struct held *h;

    if (!can_propose(d)) {
        answer(f, d, m->from, id, RAFT_NOTLEADER, 0, 0);
        return;
    }
    /* A copy of a request still held (the follower sent it again before
     * this wake): the held one is proposed and answered once. */
    for (unsigned i = 0; i < f->n_held; i++) {
        if (f->held[i].from == m->from && f->held[i].request_id[0] == id[0] &&
            f->held[i].request_id[1] == id[1]) {
            return;
        }
    }
    /* A copy of one proposed lately (its answer crossed the copy, or was
     * lost): answered as before, not appended twice. Should that entry
     * have been replaced since (a leader change), the follower finds
     * another request at the index and retries, as after any answer. */
    for (unsigned i = 0; i < EXT__FORWARD_RECENT; i++) {
        const struct recent *r = &f->recent[i];
        if (r->from == m->from && r->request_id[0] == id[0] &&
            r->request_id[1] == id[1]) {
            answer(f, d, m->from, id, 0, r->index, r->term);
            return;
        }
    }
    if (f->ops.held_back != NULL && f->ops.held_back(f->ops.data)) {
        answer(f, d, m->from, id, RAFT_BUSY, 0, 0);
        return;
    }
    if (m->forward.data == NULL ||
        m->forward.data->len >
            f->max_request_bytes + EXT__FORWARD_HEADER_SLACK) {
        answer(f, d, m->from, id, RAFT_TOOBIG, 0, 0);
        return;
    }
    /* Refused alone: a malformed request held with others would fail
     * their whole proposal at the next wake (the stamp checks the same
     * header; a version of 0 is no request this build reads). */
    version = sql_request_version(m->forward.data->data, m->forward.data->len);
    if (version == 0) {
        answer(f, d, m->from, id, RAFT_CORRUPT, 0, 0);
        return;
    }
    if (f->ops.admit_format3 != NULL && version == 3) {
        int rc = f->ops.admit_format3(f->ops.data);
        if (rc != 0) {
            answer(f, d, m->from, id, rc, 0, 0);
            return;
        }
    }
    if (f->n_held == f->cap_held) {
        unsigned cap = f->cap_held ? f->cap_held * 2 : 64;
        h = realloc(f->held, cap * sizeof *h);
        if (h == NULL) {
            answer(f, d, m->from, id, RAFT_NOMEM, 0, 0);
            return;
        }
        f->held = h;
        f->cap_held = cap;
    }
    /* Held until the next wake: every request read before it goes into
     * one proposal. */
    if (f->n_held == 0) {
        raft_uv_node_wake(d);
    }
    h = &f->held[f->n_held++];
    h->from = m->from;
    h->request_id[0] = id[0];
    h->request_id[1] = id[1];
    h->data = raft_buf_ref(m->forward.data);
}

void forward_refuse_held(struct ext_forward *f, struct raft_uv_node *d,
                         int status)
{
    for (unsigned i = 0; i < f->n_held; i++) {
        struct held *h = &f->held[i];
        answer(f, d, h->from, h->request_id, status, 0, 0);
        raft_buf_unref(h->data);
    }
    f->n_held = 0;
}

void forward_propose_held(struct ext_forward *f, struct raft_uv_node *d)
{
    struct raft_buf **bufs;
    bool *fresh;
    raft_index index = 0;
    raft_term term = 0;
    unsigned n = f->n_held;
    int rc = RAFT_NOTLEADER;

    if (n == 0) {
        return;
    }
    if (can_propose(d)) {
        bufs = malloc(n * sizeof *bufs);
        fresh = malloc(n * sizeof *fresh);
        rc = RAFT_NOMEM;
        if (bufs != NULL) {
            /* A request held here alone (its frame was released) is
             * stamped in place: the leader copies no large request on
             * its loop. One that anything else holds is copied. */
            for (unsigned i = 0; i < n; i++) {
                bufs[i] = f->held[i].data;
                if (fresh != NULL) {
                    fresh[i] = raft_buf_holders(bufs[i]) == 1;
                }
            }
            rc = propose_batch(f->propose, d, bufs, fresh, n, &index, &term);
        }
        free(bufs);
        free(fresh);
    }
    for (unsigned i = 0; i < n; i++) {
        struct held *h = &f->held[i];
        if (rc == 0) {
            struct recent *r = &f->recent[f->next_recent];
            f->next_recent = (f->next_recent + 1) % EXT__FORWARD_RECENT;
            r->from = h->from;
            r->request_id[0] = h->request_id[0];
            r->request_id[1] = h->request_id[1];
            r->index = index + i;
            r->term = term;
        }
        answer(f, d, h->from, h->request_id, rc, rc == 0 ? index + i : 0,
               rc == 0 ? term : 0);
        raft_buf_unref(h->data);
    }
    f->n_held = 0;
}
