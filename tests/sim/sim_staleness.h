/* Bounded staleness in the randomized simulation (sim.h): every node runs
 * the staleness rule (ext/runtime/staleness_rule.h, max_staleness_ms=)
 * over its simulated core after every step, as ext/runtime/node.c runs it
 * over the driver's at every tick, and whenever the rule says a node is
 * fresh the simulation checks that it is: the node has applied every
 * entry that was committed anywhere (first handed out committed by some
 * node, cluster_committed) more than the bound plus SIM_STALE_SLACK_MS
 * before now. A failure goes through cluster_fail with the replay
 * command.
 *
 * The bound is drawn per run from the seed (not from the schedule's
 * PRNG, so that the schedules of the runs stay what they were) between
 * SIM_STALE_MIN_MS and SIM_STALE_MIN_MS + 500 ms (20 to 520: below and
 * above the election timeouts of 20 to 100 ms). The view is what
 * node.c builds: leading, the leader's commit index as heard
 * (raft_leader_commit), the last contact with the leader (a leader: with
 * a quorum of voters), whether the commit index is at an entry of the
 * current term (raft_commit_current), the node's applied index (the
 * entries it handed out: its state machine) and the clock (the cluster's
 * virtual ms). A crash loses the rule's memory, as a process's end does.
 * A node removed from the cluster is not told so here (the runtime's
 * status_removed is not simulated): the rule must find it stale by the
 * contact it no longer has. Runs without check-quorum (one in eight) are
 * not checked: a leader cut off in a minority then leads on, and its
 * followers hear it, while the majority elects another and commits; the
 * rule relies on check-quorum, which raftsql's nodes always run (seed
 * 28721 of the 5-node runs showed it).
 *
 * Header-only (static inline), as sim.h. */

#ifndef TEST_SIM_STALENESS_H
#define TEST_SIM_STALENESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "ext/runtime/staleness_rule.h"
#include "raft/raft.h"
#include "tests/lib/cluster.h"

/* The least bound drawn, ms of virtual time. */
#define SIM_STALE_MIN_MS 20

/* What the bound allows beyond max_staleness_ms (virtual ms): a core's
 * clock lags the cluster's by up to a tick (at most 5 ms), so a contact
 * it times is up to that much later than the cluster's clock says. No
 * transit time: a follower's contact is a round trip timed by its own
 * clock (the send time of its answer that the leader echoes), a
 * leader's the send time of the requests a quorum answered (wire
 * version 7, raft.h), so a delayed link counts against the bound. */
#define SIM_STALE_SLACK_MS 5

/* One entry first handed out committed: its index and when. */
struct sim_stale_commit {
    raft_index index;
    uint64_t at;
};

struct sim_staleness {
    struct cluster *c;
    unsigned n;
    unsigned max_ms; /* the bound of this run */
    struct ext_staleness_memory mem[CLUSTER_MAX_NODES];
    bool up[CLUSTER_MAX_NODES];
    struct sim_stale_commit *commits; /* in index order, n_commits */
    size_t n_commits;
    size_t cap;
    size_t due;          /* commits[0, due) are older than the
                                 bound plus the slack */
    raft_index last;     /* cluster_committed_last at the last step */
    uint64_t n_fresh;    /* node-steps judged fresh */
    uint64_t n_stale;    /* node-steps judged stale */
    uint64_t n_new_term; /* of these, for a commit index not current */
    bool off;            /* not checked: a run without check-quorum */
};

/* sim_staleness_new attaches the check to cluster @c for run @seed, off
 * when the run has no @check_quorum. Free with sim_staleness_free. */
static inline struct sim_staleness *sim_staleness_new(struct cluster *c,
                                                      uint64_t seed,
                                                      bool check_quorum)
{
    struct sim_staleness *ss = calloc(1, sizeof *ss);
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL + 0x57a1e;

    if (ss == NULL) {
        cluster_fail(c, "sim_staleness: out of memory");
    }
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
    ss->c = c;
    ss->n = cluster_n_nodes(c);
    ss->max_ms = SIM_STALE_MIN_MS + (unsigned)((z >> 17) % 501);
    ss->off = !check_quorum;
    return ss;
}

