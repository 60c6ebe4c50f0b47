/* Tests of ext/runtime/divergence_judge.c, the judge of a divergence's
 * evidence, and of the divergence's one owner, the applier
 * (ext/runtime/applier.c, on a real SQLite database in a temporary
 * directory), as the others ask it: a conflict the core reports marks
 * the replica diverged once, and not when what it contradicted is gone;
 * a checksum verdict read before a snapshot install is dropped, one read
 * after it marks; a driver (raft/uv_node.h, a one-voter core on
 * 127.0.0.1) declines TimeoutNow exactly while the applier it asks holds
 * a divergence. */

#include <setjmp.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/divergence_judge.h"
#include "raft/uv_node.h"
#include "tests/ext/helpers.h"
#include "tests/raft/step.h"

/* Longest a test waits for another thread, ms. */
#define WAIT_MS 5000

/* A database, its applier, a snapshot of it and the replica checksum's
 * records. */
struct fixture {
    struct tmpdb db;
    struct ext_node_log log;
    struct ext_applier *a;
    struct ext_divergence *v;
    char snap[160];         /* a snapshot at index 1 */
    struct raft_uv_node *d; /* test_driver_asks_the_applier's */
    atomic_int declining;   /* the core's DECLINE state at the last
                                  tick, -1 before the first */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct ext_applier_config cfg = {.snapshot_threshold = 1u << 30};
    struct ext_applier_hooks hooks = {.data = f};
    struct raft_entry e = {.term = 1, .index = 1, .type = RAFT_ENTRY_NORMAL};
    uint64_t index = 0, term = 0;
    char msg[256] = "";

    tmpdb_init(&f->db);
    node_log_init(&f->log, 1, RAFT_LOG_ERROR + 1); /* quiet */
    assert_int_equal(
        applier_start(open_fsm(f->db.path), &cfg, &hooks, &f->log, &f->a), 0);
    assert_int_equal(divergence_new(1, &f->log, &f->v), 0);
    e.data = request_buf(1, 1, "CREATE TABLE t(x)");
    assert_int_equal(applier_push(f->a, &e, 1), 0);
    raft_buf_unref(e.data);
    for (int i = 0; i < WAIT_MS / 10 && applier_applied(f->a) < 1; i++) {
        usleep(10 * 1000);
    }
    if (applier_applied(f->a) < 1) {
        fail_msg("entry 1 not applied within %d ms (applied %" PRIu64 ")",
                 WAIT_MS, applier_applied(f->a));
    }
    snprintf(f->snap, sizeof f->snap, "%s/snap", f->db.dir);
    assert_int_equal(
        applier_snapshot_create(f->a, f->snap, &index, &term, msg, sizeof msg),
        0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    divergence_free(f->v);
    applier_stop(f->a);
    node_log_close(&f->log);
    tmpdb_remove(&f->db);
    free(f);
    return 0;
}

/* repair installs the snapshot into @f's database, as a repair does: a
 * divergence ends. */
static void repair(struct fixture *f)
{
    uint64_t index = 0, term = 0;
    char msg[256] = "";

    applier_hold(f->a);
    assert_int_equal(
        applier_install(f->a, f->snap, &index, &term, msg, sizeof msg), 0);
    applier_release(f->a, index);
    assert_false(applier_diverged(f->a, NULL));
}

/* core_at_snapshot returns the core of server 1 of {1, 2, 3} restored
 * from a snapshot at index 2 of term 1 (bootstrap_from=), log empty. */
static struct raft *core_at_snapshot(void)
{
    struct raft_config cfg;
    struct raft_hard_state hs = {1, 0};
    struct raft *r = NULL;

