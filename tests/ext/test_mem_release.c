/* The rule of mem_release.h: when the node gives its freed heap back. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ext/runtime/mem_release.h"

/* Nothing freed in bulk (no compaction, no snapshot): no trim, however
 * long the node runs. */
static void test_no_events_no_trim(void **state)
{
    struct ext_mem_release m = {0};
    (void)state;
    assert_false(mem_release_due(&m, 0, 1));
    assert_false(mem_release_due(&m, 0, 1000000));
    assert_int_equal(m.n_trims, 0);
}

/* The first event trims at once; each later one once the last trim is
 * EXT__MEM_RELEASE_MS old, and events that came in between are covered
 * by that one trim. */
static void test_trims_after_events_at_most_once_a_period(void **state)
{
    struct ext_mem_release m = {0};
    (void)state;
    assert_true(mem_release_due(&m, 1, 5000));
    assert_false(mem_release_due(&m, 1, 5001)); /* nothing new */
    assert_false(mem_release_due(&m, 2, 5001)); /* too soon */
    assert_false(mem_release_due(&m, 3, 5000 + EXT__MEM_RELEASE_MS - 1));
    assert_true(mem_release_due(&m, 3, 5000 + EXT__MEM_RELEASE_MS));
    assert_int_equal(m.events, 3);
    assert_false(mem_release_due(&m, 3, 100000)); /* all covered */
    assert_true(mem_release_due(&m, 4, 100000));
    assert_int_equal(m.n_trims, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_events_no_trim),
        cmocka_unit_test(test_trims_after_events_at_most_once_a_period),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
