/* Tests of ext/runtime/divergence.c, the replica checksum compared between
 * servers, through divergence.h on a real driver (tests/uv/fake.h: its
 * transport captures the frames sent and delivers the CHECKSUM frames a
 * test injects as peers 2 and 3). The test thread plays the apply
 * thread (divergence_applied) and the peers: the verdict (status, the
 * index per peer, outvoted or not), the search's probes down to the first
 * index that differs, answers to a peer's probe, the periodic report, and
 * what a checksum turned off or restarted by a snapshot ignores. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "raft/configuration.h"
#include "ext/runtime/divergence.h"
#include "tests/ext/helpers.h"
#include "tests/uv/fake.h"

/* Indexes this node applied in most tests. */
#define LAST 100

/* Where peer 3's replica starts to differ from ours. */
#define SPLIT 37

/* This node's value at @index, and peer 3's. */
static uint64_t ours_at(raft_index index)
{
    return 1000 * index + 1;
}

static uint64_t theirs_at(raft_index index)
{
    return index < SPLIT ? ours_at(index) : 1000 * index + 7;
}

/* Server 1 among 1, 2, 3 (its peers never answer: nobody leads). */
struct node {
    struct fake fk;
    struct ext_node_log log;
    struct ext_divergence *v;
};

static void app_forward(void *data, const struct raft_frame *f)
{
    struct node *n = data;
    if (f->type == RAFT_FRAME_CHECKSUM) {
        divergence_on_frame(n->v, n->fk.d, f);
    }
}

/* start starts server 1 with its checksum on and indexes 1..@last applied
 * (ours_at). */
static void start(struct node *n, raft_index last)
{
    static const raft_id voters[3] = {1, 2, 3};
    struct raft_uv_node_callbacks app = {.data = n, .forward = app_forward};
    struct fake_opts o = {.peers = &voters[1], .n_peers = 2, .app = &app};

    memset(n, 0, sizeof *n);
    node_log_init(&n->log, 1, RAFT_LOG_ERROR + 1); /* quiet */
    assert_int_equal(divergence_new(1, &n->log, &n->v), 0);
    divergence_set(n->v, true, "", 0, 0);
    for (raft_index i = 1; i <= last; i++) {
        divergence_applied(n->v, i, ours_at(i));
    }
    fake_init(&n->fk, 1);
    fake_start(&n->fk, fake_core(1, voters, 3, 1000), &o);
}

static void stop(struct node *n)
{
    fake_free(&n->fk);
    divergence_free(n->v);
    node_log_close(&n->log);
}

/* inject delivers peer @from's CHECKSUM of @value at @index. */
static void inject(struct node *n, raft_id from, raft_index index,
                   uint64_t value, bool probe)
{
    struct raft_frame m;
    memset(&m, 0, sizeof m);
    m.type = RAFT_FRAME_CHECKSUM;
    m.from = from;
    m.to = 1;
    m.checksum.index = index;
    m.checksum.checksum = value;
    m.checksum.probe = probe;
    fake_inject(&n->fk, &m);
    fake_barrier(&n->fk); /* it was taken */
}

/* n_checksums counts the CHECKSUM frames sent to @to with @probe (mutex
 * held); last_checksum returns the latest of them, NULL for none. */
static unsigned n_checksums(const struct fake *f, raft_id to, bool probe)
{
    unsigned k = 0;
    for (unsigned i = 0; i < f->n_sent; i++) {
        const struct raft_frame *m = &f->sent[i].f;
        k += m->type == RAFT_FRAME_CHECKSUM && m->to == to &&
             m->checksum.probe == probe;
    }
    return k;
}

static const struct raft_checksum *last_checksum(const struct fake *f,
                                                 raft_id to, bool probe)
{
    for (unsigned i = f->n_sent; i > 0; i--) {
        const struct raft_frame *m = &f->sent[i - 1].f;
        if (m->type == RAFT_FRAME_CHECKSUM && m->to == to &&
            m->checksum.probe == probe) {
            return &m->checksum;
        }
    }
    return NULL;
}

static void on_tick(struct fake *f, void *arg)
{
    divergence_on_tick(arg, f->d);
}

/* Equal values at an index are no mismatch and send nothing. */
static void test_equal(void **state)
{
    struct node n;
    struct ext_divergence_status s;
    (void)state;

    start(&n, LAST);
    inject(&n, 2, 50, ours_at(50), false);
    inject(&n, 3, LAST, ours_at(LAST), false);
    divergence_status(n.v, &s);
    assert_true(s.on);
    assert_int_equal(s.index, LAST);
    assert_int_equal(s.value, ours_at(LAST));
    assert_false(s.mismatch);
    assert_int_equal(divergence_peer(n.v, 2), 0);
    assert_int_equal(divergence_peer(n.v, 3), 0);
    FAKE_CHECK(&n.fk, fake_n_sent(&n.fk, RAFT_FRAME_CHECKSUM) == 0);
    stop(&n);
}

/* A value that differs is a mismatch at once; the search then probes the
 * peer by bisection between the last index known equal and the first
 * known to differ, and ends at the first index that differs, with the
 * values on both sides, in status and the node's last error. */
