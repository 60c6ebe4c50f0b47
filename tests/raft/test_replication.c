/* Log replication in the Raft core (paper §5.3, §5.4, Fig. 2, Fig. 8):
 * durable acknowledgements, truncation of conflicting suffixes, the
 * leader's back-off and flow control, the current-term commit rule, and
 * whole clusters under loss, duplication, reordering, partitions and
 * crashes (tests/lib/cluster.h checks safety after every step). */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/raft.h"
#include "tests/lib/cluster.h"
#include "tests/raft/step.h"

static struct raft *new3(raft_id id, raft_term term, unsigned n_log,
                         raft_term log_term, unsigned inflight,
                         uint64_t max_size, raft_index applied)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {term, 0};
    struct raft_entry log[16];
    struct raft *r = NULL;
    unsigned i;

    /* Hand-stepped: the classic protocol, one event at a time. */
    config3(&cfg, id, max_size, inflight, 5);
    for (i = 0; i < n_log; i++) {
        log[i].term = log_term;
        log[i].index = i + 1;
        log[i].type = RAFT_ENTRY_NOOP;
        log[i].data = NULL;
    }
    assert_int_equal(raft_new(&cfg, &hs, 1, log, n_log, applied, &r), 0);
    return r;
}

static const struct raft_append_entries_result *only_result(
    const struct raft_update *u)
{
    assert_int_equal(u->n_messages, 1);
    assert_int_equal(u->messages[0].type, RAFT_MSG_APPEND_ENTRIES_RESULT);
    return &u->messages[0].append_entries_result;
}

/* A follower acknowledges appended entries only once RAFT_EVENT_PERSISTED
 * covers them; entries already durable are acknowledged at once; a
 * rejection carries reject_index = prev and the follower's last index. */
