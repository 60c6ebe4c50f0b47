/* Tests of the result codes of raftsql's SQL functions (raftsql.h), as a
 * C program sees them with sqlite3_extended_errcode, in the node's own
 * process: bad arguments and no node without any node, then on a
 * one-node cluster a SQL error keeping SQLite's own code, bad requests
 * and a request too big, and on a node without a leader "not applied"
 * and an interrupted wait. (tests/e2e/test_error_codes.py checks them
 * from another process too.) */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ext/raftsql.h"
#include "tests/ext/helpers.h"

/* code_of runs @sql on @db to its end and returns the extended result
 * code: SQLITE_OK when it succeeded. */
static int code_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        rc = sqlite3_extended_errcode(db);
    }
    sqlite3_finalize(st);
    return rc;
}

/* status_commit returns the commit index raft_status() shows on @db. */
static int64_t status_commit(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int64_t commit = -1;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(raft_status(), '$.commit')",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        commit = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    assert_true(commit >= 0);
    return commit;
}

/* two_ints runs @sql on @db and puts its first row's two columns in *a
 * and *b; returns whether it gave a row. */
static bool two_ints(sqlite3 *db, const char *sql, int64_t *a, int64_t *b)
{
    sqlite3_stmt *st = NULL;
    bool row = sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
               sqlite3_step(st) == SQLITE_ROW;
    if (row) {
        *a = sqlite3_column_int64(st, 0);
        *b = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return row;
}

/* settled_commit returns the commit index of @db's node once raft_status()
 * shows it equal to the applied index: a raft_exec returns once its entry
 * is applied, and the status's commit index, which the loop publishes,
 * may show the entry before it a moment longer (a loaded machine met
 * that: 6 read, then 7 with no write between). */
static int64_t settled_commit(sqlite3 *db)
{
    for (int i = 0; i < 2000; i++) {
        int64_t commit = -1, applied = -2;
        struct timespec ts = {0, 5 * 1000 * 1000}; /* at most 10 s */
        if (two_ints(db,
                     "SELECT json_extract(raft_status(), '$.commit'), "
                     "json_extract(raft_status(), '$.applied')",
                     &commit, &applied) &&
            commit >= 0 && commit == applied) {
            return commit;
        }
        nanosleep(&ts, NULL);
    }
    fail_msg("raft_status(): commit and applied did not meet in 10 s");
    return -1;
}

/* start runs raft_start(@config_fmt with a free port) on @db. */
static void start(sqlite3 *db, const char *config_fmt)
{
    char config[256], sql[400];
    snprintf(config, sizeof config, config_fmt, ext_free_port());
    snprintf(sql, sizeof sql, "SELECT raft_start('%s')", config);
    if (code_of(db, sql) != SQLITE_OK) {
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    }
}

/* stop stops the node of @db and removes its database @t and log. */
static void stop(sqlite3 *db, struct tmpdb *t)
{
    char cmd[160];
    assert_int_equal(code_of(db, "SELECT raft_stop()"), SQLITE_OK);
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "rm -rf '%s-raft'", t->path);
    assert_int_equal(system(cmd), 0);
    tmpdb_remove(t);
}

static int setup(void **state)
{
    (void)state;
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sqlite3_reset_auto_extension();
    return 0;
}

/* Without a node: bad arguments are RAFTSQL_INVALID, a call that needs a
 * node RAFTSQL_NO_NODE; an in-memory database is a bad argument. */
static void test_without_a_node(void **state)
{
    struct tmpdb t;
    sqlite3 *db = NULL, *mem = NULL;
    (void)state;

    tmpdb_init(&t);
    assert_int_equal(sqlite3_open(t.path, &db), SQLITE_OK);
    assert_int_equal(code_of(db, "SELECT raft_exec(42)"), RAFTSQL_INVALID);
    assert_int_equal(code_of(db, "SELECT raft_start('id=0')"), RAFTSQL_INVALID);
    assert_int_equal(code_of(db, "SELECT raft_add(0, '127.0.0.1:1')"),
                     RAFTSQL_INVALID);
    assert_int_equal(code_of(db, "SELECT raft_status()"), RAFTSQL_NO_NODE);
    assert_int_equal(code_of(db, "SELECT raft_exec('CREATE TABLE t(x)')"),
                     RAFTSQL_NO_NODE);
    assert_int_equal(code_of(db, "SELECT raft_stop()"), RAFTSQL_NO_NODE);
    /* The primary code is what sqlite3_errcode gives. */
    assert_int_equal(sqlite3_errcode(db), SQLITE_CANTOPEN);
    sqlite3_close(db);
    assert_int_equal(sqlite3_open(":memory:", &mem), SQLITE_OK);
    assert_int_equal(code_of(mem, "SELECT raft_leader()"), RAFTSQL_INVALID);
    sqlite3_close(mem);
    tmpdb_remove(&t);
}

/* On a one-node cluster: a SQL error keeps SQLite's extended code (rolled
 * back), a bad request or raft_exec inside a transaction is
 * RAFTSQL_INVALID, what raft_exec refuses to run RAFTSQL_REFUSED (before
 * the log: the commit index stays), a request over max_request_bytes RAFTSQL_TOOBIG, a
 * change naming no member RAFTSQL_INVALID. */