    config3(&cfg, 1, 1 << 20, 4, 3);
    assert_int_equal(raft_restore(&cfg, &hs, 2, 1, NULL, 0, 2, &r), 0);
    return r;
}

/* A leader whose history contradicts the snapshot this core holds: the
 * judge marks the replica diverged, naming both terms; the same conflict
 * does not mark it again once repaired, a new one does. */
static void test_conflict_marks_once(void **state)
{
    struct fixture *f = *state;
    struct ext_divergence_judge j = {0};
    struct ext_applier_divergence dv;
    struct raft_update u;
    struct raft *r = core_at_snapshot();

    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_false(applier_diverged(f->a, NULL));

    /* Leader 2 of term 2 holds entry 2 of term 2: at our boundary. */
    assert_int_equal(step_append(r, 2, 2, 2, 2, 3, NULL, 0, &u), 0);
    assert_int_equal(raft_conflicts(r, NULL), 1);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_true(applier_diverged(f->a, &dv));
    assert_string_equal(
        dv.reason,
        "the leader (server 2, term 2) contradicts this replica's committed "
        "history: its entry 2 has term 2, this node's snapshot at 2 has term "
        "1 (the two were founded apart, e.g. founders that elected a leader "
        "without the node started with bootstrap_from=, or this node's state "
        "was replaced); its entries are refused");
    assert_int_equal(dv.at_index, 2);

    repair(f);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_false(applier_diverged(f->a, NULL));
    assert_int_equal(applier_repairs(f->a), 1);

    assert_int_equal(step_append(r, 2, 2, 2, 2, 3, NULL, 0, &u), 0);
    assert_int_equal(raft_conflicts(r, NULL), 2);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_true(applier_diverged(f->a, NULL));
    raft_close(r);
}

/* core_with_conflict_at_3 returns core_at_snapshot's core with entry 3
 * of term 3 committed, then a leader of term 4 with another entry 3
 * dropped: one conflict, at committed entry 3. */
static struct raft *core_with_conflict_at_3(void)
{
    struct raft_entry ours[1] = {{3, 3, RAFT_ENTRY_NOOP, NULL}};
    struct raft_entry other[1] = {{4, 3, RAFT_ENTRY_NOOP, NULL}};
    struct raft_conflict c;
    struct raft_update u;
    struct raft *r = core_at_snapshot();