/* sim_staleness_record notes the entries first handed out committed
 * since the last step, at the time of this one. */
static inline void sim_staleness_record(struct sim_staleness *ss)
{
    raft_index last = cluster_committed_last(ss->c);
    uint64_t now = cluster_now(ss->c);

    while (ss->last < last) {
        if (ss->n_commits == ss->cap) {
            size_t cap = ss->cap == 0 ? 1024 : ss->cap * 2;
            struct sim_stale_commit *p = realloc(ss->commits, cap * sizeof *p);
            if (p == NULL) {
                cluster_fail(ss->c, "sim_staleness: out of memory");
            }
            ss->commits = p;
            ss->cap = cap;
        }
        ss->last++;
        ss->commits[ss->n_commits++] =
            (struct sim_stale_commit){.index = ss->last, .at = now};
    }
    while (ss->due < ss->n_commits &&
           ss->commits[ss->due].at + ss->max_ms + SIM_STALE_SLACK_MS < now) {
        ss->due++;
    }
}

/* sim_staleness_step judges every live node and checks each one found
 * fresh: the cluster's step hook calls it after every step. */
static inline void sim_staleness_step(struct sim_staleness *ss)
{
    uint64_t now = cluster_now(ss->c);
    raft_index need;
    raft_id id;

    if (ss->off) {
        return;
    }
    sim_staleness_record(ss);
    need = ss->due == 0 ? 0 : ss->commits[ss->due - 1].index;
    for (id = 1; id <= ss->n; id++) {
        struct raft *r =
            cluster_alive(ss->c, id) ? cluster_raft(ss->c, id) : NULL;
        struct ext_staleness_verdict out;
        struct ext_staleness_view v;

        if (r == NULL) {
            ss->up[id - 1] = false;
            continue;
        }
        if (!ss->up[id - 1]) {
            /* A start: the rule's memory is new, as node.c's is. */
            memset(&ss->mem[id - 1], 0, sizeof ss->mem[id - 1]);
            ss->up[id - 1] = true;
        }
        v = (struct ext_staleness_view){
            .leading = raft_role(r) == RAFT_LEADER,
            .leader_commit = raft_leader_commit(r),
            .applied = cluster_n_applied(ss->c, id),
            .commit_current = raft_commit_current(r),
            .wall_ms = now,
            .mono_ms = now,
        };
        v.contact_ms =
            v.leading ? raft_quorum_contact(r) : raft_leader_commit_contact(r);
        v.leader_quorum_ms = raft_leader_quorum_contact(r);
        v.leader_seen = raft_leader_id(r) != 0;
        staleness_judge(&ss->mem[id - 1], ss->max_ms, &v, &out);
        if (out.stale) {
            ss->n_stale++;
            if (out.leader_known && !v.commit_current) {
                ss->n_new_term++;
            }
            continue;
        }
        ss->n_fresh++;
        if (v.applied < need) {
            cluster_fail(ss->c,
                         "staleness: node %llu is fresh by the rule "
                         "(max_staleness_ms=%u, %s, term %llu, contact "
                         "%llu ms ago, leader's commit index %llu, commit "
                         "current %d) at t=%llu but applied %llu, and "
                         "entry %llu was committed at t=%llu, more than "
                         "the bound plus %u ms before",
                         (unsigned long long)id, ss->max_ms,
                         v.leading ? "leader" : "not leader",
                         (unsigned long long)raft_current_term(r),
                         (unsigned long long)v.contact_ms,
                         (unsigned long long)v.leader_commit,
                         (int)v.commit_current, (unsigned long long)now,
                         (unsigned long long)v.applied,
                         (unsigned long long)need,
                         (unsigned long long)ss->commits[ss->due - 1].at,
                         SIM_STALE_SLACK_MS);
        }
    }
}

/* sim_staleness_free frees @ss (NULL is ignored). */
static inline void sim_staleness_free(struct sim_staleness *ss)
{
    if (ss != NULL) {
        free(ss->commits);
        free(ss);
    }
}

#endif /* TEST_SIM_STALENESS_H */
