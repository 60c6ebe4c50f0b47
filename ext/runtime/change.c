/* Membership changes and leadership transfers (change.h).
 *
 * Happy path: change_submit parks the caller's request and wakes the loop;
 * on the leader the loop steps RAFT_EVENT_CHANGE (or TRANSFER) and keeps
 * the request pending with the entry's index and term; once the leader's
 * commit index reaches it in that same term the change is committed and
 * the caller is woken. On a follower the loop forwards the request to the
 * leader in a FORWARD frame whose payload is a change request (magic "RM",
 * change_codec.h) instead of a write request ("RQ"); the leader answers with a
 * FORWARD_RESULT only once the change committed (or failed).
 * Failure modes:
 *   - the leader refuses (busy, no such member, ...): the caller gets the
 *     error and, in the result's index field of a forwarded answer, the
 *     leader's reason (enum ext_change_why);
 *   - the leadership changes before the entry commits: outcome unknown
 *     (the new leader may keep the entry or not; raft_members tells);
 *   - no answer: the request is forwarded again under the same request
 *     id; the leader remembers the outcomes of the requests it took and
 *     does not step a request it has already taken twice; a refusal
 *     (busy, a change pending, ...) is not remembered: a repeat is
 *     weighed again (a JOIN is repeated until it is taken);
 *   - the deadline passes: outcome unknown once the request left this
 *     node, else not done.
 *
 * The request and answer formats are change_codec.h's.
 *
 * Automatic promotion: the leader promotes a learner whose auto_promote
 * mark is set (added by JOIN, or by raft_add without 'learner') once
 * raft_progress says it caught up (thesis §4.2.1), one change at a time.
 * The mark is in the configuration entry (raft/configuration.h), so a new
 * leader promotes the learners the old one had not; PROMOTE and DEMOTE
 * clear it. A joining node sends its JOIN until it is a member, no longer
 * (raft_demote and raft_add's 'learner' hold): change_join.c. */

#include "change.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../raft/configuration.h"
#include "exec.h"
#include "leader_call.h"
#include "lease_core.h"

/* Requests a leader keeps pending, answers it remembers, relays a
 * follower keeps. */
#define EXT__PENDING_MAX 8
#define EXT__RECENT_MAX 16
#define EXT__RELAY_MAX 8

/* A forward unanswered for this long is sent again, ms. */
#define EXT__CHANGE_RESEND_MS 1000

/* The caller waiting here (on its stack): one call to the leader
 * (leader_call.h), QUEUED until a leader is known, SENT while forwarded
 * and unanswered, TAKEN once stepped here (pending on this leader) or
 * once answered while the member view lacks its configuration entry,
 * DONE with its result set. Invariant: touched under mu only, and never
 * after the caller cleared c->call. */
struct call {
    struct ext_change_request req;   /* what it asks */
    struct ext_leader_call call;     /* where it stands, its wait and its
                                        request id */
    bool answered;                   /* done (result set), waiting for the
                                        member view to show it */
    raft_index view_index;           /* when answered: the configuration
                                        entry the view must hold */
    uint64_t view_by;                /* when answered: loop clock after
                                        which it is answered anyway */
    struct ext_change_result result; /* set when answered or DONE */
};

/* A forward is sent again once unanswered for EXT__CHANGE_RESEND_MS,
 * whoever leads meanwhile (a change already stepped by the old leader
 * is answered by it, lost or not). */
static const struct ext_leader_call_policy resend = {
    .retry_ms = EXT__CHANGE_RESEND_MS,
    .follow_leader = false,
};

/* A request stepped by this leader, waiting to be done. */
struct pending {
    raft_id from;     /* who to answer: this server, a peer, or 0 */
    uint64_t rid[2];  /* its request id */
    uint8_t op;       /* enum ext_change_op */
    raft_index index; /* the configuration entry (changes) */
    raft_term term;   /* the term it was appended in */
    uint64_t since;   /* loop clock when stepped */
};

/* A change this leader keeps until the write lease in force ends
 * (LEASE_CORE_CHANGE_WAIT_MS at most). */
struct deferred {
    raft_id from;                /* who to answer, as struct pending */
    uint64_t rid[2];             /* its request id */
    struct ext_change_request q; /* the request */
    uint64_t since;              /* loop clock when it first came */
};

/* An answer given, kept to answer a repeated request alike. */
struct recent {
    uint64_t rid[2]; /* the request answered */
    int status;      /* its status */
    uint64_t index;  /* index, leader id, or reason */
};

/* A request a follower passed on to its leader for a peer. */
struct relay {
    uint64_t rid[2]; /* the request relayed */
    raft_id from;    /* the peer to pass the answer to, 0: slot free */
};