    assert_int_equal(step_append(r, 3, 3, 2, 1, 3, ours, 1, &u), 0);
    assert_int_equal(step_persisted(r, 3, 3, &u), 0);
    assert_int_equal(raft_commit_index(r), 3);
    assert_int_equal(step_append(r, 2, 4, 2, 1, 3, other, 1, &u), 0);
    assert_int_equal(raft_conflicts(r, &c), 1);
    assert_false(c.snapshot);
    assert_int_equal(c.index, 3);
    return r;
}

/* A conflict at a committed entry that the core has compacted since
 * (a repair's snapshot replaced what it contradicted) marks nothing. */
static void test_conflict_about_replaced_entry_ignored(void **state)
{
    struct fixture *f = *state;
    struct ext_divergence_judge j = {0};
    struct raft_event compact = {.type = RAFT_EVENT_COMPACT};
    struct raft_update u;
    struct raft *r = core_with_conflict_at_3();

    compact.compact.index = 3;
    assert_int_equal(raft_step(r, &compact, &u), 0);
    assert_int_equal(raft_snapshot_index(r), 3);

    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_false(applier_diverged(f->a, NULL));
    raft_close(r);
}

/* A conflict the core dropped while a repair's snapshot was being
 * installed (the state machine has installed it, the core not yet) is
 * not judged against the core's old log: it waits until the core holds
 * the snapshot, which replaced what it contradicted, and marks
 * nothing. Judged at once, it marked the repaired replica again. */
static void test_conflict_in_the_install_window_ignored(void **state)
{
    struct fixture *f = *state;
    struct ext_divergence_judge j = {0};
    struct raft_event compact = {.type = RAFT_EVENT_COMPACT};
    struct raft_entry e = {.term = 1, .type = RAFT_ENTRY_NORMAL};
    struct raft_update u;
    struct raft *r;
    uint64_t index = 0, term = 0;
    char msg[256] = "";

    /* The state machine at index 3, and a snapshot of it. */
    for (uint64_t i = 2; i <= 3; i++) {
        e.index = i;
        e.data = request_buf(1, i, "INSERT INTO t VALUES(1)");
        assert_int_equal(applier_push(f->a, &e, 1), 0);
        raft_buf_unref(e.data);
    }
    for (int i = 0; i < WAIT_MS / 10 && applier_applied(f->a) < 3; i++) {
        usleep(10 * 1000);
    }
    assert_int_equal(applier_applied(f->a), 3);
    snprintf(f->snap, sizeof f->snap, "%s/snap3", f->db.dir);
    assert_int_equal(
        applier_snapshot_create(f->a, f->snap, &index, &term, msg, sizeof msg),
        0);
    assert_int_equal(index, 3);

    r = core_with_conflict_at_3();

    /* The state machine installs the snapshot at 3; the core still has
     * its snapshot at 2. */
    repair(f);
    assert_int_equal(applier_installed_index(f->a), 3);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_false(applier_diverged(f->a, NULL));

    /* The core takes the snapshot: the conflict concerns what it
     * replaced. */
    compact.compact.index = 3;
    assert_int_equal(raft_step(r, &compact, &u), 0);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    divergence_judge_on_tick(&j, r, f->v, f->a);
    assert_false(applier_diverged(f->a, NULL));
    raft_close(r);
}

/* checksum_frame hands @v peer @from's value @value at @index. With one
 * index in the records, a difference there settles at once: nothing is
 * sent, so no driver is needed. */
static void checksum_frame(struct ext_divergence *v, raft_id from,
                           raft_index index, uint64_t value)
{
    struct raft_frame m;

    memset(&m, 0, sizeof m);
    m.type = RAFT_FRAME_CHECKSUM;
    m.from = from;
    m.to = 1;
    m.checksum.index = index;
    m.checksum.checksum = value;
    divergence_on_frame(v, NULL, &m);
}

/* A replica checksum outvoted by voters 2 and 3 of {1, 2, 3}: a verdict
 * read before a snapshot install is dropped (its records are of the
 * content the install replaced), one read after it marks the replica
 * diverged, naming the voter and the index. One voter alone does not
 * outvote it. */
static void test_checksum_verdict_before_install_dropped(void **state)
{
    struct fixture *f = *state;
    struct raft_configuration c = {.n = 3};
    struct ext_divergence_verdict verdict;
    struct ext_applier_divergence dv;

    for (unsigned i = 0; i < 3; i++) {
        c.servers[i].id = i + 1;
        c.servers[i].role = RAFT_VOTER;
    }
    divergence_set(f->v, true, "", 5, 0xaaaa);
    checksum_frame(f->v, 2, 5, 0xbbbb);
    assert_false(divergence_judge_outvoted(f->v, &c, f->a, &verdict));
    checksum_frame(f->v, 3, 5, 0xbbbb);
    assert_true(divergence_judge_outvoted(f->v, &c, f->a, &verdict));
    assert_int_equal(verdict.at, 5);
    assert_int_equal(verdict.peer, 2);

    repair(f);
    divergence_judge_rule(f->a, &verdict);
    assert_false(applier_diverged(f->a, NULL));
    assert_false(applier_any_diverged());

    assert_true(divergence_judge_outvoted(f->v, &c, f->a, &verdict));
    divergence_judge_rule(f->a, &verdict);
    assert_true(applier_diverged(f->a, &dv));
    assert_string_equal(dv.reason,
                        "the replica checksum differs from those of a "
                        "majority of the voters (server 2 from index 5; "
                        "raft_status() checksum.mismatch, raft_members()): "
                        "the same entries gave other content here");
}

static int st_append(void *data, const struct raft_hard_state *hs,
                     const struct raft_entry *entries, unsigned n, char *errmsg,
                     size_t errmsg_len)
{
    (void)data, (void)hs, (void)entries, (void)n, (void)errmsg;
    (void)errmsg_len;
    return 0;
}

static bool cb_diverged(void *data)
{
    struct fixture *f = data;
    return applier_diverged(f->a, NULL);
}

static void cb_tick(void *data)
{
    struct fixture *f = data;
    atomic_store(&f->declining, raft_declining(raft_uv_node_core(f->d)));
}

/* wait_declining waits until @f's driver ticked with its core's DECLINE
 * state @want; fails naming what it saw after WAIT_MS. */
static void wait_declining(struct fixture *f, int want)
{
    for (int i = 0; i < WAIT_MS / 5; i++) {
        if (atomic_load(&f->declining) == want) {
            return;
        }
        usleep(5 * 1000);
    }
    fail_msg("the core's DECLINE state stayed %d, not %d, for %d ms",
             atomic_load(&f->declining), want, WAIT_MS);
}

/* The driver holds no copy of the divergence: it asks the applier, and
 * its core declines TimeoutNow exactly while the applier holds one. */
static void test_driver_asks_the_applier(void **state)
{
    struct fixture *f = *state;
    struct raft_persist_storage st = {.log = {.append = st_append}};
    struct raft_uv_node_callbacks cb = {
        .data = f, .tick = cb_tick, .diverged = cb_diverged};
    struct raft_uv_node_config dc = {
        .id = 1,
        .listen_host = "127.0.0.1",
        .max_frame_bytes = 1 << 20,
        .tick_ms = 5,
        .snapshot_dir = f->db.dir,
        .snapshot_chunk_bytes = 65536,
    };
    struct raft *core = one_voter_core();
    char errmsg[256] = "";

    atomic_store(&f->declining, -1);
    if (raft_uv_node_start(core, &dc, &st, &cb, &f->d, errmsg, sizeof errmsg) !=
        0) {
        fail_msg("raft_uv_node_start: %s", errmsg);
    }
    wait_declining(f, 0);
    applier_mark_diverged(f->a, "a test's divergence");
    wait_declining(f, 1);
    repair(f);
    wait_declining(f, 0);
    raft_uv_node_stop(f->d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conflict_marks_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_conflict_about_replaced_entry_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_checksum_verdict_before_install_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_conflict_in_the_install_window_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_driver_asks_the_applier, setup,
                                        teardown),
    };
    return cmocka_run_group_tests_name("ext_divergence_judge", tests, NULL,
                                       NULL);
}
