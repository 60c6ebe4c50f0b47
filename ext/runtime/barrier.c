/* raft_barrier: linearizable reads through ReadIndex (barrier.h). Each
 * barrier's read is one call to the leader (leader_call.h): its wait,
 * its deadline and its resend to a new leader are that module's; the
 * wait for the applied index is a leader_call_poll. */

#include "barrier.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../raft/message.h"
#include "../../raft/uv_node.h"
#include "applier.h"
#include "exec.h"
#include "leader_call.h"

/* Barriers that may wait on one node at once; one more is "busy". */
#define EXT__BARRIER_SLOTS 256

/* Follower reads a leader holds at once; one more is answered BUSY. */
#define EXT__BARRIER_REMOTE 1024

/* The core fails a read after an election timeout of its clock; the
 * caller waits this much longer for that answer to come through the
 * loop (and, on a follower, back from the leader) before it gives up on
 * its own. */
#define EXT__BARRIER_SLACK_MS 300

/* How often a waiting caller looks at the applied index, and at most how
 * long it waits for its slot without looking at its probe and deadline
 * (the loop wakes it when the slot settles). */
#define EXT__BARRIER_POLL_MS 2
#define EXT__BARRIER_WAIT_MS 10

/* A follower's request not answered within this long goes again (a lost
 * frame: the connection broke). */
#define EXT__BARRIER_RESEND_MS 200

/* The core tags of reads registered for a follower have this bit; a
 * local barrier's tag is its own number. */
#define EXT__REMOTE_TAG (UINT64_C(1) << 63)

/* A barrier's read: one call to the leader (leader_call.h), QUEUED
 * until the loop routes it (or while no leader is known), SENT while a
 * READ_INDEX to server @leader waits for its answer, TAKEN once stepped
 * into this leader's core (which answers it, or fails it on a step
 * down), DONE once settled: confirmed at @index (@status 0) or failed. */
struct slot {
    bool used;                   /* a caller holds it */
    struct ext_leader_call call; /* where it stands, its wait, and its
                                    request id: 0 and its tag (unique on
                                    this node, never with
                                    EXT__REMOTE_TAG), in b->calls */
    raft_id leader;              /* SENT, DONE: the leader asked, 0 self */
    unsigned wire;               /* failed with RAFT_FORMAT: the leader's
                                    version */
    raft_index index;            /* confirmed: the read index */
    int status;                  /* DONE: 0 or the project error code */
};

/* A READ_INDEX goes again when unanswered for EXT__BARRIER_RESEND_MS (a
 * lost frame: the connection broke), or at once to a new leader; it
 * waits until the connection to the leader says its wire version. */
static const struct ext_leader_call_policy resend = {
    .retry_ms = EXT__BARRIER_RESEND_MS,
    .follow_leader = true,
    .wait_for_wire = true,
};

/* A follower's read held by this leader: core tag -> its asker. */
struct remote {
    uint64_t core_tag; /* 0 when free */
    raft_id from;      /* the follower */
    uint64_t tag;      /* the follower's tag */
};

struct ext_barrier {
    raft_id self;
    unsigned election_timeout_ms;
    unsigned apply_timeout_ms;
    pthread_mutex_t mu; /* guards slots, calls, next_tag, shutdown */
    struct slot slots[EXT__BARRIER_SLOTS];
    struct ext_leader_call_table calls; /* the calls of the used slots */
    uint64_t next_tag;
    bool shutdown;
    /* Loop thread only. */
    struct remote remote[EXT__BARRIER_REMOTE];
    uint64_t next_remote;
};

int barrier_new(raft_id self, unsigned election_timeout_ms,
                unsigned apply_timeout_ms, struct ext_barrier **out)
{
    struct ext_barrier *b = calloc(1, sizeof *b);
    if (b == NULL) {
        return RAFT_NOMEM;
    }
    if (pthread_mutex_init(&b->mu, NULL) != 0) {
        free(b);
        return RAFT_NOMEM;
    }
    b->self = self;
    b->election_timeout_ms = election_timeout_ms;
    b->apply_timeout_ms = apply_timeout_ms;
    b->next_tag = 1;
    b->next_remote = 1;
    *out = b;
    return 0;
}