static void test_follower_ack_after_persisted(void **state)
{
    struct raft *r = new3(1, 1, 0, 0, 4, 1024, 0);
    struct raft_update u;
    struct raft_entry two[2] = {{2, 1, RAFT_ENTRY_NOOP, NULL},
                                {2, 2, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry conflict[1] = {{3, 2, RAFT_ENTRY_NOOP, NULL}};

    (void)state;
    assert_int_equal(step_append(r, 2, 2, 0, 0, 0, two, 2, &u), 0);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.n_entries, 2);
    assert_int_equal(u.entries[0].index, 1);
    assert_int_equal(u.n_messages, 0); /* nothing durable yet */
    assert_int_equal(raft_leader_id(r), 2);
    assert_int_equal(raft_persisted_index(r), 0);

    /* A write of another term at that index does not count. */
    assert_int_equal(step_persisted(r, 2, 1, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_persisted_index(r), 0);

    assert_int_equal(step_persisted(r, 2, 2, &u), 0);
    assert_true(only_result(&u)->success);
    assert_int_equal(only_result(&u)->last_log_index, 2);
    assert_int_equal(u.messages[0].to, 2);
    assert_int_equal(raft_persisted_index(r), 2);

    /* A duplicate: all durable, acknowledged at once, nothing to write. */
    assert_int_equal(step_append(r, 2, 2, 0, 0, 0, two, 2, &u), 0);
    assert_int_equal(u.n_entries, 0);
    assert_true(only_result(&u)->success);
    assert_int_equal(only_result(&u)->last_log_index, 2);

    /* A gap: rejected with the hint. */
    assert_int_equal(step_append(r, 2, 2, 5, 2, 0, NULL, 0, &u), 0);
    assert_false(only_result(&u)->success);
    assert_int_equal(only_result(&u)->reject_index, 5);
    assert_int_equal(only_result(&u)->last_log_index, 2);

    /* A new leader (term 3) overwrites index 2: the update starts at 2,
     * the persisted index drops below it, no acknowledgement yet. */
    assert_int_equal(step_append(r, 3, 3, 1, 2, 0, conflict, 1, &u), 0);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.n_entries, 1);
    assert_int_equal(u.entries[0].index, 2);
    assert_int_equal(u.entries[0].term, 3);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_persisted_index(r), 1);
    assert_int_equal(raft_last_index(r), 2);
    /* The old write's completion is stale. */
    assert_int_equal(step_persisted(r, 2, 2, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_persisted(r, 2, 3, &u), 0);
    assert_int_equal(only_result(&u)->last_log_index, 2);
    assert_int_equal(u.messages[0].to, 3);

    /* A heartbeat with a larger commit: commit is bounded by what was
     * verified from this leader, and entries are handed out once. */
    assert_int_equal(step_append(r, 3, 3, 2, 3, 10, NULL, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 2);
    assert_int_equal(u.n_committed, 2);
    assert_int_equal(u.committed[1].term, 3);
    assert_int_equal(step_append(r, 3, 3, 2, 3, 10, NULL, 0, &u), 0);
    assert_int_equal(u.n_committed, 0);
    raft_close(r);
}

/* AppendEntries corner cases, each a branch of the receiver (paper Fig. 2
 * rules 1-5) or of the leader's answer handling: the conflict hint (first
 * index of the conflicting term, never at or below commit); truncation of
 * entries not yet durable (the persisted index stays); a stale PERSISTED
 * for a truncated entry; a conflict with a committed entry (a protocol
 * violation: dropped); entries below a compacted prefix (skipped); an
 * AppendEntries of its own term reaching a leader (ignored); an answer
 * acknowledging entries the leader never had (ignored); PERSISTED while no
 * leader is known (no acknowledgement). */
static void test_append_edge_cases(void **state)
{
    struct raft *r = new3(1, 1, 0, 0, 4, 1024, 0);
    struct raft_update u;
    struct raft_entry t1[4] = {{1, 1, RAFT_ENTRY_NOOP, NULL},
                               {1, 2, RAFT_ENTRY_NOOP, NULL},
                               {1, 3, RAFT_ENTRY_NOOP, NULL},
                               {1, 4, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry t2[2] = {{2, 3, RAFT_ENTRY_NOOP, NULL},
                               {2, 4, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry bad[1] = {{3, 1, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry over[3] = {{4, 5, RAFT_ENTRY_NOOP, NULL},
                                 {4, 6, RAFT_ENTRY_NOOP, NULL},
                                 {4, 7, RAFT_ENTRY_NOOP, NULL}};

    (void)state;
    /* Four entries of term 1, 1..2 durable and committed, 3..4 not yet
     * durable. */
    assert_int_equal(step_append(r, 2, 1, 0, 0, 0, t1, 4, &u), 0);
    assert_int_equal(step_persisted(r, 2, 1, &u), 0);
    assert_int_equal(step_append(r, 2, 1, 2, 1, 2, NULL, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 2);
    /* Refused at prev 4 of term 2: our entry 4 is of term 1, whose first
     * index above the commit index is 3. */
    assert_int_equal(step_append(r, 3, 2, 4, 2, 2, NULL, 0, &u), 0);
    assert_false(only_result(&u)->success);
    assert_int_equal(only_result(&u)->conflict_index, 3);
    assert_int_equal(only_result(&u)->last_log_index, 4);
    /* Beyond our log: no conflicting term, the last index says it all. */
    assert_int_equal(step_append(r, 3, 2, 9, 2, 2, NULL, 0, &u), 0);
    assert_int_equal(only_result(&u)->conflict_index, 0);
    /* Entries 3..4 of term 2 replace the non-durable ones: the persisted
     * index (2) is untouched. */
    assert_int_equal(step_append(r, 3, 2, 2, 1, 2, t2, 2, &u), 0);
    assert_int_equal(u.n_entries, 2);
    assert_int_equal(u.entries[0].index, 3);
    assert_int_equal(raft_persisted_index(r), 2);
    /* The completion of the old write of 3..4 (term 1) is stale, and so
     * is a repeated completion of what is already durable. */
    assert_int_equal(step_persisted(r, 4, 1, &u), 0);
    assert_int_equal(raft_persisted_index(r), 2);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_persisted(r, 2, 1, &u), 0);
    assert_int_equal(u.n_messages, 0);
    /* Leader 2 of term 3 probes past our log: refused, so nothing is
     * verified from it yet; a write completing now acknowledges
     * nothing. */
    assert_int_equal(step_append(r, 2, 3, 9, 3, 2, NULL, 0, &u), 0);
    assert_false(only_result(&u)->success);
    assert_true(u.hard_state_changed);
    assert_int_equal(step_persisted(r, 4, 2, &u), 0);
    assert_int_equal(raft_persisted_index(r), 4);
    assert_int_equal(u.n_messages, 0);
    /* A conflicting entry at a committed index: dropped, nothing
     * written, no answer. */
    assert_int_equal(step_append(r, 2, 3, 0, 0, 2, bad, 1, &u), 0);
    assert_int_equal(u.n_entries, 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_last_index(r), 4);
    raft_close(r);

    /* A log compacted up to 4 (first index 5): entries below are
     * skipped, the rest appended; the commit index starts at 4. */
    {
        struct raft_config cfg;
        struct raft_hard_state hs = {4, 0};
        config3(&cfg, 1, 1024, 2, 0);
        cfg.disable_check_quorum = false; /* as this case always had */
        assert_int_equal(raft_new(&cfg, &hs, 5, NULL, 0, 0, &r), 0);
        assert_int_equal(raft_commit_index(r), 4);
        assert_int_equal(step_append(r, 2, 4, 4, 9, 4, over, 3, &u), 0);
        assert_int_equal(u.n_entries, 3);
        assert_int_equal(u.entries[0].index, 5);
        /* A prev inside the compacted prefix matches, entries below the
         * first index are skipped. */
        over[0].index = 4;
        over[1].index = 5;
        over[2].index = 6;
        assert_int_equal(step_append(r, 2, 4, 3, 9, 4, over, 3, &u), 0);
        assert_int_equal(u.n_entries, 0);
        assert_int_equal(raft_last_index(r), 7);
        /* PERSISTED on a candidate: no leader to acknowledge to. */
        assert_int_equal(step_tick(r, 0, &u), 0);
        assert_int_equal(step_tick(r, 1000, &u), 0);
        assert_int_equal(raft_role(r), RAFT_CANDIDATE);
        assert_int_equal(step_persisted(r, 7, 4, &u), 0);
        assert_int_equal(u.n_messages, 0);
        assert_int_equal(raft_persisted_index(r), 7);
        raft_close(r);
    }

    /* A leader ignores an AppendEntries of its own term and an answer
     * acknowledging entries it never had. */
    r = new3(1, 0, 0, 0, 4, 1024, 0);
    make_leader(r, &u);
    assert_int_equal(step_append(r, 2, 1, 0, 0, 0, NULL, 0, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(step_result_term(r, 2, 1, true, 0, 99, 0, &u), 0);
    assert_int_equal(u.n_messages, 0);
    {
        struct raft_progress_info pi;
        assert_int_equal(raft_progress(r, 2, &pi), 0);
        assert_int_equal(pi.match_index, 0);
    }
    raft_close(r);
}

/* Committed entries are handed out from after @applied, and only when
 * durable on this node. */
static void test_handout_from_applied(void **state)
{
    struct raft *r = new3(1, 1, 3, 1, 4, 1024, 2);
    struct raft_update u;
    struct raft_entry more[1] = {{1, 4, RAFT_ENTRY_NOOP, NULL}};

    (void)state;
    assert_int_equal(step_append(r, 2, 1, 3, 1, 4, more, 1, &u), 0);
    assert_int_equal(raft_commit_index(r), 4);
    assert_int_equal(u.n_committed, 1); /* index 3: 4 is not durable */
    assert_int_equal(u.committed[0].index, 3);
    assert_int_equal(step_persisted(r, 4, 1, &u), 0);
    assert_int_equal(u.n_committed, 1);
    assert_int_equal(u.committed[0].index, 4);
    raft_close(r);
}

/* The leader backs off with the hint, ignores stale rejections, moves a
 * follower to REPLICATE on success, pipelines up to max_inflight_msgs
 * messages of at most max_size_per_msg bytes, and falls back to PROBE at
 * match + 1 on a rejection. It counts itself only up to its persisted
 * index, and commits only entries of its term by counting (§5.4.2). */
static void test_leader_progress(void **state)
{
    struct raft *r = new3(1, 1, 5, 1, 2, 1000, 0);
    struct raft_update u;
    struct raft_progress_info pi;
    const struct raft_append_entries *ae;
    raft_term term;

    (void)state;
    make_leader(r, &u);
    term = raft_current_term(r);
    assert_int_equal(term, 2);
    assert_int_equal(raft_last_index(r), 6); /* the NOOP */
    ae = append_to(&u, 2, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 5);
    assert_int_equal(ae->n_entries, 1);
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(raft_progress(r, 1, &pi), RAFT_NOTFOUND);

    /* Rejected at 5, follower's last is 2: next = min(5, 3) = 3. */
    assert_int_equal(step_result_term(r, 2, term, false, 5, 2, 0, &u), 0);
    ae = append_to(&u, 2, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 2);
    assert_int_equal(ae->n_entries, 4);
    /* The same rejection again is stale: nothing sent. */
    assert_int_equal(step_result_term(r, 2, term, false, 5, 2, 0, &u), 0);
    assert_int_equal(u.n_messages, 0);
    /* An old-term entry on a majority is not committed by counting. */
    assert_int_equal(step_persisted(r, 6, term, &u), 0);
    assert_int_equal(step_result_term(r, 2, term, true, 0, 5, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 0);
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_REPLICATE);
    assert_int_equal(pi.match_index, 5);
    /* The current-term NOOP on a majority commits everything. */
    assert_int_equal(step_result_term(r, 2, term, true, 0, 6, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 6);
    assert_int_equal(u.n_committed, 6);

    /* Three 600-byte proposals, 1000 bytes per message, window of 2. */
    assert_int_equal(step_propose(r, 3, 600, 'a', 1, &u), 0);
    assert_int_equal(u.proposed_index, 7);
    assert_int_equal(u.proposed_term, term);
    assert_int_equal(u.n_entries, 3);
    assert_non_null(append_to(&u, 2, 0));
    assert_non_null(append_to(&u, 2, 1));
    assert_null(append_to(&u, 2, 2));
    assert_int_equal(append_to(&u, 2, 0)->n_entries, 1);
    assert_int_equal(append_to(&u, 2, 1)->prev_log_index, 7);
    assert_null(append_to(&u, 3, 0)); /* node 3: probe outstanding */
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.inflight, 2);
    assert_int_equal(pi.next_index, 9);

    /* Follower 2 has 7 durable; the leader has not persisted 7..9: the
     * leader does not count itself, so nothing commits. */
    assert_int_equal(step_result_term(r, 2, term, true, 0, 7, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 6);
    assert_non_null(append_to(&u, 2, 0)); /* the window slides */
    assert_int_equal(append_to(&u, 2, 0)->prev_log_index, 8);
    assert_int_equal(step_persisted(r, 9, term, &u), 0);
    assert_int_equal(raft_commit_index(r), 7);
    assert_int_equal(u.n_committed, 1);

    /* A rejection above match in REPLICATE: back to PROBE at match + 1. */
    assert_int_equal(step_result_term(r, 2, term, false, 8, 7, 0, &u), 0);
    assert_int_equal(raft_progress(r, 2, &pi), 0);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(pi.inflight, 0);
    ae = append_to(&u, 2, 0);
    assert_non_null(ae);
    assert_int_equal(ae->prev_log_index, 7);
    assert_int_equal(pi.next_index, 8);

    /* A follower's answer of a higher term: the leader steps down and
     * keeps what it committed. */
    assert_int_equal(step_result_term(r, 3, term + 1, false, 0, 0, 0, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_commit_index(r), 7);
    assert_int_equal(raft_progress(r, 2, &pi), RAFT_NOTLEADER);
    raft_close(r);
}

/* Heartbeats go every interval and carry min(commit, match). */
static void test_heartbeats(void **state)
{
    struct raft *r = new3(1, 1, 0, 0, 4, 1024, 0);
    struct raft_update u;
    raft_term term;
    uint64_t t;
    unsigned beats = 0;
    const struct raft_append_entries *ae;

    (void)state;
    make_leader(r, &u);
    term = raft_current_term(r);
    assert_int_equal(step_persisted(r, 1, term, &u), 0);
    assert_int_equal(step_result_term(r, 2, term, true, 0, 1, 0, &u), 0);
    assert_int_equal(raft_commit_index(r), 1);
    for (t = 300; t < 400; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
        ae = append_to(&u, 2, 0);
        if (ae != NULL) {
            beats++;
            assert_int_equal(ae->n_entries, 0);
            assert_int_equal(ae->prev_log_index, 1);
            assert_int_equal(ae->leader_commit, 1);
            /* Node 3 never answered: probed again from the NOOP. */
            assert_non_null(append_to(&u, 3, 0));
            assert_int_equal(append_to(&u, 3, 0)->prev_log_index, 0);
            assert_int_equal(append_to(&u, 3, 0)->n_entries, 1);
        }
    }
    assert_true(beats >= 4 && beats <= 6);
    raft_close(r);
}

static bool all_applied(struct cluster *c, void *arg)
{
    const char **payloads = arg;
    raft_id id;
    unsigned k;

    for (k = 0; payloads[k] != NULL; k++) {
        for (id = 1; id <= cluster_n_nodes(c); id++) {
            if (cluster_alive(c, id) &&
                !cluster_has_applied(c, id, payloads[k], strlen(payloads[k]))) {
                return false;
            }
        }
    }
    return true;
}

static bool has_leader(struct cluster *c, void *arg)
{
    (void)arg;
    return cluster_leader(c) != 0;
}

/* commit_all proposes @payloads (NULL-terminated) to the leader of the
 * moment, retrying on leader changes, until every node that is up
 * applied them all. */
static void commit_all(struct cluster *c, const char **payloads)
{
    unsigned attempt;
    unsigned k;

    for (attempt = 0; attempt < 30; attempt++) {
        raft_id leader;
        if (!cluster_run_until(c, 1000, has_leader, NULL)) {
            continue;
        }
        leader = cluster_leader(c);
        for (k = 0; payloads[k] != NULL; k++) {
            if (!cluster_has_applied(c, leader, payloads[k],
                                     strlen(payloads[k]))) {
                cluster_propose(c, leader, payloads[k], strlen(payloads[k]));
            }
        }
        if (cluster_run_until(c, 400, all_applied, (void *)payloads)) {
            return;
        }
    }
    cluster_fail(c, "proposals never committed");
}

/* applied_equal checks that nodes @a and @b applied the same sequence up
 * to the shorter one. */
static void applied_equal(struct cluster *c, raft_id a, raft_id b)
{
    unsigned n = cluster_n_applied(c, a) < cluster_n_applied(c, b)
                     ? cluster_n_applied(c, a)
                     : cluster_n_applied(c, b);
    unsigned i;

    for (i = 0; i < n; i++) {
        const struct raft_entry *x = cluster_applied(c, a, i);
        const struct raft_entry *y = cluster_applied(c, b, i);
        size_t lx = x->data ? x->data->len : 0;
        size_t ly = y->data ? y->data->len : 0;
        if (x->term != y->term || lx != ly ||
            (lx > 0 && memcmp(x->data->data, y->data->data, lx) != 0)) {
            cluster_fail(c, "nodes %llu and %llu applied different %u",
                         (unsigned long long)a, (unsigned long long)b, i + 1);
        }
    }
}

/* Proposals commit on all three nodes, in the same order. */
static void test_commit_three(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    const char *p[] = {"one", "two", "three", "four", NULL};

    (void)state;
    cluster_config_default(&cfg, 3, 3);
    c = cluster_new(&cfg);
    commit_all(c, p);
    cluster_run(c, 200);
    assert_int_equal(cluster_n_applied(c, 1), cluster_n_applied(c, 2));
    assert_int_equal(cluster_n_applied(c, 2), cluster_n_applied(c, 3));
    assert_int_equal(cluster_n_applied(c, 1), 5); /* NOOP + 4 */
    applied_equal(c, 1, 2);
    applied_equal(c, 1, 3);
    cluster_free(c);
}

/* The leader crashes and restarts from its durable log and hard state; a
 * new leader is elected, nothing committed is lost, and the old leader
 * catches up without re-applying what it applied. */
static void test_leader_crash_restart(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    const char *p1[] = {"a1", "a2", "a3", NULL};
    const char *p2[] = {"b1", "b2", NULL};
    const char *all[] = {"a1", "a2", "a3", "b1", "b2", NULL};
    raft_id old;
    raft_id id;
    unsigned before;

    (void)state;
    cluster_config_default(&cfg, 3, 21);
    c = cluster_new(&cfg);
    commit_all(c, p1);
    old = cluster_leader(c);
    before = cluster_n_applied(c, old);
    cluster_crash(c, old);
    assert_true(cluster_run_until(c, 2000, has_leader, NULL));
    assert_int_not_equal(cluster_leader(c), old);
    commit_all(c, p2);
    cluster_restart(c, old);
    assert_true(cluster_run_until(c, 3000, all_applied, (void *)all));
    for (id = 1; id <= 3; id++) {
        assert_true(cluster_n_applied(c, id) >= before + 2);
    }
    applied_equal(c, 1, 2);
    applied_equal(c, 1, 3);
    cluster_free(c);
}

/* A leader cut off with uncommitted entries loses them: the new leader's
 * log overwrites its tail once the partition heals. */
static void test_divergent_tail(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    const char *p1[] = {"base", NULL};
    const char *p2[] = {"new1", "new2", NULL};
    raft_id old;
    raft_id id;
    raft_index last;

    (void)state;
    cluster_config_default(&cfg, 3, 33);
    c = cluster_new(&cfg);
    commit_all(c, p1);
    old = cluster_leader(c);
    cluster_isolate(c, old, false);
    assert_int_equal(cluster_propose(c, old, "lost1", 5), 0);
    assert_int_equal(cluster_propose(c, old, "lost2", 5), 0);
    assert_int_equal(cluster_propose(c, old, "lost3", 5), 0);
    cluster_run(c, 600);
    last = cluster_durable_last(c, old);
    assert_true(last >= 5);
    assert_int_not_equal(cluster_leader(c), old);
    assert_int_equal(cluster_propose(c, cluster_leader(c), "new1", 4), 0);
    cluster_run(c, 300);
    for (id = 1; id <= 3; id++) {
        assert_true(cluster_has_applied(c, id, "new1", 4) == (id != old));
    }
    cluster_heal(c);
    commit_all(c, p2);
    cluster_run(c, 300);
    assert_true(cluster_n_truncations(c, old) >= 1);
    assert_false(cluster_has_applied(c, old, "lost1", 5));
    assert_int_equal(cluster_durable_last(c, old),
                     cluster_durable_last(c, cluster_leader(c)));
    assert_int_equal(cluster_durable_term(c, old, last),
                     cluster_durable_term(c, cluster_leader(c), last));
    cluster_free(c);
}

struct match_watch {
    raft_id leader; /* whose progress to watch */
    raft_id peer;   /* the follower */
};

static bool peer_matched_2(struct cluster *c, void *arg)
{
    struct match_watch *w = arg;
    struct raft_progress_info pi;
    struct raft *r = cluster_raft(c, w->leader);

    return r != NULL && raft_progress(r, w->peer, &pi) == 0 &&
           pi.match_index >= 2;
}

static bool is_leader(struct cluster *c, void *arg)
{
    return cluster_leader(c) == *(raft_id *)arg;
}

static void set_links(struct cluster *c, raft_id a, const raft_id *peers,
                      unsigned n, bool up)
{
    unsigned i;

    for (i = 0; i < n; i++) {
        cluster_set_link(c, a, peers[i], up);
        cluster_set_link(c, peers[i], a, up);
    }
}

/* Paper Fig. 8 (§5.4.2), scripted on five nodes. S1 leads and gets entry
 * 2 to S2 only; S5 leads a later term with its own entry 2; S1 leads
 * again and gets its old entry 2 onto a majority but not its new-term
 * entry: it must not commit entry 2. S5 then leads again and overwrites
 * entry 2 everywhere; no node ever applies S1's entry 2. */
static void test_figure8(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    char big[101];
    const char *fin[] = {"after", NULL};
    raft_id s;
    raft_id one = 1;
    raft_id five = 5;
    const raft_id others1[4] = {2, 3, 4, 5};
    const raft_id s345[3] = {3, 4, 5};
    struct match_watch w3 = {1, 3};
    struct match_watch w4 = {1, 4};
    raft_term ta;
    raft_term tb;
    raft_index i;

    (void)state;
    memset(big, 'x', 100);
    big[100] = '\0';
    cluster_config_default(&cfg, 5, 8);
    cfg.max_size_per_msg = 50; /* entry 2 travels alone */
    /* The script freezes nodes, which stops their clocks: with
     * check-quorum their leader lease would never expire. The commit rule
     * does not depend on it (the simulation covers both). */
    cfg.disable_check_quorum = true;
    c = cluster_new(&cfg);
    for (s = 2; s <= 5; s++) {
        cluster_freeze(c, s, true);
    }
    /* (a) S1 leads; entry 1 everywhere; entry 2 reaches S2 only. */
    assert_true(cluster_run_until(c, 1000, is_leader, &one));
    cluster_run(c, 100);
    for (s = 1; s <= 5; s++) {
        assert_int_equal(cluster_n_applied(c, s), 1);
    }
    set_links(c, 1, s345, 3, false);
    assert_int_equal(cluster_propose(c, 1, big, 100), 0);
    cluster_run(c, 100);
    ta = raft_current_term(cluster_raft(c, 1));
    assert_int_equal(cluster_durable_term(c, 2, 2), ta);
    assert_int_equal(raft_commit_index(cluster_raft(c, 1)), 1);

    /* (b) S1 crashes; S5 leads a later term with S3, S4 and writes its
     * own entry 2, which reaches nobody; S5 crashes. */
    cluster_crash(c, 1);
    cluster_isolate(c, 2, false);
    cluster_freeze(c, 5, false);
    assert_true(cluster_run_until(c, 1000, is_leader, &five));
    cluster_isolate(c, 5, false);
    cluster_run(c, 50);
    tb = raft_current_term(cluster_raft(c, 5));
    assert_true(tb > ta);
    assert_int_equal(cluster_durable_term(c, 5, 2), tb);
    assert_int_equal(cluster_durable_last(c, 3), 1);
    assert_int_equal(cluster_durable_last(c, 4), 1);
    cluster_crash(c, 5);
    cluster_freeze(c, 5, true);

    /* (c) S1 restarts and leads a later term; its entry 2 reaches S3 and
     * S4, so S1, S2, S3, S4 hold it, but S1's own new-term entry reaches
     * nobody. */
    cluster_restart(c, 1);
    set_links(c, 1, others1, 3, true);
    assert_true(cluster_run_until(c, 2000, is_leader, &one));
    set_links(c, 1, others1, 1, false); /* S2 would take entry 3 */
    assert_true(cluster_run_until(c, 1000, peer_matched_2, &w3) ||
                cluster_run_until(c, 1000, peer_matched_2, &w4));
    while (!(peer_matched_2(c, &w3) && peer_matched_2(c, &w4))) {
        cluster_step(c);
        if (peer_matched_2(c, &w3)) {
            set_links(c, 1, &others1[1], 1, false);
        }
        if (peer_matched_2(c, &w4)) {
            set_links(c, 1, &others1[2], 1, false);
        }
        assert_true(cluster_now(c) < 100000);
    }
    set_links(c, 1, &others1[1], 2, false);
    cluster_run(c, 300);
    assert_int_equal(cluster_durable_term(c, 3, 2), ta);
    assert_int_equal(cluster_durable_term(c, 4, 2), ta);
    assert_int_equal(cluster_durable_last(c, 3), 2);
    assert_true(raft_current_term(cluster_raft(c, 1)) > tb);
    /* §5.4.2: replicated on a majority, but of an older term. */
    assert_int_equal(raft_commit_index(cluster_raft(c, 1)), 1);
    assert_int_equal(cluster_n_applied(c, 1), 1);

    /* (d) S1 crashes; S5 restarts and wins with S2, S3, S4 (its last term
     * is later), overwriting entry 2. */
    cluster_crash(c, 1);
    cluster_heal(c);
    cluster_restart(c, 5);
    cluster_freeze(c, 5, false);
    assert_true(cluster_run_until(c, 2000, is_leader, &five));
    cluster_restart(c, 1);
    for (s = 1; s <= 4; s++) {
        cluster_freeze(c, s, false);
    }
    commit_all(c, fin);
    cluster_run(c, 500);
    for (s = 1; s <= 5; s++) {
        assert_int_equal(cluster_durable_term(c, s, 2), tb);
        assert_true(cluster_n_applied(c, s) >= 2);
        assert_int_equal(cluster_applied(c, s, 1)->term, tb);
    }
    for (i = 2; i <= 4; i++) {
        assert_true(cluster_n_truncations(c, (raft_id)i) >= 1);
    }
    cluster_free(c);
}

/* Hundreds of seeds of random loss, duplication, reordering (random
 * delays), partitions and crashes while clients propose; safety is
 * checked after every step by the harness. After healing, every node
 * applies fresh proposals and all applied sequences agree. */
static void test_random_faults(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 500; seed++) {
        struct cluster_config cfg;
        struct cluster *c;
        uint64_t x = seed * 0x9e3779b97f4a7c15ULL;
        unsigned n = seed % 4 == 0 ? 5 : 3;
        unsigned k = 0;
        uint64_t t;
        char name[64];
        char f1[32];
        char f2[32];
        const char *fin[] = {f1, f2, NULL};
        raft_id id;

        cluster_config_default(&cfg, n, seed);
        cfg.drop_pct = (unsigned)(x % 25);
        cfg.dup_pct = (unsigned)((x >> 8) % 15);
        cfg.net_max = 2 + (unsigned)((x >> 16) % 40);
        cfg.disk_max = 1 + (unsigned)((x >> 24) % 10);
        cfg.max_inflight_msgs = 1 + (unsigned)((x >> 32) % 4);
        cfg.max_size_per_msg = (x >> 36) % 3 == 0 ? 0 : 64;
        c = cluster_new(&cfg);
        for (t = 0; t < 2000; t += 20) {
            raft_id leader = cluster_leader(c);
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            if (leader != 0) {
                snprintf(name, sizeof name, "s%llu-%u",
                         (unsigned long long)seed, k++);
                cluster_propose(c, leader, name, strlen(name));
            }
            switch ((x >> 33) % 40) {
                case 0:
                    cluster_isolate(c, 1 + (raft_id)((x >> 40) % n), false);
                    break;
                case 1:
                case 2:
                    for (id = 1; id <= n; id++) {
                        cluster_isolate(c, id, true);
                    }
                    break;
                case 3:
                    id = 1 + (raft_id)((x >> 40) % n);
                    if (cluster_alive(c, id)) {
                        cluster_crash(c, id);
                    } else {
                        cluster_restart(c, id);
                    }
                    break;
                case 4:
                    id = 1 + (raft_id)((x >> 40) % n);
                    if (!cluster_alive(c, id)) {
                        cluster_restart(c, id);
                    }
                    break;
                default:
                    break;
            }
            cluster_run(c, 20);
        }
        cluster_heal(c);
        cluster_set_faults(c, 0, 0, 1, 5);
        for (id = 1; id <= n; id++) {
            if (!cluster_alive(c, id)) {
                cluster_restart(c, id);
            }
        }
        snprintf(f1, sizeof f1, "final-%llu-a", (unsigned long long)seed);
        snprintf(f2, sizeof f2, "final-%llu-b", (unsigned long long)seed);
        commit_all(c, fin);
        for (id = 2; id <= n; id++) {
            applied_equal(c, 1, id);
        }
        cluster_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_follower_ack_after_persisted),
        cmocka_unit_test(test_handout_from_applied),
        cmocka_unit_test(test_append_edge_cases),
        cmocka_unit_test(test_leader_progress),
        cmocka_unit_test(test_heartbeats),
        cmocka_unit_test(test_commit_three),
        cmocka_unit_test(test_leader_crash_restart),
        cmocka_unit_test(test_divergent_tail),
        cmocka_unit_test(test_figure8),
        cmocka_unit_test(test_random_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
