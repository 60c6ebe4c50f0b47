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
    assert_int_equal(progress_init(&p, 3), 0);
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
    assert_null(p.inflights);
}

/* PROBE: one AppendEntries at a time; a refusal of the outstanding probe
 * moves next back to min(reject, last + 1, conflict) and unpauses; a
 * refusal of another probe is stale. */
static void test_probe_backtracking(void **state)
{
    struct raft_peer_progress p;

    (void)state;
    assert_int_equal(progress_init(&p, 2), 0);
    progress_reset(&p, 51, 0);
    progress_sent(&p, 50, 0);
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
    progress_sent(&p, 30, 0);
    assert_true(progress_maybe_decr(&p, 30, 45, 12, 2));
    assert_int_equal(p.next, 12);
    /* A hint below match is clamped to match + 1. */
    assert_true(progress_maybe_update(&p, 8, 3));
    progress_sent(&p, 11, 0);
    assert_true(progress_maybe_decr(&p, 11, 2, 1, 3));
    assert_int_equal(p.next, 9);
    /* A conflict index above the other bounds changes nothing. */
    progress_sent(&p, 8, 0);
    assert_true(progress_maybe_decr(&p, 8, 100, 50, 4));
    assert_int_equal(p.next, 9);
    progress_close(&p);
}

/* match rises only forward and drags next along; REPLICATE pipelines up
 * to the window, frees slots as answers come, and a refusal above match
 * falls back to PROBE at match + 1 (one at or below match is stale). */
static void test_replicate_window(void **state)
{
    struct raft_peer_progress p;

    (void)state;
    assert_int_equal(progress_init(&p, 2), 0);
    assert_true(progress_maybe_update(&p, 5, 1));
    assert_false(progress_maybe_update(&p, 4, 2));
    assert_int_equal(p.match, 5);
    assert_int_equal(p.next, 6);
    assert_int_equal(p.last_progress, 1);
    progress_become_replicate(&p, 3);
    assert_int_equal(p.state, RAFT_PROGRESS_REPLICATE);
    progress_sent(&p, 5, 0); /* a heartbeat takes no slot */
    assert_int_equal(p.n_inflight, 0);
    progress_sent(&p, 8, 3);
    assert_int_equal(p.next, 9);
    assert_false(progress_is_paused(&p));
    progress_sent(&p, 10, 2);
    assert_true(progress_is_paused(&p));
    progress_free_le(&p, 8);
    assert_int_equal(p.n_inflight, 1);
    assert_false(progress_is_paused(&p));
    progress_sent(&p, 12, 2); /* wraps around the ring */
    progress_free_le(&p, 12);
    assert_int_equal(p.n_inflight, 0);
    assert_true(progress_maybe_update(&p, 12, 4));
    assert_false(progress_maybe_decr(&p, 12, 3, 0, 5));
    assert_int_equal(p.state, RAFT_PROGRESS_REPLICATE);
    assert_true(progress_maybe_decr(&p, 13, 3, 0, 5));
    assert_int_equal(p.state, RAFT_PROGRESS_PROBE);
    assert_int_equal(p.next, 13);
    assert_false(progress_is_paused(&p));
    progress_become_probe(&p, 6);
    assert_int_equal(p.next, 13);
    progress_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_reset),
        cmocka_unit_test(test_probe_backtracking),
        cmocka_unit_test(test_replicate_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
