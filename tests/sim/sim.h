/* The randomized cluster simulation shared by tests/sim/test_*.c: one run
 * per seed of a 3- or 5-node cluster (tests/lib/cluster.h) under a random
 * schedule of message loss, duplication, delay and reordering, symmetric
 * and one-way partitions, crashes that lose what was not durable, restarts
 * from durable state and a stream of client proposals, and in half of the
 * runs membership changes (the cluster bootstraps from some of the nodes;
 * the others join as learners; promotions once caught up, demotions,
 * removals of any member, the leader included, address updates and
 * leadership transfers), and write leases on every node (sim_lease.h:
 * holders on leaders and followers, their crashes and partitions), and
 * the staleness rule of local reads on every node (sim_staleness.h); then
 * a liveness phase. Safety is checked by the harness (and the leases' and
 * the staleness checks) after every step; liveness here.
 * Header-only (static inline functions): each test binary links only the
 * core, the lease's and the staleness rules (Makefile SIM_SRC) and
 * tests/lib, as the Makefile's tests/sim rule says. */

#ifndef TEST_SIM_H
#define TEST_SIM_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "raft/configuration.h"
#include "raft/raft.h"
#include "tests/lib/cluster.h"
#include "tests/sim/sim_lease.h"
#include "tests/sim/sim_staleness.h"

/* What runs over the cores after every step (cluster_set_step_hook):
 * the write leases, then the staleness check. */
struct sim_hooks {
    struct sim_lease *sl;
    struct sim_staleness *ss;
};

/* sim_hook is the cluster's step hook of a run (sim_run). */
static inline void sim_hook(struct cluster *c, void *arg)
{
    struct sim_hooks *h = arg;
    sim_lease_hook(c, h->sl);
    sim_staleness_step(h->ss);
}

/* Virtual time allowed for a leader to emerge once the network is healed
 * and every node is up: many election timeouts (100 ms base). */
#define SIM__ELECT_MS 5000

/* Virtual time allowed for proposals to a stable leader to commit. */
#define SIM__COMMIT_MS 3000

/* sim_rng: splitmix64 over @state. */
static inline uint64_t sim_rng(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* sim_env_u64 reads environment variable @name, @dflt when unset. */
static inline uint64_t sim_env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? strtoull(v, NULL, 10) : dflt;
}

/* sim_agreed: every node is up and every member of the leader's
 * configuration follows the leader, which leads their common term (a
 * server outside it, removed or never added, hears from nobody) and
 * transfers its leadership to nobody. */
static inline bool sim_agreed(struct cluster *c, void *arg)
{
    raft_id leader = cluster_leader(c);
    raft_term term;
    raft_id id;

    (void)arg;
    if (leader == 0 || raft_transferee(cluster_raft(c, leader)) != 0) {
        return false;
    }
    term = raft_current_term(cluster_raft(c, leader));
    for (id = 1; id <= cluster_n_nodes(c); id++) {
        struct raft *r = cluster_raft(c, id);
        if (r == NULL) {
            return false;
        }
        if (cluster_is_member(c, leader, id) &&
            (raft_leader_id(r) != leader || raft_current_term(r) != term)) {
            return false;
        }
    }
    return true;
}

/* sim_agreed_free: sim_agreed, and no write lease holds the leader's
 * requests back (@arg: the cluster's leases, NULL: none). */
static inline bool sim_agreed_free(struct cluster *c, void *arg)
{
    return sim_agreed(c, NULL) &&
           (arg == NULL || !sim_lease_holds_back(arg, cluster_leader(c)));
}

/* What sim_committed watches: proposals at [first, last] of @term. */
struct sim_watch {
    raft_id leader;   /* the leader proposed to */
    raft_term term;   /* its term */
    raft_index first; /* first proposed index */
    raft_index last;  /* last proposed index */
};

/* sim_committed: every member of the leader's configuration applied
 * through w->last, or the leader lost its leadership (then the caller
 * retries). */
static inline bool sim_committed(struct cluster *c, void *arg)
{
    const struct sim_watch *w = arg;
    struct raft *l = cluster_raft(c, w->leader);
    raft_id id;

    if (l == NULL || raft_role(l) != RAFT_LEADER ||
        raft_current_term(l) != w->term) {
        return true;
    }
    for (id = 1; id <= cluster_n_nodes(c); id++) {
        if (cluster_is_member(c, w->leader, id) &&
            cluster_n_applied(c, id) < w->last) {
            return false;
        }
    }
    return true;
}

