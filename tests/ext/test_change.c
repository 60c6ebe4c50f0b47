/* Tests of ext/runtime/change.c on a real driver (raft/uv_node.h) running a
 * one-voter core on 127.0.0.1 with a storage that keeps nothing: a change
 * returns once committed and never before, refusals read as what they
 * are, one change at a time, and the member view. */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/change.h"
#include "tests/ext/helpers.h"

/* The node: a driver and the change module it feeds. */
struct node {
    struct raft_uv_node *d; /* written before the loop starts */
    struct ext_change *c;
    char dir[64];
};

/* How long the storage takes to make a configuration entry durable, ms
 * (0: at once); set by the test thread, read on the disk thread. */
static unsigned stall_config_ms;

static int st_append(void *data, const struct raft_hard_state *hs,
                     const struct raft_entry *entries, unsigned n, char *errmsg,
                     size_t errmsg_len)
{
    unsigned ms = __atomic_load_n(&stall_config_ms, __ATOMIC_SEQ_CST);
    (void)data, (void)hs, (void)errmsg;
    (void)errmsg_len;
    for (unsigned i = 0; i < n && ms > 0; i++) {
        if (entries[i].type == RAFT_ENTRY_CONFIG) {
            usleep(ms * 1000u);
            break;
        }
    }
    return 0;
}

static void cb_wake(void *data)
{
    struct node *n = data;
    change_on_wake(n->c, n->d);
}

static void cb_tick(void *data)
{
    struct node *n = data;
    change_on_tick(n->c, n->d);
}

static void start(struct node *n)
{
    struct raft_persist_storage st = {.log = {.data = n, .append = st_append}};
    struct raft_uv_node_callbacks cb = {
        .data = n, .wake = cb_wake, .tick = cb_tick};
    struct raft_uv_node_config dc;
    struct ext_config cfg;
    struct raft *core = one_voter_core();
    char errmsg[256] = "";

    memset(&cfg, 0, sizeof cfg);
    cfg.id = 1;
    cfg.election_timeout_ms = 100;
    cfg.heartbeat_ms = 20;
    assert_int_equal(change_new(&cfg, 0, &n->c), 0);
    snprintf(n->dir, sizeof n->dir, "/tmp/raftsql-change-XXXXXX");
    assert_non_null(mkdtemp(n->dir));
    memset(&dc, 0, sizeof dc);
    dc.id = 1;
    dc.listen_host = "127.0.0.1";
    dc.max_frame_bytes = 1 << 20;
    dc.tick_ms = 5;
    dc.snapshot_dir = n->dir;
    dc.snapshot_chunk_bytes = 65536;
    if (raft_uv_node_start(core, &dc, &st, &cb, &n->d, errmsg, sizeof errmsg) !=
        0) {
        fail_msg("raft_uv_node_start: %s", errmsg);
    }
    change_attach(n->c, n->d);
}

static void stop(struct node *n)
{
    change_shutdown(n->c);
    raft_uv_node_stop(n->d);
    change_free(n->c);
    rmdir(n->dir);
}

/* submit runs @op on @id (address @address, may be NULL) and returns the
 * result's code, its text in @out. */
static int submit(struct node *n, uint8_t op, raft_id id, const char *address,
                  unsigned timeout_ms, struct ext_change_result *out)
{
    struct ext_change_request q;
    memset(&q, 0, sizeof q);
    q.op = op;
    q.id = id;
    if (address != NULL) {
        snprintf(q.address, sizeof q.address, "%s", address);
    }
    return change_submit(n->c, &q, timeout_ms, NULL, out);
}

/* wait_rows waits until the member view has @want rows, the first one
 * the leader; returns them in @rows. */
static void wait_rows(struct node *n, unsigned want,
                      struct ext_member_row *rows)
{
    for (int i = 0; i < 400; i++) {
        if (change_members(n->c, rows, RAFT_MAX_SERVERS) == want &&
            rows[0].leader) {
            return;
        }
        usleep(5000);
    }
    fail_msg("the member view never had %u rows with a leader", want);
}

/* add_learner_2 adds learner 2, retrying while the leader's first entry of
 * its term is not committed (Ongaro's fix: no change before it). */
static void add_learner_2(struct node *n, struct ext_change_result *r)
{
    for (int i = 0; i < 100; i++) {
        if (submit(n, EXT_CHANGE_ADD, 2, "127.0.0.1:9", 2000, r) != RAFT_BUSY) {
            break;
        }
        usleep(10000);
    }
}

/* Changes return once committed and shown in the member view, with their
 * entry's index; refusals say why in words. */
