/* The loop helpers of the transport tests (test_uv_transport.c,
 * test_tls.c): run a real loop until a condition holds, within a bound,
 * and pick free ports. Include it after defining struct fixture, which
 * must have a uv_loop_t loop and a uv_timer_t tick (initialized), and
 * WAIT_MS (how long WAIT_FOR waits with nothing moving). */

#ifndef TESTS_UV_LOOP_H
#define TESTS_UV_LOOP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

static void on_tick(uv_timer_t *timer)
{
    (void)timer;
}

/* The includer defines, before including this file:
 * - fixture_progress(f): a count that grows whenever the transports under
 *   test move data (frames received, their bytes), and
 * - fixture_report(f): prints what the fixture saw, to stderr.
 * A wait is then bounded by how long nothing moved, not by how long the
 * whole transfer takes: a loaded machine (CI beside other work, TSan)
 * moves megabytes slowly but steadily, and a stalled transport still
 * fails within @ms. */
static uint64_t fixture_progress(struct fixture *f);
static void fixture_report(struct fixture *f);

/* The bound on a whole wait, however steady its progress. */
#define RUN_UNTIL_CAP_FACTOR 12

/* run_loop runs the loop until @pred holds; false once @ms passed with
 * no change of fixture_progress (when @progress) or since the start (when
 * not), and always after RUN_UNTIL_CAP_FACTOR times @ms. The tick timer
 * keeps UV_RUN_ONCE from blocking. */
static bool run_loop(struct fixture *f, bool (*pred)(struct fixture *),
                     uint64_t ms, bool progress)
{
    uint64_t start, moved_at, seen;

    uv_update_time(&f->loop);
    start = moved_at = uv_now(&f->loop);
    seen = fixture_progress(f);
    uv_timer_start(&f->tick, on_tick, 1, 1);
    while (!pred(f)) {
        uint64_t now = uv_now(&f->loop), p = fixture_progress(f);

        if (progress && p != seen) {
            seen = p;
            moved_at = now;
        }
        if (now - moved_at >= ms || now - start >= RUN_UNTIL_CAP_FACTOR * ms) {
            uv_timer_stop(&f->tick);
            return false;
        }
        uv_run(&f->loop, UV_RUN_ONCE);
    }
    uv_timer_stop(&f->tick);
    return true;
}

/* run_until runs the loop until @pred holds; false once nothing moved
 * (fixture_progress) for @ms. */
static bool run_until(struct fixture *f, bool (*pred)(struct fixture *),
                      uint64_t ms)
{
    return run_loop(f, pred, ms, true);
}

static bool never(struct fixture *f)
{
    (void)f;
    return false;
}

/* run_for runs the loop for @ms. */
static void run_for(struct fixture *f, uint64_t ms)
{
    assert_false(run_loop(f, never, ms, false));
}

/* wait_for runs the loop until @pred holds, and fails the test with what
 * the fixture saw once nothing moved for WAIT_MS. */
static void wait_for(struct fixture *f, bool (*pred)(struct fixture *),
                     const char *what)
{
    if (!run_until(f, pred, WAIT_MS)) {
        fprintf(stderr, "gave up waiting for %s: nothing moved for %d ms\n",
                what, WAIT_MS);
        fixture_report(f);
        fail_msg("%s did not hold", what);
    }
}

#define WAIT_FOR(f, pred) wait_for((f), (pred), #pred)

/* reserve_port returns a free port: bind to port 0, read it, close. */
static uint16_t reserve_port(void)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof sin;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    return ntohs(sin.sin_port);
}

#endif /* TESTS_UV_LOOP_H */