void barrier_free(struct ext_barrier *b)
{
    if (b == NULL) {
        return;
    }
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void barrier_shutdown(struct ext_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    b->shutdown = true;
    for (struct slot *s = leader_call_next(&b->calls, NULL); s != NULL;
         s = leader_call_next(&b->calls, &s->call)) {
        if (s->call.state != EXT_CALL_DONE) {
            leader_call_shutdown(&s->call);
        }
    }
    pthread_mutex_unlock(&b->mu);
}

bool barrier_is_frame(const struct raft_frame *f)
{
    return f->type == RAFT_FRAME_READ_INDEX ||
           f->type == RAFT_FRAME_READ_INDEX_RESULT;
}

/* tag_of returns the tag of slot @s. */
static uint64_t tag_of(const struct slot *s)
{
    return s->call.id[1];
}

/* find_slot returns the slot of @tag whose call is in @state (enum
 * ext_leader_call_state), NULL when none (it was given up). Called with
 * mu held. */
static struct slot *find_slot(struct ext_barrier *b, uint64_t tag, int state)
{
    const uint64_t id[2] = {0, tag};
    struct slot *s = leader_call_find(&b->calls, id);

    return s != NULL && s->call.state == state ? s : NULL;
}

/* settle ends slot @s: confirmed at @index when @status is 0, else
 * failed, and wakes its caller. Called with mu held. */
static void settle(struct slot *s, int status, raft_index index)
{
    s->status = status;
    s->index = status == 0 ? index : 0;
    leader_call_finish(&s->call);
}

/* route sends slot @s, a follower's, just taken as due to go to its
 * leader as the core sees it now (leader_call_take_due marked it SENT,
 * its wire gate passed), or takes that send back. Called on the loop
 * thread with mu held (it steps nothing). */
static void route(struct ext_barrier *b, struct raft_uv_node *d, struct slot *s)
{
    raft_id leader = raft_leader_id(raft_uv_node_core(d));
    struct raft_frame f;

    if (leader == 0 || leader == b->self) {
        leader_call_unsend(&s->call); /* wait for one, until the deadline */
        return;
    }
    s->leader = leader;
    memset(&f, 0, sizeof f);
    f.type = RAFT_FRAME_READ_INDEX;
    f.from = b->self;
    f.to = leader;
    f.read_index.tag = tag_of(s);
    (void)raft_uv_node_send_frame(d, &f); /* a lost one goes again */
}

void barrier_on_loop(struct ext_barrier *b, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    uint64_t now = raft_uv_node_now(d);
    bool leads = raft_role(core) == RAFT_LEADER;
    struct ext_leader_call_server to;
    uint64_t step[EXT__BARRIER_SLOTS];
    unsigned n_step = 0;
    struct slot *s = NULL;
    bool refused;

    /* Leading, the server asked is this node's own core: no frame. */
    to.id = leads ? b->self : raft_leader_id(core);
    to.wire = leads        ? EXT_LEADER_CALL_WIRE_ANY
              : to.id != 0 ? raft_uv_node_peer_wire(d, to.id)
                           : 0;
    pthread_mutex_lock(&b->mu);
    /* Leading, every call not taken is due to this server (one sent to
     * another leader follows the leadership here): ask our own core. */
    while ((s = leader_call_take_due(&b->calls, s != NULL ? &s->call : NULL,
                                     &resend, &to, now, NULL, NULL,
                                     &refused)) != NULL) {
        if (refused) {
            /* The leader's wire has no READ_INDEX. */
            s->leader = to.id;
            s->wire = to.wire;
            settle(s, RAFT_FORMAT, 0);
        } else if (leads) {
            /* Marked first (SENT here, then TAKEN): the core may answer
             * within the step. */
            leader_call_taken(&s->call);
            s->leader = 0;
            step[n_step++] = tag_of(s);
        } else {
            route(b, d, s);
        }
    }
    pthread_mutex_unlock(&b->mu);
    /* Stepped without mu: the driver's read callback takes it. */
    for (unsigned i = 0; i < n_step; i++) {
        int rc = raft_uv_node_read_index(d, step[i]);
        if (rc != 0) {
            pthread_mutex_lock(&b->mu);
            s = find_slot(b, step[i], EXT_CALL_TAKEN);
            if (s != NULL) {
                settle(s, rc, 0);
            }
            pthread_mutex_unlock(&b->mu);
        }
    }
}

/* answer sends follower @to the outcome of its read @tag. */
static void answer(struct ext_barrier *b, struct raft_uv_node *d, raft_id to,
                   uint64_t tag, int status, raft_index index)
{
    struct raft_frame f;

    if (raft_uv_node_peer_wire(d, to) <
        raft_frame_type_wire_min(RAFT_FRAME_READ_INDEX_RESULT)) {
        return; /* it asked on a newer wire than we can answer on now */
    }
    memset(&f, 0, sizeof f);
    f.type = RAFT_FRAME_READ_INDEX_RESULT;
    f.from = b->self;
    f.to = to;
    f.read_index_result.tag = tag;
    f.read_index_result.status = status;
    f.read_index_result.index = status == 0 ? index : 0;
    (void)raft_uv_node_send_frame(d, &f); /* lost: it asks again */
}

void barrier_on_reads(struct ext_barrier *b, struct raft_uv_node *d,
                      const struct raft_read *reads, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct raft_read *r = &reads[i];
        if ((r->tag & EXT__REMOTE_TAG) != 0) {
            for (unsigned j = 0; j < EXT__BARRIER_REMOTE; j++) {
                struct remote *q = &b->remote[j];
                if (q->core_tag == r->tag) {
                    q->core_tag = 0;
                    answer(b, d, q->from, q->tag, r->status, r->index);
                    break;
                }
            }
            continue;
        }
        pthread_mutex_lock(&b->mu);
        struct slot *s = find_slot(b, r->tag, EXT_CALL_TAKEN);
        if (s != NULL) {
            settle(s, r->status, r->index);
        }
        pthread_mutex_unlock(&b->mu);
    }
}

