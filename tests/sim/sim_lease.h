/* Write leases in the randomized simulation (sim.h): every node runs the
 * lease's real rules (ext/runtime/lease_core.h) over its simulated core,
 * as ext/runtime/lease.c runs them over the driver: its loop after every
 * step, LEASE and LEASE_RESULT frames encoded with the wire codec and
 * carried by the cluster's network (cluster_app_send: the same loss,
 * duplication, delay and partitions as the core's messages), changesets
 * proposed to the core. A simulated holder on a node (leader or
 * follower) asks for the lease, "reads" once its node applied the
 * grant's index G (the cluster's applied entries are the state machine),
 * thinks, then commits a changeset-like payload "lease:<id>:<G>:<term of
 * G>:<node>" or rolls back; some stall past lease_timeout_ms, some give
 * up waiting (interrupted), some never release; their nodes crash,
 * leaders change and links break under them.
 *
 * Checked after every step (a failure goes through cluster_fail, with
 * the replay command):
 *   (a) every committed changeset entry sits at index G + 1 of the grant
 *       its holder read, and the committed entry at G has the term the
 *       holder read there: no entry between the state a transaction read
 *       and its own entry;
 *   (b) a lease is granted only by the leader of its term, at most one
 *       lease of a term is in force, and a node's lease ids increase
 *       (across its restarts): they are unique;
 *   (c) a holder told "committed" has its entry committed at G + 1 (at
 *       the end, after the liveness phase), one told "not applied" never
 *       has it committed, anywhere, ever; no changeset commits twice;
 *   (d) no ordinary proposal is appended at a leader while a lease it
 *       granted is in force (the hold-back rule, lease_core_holds_back,
 *       checked against the grants and ends seen).
 * Liveness: after healing, a holder on a random node is granted the
 * lease and its commit goes through (sim_lease_liveness).
 *
 * Header-only (static inline), as sim.h. */

#ifndef TEST_SIM_LEASE_H
#define TEST_SIM_LEASE_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/runtime/lease_core.h"
#include "raft/err.h"
#include "raft/message.h"
#include "raft/raft.h"
#include "tests/lib/cluster.h"

/* What a simulated holder does once it has read. */
enum {
    SIM_PLAN_COMMIT = 0,   /* commit, then release */
    SIM_PLAN_ROLLBACK = 1, /* release without a commit */
    SIM_PLAN_STALL = 2,    /* commit only after lease_timeout_ms */
    SIM_PLAN_KEEP = 3,     /* commit, never release (the hold expires) */
};

/* Where a simulated holder stands. */
enum {
    SIM_H_IDLE = 0,       /* no transaction */
    SIM_H_ASKING = 1,     /* waits for the ask's answer */
    SIM_H_READING = 2,    /* granted: waits until its node applied G */
    SIM_H_THINKING = 3,   /* read: its transaction runs */
    SIM_H_COMMITTING = 4, /* waits for the commit's answer */
    SIM_H_BACKOFF = 5,    /* refused busy: asks again (a busy handler) */
};

/* A commit's outcome as its holder was told. */
enum {
    SIM_OUT_PENDING = 0, /* no answer yet, or never (its node crashed) */
    SIM_OUT_COMMITTED = 1,
    SIM_OUT_NOT_APPLIED = 2,
    SIM_OUT_UNKNOWN = 3,
};

/* One commit a holder made (its payload names the lease). */
struct sim_lease_rec {
    uint64_t id;  /* the lease */
    raft_index g; /* the grant's index the holder read */
    raft_id node; /* the holder's node */
    int outcome;  /* SIM_OUT_* */
    int rc;       /* the answer's code */
    bool seen;    /* committed (at g + 1, checked) */
};

/* A lease grant seen at its leader. */
struct sim_grant {
    uint64_t id;  /* the lease */
    raft_index g; /* the leader's last index at the grant */
};

/* Per term: who grants its leases and which one is in force. */
struct sim_term {
    raft_id granter;   /* the leader that granted in this term, 0 */
    uint64_t in_force; /* its lease in force, 0 */
};

/* One simulated holder (one per node: a node has one lease at most). */
struct sim_holder {
    int phase;             /* SIM_H_* */
    int plan;              /* SIM_PLAN_* */
    uint64_t id;           /* the lease (READING on) */
    raft_index g;          /* its grant's index */
    raft_term gterm;       /* the term of entry g, as read */
    uint64_t until;        /* the current wait's deadline */
    uint64_t think_until;  /* THINKING: when it commits or rolls back */
    uint64_t interrupt_at; /* COMMITTING: the caller gives up then, 0 */
    uint64_t busy_until;   /* asks again until then (busy timeout) */
    uint64_t retry_at;     /* BACKOFF: the next ask */
    unsigned rec;          /* COMMITTING: its record */
    bool must;             /* liveness: its outcome is awaited */
    int last_rc;           /* the last answer (ask, commit) */
    int last_outcome;      /* SIM_OUT_* of its last commit */
};

/* One node's lease runtime. */
struct sim_lease_node {
    bool up;                /* its core runs (cluster_alive) */
    struct lease_core core; /* the lease's state (valid when up) */
    struct sim_holder h;    /* its holder */
    uint64_t force_id;      /* the lease it granted in force, 0 */
    uint64_t last_grant;    /* its last grant's id (over its restarts) */
};

