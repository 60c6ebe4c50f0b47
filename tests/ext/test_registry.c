/* Tests of ext/surface/registry.c, the process's table of running nodes,
 * through registry.h with real one-node clusters on 127.0.0.1 in
 * temporary directories: one node per database file, a second start
 * refused (in this process, or where another node's socket answers for
 * the file), references that keep a node alive through its stop, a file
 * that stays a replica after the stop, what the running node says
 * (diverged), and a failed start that leaves nothing behind. */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/surface/registry.h"
#include "tests/ext/helpers.h"

static int conn_init(sqlite3 *db)
{
    (void)db;
    return 0;
}

/* start starts a node of a one-server cluster for @db's file with the
 * extra keys @more; returns ext_registry_start's code, why in @msg. */
static int start(const struct tmpdb *db, const char *path, const char *more,
                 char *msg, size_t len)
{
    struct ext_config cfg;
    char text[512];
    int port = ext_free_port();
    snprintf(text, sizeof text,
             "id=1 listen=127.0.0.1:%d cluster=1@127.0.0.1:%d "
             "election_timeout_ms=200 heartbeat_ms=20 log_level=error %s",
             port, port, more);
    if (ext_config_parse(text, db->path, &cfg, msg, len) != 0) {
        fail_msg("ext_config_parse '%s': %s", text, msg);
    }
    return ext_registry_start(path, &cfg, conn_init, msg, len);
}

/* One node per file: a second start for it is refused while it runs;
 * the file is a replica from its first start on, also after the stop;
 * a stop of a file with no node is NOTFOUND. */
static void test_one_node_per_file(void **state)
{
    struct tmpdb db;
    char msg[1024], want[1024];
    (void)state;

    tmpdb_init(&db);
    assert_false(ext_registry_running(db.path));
    assert_false(ext_registry_replica(db.path));
    assert_null(ext_registry_acquire(db.path));
    if (start(&db, db.path, "socket=off", msg, sizeof msg) != 0) {
        fail_msg("start: %s", msg);
    }
    assert_true(ext_registry_running(db.path));
    assert_true(ext_registry_replica(db.path));
    assert_int_equal(start(&db, db.path, "socket=off", msg, sizeof msg),
                     RAFT_BUSY);
    snprintf(want, sizeof want,
             "a node already runs for %s in this process (raft_stop() "
             "first)",
             db.path);
    assert_string_equal(msg, want);
    assert_int_equal(ext_registry_stop(db.path), 0);
    assert_false(ext_registry_running(db.path));
    assert_true(ext_registry_replica(db.path));
    assert_null(ext_registry_acquire(db.path));
    assert_int_equal(ext_registry_stop(db.path), RAFT_NOTFOUND);
    tmpdb_remove(&db);
}

/* A stop that runs on another thread. */
struct stopper {
    const char *path;
    int rc;
    bool done;
    pthread_t th;
};

static void *stop_main(void *arg)
{
    struct stopper *s = arg;
    s->rc = ext_registry_stop(s->path);
    __atomic_store_n(&s->done, true, __ATOMIC_SEQ_CST);
    return NULL;
}

/* refused says whether the registry hands out no reference to @path's
 * node now (releasing one it did hand out). */
static bool refused(const char *path)
{
    struct ext_node *n = ext_registry_acquire(path);
    if (n != NULL) {
        ext_registry_release(n);
    }
    return n == NULL;
}

/* A reference keeps the node alive: its stop refuses new references at
 * once and waits until the last one is released. What the node says of
 * itself (diverged) reaches the process through the registry. */