/* sim_liveness heals the network, restarts every node and checks that a
 * leader emerges within SIM__ELECT_MS and that proposals to a stable
 * leader commit on every node within SIM__COMMIT_MS (a leader that loses
 * its term meanwhile, e.g. to a restarted node of a later term, is not
 * stable: the round is retried, a bounded number of times). Then every
 * node has applied the same sequence. With leases @sl (NULL: none), the
 * proposals wait until no lease holds the leader's requests back. */
static inline void sim_liveness(struct cluster *c, uint64_t seed,
                                struct sim_lease *sl)
{
    raft_id id;
    unsigned round;
    unsigned i;
    unsigned k;

    cluster_heal(c);
    cluster_set_faults(c, 0, 0, 1, 5);
    for (id = 1; id <= cluster_n_nodes(c); id++) {
        if (!cluster_alive(c, id)) {
            cluster_restart(c, id);
        }
    }
    for (round = 0;; round++) {
        struct sim_watch w;
        struct raft *l;
        char p[64];

        if (round == 4) {
            cluster_fail(c, "liveness: no stable leader in 4 rounds");
        }
        if (!cluster_run_until(c, SIM__ELECT_MS, sim_agreed_free, sl)) {
            cluster_fail(c, "liveness: no leader %u ms after healing",
                         SIM__ELECT_MS);
        }
        w.leader = cluster_leader(c);
        w.term = raft_current_term(cluster_raft(c, w.leader));
        w.first = 0;
        for (i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "live-%llu-%u-%u", (unsigned long long)seed,
                     round, i);
            if (cluster_propose(c, w.leader, p, strlen(p)) != 0) {
                cluster_fail(c, "liveness: agreed leader %llu refuses",
                             (unsigned long long)w.leader);
            }
            w.last = raft_last_index(cluster_raft(c, w.leader));
            if (w.first == 0) {
                w.first = w.last;
            }
        }
        if (!cluster_run_until(c, SIM__COMMIT_MS, sim_committed, &w)) {
            cluster_fail(c,
                         "liveness: entries %llu..%llu proposed to "
                         "stable leader %llu (term %llu) not applied "
                         "everywhere within %u ms",
                         (unsigned long long)w.first,
                         (unsigned long long)w.last,
                         (unsigned long long)w.leader,
                         (unsigned long long)w.term, SIM__COMMIT_MS);
        }
        l = cluster_raft(c, w.leader);
        if (l != NULL && raft_role(l) == RAFT_LEADER &&
            raft_current_term(l) == w.term) {
            break; /* stable, and everything applied everywhere */
        }
    }
    /* State Machine Safety, end to end: identical applied sequences. */
    for (id = 2; id <= cluster_n_nodes(c); id++) {
        unsigned n = cluster_n_applied(c, id);
        if (n > cluster_n_applied(c, 1)) {
            n = cluster_n_applied(c, 1);
        }
        for (k = 0; k < n; k++) {
            const struct raft_entry *a = cluster_applied(c, 1, k);
            const struct raft_entry *b = cluster_applied(c, id, k);
            if (a->term != b->term || a->index != b->index) {
                cluster_fail(c,
                             "nodes 1 and %llu applied different entries "
                             "at %u",
                             (unsigned long long)id, k + 1);
            }
        }
    }
}

/* sim_pick returns a random server of the configuration @conf whose role
 * is @role (0: any), 0 when there is none. */
static inline raft_id sim_pick(const struct raft_configuration *conf,
                               uint8_t role, uint64_t *x)
{
    raft_id ids[RAFT_MAX_SERVERS];
    unsigned n = 0;
    unsigned i;

    for (i = 0; i < conf->n; i++) {
        if (role == 0 || conf->servers[i].role == role) {
            ids[n++] = conf->servers[i].id;
        }
    }
    return n == 0 ? 0 : ids[sim_rng(x) % n];
}

/* sim_membership asks the leader, if any, for one random membership
 * change or a leadership transfer. The core refuses what its rules
 * forbid (a change pending, none committed in this term, a transfer
 * running: RAFT_BUSY; the last voter: RAFT_INVALID), which is fine. A
 * learner is promoted once caught up (raft_progress, thesis §4.2.1),
 * or one time in four regardless. */
