/* Leader election in the Raft core (paper §5.2, §5.4.1, Fig. 2): timers,
 * RequestVote and its rules, term changes, and the driver contract for the
 * hard state; single cores stepped by hand and clusters via
 * tests/lib/cluster.h. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "raft/raft.h"
#include "tests/lib/cluster.h"

static const raft_id voters3[3] = {1, 2, 3};

static void config3(struct raft_config *cfg, raft_id id, uint64_t seed)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->id = id;
    cfg->voters = voters3;
    cfg->n_voters = 3;
    cfg->election_timeout = 100;
    cfg->heartbeat_interval = 20;
    cfg->max_size_per_msg = 1024;
    cfg->max_inflight_msgs = 4;
    cfg->seed = seed;
}

static struct raft *new3(raft_id id, raft_term term, raft_id vote,
                         const struct raft_entry *entries, unsigned n)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {term, vote};
    struct raft *r = NULL;

    config3(&cfg, id, 42);
    assert_int_equal(raft_new(&cfg, &hs, 1, entries, n, 0, &r), 0);
    return r;
}

static int tick(struct raft *r, uint64_t now, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_TICK;
    e.tick.now = now;
    return raft_step(r, &e, u);
}

static int request_vote(struct raft *r, raft_id from, raft_term term,
                        raft_index last_index, raft_term last_term,
                        bool pre_vote, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_RECEIVE;
    e.receive.type = RAFT_MSG_REQUEST_VOTE;
    e.receive.from = from;
    e.receive.to = 1;
    e.receive.request_vote.term = term;
    e.receive.request_vote.last_log_index = last_index;
    e.receive.request_vote.last_log_term = last_term;
    e.receive.request_vote.pre_vote = pre_vote;
    return raft_step(r, &e, u);
}

/* The single RequestVote answer of an update; fails if there is none. */
static const struct raft_request_vote_result *vote_answer(
    const struct raft_update *u)
{
    assert_int_equal(u->n_messages, 1);
    assert_int_equal(u->messages[0].type, RAFT_MSG_REQUEST_VOTE_RESULT);
    return &u->messages[0].request_vote_result;
}

/* raft_new refuses inconsistent configurations and logs. */
static void test_new_invalid(void **state)
{
    struct raft_config cfg;
    struct raft *r = NULL;
    raft_id dup[3] = {1, 2, 2};
    raft_id zero[3] = {1, 0, 3};
    struct raft_entry gap[2] = {{1, 1, RAFT_ENTRY_NOOP, NULL},
                                {1, 3, RAFT_ENTRY_NOOP, NULL}};

    (void)state;
    config3(&cfg, 4, 1);
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1);
    cfg.voters = dup;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    cfg.voters = zero;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1);
    cfg.heartbeat_interval = 100;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1);
    cfg.n_voters = RAFT_MAX_VOTERS + 1;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1);
    assert_int_equal(raft_new(&cfg, NULL, 1, gap, 2, 0, &r), RAFT_INVALID);
    assert_null(r);
}

/* The election timeout is randomized in [T, 2T) from the first tick, which
 * sets the time base; the candidate bumps its term, votes for itself and
 * asks the others, in one update flagged hard_state_changed. */
static void test_timeout_range(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 0; seed < 50; seed++) {
        struct raft_config cfg;
        struct raft *r = NULL;
        struct raft_update u;
        uint64_t base = 1000000 + seed * 7;
        uint64_t t;
        unsigned i;

        config3(&cfg, 1, seed);
        assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
        assert_int_equal(tick(r, base, &u), 0);
        assert_int_equal(raft_role(r), RAFT_FOLLOWER);
        for (t = base + 1; t < base + 100; t++) {
            assert_int_equal(tick(r, t, &u), 0);
            assert_int_equal(raft_role(r), RAFT_FOLLOWER);
            assert_int_equal(u.n_messages, 0);
        }
        for (; t < base + 200 && raft_role(r) == RAFT_FOLLOWER; t++) {
            assert_int_equal(tick(r, t, &u), 0);
        }
        if (raft_role(r) != RAFT_CANDIDATE) {
            print_error("seed %llu\n", (unsigned long long)seed);
        }
        assert_int_equal(raft_role(r), RAFT_CANDIDATE);
        assert_int_equal(raft_current_term(r), 1);
        assert_true(u.hard_state_changed);
        assert_int_equal(u.hard_state.term, 1);
        assert_int_equal(u.hard_state.vote, 1);
        assert_int_equal(u.n_messages, 2);
        for (i = 0; i < 2; i++) {
            assert_int_equal(u.messages[i].type, RAFT_MSG_REQUEST_VOTE);
            assert_int_equal(u.messages[i].request_vote.term, 1);
            assert_false(u.messages[i].request_vote.pre_vote);
        }
        raft_close(r);
    }
}

