/* The loop helpers of the transport tests (test_uv_transport.c,
 * test_tls.c): run a real loop until a condition holds, within a bound,
 * and pick free ports. Include it after defining struct fixture, which
 * must have a uv_loop_t loop and a uv_timer_t tick (initialized), and
 * WAIT_MS (the bound of WAIT_FOR). */

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

/* run_until runs the loop until @pred holds; false after @ms. The tick
 * timer keeps UV_RUN_ONCE from blocking. */
static bool run_until(struct fixture *f, bool (*pred)(struct fixture *),
                      uint64_t ms)
{
    uint64_t deadline;

    uv_update_time(&f->loop);
    deadline = uv_now(&f->loop) + ms;
    uv_timer_start(&f->tick, on_tick, 1, 1);
    while (!pred(f)) {
        if (uv_now(&f->loop) >= deadline) {
            uv_timer_stop(&f->tick);
            return false;
        }
        uv_run(&f->loop, UV_RUN_ONCE);
    }
    uv_timer_stop(&f->tick);
    return true;
}

static bool never(struct fixture *f)
{
    (void)f;
    return false;
}

/* run_for runs the loop for @ms. */
static void run_for(struct fixture *f, uint64_t ms)
{
    assert_false(run_until(f, never, ms));
}

#define WAIT_FOR(f, pred) assert_true(run_until((f), (pred), WAIT_MS))

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
