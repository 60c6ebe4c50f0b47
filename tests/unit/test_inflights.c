/* The inflight window (raft/inflights.h): a bounded FIFO of requests in
 * flight, limited in messages and in payload bytes, freed only from its
 * oldest member by cumulative acknowledgements. */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "raft/inflights.h"

/* Members leave oldest first, only while covered; the ring wraps; a
 * cover of nothing frees nothing and returns 0. */
static void test_fifo(void **state)
{
    struct raft_inflights f;
    uint64_t seq = 1;
    raft_index last = 0;
    unsigned round;

    (void)state;
    assert_int_equal(inflights_init(&f, 3, 0), 0);
    assert_null(inflights_oldest(&f));
    assert_true(inflights_room(&f) == UINT64_MAX);
    for (round = 0; round < 5; round++) {
        inflights_add(&f, seq++, last += 2, 10);
        inflights_add(&f, seq++, last += 3, 10);
        inflights_add(&f, seq++, last += 1, 10);
        assert_true(inflights_full(&f));
        assert_true(inflights_room(&f) == 0);
        /* Covers nothing: the oldest ends at last - 4. */
        assert_true(inflights_free_le(&f, last - 5) == 0);
        assert_int_equal(f.n, 3);
        /* Covers the two oldest: returns the newer one's seq. */
        assert_true(inflights_free_le(&f, last - 1) == seq - 2);
        assert_int_equal(f.n, 1);
        assert_true(f.bytes == 10);
        assert_true(inflights_oldest(&f)->seq == seq - 1);
        assert_true(inflights_at(&f, 0)->last == last);
        assert_true(inflights_free_le(&f, last + 100) == seq - 1);
        assert_int_equal(f.n, 0);
        assert_true(f.bytes == 0);
    }
    inflights_close(&f);
    assert_null(f.ring);
}

/* With a byte limit: room shrinks as bytes go out; full at the limit; an
 * empty window has the whole limit (and takes one request over it). */
static void test_bytes(void **state)
{
    struct raft_inflights f;

    (void)state;
    assert_int_equal(inflights_init(&f, 0, 1000), 0); /* cap 0 means 1 */
    assert_int_equal(f.cap, 1);
    inflights_close(&f);
    assert_int_equal(inflights_init(&f, 8, 1000), 0);
    assert_true(inflights_room(&f) == 1000);
    inflights_add(&f, 1, 1, 5000);
    assert_true(inflights_full(&f));
    assert_true(inflights_free_le(&f, 1) == 1);
    inflights_add(&f, 2, 2, 600);
    assert_true(inflights_room(&f) == 400);
    assert_false(inflights_full(&f));
    inflights_add(&f, 3, 3, 400);
    assert_true(inflights_full(&f));
    inflights_reset(&f);
    assert_int_equal(f.n, 0);
    assert_true(f.bytes == 0);
    assert_true(inflights_room(&f) == 1000);
    inflights_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
