/* Tests of the write guard (ext/surface/guard.c): beside a host's own
 * authorizer (raftsql_set_authorizer), on a one-node cluster running in
 * this process: the guard decides first, the host's answer stands
 * otherwise, and NULL puts the guard back alone; and on a replica's file
 * that no node serves, whose direct writes it refuses. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ext/raftsql.h"
#include "tests/ext/helpers.h"

/* A host authorizer's record: how often it ran, and its policy. */
struct host {
    int calls; /* times called */
};

/* host_auth refuses PRAGMA user_version, hides the column "secret"
 * (SQLITE_IGNORE reads it as NULL) and allows the rest. */
static int host_auth(void *arg, int action, const char *a1, const char *a2,
                     const char *db_name, const char *trigger)
{
    struct host *h = arg;
    (void)db_name;
    (void)trigger;
    h->calls++;
    if (action == SQLITE_PRAGMA && a1 != NULL &&
        strcmp(a1, "user_version") == 0) {
        return SQLITE_DENY;
    }
    if (action == SQLITE_READ && a2 != NULL && strcmp(a2, "secret") == 0) {
        return SQLITE_IGNORE;
    }
    return SQLITE_OK;
}

/* The node's database, the connection that started it, and a host
 * connection under test. */
struct fixture {
    struct tmpdb db;
    sqlite3 *admin; /* started the node */
    sqlite3 *c;     /* the host's connection */
};

/* text runs @sql on @db and returns the first column of its first row in
 * @out ("" when none); returns the code of the prepare or step. */
static int text(sqlite3 *db, const char *sql, char *out, size_t len)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    out[0] = '\0';
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(out, len, "%s", t != NULL ? (const char *)t : "NULL");
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* expect runs @sql on @db and checks it ends with @code and, when @first
 * is not NULL, that its first value reads @first. */
static void expect(sqlite3 *db, const char *sql, int code, const char *first)
{
    char out[512];
    assert_int_equal(text(db, sql, out, sizeof out), code);
    if (first != NULL) {
        assert_string_equal(out, first);
    }
}

/* ok runs @sql on @db, failing the test on an error. */
static void ok(sqlite3 *db, const char *sql)
{
    char out[512];
    if (text(db, sql, out, sizeof out) != SQLITE_OK) {
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    }
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char sql[256], leader[32] = "";

    assert_non_null(f);
    tmpdb_init(&f->db);
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    assert_int_equal(sqlite3_open(f->db.path, &f->admin), SQLITE_OK);
    snprintf(sql, sizeof sql,
             "SELECT raft_start('id=1 cluster=1@127.0.0.1:%d "
             "election_timeout_ms=300 heartbeat_ms=30 log_level=error')",
             ext_free_port());
    ok(f->admin, sql);
    /* At most 10 s for the one node to lead. */
    for (int i = 0; i < 200 && strcmp(leader, "1") != 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        text(f->admin, "SELECT raft_leader()", leader, sizeof leader);
    }
    assert_string_equal(leader, "1");
    ok(f->admin, "SELECT raft_exec('CREATE TABLE t(x, secret)')");
    ok(f->admin, "SELECT raft_exec('INSERT INTO t VALUES(1, ''pw'')')");
    assert_int_equal(sqlite3_open(f->db.path, &f->c), SQLITE_OK);
    /* The node's applier is another writer on the file (the cluster id
     * entry may land under a plain write): a host gives a busy timeout. */
    sqlite3_busy_timeout(f->c, 5000);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    sqlite3_close(f->c);
    ok(f->admin, "SELECT raft_stop()");
    sqlite3_close(f->admin);
    sqlite3_reset_auto_extension();
    {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "rm -rf '%s-raft'", f->db.path);
        assert_int_equal(system(cmd), 0);
    }
    tmpdb_remove(&f->db);
    free(f);
    return 0;
}

/* With a host authorizer chained, what the guard refuses stays refused
 * (whatever the host says: a write to raftsql's own tables), a plain write
 * to the leader's replica goes through both (issue #24: replicated), the
 * host's DENY and IGNORE apply to the rest, and NULL leaves the guard
 * alone again. */
static void test_host_authorizer_behind_the_guard(void **state)
{
    struct fixture *f = *state;
    struct host h = {0};
    int calls;

    expect(f->c, "SELECT raft_last_error() IS NULL", SQLITE_OK, "1");
    assert_int_equal(raftsql_set_authorizer(f->c, host_auth, &h), SQLITE_OK);
    expect(f->c, "INSERT INTO raftsql_settings VALUES('x', 1)", SQLITE_AUTH,
           NULL);
    /* The whole reason, which SQLite's "not authorized" leaves out. */
    expect(f->c, "SELECT raft_last_error()", SQLITE_OK,
           "direct write to raftsql_settings refused: this database is a "
           "Raft replica; write through raft_exec('...')");
    expect(f->c, "INSERT INTO t VALUES(2, 'x')", SQLITE_OK, NULL);
    expect(f->c, "SELECT count(*) FROM t", SQLITE_OK, "2");
    expect(f->c, "PRAGMA user_version", SQLITE_AUTH, NULL);
    expect(f->c, "SELECT secret FROM t", SQLITE_OK, "NULL");
    expect(f->c, "SELECT x FROM t", SQLITE_OK, "1");
    assert_true(h.calls > 0);

    calls = h.calls;
    assert_int_equal(raftsql_set_authorizer(f->c, NULL, NULL), SQLITE_OK);
    expect(f->c, "PRAGMA user_version", SQLITE_OK, "0");
    expect(f->c, "SELECT secret FROM t", SQLITE_OK, "pw");
    expect(f->c, "DELETE FROM raftsql_settings", SQLITE_AUTH, NULL);
    assert_int_equal(h.calls, calls);
}

