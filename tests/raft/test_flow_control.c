/* Pipelined replication and its flow control in the Raft core: the commit
 * index broadcast as soon as it advances, the inflight window in messages
 * and bytes, answers handled in request order (raft/progress.h), window
 * resets on rejection, timeout and RAFT_EVENT_UNREACHABLE, and a follower
 * that loses every third answer still converging. Hand-stepped cores
 * (node 1 the leader of 3) and small clusters (tests/lib/cluster.h). */

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

/* new_leader returns node 1 of 3, leader of term 2 with an empty log
 * (but its NOOP at 1, durable and acknowledged by 2 and 3, so both are
 * in REPLICATE), window @inflight messages and @max_bytes bytes. */
static struct raft *new_leader(unsigned inflight, uint64_t max_bytes,
                               struct raft_update *u)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {1, 0};
    struct raft *r = NULL;
    raft_id id;

    config3(&cfg, 1, 1 << 20, inflight, 9);
    cfg.max_inflight_bytes = max_bytes;
    assert_int_equal(raft_new(&cfg, &hs, 1, NULL, 0, 0, &r), 0);
    make_leader(r, u);
    assert_int_equal(step_persisted(r, 1, 2, u), 0);
    for (id = 2; id <= 3; id++) {
        assert_int_equal(step_result(r, id, true, 0, 1, 0, u), 0);
    }
    assert_int_equal(raft_commit_index(r), 1);
    return r;
}

static struct raft_progress_info progress_of(struct raft *r, raft_id id)
{
    struct raft_progress_info pi;

    assert_int_equal(raft_progress(r, id, &pi), 0);
    return pi;
}

/* When the commit index advances, every REPLICATE follower learns it in
 * the same step (not at the next heartbeat, which would add up to a
 * heartbeat to each write's latency on a follower): the follower whose
 * answer made the majority gets an empty AppendEntries with the new
 * commit, and so does the one whose answer is still on its way. */
static void test_commit_broadcast(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(4, 0, &u);
    const struct raft_append_entries *ae;
    uint64_t seq;

    (void)state;
    assert_int_equal(step_propose(r, 1, 10, 'a', 1, &u), 0);
    seq = append_to(&u, 2, 0)->seq;
    assert_non_null(append_to(&u, 3, 0));
    assert_int_equal(step_persisted(r, 2, 2, &u), 0);
    assert_int_equal(u.n_messages, 0); /* the leader alone: no majority */
    assert_int_equal(step_result(r, 2, true, 0, 2, seq, &u), 0);
    assert_int_equal(raft_commit_index(r), 2);
    ae = append_to(&u, 2, 0);
    assert_non_null(ae);
    assert_int_equal(ae->n_entries, 0);
    assert_int_equal(ae->leader_commit, 2);
    assert_int_equal(ae->prev_log_index, 2);
    ae = append_to(&u, 3, 0);
    assert_non_null(ae);
    assert_int_equal(ae->n_entries, 0);
    assert_int_equal(ae->leader_commit, 2);
    assert_int_equal(ae->prev_log_index, 1); /* what 3 is known to hold */
    /* No advance, no broadcast. */
    assert_int_equal(step_result(r, 2, true, 0, 2, seq, &u), 0);
    assert_int_equal(u.n_messages, 0);
    raft_close(r);
}

/* A window of 8 messages limited to 250 bytes: a message carries at most
 * the room left, so 100-byte entries go two in the first message and no
 * more until an answer frees room. An entry larger than the whole limit
 * goes alone into an empty window. */
