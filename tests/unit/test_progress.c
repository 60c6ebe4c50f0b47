/* Per-follower replication progress (raft/progress.h): PROBE and
 * REPLICATE, the inflight window, and backtracking on a refusal with the
 * follower's hints (last index, first index of the conflicting term). */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "raft/progress.h"

/* A fresh progress is PROBE at next 1, match 0, not paused; reset starts
 * it over at a given next. */
static void test_init_reset(void **state)
{
    struct raft_peer_progress p;

    (void)state;
    assert_int_equal(progress_init(&p, 3, 0), 0);
    assert_int_equal(p.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(p.next, 1);
    assert_int_equal(p.match, 0);
    assert_false(progress_is_paused(&p));
    progress_reset(&p, 10, 7);
    assert_int_equal(p.next, 10);
    assert_int_equal(p.last_progress, 7);
    progress_reset(&p, 0, 7);
    assert_int_equal(p.next, 1); /* never 0 */
    progress_close(&p);
    assert_null(p.inflights.ring);
}

/* PROBE: one AppendEntries at a time; a refusal of the outstanding probe
 * moves next back to min(reject, last + 1, conflict) and unpauses; a
 * refusal of another probe is stale. */
static void test_probe_backtracking(void **state)
{
    struct raft_peer_progress p;

    (void)state;
    assert_int_equal(progress_init(&p, 2, 0), 0);
    progress_reset(&p, 51, 0);
    progress_sent(&p, progress_take_seq(&p, 0, 1), 50, 0, 0);
    assert_true(progress_is_paused(&p));
    /* Stale: not the outstanding probe (prev 50). */
    assert_false(progress_maybe_decr(&p, 40, 10, 0, 1));
    assert_int_equal(p.next, 51);
    /* The follower is shorter (last 30): jump to 31. */
    assert_true(progress_maybe_decr(&p, 50, 30, 0, 1));
    assert_int_equal(p.next, 31);
    assert_false(progress_is_paused(&p));
    /* Refused within a conflicting term starting at 12: jump to 12, one
     * whole term in one round trip. */
    progress_sent(&p, progress_take_seq(&p, 0, 1), 30, 0, 0);
    assert_true(progress_maybe_decr(&p, 30, 45, 12, 2));
    assert_int_equal(p.next, 12);
    /* A hint below match: the follower lost the log it had acknowledged
     * (wiped); nothing it held is trusted any more. */
    assert_true(progress_maybe_update(&p, 8, 3));
    progress_sent(&p, progress_take_seq(&p, 0, 1), 11, 0, 0);
    assert_true(progress_maybe_decr(&p, 11, 2, 0, 3));
    assert_int_equal(p.match, 0);
    assert_int_equal(p.next, 3);
    /* A conflict index above the other bounds changes nothing. */
    progress_sent(&p, progress_take_seq(&p, 0, 1), 2, 0, 0);
    assert_true(progress_maybe_decr(&p, 2, 100, 50, 4));
    assert_int_equal(p.next, 2);
    progress_close(&p);
}

/* match rises only forward and drags next along; REPLICATE pipelines up
 * to the window, frees slots as answers come, and a refusal above match
 * falls back to PROBE at match + 1 (one at or below match is stale). */
static void test_replicate_window(void **state)
{
    struct raft_peer_progress p;
    uint64_t hb;

    (void)state;
    assert_int_equal(progress_init(&p, 2, 0), 0);
    assert_true(progress_maybe_update(&p, 5, 1));
    assert_false(progress_maybe_update(&p, 4, 2));
    assert_int_equal(p.match, 5);
    assert_int_equal(p.next, 6);
    assert_int_equal(p.last_progress, 1);
    progress_become_replicate(&p, 3);
    assert_int_equal(p.state, RAFT_PROGRESS_REPLICATE);
    /* A heartbeat takes no slot. */
    progress_sent(&p, progress_take_seq(&p, 0, 1), 5, 0, 0);
    assert_int_equal(p.inflights.n, 0);
    progress_sent(&p, progress_take_seq(&p, 0, 1), 8, 3, 0);
    assert_int_equal(p.next, 9);
    assert_false(progress_is_paused(&p));
    progress_sent(&p, progress_take_seq(&p, 0, 1), 10, 2, 0);
    assert_true(progress_is_paused(&p));
    progress_ack(&p, 8);
    assert_int_equal(p.inflights.n, 1);
    assert_false(progress_is_paused(&p));
    /* Wraps around the ring. */
    progress_sent(&p, progress_take_seq(&p, 0, 1), 12, 2, 0);
    progress_ack(&p, 12);
    assert_int_equal(p.inflights.n, 0);
    assert_true(progress_maybe_update(&p, 12, 4));
    /* A refusal at match of a request not in the window (a heartbeat):
     * stale; above match, it resets the window. */
    hb = progress_take_seq(&p, 0, 1);
    assert_int_equal(progress_reject(&p, hb, 12, 3, 0, 5), PROGRESS_IGNORED);
    assert_int_equal(p.state, RAFT_PROGRESS_REPLICATE);
    assert_int_equal(progress_reject(&p, hb, 13, 3, 0, 5), PROGRESS_RESET);
    assert_int_equal(p.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(p.next, 13);
    assert_false(progress_is_paused(&p));
    progress_become_probe(&p, 6);
    assert_int_equal(p.next, 13);
    progress_close(&p);
}

/* send_n sends @k one-entry requests of @bytes bytes from next on and
 * returns the seq of the first. */
static uint64_t send_n(struct raft_peer_progress *p, unsigned k, uint64_t bytes)
{
    uint64_t first = p->next_seq;
    unsigned i;

    for (i = 0; i < k; i++) {
        assert_false(progress_is_paused(p));
        progress_sent(p, progress_take_seq(p, 0, 1), p->next, 1, bytes);
    }
    return first;
}

/* Answers are accounted for in request order. A success is cumulative and
 * frees the window's prefix it covers; a rejection that overtakes the
 * answers of earlier requests waits for them: a success of its
 * predecessors then lets it act (its own request is the oldest), and a
 * success that covers it (a duplicate was accepted) cancels it. A
 * rejection of an accounted request, or of an older window, is ignored;
 * applied, a rejection starts a new window whose epoch makes every
 * answer of the old one stale. */
static void test_in_order(void **state)
{
    struct raft_peer_progress p;
    uint64_t s1;
    uint64_t epoch;

    (void)state;
    assert_int_equal(progress_init(&p, 8, 0), 0);
    progress_reset(&p, 11, 0);
    assert_true(progress_maybe_update(&p, 10, 1));
    progress_become_replicate(&p, 1);
    epoch = p.epoch;
    s1 = send_n(&p, 4, 10); /* seqs s1..s1+3 carry 11, 12, 13, 14 */
    assert_int_equal(p.inflights.n, 4);
    /* The answer to s1+2 (refused: the follower lacked 12) overtakes
     * those of s1 and s1+1: set aside. */
    assert_int_equal(progress_reject(&p, s1 + 2, 12, 10, 0, 2),
                     PROGRESS_DEFERRED);
    assert_int_equal(p.state, RAFT_PROGRESS_REPLICATE);
    /* A later refusal does not replace the earlier one. */
    assert_int_equal(progress_reject(&p, s1 + 3, 13, 10, 0, 2),
                     PROGRESS_DEFERRED);
    assert_true(p.pending.seq == s1 + 2);
    /* s1 succeeds: s1+1 still unanswered, the refusal still waits. */
    assert_true(progress_maybe_update(&p, 11, 3));
    assert_int_equal(progress_ack(&p, 11), 1);
    assert_false(progress_apply_pending(&p, false, 3));
    assert_true(p.acked_seq == s1);
    /* s1+1 succeeds: now the refused request is the oldest: it acts. */
    assert_true(progress_maybe_update(&p, 12, 4));
    assert_int_equal(progress_ack(&p, 12), 1);
    assert_true(progress_apply_pending(&p, false, 4));
    assert_int_equal(p.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(p.next, 13);
    assert_true(p.epoch == epoch + 1);
    /* Everything sent before is of an older window now. */
    assert_true(progress_is_stale(&p, s1 + 3));
    assert_false(progress_is_stale(&p, 0));
    assert_false(progress_is_stale(&p, p.next_seq));

    /* Again in REPLICATE: a refusal set aside, then a success covering
     * the refused request (a duplicate accepted): cancelled. */
    progress_become_replicate(&p, 5);
    s1 = send_n(&p, 3, 10); /* 13, 14, 15 */
    assert_int_equal(progress_reject(&p, s1 + 1, 13, 12, 0, 6),
                     PROGRESS_DEFERRED);
    assert_true(progress_maybe_update(&p, 15, 6));
    assert_int_equal(progress_ack(&p, 15), 3);
    assert_false(progress_apply_pending(&p, false, 6));
    assert_int_equal(p.state, RAFT_PROGRESS_REPLICATE);
    assert_true(p.pending.seq == 0);
    /* A refusal of an accounted request is stale. */
    assert_int_equal(progress_reject(&p, s1 + 2, 14, 12, 0, 6),
                     PROGRESS_IGNORED);
    /* A refusal set aside whose predecessors never answer acts when
     * forced (the heartbeat round). */
    s1 = send_n(&p, 2, 10); /* 16, 17 */
    assert_int_equal(progress_reject(&p, s1 + 1, 16, 15, 0, 7),
                     PROGRESS_DEFERRED);
    assert_false(progress_apply_pending(&p, false, 7));
    assert_true(progress_apply_pending(&p, true, 8));
    assert_int_equal(p.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(p.next, 16);
    /* In PROBE only the outstanding probe's refusal counts. */
    progress_sent(&p, progress_take_seq(&p, 0, 1), 15, 0, 0);
    assert_true(progress_is_paused(&p));
    assert_false(progress_maybe_decr(&p, 14, 3, 0, 9));
    assert_true(progress_maybe_decr(&p, 15, 15, 0, 9));
    assert_int_equal(p.next, 16);
    progress_close(&p);
}

/* The byte limit of the window: a request may carry only the room left;
 * an empty window takes one request of any size. SNAPSHOT pauses. */
static void test_bytes_and_snapshot(void **state)
{
    struct raft_peer_progress p;

    (void)state;
    assert_int_equal(progress_init(&p, 8, 100), 0);
    progress_become_replicate(&p, 0);
    assert_true(progress_room(&p) == 100);
    send_n(&p, 1, 250); /* larger than the limit: alone */
    assert_true(progress_is_paused(&p));
    assert_true(progress_room(&p) == 0);
    assert_int_equal(progress_ack(&p, 1), 1);
    send_n(&p, 1, 60);
    assert_true(progress_room(&p) == 40);
    send_n(&p, 1, 40);
    assert_true(progress_is_paused(&p));
    assert_true(p.inflights.bytes == 100);
    progress_become_snapshot(&p, 50, 3);
    assert_int_equal(p.state, RAFT_PROGRESS_SNAPSHOT);
    assert_int_equal(p.snapshot_index, 50);
    assert_true(progress_is_paused(&p));
    assert_int_equal(p.inflights.n, 0);
    assert_int_equal(progress_reject(&p, p.next_seq, 60, 0, 0, 3),
                     PROGRESS_IGNORED);
    progress_close(&p);
}

/* An answer raises the peer's contact to the send time of the request it
 * answers, never to its arrival and never lower: within a mark gap the
 * newest mark stands for later requests (a lower bound), a request older
 * than the ring falls back to the newest mark dropped, and one older
 * still, or one never sent, counts for nothing. */
static void test_contact_send_time(void **state)
{
    struct raft_peer_progress p;
    uint64_t first;
    uint64_t seq = 0;

    (void)state;
    assert_int_equal(progress_init(&p, 3, 0), 0);
    progress_reset(&p, 1, 100);
    assert_int_equal(p.contact_at, 0);
    first = progress_take_seq(&p, 100, 5); /* mark at 100 */
    assert_int_equal(progress_take_seq(&p, 103, 5), first + 1); /* none */
    progress_take_seq(&p, 105, 5); /* mark at 105 */
    progress_answered(&p, first + 1, 0);
    assert_int_equal(p.contact_at, 100); /* sent at 103: 100 bounds it */
    progress_answered(&p, first + 2, 0);
    assert_int_equal(p.contact_at, 105);
    progress_answered(&p, first, 0); /* a late answer: never lower */
    assert_int_equal(p.contact_at, 105);
    progress_answered(&p, first + 3, 0); /* never sent */
    assert_int_equal(p.contact_at, 105);
    progress_answered(&p, 0, 0); /* answers no request */
    assert_int_equal(p.contact_at, 105);
    /* Fill the ring past its size: the first marks drop out. */
    for (uint64_t t = 110; t < 110 + 5 * (RAFT__SEND_MARKS + 1); t += 5) {
        seq = progress_take_seq(&p, t, 5);
    }
    progress_answered(&p, first, 0);
    assert_int_equal(p.contact_at, 105); /* not covered any more */
    progress_answered(&p, p.mark_floor.seq, 0);
    assert_int_equal(p.contact_at, p.mark_floor.at);
    progress_answered(&p, seq, 0);
    assert_int_equal(p.contact_at, 110 + 5 * RAFT__SEND_MARKS);
    /* A new term forgets both. */
    progress_reset(&p, 1, 900);
    assert_int_equal(p.contact_at, 0);
    progress_answered(&p, seq, 0);
    assert_int_equal(p.contact_at, 0);
    progress_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order),
        cmocka_unit_test(test_bytes_and_snapshot),
        cmocka_unit_test(test_init_reset),
        cmocka_unit_test(test_contact_send_time),
        cmocka_unit_test(test_probe_backtracking),
        cmocka_unit_test(test_replicate_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
