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

#include "raft/frame.h"
#include "raft/raft.h"
#include "tests/lib/cluster.h"
#include "tests/raft/step.h"

static struct raft *new3(raft_id id, raft_term term, raft_id vote,
                         const struct raft_entry *entries, unsigned n)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {term, vote};
    struct raft *r = NULL;

    config3(&cfg, id, 1024, 4, 42);
    assert_int_equal(raft_new(&cfg, &hs, 1, entries, n, 0, &r), 0);
    return r;
}

/* The single RequestVote answer of an update; fails if there is none. */
static const struct raft_request_vote_result *vote_answer(
    const struct raft_update *u)
{
    assert_int_equal(u->n_messages, 1);
    assert_int_equal(u->messages[0].type, RAFT_MSG_REQUEST_VOTE_RESULT);
    return &u->messages[0].request_vote_result;
}

/* raft_new refuses inconsistent configurations and logs (a server that
 * is not a member is valid: it joins, or was removed). */
static void test_new_invalid(void **state)
{
    struct raft_config cfg;
    struct raft *r = NULL;
    raft_id dup[3] = {1, 2, 2};
    raft_id zero[3] = {1, 0, 3};
    struct raft_entry gap[2] = {{1, 1, RAFT_ENTRY_NOOP, NULL},
                                {1, 3, RAFT_ENTRY_NOOP, NULL}};

    (void)state;
    config3(&cfg, 0, 1024, 4, 1);
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1024, 4, 1);
    cfg.voters = dup;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    cfg.voters = zero;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1024, 4, 1);
    cfg.heartbeat_interval = 100;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1024, 4, 1);
    cfg.n_voters = RAFT_MAX_VOTERS + 1;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), RAFT_INVALID);
    config3(&cfg, 1, 1024, 4, 1);
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

        config3(&cfg, 1, 1024, 4, seed);
        assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
        assert_int_equal(step_tick(r, base, &u), 0);
        assert_int_equal(raft_role(r), RAFT_FOLLOWER);
        for (t = base + 1; t < base + 100; t++) {
            assert_int_equal(step_tick(r, t, &u), 0);
            assert_int_equal(raft_role(r), RAFT_FOLLOWER);
            assert_int_equal(u.n_messages, 0);
        }
        for (; t < base + 200 && raft_role(r) == RAFT_FOLLOWER; t++) {
            assert_int_equal(step_tick(r, t, &u), 0);
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
    assert_int_equal(step_request_vote(r, 2, 3, 5, 1, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_int_equal(vote_answer(&u)->term, 3);
    assert_true(u.hard_state_changed); /* the term rose */
    assert_int_equal(u.hard_state.vote, 0);
    /* Same last term, shorter log: refused. */
    assert_int_equal(step_request_vote(r, 2, 3, 1, 2, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_false(u.hard_state_changed);
    /* Same last term, same length: granted, hard state flagged. */
    assert_int_equal(step_request_vote(r, 2, 3, 2, 2, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.term, 3);
    assert_int_equal(u.hard_state.vote, 2);
    /* Another candidate in the same term: refused (one vote per term). */
    assert_int_equal(step_request_vote(r, 3, 3, 9, 3, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    /* The same candidate again: granted again, flagged again. */
    assert_int_equal(step_request_vote(r, 2, 3, 2, 2, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_true(u.hard_state_changed);
    /* An older term: refused, with our term. */
    assert_int_equal(step_request_vote(r, 3, 2, 9, 3, false, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_int_equal(vote_answer(&u)->term, 3);
    /* A later term and a later last term: granted to the new candidate. */
    assert_int_equal(step_request_vote(r, 3, 4, 1, 3, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_int_equal(u.hard_state.term, 4);
    assert_int_equal(u.hard_state.vote, 3);
    assert_int_equal(raft_current_term(r), 4);
    raft_close(r);
}

/* new3_protected is new3 with pre-vote and check-quorum on (the default
 * of a zeroed configuration). */
static struct raft *new3_protected(raft_id id, raft_term term, raft_id vote,
                                   const struct raft_entry *entries, unsigned n)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {term, vote};
    struct raft *r = NULL;

    config3(&cfg, id, 1024, 4, 42);
    cfg.disable_pre_vote = false;
    cfg.disable_check_quorum = false;
    assert_int_equal(raft_new(&cfg, &hs, 1, entries, n, 0, &r), 0);
    return r;
}

/* Thesis §9.6, receiver side: a pre-vote is granted for a later term and
 * an up-to-date log, and refused for a stale log, a stale term (with our
 * term, so the sender catches up) or a term whose vote went elsewhere;
 * nothing ever changes: no term, no vote, no hard state. */
static void test_pre_vote_rules(void **state)
{
    struct raft_entry log[2] = {{1, 1, RAFT_ENTRY_NOOP, NULL},
                                {2, 2, RAFT_ENTRY_NOOP, NULL}};
    struct raft *r = new3_protected(1, 2, 0, log, 2);
    struct raft_update u;

    (void)state;
    /* Later term, up-to-date log: granted with the term asked for. */
    assert_int_equal(step_request_vote(r, 2, 3, 2, 2, true, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_true(vote_answer(&u)->pre_vote);
    assert_int_equal(vote_answer(&u)->term, 3);
    assert_false(u.hard_state_changed);
    assert_int_equal(raft_current_term(r), 2);
    /* Later term, stale log: refused with our term. */
    assert_int_equal(step_request_vote(r, 2, 5, 9, 1, true, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_int_equal(vote_answer(&u)->term, 2);
    assert_false(u.hard_state_changed);
    /* An older term: refused with our term, as a pre-vote answer. */
    assert_int_equal(step_request_vote(r, 3, 1, 9, 9, true, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_true(vote_answer(&u)->pre_vote);
    assert_int_equal(vote_answer(&u)->term, 2);
    /* Our own term: granted while we have no vote and no leader. */
    assert_int_equal(step_request_vote(r, 3, 2, 2, 2, true, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_int_equal(raft_current_term(r), 2);
    raft_close(r);

    /* Our own term, vote given to another: refused; to it: granted. */
    r = new3_protected(1, 2, 3, log, 2);
    assert_int_equal(step_request_vote(r, 2, 2, 2, 2, true, &u), 0);
    assert_false(vote_answer(&u)->vote_granted);
    assert_int_equal(step_request_vote(r, 3, 2, 2, 2, true, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_false(u.hard_state_changed);
    raft_close(r);
}

/* tick_until_pre_vote ticks @r from @t until it sends pre-votes; returns
 * the time reached. */
static uint64_t tick_until_pre_vote(struct raft *r, uint64_t t,
                                    struct raft_update *u)
{
    for (;; t++) {
        assert_int_equal(step_tick(r, t, u), 0);
        if (u->n_messages > 0) {
            return t;
        }
        assert_true(t < 100000);
    }
}

/* Thesis §9.6, pre-candidate side: at its timeout a follower asks pre-votes
 * for term + 1 without changing its term (no hard state to write, so the
 * messages may leave at once); refusals from a majority end the round; a
 * majority of grants starts the real election in term + 1. A refusal with
 * a later term moves it to that term. */
static void test_pre_candidate(void **state)
{
    struct raft *r = new3_protected(1, 4, 0, NULL, 0);
    struct raft_update u;
    uint64_t t;
    unsigned i;

    (void)state;
    t = tick_until_pre_vote(r, 0, &u);
    assert_false(u.hard_state_changed);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 4);
    assert_int_equal(u.n_messages, 2);
    for (i = 0; i < 2; i++) {
        assert_int_equal(u.messages[i].type, RAFT_MSG_REQUEST_VOTE);
        assert_true(u.messages[i].request_vote.pre_vote);
        assert_int_equal(u.messages[i].request_vote.term, 5);
    }
    /* A grant of another round (wrong term) does not count. */
    assert_int_equal(step_vote_result(r, 2, 4, true, true, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    /* Two refusals: the round is lost; nothing happens until the next
     * timeout, and a late grant is ignored. */
    assert_int_equal(step_vote_result(r, 2, 4, false, true, &u), 0);
    assert_int_equal(step_vote_result(r, 3, 4, false, true, &u), 0);
    assert_int_equal(step_vote_result(r, 3, 5, true, true, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 4);
    /* Next round: one grant is a majority with our own. */
    t = tick_until_pre_vote(r, t + 1, &u);
    assert_int_equal(step_vote_result(r, 2, 5, true, true, &u), 0);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(raft_current_term(r), 5);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.vote, 1);
    assert_int_equal(u.n_messages, 2);
    assert_false(u.messages[0].request_vote.pre_vote);
    /* The candidate's election times out: back to a pre-vote round for
     * term 6, still in term 5. */
    t = tick_until_pre_vote(r, t + 1, &u);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 5);
    assert_true(u.messages[0].request_vote.pre_vote);
    assert_int_equal(u.messages[0].request_vote.term, 6);
    /* A refusal from a later term: follow that term. */
    assert_int_equal(step_vote_result(r, 3, 9, false, true, &u), 0);
    assert_int_equal(raft_current_term(r), 9);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.vote, 0);
    raft_close(r);
}

/* Leader stickiness (thesis §6.2, §9.6): a follower that heard from its
 * leader within the minimum election timeout ignores RequestVote and
 * pre-votes of later terms (no answer, no term change); after that it
 * answers them again. Same-term requests are always answered. */
static void test_leader_stickiness(void **state)
{
    struct raft *r = new3_protected(1, 2, 0, NULL, 0);
    struct raft_update u;

    (void)state;
    assert_int_equal(step_tick(r, 1000, &u), 0);
    /* A heartbeat from leader 2. */
    assert_int_equal(step_append(r, 2, 2, 0, 0, 0, NULL, 0, &u), 0);
    assert_int_equal(raft_leader_id(r), 2);
    assert_int_equal(step_tick(r, 1099, &u), 0);
    assert_int_equal(step_request_vote(r, 3, 3, 0, 0, false, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_false(u.hard_state_changed);
    assert_int_equal(step_request_vote(r, 3, 3, 0, 0, true, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_current_term(r), 2);
    assert_int_equal(step_request_vote(r, 3, 2, 0, 0, false, &u), 0);
    /* Same term: the usual rules (no vote given yet: granted). */
    assert_true(vote_answer(&u)->vote_granted);
    /* The lease ends an election timeout after the last heartbeat. */
    assert_int_equal(step_tick(r, 1100, &u), 0);
    assert_int_equal(step_request_vote(r, 3, 3, 0, 0, true, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_int_equal(raft_current_term(r), 2);
    assert_int_equal(step_request_vote(r, 3, 3, 0, 0, false, &u), 0);
    assert_true(vote_answer(&u)->vote_granted);
    assert_int_equal(raft_current_term(r), 3);
    raft_close(r);

    /* Without check-quorum there is no lease. */
    {
        struct raft_config cfg;
        config3(&cfg, 1, 1024, 4, 42);
        assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
        assert_int_equal(step_tick(r, 1000, &u), 0);
        assert_int_equal(step_append(r, 2, 2, 0, 0, 0, NULL, 0, &u), 0);
        assert_int_equal(step_request_vote(r, 3, 3, 0, 0, false, &u), 0);
        assert_true(vote_answer(&u)->vote_granted);
        raft_close(r);
    }
}

/* Check-quorum (thesis §6.2): a leader steps down when a whole election
 * timeout passes without hearing from a majority; a leader that hears
 * from one peer per round stays; a leader in its lease ignores later-term
 * RequestVote. */
static void test_check_quorum(void **state)
{
    struct raft *r = new3_protected(1, 0, 0, NULL, 0);
    struct raft_update u;
    uint64_t t;

    (void)state;
    t = tick_until_pre_vote(r, 0, &u);
    assert_int_equal(step_vote_result(r, 2, 1, true, true, &u), 0);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(step_vote_result(r, 2, 1, true, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    /* In its lease, the leader ignores a later-term RequestVote. */
    assert_int_equal(step_request_vote(r, 3, 7, 9, 9, false, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(raft_current_term(r), 1);
    /* Node 2 answers within each round: the leader stays. */
    assert_int_equal(step_tick(r, t + 50, &u), 0);
    assert_int_equal(step_result_term(r, 2, 1, false, 99, 0, 0, &u), 0);
    assert_int_equal(step_tick(r, t + 100, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(step_tick(r, t + 150, &u), 0);
    assert_int_equal(step_result_term(r, 2, 1, false, 99, 0, 0, &u), 0);
    assert_int_equal(step_tick(r, t + 200, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    /* A round of silence: step down, same term, no leader known. */
    assert_int_equal(step_tick(r, t + 299, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(step_tick(r, t + 300, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 1);
    assert_int_equal(raft_leader_id(r), 0);
    assert_false(u.hard_state_changed);
    raft_close(r);
}

/* A server whose driver cannot persist stops leading and campaigning
 * (STORAGE_STALLED) and campaigns again once it can: a leader whose log
 * disk is full must not keep its followers from electing one that can
 * write. */
static void test_storage_stalled(void **state)
{
    struct raft *r = new3(1, 0, 0, NULL, 0);
    struct raft_event e;
    struct raft_update u;
    uint64_t t;

    (void)state;
    make_leader(r, &u);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_STORAGE_STALLED;
    e.storage.stalled = true;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_true(raft_storage_stalled(r));
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_leader_id(r), 0);
    assert_int_equal(raft_current_term(r), 1);
    assert_false(u.hard_state_changed);
    assert_int_equal(u.n_messages, 0);
    /* Stalled: many election timeouts pass with no pre-vote round. */
    for (t = 1000; t <= 6000; t += 50) {
        assert_int_equal(step_tick(r, t, &u), 0);
        assert_int_equal(u.n_messages, 0);
        assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    }
    /* It still answers a candidate (the answer waits for the disk). */
    assert_int_equal(step_request_vote(r, 2, 2, 9, 9, false, &u), 0);
    assert_int_equal(raft_current_term(r), 2);
    assert_true(vote_answer(&u)->vote_granted);
    /* Once it can write again, it campaigns after an election timeout,
     * no sooner. */
    e.storage.stalled = false;
    assert_int_equal(raft_step(r, &e, &u), 0);
    assert_false(raft_storage_stalled(r));
    t -= 50; /* the last tick */
    assert_int_equal(step_tick(r, t + 99, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_tick(r, t + 200, &u), 0);
    assert_int_equal(u.n_messages, 2);
    assert_int_equal(u.messages[0].type, RAFT_MSG_REQUEST_VOTE);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(raft_current_term(r), 3);
    raft_close(r);
}

/* A candidate becomes a follower on any message of a higher term, and
 * becomes leader once a majority granted its vote, appending a NOOP. */
static void test_candidate_outcomes(void **state)
{
    struct raft *r = new3(1, 0, 0, NULL, 0);
    struct raft_update u;
    uint64_t t;

    (void)state;
    for (t = 0; raft_role(r) != RAFT_CANDIDATE; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    assert_int_equal(raft_current_term(r), 1);
    assert_int_equal(step_vote_result(r, 2, 1, false, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_CANDIDATE);
    assert_int_equal(step_vote_result(r, 3, 1, true, false, &u), 0);
    assert_int_equal(raft_role(r), RAFT_LEADER);
    assert_int_equal(raft_leader_id(r), 1);
    assert_int_equal(u.n_entries, 1);
    assert_int_equal(u.entries[0].type, RAFT_ENTRY_NOOP);
    assert_int_equal(u.entries[0].term, 1);
    assert_int_equal(u.entries[0].index, 1);
    assert_int_equal(u.n_messages, 2); /* AppendEntries to both */
    assert_int_equal(u.messages[0].type, RAFT_MSG_APPEND_ENTRIES);

    /* A result of a higher term: step down, hard state changes. */
    assert_int_equal(step_result_term(r, 2, 7, false, 0, 0, 0, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(r), 7);
    assert_true(u.hard_state_changed);
    assert_int_equal(u.hard_state.term, 7);
    assert_int_equal(u.hard_state.vote, 0);
    assert_int_equal(raft_leader_id(r), 0);
    raft_close(r);
}

/* Malformed events: a message to someone else, a type the core does not
 * have (the runtime's frame types, frame.h), a sender of id 0 or our own,
 * a PROPOSE on a follower; each fails and leaves the update empty and the
 * core unchanged. */
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
    e.receive.from = 0;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.receive.from = 1;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.receive.from = 2;
    e.receive.type = RAFT_FRAME_FORWARD;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.receive.type = RAFT_FRAME_SNAPSHOT_CHUNK_RESULT;
    assert_int_equal(raft_step(r, &e, &u), RAFT_INVALID);
    e.receive.type = 0;
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
    assert_int_equal(step_tick(r, 50, &u), 0);
    assert_int_equal(step_tick(r, 49, &u), RAFT_INVALID);
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

/* When the leader is isolated, the others elect a new one in a higher term
 * while the old one steps down (check-quorum) at its own term (pre-vote);
 * once healed, it follows the new leader in the new term. */
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
    /* Check-quorum: cut off from the majority, it stepped down; pre-vote:
     * it never raised its term. */
    assert_int_equal(raft_role(cluster_raft(c, old)), RAFT_FOLLOWER);
    assert_int_equal(raft_current_term(cluster_raft(c, old)), term);
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
        cmocka_unit_test(test_pre_vote_rules),
        cmocka_unit_test(test_pre_candidate),
        cmocka_unit_test(test_leader_stickiness),
        cmocka_unit_test(test_check_quorum),
        cmocka_unit_test(test_storage_stalled),
        cmocka_unit_test(test_candidate_outcomes),
        cmocka_unit_test(test_invalid_events),
        cmocka_unit_test(test_single_node),
        cmocka_unit_test(test_cluster_election),
        cmocka_unit_test(test_reelection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
