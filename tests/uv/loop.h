/* The loop helpers of the transport tests (test_uv_transport.c,
 * test_tls.c): run a real loop until a condition holds, within a bound,
 * run it until transports are connected, and pick free ports. Include it
 * after raft/uv.h and after defining struct fixture, which must have a
 * uv_loop_t loop and a uv_timer_t tick (initialized), an array nodes[]
 * whose element i has the transport of server i + 1 in t (NULL when not
 * running), and WAIT_MS (how long WAIT_FOR waits with nothing moving). */

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

/* The links wait_connected waits for: each of servers 1..g_connect_from
 * to every other of servers 1..g_connect_n. */
static unsigned g_connect_from;
static unsigned g_connect_n;

/* server_connected says whether server @from runs and its outgoing
 * connection to server @to is connected. */
static bool server_connected(struct fixture *f, unsigned from, unsigned to)
{
    const struct raft_uv_transport *t = f->nodes[from - 1].t;

    return t != NULL && raft_uv_transport_connected(t, to);
}

static bool links_up(struct fixture *f)
{
    for (unsigned i = 1; i <= g_connect_from; i++) {
        for (unsigned j = 1; j <= g_connect_n; j++) {
            if (i != j && !server_connected(f, i, j)) {
                return false;
            }
        }
    }
    return true;
}

/* wait_connected runs the loop until each of servers 1..@from has its
 * outgoing connection to every other of servers 1..@n connected (a
 * cluster of @n: @from = @n; one way from server 1: @from = 1), and fails
 * the test once nothing moved for WAIT_MS, printing each link still down
 * and what the fixture saw. */
static void wait_connected(struct fixture *f, unsigned from, unsigned n)
{
    g_connect_from = from;
    g_connect_n = n;
    if (run_until(f, links_up, WAIT_MS)) {
        return;
    }
    fprintf(stderr,
            "gave up waiting for servers 1..%u to connect to servers 1..%u: "
            "nothing moved for %d ms\n",
            from, n, WAIT_MS);
    for (unsigned i = 1; i <= from; i++) {
        for (unsigned j = 1; j <= n; j++) {
            if (i != j && !server_connected(f, i, j)) {
                fprintf(stderr, "server %u -> %u: %s\n", i, j,
                        f->nodes[i - 1].t == NULL ? "not running"
                                                  : "not connected");
            }
        }
    }
    fixture_report(f);
    fail_msg("servers 1..%u not connected to servers 1..%u", from, n);
}

/* reserve_port returns a free port: bind to port 0, read it, close;
 * never one of the last 64 it returned in this process (the kernel may
 * hand a closed port out again, and a test's second reservation, a
 * proxy's, then collided with a node's: "address already in use"). */
static uint16_t reserve_port(void)
{
    static uint16_t given[64];
    static unsigned next;

    for (int tries = 0; tries < 100; tries++) {
        struct sockaddr_in sin;
        socklen_t len = sizeof sin;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        uint16_t port;
        bool seen = false;

        assert_true(fd >= 0);
        memset(&sin, 0, sizeof sin);
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
        close(fd);
        port = ntohs(sin.sin_port);
        for (unsigned i = 0; i < 64; i++) {
            seen = seen || given[i] == port;
        }
        if (!seen) {
            given[next] = port;
            next = (next + 1) % 64;
            return port;
        }
    }
    fail_msg("reserve_port: no port that was not given out already");
    return 0;
}

#endif /* TESTS_UV_LOOP_H */