static inline void sim_membership(struct cluster *c, uint64_t *x)
{
    raft_id leader = cluster_leader(c);
    const struct raft_configuration *conf;
    struct raft_progress_info pi;
    unsigned n = cluster_n_nodes(c);
    unsigned voters;
    raft_id id;
    char address[32];

    if (leader == 0) {
        return;
    }
    conf = raft_current_configuration(cluster_raft(c, leader));
    voters = raft_configuration_n_voters(conf);
    switch (sim_rng(x) % 8) {
        case 0:
        case 1:
            /* Add a node that is not a member, as a learner mostly. */
            id = 1 + (raft_id)(sim_rng(x) % n);
            if (raft_configuration_find(conf, id) < 0) {
                snprintf(address, sizeof address, "node%llu:7000",
                         (unsigned long long)id);
                (void)cluster_change(
                    c, leader, RAFT_CHANGE_ADD, id,
                    sim_rng(x) % 4 == 0 ? RAFT_VOTER : RAFT_LEARNER, address);
            }
            break;
        case 2:
        case 3:
            id = sim_pick(conf, RAFT_LEARNER, x);
            if (id != 0 &&
                raft_progress(cluster_raft(c, leader), id, &pi) == 0 &&
                (pi.caught_up || sim_rng(x) % 4 == 0)) {
                (void)cluster_change(c, leader, RAFT_CHANGE_PROMOTE, id, 0,
                                     NULL);
            }
            break;
        case 4:
            /* Remove any member, the leader included; fewer than two
             * voters seldom. */
            id = sim_pick(conf, 0, x);
            if (voters > 2 || sim_rng(x) % 4 == 0) {
                (void)cluster_change(c, leader, RAFT_CHANGE_REMOVE, id, 0,
                                     NULL);
            }
            break;
        case 5:
            id = sim_pick(conf, RAFT_VOTER, x);
            if (voters > 2 || sim_rng(x) % 4 == 0) {
                (void)cluster_change(c, leader, RAFT_CHANGE_DEMOTE, id, 0,
                                     NULL);
            }
            break;
        case 6:
            id = sim_pick(conf, 0, x);
            snprintf(address, sizeof address, "moved%llu:%u",
                     (unsigned long long)id, (unsigned)(sim_rng(x) % 9000));
            (void)cluster_change(c, leader, RAFT_CHANGE_UPDATE_ADDRESS, id, 0,
                                 address);
            break;
        default:
            id = sim_rng(x) % 2 == 0 ? 0 : sim_pick(conf, RAFT_VOTER, x);
            (void)cluster_transfer(c, leader, id);
            break;
    }
}

/* sim_partition cuts the cluster in two random groups (symmetric), or one
 * random link in one direction (one-way) when @one_way. */
static inline void sim_partition(struct cluster *c, uint64_t *x, bool one_way)
{
    unsigned n = cluster_n_nodes(c);
    uint64_t side = sim_rng(x);
    raft_id a;
    raft_id b;

    if (one_way) {
        a = 1 + (raft_id)(sim_rng(x) % n);
        b = 1 + (raft_id)(sim_rng(x) % n);
        if (a != b) {
            cluster_set_link(c, a, b, false);
        }
        return;
    }
    for (a = 1; a <= n; a++) {
        for (b = 1; b <= n; b++) {
            bool same = ((side >> a) & 1) == ((side >> b) & 1);
            if (a != b) {
                cluster_set_link(c, a, b, same);
            }
        }
    }
}

/* sim_restore_links lets every message through again (faults stay). */
static inline void sim_restore_links(struct cluster *c)
{
    raft_id id;

    for (id = 1; id <= cluster_n_nodes(c); id++) {
        cluster_isolate(c, id, true);
    }
}

/* sim_run runs seed @seed on @n nodes for @steps harness steps (one event
 * each: a tick, a delivery or a disk completion) of random faults and
 * proposals, then sim_liveness. A failed check fails through cluster_fail
 * (the replay command is printed). With @jump, failures longjmp there and
 * the cluster is leaked. Returns the trace hash of the run. */