struct ext_change {
    raft_id self;                             /* this server */
    unsigned election_timeout_ms;             /* transfer and join pace */
    unsigned heartbeat_ms;                    /* promotion pace */
    unsigned election_ms;                     /* election_timeout_ms: a
                                                 learner silent this long
                                                 is not promoted */
    struct ext_member members[EXT_MAX_NODES]; /* cluster= addresses */
    unsigned n_members;                       /* entries of @members */
    struct raft_uv_node *driver;              /* set by change_attach */
    pthread_mutex_t mu;                 /* guards the fields marked (mu) */
    struct call *call;                  /* the waiting caller (mu) */
    struct ext_leader_call_table calls; /* its call, the one linked (mu) */
    uint64_t next_seq;                  /* (mu) */
    bool shutdown;                      /* (mu) */
    struct ext_member_row rows[RAFT_MAX_SERVERS]; /* member view (mu) */
    unsigned n_rows;                              /* (mu) */
    raft_index view_index; /* configuration index of the member view last
                              published (mu) */
    /* The loop thread's own. */
    struct pending pending[EXT__PENDING_MAX]; /* stepped, not done yet */
    unsigned n_pending;                       /* entries of @pending */
    struct recent recent[EXT__RECENT_MAX];    /* latest answers, a ring */
    unsigned recent_next;                     /* next slot of @recent */
    struct relay relay[EXT__RELAY_MAX];       /* relayed requests, a ring */
    unsigned relay_next;                      /* next slot of @relay */
    /* Changes waiting for the write lease in force to end. */
    struct deferred deferred[EXT__PENDING_MAX]; /* in arrival order */
    unsigned n_deferred;                        /* entries of @deferred */
    _Atomic unsigned n_deferred_view; /* @n_deferred for other threads */
    bool (*lease_held)(void *arg);    /* a write lease holds new entries
                                         back (change_set_lease_test) */
    void *lease_arg;                  /* for lease_held */
    uint64_t next_promote_at;         /* loop clock of the next promotion try */
    struct ext_change_join join;      /* this node's JOIN (join=) */
    bool join_refused; /* RAFTSQL_TEST_REFUSE_FIRST_JOIN done (test) */
};

/* ---- The leader's side (loop thread) ------------------------------------ */

static bool rid_eq(const uint64_t a[2], const uint64_t b[2])
{
    return a[0] == b[0] && a[1] == b[1];
}

/* finish_call sets the local caller's result, when @rid is still its:
 * @status and @index as a leader answers (change_codec.h), @leader the
 * leader that answered, at loop clock @now. A change done is answered
 * once the member view holds its configuration entry (read-your-writes:
 * raft_members shows it to the caller), an election timeout at most (a
 * follower may learn of the entry after the leader's answer, a removed
 * one never): until then it waits, answered (view_shown). */