/* on_request takes a follower's READ_INDEX. */
static void on_request(struct ext_barrier *b, struct raft_uv_node *d,
                       const struct raft_frame *f)
{
    struct remote *q = NULL;
    int rc;

    for (unsigned j = 0; j < EXT__BARRIER_REMOTE; j++) {
        if (b->remote[j].core_tag == 0) {
            q = &b->remote[j];
            break;
        }
    }
    if (q == NULL) {
        answer(b, d, f->from, f->read_index.tag, RAFT_BUSY, 0);
        return;
    }
    q->core_tag = EXT__REMOTE_TAG | b->next_remote++;
    q->from = f->from;
    q->tag = f->read_index.tag;
    rc = raft_uv_node_read_index(d, q->core_tag);
    if (rc != 0 && q->core_tag != 0) {
        q->core_tag = 0;
        answer(b, d, f->from, f->read_index.tag, rc, 0);
    }
}

void barrier_on_frame(struct ext_barrier *b, struct raft_uv_node *d,
                      const struct raft_frame *f)
{
    struct slot *s;

    if (f->type == RAFT_FRAME_READ_INDEX) {
        on_request(b, d, f);
        return;
    }
    pthread_mutex_lock(&b->mu);
    s = find_slot(b, f->read_index_result.tag, EXT_CALL_SENT);
    if (s != NULL && s->leader == f->from) {
        if (f->read_index_result.status == RAFT_NOTLEADER) {
            /* It stepped down: still SENT, the read goes to the next
             * leader once this node knows one (or again after
             * EXT__BARRIER_RESEND_MS), until the deadline. */
        } else {
            settle(s, f->read_index_result.status, f->read_index_result.index);
        }
    }
    pthread_mutex_unlock(&b->mu);
}

/* describe writes why slot @s (copied) failed into @msg and returns the
 * error to return. */
static int describe(const struct ext_barrier *b, const struct slot *s,
                    char *msg, size_t msg_len)
{
    unsigned long long leader = (unsigned long long)s->leader;
    unsigned t = b->election_timeout_ms;

    switch (s->status) {
        case RAFT_TIMEOUT:
            if (s->leader == 0) {
                snprintf(msg, msg_len,
                         "raft_barrier: no quorum confirmed this node still "
                         "leads within %u ms",
                         t);
            } else {
                snprintf(msg, msg_len,
                         "raft_barrier: no quorum confirmed that the leader "
                         "(server %llu) still leads within %u ms",
                         leader, t);
            }
            return RAFT_TIMEOUT;
        case RAFT_NOTLEADER:
            if (s->leader == 0) {
                snprintf(msg, msg_len,
                         "raft_barrier: no quorum confirmed this node still "
                         "leads: it stepped down first (within %u ms)",
                         t);
            } else {
                snprintf(msg, msg_len,
                         "raft_barrier: server %llu was no longer the leader "
                         "when it was asked; retry",
                         leader);
            }
            return RAFT_NOTLEADER;
        case RAFT_FORMAT:
            snprintf(msg, msg_len,
                     "raft_barrier: the leader (server %llu) speaks wire "
                     "version %u, which has no READ_INDEX (wire version %u "
                     "and later): upgrade it first",
                     leader, s->wire,
                     raft_frame_type_wire_min(RAFT_FRAME_READ_INDEX));
            return RAFT_FORMAT;
        case RAFT_BUSY:
            snprintf(msg, msg_len,
                     "raft_barrier: busy: the leader holds too many reads");
            return RAFT_BUSY;
        default:
            snprintf(msg, msg_len, "raft_barrier: %s",
                     raft_strerror(s->status));
            return s->status;
    }
}

/* An index to reach on this node's applier. */
struct reach {
    struct ext_applier *a;
    raft_index index;
};

/* reached says whether the applier of @data (struct reach) applied its
 * index, or is diverged (then it never will until a repair). */
static bool reached(void *data)
{
    const struct reach *r = data;
    return applier_applied(r->a) >= r->index || applier_diverged(r->a, NULL);
}