static inline uint64_t sim_run(unsigned n, uint64_t seed, unsigned steps,
                               jmp_buf *jump)
{
    struct cluster_config cfg;
    struct cluster *c;
    uint64_t x = seed ^ ((uint64_t)n << 56);
    unsigned step;
    unsigned k = 0;
    uint64_t n_reads = 0;
    uint64_t hash;
    struct sim_lease *sl;
    struct sim_hooks hooks;
    char replay[200];
    char p[64];
    raft_id id;
    bool membership;

    sim_rng(&x);
    cluster_config_default(&cfg, n, seed);
    cfg.drop_pct = (unsigned)(sim_rng(&x) % 20);
    cfg.dup_pct = (unsigned)(sim_rng(&x) % 10);
    cfg.net_max = 2 + (unsigned)(sim_rng(&x) % 40);
    cfg.disk_max = 1 + (unsigned)(sim_rng(&x) % 10);
    cfg.max_inflight_msgs = 1 + (unsigned)(sim_rng(&x) % 4);
    cfg.max_size_per_msg = sim_rng(&x) % 3 == 0 ? 0 : 64;
    /* Election timeouts from 20 to 100 ms against network delays up to 41
     * ms: from calm runs to ones where terms churn. */
    cfg.election_timeout = 20 + (unsigned)(sim_rng(&x) % 81);
    cfg.heartbeat_interval = cfg.election_timeout / 5;
    cfg.tick_ms = 1 + (unsigned)(sim_rng(&x) % 5);
    /* One run in eight without pre-vote, one in eight without
     * check-quorum: safety never depends on them. */
    cfg.disable_pre_vote = sim_rng(&x) % 8 == 0;
    cfg.disable_check_quorum = sim_rng(&x) % 8 == 0;
    /* Pipelining: windows up to 16 requests, a byte limit in half of the
     * runs (entries are about 10 bytes: 1 to 8 of them in flight). */
    if (sim_rng(&x) % 2 == 0) {
        cfg.max_inflight_msgs = 1 + (unsigned)(sim_rng(&x) % 16);
        cfg.max_inflight_bytes = 10 + sim_rng(&x) % 70;
    }
    /* Compaction in three runs of four, every 5 to 44 applied entries,
     * keeping 0 to 9 behind: lagging and restarted nodes need snapshots,
     * of which up to a third fail. */
    if (sim_rng(&x) % 4 != 0) {
        cfg.compact_every = 5 + (unsigned)(sim_rng(&x) % 40);
        cfg.compact_trailing = (unsigned)(sim_rng(&x) % 10);
        cfg.snap_min = 1 + (unsigned)(sim_rng(&x) % 20);
        cfg.snap_max = cfg.snap_min + (unsigned)(sim_rng(&x) % 100);
        cfg.snap_fail_pct = (unsigned)(sim_rng(&x) % 34);
    }
    /* A disk that refuses 1 to 5 % of appends for a full log in one run
     * of four: the refused write waits first in its queue for a
     * compaction (which runs ahead of it) or a retry a second later. */
    if (sim_rng(&x) % 4 == 0) {
        cfg.disk_full_pct = 1 + (unsigned)(sim_rng(&x) % 5);
    }
    /* Membership in half of the runs: 2 or 3 of 3 nodes, 3 to 5 of 5
     * found the cluster; the others join. Not without both pre-vote and
     * check-quorum: a removed server that missed its removal would then
     * disrupt the cluster with its elections (thesis §4.2.3). */
    membership = sim_rng(&x) % 2 == 0 &&
                 !(cfg.disable_pre_vote && cfg.disable_check_quorum);
    if (membership) {
        cfg.n_founders = n - (unsigned)(sim_rng(&x) % (n == 3 ? 2 : 3));
    }
    c = cluster_new(&cfg);
    sl = sim_lease_new(c, &x, 0, 0);
    hooks.sl = sl;
    hooks.ss = sim_staleness_new(c, seed, !cfg.disable_check_quorum);
    cluster_set_step_hook(c, sim_hook, &hooks);
    snprintf(replay, sizeof replay,
             "SIM_SEED=%llu SIM_NODES=%u SIM_STEPS=%u "
             "build/tests/sim/test_sim",
             (unsigned long long)seed, n, steps);
    cluster_set_replay(c, replay);
    cluster_set_fail_jump(c, jump);

    for (step = 0; step < steps; step++) {
        uint64_t r = sim_rng(&x) % 1000;
        id = 1 + (raft_id)(sim_rng(&x) % n);
        if (r < 60) {
            /* A client proposal, mostly to the leader. */
            raft_id to = cluster_leader(c);
            if (to == 0 || r < 6) {
                to = id;
            }
            snprintf(p, sizeof p, "s%llu-%u", (unsigned long long)seed, k++);
            (void)sim_lease_propose(sl, to, p, strlen(p));
        } else if (r < 64) {
            /* A crash, of the leader half of the time. */
            if (r < 62 && cluster_leader(c) != 0) {
                id = cluster_leader(c);
            }
            if (cluster_alive(c, id)) {
                cluster_crash(c, id);
            }
        } else if (r < 70) {
            /* A restart of some crashed node. */
            raft_id j;
            for (j = 0; j < n; j++) {
                raft_id d = 1 + (id - 1 + j) % n;
                if (!cluster_alive(c, d)) {
                    cluster_restart(c, d);
                    break;
                }
            }
        } else if (r < 73) {
            sim_partition(c, &x, false);
        } else if (r < 76) {
            sim_partition(c, &x, true);
        } else if (r < 80) {
            sim_restore_links(c);
        } else if (r < 82) {
            cluster_set_faults(c, (unsigned)(sim_rng(&x) % 30),
                               (unsigned)(sim_rng(&x) % 15), 1,
                               2 + (unsigned)(sim_rng(&x) % 60));
        } else if (membership && r < 112) {
            sim_membership(c, &x);
        } else if (r >= 900 && r < 940) {
            /* A linearizable read (ReadIndex), mostly on the leader; the
             * harness fails the run on a read ready below a write
             * committed before it began. */
            raft_id to = cluster_leader(c);
            if (to == 0 || r < 905) {
                to = id;
            }
            (void)cluster_read_index(c, to, ++n_reads);
        } else if (r >= 940 && r < 975) {
            /* A write transaction under the lease, on any node. */
            sim_lease_random_start(sl, id);
        } else if (r >= 975 && r < 984) {
            /* Its holder's node crashes mid-lease, or is cut off; or the
             * leader that granted a lease in force is cut off. */
            sim_lease_fault(sl, id, r);
        }
        cluster_step(c);
    }
    if (getenv("SIM_VERBOSE") != NULL) {
        raft_term term = 0;
        for (id = 1; id <= n; id++) {
            if (cluster_raft(c, id) != NULL &&
                raft_current_term(cluster_raft(c, id)) > term) {
                term = raft_current_term(cluster_raft(c, id));
            }
        }
        struct cluster_stats st = cluster_stats(c);
        fprintf(
            stderr,
            "seed %llu n %u: after %u steps t=%llu ms, "
            "committed %llu, term %llu, %llu messages, %llu "
            "compactions, %llu snapshots asked, %llu failed, %llu "
            "installed, %llu rejections deferred, %llu writes, %llu "
            "refused for a full log, %llu changes, %llu transfers, %u reads "
            "ready\n",
            (unsigned long long)seed, n, steps,
            (unsigned long long)cluster_now(c),
            (unsigned long long)cluster_committed_last(c),
            (unsigned long long)term,
            (unsigned long long)cluster_n_messages(c, 0),
            (unsigned long long)st.n_compactions,
            (unsigned long long)st.n_snapshots_asked,
            (unsigned long long)st.n_snapshots_failed,
            (unsigned long long)st.n_installs,
            (unsigned long long)st.n_deferred, (unsigned long long)st.n_writes,
            (unsigned long long)st.n_log_full, (unsigned long long)st.n_changes,
            (unsigned long long)st.n_transfers, cluster_n_reads_ready(c));
    }
    sl->starting = false;
    sim_liveness(c, seed, sl);
    sim_lease_liveness(sl);
    sim_lease_check_end(sl);
    if (getenv("SIM_VERBOSE") != NULL) {
        fprintf(stderr,
                "  leases (timeout %u ms, exec %u ms): %llu asks, %llu "
                "grants, %llu committed, %llu not applied, %llu unknown, "
                "%llu frames, %llu requests held back\n",
                sl->timeout_ms, sl->exec_ms,
                (unsigned long long)sl->stats.n_asks,
                (unsigned long long)sl->stats.n_grants,
                (unsigned long long)sl->stats.n_commits,
                (unsigned long long)sl->stats.n_refused,
                (unsigned long long)sl->stats.n_unknown,
                (unsigned long long)sl->stats.n_frames,
                (unsigned long long)sl->stats.n_held_back);
    }
    if (getenv("SIM_VERBOSE") != NULL) {
        fprintf(stderr,
                "  staleness (max_staleness_ms=%u): %llu node-steps fresh, "
                "%llu stale (%llu with a commit index not current)\n",
                hooks.ss->max_ms, (unsigned long long)hooks.ss->n_fresh,
                (unsigned long long)hooks.ss->n_stale,
                (unsigned long long)hooks.ss->n_new_term);
    }
    hash = cluster_trace_hash(c);
    sim_lease_free(sl);
    sim_staleness_free(hooks.ss);
    cluster_free(c);
    return hash;
}

#endif /* TEST_SIM_H */
