/* Tests of ext/runtime/repair.c, repairing a diverged replica, through
 * repair.h on a real driver (tests/uv/fake.h) and a real apply thread
 * marked diverged (applier_mark_diverged): the phase each situation
 * leads to and its words (a follower asks its leader, again every
 * retry_ms and not before, and a new leader at once; no leader; the only
 * voter; a leader hands its leadership on,
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

/* How often a repair is tried again, ms, unless a test says otherwise. */
#define RETRY_MS 50

/* Repair requests whose loop clock app_tick records. */
#define MAX_SENDS 8

/* What marks the replica diverged in these tests. */
#define REASON "a commit this node did not make"

/* Server 1: a driver, its apply thread and its repair. */
struct node {
    struct fake fk;
    struct tmpdb db;
    struct ext_node_log log;
    struct ext_applier *a;
    struct ext_repair *r;
    unsigned retry_ms;             /* repair_on_tick's, set before run */
    unsigned firsts;               /* ticks that first saw the divergence */
    uint64_t sent_from[MAX_SENDS]; /* loop clock before each tick that
                                      sent a REPAIR_REQUEST (under the
                                      fake's mutex) */
    uint64_t sent_by[MAX_SENDS];   /* and after it */
    unsigned n_sends;              /* at @sent_from and @sent_by */
};

/* requests_to counts the REPAIR_REQUEST frames sent to @to (0: to
 * anyone). Caller holds the fake's mutex. */
static unsigned requests_to(const struct node *n, raft_id to)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n->fk.n_sent; i++) {
        const struct raft_frame *f = &n->fk.sent[i].f;
        k += f->type == RAFT_FRAME_REPAIR_REQUEST && (to == 0 || f->to == to);
    }
    return k;
}

/* requests_seen is requests_to under the fake's mutex. */
static unsigned requests_seen(struct node *n, raft_id to)
{
    unsigned k;
    fake_lock(&n->fk);
    k = requests_to(n, to);
    fake_unlock(&n->fk);
    return k;
}

static void app_tick(void *data)
{
    struct node *n = data;
    unsigned before = requests_seen(n, 0);
    /* The clock repair_on_tick reads lies between these two. */
    uint64_t from = raft_uv_node_now(n->fk.d), by;
    if (repair_on_tick(n->r, n->fk.d, n->a, n->retry_ms)) {
        __atomic_add_fetch(&n->firsts, 1, __ATOMIC_SEQ_CST);
    }
    by = raft_uv_node_now(n->fk.d);
    fake_lock(&n->fk);
    if (requests_to(n, 0) > before && n->n_sends < MAX_SENDS) {
        n->sent_from[n->n_sends] = from;
        n->sent_by[n->n_sends++] = by;
    }
    fake_unlock(&n->fk);
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
    n->retry_ms = RETRY_MS;
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

/* start_follower starts server 1, repairs tried again every @retry_ms,
 * as a follower of server 2 in term 1 (of voters 1, 2, 3). */
static void start_follower(struct node *n, unsigned retry_ms)
{
    init(n, false);
    n->retry_ms = retry_ms;
    run(n, 3, 60000);
    fake_inject_append(&n->fk, 2, 1, 0, 0, NULL, 0);
    FAKE_WAIT(&n->fk, n->fk.obs.leader == 2);
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

    start_follower(&n, RETRY_MS);
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

/* sends_seen reads, under the fake's mutex, how many requests app_tick
 * recorded, and writes their loop clocks (the ticks' start and end,
 * relative to the first's start) into @out (@len bytes), for a test
 * that gives up. */
static unsigned sends_seen(struct node *n, char *out, size_t len)
{
    unsigned k;
    size_t used = 0;
    fake_lock(&n->fk);
    k = n->n_sends;
    out[0] = '\0';
    for (unsigned i = 0; i < k && used < len; i++) {
        used += (size_t)snprintf(
            out + used, len - used, " +%llu..%llu",
            (unsigned long long)(n->sent_from[i] - n->sent_from[0]),
            (unsigned long long)(n->sent_by[i] - n->sent_from[0]));
    }
    fake_unlock(&n->fk);
    return k;
}

/* An unanswered repair request is sent again once retry_ms passed on
 * the loop clock since the previous one, never before: the most the
 * clock can have moved between two sends (from the start of the tick
 * that sent one to the end of the tick that sent the next) is at least
 * retry_ms. */
static void test_resent_after_retry(void **state)
{
    struct node n;
    char seen[256];
    unsigned k;
    (void)state;

    start_follower(&n, 300);
    applier_mark_diverged(n.a, REASON);
    EXT_WAIT(sends_seen(&n, seen, sizeof seen) >= 3,
             "%u requests at loop clock%s", sends_seen(&n, seen, sizeof seen),
             seen);
    fake_lock(&n.fk);
    k = n.n_sends;
    for (unsigned i = 1; i < k; i++) {
        uint64_t most = n.sent_by[i] - n.sent_from[i - 1];
        if (most < n.retry_ms) {
            fake_unlock(&n.fk);
            sends_seen(&n, seen, sizeof seen);
            fail_msg(
                "request %u sent at most %llu ms after the one before, "
                "under retry_ms %u (loop clocks%s)",
                i + 1, (unsigned long long)most, n.retry_ms, seen);
        }
    }
    assert_int_equal(requests_to(&n, 2), requests_to(&n, 0));
    fake_unlock(&n.fk);
    wait_phase(&n, EXT_REPAIR_REQUESTED, 2);
    stop(&n);
}

/* counts_to writes how many requests went to servers 2 and 3 into @out
 * (@len bytes), and returns @out. */
static const char *counts_to(struct node *n, char *out, size_t len)
{
    fake_lock(&n->fk);
    snprintf(out, len, "%u to server 2, %u to server 3, leader %llu",
             requests_to(n, 2), requests_to(n, 3),
             (unsigned long long)n->fk.obs.leader);
    fake_unlock(&n->fk);
    return out;
}

/* A new leader gets the repair request at once, long before retry_ms:
 * the request follows the leader. */
static void test_new_leader_asked_at_once(void **state)
{
    struct node n;
    char seen[256];
    (void)state;

    start_follower(&n, 60000);
    applier_mark_diverged(n.a, REASON);
    wait_phase(&n, EXT_REPAIR_REQUESTED, 2);
    fake_inject_append(&n.fk, 3, 2, 0, 0, NULL, 0);
    EXT_WAIT(requests_seen(&n, 3) >= 1, "%s", counts_to(&n, seen, sizeof seen));
    wait_phase(&n, EXT_REPAIR_REQUESTED, 3);
    FAKE_CHECK(&n.fk, requests_to(&n, 2) == 1 && requests_to(&n, 3) == 1);
    FAKE_CHECK(&n.fk,
               fake_last_sent(&n.fk, RAFT_FRAME_REPAIR_REQUEST)->f.to == 3);
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
    /* The phase is published before its line is logged (set_phase). */
    snprintf(want, sizeof want, "diverged replica: repair: %s", what);
    EXT_WAIT(
        (node_log_last_error(&n.log, err, sizeof err), strcmp(err, want) == 0),
        "last error '%.400s'", err);
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
        cmocka_unit_test(test_resent_after_retry),
        cmocka_unit_test(test_new_leader_asked_at_once),
        cmocka_unit_test(test_manual_no_leader),
        cmocka_unit_test(test_only_voter),
        cmocka_unit_test(test_leader_hands_on),
        cmocka_unit_test(test_leader_no_healthy_peer),
    };
    return cmocka_run_group_tests_name("ext_repair", tests, NULL, NULL);
}