/* A second host authorizer replaces the first (which is never called
 * again); while a statement of the connection runs, a change is refused
 * with SQLITE_BUSY and the authorizer in force stays. */
static void test_replace_and_busy(void **state)
{
    struct fixture *f = *state;
    struct host a = {0}, b = {0};
    sqlite3_stmt *st = NULL;
    int calls;

    assert_int_equal(raftsql_set_authorizer(f->c, host_auth, &a), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(f->c, "SELECT x FROM t", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(raftsql_set_authorizer(f->c, host_auth, &b), SQLITE_BUSY);
    sqlite3_finalize(st);
    calls = a.calls;
    ok(f->c, "SELECT x FROM t");
    assert_true(a.calls > calls);
    assert_int_equal(b.calls, 0);

    assert_int_equal(raftsql_set_authorizer(f->c, host_auth, &b), SQLITE_OK);
    calls = a.calls;
    ok(f->c, "SELECT x FROM t");
    assert_int_equal(a.calls, calls);
    assert_true(b.calls > 0);
    expect(f->c, "UPDATE raftsql_applied SET idx = idx", SQLITE_AUTH, NULL);
    /* The holder of the state does nothing from SQL. */
    expect(f->c, "SELECT raftsql_host_authorizer()", SQLITE_ERROR, NULL);
}

/* A host that replaces the guard (sqlite3_set_authorizer after the load,
 * as Python's set_authorizer(None) does) gets its direct writes to the
 * replica prepared and run, but never committed: the commit hook vetoes
 * them (SQLITE_CONSTRAINT_COMMITHOOK), an autocommit statement and an
 * explicit COMMIT alike, and the transaction is rolled back. Before, they
 * were committed unreplicated. */
static void test_replaced_guard_commits_nothing(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(sqlite3_set_authorizer(f->c, NULL, NULL), SQLITE_OK);
    expect(f->c, "INSERT INTO t VALUES(2, 'x')", SQLITE_CONSTRAINT, NULL);
    assert_int_equal(sqlite3_extended_errcode(f->c),
                     SQLITE_CONSTRAINT_COMMITHOOK);
    expect(f->c,
           "SELECT raft_last_error() LIKE 'commit to %/db refused, rolled "
           "back: it is a Raft replica''s file, and the write got past "
           "the write guard (this connection''s authorizer was replaced%'",
           SQLITE_OK, "1");
    ok(f->c, "BEGIN");
    ok(f->c, "UPDATE t SET x = 9");
    ok(f->c, "CREATE TABLE u(y)");
    expect(f->c, "SELECT x FROM t", SQLITE_OK, "9");
    expect(f->c, "COMMIT", SQLITE_CONSTRAINT, NULL);
    assert_int_equal(sqlite3_extended_errcode(f->c),
                     SQLITE_CONSTRAINT_COMMITHOOK);
    assert_true(sqlite3_get_autocommit(f->c));
    expect(f->c, "SELECT group_concat(x) FROM t", SQLITE_OK, "1");
    expect(f->c, "SELECT count(*) FROM sqlite_schema WHERE name = 'u'",
           SQLITE_OK, "0");
    /* TEMP stays writable, and the node's own writes go on. */
    ok(f->c, "CREATE TEMP TABLE scratch(z)");
    ok(f->c, "INSERT INTO scratch VALUES(1)");
    ok(f->admin, "SELECT raft_exec('INSERT INTO t VALUES(3, ''y'')')");
    expect(f->c, "SELECT group_concat(x) FROM t", SQLITE_OK, "1,3");
}

/* plain_exec runs @sql on a connection to @path opened without raftsql
 * (a process that did not load it), failing the test on an error. */
static void plain_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    }
    sqlite3_close(db);
}

/* A replica's file (it has a raftsql_applied table) that no node serves,
 * in this process or another (its node stopped, died or not started), is
 * refused every direct write on a connection with raftsql, also ATTACHed
 * under another name; reads answer, nothing is written. A file that never
 * was a replica's, and one not created yet, are written freely. Before,
 * only a file whose node ran with max_staleness_ms was refused. */