/* Counters. */
struct sim_lease_stats {
    uint64_t n_asks;      /* holders started */
    uint64_t n_grants;    /* leases granted (at leaders) */
    uint64_t n_commits;   /* commits answered committed */
    uint64_t n_refused;   /* commits answered not applied */
    uint64_t n_unknown;   /* commits answered outcome unknown */
    uint64_t n_frames;    /* lease frames sent */
    uint64_t n_held_back; /* ordinary proposals held back */
};

/* The leases of one simulated cluster. */
struct sim_lease {
    struct cluster *c;   /* the cluster */
    unsigned n;          /* its nodes */
    uint64_t rng;        /* the holders' own PRNG */
    unsigned timeout_ms; /* lease_timeout_ms */
    unsigned exec_ms;    /* exec_timeout_ms */
    unsigned wire;       /* the wire version every peer speaks */
    bool starting;       /* new holders may start */
    bool trace;          /* SIM_LEASE_TRACE: print holders */
    struct sim_lease_node nodes[CLUSTER_MAX_NODES]; /* by id - 1 */
    struct sim_lease_rec *recs;                     /* commits made */
    unsigned n_recs;                                /* count */
    unsigned cap_recs;                              /* allocated */
    struct sim_grant *grants;                       /* grants seen */
    unsigned n_grants;                              /* count */
    unsigned cap_grants;                            /* allocated */
    struct sim_term *terms;                         /* by term */
    size_t n_terms;                                 /* allocated */
    raft_index scanned;           /* committed entries checked */
    uint64_t next_holder;         /* holder tokens */
    struct sim_lease_stats stats; /* counters */
};