/* A vote is granted once per term, to a log at least as up-to-date
 * (§5.4.1); a granted vote is flagged as a hard state change in the same
 * update as the answer, so the driver holds the answer until durable. */
static void test_vote_rules(void **state)
{
    struct raft_entry log[2] = {{1, 1, RAFT_ENTRY_NOOP, NULL},
                                {2, 2, RAFT_ENTRY_NOOP, NULL}};
    struct raft *r = new3(1, 2, 0, log, 2);
    struct raft_update u;

    (void)state;
    /* Older last term: refused, though the log is longer. */
    assert_int_equal(request_vote(r, 2, 3, 5, 1, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_int_equal(vote_answer(&u)->term, 3);
    assert_true(u.hard_state_changed); /* the term rose */
    assert_int_equal(u.hard_state.vote, 0);
    /* Same last term, shorter log: refused. */
    assert_int_equal(request_vote(r, 2, 3, 1, 2, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_false(u.hard_state_changed);
    /* Same last term, same length: granted, hard state flagged. */
    assert_int_equal(request_vote(r, 2, 3, 2, 2, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.term, 3);
    assert_int_equal(u.hard_state.vote, 2);
    /* Another candidate in the same term: refused (one vote per term). */
    assert_int_equal(request_vote(r, 3, 3, 9, 3, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    /* The same candidate again: granted again, flagged again. */
    assert_int_equal(request_vote(r, 2, 3, 2, 2, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_true(u.hard_state_changed);
    /* An older term: refused, with our term. */
    assert_int_equal(request_vote(r, 3, 2, 9, 3, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_int_equal(vote_answer(&u)->term, 3);
    /* A later term and a later last term: granted to the new candidate. */
    assert_int_equal(request_vote(r, 3, 4, 1, 3, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_int_equal(u.hard_state.term, 4);
    assert_int_equal(u.hard_state.vote, 3);
    assert_int_equal(raft_current_term(r), 4);
    raft_close(r);
}

/* A pre-vote request is answered "not granted" and changes nothing. */
static void test_pre_vote_refused(void **state)
{
    struct raft *r = new3(1, 2, 0, NULL, 0);
    struct raft_update u;

    (void)state;
    assert_int_equal(request_vote(r, 2, 5, 10, 4, true, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_true(vote_answer(&u)->pre_vote);
    assert_false(u.hard_state_changed);
    assert_int_equal(raft_current_term(r), 2);
    raft_close(r);
}

/* A candidate becomes a follower on any message of a higher term, and
 * becomes leader once a majority granted its vote, appending a NOOP. */
static void test_candidate_outcomes(void **state)
{
    struct raft *r = new3(1, 0, 0, NULL, 0);
    struct raft_update u;
    struct raft_event e;
    uint64_t t;

    (void)state;
    for (t = 0; raft_role(r) != RAFT_CANDIDATE; t++) {
        assert_int_equal(tick(r, t, &u), 0);
    }
    assert_int_equal(raft_current_term(r), 1);
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_RECEIVE;
    e.receive.type = RAFT_MSG_REQUEST_VOTE_RESULT;
    e.receive.from = 2;
    e.receive.to = 1;
    e.receive.request_vote_result.term = 1;
    e.receive.request_vote_result.vote_granted = false;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    e.receive.from = 3;
    e.receive.request_vote_result.vote_granted = true;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(raft_leader_id(r), 1);
    assert_int_equal(u.n_entries, 1);
    assert_int_equal(u.entries[0].type, RAFT_ENTRY_NOOP);
    assert_int_equal(u.entries[0].term, 1);
    assert_int_equal(u.entries[0].index, 1);
    assert_int_equal(u.n_messages, 2); /* AppendEntries to both */
    assert_int_equal(u.messages[0].type, RAFT_MSG_APPEND_ENTRIES);

    /* A result of a higher term: step down, hard state changes. */
    e.receive.type = RAFT_MSG_APPEND_ENTRIES_RESULT;
    e.receive.from = 2;
    memset(&e.receive.append_entries_result, 0,
           sizeof e.receive.append_entries_result);
    e.receive.append_entries_result.term = 7;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 7);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.term, 7);
    assert_int_equal(u.hard_state.vote, 0);
    assert_int_equal(raft_leader_id(r), 0);
    raft_close(r);
}

/* Malformed events: a message to someone else, forwarding messages, a
 * sender that is not a voter, a PROPOSE on a follower; each fails and
 * leaves the update empty and the core unchanged. */
static void test_invalid_events(void **state)
{
    struct raft *r = new3(1, 3, 0, NULL, 0);
    struct raft_update u;
    struct raft_event e;
    struct raft_buf *b = raft_buf_copy("x", 1);

    (void)state;
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_RECEIVE;
    e.receive.type = RAFT_MSG_REQUEST_VOTE;
    e.receive.from = 2;
    e.receive.to = 3;
    e.receive.request_vote.term = 9;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    assert_int_equal(u.n_messages, 0);
    assert_false(u.hard_state_changed);
    e.receive.to = 1;
    e.receive.from = 9;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.receive.from = 2;
    e.receive.type = RAFT_MSG_FORWARD;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.receive.type = RAFT_MSG_FORWARD_RESULT;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    assert_int_equal(raft_current_term(r), 3);

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_PROPOSE;
    e.propose.bufs = &b;
    e.propose.n = 1;
    assert_int_equal(raft_step(r, &e, &u), RAFT_NOTLEADER);
    assert_int_equal(u.n_entries, 0);
    assert_int_equal(raft_last_index(r), 0);
    e.type = 99;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);

    /* Time never goes back. */
    assert_int_equal(tick(r, 50, &u), 0);
    assert_int_equal(tick(r, 49, &u), RAFT_INVALID);
    raft_buf_unref(b);
    raft_close(r);
}

/* A single voter elects itself at its first timeout and commits a
 * proposal once its own write is persisted. */
static void test_single_node(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    uint64_t seed = 7;

    (void)state;
    cluster_config_default(&cfg, 1, seed);
    c = cluster_new(&cfg);
    cluster_run(c, 250);
    assert_int_equal(cluster_leader(c), 1);
    assert_int_equal(raft_current_term(cluster_raft(c, 1)), 1);
    assert_int_equal(cluster_propose(c, 1, "hello", 5), 0);
    assert_int_equal(cluster_propose(c, 1, "world", 5), 0);
    cluster_run(c, 50);
    assert_int_equal(cluster_n_applied(c, 1), 3); /* NOOP + 2 */
    assert_int_equal(cluster_applied(c, 1, 0)->type, RAFT_ENTRY_NOOP);
    assert_true(cluster_has_applied(c, 1, "hello", 5));
    assert_true(cluster_has_applied(c, 1, "world", 5));
    assert_int_equal(raft_commit_index(cluster_raft(c, 1)), 3);
    cluster_free(c);
}

static bool all_agree_on_leader(struct cluster *c, void *arg)
{
    raft_id leader = cluster_leader(c);
    unsigned n = *(unsigned *)arg;
    raft_id i;

    if (leader == 0) {
        return false;
    }
    for (i = 1; i <= n; i++) {
        struct raft *r = cluster_raft(c, i);
        if (r == NULL || raft_leader_id(r) != leader ||
            raft_current_term(r) !=
                raft_current_term(cluster_raft(c, leader))) {
            return false;
        }
    }
    return true;
}

/* Three and five nodes elect exactly one leader per term (the harness
 * checks after every step) and every node learns it, for many seeds. */
static void test_cluster_election(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 60; seed++) {
        struct cluster_config cfg;
        struct cluster *c;
        unsigned n = seed % 2 ? 3 : 5;

        cluster_config_default(&cfg, n, seed);
        c = cluster_new(&cfg);
        if (!cluster_run_until(c, 2000, all_agree_on_leader, &n)) {
            cluster_fail(c, "no agreed leader");
        }
        /* Stable afterwards: heartbeats keep the term. */
        {
            raft_id leader = cluster_leader(c);
            raft_term term = raft_current_term(cluster_raft(c, leader));
            cluster_run(c, 1000);
            if (cluster_leader(c) != leader ||
                raft_current_term(cluster_raft(c, leader)) != term) {
                cluster_fail(c, "leadership changed without faults");
            }
        }
        cluster_free(c);
    }
}

/* When the leader is isolated, the others elect a new one in a higher term;
 * once healed, the old leader steps down to that term. */
static void test_reelection(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    unsigned n = 3;
    raft_id old;
    raft_term term;

    (void)state;
    cluster_config_default(&cfg, 3, 11);
    c = cluster_new(&cfg);
    assert_true(cluster_run_until(c, 2000, all_agree_on_leader, &n));
    old = cluster_leader(c);
    term = raft_current_term(cluster_raft(c, old));
    cluster_isolate(c, old, false);
    cluster_run(c, 1000);
    assert_int_not_equal(cluster_leader(c), old);
    assert_true(raft_current_term(cluster_raft(c, cluster_leader(c))) > term);
    assert_int_equal(raft_role(cluster_raft(c, old)), RAFT_LEADER);
    cluster_heal(c);
    assert_true(cluster_run_until(c, 2000, all_agree_on_leader, &n));
    assert_int_not_equal(cluster_leader(c), old);
    assert_int_equal(raft_role(cluster_raft(c, old)), RAFT_FOLLOWER);
    cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_invalid),
        cmocka_unit_test(test_timeout_range),
        cmocka_unit_test(test_vote_rules),
        cmocka_unit_test(test_pre_vote_refused),
        cmocka_unit_test(test_candidate_outcomes),
        cmocka_unit_test(test_invalid_events),
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_cluster_election),
        cmocka_unit_test(test_reelection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
