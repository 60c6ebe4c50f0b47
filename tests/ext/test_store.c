/* Tests of ext/runtime/store.c, the node's durable log, on a real LMDB log in a
 * temporary directory: the directory lock, appends through the driver's
 * storage interface, what store_load refuses and repairs, the compaction
 * policy, and the log half of a snapshot install (paper §7). */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/runtime/store.h"
#include "tests/ext/helpers.h"

/* A log directory (inside a temporary directory that also holds a
 * database file) and its store. */
struct fixture {
    struct tmpdb db;
    char dir[128];
    struct ext_node_log log;
    struct ext_store *s;
    struct raft_persist_storage st;
};

static void open_store(struct fixture *f, struct ext_applier *a)
{
    f->s = store_open_ok(f->dir, f->db.path, &f->log);
    memset(&f->st, 0, sizeof f->st);
    store_log(f->s, a, &f->st.log);
    if (a != NULL) {
        applier_persist_fsm(a, &f->st.fsm);
    }
}

/* install runs the storage job that installs snapshot file @path through
 * (@index, @term), as the driver does (raft_persist_run), and returns its
 * code. */
static int install(struct fixture *f, const char *path, raft_index index,
                   raft_term term)
{
    static struct raft_persist_job j; /* large: not on the stack */
    memset(&j, 0, sizeof j);
    j.install = true;
    snprintf(j.snap.path, sizeof j.snap.path, "%s", path);
    j.snap.index = index;
    j.snap.last_term = term;
    raft_persist_run(&j, &f->st);
    return j.rc;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    store_dir_init(&f->db, f->dir, sizeof f->dir, &f->log);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    store_close(f->s);
    store_dir_remove(&f->db, f->dir, &f->log);
    free(f);
    return 0;
}

/* append writes entries @lo..@hi of @term, each with payload
 * "entry-<index>", and hard state (@term, vote 1). */
static void append(struct fixture *f, raft_index lo, raft_index hi,
                   raft_term term)
{
    struct raft_hard_state hs = {.term = term, .vote = 1};
    struct raft_entry es[16];
    char msg[256] = "";
    unsigned n = (unsigned)(hi - lo + 1);
    assert_true(n <= 16);
    for (unsigned i = 0; i < n; i++) {
        char text[32];
        snprintf(text, sizeof text, "entry-%llu", (unsigned long long)(lo + i));
        es[i].term = term;
        es[i].index = lo + i;
        es[i].type = RAFT_ENTRY_NORMAL;
        es[i].data = raft_buf_copy(text, strlen(text));
    }
    if (f->st.log.append(f->st.log.data, &hs, es, n, msg, sizeof msg) != 0) {
        fail_msg("append: %s", msg);
    }
    for (unsigned i = 0; i < n; i++) {
        raft_buf_unref(es[i].data);
    }
}

/* load runs store_load for @applied (term 1) and returns its code, with
 * the state in @st (free it) and the message in @msg. */
static int load(struct fixture *f, uint64_t applied, struct ext_store_state *st,
                char *msg, size_t msg_len)
{
    memset(st, 0, sizeof *st);
    return store_load(f->s, applied, 1, st, msg, msg_len);
}

/* assert_log checks the boundary and the stored indexes lo..hi (none when
 * lo > hi). */
static void assert_log(struct fixture *f, uint64_t applied,
                       raft_index snap_index, raft_index lo, raft_index hi)
{
    struct ext_store_state st;
    char msg[512] = "";
    if (load(f, applied, &st, msg, sizeof msg) != 0) {
        fail_msg("store_load: %s", msg);
    }
    assert_int_equal(st.snap_index, snap_index);
    assert_int_equal(st.n_entries, lo > hi ? 0 : hi - lo + 1);
    for (unsigned i = 0; i < st.n_entries; i++) {
        assert_int_equal(st.entries[i].index, lo + i);
    }
    store_state_free(&st);
}

/* A second store on the same directory is refused while the first holds
 * the lock, and opens once it is closed. */
static void test_directory_lock(void **state)
{
    struct fixture *f = *state;
    struct ext_store_config cfg = {
        .dir = f->dir, .db_path = f->db.path, .log_max_bytes = 16u << 20};
    struct ext_store *other = NULL;
    char msg[512] = "";

    open_store(f, NULL);
    assert_int_equal(store_open(&cfg, &f->log, &other, msg, sizeof msg),
                     RAFT_BUSY);
    assert_non_null(strstr(msg, "another process runs a node on"));
    store_close(f->s);
    f->s = NULL;
    assert_int_equal(store_open(&cfg, &f->log, &other, msg, sizeof msg), 0);
    store_close(other);
}