static void test_inflight_bytes(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(8, 250, &u);
    struct raft_progress_info pi;
    uint64_t seq;

    (void)state;
    assert_int_equal(step_propose(r, 5, 100, 'a', 1, &u), 0);
    /* A third entry would make 300 > 250: the first message takes two
     * (200 bytes); the room left (50) fits none. */
    assert_int_equal(append_to(&u, 2, 0)->n_entries, 2);
    assert_null(append_to(&u, 2, 1));
    pi = progress_of(r, 2);
    assert_int_equal(pi.inflight, 1);
    assert_true(pi.inflight_bytes == 200);
    seq = append_to(&u, 2, 0)->seq;
    /* Answered: the window is empty again and the next 200 go. */
    assert_int_equal(step_result(r, 2, true, 0, 3, seq, &u), 0);
    assert_int_equal(append_to(&u, 2, 0)->n_entries, 2);
    assert_int_equal(append_to(&u, 2, 0)->prev_log_index, 3);
    assert_null(append_to(&u, 2, 1));
    pi = progress_of(r, 2);
    assert_true(pi.inflight_bytes == 200);
    assert_int_equal(pi.next_index, 6);
    raft_close(r);

    r = new_leader(8, 250, &u);
    assert_int_equal(step_propose(r, 1, 1000, 'a', 1, &u), 0);
    assert_int_equal(append_to(&u, 2, 0)->n_entries, 1);
    assert_true(progress_of(r, 2).inflight_bytes == 1000);
    assert_int_equal(step_propose(r, 1, 1, 'a', 1, &u), 0);
    assert_null(append_to(&u, 2, 0)); /* full */
    raft_close(r);
}

/* Answers out of order: three pipelined requests; the rejection of the
 * third (the follower lacked the second's entries when it arrived) comes
 * first and is set aside; the first's success frees it alone; the
 * second's success frees it and lets the rejection act: the window is
 * reset to PROBE at match + 1, and every answer of the old window is
 * ignored from then on (epoch), duplicates included. */
static void test_results_in_order(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(4, 0, &u);
    uint64_t s[3];
    unsigned i;
    struct raft_progress_info pi;

    (void)state;
    for (i = 0; i < 3; i++) {
        assert_int_equal(step_propose(r, 1, 10, 'a', 1, &u), 0);
        s[i] = append_to(&u, 2, 0)->seq;
        assert_int_equal(append_to(&u, 2, 0)->prev_log_index, 1 + i);
    }
    assert_int_equal(progress_of(r, 2).inflight, 3);
    assert_int_equal(step_result(r, 2, false, 3, 2, s[2], &u), 0);
    pi = progress_of(r, 2);
    assert_int_equal(pi.state, RAFT_PROGRESS_REPLICATE);
    assert_int_equal(pi.inflight, 3);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_result(r, 2, true, 0, 2, s[0], &u), 0);
    pi = progress_of(r, 2);
    assert_int_equal(pi.state, RAFT_PROGRESS_REPLICATE);
    assert_int_equal(pi.inflight, 2);
    assert_int_equal(pi.match_index, 2);
    assert_int_equal(step_result(r, 2, true, 0, 3, s[1], &u), 0);
    pi = progress_of(r, 2);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(pi.match_index, 3);
    assert_int_equal(pi.next_index, 4);
    /* The probe from match goes out at once. */
    assert_non_null(append_to(&u, 2, 0));
    assert_int_equal(append_to(&u, 2, 0)->prev_log_index, 3);
    /* Old-window answers: a duplicate rejection and a success. */
    assert_int_equal(step_result(r, 2, false, 3, 2, s[2], &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_result(r, 2, true, 0, 4, s[2], &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(progress_of(r, 2).match_index, 3);
    raft_close(r);
}

/* RAFT_EVENT_UNREACHABLE resets the window and probes from match at the
 * next heartbeat; a window without answers for an election timeout is
 * reset too. UNREACHABLE and SNAPSHOT_FAILED of a non-voter are invalid;
 * on a follower they change nothing. */
static void test_window_resets(void **state)
{
    struct raft_update u;
    struct raft *r = new_leader(4, 0, &u);
    struct raft_progress_info pi;
    uint64_t seq;
    uint64_t t;

    (void)state;
    assert_int_equal(step_propose(r, 2, 10, 'a', 1, &u), 0);
    seq = append_to(&u, 2, 0)->seq;
    assert_int_equal(progress_of(r, 2).inflight, 1);
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 2, &u), 0);
    assert_int_equal(u.n_messages, 0);
    pi = progress_of(r, 2);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(pi.inflight, 0);
    assert_int_equal(pi.next_index, 2);
    /* The lost request's answer, if it comes after all, is stale. */
    assert_int_equal(step_result(r, 2, true, 0, 3, seq, &u), 0);
    assert_int_equal(progress_of(r, 2).match_index, 1);
    /* Not a member: ignored (it may have been removed meanwhile). */
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 7, &u), 0);
    assert_int_equal(u.n_messages, 0);
    assert_int_equal(step_unreachable(r, RAFT_EVENT_UNREACHABLE, 0, &u),
                     RAFT_INVALID);
    assert_int_equal(step_unreachable(r, RAFT_EVENT_SNAPSHOT_FAILED, 1, &u),
                     RAFT_INVALID);
    /* Node 3 never answers its request: after an election timeout
     * without progress its window is reset and it is probed. */
    assert_int_equal(progress_of(r, 3).inflight, 1);
    for (t = 1000; t < 1200; t++) {
        assert_int_equal(step_tick(r, t, &u), 0);
    }
    pi = progress_of(r, 3);
    assert_int_equal(pi.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(pi.next_index, 2);
    raft_close(r);
}