static void test_on_a_node(void **state)
{
    struct tmpdb t;
    sqlite3 *db = NULL;
    char big[3000], sql[3100];
    int64_t leader = 0, have_id = 0;
    (void)state;

    tmpdb_init(&t);
    assert_int_equal(sqlite3_open(t.path, &db), SQLITE_OK);
    start(db,
          "id=1 cluster=1@127.0.0.1:%d election_timeout_ms=300 "
          "heartbeat_ms=30 max_request_bytes=2048 log_level=error");
    /* The leader, and the cluster id its first term proposes once its
     * no-op committed: that entry must not land among the refusals
     * below, whose point is that they take no index. */
    for (int i = 0; i < 200 && (leader != 1 || !have_id); i++) {
        struct timespec ts = {0, 50 * 1000 * 1000}; /* at most 10 s */
        nanosleep(&ts, NULL);
        (void)two_ints(db,
                       "SELECT raft_leader(), raft_cluster_id() IS NOT NULL",
                       &leader, &have_id);
    }
    if (leader != 1 || !have_id) {
        fail_msg("after 10 s: leader %lld, cluster id known %lld",
                 (long long)leader, (long long)have_id);
    }
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('CREATE TABLE t(id "
                             "INTEGER PRIMARY KEY, u UNIQUE)')"),
                     SQLITE_OK);
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('INSERT INTO t "
                             "VALUES(1, 10)')"),
                     SQLITE_OK);
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('INSERT INTO t "
                             "VALUES(2, 10)')"),
                     SQLITE_CONSTRAINT_UNIQUE);
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('INSERT INTO t "
                             "VALUES(1, 11)')"),
                     SQLITE_CONSTRAINT_PRIMARYKEY);
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('INSRT INTO t "
                             "VALUES(3, 3)')"),
                     RAFTSQL_INVALID);
    /* What raft_exec refuses for what the SQL does: one code, and no
     * log index taken. */
    {
        static const char *const refused[] = {
            "SELECT raft_exec('BEGIN')",
            "SELECT raft_exec('VACUUM')",
            "SELECT raft_exec('ATTACH ''x.db'' AS x')",
            "SELECT raft_exec('CREATE TEMP TABLE tt(a)')",
            "SELECT raft_exec('SELECT sqlite_version()')",
            "SELECT raft_exec('INSERT INTO t(u) VALUES(datetime(''now'', "
            "''localtime''))')",
            "SELECT raft_exec('PRAGMA cache_size=10')",
        };
        int64_t before = settled_commit(db);
        for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
            if (code_of(db, refused[i]) != RAFTSQL_REFUSED) {
                fail_msg("%s: %d %s", refused[i], sqlite3_extended_errcode(db),
                         sqlite3_errmsg(db));
            }
        }
        assert_int_equal(status_commit(db), before);
    }
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('INSERT INTO t "
                             "VALUES(?, ?)', 4)"),
                     RAFTSQL_INVALID);
    assert_int_equal(code_of(db, "BEGIN"), SQLITE_OK);
    assert_int_equal(code_of(db,
                             "SELECT raft_exec('INSERT INTO t "
                             "VALUES(5, 5)')"),
                     RAFTSQL_INVALID);
    assert_int_equal(code_of(db, "ROLLBACK"), SQLITE_OK);
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    snprintf(sql, sizeof sql,
             "SELECT raft_exec('INSERT INTO t VALUES(6, ?)', '%s')", big);
    assert_int_equal(code_of(db, sql), RAFTSQL_TOOBIG);
    assert_int_equal(code_of(db, "SELECT raft_remove(9)"), RAFTSQL_INVALID);
    /* Nothing of the failed requests was applied. */
    {
        sqlite3_stmt *st = NULL;
        assert_int_equal(
            sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL),
            SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(st, 0), 1);
        sqlite3_finalize(st);
    }
    stop(db, &t);
}

/* interrupt_later interrupts the connection @arg after 300 ms. */
static void *interrupt_later(void *arg)
{
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    sqlite3_interrupt(arg);
    return NULL;
}

/* A node whose only peer never starts has no leader: a write is not
 * applied within exec_timeout_ms (RAFTSQL_NOT_APPLIED), and an
 * interrupted wait ends as RAFTSQL_INTERRUPTED (it never left). */
static void test_without_a_leader(void **state)
{
    struct tmpdb t;
    sqlite3 *db = NULL;
    pthread_t th;
    char config[160];
    (void)state;

    tmpdb_init(&t);
    assert_int_equal(sqlite3_open(t.path, &db), SQLITE_OK);
    /* Node 2's port: one nobody listens on. */
    snprintf(config, sizeof config,
             "id=1 cluster=1@127.0.0.1:%%d,2@127.0.0.1:%d "
             "election_timeout_ms=300 heartbeat_ms=30 exec_timeout_ms=1500 "
             "log_level=error",
             ext_free_port());
    start(db, config);
    assert_int_equal(code_of(db, "SELECT raft_exec('CREATE TABLE t(x)')"),
                     RAFTSQL_NOT_APPLIED);
    assert_int_equal(pthread_create(&th, NULL, interrupt_later, db), 0);
    assert_int_equal(code_of(db, "SELECT raft_exec('CREATE TABLE t(x)')"),
                     RAFTSQL_INTERRUPTED);
    pthread_join(th, NULL);
    assert_int_equal(sqlite3_errcode(db), SQLITE_INTERRUPT);
    stop(db, &t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_a_node),
        cmocka_unit_test(test_on_a_node),
        cmocka_unit_test(test_without_a_leader),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
