/* ReadIndex in the Raft core (thesis §6.4, raft/read_index.c): a read
 * waits for the leader's NOOP to commit, is confirmed by a quorum of
 * answers to a heartbeat round sent after it was registered, is batched
 * with the reads registered before that round, and fails when the
 * leader steps down or no quorum answers within an election timeout. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "raft/raft.h"
#include "tests/raft/step.h"

static int step_read(struct raft *r, uint64_t tag, struct raft_update *u)
{
    struct raft_event e;

    memset(&e, 0, sizeof e);
    e.type = RAFT_EVENT_READ_INDEX;
    e.read_index.tag = tag;
    return raft_step(r, &e, u);
}

/* new_leader makes node 1 of {1, 2, 3} leader of term 1, its NOOP (index
 * 1) persisted but not committed. */
static struct raft *new_leader(struct raft_update *u)
{
    struct raft_config cfg;
    struct raft *r = NULL;

    config3(&cfg, 1, 1024, 8, 7);
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    make_leader(r, u);
    assert_int_equal(step_persisted(r, 1, 1, u), 0);
    return r;
}

/* heartbeat_seq returns the seq of the AppendEntries to @to in @u, 0 when
 * none went. */
static uint64_t heartbeat_seq(const struct raft_update *u, raft_id to)
{
    const struct raft_append_entries *ae = append_to(u, to, 0);

    return ae != NULL ? ae->seq : 0;
}

static void test_not_leader(void **state)
{
    struct raft_config cfg;
    struct raft_update u;
    struct raft *r = NULL;

    (void)state;
    config3(&cfg, 1, 1024, 8, 7);
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    assert_int_equal(step_read(r, 1, &u), RAFT_NOTLEADER);
    assert_int_equal(u.n_reads, 0);
    raft_close(r);
}

static void test_waits_for_noop_then_quorum(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(&u);
    uint64_t seq2;
    uint64_t seq3;

    (void)state;
    /* The NOOP is not committed: no round yet. */
    assert_int_equal(step_read(r, 42, &u), 0);
    assert_int_equal(u.n_reads, 0);
    assert_int_equal(u.n_messages, 0);
    /* Node 2 acknowledges the NOOP: it commits, and the round goes. */
    assert_int_equal(step_result(r, 2, true, 0, 1, 1, &u), 0);
    assert_int_equal(raft_commit_index(r), 1);
    assert_int_equal(u.n_reads, 0);
    seq2 = heartbeat_seq(&u, 2);
    seq3 = heartbeat_seq(&u, 3);
    assert_true(seq2 > 1);
    assert_true(seq3 > 0);
    /* An answer to a request sent before the round does not confirm. */
    assert_int_equal(step_result(r, 3, true, 0, 0, seq3 - 1, &u), 0);
    assert_int_equal(u.n_reads, 0);
    /* Node 3's answer to the round's heartbeat does (with the leader, a
     * quorum of 3), even a rejection. */
    assert_int_equal(step_result(r, 3, false, 0, 0, seq3, &u), 0);
    assert_int_equal(u.n_reads, 1);
    assert_int_equal(u.reads[0].tag, 42);
    assert_int_equal(u.reads[0].status, 0);
    assert_int_equal(u.reads[0].index, 1);
    /* Handed out once. */
    assert_int_equal(step_result(r, 2, true, 0, 1, seq2, &u), 0);
    assert_int_equal(u.n_reads, 0);
    raft_close(r);
}

