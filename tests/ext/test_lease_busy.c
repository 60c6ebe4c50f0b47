/* Tests of the table of writers lately answered busy for the write lease
 * (ext/runtime/lease_busy.c): a busy handler's retry within the retry's
 * time keeps its place in line; a new writer takes a free slot, else the
 * one answered longest ago, never the slot of a writer that asked again
 * since (the slots were once taken in turn, which handed the slots of
 * writers still retrying to others: with 64 writers of one node, 655 of
 * 675 refusals were "another writer of this node waits for the write
 * lease first"). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ext/runtime/lease_busy.h"

/* A retry within the time keeps the ticket; after it, or once forgotten
 * (granted), none. */
static void test_retry_keeps_place(void **state)
{
    struct ext_lease_busy b = {0};
    (void)state;

    assert_int_equal(lease_busy_kept(&b, 7, 1000, 250), 0);
    lease_busy_note(&b, 7, 41, 1000, true);
    assert_int_equal(lease_busy_kept(&b, 7, 1249, 250), 41);
    assert_int_equal(lease_busy_kept(&b, 7, 1250, 250), 0);
    assert_int_equal(lease_busy_kept(&b, 8, 1010, 250), 0);
    /* Busy again: the same slot, the time moves. */
    lease_busy_note(&b, 7, 41, 1240, true);
    assert_int_equal(lease_busy_kept(&b, 7, 1480, 250), 41);
    /* Granted: forgotten. */
    lease_busy_note(&b, 7, 41, 1300, false);
    assert_int_equal(lease_busy_kept(&b, 7, 1310, 250), 0);
    /* Forgetting one never noted changes nothing. */
    lease_busy_note(&b, 9, 50, 1310, false);
    for (unsigned i = 0; i < EXT_LEASE_BUSY_SLOTS; i++) {
        assert_true(b.slot[i].holder == 0);
    }
}

/* With every slot taken, a new writer takes the slot answered longest
 * ago: writers that asked again since keep theirs, whatever the order in
 * which the slots were filled. A freed slot is taken first. */
static void test_full_table_evicts_oldest(void **state)
{
    struct ext_lease_busy b = {0};
    uint64_t h;
    (void)state;

    /* Writers 1..32 answered busy at 1000..1031, in turn. */
    for (h = 1; h <= EXT_LEASE_BUSY_SLOTS; h++) {
        lease_busy_note(&b, h, 100 + h, 1000 + h - 1, true);
    }
    /* Writers 1 and 2 (the first slots) retry, answered busy again. */
    lease_busy_note(&b, 1, 101, 1100, true);
    lease_busy_note(&b, 2, 102, 1101, true);
    /* A 33rd writer: writer 3's slot (1002) is the oldest. */
    lease_busy_note(&b, 33, 133, 1102, true);
    assert_int_equal(lease_busy_kept(&b, 1, 1110, 250), 101);
    assert_int_equal(lease_busy_kept(&b, 2, 1110, 250), 102);
    assert_int_equal(lease_busy_kept(&b, 3, 1110, 250), 0);
    assert_int_equal(lease_busy_kept(&b, 33, 1110, 250), 133);
    for (h = 4; h <= EXT_LEASE_BUSY_SLOTS; h++) {
        assert_int_equal(lease_busy_kept(&b, h, 1110, 250), 100 + h);
    }
    /* A 34th: writer 4's (1003) goes. */
    lease_busy_note(&b, 34, 134, 1103, true);
    assert_int_equal(lease_busy_kept(&b, 4, 1110, 250), 0);
    assert_int_equal(lease_busy_kept(&b, 34, 1110, 250), 134);
    /* Writer 20 granted: its slot is free, and the next one takes it
     * rather than the oldest (writer 5's). */
    lease_busy_note(&b, 20, 120, 1104, false);
    lease_busy_note(&b, 35, 135, 1105, true);
    assert_int_equal(lease_busy_kept(&b, 5, 1110, 250), 105);
    assert_int_equal(lease_busy_kept(&b, 35, 1110, 250), 135);
    assert_int_equal(lease_busy_kept(&b, 20, 1110, 250), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_keeps_place),
        cmocka_unit_test(test_full_table_evicts_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