/* store_discard (a failed start) removes the log directory its open
 * created, with all in it; a directory that existed before stays, with
 * its log. */
static void test_discard_removes_only_what_it_created(void **state)
{
    struct fixture *f = *state;
    struct stat st;

    open_store(f, NULL);
    append(f, 1, 2, 1);
    store_discard(f->s);
    f->s = NULL;
    assert_int_equal(stat(f->dir, &st), -1);

    open_store(f, NULL);
    append(f, 1, 2, 1);
    store_close(f->s);
    open_store(f, NULL);
    store_discard(f->s);
    f->s = NULL;
    open_store(f, NULL);
    assert_log(f, 0, 0, 1, 2);
}

/* What the storage interface appends and compacts is what store_load
 * reads back after a reopen, hard state included. */
static void test_append_compact_reload(void **state)
{
    struct fixture *f = *state;
    struct ext_store_state st;
    char msg[512] = "";

    open_store(f, NULL);
    append(f, 1, 5, 2);
    assert_int_equal(f->st.log.compact(f->st.log.data, 2, msg, sizeof msg), 0);
    store_close(f->s);
    open_store(f, NULL);
    assert_int_equal(load(f, 2, &st, msg, sizeof msg), 0);
    assert_int_equal(st.hs.term, 2);
    assert_int_equal(st.hs.vote, 1);
    assert_int_equal(st.snap_index, 2);
    assert_int_equal(st.snap_term, 2);
    assert_int_equal(st.n_entries, 3);
    assert_int_equal(st.entries[0].index, 3);
    assert_memory_equal(st.entries[0].data->data, "entry-3", 7);
    store_state_free(&st);
}

/* store_load refuses a database that does not belong to the log, and one
 * that lost writes the log no longer holds; a database ahead of its log
 * (an install interrupted before the log was reset) resets the log after
 * the database. */
static void test_load_refuses_and_repairs(void **state)
{
    struct fixture *f = *state;
    struct ext_store_state st;
    char msg[512] = "";

    open_store(f, NULL);
    assert_int_equal(load(f, 5, &st, msg, sizeof msg), RAFT_INVALID);
    assert_non_null(strstr(msg, "do not belong together"));

    append(f, 1, 6, 1);
    assert_int_equal(f->st.log.compact(f->st.log.data, 4, msg, sizeof msg), 0);
    assert_int_equal(load(f, 3, &st, msg, sizeof msg), RAFT_CORRUPT);
    assert_non_null(strstr(msg, "lost durable writes"));

    assert_log(f, 9, 9, 10, 9); /* reset: empty, boundary at 9 */
}

/* flip_payload flips a byte of the stored payload @text in the data file
 * of @dir (the store must be closed). */
static void flip_payload(const char *dir, const char *text)
{
    char path[256];
    FILE *fp;
    long len;
    unsigned char *buf, *at;

    snprintf(path, sizeof path, "%s/data.mdb", dir);
    fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    len = ftell(fp);
    buf = malloc((size_t)len);
    rewind(fp);
    assert_int_equal(fread(buf, 1, (size_t)len, fp), (size_t)len);
    at = memmem(buf, (size_t)len, text, strlen(text));
    assert_non_null(at);
    at[strlen(text) - 1] ^= 0x01;
    rewind(fp);
    assert_int_equal(fwrite(buf, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    free(buf);
}

/* corrupt_third writes entries 1..5, then damages entry 3 on disk. */
static void corrupt_third(struct fixture *f)
{
    open_store(f, NULL);
    append(f, 1, 5, 1);
    store_close(f->s);
    flip_payload(f->dir, "entry-3");
    open_store(f, NULL);
}

/* A corrupt entry the database holds is compacted away. */
static void test_corrupt_entry_applied(void **state)
{
    struct fixture *f = *state;
    corrupt_third(f);
    assert_log(f, 4, 4, 5, 5);
}

/* A corrupt entry that is the last applied one: the log restarts after
 * it. */
static void test_corrupt_entry_last_applied(void **state)
{
    struct fixture *f = *state;
    corrupt_third(f);
    assert_log(f, 3, 3, 4, 3);
}

/* A corrupt entry not applied yet: the log is dropped from it on. */
static void test_corrupt_entry_not_applied(void **state)
{
    struct fixture *f = *state;
    corrupt_third(f);
    assert_log(f, 1, 0, 1, 2);
}

/* The compaction policy: nothing below the threshold; the durable index
 * less the trailing entries above it, within the persisted log; when the
 * log is full, the durable index itself and a checkpoint when it lags. */
static void test_plan_compaction(void **state)
{
    struct fixture *f = *state;
    struct ext_store_view v = {.first = 1,
                               .last = 100,
                               .persisted = 100,
                               .applied = 100,
                               .durable = 90};
    bool ckpt = true;

    open_store(f, NULL); /* threshold 100, trailing 10 */
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 0);
    assert_false(ckpt);
    v.last = 101;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 80);
    v.persisted = 70;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 0);
    v.persisted = 101;
    v.durable = 10;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 0);
    v.log_full = true;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 10);
    assert_true(ckpt);
    v.first = 11;
    v.applied = 10;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 0);
    assert_false(ckpt);
    /* Large entries: past half of their budget in bytes, the durable
     * index is the target though the count is low. */
    v = (struct ext_store_view){.first = 1,
                                .last = 20,
                                .persisted = 20,
                                .applied = 20,
                                .durable = 15,
                                .used_bytes = 600,
                                .budget = 1000};
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 15);
    assert_true(ckpt);
    v.used_bytes = 400;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 0);
}