static void test_changes_and_refusals(void **state)
{
    struct node n;
    struct ext_change_result r;
    struct ext_member_row rows[RAFT_MAX_SERVERS];
    (void)state;

    start(&n);
    wait_rows(&n, 1, rows);
    assert_int_equal(rows[0].id, 1);
    assert_int_equal(rows[0].role, RAFT_VOTER);

    add_learner_2(&n, &r);
    assert_int_equal(r.rc, 0);
    assert_true(r.index > 0);
    assert_string_equal(r.errmsg, "ok");
    /* Answered once the member view shows it: no wait here. */
    assert_int_equal(change_members(n.c, rows, RAFT_MAX_SERVERS), 2);
    assert_int_equal(rows[1].id, 2);
    assert_int_equal(rows[1].role, RAFT_LEARNER);
    assert_string_equal(rows[1].address, "127.0.0.1:9");
    assert_int_equal(rows[1].connected, 0);

    assert_int_equal(submit(&n, EXT_CHANGE_ADD, 2, "127.0.0.1:9", 2000, &r),
                     RAFT_INVALID);
    assert_string_equal(r.errmsg, "server 2 is a member already");
    assert_int_equal(submit(&n, EXT_CHANGE_REMOVE, 9, NULL, 2000, &r),
                     RAFT_NOTFOUND);
    assert_string_equal(r.errmsg, "unknown id: server 9 is not a member");
    assert_int_equal(submit(&n, EXT_CHANGE_TRANSFER, 0, NULL, 2000, &r),
                     RAFT_NOTFOUND);
    assert_string_equal(r.errmsg,
                        "there is no other voter to lead (or none "
                        "this leader reaches)");
    assert_int_equal(submit(&n, EXT_CHANGE_TRANSFER, 2, NULL, 2000, &r),
                     RAFT_INVALID);
    assert_non_null(strstr(r.errmsg, "is a learner"));
    assert_int_equal(submit(&n, EXT_CHANGE_DEMOTE, 1, NULL, 2000, &r),
                     RAFT_INVALID);
    assert_string_equal(r.errmsg, "server 1 is the last voter");
    assert_int_equal(submit(&n, EXT_CHANGE_REMOVE, 2, NULL, 2000, &r), 0);
    assert_int_equal(change_members(n.c, rows, RAFT_MAX_SERVERS), 1);
    stop(&n);
}

/* A caller waiting for a change; the test's second caller runs while it
 * waits. */
struct waiting {
    struct node *n;
    struct ext_change_result r;
};

static void *add_thread(void *arg)
{
    struct waiting *w = arg;
    submit(w->n, EXT_CHANGE_ADD, 3, "127.0.0.1:10", 600, &w->r);
    return NULL;
}

/* The promotion of a learner that has received nothing is refused (it
 * could leave voters that elect nobody, raft.h). A change whose entry the
 * storage does not make durable in time never commits: it is never
 * reported done (outcome unknown at the deadline); meanwhile a second
 * caller on the node is refused at once, and after it the leader refuses
 * the next change while that entry is uncommitted. */
static void test_never_done_before_commit(void **state)
{
    struct node n;
    struct waiting w = {.n = &n};
    struct ext_change_result r;
    struct ext_member_row rows[RAFT_MAX_SERVERS];
    pthread_t t;
    (void)state;

    start(&n);
    wait_rows(&n, 1, rows);
    add_learner_2(&n, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(submit(&n, EXT_CHANGE_PROMOTE, 2, NULL, 2000, &r),
                     RAFT_BUSY);
    assert_non_null(strstr(r.errmsg, "server 2 has not received the log"));
    __atomic_store_n(&stall_config_ms, 2000, __ATOMIC_SEQ_CST);
    assert_int_equal(pthread_create(&t, NULL, add_thread, &w), 0);
    usleep(100000);
    assert_int_equal(submit(&n, EXT_CHANGE_REMOVE, 2, NULL, 2000, &r),
                     RAFT_BUSY);
    assert_non_null(strstr(r.errmsg, "pending on this node"));
    pthread_join(t, NULL);
    assert_int_equal(w.r.rc, RAFT_UNKNOWN);
    assert_true(w.r.unknown);
    assert_non_null(strstr(w.r.errmsg, "outcome unknown"));
    wait_rows(&n, 3, rows); /* in force, uncommitted */
    assert_int_equal(rows[2].id, 3);
    assert_int_equal(submit(&n, EXT_CHANGE_REMOVE, 2, NULL, 2000, &r),
                     RAFT_BUSY);
    assert_non_null(strstr(r.errmsg, "another membership change is pending"));
    __atomic_store_n(&stall_config_ms, 0, __ATOMIC_SEQ_CST);
    stop(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changes_and_refusals),
        cmocka_unit_test(test_never_done_before_commit),
    };
    return cmocka_run_group_tests_name("ext_change", tests, NULL, NULL);
}
