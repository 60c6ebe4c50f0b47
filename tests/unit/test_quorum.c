/* Unit tests of raft/quorum.c: the commit index a set of match indexes
 * allows and the outcome of vote tallies, edge cases included. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "raft/quorum.h"

/* One voter: its own match index is the commit index. */
static void test_commit_single(void **state)
{
    raft_index m[1] = {7};

    (void)state;
    assert_int_equal(quorum_commit_index(m, 1), 7);
}

/* Three voters: the second largest (held by two of three). */
static void test_commit_three(void **state)
{
    raft_index a[3] = {5, 9, 1};
    raft_index b[3] = {0, 0, 4};
    raft_index c[3] = {3, 3, 3};

    (void)state;
    assert_int_equal(quorum_commit_index(a, 3), 5);
    assert_int_equal(quorum_commit_index(b, 3), 0);
    assert_int_equal(quorum_commit_index(c, 3), 3);
}

/* Even sizes need n/2+1: with four voters the third largest. */
static void test_commit_even(void **state)
{
    raft_index two[2] = {8, 3};
    raft_index four[4] = {10, 2, 7, 9};

    (void)state;
    assert_int_equal(quorum_commit_index(two, 2), 3);
    assert_int_equal(quorum_commit_index(four, 4), 7);
}

/* Five voters, unsorted input with duplicates; the input is untouched. */
static void test_commit_five(void **state)
{
    raft_index m[5] = {4, 4, 1, 6, 2};

    (void)state;
    assert_int_equal(quorum_commit_index(m, 5), 4);
    assert_int_equal(m[0], 4);
    assert_int_equal(m[2], 1);
    assert_int_equal(m[4], 2);
}

/* The maximum size, and the degenerate empty set. */
static void test_commit_bounds(void **state)
{
    raft_index m[RAFT_MAX_VOTERS];
    unsigned i;

    (void)state;
    for (i = 0; i < RAFT_MAX_VOTERS; i++) {
        m[i] = i + 1; /* 1..16: 9 voters hold 8 or more */
    }
    assert_int_equal(quorum_commit_index(m, RAFT_MAX_VOTERS), 8);
    assert_int_equal(quorum_commit_index(m, 0), 0);
    assert_int_equal(quorum_commit_index(m, RAFT_MAX_VOTERS + 1), 0);
}

/* A single voter wins with its own vote. */
static void test_vote_single(void **state)
{
    int8_t v[1] = {1};
    int8_t p[1] = {0};
    int8_t l[1] = {-1};

    (void)state;
    assert_int_equal(quorum_vote_result(v, 1), QUORUM_WON);
    assert_int_equal(quorum_vote_result(p, 1), QUORUM_PENDING);
    assert_int_equal(quorum_vote_result(l, 1), QUORUM_LOST);
}

/* Three voters: two grants win, two refusals lose, else pending. */
static void test_vote_three(void **state)
{
    int8_t won[3] = {1, 0, 1};
    int8_t pending[3] = {1, -1, 0};
    int8_t lost[3] = {1, -1, -1};

    (void)state;
    assert_int_equal(quorum_vote_result(won, 3), QUORUM_WON);
    assert_int_equal(quorum_vote_result(pending, 3), QUORUM_PENDING);
    assert_int_equal(quorum_vote_result(lost, 3), QUORUM_LOST);
}

/* Four voters: a 2-2 split can never reach three grants, so it is lost;
 * two grants with two unanswered is still pending. */
static void test_vote_even_split(void **state)
{
    int8_t split[4] = {1, 1, -1, -1};
    int8_t open[4] = {1, 1, 0, 0};
    int8_t won[4] = {1, 1, 1, -1};
    int8_t one_no[4] = {1, 0, 0, -1};

    (void)state;
    assert_int_equal(quorum_vote_result(split, 4), QUORUM_LOST);
    assert_int_equal(quorum_vote_result(open, 4), QUORUM_PENDING);
    assert_int_equal(quorum_vote_result(won, 4), QUORUM_WON);
    assert_int_equal(quorum_vote_result(one_no, 4), QUORUM_PENDING);
}

/* No voters: nothing is decided. */
static void test_vote_empty(void **state)
{
    int8_t v[1] = {1};

    (void)state;
    assert_int_equal(quorum_vote_result(v, 0), QUORUM_PENDING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_single),
        cmocka_unit_test(test_commit_three),
        cmocka_unit_test(test_commit_even),
        cmocka_unit_test(test_commit_five),
        cmocka_unit_test(test_commit_bounds),
        cmocka_unit_test(test_vote_single),
        cmocka_unit_test(test_vote_three),
        cmocka_unit_test(test_vote_even_split),
        cmocka_unit_test(test_vote_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