static void test_reference_holds_stop(void **state)
{
    struct tmpdb db;
    struct ext_node *n;
    struct stopper s = {0};
    char msg[1024], why[512] = "";
    (void)state;

    tmpdb_init(&db);
    if (start(&db, db.path, "socket=off", msg, sizeof msg) != 0) {
        fail_msg("start: %s", msg);
    }
    n = ext_registry_acquire(db.path);
    assert_non_null(n);
    assert_false(ext_registry_diverged(db.path, why, sizeof why));
    ext_node_mark_diverged(n, "a commit this node did not make");
    assert_true(ext_registry_diverged(db.path, why, sizeof why));
    assert_non_null(strstr(why, "a commit this node did not make"));

    s.path = db.path;
    assert_int_equal(pthread_create(&s.th, NULL, stop_main, &s), 0);
    /* Once stopping, no new reference is handed out. */
    EXT_WAIT(refused(db.path), "references still handed out");
    assert_false(__atomic_load_n(&s.done, __ATOMIC_SEQ_CST));
    assert_true(ext_registry_running(db.path));
    ext_registry_release(n);
    assert_int_equal(pthread_join(s.th, NULL), 0);
    assert_int_equal(s.rc, 0);
    assert_false(ext_registry_running(db.path));
    assert_false(ext_registry_diverged(db.path, why, sizeof why));
    tmpdb_remove(&db);
}

/* A node of another process (here: the same file under another
 * spelling, whose pointer file names this process's live socket) makes
 * a start refuse, naming its process. */
static void test_other_process_serves(void **state)
{
    struct tmpdb db;
    char other[4200], msg[1024], want[64];
    (void)state;

    tmpdb_init(&db);
    if (start(&db, db.path, "", msg, sizeof msg) != 0) {
        fail_msg("start: %s", msg);
    }
    snprintf(other, sizeof other, "%s/./%s", db.dir, strrchr(db.path, '/') + 1);
    assert_int_equal(start(&db, other, "", msg, sizeof msg), RAFT_BUSY);
    snprintf(want, sizeof want, "in process %ld (socket", (long)getpid());
    assert_non_null(strstr(msg, "a raftsql node already runs for "));
    assert_non_null(strstr(msg, want));
    assert_false(ext_registry_running(other));
    ext_registry_stop_all();
    assert_false(ext_registry_running(db.path));
    tmpdb_remove(&db);
}

/* A start that fails (its port taken by another node) leaves no node
 * and no entry behind: the file can be started again. */
static void test_failed_start_leaves_nothing(void **state)
{
    struct tmpdb a, b;
    struct ext_config cfg;
    char text[256], msg[1024];
    int port = ext_free_port();
    (void)state;

    tmpdb_init(&a);
    tmpdb_init(&b);
    snprintf(text, sizeof text,
             "id=1 listen=127.0.0.1:%d cluster=1@127.0.0.1:%d socket=off", port,
             port);
    assert_int_equal(ext_config_parse(text, a.path, &cfg, msg, sizeof msg), 0);
    if (ext_registry_start(a.path, &cfg, conn_init, msg, sizeof msg) != 0) {
        fail_msg("start: %s", msg);
    }
    assert_int_equal(ext_config_parse(text, b.path, &cfg, msg, sizeof msg), 0);
    assert_int_not_equal(
        ext_registry_start(b.path, &cfg, conn_init, msg, sizeof msg), 0);
    assert_false(ext_registry_running(b.path));
    assert_false(ext_registry_replica(b.path));
    assert_null(ext_registry_acquire(b.path));
    if (start(&b, b.path, "socket=off", msg, sizeof msg) != 0) {
        fail_msg("start again: %s", msg);
    }
    assert_true(ext_registry_running(b.path));
    ext_registry_stop_all();
    assert_false(ext_registry_running(a.path));
    assert_false(ext_registry_running(b.path));
    tmpdb_remove(&a);
    tmpdb_remove(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_node_per_file),
        cmocka_unit_test(test_reference_holds_stop),
        cmocka_unit_test(test_other_process_serves),
        cmocka_unit_test(test_failed_start_leaves_nothing),
    };
    return cmocka_run_group_tests_name("ext_registry", tests, NULL, NULL);
}