static void finish_call(struct ext_change *c, const uint64_t rid[2], int status,
                        uint64_t index, raft_id leader, uint64_t now)
{
    pthread_mutex_lock(&c->mu);
    struct call *k = c->call;
    if (k != NULL && rid_eq(k->call.id, rid) &&
        k->call.state != EXT_CALL_DONE && !k->answered) {
        struct ext_change_result *r = &k->result;
        unsigned why = status != 0 ? (unsigned)index : 0;
        if (k->call.attempts > 1 &&
            change_codec_already(&k->req, status, index, leader)) {
            /* An earlier copy did it, and its answer was lost. */
            status = 0;
            index = k->req.op == EXT_CHANGE_TRANSFER ? leader : 0;
        }
        r->rc = status;
        r->unknown = status == RAFT_UNKNOWN;
        if (status == 0) {
            if (k->req.op == EXT_CHANGE_TRANSFER) {
                r->leader = (raft_id)index;
            } else {
                r->index = index;
            }
            snprintf(r->errmsg, sizeof r->errmsg, "ok");
        } else {
            change_codec_describe(&k->req, status, why, leader, r->errmsg,
                                  sizeof r->errmsg);
        }
        if (status == 0 && k->req.op != EXT_CHANGE_TRANSFER &&
            c->view_index < index) {
            k->answered = true;
            k->view_index = index;
            k->view_by = now + c->election_timeout_ms;
            leader_call_taken(&k->call);
            leader_call_extend(&k->call, c->election_timeout_ms);
        } else {
            leader_call_finish(&k->call);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

/* view_shown answers the local caller whose change is done once the
 * member view just published holds its configuration entry, or at its
 * view_by (loop clock @now). */
static void view_shown(struct ext_change *c, uint64_t now)
{
    pthread_mutex_lock(&c->mu);
    struct call *k = c->call;
    if (k != NULL && k->answered && k->call.state != EXT_CALL_DONE &&
        (c->view_index >= k->view_index || now >= k->view_by)) {
        leader_call_finish(&k->call);
    }
    pthread_mutex_unlock(&c->mu);
}

/* remember keeps the outcome (@status, @index) of request @rid of @from,
 * a request this leader stepped, to answer a repeat alike instead of
 * stepping it again (a change taken once is not taken twice). A refusal
 * (busy, not the leader, a change pending, ...) is never kept: nothing
 * was taken, and a repeat must be weighed again, or a JOIN refused once
 * while another change was pending would be refused for good. */
static void remember(struct ext_change *c, raft_id from, const uint64_t rid[2],
                     int status, uint64_t index)
{
    struct recent *rc = &c->recent[c->recent_next];

    if (from == 0) {
        return; /* the leader's own promotion: nobody repeats it */
    }
    c->recent_next = (c->recent_next + 1) % EXT__RECENT_MAX;
    rc->rid[0] = rid[0];
    rc->rid[1] = rid[1];
    rc->status = status;
    rc->index = index;
}

/* respond answers request @rid of @from: this server's caller, a peer
 * (FORWARD_RESULT), or nobody (0: the leader's own promotion). */
static void respond(struct ext_change *c, struct raft_uv_node *d, raft_id from,
                    const uint64_t rid[2], int status, uint64_t index)
{
    if (from == c->self) {
        finish_call(c, rid, status, index, raft_leader_id(raft_uv_node_core(d)),
                    raft_uv_node_now(d));
    } else if (from != 0) {
        struct raft_frame m = {.type = RAFT_FRAME_FORWARD_RESULT};
        m.from = c->self;
        m.to = from;
        m.forward_result.request_id[0] = rid[0];
        m.forward_result.request_id[1] = rid[1];
        m.forward_result.status = status;
        m.forward_result.index = index;
        raft_uv_node_send_frame(d, &m);
    }
}

/* explain gives the leader's reason for refusing @q with @rc. */
static unsigned explain(const struct ext_change *c, const struct raft *core,
                        const struct ext_change_request *q, int rc)
{
    const struct raft_configuration *conf = raft_current_configuration(core);
    uint8_t role = raft_configuration_role(conf, q->id);
    struct raft_progress_info pi;

    switch (rc) {
        case RAFT_BUSY:
            if (raft_transferee(core) != 0) {
                return EXT_WHY_TRANSFER;
            }
            if (q->op == EXT_CHANGE_PROMOTE &&
                raft_configuration_index(core) <= raft_commit_index(core) &&
                raft_progress(core, q->id, &pi) == 0 && pi.match_index == 0) {
                return EXT_WHY_UNREACHED;
            }
            return raft_configuration_index(core) > raft_commit_index(core)
                       ? EXT_WHY_PENDING
                       : EXT_WHY_NOT_READY;
        case RAFT_NOTFOUND:
            return q->op == EXT_CHANGE_TRANSFER && q->id == 0
                       ? EXT_WHY_NO_VOTER
                       : EXT_WHY_NOT_MEMBER;
        case RAFT_INVALID:
            switch (q->op) {
                case EXT_CHANGE_ADD:
                case EXT_CHANGE_JOIN:
                    if (role != 0) {
                        return EXT_WHY_MEMBER;
                    }
                    return conf->n >= RAFT_MAX_SERVERS ? EXT_WHY_FULL
                                                       : EXT_WHY_ADDRESS;
                case EXT_CHANGE_PROMOTE:
                    return EXT_WHY_VOTER;
                case EXT_CHANGE_DEMOTE:
                    return role == RAFT_LEARNER ? EXT_WHY_LEARNER
                                                : EXT_WHY_LAST_VOTER;
                case EXT_CHANGE_REMOVE:
                    return EXT_WHY_LAST_VOTER;
                case EXT_CHANGE_TRANSFER:
                    return q->id == c->self ? EXT_WHY_SELF : EXT_WHY_TO_LEARNER;
                default:
                    return EXT_WHY_NONE;
            }
        default:
            return EXT_WHY_NONE;
    }
}

/* lagging says why learner @id of leader @core's configuration cannot
 * be promoted yet (EXT_WHY_UNREACHED: it holds nothing; EXT_WHY_BEHIND:
 * raft_progress says it has not caught up, or it has not answered for
 * @silent_ms: a frozen learner's last round looks caught up), or
 * EXT_WHY_NONE (caught up, or no learner here: the core's step answers
 * then). */
static unsigned lagging(const struct raft *core, raft_id id, unsigned silent_ms)
{
    struct raft_progress_info pi;

    if (raft_role(core) != RAFT_LEADER ||
        raft_configuration_role(raft_current_configuration(core), id) !=
            RAFT_LEARNER ||
        raft_progress(core, id, &pi) != 0) {
        return EXT_WHY_NONE;
    }
    if (pi.match_index == 0) {
        return EXT_WHY_UNREACHED;
    }
    return pi.caught_up && pi.last_contact < silent_ms ? EXT_WHY_NONE
                                                       : EXT_WHY_BEHIND;
}

/* address_used says whether a member of @conf other than @id has
 * @address. */
static bool address_used(const struct raft_configuration *conf, raft_id id,
                         const char *address)
{
    for (unsigned i = 0; i < conf->n; i++) {
        if (conf->servers[i].id != id &&
            strcmp(conf->servers[i].address, address) == 0) {
            return true;
        }
    }
    return false;
}

/* refuse_join_once says whether test fault RAFTSQL_TEST_REFUSE_FIRST_JOIN
 * (RAFTSQL_TEST_FAULTS builds, set in the leader's environment) refuses
 * @q: the first JOIN this leader weighs is answered as if another change
 * were pending (the refusal a second joiner gets while the first joins),
 * once. Loop thread. */
static bool refuse_join_once(struct ext_change *c,
                             const struct ext_change_request *q)
{
#ifdef RAFTSQL_TEST_FAULTS
    if (q->op == EXT_CHANGE_JOIN && !c->join_refused &&
        getenv("RAFTSQL_TEST_REFUSE_FIRST_JOIN") != NULL) {
        c->join_refused = true;
        fprintf(stderr,
                "raftsql: TEST FAULT RAFTSQL_TEST_REFUSE_FIRST_JOIN: "
                "the JOIN of server %" PRIu64 " refused as busy\n",
                q->id);
        return true;
    }
#else
    (void)c;
    (void)q;
#endif
    return false;
}

/* defer keeps change @q of @from (request @rid, first seen at loop clock
 * @since) while a write lease this leader granted is in force, for
 * LEASE_CORE_CHANGE_WAIT_MS at most; returns whether it kept it (or
 * refused it: another change is kept already), false when it goes
 * now. */
static bool defer(struct ext_change *c, struct raft_uv_node *d, raft_id from,
                  const uint64_t rid[2], const struct ext_change_request *q,
                  uint64_t since)
{
    struct deferred *w;

    if (q->op == EXT_CHANGE_TRANSFER || c->lease_held == NULL ||
        raft_uv_node_now(d) >= since + LEASE_CORE_CHANGE_WAIT_MS ||
        !c->lease_held(c->lease_arg)) {
        return false;
    }
    if (c->n_deferred > 0) {
        /* The one kept first is appended first once the lease ends, and
         * the core takes one change at a time: this one would be
         * refused then, after its wait. Refused now (a repeat of a kept
         * one never comes here: step_request). */
        respond(c, d, from, rid, RAFT_BUSY, EXT_WHY_PENDING);
        return true;
    }
    w = &c->deferred[c->n_deferred++];
    w->from = from;
    w->rid[0] = rid[0];
    w->rid[1] = rid[1];
    w->q = *q;
    w->since = since;
    return true;
}

/* step_request steps @q on this leader for @from (first seen at loop
 * clock @since): a change or transfer is left pending (answered once
 * done), a refusal answered at once; a change that finds a write lease
 * in force waits for its end (defer, step_deferred). */
static void step_request(struct ext_change *c, struct raft_uv_node *d,
                         raft_id from, const uint64_t rid[2],
                         const struct ext_change_request *q, uint64_t since)
{
    const struct raft *core = raft_uv_node_core(d);
    struct raft_event ev;
    struct pending *p;
    raft_index index = 0;
    int rc;

    for (unsigned i = 0; i < c->n_pending; i++) {
        if (rid_eq(c->pending[i].rid, rid)) {
            return; /* a repeat: answered once done */
        }
    }
    for (unsigned i = 0; i < c->n_deferred; i++) {
        if (rid_eq(c->deferred[i].rid, rid) && rid[0] != 0) {
            return; /* a repeat: stepped once the lease ended */
        }
    }
    for (unsigned i = 0; i < EXT__RECENT_MAX; i++) {
        if (rid_eq(c->recent[i].rid, rid) && rid[0] != 0) {
            respond(c, d, from, rid, c->recent[i].status, c->recent[i].index);
            return;
        }
    }
    if (refuse_join_once(c, q)) {
        respond(c, d, from, rid, RAFT_BUSY, EXT_WHY_PENDING);
        return;
    }
    if (q->op == EXT_CHANGE_JOIN &&
        raft_configuration_role(raft_current_configuration(core), q->id) ==
            RAFT_LEARNER) {
        /* A learner asks (it started with join= after a raft_add, or
         * before its configuration reached it): it is in a configuration
         * already; left as it is (raft_add's 'learner' and raft_demote
         * hold). */
        respond(c, d, from, rid, 0, raft_configuration_index(core));
        return;
    }
    if (c->n_pending == EXT__PENDING_MAX) {
        respond(c, d, from, rid, RAFT_BUSY, EXT_WHY_PENDING);
        return;
    }
    if (q->op == EXT_CHANGE_PROMOTE && from != 0) {
        /* An operator's promotion waits for the learner to catch up, as
         * the leader's own does (thesis §4.2.1): a voter that lags counts
         * in every quorum and commits nothing. */
        unsigned why = lagging(core, q->id, c->election_ms);
        if (why != EXT_WHY_NONE) {
            respond(c, d, from, rid, RAFT_BUSY, why);
            return;
        }
    }
    if ((q->op == EXT_CHANGE_ADD || q->op == EXT_CHANGE_JOIN ||
         q->op == EXT_CHANGE_UPDATE) &&
        address_used(raft_current_configuration(core), q->id, q->address)) {
        respond(c, d, from, rid, RAFT_INVALID, EXT_WHY_ADDRESS_USED);
        return;
    }
    if (defer(c, d, from, rid, q, since)) {
        return;
    }
    memset(&ev, 0, sizeof ev);
    if (q->op == EXT_CHANGE_TRANSFER) {
        ev.type = RAFT_EVENT_TRANSFER;
        ev.transfer.id = q->id;
    } else {
        ev.type = RAFT_EVENT_CHANGE;
        ev.change.kind = q->op == EXT_CHANGE_JOIN ? RAFT_CHANGE_ADD : q->op;
        ev.change.id = q->id;
        ev.change.role = RAFT_LEARNER;
        ev.change.auto_promote =
            (q->op == EXT_CHANGE_ADD || q->op == EXT_CHANGE_JOIN) && !q->manual;
        if (q->op == EXT_CHANGE_ADD || q->op == EXT_CHANGE_JOIN ||
            q->op == EXT_CHANGE_UPDATE) {
            ev.change.address = q->address;
        }
    }
    rc = raft_uv_node_change(d, &ev, &index);
    core = raft_uv_node_core(d);
    if (rc != 0) {
        respond(c, d, from, rid, rc,
                rc == RAFT_NOTLEADER ? 0 : explain(c, core, q, rc));
        return;
    }
    p = &c->pending[c->n_pending++];
    p->from = from;
    p->rid[0] = rid[0];
    p->rid[1] = rid[1];
    p->op = q->op;
    p->index = index;
    p->term = raft_current_term(core);
    p->since = raft_uv_node_now(d);
}

/* late_look says whether test fault RAFTSQL_TEST_LATE_CHANGE_LOOK
 * (RAFTSQL_TEST_FAULTS builds, in the leader's environment) holds back
 * the look at pending change @p while the term it was appended in lasts:
 * as a loop that comes to its next tick only after the next election (a
 * leader that demoted itself hands over within a round trip of the
 * commit). Loop thread. */
static bool late_look(const struct raft *core, const struct pending *p)
{
#ifdef RAFTSQL_TEST_FAULTS
    return p->op != EXT_CHANGE_TRANSFER && raft_current_term(core) == p->term &&
           getenv("RAFTSQL_TEST_LATE_CHANGE_LOOK") != NULL;
#else
    (void)core;
    (void)p;
    return false;
#endif
}

/* check_pending answers every pending request that is done: a change whose
 * entry is committed (the commit index reached its index, and the entry
 * there is still of the term it was appended in: only that term's leader
 * wrote entries of that term, so it is ours, even when a new term began
 * before this look, as when a leader demoted itself and handed over), a
 * transfer once another server leads or it was abandoned. */
static void check_pending(struct ext_change *c, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    uint64_t now = raft_uv_node_now(d);
    unsigned i = 0;

    while (i < c->n_pending) {
        struct pending p = c->pending[i];
        int status = -1;
        uint64_t index = 0;
        raft_id leader = raft_leader_id(core);

        if (late_look(core, &p)) {
            i++;
            continue;
        }
        if (p.op != EXT_CHANGE_TRANSFER) {
            if (raft_commit_index(core) >= p.index &&
                (raft_current_term(core) == p.term ||
                 raft_term_at(core, p.index) == p.term)) {
                status = 0;
                index = p.index;
            } else if (raft_current_term(core) != p.term) {
                status = RAFT_UNKNOWN;
                index = EXT_WHY_LOST;
            }
        } else if (raft_role(core) != RAFT_LEADER) {
            if ((leader != 0 && leader != c->self) ||
                now - p.since > 2u * c->election_timeout_ms) {
                status = 0;
                index = leader != c->self ? leader : 0;
            }
        } else if (raft_transferee(core) == 0) {
            status = RAFT_TIMEOUT;
            index = EXT_WHY_ABANDONED;
        }
        if (status < 0) {
            i++;
            continue;
        }
        c->pending[i] = c->pending[--c->n_pending];
        remember(c, p.from, p.rid, status, index);
        respond(c, d, p.from, p.rid, status, index);
    }
}

/* promote_caught_up promotes one learner marked auto_promote that caught
 * up (thesis §4.2.1: its last catch-up round took under an election
 * timeout), at most once per heartbeat, when no change is pending. */
static void promote_caught_up(struct ext_change *c, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    const struct raft_configuration *conf;
    uint64_t now = raft_uv_node_now(d);

    if (raft_role(core) != RAFT_LEADER || now < c->next_promote_at ||
        c->n_pending > 0 || c->n_deferred > 0 || raft_transferee(core) != 0 ||
        raft_configuration_index(core) > raft_commit_index(core)) {
        return;
    }
    c->next_promote_at = now + c->heartbeat_ms;
    conf = raft_current_configuration(core);
    for (unsigned i = 0; i < conf->n; i++) {
        const struct raft_server *s = &conf->servers[i];
        struct raft_progress_info pi;
        if (s->role == RAFT_LEARNER && s->auto_promote &&
            raft_progress(core, s->id, &pi) == 0 && pi.caught_up) {
            struct ext_change_request q = {.op = EXT_CHANGE_PROMOTE,
                                           .id = s->id};
            uint64_t rid[2] = {0, 0};
            step_request(c, d, 0, rid, &q, now);
            return; /* one at a time; the next try sees the rest */
        }
    }
}

void change_on_request(struct ext_change *c, struct raft_uv_node *d,
                       const struct raft_frame *m)
{
    const struct raft *core = raft_uv_node_core(d);
    const uint64_t *rid = m->forward.request_id;
    struct ext_change_request q;
    int rc =
        change_codec_decode(m->forward.data->data, m->forward.data->len, &q);
    raft_id leader = raft_leader_id(core);

    if (rc != 0) {
        respond(c, d, m->from, rid, RAFT_CORRUPT, 0);
        return;
    }
    if (raft_role(core) == RAFT_LEADER) {
        step_request(c, d, m->from, rid, &q, raft_uv_node_now(d));
        atomic_store(&c->n_deferred_view, c->n_deferred);
        return;
    }
    if (leader != 0 && leader != m->from) {
        /* Relayed to the leader (a joining node may know only us); the
         * answer comes back through change_on_result. */
        struct raft_frame f = *m;
        f.from = c->self;
        f.to = leader;
        if (raft_uv_node_send_frame(d, &f) == 0) {
            struct relay *r = &c->relay[c->relay_next];
            c->relay_next = (c->relay_next + 1) % EXT__RELAY_MAX;
            r->rid[0] = rid[0];
            r->rid[1] = rid[1];
            r->from = m->from;
            return;
        }
    }
    respond(c, d, m->from, rid, RAFT_NOTLEADER, 0);
}

/* ---- The origin's side (loop thread) ------------------------------------ */

void change_on_result(struct ext_change *c, struct raft_uv_node *d,
                      const struct raft_frame *m)
{
    const struct raft_forward_result *r = &m->forward_result;

    if (change_join_answer(&c->join, d, m)) {
        return;
    }
    if (r->request_id[0] != c->self) {
        /* An answer to a request relayed for a peer. */
        for (unsigned i = 0; i < EXT__RELAY_MAX; i++) {
            struct relay *y = &c->relay[i];
            if (y->from != 0 && rid_eq(y->rid, r->request_id)) {
                struct raft_frame f = *m;
                f.from = c->self;
                f.to = y->from;
                y->from = 0;
                raft_uv_node_send_frame(d, &f);
                return;
            }
        }
        return;
    }
    pthread_mutex_lock(&c->mu);
    struct call *k = c->call;
    bool mine = k != NULL && rid_eq(k->call.id, r->request_id) &&
                k->call.state == EXT_CALL_SENT;
    int status = r->status;
    if (mine && status == RAFT_NOTLEADER) {
        leader_call_requeue(&k->call); /* retried once a leader is known */
        mine = false;
    }
    pthread_mutex_unlock(&c->mu);
    /* Any other answer (a stale one) needs nothing. */
    if (mine) {
        finish_call(c, r->request_id, status, r->index, m->from,
                    raft_uv_node_now(d));
    }
}

/* send_request sends change request @payload under id @rid to @to. */
static int send_request(struct ext_change *c, struct raft_uv_node *d,
                        raft_id to, const uint64_t rid[2],
                        struct raft_buf *payload)
{
    struct raft_frame m = {.type = RAFT_FRAME_FORWARD};
    m.from = c->self;
    m.to = to;
    m.forward.request_id[0] = rid[0];
    m.forward.request_id[1] = rid[1];
    m.forward.data = payload;
    return raft_uv_node_send_frame(d, &m);
}

/* dispatch steps (leader) or forwards (follower) the local request when it
 * waits for that. */
static void dispatch(struct ext_change *c, struct raft_uv_node *d)
{
    const struct raft *core = raft_uv_node_core(d);
    raft_id leader = raft_leader_id(core);
    bool leading = raft_role(core) == RAFT_LEADER;
    uint64_t now = raft_uv_node_now(d);
    struct ext_change_request q;
    struct raft_buf *payload = NULL;
    uint64_t rid[2];
    bool go;
    int rc;

    pthread_mutex_lock(&c->mu);
    struct call *k = c->call;
    /* Taken last: it marks the call SENT to @leader. */
    go = k != NULL && !c->shutdown && (leading || leader != 0) &&
         leader_call_take_due(&c->calls, NULL, &resend,
                              &(struct ext_leader_call_server){.id = leader},
                              now, NULL, NULL, NULL) != NULL;
    if (go) {
        q = k->req;
        rid[0] = k->call.id[0];
        rid[1] = k->call.id[1];
        if (leading) {
            leader_call_taken(&k->call); /* this leader's own request */
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (!go) {
        return;
    }
    if (leading) {
        step_request(c, d, c->self, rid, &q, now);
        return;
    }
    rc = change_codec_encode(&q, &payload);
    if (rc == 0) {
        rc = send_request(c, d, leader, rid, payload);
        raft_buf_unref(payload);
    }
    if (rc != 0) {
        pthread_mutex_lock(&c->mu);
        if (c->call != NULL && rid_eq(c->call->call.id, rid) &&
            c->call->call.state == EXT_CALL_SENT) {
            /* Retried; it counts as having left, as any send. */
            leader_call_requeue(&c->call->call);
        }
        pthread_mutex_unlock(&c->mu);
    }
}

/* publish copies the member view of the configuration in force, and
 * its index. */
static void publish(struct ext_change *c, struct raft_uv_node *d)
{
    struct ext_member_row rows[RAFT_MAX_SERVERS];
    unsigned n = member_view_build(d, c->self, c->members, c->n_members, rows);
    raft_index index = raft_configuration_index(raft_uv_node_core(d));

    pthread_mutex_lock(&c->mu);
    memcpy(c->rows, rows, n * sizeof *rows);
    c->n_rows = n;
    c->view_index = index;
    pthread_mutex_unlock(&c->mu);
}

/* step_deferred steps again the changes kept for the lease (each kept
 * again while it holds, up to its wait); once this node no longer leads,
 * its own caller's goes to the next leader and a peer's is answered
 * RAFT_NOTLEADER (it sends it again), none having been appended. */
static void step_deferred(struct ext_change *c, struct raft_uv_node *d)
{
    struct deferred w[EXT__PENDING_MAX];
    unsigned n = c->n_deferred;

    if (n == 0) {
        return;
    }
    memcpy(w, c->deferred, n * sizeof *w);
    c->n_deferred = 0;
    if (raft_role(raft_uv_node_core(d)) == RAFT_LEADER) {
        for (unsigned i = 0; i < n; i++) {
            step_request(c, d, w[i].from, w[i].rid, &w[i].q, w[i].since);
        }
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        if (w[i].from != c->self) {
            respond(c, d, w[i].from, w[i].rid, RAFT_NOTLEADER, 0);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        if (c->call != NULL && rid_eq(c->call->call.id, w[i].rid) &&
            c->call->call.state == EXT_CALL_TAKEN) {
            leader_call_requeue(&c->call->call);
        }
        pthread_mutex_unlock(&c->mu);
    }
}

bool change_waits_for_lease(const struct ext_change *c)
{
    return c->n_deferred > 0;
}

unsigned change_waiting_count(struct ext_change *c)
{
    return atomic_load(&c->n_deferred_view);
}

void change_on_wake(struct ext_change *c, struct raft_uv_node *d)
{
    step_deferred(c, d);
    dispatch(c, d);
    atomic_store(&c->n_deferred_view, c->n_deferred);
}

void change_on_tick(struct ext_change *c, struct raft_uv_node *d)
{
    step_deferred(c, d);
    dispatch(c, d);
    check_pending(c, d);
    promote_caught_up(c, d);
    change_join_tick(&c->join, d);
    publish(c, d);
    view_shown(c, raft_uv_node_now(d));
    atomic_store(&c->n_deferred_view, c->n_deferred);
}

/* ---- Callers (any thread) ----------------------------------------------- */

/* refuse fills @out with @rc and the message. */
static int refuse(struct ext_change_result *out, int rc, const char *msg)
{
    memset(out, 0, sizeof *out);
    out->rc = rc;
    snprintf(out->errmsg, sizeof out->errmsg, "%s", msg);
    return rc;
}

int change_submit(struct ext_change *c, const struct ext_change_request *req,
                  unsigned timeout_ms, const struct ext_exec_probe *probe,
                  struct ext_change_result *out)
{
    struct call k;
    uint64_t rid[2];
    bool left;
    int end;

    memset(&k, 0, sizeof k);
    k.req = *req;
    pthread_mutex_lock(&c->mu);
    if (c->shutdown) {
        pthread_mutex_unlock(&c->mu);
        return refuse(out, RAFT_SHUTDOWN,
                      "not done: the node is shutting down (raft_stop)");
    }
    if (c->call != NULL) {
        pthread_mutex_unlock(&c->mu);
        return refuse(out, RAFT_BUSY,
                      "not done: another membership change or leadership "
                      "transfer is pending on this node; one at a time");
    }
    rid[0] = c->self;
    rid[1] = EXT_CHANGE_SEQ_BIT | ++c->next_seq;
    if (leader_call_open(&c->calls, &k.call, &k, rid, timeout_ms,
                         EXT_EXEC_POLL_MS) != 0) {
        pthread_mutex_unlock(&c->mu);
        return refuse(out, RAFT_NOMEM, "not done: out of memory");
    }
    c->call = &k;
    pthread_mutex_unlock(&c->mu);
    raft_uv_node_wake(c->driver);

    pthread_mutex_lock(&c->mu);
    end = leader_call_wait(&k.call, &c->mu, probe);
    while (end == EXT_CALL_INTERRUPTED && k.answered) {
        /* Done: it waits for the view alone, bounded, as answered. */
        end = leader_call_wait(&k.call, &c->mu, NULL);
    }
    left = k.call.left_node;
    if (k.answered) {
        /* Done; the view holds it, or the deadline passed: the later of
         * the call's own and an election timeout after the answer
         * (leader_call_extend), which bounds the wait should the loop
         * stop before it publishes the view. */
    } else if (end == EXT_CALL_INTERRUPTED) {
        k.result.rc = RAFT_CANCELED;
        k.result.unknown = left;
        snprintf(k.result.errmsg, sizeof k.result.errmsg, "%s",
                 left ? "interrupted: outcome unknown; check raft_members"
                      : "interrupted: not done");
    } else if (end == EXT_CALL_SHUTDOWN) {
        k.result.rc = RAFT_SHUTDOWN;
        k.result.unknown = left;
        snprintf(k.result.errmsg, sizeof k.result.errmsg,
                 "%s: the node is shutting down (raft_stop)",
                 left ? "outcome unknown" : "not done");
    } else if (end == EXT_CALL_EXPIRED) {
        k.result.rc = left ? RAFT_UNKNOWN : RAFT_TIMEOUT;
        k.result.unknown = left;
        snprintf(k.result.errmsg, sizeof k.result.errmsg,
                 left ? "outcome unknown: not done within %u ms; "
                        "check raft_members"
                      : "not done: no leader reachable within %u ms",
                 timeout_ms);
    }
    c->call = NULL;
    leader_call_close(&c->calls, &k.call);
    pthread_mutex_unlock(&c->mu);
    *out = k.result;
    return out->rc;
}

void change_shutdown(struct ext_change *c)
{
    pthread_mutex_lock(&c->mu);
    c->shutdown = true;
    if (c->call != NULL && c->call->call.state != EXT_CALL_DONE &&
        !c->call->answered) {
        leader_call_shutdown(&c->call->call);
    }
    pthread_mutex_unlock(&c->mu);
}

void change_joining_why(struct ext_change *c, char *buf, size_t len)
{
    change_join_why(&c->join, buf, len);
}

unsigned change_members(struct ext_change *c, struct ext_member_row *rows,
                        unsigned max)
{
    unsigned n;
    pthread_mutex_lock(&c->mu);
    n = c->n_rows < max ? c->n_rows : max;
    memcpy(rows, c->rows, n * sizeof *rows);
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* ---- Life cycle ---------------------------------------------------------- */

int change_new(const struct ext_config *cfg, uint64_t first_seq,
               struct ext_change **out)
{
    struct ext_change *c = calloc(1, sizeof *c);
    if (c == NULL) {
        return RAFT_NOMEM;
    }
    c->self = cfg->id;
    c->next_seq = first_seq;
    c->election_timeout_ms = cfg->election_timeout_ms;
    c->heartbeat_ms = cfg->heartbeat_ms;
    c->election_ms = cfg->election_timeout_ms;
    memcpy(c->members, cfg->members, sizeof c->members);
    c->n_members = cfg->n_members;
    change_join_init(&c->join, cfg);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

void change_attach(struct ext_change *c, struct raft_uv_node *d)
{
    pthread_mutex_lock(&c->mu);
    c->driver = d;
    pthread_mutex_unlock(&c->mu);
}

void change_set_lease_test(struct ext_change *c, bool (*held)(void *arg),
                           void *arg)
{
    c->lease_held = held;
    c->lease_arg = arg;
}

void change_free(struct ext_change *c)
{
    if (c == NULL) {
        return;
    }
    change_join_close(&c->join);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