int barrier_wait(struct ext_barrier *b, struct raft_uv_node *d,
                 struct ext_applier *a, const struct ext_exec_probe *probe,
                 uint64_t *out_index, char *msg, size_t msg_len)
{
    struct timespec apply_by = leader_call_deadline(b->apply_timeout_ms);
    struct slot *s = NULL;
    struct slot copy;
    uint64_t id[2] = {0, 0};
    struct reach r;
    uint64_t applied;
    int end, state;

    pthread_mutex_lock(&b->mu);
    if (b->shutdown) {
        pthread_mutex_unlock(&b->mu);
        snprintf(msg, msg_len, "raft_barrier: the node is shutting down");
        return RAFT_SHUTDOWN;
    }
    for (unsigned i = 0; i < EXT__BARRIER_SLOTS; i++) {
        if (!b->slots[i].used) {
            s = &b->slots[i];
            break;
        }
    }
    if (s == NULL) {
        pthread_mutex_unlock(&b->mu);
        snprintf(msg, msg_len, "raft_barrier: busy: %d barriers wait already",
                 EXT__BARRIER_SLOTS);
        return RAFT_BUSY;
    }
    memset(s, 0, sizeof *s);
    id[1] = b->next_tag++;
    if (leader_call_open(&b->calls, &s->call, s, id,
                         b->election_timeout_ms + EXT__BARRIER_SLACK_MS,
                         EXT__BARRIER_WAIT_MS) != 0) {
        pthread_mutex_unlock(&b->mu);
        snprintf(msg, msg_len, "raft_barrier: out of memory");
        return RAFT_NOMEM;
    }
    leader_call_need_wire(&s->call,
                          raft_frame_type_wire_min(RAFT_FRAME_READ_INDEX));
    s->used = true;
    pthread_mutex_unlock(&b->mu);
    raft_uv_node_wake(d);

    /* Phase 1: the read index, confirmed. */
    pthread_mutex_lock(&b->mu);
    end = leader_call_wait(&s->call, &b->mu, probe);
    if (b->shutdown) {
        end = EXT_CALL_SHUTDOWN;
    }
    state = s->call.state;
    copy.leader = s->leader;
    copy.wire = s->wire;
    copy.index = s->index;
    copy.status = s->status;
    s->used = false;
    leader_call_close(&b->calls, &s->call);
    pthread_mutex_unlock(&b->mu);
    switch (end) {
        case EXT_CALL_INTERRUPTED:
            snprintf(msg, msg_len, "raft_barrier: interrupted");
            return RAFT_CANCELED;
        case EXT_CALL_SHUTDOWN:
            snprintf(msg, msg_len, "raft_barrier: the node is shutting down");
            return RAFT_SHUTDOWN;
        case EXT_CALL_EXPIRED:
            if (state == EXT_CALL_QUEUED) {
                snprintf(msg, msg_len,
                         "raft_barrier: no leader (none reachable within %u "
                         "ms)",
                         b->election_timeout_ms);
                return RAFT_NOTLEADER;
            }
            copy.status = RAFT_TIMEOUT;
            return describe(b, &copy, msg, msg_len);
        default:
            break;
    }
    if (copy.status == RAFT_SHUTDOWN) {
        snprintf(msg, msg_len, "raft_barrier: the node is shutting down");
        return RAFT_SHUTDOWN;
    }
    if (copy.status != 0) {
        return describe(b, &copy, msg, msg_len);
    }

    /* Phase 2: this node applied it (a follower at once, not at its
     * follower_apply_ms pace). */
    if (applier_applied(a) >= copy.index) {
        *out_index = copy.index;
        return 0;
    }
    r.a = a;
    r.index = copy.index;
    applier_hurry_begin(a);
    end = leader_call_poll(&apply_by, EXT__BARRIER_POLL_MS, probe, reached, &r);
    applier_hurry_end(a);
    applied = applier_applied(a);
    switch (end) {
        case EXT_CALL_ANSWERED:
            if (applied >= copy.index) {
                *out_index = copy.index;
                return 0;
            }
            /* Nothing applies until a repair: it would never come. */
            snprintf(msg, msg_len,
                     "raft_barrier: diverged replica: this node applied "
                     "%" PRIu64 " of read index %" PRIu64
                     " and applies "
                     "nothing until repaired",
                     applied, copy.index);
            return RAFT_DIVERGED;
        case EXT_CALL_INTERRUPTED:
            snprintf(msg, msg_len, "raft_barrier: interrupted");
            return RAFT_CANCELED;
        default:
            snprintf(msg, msg_len,
                     "raft_barrier: this node applied %" PRIu64
                     " of read index %" PRIu64 " within %u ms",
                     applied, copy.index, b->apply_timeout_ms);
            return RAFT_TIMEOUT;
    }
}