/* What one follower holds against compaction: after its match index
 * while heard within an election timeout; after the snapshot's index in
 * SNAPSHOT, however long it was silent (a follower installing a large
 * snapshot answers late; had it held nothing, the leader compacted past
 * the snapshot and it needed another, for ever under steady writes:
 * seen at 1 GB with the transfer paced); nothing once it needs a
 * compacted entry. */
static void test_follower_needs(void **state)
{
    struct raft_progress_info pi = {.state = RAFT_PROGRESS_REPLICATE,
                                    .match_index = 90,
                                    .last_contact = 50};
    (void)state;

    assert_int_equal(store_follower_needs(&pi, 50, 1000), 91);
    pi.last_contact = 5000; /* silent: not live */
    assert_int_equal(store_follower_needs(&pi, 50, 1000), 0);
    pi.last_contact = 50;
    assert_int_equal(store_follower_needs(&pi, 92, 1000), 0); /* compacted */
    pi.state = RAFT_PROGRESS_SNAPSHOT;
    pi.match_index = 0;
    pi.snapshot_index = 70;
    assert_int_equal(store_follower_needs(&pi, 71, 1000), 71);
    pi.last_contact = 5000; /* installing, answers late */
    assert_int_equal(store_follower_needs(&pi, 71, 1000), 71);
    pi.last_contact = UINT64_MAX; /* none this term yet */
    assert_int_equal(store_follower_needs(&pi, 71, 1000), 71);
    assert_int_equal(store_follower_needs(&pi, 72, 1000), 0);
}

/* A live follower's hold: the target stops before the first entry it
 * still needs (after a snapshot on its way, or after its match index),
 * and compacts nothing when that is the log's first entry; a log
 * past half of its byte budget compacts to the durable index all the
 * same. */
static void test_plan_compaction_hold(void **state)
{
    struct fixture *f = *state;
    struct ext_store_view v = {.first = 1,
                               .last = 101,
                               .persisted = 101,
                               .applied = 101,
                               .durable = 90,
                               .hold = 51};
    bool ckpt = true;

    open_store(f, NULL); /* threshold 100, trailing 10 */
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 50);
    v.hold = 86; /* behind it: the trailing entries decide */
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 80);
    v.first = 51;
    v.hold = 51; /* compacted through 50 already: nothing more */
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 0);
    v.used_bytes = 600;
    v.budget = 1000;
    assert_int_equal(store_plan_compaction(f->s, &v, &ckpt), 90);
    assert_true(ckpt);
}

/* snapshot_at makes a snapshot file (index 2, term 1) of a database of its
 * own in @f's temporary directory and returns its path in @out. */
static void snapshot_at(struct fixture *f, char *out, size_t out_len)
{
    struct tmpdb src;
    struct sql_fsm *fsm;
    struct sql_fsm_entry e[2] = {{.index = 1, .term = 1},
                                 {.index = 2, .term = 1}};
    struct sql_result r[2];
    struct buf *b[2];
    uint64_t index = 0, term = 0;
    char msg[256] = "";

    tmpdb_init(&src);
    fsm = open_fsm(src.path);
    b[0] = make_request(1, "CREATE TABLE t(x)");
    b[1] = make_request(2, "INSERT INTO t VALUES(1)");
    entry_set_payload(&e[0], b[0]);
    entry_set_payload(&e[1], b[1]);
    assert_int_equal(sql_fsm_apply(fsm, e, 2, r), 0);
    snprintf(out, out_len, "%s/snap", f->db.dir);
    assert_int_equal(
        sql_fsm_snapshot_create(fsm, out, &index, &term, msg, sizeof msg), 0);
    assert_int_equal(index, 2);
    sql_result_clear(&r[0]);
    sql_result_clear(&r[1]);
    buf_free(b[0]);
    buf_free(b[1]);
    sql_fsm_close(fsm);
    tmpdb_remove(&src);
}