static void test_search_first_difference(void **state)
{
    static const raft_index expect[] = {50, 25, 37, 31, 34, 35, 36};
    struct node n;
    struct ext_divergence_status s;
    char err[512], want[512];
    (void)state;

    start(&n, LAST);
    inject(&n, 3, LAST, theirs_at(LAST), false);
    divergence_status(n.v, &s);
    assert_true(s.mismatch);
    assert_int_equal(s.server, 3);
    assert_int_equal(s.first, LAST);
    assert_int_equal(s.ours, ours_at(LAST));
    assert_int_equal(s.theirs, theirs_at(LAST));
    node_log_last_error(&n.log, err, sizeof err);
    assert_non_null(strstr(err,
                           "replica checksum differs from server 3 at "
                           "index 100"));

    for (unsigned k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        const struct raft_checksum *c = NULL;
        raft_index at;
        FAKE_WAIT(&n.fk, n_checksums(&n.fk, 3, true) == k + 1);
        fake_lock(&n.fk);
        c = last_checksum(&n.fk, 3, true);
        at = c->index;
        assert_int_equal(c->checksum, ours_at(at));
        fake_unlock(&n.fk);
        assert_int_equal(at, expect[k]);
        inject(&n, 3, at, theirs_at(at), false);
    }
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 3, true) == 7);
    divergence_status(n.v, &s);
    assert_true(s.mismatch);
    assert_int_equal(s.server, 3);
    assert_int_equal(s.first, SPLIT);
    assert_int_equal(s.ours, ours_at(SPLIT));
    assert_int_equal(s.theirs, theirs_at(SPLIT));
    assert_int_equal(s.last_same, SPLIT - 1);
    assert_int_equal(divergence_peer(n.v, 3), SPLIT);
    assert_int_equal(divergence_peer(n.v, 2), 0);
    node_log_last_error(&n.log, err, sizeof err);
    snprintf(want, sizeof want,
             "replica checksum differs from server 3: first index known to "
             "differ %d (ours %016llx, theirs %016llx; equal at %d)",
             SPLIT, (unsigned long long)ours_at(SPLIT),
             (unsigned long long)theirs_at(SPLIT), SPLIT - 1);
    assert_string_equal(err, want);

    /* Equal again above it (repaired): no mismatch any more. */
    inject(&n, 3, LAST, ours_at(LAST), false);
    divergence_status(n.v, &s);
    assert_false(s.mismatch);
    assert_int_equal(divergence_peer(n.v, 3), 0);
    stop(&n);
}

/* A peer's probe is answered with this node's value at its index, as no
 * probe; one at an index this node does not have is not answered. */
static void test_probe_answered(void **state)
{
    struct node n;
    (void)state;

    start(&n, LAST);
    inject(&n, 2, 20, ours_at(20), true);
    FAKE_CHECK(&n.fk,
               n_checksums(&n.fk, 2, false) == 1 &&
                   last_checksum(&n.fk, 2, false)->index == 20 &&
                   last_checksum(&n.fk, 2, false)->checksum == ours_at(20));
    inject(&n, 2, LAST + 5, 1, true);
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 2, false) == 1);
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 2, true) == 0);
    stop(&n);
}

/* A probe below this node's ring (it restarted, or installed a
 * snapshot, since the prober last heard from it) is answered with its
 * oldest value, as no probe: before, it went unanswered and the prober's
 * search ended after its tries with the last index known equal far below
 * the entry that differed (test_checksum, under load). */
static void test_probe_below_ring_answered_at_oldest(void **state)
{
    struct node n;
    (void)state;

    start(&n, 0);
    divergence_set(n.v, true, "", 60, ours_at(60)); /* restarted at 60 */
    for (raft_index i = 61; i <= LAST; i++) {
        divergence_applied(n.v, i, ours_at(i));
    }
    inject(&n, 2, 20, ours_at(20), true);
    FAKE_CHECK(&n.fk,
               n_checksums(&n.fk, 2, false) == 1 &&
                   last_checksum(&n.fk, 2, false)->index == 60 &&
                   last_checksum(&n.fk, 2, false)->checksum == ours_at(60));
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 2, true) == 0);
    stop(&n);
}

/* The prober's side of it: peer 3 was known equal at 5 when it
 * restarted at @restart, so it has nothing below; a probe there is
 * answered at @restart, and the search goes on above it, down to the
 * first index that differs and the one just below it. */
static void test_search_past_a_restarted_peer(void **state)
{
    static const raft_index expect[] = {52, 28, 41, 35, 38, 36, 37};
    const raft_index restart = 30;
    struct node n;
    struct ext_divergence_status s;
    (void)state;

    start(&n, LAST);
    inject(&n, 3, 5, ours_at(5), false);
    inject(&n, 3, LAST, theirs_at(LAST), false);
    for (unsigned k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        raft_index at, answer;
        FAKE_WAIT(&n.fk, n_checksums(&n.fk, 3, true) == k + 1);
        fake_lock(&n.fk);
        at = last_checksum(&n.fk, 3, true)->index;
        fake_unlock(&n.fk);
        assert_int_equal(at, expect[k]);
        answer = at < restart ? restart : at;
        inject(&n, 3, answer, theirs_at(answer), false);
    }
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 3, true) == 7);
    divergence_status(n.v, &s);
    assert_true(s.mismatch);
    assert_int_equal(s.first, SPLIT);
    assert_int_equal(s.last_same, SPLIT - 1);
    stop(&n);
}

