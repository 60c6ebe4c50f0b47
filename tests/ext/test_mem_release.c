/* The rule of mem_release.h: when the node gives its freed heap back. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ext/runtime/mem_release.h"

/* Nothing freed in bulk (no snapshot, a log that only grows or shrinks
 * by routine compactions): no trim, however long the node runs. */
static void test_routine_work_no_trim(void **state)
{
    struct ext_mem_release m = {0};
    uint64_t now = 1;
    (void)state;
    assert_false(mem_release_due(&m, 0, 0, false, now));
    for (int i = 0; i < 100; i++) {
        now += 700;
        /* 8,192 entries, compacted to 1,024. */
        assert_false(mem_release_due(&m, 0, 8192, false, now));
        assert_false(mem_release_due(&m, 0, 1024, false, now + 1));
    }
    assert_int_equal(m.n_trims, 0);
}

/* A snapshot sent or installed trims at once; the next one once the last
 * trim is EXT__MEM_RELEASE_MS old, and what came in between is covered
 * by that one trim. */
static void test_snapshots_trim_at_most_once_a_period(void **state)
{
    struct ext_mem_release m = {0};
    (void)state;
    assert_true(mem_release_due(&m, 1, 10, false, 5000));
    assert_false(mem_release_due(&m, 1, 10, false, 5001)); /* nothing new */
    assert_false(mem_release_due(&m, 2, 10, false, 5001)); /* too soon */
    assert_false(
        mem_release_due(&m, 3, 10, false, 5000 + EXT__MEM_RELEASE_MS - 1));
    assert_true(mem_release_due(&m, 3, 10, false, 5000 + EXT__MEM_RELEASE_MS));
    assert_int_equal(m.events, 3);
    assert_false(mem_release_due(&m, 3, 10, false, 100000)); /* all covered */
    assert_true(mem_release_due(&m, 4, 10, false, 100000));
    assert_int_equal(m.n_trims, 3);
}

/* A log that shrank by EXT__MEM_RELEASE_ENTRIES or more since the last
 * trim (a compaction after a follower's join held it) trims; the peak
 * then starts again from what the log holds. */
static void test_big_compaction_trims(void **state)
{
    struct ext_mem_release m = {0};
    (void)state;
    assert_false(mem_release_due(&m, 0, 30000, false, 1000));
    assert_false(mem_release_due(&m, 0, 30000 - EXT__MEM_RELEASE_ENTRIES + 1,
                                 false, 2000));
    assert_true(
        mem_release_due(&m, 0, 30000 - EXT__MEM_RELEASE_ENTRIES, false, 3000));
    assert_int_equal(m.peak, 30000 - EXT__MEM_RELEASE_ENTRIES);
    /* 12,592 fewer: not enough. */
    assert_false(mem_release_due(&m, 0, 1024, false, 3200));
    /* Up to 20,000 and down to 1,024 within the period: trimmed once it
     * is over. */
    assert_false(mem_release_due(&m, 0, 20000, false, 3500));
    assert_false(mem_release_due(&m, 0, 1024, false, 3999));
    assert_true(mem_release_due(&m, 0, 1024, false, 4000));
    assert_false(mem_release_due(&m, 0, 1024, false, 9000));
    assert_int_equal(m.n_trims, 2);
}

/* A compaction that left much free (large entries: a bulk load) trims,
 * at once or once the period is over, and only once. */
static void test_much_freed_trims(void **state)
{
    struct ext_mem_release m = {0};
    (void)state;
    assert_true(mem_release_due(&m, 0, 8192, true, 1000));
    assert_false(mem_release_due(&m, 0, 1024, false, 1500));
    assert_false(mem_release_due(&m, 0, 1024, true, 1600)); /* too soon */
    assert_false(mem_release_due(&m, 0, 1024, false, 1999));
    assert_true(mem_release_due(&m, 0, 1024, false, 2000)); /* pending */
    assert_false(mem_release_due(&m, 0, 1024, false, 9000));
    assert_int_equal(m.n_trims, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routine_work_no_trim),
        cmocka_unit_test(test_snapshots_trim_at_most_once_a_period),
        cmocka_unit_test(test_big_compaction_trims),
        cmocka_unit_test(test_much_freed_trims),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