/* A follower that drops every third AppendEntries answer still
 * converges (a lost answer must not stall the pipelined window): 300
 * proposals of 3 nodes, windows of 4, commit everywhere. */
static void test_drop_every_third_result(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    raft_id leader;
    raft_id lossy;
    char text[32];
    unsigned i;

    (void)state;
    cluster_config_default(&cfg, 3, 404);
    cfg.max_size_per_msg = 24; /* about two entries per message */
    c = cluster_new(&cfg);
    for (i = 0; i < 100 && cluster_leader(c) == 0; i++) {
        cluster_run(c, 50);
    }
    leader = cluster_leader(c);
    assert_int_not_equal(leader, 0);
    lossy = leader == 3 ? 2 : 3;
    cluster_drop_results(c, lossy, 3);
    for (i = 0; i < 300; i++) {
        snprintf(text, sizeof text, "w-%u", i);
        if (cluster_leader(c) != 0) {
            (void)cluster_propose(c, cluster_leader(c), text, strlen(text));
        }
        cluster_run(c, 2);
    }
    cluster_run(c, 3000);
    assert_true(cluster_stats(c).n_dropped_results > 50);
    assert_true(cluster_has_applied(c, lossy, "w-299", 5));
    assert_int_equal(cluster_n_applied(c, lossy),
                     cluster_n_applied(c, cluster_leader(c)));
    assert_int_equal(raft_commit_index(cluster_raft(c, lossy)),
                     raft_commit_index(cluster_raft(c, cluster_leader(c))));
    cluster_free(c);
}

/* A follower-forwarded write, end to end in virtual time: the follower
 * applies the entry well within one heartbeat interval (20 ms) of the
 * leader committing it, because the commit is broadcast (network 1..5 ms,
 * disk 1..3 ms). */
static void test_commit_latency(void **state)
{
    struct cluster_config cfg;
    struct cluster *c;
    raft_id leader;
    raft_id f;
    uint64_t t0;
    uint64_t worst = 0;
    char text[32];
    unsigned i;

    (void)state;
    cluster_config_default(&cfg, 3, 505);
    cfg.heartbeat_interval = 50;
    c = cluster_new(&cfg);
    for (i = 0; i < 100 && cluster_leader(c) == 0; i++) {
        cluster_run(c, 50);
    }
    leader = cluster_leader(c);
    assert_int_not_equal(leader, 0);
    f = leader == 1 ? 2 : 1;
    cluster_run(c, 200);
    for (i = 0; i < 20; i++) {
        snprintf(text, sizeof text, "fwd-%u", i);
        assert_int_equal(cluster_propose(c, leader, text, strlen(text)), 0);
        t0 = cluster_now(c);
        while (!cluster_has_applied(c, f, text, strlen(text)) &&
               cluster_now(c) - t0 < 1000) {
            cluster_step(c);
        }
        assert_true(cluster_has_applied(c, f, text, strlen(text)));
        if (cluster_now(c) - t0 > worst) {
            worst = cluster_now(c) - t0;
        }
        cluster_run(c, 7);
    }
    /* Append (5) + fsync (3) + answer (5) + commit broadcast (5) + fsync
     * on the follower (3): at most 21 ms, far below a 50 ms heartbeat. */
    if (worst > 25) {
        fail_msg("follower applied %llu ms after the proposal",
                 (unsigned long long)worst);
    }
    cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_broadcast),
        cmocka_unit_test(test_inflight_bytes),
        cmocka_unit_test(test_results_in_order),
        cmocka_unit_test(test_window_resets),
        cmocka_unit_test(test_drop_every_third_result),
        cmocka_unit_test(test_commit_latency),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
