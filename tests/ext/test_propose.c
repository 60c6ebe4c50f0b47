/* Tests of the floor of the leader's stamps (ext/runtime/propose.c): it
 * follows the stamps of the request entries a log takes, ignores the
 * entries that carry none, and never goes down. propose_batch, which
 * stamps at least the floor, runs on a real driver in the end-to-end
 * tests (tests/e2e/test_cluster.py, NowTest). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/propose.h"
#include "ext/runtime/sqlbridge.h"

/* stamped returns a new request payload "SELECT 1" stamped @time_ms (one
 * reference, the caller's). */
static struct raft_buf *stamped(int64_t time_ms)
{
    const uint64_t id[2] = {1, (uint64_t)time_ms};
    const struct sql_stamp st = {.time_ms = time_ms, .seed = 1};
    struct raft_buf *plain = NULL, *out = NULL;
    char msg[128];

    assert_int_equal(sqlbridge_encode(id, "SELECT 1", 8, NULL, 0, NULL,
                                      UINT64_MAX, &plain, msg, sizeof msg),
                     0);
    assert_int_equal(sqlbridge_stamp(plain, &st, &out), 0);
    raft_buf_unref(plain);
    return out;
}

/* bytes returns a new buf holding @s (no NUL). */
static struct raft_buf *bytes(const char *s)
{
    struct raft_buf *b = raft_buf_new(strlen(s));
    assert_non_null(b);
    memcpy(b->data, s, strlen(s));
    return b;
}

/* The floor is the latest stamp of the request entries noted, in
 * whatever order they come; no-ops, changesets, configuration entries and
 * empty ones carry none; nothing noted, no floor. */
static void test_note(void **state)
{
    struct ext_propose p;
    struct raft_entry e[6];
    int64_t floor_ms = 7;
    (void)state;

    propose_init(&p, 1, 0);
    assert_false(propose_floor(&p, &floor_ms));
    assert_true(floor_ms == 7);
    memset(e, 0, sizeof e);
    /* A request's bytes in an entry of another type are no request. */
    e[0] = (struct raft_entry){
        .index = 1, .type = RAFT_ENTRY_NOOP, .data = stamped(800)};
    e[1] = (struct raft_entry){
        .index = 2, .type = RAFT_ENTRY_NORMAL, .data = stamped(500)};
    e[2] = (struct raft_entry){
        .index = 3, .type = RAFT_ENTRY_NORMAL, .data = stamped(300)};
    e[3] = (struct raft_entry){
        .index = 4, .type = RAFT_ENTRY_NORMAL, .data = bytes("CS not a req")};
    e[4] = (struct raft_entry){
        .index = 5, .type = RAFT_ENTRY_CONFIG, .data = stamped(900)};
    e[5] = (struct raft_entry){.index = 6, .type = RAFT_ENTRY_NORMAL};
    propose_floor_note(&p, e, 1);
    assert_false(propose_floor(&p, &floor_ms));
    propose_floor_note(&p, e + 2, 4);
    assert_true(propose_floor(&p, &floor_ms));
    assert_true(floor_ms == 300);
    propose_floor_note(&p, e, 6);
    assert_true(propose_floor(&p, &floor_ms));
    assert_true(floor_ms == 500);
    for (unsigned i = 0; i < 6; i++) {
        raft_buf_unref(e[i].data);
    }
}

/* A raise above the floor moves it (also from none, and to a stamp
 * before the epoch); a raise below it, or a stamp noted below it (a
 * truncated suffix's stamps stay counted), leaves it. */
static void test_raise_never_lowers(void **state)
{
    struct ext_propose p;
    struct raft_entry e = {.index = 1, .type = RAFT_ENTRY_NORMAL};
    int64_t floor_ms = 0;
    (void)state;

    propose_init(&p, 1, 0);
    propose_floor_raise(&p, -5);
    assert_true(propose_floor(&p, &floor_ms) && floor_ms == -5);
    propose_floor_raise(&p, 1700000000000LL);
    propose_floor_raise(&p, 1600000000000LL);
    assert_true(propose_floor(&p, &floor_ms) && floor_ms == 1700000000000LL);
    e.data = stamped(1650000000000LL);
    propose_floor_note(&p, &e, 1);
    assert_true(propose_floor(&p, &floor_ms) && floor_ms == 1700000000000LL);
    raft_buf_unref(e.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_note),
        cmocka_unit_test(test_raise_never_lowers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
