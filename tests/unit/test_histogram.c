/* Unit tests of raft/histogram.c: which bucket an observation falls in
 * (a bound is inclusive), the cumulative counts up to +Inf, the sum, and
 * a copy read apart from its owner. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "raft/histogram.h"

static const double bounds[3] = {1, 2, 5};

/* An observation goes in the first bucket whose bound it does not exceed:
 * a value on a bound is in that bound's bucket, one above the last in
 * +Inf. */
static void test_buckets(void **state)
{
    struct raft_histogram h;

    (void)state;
    raft_histogram_init(&h, bounds, 3);
    raft_histogram_observe(&h, 0.5);
    raft_histogram_observe(&h, 1);
    raft_histogram_observe(&h, 1.5);
    raft_histogram_observe(&h, 5);
    raft_histogram_observe(&h, 7);
    assert_int_equal(h.buckets[0], 2);
    assert_int_equal(h.buckets[1], 1);
    assert_int_equal(h.buckets[2], 1);
    assert_int_equal(h.buckets[3], 1);
    assert_int_equal(h.count, 5);
    assert_true(h.sum > 14.99 && h.sum < 15.01);
}

/* The cumulative counts rise to the count at +Inf (index n_bounds), and a
 * copy answers alike while the original goes on. */
static void test_cumulative_and_copy(void **state)
{
    struct raft_histogram h, copy;

    (void)state;
    raft_histogram_init(&h, bounds, 3);
    assert_int_equal(raft_histogram_cumulative(&h, 3), 0);
    raft_histogram_observe(&h, 2);
    raft_histogram_observe(&h, 3);
    raft_histogram_observe(&h, 100);
    copy = h;
    raft_histogram_observe(&h, 0);
    assert_int_equal(raft_histogram_cumulative(&copy, 0), 0);
    assert_int_equal(raft_histogram_cumulative(&copy, 1), 1);
    assert_int_equal(raft_histogram_cumulative(&copy, 2), 2);
    assert_int_equal(raft_histogram_cumulative(&copy, 3), 3);
    assert_int_equal(raft_histogram_cumulative(&h, 0), 1);
    assert_int_equal(raft_histogram_cumulative(&h, 3), 4);
}

/* The shared bucket sets ascend and fit; more bounds than the most are
 * cut to it. */
static void test_bucket_sets(void **state)
{
    struct raft_histogram h;
    double many[RAFT_HISTOGRAM_BOUNDS_MAX + 4];

    (void)state;
    assert_true(raft_histogram_n_seconds <= RAFT_HISTOGRAM_BOUNDS_MAX);
    assert_true(raft_histogram_n_sizes <= RAFT_HISTOGRAM_BOUNDS_MAX);
    for (unsigned i = 1; i < raft_histogram_n_seconds; i++) {
        assert_true(raft_histogram_seconds[i] > raft_histogram_seconds[i - 1]);
    }
    for (unsigned i = 1; i < raft_histogram_n_sizes; i++) {
        assert_true(raft_histogram_sizes[i] > raft_histogram_sizes[i - 1]);
    }
    for (unsigned i = 0; i < RAFT_HISTOGRAM_BOUNDS_MAX + 4; i++) {
        many[i] = i + 1;
    }
    raft_histogram_init(&h, many, RAFT_HISTOGRAM_BOUNDS_MAX + 4);
    assert_int_equal(h.n_bounds, RAFT_HISTOGRAM_BOUNDS_MAX);
    raft_histogram_observe(&h, 1000);
    assert_int_equal(h.buckets[RAFT_HISTOGRAM_BOUNDS_MAX], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_cumulative_and_copy),
        cmocka_unit_test(test_bucket_sets),
    };
    return cmocka_run_group_tests_name("histogram", tests, NULL, NULL);
}