/* sim_lease_rng: splitmix64 over @state (as sim_rng). */
static inline uint64_t sim_lease_rng(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* sim_lease_trace prints one line of a holder's story when
 * SIM_LEASE_TRACE is set (replays). */
static inline void sim_lease_trace(const struct sim_lease *sl, raft_id id,
                                   const char *what, int rc, const char *why)
{
    if (!sl->trace) {
        return;
    }
    fprintf(stderr, "lease t=%llu node %llu: %s: %s%s%s\n",
            (unsigned long long)cluster_now(sl->c), (unsigned long long)id,
            what, raft_strerror(rc), why != NULL ? ": " : "",
            why != NULL ? why : "");
}

/* sim_lease_peer_wire: every simulated peer speaks this build's wire. */
static inline unsigned sim_lease_peer_wire(void *arg, raft_id id)
{
    const struct sim_lease *sl = arg;
    (void)id;
    return sl->wire;
}

/* sim_lease_gate: every member takes changeset entries. */
static inline int sim_lease_gate(void *arg, char *why, size_t why_len)
{
    (void)arg;
    (void)why;
    (void)why_len;
    return 0;
}

/* sim_lease_env fills @env with live node @id's core as it is now. */
static inline void sim_lease_env(struct sim_lease *sl, raft_id id,
                                 struct lease_core_env *env)
{
    struct raft *r = cluster_raft(sl->c, id);

    memset(env, 0, sizeof *env);
    env->now_ms = cluster_now(sl->c);
    env->leading = raft_role(r) == RAFT_LEADER && raft_term_durable(r);
    env->term = raft_current_term(r);
    env->leader = raft_leader_id(r);
    env->last_index = raft_last_index(r);
    env->commit_index = raft_commit_index(r);
    env->peer_wire = sim_lease_peer_wire;
    env->gate = sim_lease_gate;
    env->arg = sl;
}

/* sim_lease_term returns the record of term @t, grown as needed. */
static inline struct sim_term *sim_lease_term(struct sim_lease *sl, raft_term t)
{
    if (t >= sl->n_terms) {
        size_t n = sl->n_terms ? sl->n_terms : 64;
        while (n <= t) {
            n *= 2;
        }
        sl->terms = realloc(sl->terms, n * sizeof *sl->terms);
        if (sl->terms == NULL) {
            cluster_fail(sl->c, "sim_lease: out of memory");
        }
        memset(sl->terms + sl->n_terms, 0,
               (n - sl->n_terms) * sizeof *sl->terms);
        sl->n_terms = n;
    }
    return &sl->terms[t];
}

/* sim_lease_grant_of returns the grant of lease @id, NULL if none seen. */
static inline const struct sim_grant *sim_lease_grant_of(
    const struct sim_lease *sl, uint64_t id)
{
    unsigned i;

    for (i = sl->n_grants; i > 0; i--) {
        if (sl->grants[i - 1].id == id) {
            return &sl->grants[i - 1];
        }
    }
    return NULL;
}

/* sim_lease_observe notes node @id's grants and their ends after a call
 * on its lease, and checks (b). */
static inline void sim_lease_observe(struct sim_lease *sl, raft_id id)
{
    struct sim_lease_node *n = &sl->nodes[id - 1];
    const struct lease_core *lc = &n->core;
    uint64_t now_force =
        lc->state == LEASE_GRANTED && lc->granted_by == id ? lc->id : 0;
    struct raft *r = cluster_raft(sl->c, id);
    struct sim_term *t;

    if (n->force_id != 0 && n->force_id != now_force) {
        if (sl->trace) {
            fprintf(stderr,
                    "lease t=%llu node %llu: lease %" PRIu64 " ends: %s\n",
                    (unsigned long long)cluster_now(sl->c),
                    (unsigned long long)id, n->force_id, lc->ended_why);
        }
        t = sim_lease_term(sl, n->force_id >> 32);
        if (t->in_force == n->force_id) {
            t->in_force = 0;
        }
    }
    if (now_force != 0 && now_force != n->force_id) {
        raft_term term = now_force >> 32;
        if (sl->trace) {
            fprintf(stderr,
                    "lease t=%llu node %llu: grants lease %" PRIu64
                    " at %llu to node %llu\n",
                    (unsigned long long)cluster_now(sl->c),
                    (unsigned long long)id, now_force,
                    (unsigned long long)lc->grant_index,
                    (unsigned long long)lc->holder_server);
        }
        t = sim_lease_term(sl, term);
        if (raft_role(r) != RAFT_LEADER || raft_current_term(r) != term ||
            !raft_term_durable(r)) {
            cluster_fail(sl->c,
                         "lease %" PRIu64
                         " granted by node %llu, which "
                         "does not lead term %llu, durable",
                         now_force, (unsigned long long)id,
                         (unsigned long long)term);
        }
        if (t->granter != 0 && t->granter != id) {
            cluster_fail(sl->c,
                         "lease %" PRIu64
                         " granted by node %llu in term "
                         "%llu, whose leases node %llu grants",
                         now_force, (unsigned long long)id,
                         (unsigned long long)term,
                         (unsigned long long)t->granter);
        }
        if (t->in_force != 0) {
            cluster_fail(sl->c,
                         "two leases in force in term %llu: %" PRIu64
                         " and %" PRIu64,
                         (unsigned long long)term, t->in_force, now_force);
        }
        if (now_force <= n->last_grant) {
            cluster_fail(sl->c,
                         "node %llu granted lease %" PRIu64
                         " after "
                         "lease %" PRIu64 ": ids must increase",
                         (unsigned long long)id, now_force, n->last_grant);
        }
        t->granter = id;
        t->in_force = now_force;
        n->last_grant = now_force;
        if (sl->n_grants == sl->cap_grants) {
            sl->cap_grants = sl->cap_grants ? sl->cap_grants * 2 : 64;
            sl->grants =
                realloc(sl->grants, sl->cap_grants * sizeof *sl->grants);
            if (sl->grants == NULL) {
                cluster_fail(sl->c, "sim_lease: out of memory");
            }
        }
        sl->grants[sl->n_grants].id = now_force;
        sl->grants[sl->n_grants].g = lc->grant_index;
        sl->n_grants++;
        sl->stats.n_grants++;
    }
    n->force_id = now_force;
}

/* sim_lease_send encodes frame @f with the wire codec and puts it on the
 * cluster's network. */
static inline void sim_lease_send(struct sim_lease *sl,
                                  const struct raft_frame *f)
{
    size_t len = raft_frame_encoded_len(f);
    unsigned char *buf = malloc(len > 0 ? len : 1);
    int rc;

    if (buf == NULL) {
        cluster_fail(sl->c, "sim_lease: out of memory");
    }
    rc = raft_frame_encode(f, buf, len);
    if (rc != 0) {
        cluster_fail(sl->c, "lease frame %u from %llu: encode: %s", f->type,
                     (unsigned long long)f->from, raft_strerror(rc));
    }
    cluster_app_send(sl->c, f->from, f->to, buf, len);
    sl->stats.n_frames++;
    free(buf);
}

/* sim_lease_carry does what a call on node @id's lease handed back in
 * @out but its proposal (the applier's hold has no simulated applier:
 * the holder reads the cluster's applied entries), then observes. */
static inline void sim_lease_carry(struct sim_lease *sl, raft_id id,
                                   const struct lease_core_out *out)
{
    unsigned i;

    for (i = 0; i < out->n_send; i++) {
        sim_lease_send(sl, &out->send[i]);
    }
    if (out->hold && out->hold_from != sl->nodes[id - 1].core.grant_index + 1) {
        cluster_fail(sl->c,
                     "node %llu holds its applier from %llu, not "
                     "above its grant's index %llu",
                     (unsigned long long)id, (unsigned long long)out->hold_from,
                     (unsigned long long)sl->nodes[id - 1].core.grant_index);
    }
    sim_lease_observe(sl, id);
}

/* sim_lease_loop runs node @id's lease loop, as lease_on_loop does: the
 * loop, a proposal of the changeset it hands back, the loop's end. */
static inline void sim_lease_loop(struct sim_lease *sl, raft_id id)
{
    struct sim_lease_node *n = &sl->nodes[id - 1];
    struct lease_core_env env;
    struct lease_core_out out;

    if (!n->up || !lease_core_active(&n->core)) {
        return;
    }
    sim_lease_env(sl, id, &env);
    lease_core_out_init(&out);
    lease_core_loop(&n->core, &env, &out);
    sim_lease_carry(sl, id, &out);
    if (out.propose != NULL) {
        struct raft_buf *buf = out.propose;
        uint64_t seq = out.propose_seq;
        struct raft *r = cluster_raft(sl->c, id);
        raft_index index = 0;
        raft_term term = 0;
        int rc = cluster_propose(sl->c, id, buf->data, buf->len);

        raft_buf_unref(buf);
        if (rc == 0) {
            index = raft_last_index(r);
            term = raft_current_term(r);
        }
        sim_lease_env(sl, id, &env);
        lease_core_out_init(&out);
        lease_core_proposed(&n->core, &env, seq, rc, index, term, &out);
        sim_lease_carry(sl, id, &out);
    }
    sim_lease_env(sl, id, &env);
    lease_core_out_init(&out);
    lease_core_loop_end(&n->core, &env, &out);
    sim_lease_carry(sl, id, &out);
}

/* sim_lease_is_payload says whether @len bytes at @p are a simulated
 * changeset. */
static inline bool sim_lease_is_payload(const void *p, size_t len)
{
    return p != NULL && len > 6 && memcmp(p, "lease:", 6) == 0;
}

/* sim_lease_frames hands the lease frames delivered to their nodes, as
 * lease_on_frame does. */
static inline void sim_lease_frames(struct sim_lease *sl)
{
    raft_id from;
    raft_id to;
    void *data;
    size_t len;

    while (cluster_app_next(sl->c, &from, &to, &data, &len)) {
        struct sim_lease_node *n = &sl->nodes[to - 1];
        struct lease_core_env env;
        struct lease_core_out out;
        struct raft_frame f;
        bool ok = false;
        bool now;
        int rc;

        rc = raft_frame_decode((unsigned char *)data + RAFT_FRAME_HEADER,
                               len - RAFT_FRAME_HEADER, &f, NULL, 0);
        free(data);
        if (rc != 0 ||
            (f.type != RAFT_FRAME_LEASE && f.type != RAFT_FRAME_LEASE_RESULT) ||
            f.from != from || f.to != to) {
            cluster_fail(sl->c,
                         "a lease frame from %llu to %llu did not "
                         "decode as one (%s)",
                         (unsigned long long)from, (unsigned long long)to,
                         raft_strerror(rc));
        }
        if (n->up && cluster_alive(sl->c, to)) {
            if (f.type == RAFT_FRAME_LEASE && f.lease.op == RAFT_LEASE_COMMIT &&
                f.lease.data != NULL) {
                ok =
                    sim_lease_is_payload(f.lease.data->data, f.lease.data->len);
            }
            sim_lease_env(sl, to, &env);
            lease_core_out_init(&out);
            now = lease_core_frame(&n->core, &env, &f, ok, &out);
            sim_lease_carry(sl, to, &out);
            if (now) {
                sim_lease_loop(sl, to);
            }
        }
        raft_frame_release(&f);
    }
}

/* sim_lease_rec_new records a commit of lease @id read at @g on node
 * @node, returning its slot. */
static inline unsigned sim_lease_rec_new(struct sim_lease *sl, uint64_t id,
                                         raft_index g, raft_id node)
{
    struct sim_lease_rec *r;

    if (sl->n_recs == sl->cap_recs) {
        sl->cap_recs = sl->cap_recs ? sl->cap_recs * 2 : 64;
        sl->recs = realloc(sl->recs, sl->cap_recs * sizeof *sl->recs);
        if (sl->recs == NULL) {
            cluster_fail(sl->c, "sim_lease: out of memory");
        }
    }
    r = &sl->recs[sl->n_recs];
    memset(r, 0, sizeof *r);
    r->id = id;
    r->g = g;
    r->node = node;
    return sl->n_recs++;
}

/* sim_lease_rec_of returns the record of lease @id's commit, NULL. */
static inline struct sim_lease_rec *sim_lease_rec_of(struct sim_lease *sl,
                                                     uint64_t id)
{
    unsigned i;

    for (i = sl->n_recs; i > 0; i--) {
        if (sl->recs[i - 1].id == id) {
            return &sl->recs[i - 1];
        }
    }
    return NULL;
}

/* sim_lease_told notes the answer @rc to holder @h's commit, and checks
 * (c) against what committed so far. */
static inline void sim_lease_told(struct sim_lease *sl, struct sim_holder *h,
                                  int rc, raft_index index)
{
    struct sim_lease_rec *r = &sl->recs[h->rec];

    r->rc = rc;
    if (rc == 0 && index != r->g + 1) {
        cluster_fail(sl->c,
                     "(c) lease %" PRIu64
                     ": its holder on node %llu was "
                     "told committed at %llu, not at its grant's %llu + 1",
                     r->id, (unsigned long long)r->node,
                     (unsigned long long)index, (unsigned long long)r->g);
    }
    if (rc == 0) {
        r->outcome = SIM_OUT_COMMITTED;
        sl->stats.n_commits++;
    } else if (rc == RAFT_UNKNOWN) {
        r->outcome = SIM_OUT_UNKNOWN;
        sl->stats.n_unknown++;
    } else {
        r->outcome = SIM_OUT_NOT_APPLIED;
        sl->stats.n_refused++;
        if (r->seen) {
            cluster_fail(sl->c,
                         "lease %" PRIu64
                         ": its holder on node %llu was "
                         "told not applied (%s), but it committed at %llu",
                         r->id, (unsigned long long)r->node, raft_strerror(rc),
                         (unsigned long long)(r->g + 1));
        }
    }
    h->last_rc = rc;
    h->last_outcome = r->outcome;
}

/* sim_lease_release releases holder @h's lease on node @id. */
static inline void sim_lease_release(struct sim_lease *sl, raft_id id,
                                     uint64_t lease)
{
    struct lease_core_out out;
    raft_index wait_for;

    lease_core_out_init(&out);
    lease_core_release(&sl->nodes[id - 1].core, lease, &wait_for, &out);
    sim_lease_carry(sl, id, &out);
}

/* sim_lease_ask asks for the lease for node @id's holder: ASKING, or
 * BACKOFF after a refusal while its busy timeout lasts, else IDLE. */
static inline void sim_lease_ask(struct sim_lease *sl, raft_id id)
{
    struct sim_lease_node *n = &sl->nodes[id - 1];
    struct sim_holder *h = &n->h;
    struct lease_core_out out;
    uint64_t now = cluster_now(sl->c);
    char why[256];
    int rc;

    lease_core_out_init(&out);
    rc = lease_core_ask(&n->core, ++sl->next_holder, true, now, why, sizeof why,
                        &out);
    sim_lease_carry(sl, id, &out);
    h->last_rc = rc;
    if (rc == 0) {
        h->phase = SIM_H_ASKING;
        h->until = now + sl->exec_ms;
        return;
    }
    sim_lease_trace(sl, id, "ask", rc, why);
    h->phase =
        rc == RAFT_BUSY && now < h->busy_until ? SIM_H_BACKOFF : SIM_H_IDLE;
    h->retry_at = now + 5 + sim_lease_rng(&sl->rng) % 20;
}

/* sim_lease_holder moves node @id's holder on by one step. */
static inline void sim_lease_holder(struct sim_lease *sl, raft_id id)
{
    struct sim_lease_node *n = &sl->nodes[id - 1];
    struct sim_holder *h = &n->h;
    struct lease_core_out out;
    uint64_t now = cluster_now(sl->c);
    char why[256];
    char p[96];
    int rc;

    switch (h->phase) {
        case SIM_H_ASKING:
            if (lease_core_asking(&n->core) && now < h->until) {
                return;
            }
            rc = lease_core_ask_end(&n->core, why, sizeof why, &h->id, &h->g);
            h->last_rc = rc;
            sim_lease_trace(sl, id, "ask", rc, rc != 0 ? why : NULL);
            if (rc != 0) {
                h->phase = rc == RAFT_BUSY && now < h->busy_until
                               ? SIM_H_BACKOFF
                               : SIM_H_IDLE;
                h->retry_at = now + 5 + sim_lease_rng(&sl->rng) % 20;
                return;
            }
            h->phase = SIM_H_READING;
            h->until = now + sl->exec_ms;
            return;
        case SIM_H_BACKOFF:
            if (now >= h->retry_at) {
                sim_lease_ask(sl, id);
            }
            return;
        case SIM_H_READING:
            if (cluster_n_applied(sl->c, id) >= h->g) {
                h->gterm =
                    h->g > 0
                        ? cluster_applied(sl->c, id, (unsigned)h->g - 1)->term
                        : 0;
                sim_lease_trace(sl, id, "read", 0, NULL);
                h->phase = SIM_H_THINKING;
                h->think_until = now + (h->plan == SIM_PLAN_STALL
                                            ? sl->timeout_ms + 1 +
                                                  sim_lease_rng(&sl->rng) % 50
                                            : sim_lease_rng(&sl->rng) % 30);
                return;
            }
            if (!lease_core_in_force(&n->core, h->id, why, sizeof why) ||
                now >= h->until) {
                sim_lease_trace(sl, id, "read", RAFT_BUSY, why);
                sim_lease_release(sl, id, h->id);
                h->last_rc = RAFT_BUSY;
                h->phase = SIM_H_IDLE;
            }
            return;
        case SIM_H_THINKING:
            if (now < h->think_until) {
                return;
            }
            if (h->plan == SIM_PLAN_ROLLBACK) {
                sim_lease_release(sl, id, h->id);
                h->phase = SIM_H_IDLE;
                return;
            }
            snprintf(p, sizeof p, "lease:%" PRIu64 ":%llu:%llu:%llu", h->id,
                     (unsigned long long)h->g, (unsigned long long)h->gterm,
                     (unsigned long long)id);
            h->rec = sim_lease_rec_new(sl, h->id, h->g, id);
            {
                struct raft_buf *buf = raft_buf_copy(p, strlen(p));
                bool in_force = !n->core.shutdown &&
                                lease_core_in_force(&n->core, h->id, NULL, 0);
                if (buf == NULL) {
                    cluster_fail(sl->c, "sim_lease: out of memory");
                }
                lease_core_out_init(&out);
                rc = lease_core_commit(&n->core, h->id, buf, why, sizeof why,
                                       &out);
                sim_lease_carry(sl, id, &out);
                if (rc != 0 && in_force) {
                    cluster_fail(sl->c,
                                 "lease %" PRIu64
                                 ": its holder on node %llu had its "
                                 "commit refused by its own node while "
                                 "the lease was in force there: %s",
                                 h->id, (unsigned long long)id, why);
                }
                if (rc != 0) {
                    raft_buf_unref(buf);
                    sim_lease_trace(sl, id, "commit", rc, why);
                    sim_lease_told(sl, h, rc, 0);
                    sim_lease_release(sl, id, h->id);
                    h->phase = SIM_H_IDLE;
                    return;
                }
            }
            h->phase = SIM_H_COMMITTING;
            h->until = now + sl->exec_ms;
            h->interrupt_at = sim_lease_rng(&sl->rng) % 50 == 0
                                  ? now + sim_lease_rng(&sl->rng) % 100
                                  : 0;
            return;
        case SIM_H_COMMITTING: {
            bool interrupted = h->interrupt_at != 0 && now >= h->interrupt_at &&
                               lease_core_commit_waiting(&n->core);
            if (lease_core_commit_waiting(&n->core) && now < h->until &&
                !interrupted) {
                return;
            }
            lease_core_out_init(&out);
            rc = lease_core_commit_end(&n->core, h->id, interrupted, now, why,
                                       sizeof why, &out);
            sim_lease_carry(sl, id, &out);
            sim_lease_trace(sl, id, "commit", rc, why);
            sim_lease_told(sl, h, rc, n->core.index);
            if (h->plan != SIM_PLAN_KEEP) {
                sim_lease_release(sl, id, h->id);
            }
            h->phase = SIM_H_IDLE;
            return;
        }
        default:
            return;
    }
}

/* sim_lease_start starts a transaction on node @id's holder (idle, node
 * up) with plan @plan, asking again while refused busy for up to 400
 * ms. Returns false when it could not ask. */
static inline bool sim_lease_start(struct sim_lease *sl, raft_id id, int plan)
{
    struct sim_lease_node *n = &sl->nodes[id - 1];

    if (!n->up || n->h.phase != SIM_H_IDLE) {
        return false;
    }
    sl->stats.n_asks++;
    memset(&n->h, 0, sizeof n->h);
    n->h.plan = plan;
    n->h.busy_until = cluster_now(sl->c) + sim_lease_rng(&sl->rng) % 400;
    sim_lease_ask(sl, id);
    return n->h.phase != SIM_H_IDLE;
}

/* sim_lease_random_start starts a random transaction on node @id, when
 * new ones may start. */
static inline void sim_lease_random_start(struct sim_lease *sl, raft_id id)
{
    uint64_t r = sim_lease_rng(&sl->rng) % 20;
    int plan = r < 14   ? SIM_PLAN_COMMIT
               : r < 16 ? SIM_PLAN_ROLLBACK
               : r < 18 ? SIM_PLAN_STALL
                        : SIM_PLAN_KEEP;

    if (sl->starting) {
        (void)sim_lease_start(sl, id, plan);
    }
}

/* sim_lease_fault breaks something under a lease, by @r (975..983 of
 * sim_run's draw): the node of a holder in a transaction (searched from
 * node @id) crashes (975..977) or is cut off (978..980); the leader
 * whose lease is in force is cut off (981..983). */
static inline void sim_lease_fault(struct sim_lease *sl, raft_id id, uint64_t r)
{
    raft_id j;

    if (r >= 981) {
        raft_id leader = cluster_leader(sl->c);
        if (leader != 0 && sl->nodes[leader - 1].force_id != 0) {
            cluster_isolate(sl->c, leader, false);
        }
        return;
    }
    for (j = 0; j < sl->n; j++) {
        raft_id d = 1 + (id - 1 + j) % sl->n;
        int phase = sl->nodes[d - 1].h.phase;
        if (sl->nodes[d - 1].up && phase >= SIM_H_READING) {
            if (r < 978) {
                cluster_crash(sl->c, d); /* the hook sees it */
            } else {
                cluster_isolate(sl->c, d, false);
            }
            return;
        }
    }
}

/* sim_lease_scan checks the entries committed since the last scan: (a),
 * (c) and no changeset twice. */
static inline void sim_lease_scan(struct sim_lease *sl)
{
    raft_index last = cluster_committed_last(sl->c);

    while (sl->scanned < last) {
        raft_index k = ++sl->scanned;
        const struct raft_entry *e = cluster_committed(sl->c, k);
        const struct raft_entry *ge;
        const struct sim_grant *gr;
        struct sim_lease_rec *r;
        unsigned long long g = 0, gterm = 0, node = 0;
        uint64_t id = 0;
        char text[96];
        size_t len;

        if (e == NULL || e->type != RAFT_ENTRY_NORMAL || e->data == NULL ||
            !sim_lease_is_payload(e->data->data, e->data->len)) {
            continue;
        }
        len = e->data->len < sizeof text - 1 ? e->data->len : sizeof text - 1;
        memcpy(text, e->data->data, len);
        text[len] = '\0';
        if (sscanf(text, "lease:%" SCNu64 ":%llu:%llu:%llu", &id, &g, &gterm,
                   &node) != 4) {
            cluster_fail(sl->c, "committed entry %llu: bad payload %s",
                         (unsigned long long)k, text);
        }
        if (k != g + 1) {
            cluster_fail(sl->c,
                         "(a) lease %" PRIu64
                         "'s changeset committed at "
                         "%llu, but its holder on node %llu read the state "
                         "at %llu",
                         id, (unsigned long long)k, node, g);
        }
        gr = sim_lease_grant_of(sl, id);
        if (gr == NULL || gr->g != g) {
            cluster_fail(sl->c,
                         "(a) lease %" PRIu64
                         " committed at %llu: its "
                         "holder read %llu, its leader granted it at %lld",
                         id, (unsigned long long)k, g,
                         gr == NULL ? -1LL : (long long)gr->g);
        }
        ge = g > 0 ? cluster_committed(sl->c, g) : NULL;
        if (ge != NULL && ge->term != gterm) {
            cluster_fail(sl->c,
                         "(a) lease %" PRIu64
                         " committed at %llu: its "
                         "holder read entry %llu of term %llu, but entry "
                         "%llu of term %llu committed",
                         id, (unsigned long long)k, g, gterm, g,
                         (unsigned long long)ge->term);
        }
        r = sim_lease_rec_of(sl, id);
        if (r == NULL) {
            cluster_fail(sl->c,
                         "lease %" PRIu64
                         " committed at %llu, but "
                         "no holder committed under it",
                         id, (unsigned long long)k);
        }
        if (r->seen) {
            cluster_fail(sl->c,
                         "lease %" PRIu64
                         "'s changeset committed "
                         "twice (again at %llu)",
                         id, (unsigned long long)k);
        }
        r->seen = true;
        if (r->outcome == SIM_OUT_NOT_APPLIED) {
            cluster_fail(sl->c,
                         "(c) lease %" PRIu64
                         "'s changeset committed at "
                         "%llu, but its holder on node %llu was told not "
                         "applied (%s)",
                         id, (unsigned long long)k, node, raft_strerror(r->rc));
        }
    }
}

/* sim_lease_hold_back_check checks (d) for an ordinary proposal just
 * appended by node @id. */
static inline void sim_lease_appended(struct sim_lease *sl, raft_id id)
{
    struct raft *r = cluster_raft(sl->c, id);
    struct sim_term *t = sim_lease_term(sl, raft_current_term(r));

    if (t->granter == id && t->in_force != 0) {
        cluster_fail(sl->c,
                     "(d) leader %llu appended an ordinary entry (%llu) "
                     "while its lease %" PRIu64 " was in force",
                     (unsigned long long)id,
                     (unsigned long long)raft_last_index(r), t->in_force);
    }
}

/* sim_lease_holds_back says whether node @id must propose no ordinary
 * request now (lease_holds_back, as node.c asks it). */
static inline bool sim_lease_holds_back(void *arg, raft_id id)
{
    struct sim_lease *sl = arg;
    return sl->nodes[id - 1].up &&
           lease_core_holds_back(&sl->nodes[id - 1].core);
}

/* sim_lease_propose proposes ordinary request @p (@len bytes) to node
 * @id unless a lease holds requests back there (then counted), and
 * checks (d). Returns raft_step's result, or RAFT_BUSY when held. */
static inline int sim_lease_propose(struct sim_lease *sl, raft_id id,
                                    const void *p, size_t len)
{
    int rc;

    if (sim_lease_holds_back(sl, id)) {
        sl->stats.n_held_back++;
        return RAFT_BUSY;
    }
    rc = cluster_propose(sl->c, id, p, len);
    if (rc == 0) {
        sim_lease_appended(sl, id);
    }
    return rc;
}

/* sim_lease_node_up starts or stops node @id's lease with its node: a
 * crash loses its state and its holder (whose commit stays unanswered);
 * a restart begins a new life (grants count from 1 again). */
static inline void sim_lease_node_up(struct sim_lease *sl, raft_id id)
{
    struct sim_lease_node *n = &sl->nodes[id - 1];
    bool alive = cluster_alive(sl->c, id);

    if (n->up == alive) {
        return;
    }
    sim_lease_trace(sl, id, alive ? "node up" : "node down", 0, NULL);
    if (!alive) {
        if (n->force_id != 0) {
            struct sim_term *t = sim_lease_term(sl, n->force_id >> 32);
            if (t->in_force == n->force_id) {
                t->in_force = 0;
            }
            n->force_id = 0;
        }
        lease_core_close(&n->core);
        memset(&n->h, 0, sizeof n->h);
        n->h.last_rc = RAFT_SHUTDOWN;
        n->up = false;
        return;
    }
    lease_core_init(&n->core, id, sl->timeout_ms, sl->exec_ms, 1u << 20);
    memset(&n->h, 0, sizeof n->h);
    n->up = true;
}

/* sim_lease_hook is the cluster's step hook (cluster_set_step_hook):
 * nodes crashed or restarted, frames delivered, every lease's loop,
 * every holder, then the committed entries' checks. */
static inline void sim_lease_hook(struct cluster *c, void *arg)
{
    struct sim_lease *sl = arg;
    raft_id id;

    (void)c;
    for (id = 1; id <= sl->n; id++) {
        sim_lease_node_up(sl, id);
    }
    sim_lease_frames(sl);
    for (id = 1; id <= sl->n; id++) {
        sim_lease_loop(sl, id);
    }
    for (id = 1; id <= sl->n; id++) {
        if (sl->nodes[id - 1].up) {
            sim_lease_holder(sl, id);
        }
    }
    sim_lease_scan(sl);
}

/* sim_lease_new attaches leases to cluster @c (its step hook): leases of
 * @timeout_ms, holders waiting @exec_ms (0: drawn from @x, as the
 * holders' PRNG is). Free with sim_lease_free. */
static inline struct sim_lease *sim_lease_new(struct cluster *c, uint64_t *x,
                                              unsigned timeout_ms,
                                              unsigned exec_ms)
{
    struct sim_lease *sl = calloc(1, sizeof *sl);
    unsigned lo;
    unsigned hi;
    raft_id id;

    if (sl == NULL) {
        cluster_fail(c, "sim_lease: out of memory");
    }
    sl->c = c;
    sl->n = cluster_n_nodes(c);
    sl->rng = sim_lease_rng(x);
    /* From leases shorter than an election to ones of many. */
    sl->timeout_ms = 30 + (unsigned)(sim_lease_rng(x) % 400);
    /* Below and above the 200 ms resend of a follower's calls. */
    sl->exec_ms = 100 + (unsigned)(sim_lease_rng(x) % 900);
    if (timeout_ms != 0) {
        sl->timeout_ms = timeout_ms;
    }
    if (exec_ms != 0) {
        sl->exec_ms = exec_ms;
    }
    raft_wire_versions_get(&lo, &hi);
    sl->wire = hi;
    sl->starting = true;
    sl->trace = getenv("SIM_LEASE_TRACE") != NULL;
    for (id = 1; id <= sl->n; id++) {
        sim_lease_node_up(sl, id);
    }
    cluster_set_step_hook(c, sim_lease_hook, sl);
    return sl;
}

/* sim_lease_all_seen: every commit told "committed" was handed out
 * committed by some node (the scan saw it). */
static inline bool sim_lease_all_seen(struct cluster *c, void *arg)
{
    const struct sim_lease *sl = arg;
    unsigned i;

    (void)c;
    for (i = 0; i < sl->n_recs; i++) {
        if (sl->recs[i].outcome == SIM_OUT_COMMITTED && !sl->recs[i].seen) {
            return false;
        }
    }
    return true;
}

/* sim_lease_check_end checks (c) at the end (healed, a stable leader):
 * within 3 s, every commit told "committed" is handed out committed (a
 * leader answers at its commit index, before it hands the entry out). */
static inline void sim_lease_check_end(struct sim_lease *sl)
{
    unsigned i;

    (void)cluster_run_until(sl->c, 3000, sim_lease_all_seen, sl);
    sim_lease_scan(sl);
    for (i = 0; i < sl->n_recs; i++) {
        const struct sim_lease_rec *r = &sl->recs[i];
        if (r->outcome == SIM_OUT_COMMITTED && !r->seen) {
            cluster_fail(sl->c,
                         "(c) lease %" PRIu64
                         ": its holder on node %llu "
                         "was told committed, but no entry %llu holds its "
                         "changeset",
                         r->id, (unsigned long long)r->node,
                         (unsigned long long)(r->g + 1));
        }
    }
}

/* sim_lease_done: node @arg's must-holder has its answer. */
static inline bool sim_lease_done(struct cluster *c, void *arg)
{
    const struct sim_holder *h = arg;
    (void)c;
    return h->phase == SIM_H_IDLE;
}

/* sim_lease_liveness, after sim_liveness (healed, every node up, a
 * stable leader): a holder on a random node gets the lease and its
 * commit goes through. A holder refused because an earlier lease is
 * still out (it ends within lease_timeout_ms) or a leader change tries
 * again, within a bounded virtual time. */
static inline void sim_lease_liveness(struct sim_lease *sl)
{
    uint64_t deadline = cluster_now(sl->c) + 20000;
    unsigned attempt;

    sl->starting = false;
    for (attempt = 0;; attempt++) {
        raft_id id = 1 + (raft_id)(sim_lease_rng(&sl->rng) % sl->n);
        struct sim_holder *h = &sl->nodes[id - 1].h;

        if (cluster_now(sl->c) >= deadline) {
            cluster_fail(sl->c,
                         "liveness: no lease commit in 20 s after healing "
                         "(%u attempts; the last on node %llu: %s)",
                         attempt, (unsigned long long)id,
                         raft_strerror(h->last_rc));
        }
        if (!cluster_run_until(sl->c, 2 * (uint64_t)sl->exec_ms + 1000,
                               sim_lease_done, h)) {
            cluster_fail(sl->c, "liveness: holder of node %llu stuck",
                         (unsigned long long)id);
        }
        if (!sim_lease_start(sl, id, SIM_PLAN_COMMIT)) {
            cluster_run(sl->c, 10);
            continue;
        }
        if (!cluster_run_until(sl->c, 3 * (uint64_t)sl->exec_ms + 1000,
                               sim_lease_done, h)) {
            cluster_fail(sl->c, "liveness: holder of node %llu stuck",
                         (unsigned long long)id);
        }
        if (h->last_rc == 0 && h->last_outcome == SIM_OUT_COMMITTED) {
            break;
        }
        cluster_run(sl->c, 10);
    }
}

/* sim_lease_free detaches the leases from their cluster and frees
 * them. */
static inline void sim_lease_free(struct sim_lease *sl)
{
    raft_id id;

    cluster_set_step_hook(sl->c, NULL, NULL);
    for (id = 1; id <= sl->n; id++) {
        if (sl->nodes[id - 1].up) {
            lease_core_close(&sl->nodes[id - 1].core);
        }
    }
    free(sl->recs);
    free(sl->grants);
    free(sl->terms);
    free(sl);
}

#endif /* TEST_SIM_LEASE_H */