static void test_no_node_refuses_writes_to_a_replica_file(void **state)
{
    struct tmpdb db;
    char plain[160], fresh[160], sql[256];
    sqlite3 *c = NULL, *p = NULL, *n = NULL;
    static const char *const writes[] = {
        "INSERT INTO t VALUES(2)",
        "UPDATE t SET x = 5",
        "DELETE FROM t",
        "CREATE TABLE u(x)",
        "CREATE INDEX tx ON t(x)",
        "DROP TABLE t",
        "ALTER TABLE t ADD COLUMN y",
        "PRAGMA user_version = 3",
    };
    (void)state;

    tmpdb_init(&db);
    snprintf(plain, sizeof plain, "%s/plain.db", db.dir);
    snprintf(fresh, sizeof fresh, "%s/fresh.db", db.dir);
    plain_exec(db.path,
               "PRAGMA journal_mode=WAL; "
               "CREATE TABLE raftsql_applied(idx INTEGER); "
               "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
    plain_exec(plain, "CREATE TABLE p(x)");

    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    assert_int_equal(sqlite3_open(db.path, &c), SQLITE_OK);
    assert_int_equal(sqlite3_open(plain, &p), SQLITE_OK);
    assert_int_equal(sqlite3_open(fresh, &n), SQLITE_OK);
    sqlite3_reset_auto_extension();

    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        expect(c, writes[i], SQLITE_AUTH, NULL);
    }
    expect(c, "SELECT group_concat(x) FROM t", SQLITE_OK, "1");
    expect(c, "PRAGMA user_version", SQLITE_OK, "0");
    /* Refused when prepared, not vetoed at commit: they write the file
     * too, or would renumber rowids. */
    expect(c, "PRAGMA journal_mode=DELETE", SQLITE_AUTH, NULL);
    expect(c, "PRAGMA schema_version=99", SQLITE_AUTH, NULL);
    expect(c, "PRAGMA incremental_vacuum", SQLITE_AUTH, NULL);
    expect(c, "VACUUM", SQLITE_AUTH, NULL);
    snprintf(sql, sizeof sql, "VACUUM INTO '%s/copy.db'", db.dir);
    ok(c, sql); /* a copy is made, the replica unchanged */
    /* A lock that keeps every other connection out (which a question on
     * a connection of the guard's own would wait for) changes nothing. */
    ok(c, "PRAGMA locking_mode=EXCLUSIVE");
    ok(c, "SELECT count(*) FROM t");
    ok(c, "BEGIN");
    expect(c, "ALTER TABLE raftsql_applied RENAME TO raftsql_gone", SQLITE_AUTH,
           NULL);
    expect(c, "INSERT INTO t VALUES(6)", SQLITE_AUTH, NULL);
    ok(c, "ROLLBACK");
    ok(c, "PRAGMA locking_mode=NORMAL");
    ok(c, "SELECT count(*) FROM t"); /* gives the exclusive lock up */

    ok(p, "INSERT INTO p VALUES(7)");
    expect(p, "SELECT x FROM p", SQLITE_OK, "7");
    ok(n, "CREATE TABLE q(x)");
    ok(n, "INSERT INTO q VALUES(8)");

    snprintf(sql, sizeof sql, "ATTACH '%s' AS r", db.path);
    ok(p, sql);
    expect(p, "INSERT INTO r.t VALUES(3)", SQLITE_AUTH, NULL);
    expect(p, "VACUUM r", SQLITE_AUTH, NULL);
    expect(p, "CREATE TABLE r.v(x)", SQLITE_AUTH, NULL);
    ok(p, "INSERT INTO main.p VALUES(9)");
    expect(p, "SELECT group_concat(x) FROM r.t", SQLITE_OK, "1");
    ok(p, "DETACH r");

    /* With the guard replaced, the commit hook still keeps the replica's
     * file unwritten, and the plain file written. */
    assert_int_equal(sqlite3_set_authorizer(c, NULL, NULL), SQLITE_OK);
    expect(c, "INSERT INTO t VALUES(4)", SQLITE_CONSTRAINT, NULL);
    assert_int_equal(sqlite3_set_authorizer(p, NULL, NULL), SQLITE_OK);
    ok(p, sql);
    expect(p, "INSERT INTO r.t VALUES(5)", SQLITE_CONSTRAINT, NULL);
    ok(p, "INSERT INTO main.p VALUES(10)");
    expect(p, "SELECT group_concat(x) FROM p", SQLITE_OK, "7,9,10");
    ok(p, "DETACH r");

    sqlite3_close(c);
    sqlite3_close(p);
    sqlite3_close(n);
    /* Nothing reached the replica's file. */
    assert_int_equal(sqlite3_open(db.path, &c), SQLITE_OK);
    expect(c, "SELECT group_concat(x) FROM t", SQLITE_OK, "1");
    expect(c, "SELECT group_concat(name) FROM sqlite_schema", SQLITE_OK,
           "raftsql_applied,t");
    expect(c, "PRAGMA user_version", SQLITE_OK, "0");
    sqlite3_close(c);
    tmpdb_remove(&db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_host_authorizer_behind_the_guard,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_and_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_guard_commits_nothing,
                                        setup, teardown),
        cmocka_unit_test(test_no_node_refuses_writes_to_a_replica_file),
    };
    return cmocka_run_group_tests_name("ext_guard", tests, NULL, NULL);
}