static void test_batch(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(&u);
    uint64_t seq2;

    (void)state;
    assert_int_equal(step_result(r, 2, true, 0, 1, 1, &u), 0);
    assert_int_equal(step_read(r, 1, &u), 0);
    seq2 = heartbeat_seq(&u, 2);
    assert_true(seq2 > 0);
    /* A read registered while the round runs waits for the next one, and
     * sends nothing. */
    assert_int_equal(step_read(r, 2, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_read(r, 3, &u), 0);
    /* The first round serves read 1 only, and starts the round of 2, 3. */
    assert_int_equal(step_result(r, 2, true, 0, 1, seq2, &u), 0);
    assert_int_equal(u.n_reads, 1);
    assert_int_equal(u.reads[0].tag, 1);
    seq2 = heartbeat_seq(&u, 2);
    assert_true(seq2 > 0);
    assert_int_equal(step_result(r, 2, true, 0, 1, seq2, &u), 0);
    assert_int_equal(u.n_reads, 2);
    assert_int_equal(u.reads[0].tag, 2);
    assert_int_equal(u.reads[1].tag, 3);
    assert_int_equal(u.reads[1].index, 1);
    raft_close(r);
}

static void test_read_index_is_commit_at_round(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(&u);
    uint64_t seq2;

    (void)state;
    assert_int_equal(step_result(r, 2, true, 0, 1, 1, &u), 0);
    assert_int_equal(step_propose(r, 2, 8, 'a', 1, &u), 0);
    assert_int_equal(step_persisted(r, 3, 1, &u), 0);
    seq2 = heartbeat_seq(&u, 2);
    (void)seq2;
    /* Entries 2, 3 committed by node 2's answer. */
    assert_int_equal(step_result(r, 2, true, 0, 3, 2, &u), 0);
    assert_int_equal(raft_commit_index(r), 3);
    assert_int_equal(step_read(r, 9, &u), 0);
    seq2 = heartbeat_seq(&u, 2);
    assert_int_equal(step_result(r, 2, true, 0, 3, seq2, &u), 0);
    assert_int_equal(u.n_reads, 1);
    assert_int_equal(u.reads[0].index, 3);
    raft_close(r);
}

static void test_timeout(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(&u);
    uint64_t now = 1000;

    (void)state;
    assert_int_equal(step_result(r, 2, true, 0, 1, 1, &u), 0);
    assert_int_equal(step_tick(r, now, &u), 0);
    assert_int_equal(step_read(r, 5, &u), 0);
    assert_int_equal(step_tick(r, now + 99, &u), 0);
    assert_int_equal(u.n_reads, 0);
    assert_int_equal(step_tick(r, now + 100, &u), 0);
    assert_int_equal(u.n_reads, 1);
    assert_int_equal(u.reads[0].tag, 5);
    assert_int_equal(u.reads[0].status, RAFT_TIMEOUT);
    assert_int_equal(u.reads[0].index, 0);
    raft_close(r);
}

static void test_step_down_fails_reads(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(&u);

    (void)state;
    assert_int_equal(step_read(r, 7, &u), 0);
    assert_int_equal(step_read(r, 8, &u), 0);
    /* A leader of term 2 appears. */
    assert_int_equal(step_append(r, 3, 2, 0, 0, 0, NULL, 0, &u), 0);
    assert_int_equal(raft_role(r), RAFT_FOLLOWER);
    assert_int_equal(u.n_reads, 2);
    assert_int_equal(u.reads[0].tag, 7);
    assert_int_equal(u.reads[0].status, RAFT_NOTLEADER);
    assert_int_equal(u.reads[1].status, RAFT_NOTLEADER);
    assert_int_equal(step_read(r, 9, &u), RAFT_NOTLEADER);
    raft_close(r);
}

static void test_single_voter(void **state)
{
    static const raft_id voters[1] = {1};
    struct raft_config cfg;
    struct raft_update u;
    struct raft *r = NULL;
    uint64_t t;

    (void)state;
    config3(&cfg, 1, 1024, 8, 7);
    cfg.voters = voters;
    cfg.n_voters = 1;
    assert_int_equal(raft_new(&cfg, NULL, 1, NULL, 0, 0, &r), 0);
    for (t = 0; raft_role(r) != RAFT_LEADER; t++) {
        assert_true(t < 1000);
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    /* Waits for its NOOP, then is ready in the step that commits it. */
    assert_int_equal(step_read(r, 1, &u), 0);
    assert_int_equal(u.n_reads, 0);
    assert_int_equal(step_persisted(r, 1, raft_current_term(r), &u), 0);
    assert_int_equal(u.n_reads, 1);
    assert_int_equal(u.reads[0].index, 1);
    /* Then at once. */
    assert_int_equal(step_read(r, 2, &u), 0);
    assert_int_equal(u.n_reads, 1);
    assert_int_equal(u.reads[0].tag, 2);
    assert_int_equal(u.reads[0].status, 0);
    assert_int_equal(u.reads[0].index, 1);
    raft_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_leader),
        cmocka_unit_test(test_waits_for_noop_then_quorum),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_read_index_is_commit_at_round),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_step_down_fails_reads),
        cmocka_unit_test(test_single_voter),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
