/* Tests of ext/runtime/events.c, what a node publishes to the rest of its
 * process: every subscriber hears every event, in the order they
 * subscribed; subscribing again changes nothing; the table is bounded. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/events.h"
#include "raft/err.h"

/* What one subscriber heard. */
struct heard {
    int events[8]; /* n of them */
    unsigned n;
    unsigned turn; /* when it last heard one (a global count) */
};

static unsigned turns;

static void hear(int event, void *arg)
{
    struct heard *h = arg;
    if (h->n < 8) {
        h->events[h->n++] = event;
    }
    h->turn = ++turns;
}

/* Every subscriber hears every event once, in subscription order, however
 * often it subscribed; past EXT_EVENTS_MAX subscribers, RAFT_NOMEM. (One
 * test: the table is the process's.) */
static void test_subscribe_and_publish(void **state)
{
    struct heard a = {0}, b = {0}, extra[EXT_EVENTS_MAX];
    unsigned i;
    (void)state;

    assert_int_equal(ext_events_subscribe(hear, &a), 0);
    assert_int_equal(ext_events_subscribe(hear, &b), 0);
    assert_int_equal(ext_events_subscribe(hear, &a), 0); /* no second */

    ext_events_publish(EXT_EVENT_STALE);
    assert_int_equal(a.n, 1);
    assert_int_equal(b.n, 1);
    assert_int_equal(a.events[0], EXT_EVENT_STALE);
    assert_int_equal(b.events[0], EXT_EVENT_STALE);
    assert_true(a.turn < b.turn);

    ext_events_publish(EXT_EVENT_TICK);
    assert_int_equal(a.n, 2);
    assert_int_equal(b.n, 2);
    assert_int_equal(a.events[1], EXT_EVENT_TICK);
    assert_int_equal(b.events[1], EXT_EVENT_TICK);

    memset(extra, 0, sizeof extra);
    for (i = 0; i < EXT_EVENTS_MAX - 2; i++) {
        assert_int_equal(ext_events_subscribe(hear, &extra[i]), 0);
    }
    assert_int_equal(ext_events_subscribe(hear, &extra[i]), RAFT_NOMEM);
    ext_events_publish(EXT_EVENT_TICK);
    assert_int_equal(a.n, 3);
    assert_int_equal(extra[0].n, 1);
    assert_int_equal(extra[EXT_EVENTS_MAX - 3].n, 1);
    assert_int_equal(extra[EXT_EVENTS_MAX - 2].n, 0); /* refused */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subscribe_and_publish),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
