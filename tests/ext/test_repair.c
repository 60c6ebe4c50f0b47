/* Tests of ext/runtime/repair.c, repairing a diverged replica, through
 * repair.h on a real driver (tests/uv/fake.h) and a real apply thread
 * marked diverged (applier_mark_diverged): the phase each situation
 * leads to and its words (a follower asks its leader, again every
 * retry_ms; no leader; the only voter; a leader hands its leadership on,
 * or stays when every other voter is diverged too; repair=manual waits
 * for raft_repair()), raft_exec's refusal text, and raft_repair()'s
 * errors: not diverged, no peer, timeout, interrupted. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ext/runtime/repair.h"
#include "tests/ext/helpers.h"
#include "tests/uv/fake.h"

/* How often a repair is tried again, ms. */
#define RETRY_MS 50

/* What marks the replica diverged in these tests. */
#define REASON "a commit this node did not make"

/* Server 1: a driver, its apply thread and its repair. */
struct node {
    struct fake fk;
    struct tmpdb db;
    struct ext_node_log log;
    struct ext_applier *a;
    struct ext_repair *r;
    unsigned firsts; /* ticks that first saw the divergence */
};

static void app_tick(void *data)
{
    struct node *n = data;
    if (repair_on_tick(n->r, n->fk.d, n->a, RETRY_MS)) {
        __atomic_add_fetch(&n->firsts, 1, __ATOMIC_SEQ_CST);
    }
}

static void app_apply(void *data, const struct raft_entry *entries, unsigned k)
{
    struct node *n = data;
    assert_int_equal(applier_push(n->a, entries, k), 0);
}

/* init prepares server 1 of @n_voters voters (1, 2, 3...), repair=manual
 * when @manual. */
static void init(struct node *n, bool manual)
{
    memset(n, 0, sizeof *n);
    n->a = applier_start_quiet(&n->db, &n->log);
    assert_int_equal(repair_new(1, manual, &n->log, &n->r), 0);
    fake_init(&n->fk, 1);
}

/* run starts its driver: @election_ms long enough keeps a follower from
 * campaigning during a test. */
static void run(struct node *n, unsigned n_voters, unsigned election_ms)
{
    static const raft_id voters[3] = {1, 2, 3};
    struct raft_uv_node_callbacks app = {
        .data = n, .tick = app_tick, .apply = app_apply};
    struct fake_opts o = {.peers = &voters[1],
                          .n_peers = n_voters - 1,
                          .no_snapshots = true,
                          .app = &app};
    fake_start(&n->fk, fake_core(1, voters, n_voters, election_ms), &o);
}

static void stop(struct node *n)
{
    fake_free(&n->fk);
    repair_free(n->r);
    applier_stop_quiet(n->a, &n->db, &n->log);
}

static int phase(struct node *n, uint64_t *peer)
{
    return repair_phase(n->r, peer);
}

/* wait_phase waits until the repair stands at @want, from @peer. */
static void wait_phase(struct node *n, int want, uint64_t want_peer)
{
    uint64_t peer = 0;
    EXT_WAIT(phase(n, &peer) == want && peer == want_peer,
             "phase %d, peer %llu", phase(n, &peer), (unsigned long long)peer);
}

static void check_words(struct node *n, const char *what)
{
    char text[512], want[512];
    repair_describe(n->r, text, sizeof text);
    assert_string_equal(text, what);
    snprintf(want, sizeof want, "diverged replica: %s; repair: %s", REASON,
             what);
    assert_true(repair_refusal(n->r, n->a, text, sizeof text));
    assert_string_equal(text, want);
}

static bool interrupted(void *data)
{
    (void)data;
    return true;
}

/* A diverged follower asks its leader for a snapshot at its applied
 * index, again every retry_ms; raft_repair() waits for the install and
 * gives up at its timeout, or when interrupted, with the words of where
 * the repair stands. Before the divergence nothing is refused. */
static void test_follower_asks_leader(void **state)
{
    struct node n;
    struct ext_exec_probe probe = {.interrupted = interrupted};
    char msg[512] = "", want[512];
    uint64_t peer = 9;
    const struct fake_sent *s;
    (void)state;

    init(&n, false);
    run(&n, 3, 60000);
    fake_inject_append(&n.fk, 2, 1, 0, 0, NULL, 0);
    FAKE_WAIT(&n.fk, n.fk.obs.leader == 2);
    assert_int_equal(repair_wait(n.r, n.a, n.fk.d, 1000, NULL, msg, sizeof msg),
                     RAFT_INVALID);
    assert_string_equal(msg, "not diverged: nothing to repair");
    assert_false(repair_refusal(n.r, n.a, msg, sizeof msg));
    assert_int_equal(phase(&n, &peer), EXT_REPAIR_NONE);
    assert_int_equal(peer, 0);
    FAKE_CHECK(&n.fk, fake_n_sent(&n.fk, RAFT_FRAME_REPAIR_REQUEST) == 0);

    applier_mark_diverged(n.a, REASON);
    wait_phase(&n, EXT_REPAIR_REQUESTED, 2);
    check_words(&n, "asked server 2 for a snapshot");
    FAKE_WAIT(&n.fk, fake_n_sent(&n.fk, RAFT_FRAME_REPAIR_REQUEST) >= 2);
    FAKE_CHECK(&n.fk,
               (s = fake_last_sent(&n.fk, RAFT_FRAME_REPAIR_REQUEST)) != NULL &&
                   s->f.to == 2 && s->f.repair_request.applied == 0);
    assert_int_equal(__atomic_load_n(&n.firsts, __ATOMIC_SEQ_CST), 1);

    assert_int_equal(repair_wait(n.r, n.a, n.fk.d, 100, NULL, msg, sizeof msg),
                     RAFT_TIMEOUT);
    snprintf(want, sizeof want,
             "diverged replica: %s; repair: asked server 2 for a snapshot",
             REASON);
    assert_string_equal(msg, want);
    assert_int_equal(
        repair_wait(n.r, n.a, n.fk.d, 60000, &probe, msg, sizeof msg),
        RAFT_CANCELED);
    assert_string_equal(msg, "interrupted (the repair goes on)");
    stop(&n);
}