/* The tick reports this node's latest value to every connected peer;
 * a peer's value at an index not applied yet here is compared once it
 * is, at a later tick. */
static void test_report_and_pending(void **state)
{
    struct node n;
    const struct raft_checksum *c;
    (void)state;

    start(&n, LAST);
    fake_on_loop(&n.fk, on_tick, n.v);
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 2, false) == 1 &&
                          n_checksums(&n.fk, 3, false) == 1);
    fake_lock(&n.fk);
    c = last_checksum(&n.fk, 3, false);
    assert_int_equal(c->index, LAST);
    assert_int_equal(c->checksum, ours_at(LAST));
    fake_unlock(&n.fk);

    inject(&n, 2, LAST + 10, 5, false); /* not ours_at(LAST + 10) */
    assert_int_equal(divergence_peer(n.v, 2), 0);
    for (raft_index i = LAST + 1; i <= LAST + 10; i++) {
        divergence_applied(n.v, i, ours_at(i));
    }
    /* The next tick that reports (once a period passed) compares it. */
    for (int i = 0; i < EXT_WAIT_MS && divergence_peer(n.v, 2) == 0; i++) {
        fake_on_loop(&n.fk, on_tick, n.v);
        usleep(1000);
    }
    assert_int_equal(divergence_peer(n.v, 2), LAST + 10);
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 3, false) == 2);
    stop(&n);
}

/* A replica is outvoted only once it differs from a majority of the
 * voters (not counting itself), and then names the lowest index. */
static void test_outvoted(void **state)
{
    struct node n;
    struct raft_configuration c;
    raft_id peer = 0;
    (void)state;

    raft_configuration_init(&c);
    assert_int_equal(raft_configuration_add(&c, 1, RAFT_VOTER, "a:1"), 0);
    assert_int_equal(raft_configuration_add(&c, 2, RAFT_VOTER, "a:2"), 0);
    assert_int_equal(raft_configuration_add(&c, 3, RAFT_VOTER, "a:3"), 0);
    start(&n, LAST);
    inject(&n, 3, 90, theirs_at(90), false);
    assert_int_equal(divergence_outvoted(n.v, &c, &peer), 0);
    inject(&n, 2, 80, ours_at(80) + 1, false);
    assert_int_equal(divergence_outvoted(n.v, &c, &peer), 80);
    assert_int_equal(peer, 2);
    /* A learner does not count. */
    assert_int_equal(raft_configuration_remove(&c, 2), 0);
    assert_int_equal(raft_configuration_add(&c, 2, RAFT_LEARNER, "a:2"), 0);
    assert_int_equal(divergence_outvoted(n.v, &c, &peer), 0);
    stop(&n);
}

/* With the checksum off, frames are ignored and status says why; a
 * restart of the record (a snapshot's index) forgets what was compared,
 * and a gap in the applied indexes starts the record afresh, so that an
 * index before it is no longer compared. */
static void test_off_and_restarted(void **state)
{
    struct node n;
    struct ext_divergence_status s;
    (void)state;

    start(&n, LAST);
    inject(&n, 3, LAST, theirs_at(LAST), false);
    assert_int_equal(divergence_peer(n.v, 3), LAST);
    divergence_set(n.v, false, "checksum=off", LAST, 0);
    divergence_status(n.v, &s);
    assert_false(s.on);
    assert_string_equal(s.why, "checksum=off");
    assert_false(s.mismatch);
    inject(&n, 2, LAST, 5, true);
    assert_int_equal(divergence_peer(n.v, 2), 0);

    divergence_set(n.v, true, "", 500, ours_at(500));
    divergence_status(n.v, &s);
    assert_true(s.on);
    assert_int_equal(s.index, 500);
    assert_int_equal(s.value, ours_at(500));
    divergence_applied(n.v, 501, ours_at(501));
    divergence_applied(n.v, 900, ours_at(900)); /* a gap: a snapshot */
    inject(&n, 3, 501, 5, false);
    assert_int_equal(divergence_peer(n.v, 3), 0);
    inject(&n, 3, 900, 5, false);
    assert_int_equal(divergence_peer(n.v, 3), 900);
    FAKE_CHECK(&n.fk, n_checksums(&n.fk, 2, false) == 0);
    stop(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_search_first_difference),
        cmocka_unit_test(test_probe_answered),
        cmocka_unit_test(test_probe_below_ring_answered_at_oldest),
        cmocka_unit_test(test_search_past_a_restarted_peer),
        cmocka_unit_test(test_report_and_pending),
        cmocka_unit_test(test_outvoted),
        cmocka_unit_test(test_off_and_restarted),
    };
    return cmocka_run_group_tests_name("ext_divergence", tests, NULL, NULL);
}