/* An applier on @f's database. */
static struct ext_applier *new_applier(struct fixture *f)
{
    struct ext_applier_config cfg = {.snapshot_threshold = 1u << 30};
    struct ext_applier_hooks hooks = {0};
    struct ext_applier *a = NULL;
    assert_int_equal(
        applier_start(open_fsm(f->db.path), &cfg, &hooks, &f->log, &a), 0);
    return a;
}

/* install_case installs the snapshot (2, 1) over a log holding entries
 * 1..4 of @log_term and checks the log after it. */
static void install_case(struct fixture *f, raft_term log_term, raft_index lo,
                         raft_index hi)
{
    struct ext_applier *a = new_applier(f);
    char snap[200];

    snapshot_at(f, snap, sizeof snap);
    open_store(f, a);
    append(f, 1, 4, log_term);
    assert_int_equal(install(f, snap, 2, 1), 0);
    assert_int_equal(applier_applied(a), 2);
    assert_log(f, 2, 2, lo, hi);
    /* Not above the applied index: nothing changes. */
    assert_int_equal(install(f, snap, 2, 1), 0);
    assert_log(f, 2, 2, lo, hi);
    store_close(f->s);
    f->s = NULL;
    applier_stop(a);
    assert_query(f->db.path, "SELECT count(*) FROM t", "1");
    unlink(snap);
}

/* Paper §7: a log holding the snapshot's last entry (same term) keeps the
 * entries after it. */
static void test_install_keeps_suffix(void **state)
{
    install_case(*state, 1, 3, 4);
}

/* A log whose entry at the snapshot's index has another term is reset to
 * start after the snapshot. */
static void test_install_resets_log(void **state)
{
    install_case(*state, 3, 3, 2);
}

/* A snapshot that arrives while the apply thread is applying a batch that
 * goes past the snapshot's index is not installed over it (an install
 * that checks the applied index before waiting for the batch replaces the
 * newer database with the older snapshot; the queue goes on from after
 * the batch and the node never applies again). The
 * slow request is the injected delay: the install starts while it runs. */
static void test_install_after_a_batch_past_it(void **state)
{
    struct fixture *f = *state;
    struct ext_applier *a = new_applier(f);
    char snap[200];

    snapshot_at(f, snap, sizeof snap); /* index 2 */
    open_store(f, a);
    append(f, 1, 4, 1);
    {
        static const char *const sqls[3] = {
            "CREATE TABLE t(x)",
            "INSERT INTO t VALUES(1)",
            "CREATE TABLE u(x); INSERT INTO u SELECT x FROM (WITH RECURSIVE "
            "c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 3000000) "
            "SELECT x FROM c)",
        };
        struct raft_entry e[3];
        for (unsigned i = 0; i < 3; i++) {
            e[i] = (struct raft_entry){
                .term = 1, .index = i + 1, .type = RAFT_ENTRY_NORMAL};
            e[i].data = request_buf(1, i + 1, sqls[i]);
        }
        assert_int_equal(applier_push(a, e, 3), 0); /* one batch */
        for (unsigned i = 0; i < 3; i++) {
            raft_buf_unref(e[i].data);
        }
    }
    usleep(100 * 1000); /* the batch of 1..3 runs */
    assert_true(applier_applied(a) < 2);
    assert_int_equal(install(f, snap, 2, 1), 0);
    assert_int_equal(applier_applied(a), 3);
    store_close(f->s);
    f->s = NULL;
    applier_stop(a);
    assert_query(f->db.path, "SELECT count(*) FROM u", "3000000");
    unlink(snap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_directory_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_compact_reload, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_discard_removes_only_what_it_created, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_refuses_and_repairs, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entry_applied, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entry_last_applied, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entry_not_applied, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_plan_compaction, setup, teardown),
        cmocka_unit_test(test_follower_needs),
        cmocka_unit_test_setup_teardown(test_plan_compaction_hold, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_install_keeps_suffix, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_install_resets_log, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_install_after_a_batch_past_it,
                                        setup, teardown),
    };
    return cmocka_run_group_tests_name("ext_store", tests, NULL, NULL);
}