/* With repair=manual a diverged replica waits for raft_repair(), which
 * starts the repair: here with no leader known to ask, until its
 * timeout. */
static void test_manual_no_leader(void **state)
{
    struct node n;
    char msg[512] = "", want[512];
    (void)state;

    init(&n, true);
    run(&n, 3, 60000);
    applier_mark_diverged(n.a, REASON);
    wait_phase(&n, EXT_REPAIR_MANUAL, 0);
    check_words(&n, "waiting for raft_repair() (repair=manual)");
    assert_int_equal(repair_wait(n.r, n.a, n.fk.d, 300, NULL, msg, sizeof msg),
                     RAFT_TIMEOUT);
    snprintf(want, sizeof want,
             "diverged replica: %s; repair: no leader known to repair from",
             REASON);
    assert_string_equal(msg, want);
    wait_phase(&n, EXT_REPAIR_NO_LEADER, 0);
    FAKE_CHECK(&n.fk, fake_n_sent(&n.fk, RAFT_FRAME_REPAIR_REQUEST) == 0);
    stop(&n);
}

/* The only voter has nobody to repair from: it stays diverged, and
 * raft_repair() says so at once. */
static void test_only_voter(void **state)
{
    struct node n;
    char msg[512] = "", want[512];
    (void)state;

    init(&n, false);
    run(&n, 1, 50);
    FAKE_WAIT(&n.fk, n.fk.obs.role == RAFT_LEADER);
    applier_mark_diverged(n.a, REASON);
    wait_phase(&n, EXT_REPAIR_NO_PEER, 0);
    check_words(&n,
                "no peer to repair from: this server is the only voter "
                "(stays diverged)");
    assert_int_equal(
        repair_wait(n.r, n.a, n.fk.d, 60000, NULL, msg, sizeof msg),
        RAFT_NOTFOUND);
    snprintf(want, sizeof want,
             "diverged replica: %s; repair: no peer to repair from: this "
             "server is the only voter (stays diverged)",
             REASON);
    assert_string_equal(msg, want);
    stop(&n);
}

/* start_leader starts server 1 leading {1, 2}, the test playing server
 * 2 (fake_peer_hook); @peer_diverged makes server 2 ask for a repair
 * first. */
static void start_leader(struct node *n, bool peer_diverged)
{
    init(n, false);
    n->fk.hook = fake_peer_hook;
    n->fk.peer.id = 2;
    run(n, 2, 50);
    FAKE_WAIT(&n->fk, n->fk.obs.role == RAFT_LEADER && n->fk.obs.commit >= 1);
    if (peer_diverged) {
        struct raft_frame m;
        memset(&m, 0, sizeof m);
        m.type = RAFT_FRAME_REPAIR_REQUEST;
        m.from = 2;
        m.to = 1;
        fake_inject(&n->fk, &m);
        fake_barrier(&n->fk);
    }
}

/* A diverged leader hands its leadership to a voter that is not
 * diverged (TimeoutNow once it is up to date). */
static void test_leader_hands_on(void **state)
{
    struct node n;
    (void)state;

    start_leader(&n, false);
    applier_mark_diverged(n.a, REASON);
    wait_phase(&n, EXT_REPAIR_TRANSFER, 2);
    check_words(&n,
                "handing the leadership on to server 2, then repairing "
                "as a follower");
    FAKE_WAIT(&n.fk, fake_n_sent(&n.fk, RAFT_MSG_TIMEOUT_NOW) >= 1);
    stop(&n);
}

/* A diverged leader whose every other voter asked for a repair lately
 * stays, says so at ERROR, and raft_repair() finds nobody to repair
 * from. */
static void test_leader_no_healthy_peer(void **state)
{
    struct node n;
    char msg[512] = "", err[512], want[512];
    const char *what =
        "no healthy peer to repair from: server 2 is "
        "diverged too (stays diverged, leading)";
    (void)state;

    start_leader(&n, true);
    applier_mark_diverged(n.a, REASON);
    wait_phase(&n, EXT_REPAIR_NO_HEALTHY, 0);
    check_words(&n, what);
    node_log_last_error(&n.log, err, sizeof err);
    snprintf(want, sizeof want, "diverged replica: repair: %s", what);
    assert_string_equal(err, want);
    assert_int_equal(
        repair_wait(n.r, n.a, n.fk.d, 60000, NULL, msg, sizeof msg),
        RAFT_NOTFOUND);
    snprintf(want, sizeof want, "diverged replica: %s; repair: %s", REASON,
             what);
    assert_string_equal(msg, want);
    FAKE_CHECK(&n.fk, fake_n_sent(&n.fk, RAFT_MSG_TIMEOUT_NOW) == 0);
    stop(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_follower_asks_leader),
        cmocka_unit_test(test_manual_no_leader),
        cmocka_unit_test(test_only_voter),
        cmocka_unit_test(test_leader_hands_on),
        cmocka_unit_test(test_leader_no_healthy_peer),
    };
    return cmocka_run_group_tests_name("ext_repair", tests, NULL, NULL);
}
