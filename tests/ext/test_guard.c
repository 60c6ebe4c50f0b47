/* Tests of the write guard beside a host's own authorizer
 * (raftsql_set_authorizer, ext/surface/guard.c), on a one-node cluster running
 * in this process: the guard decides first, the host's answer stands
 * otherwise, and NULL puts the guard back alone. */

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

/* With a host authorizer chained, direct writes stay refused by the guard
 * (whatever the host says), the host's DENY and IGNORE apply to the rest,
 * and NULL leaves the guard alone again. */
static void test_host_authorizer_behind_the_guard(void **state)
{
    struct fixture *f = *state;
    struct host h = {0};
    int calls;

    assert_int_equal(raftsql_set_authorizer(f->c, host_auth, &h), SQLITE_OK);
    expect(f->c, "INSERT INTO t VALUES(2, 'x')", SQLITE_AUTH, NULL);
    expect(f->c, "PRAGMA user_version", SQLITE_AUTH, NULL);
    expect(f->c, "SELECT secret FROM t", SQLITE_OK, "NULL");
    expect(f->c, "SELECT x FROM t", SQLITE_OK, "1");
    assert_true(h.calls > 0);

    calls = h.calls;
    assert_int_equal(raftsql_set_authorizer(f->c, NULL, NULL), SQLITE_OK);
    expect(f->c, "PRAGMA user_version", SQLITE_OK, "0");
    expect(f->c, "SELECT secret FROM t", SQLITE_OK, "pw");
    expect(f->c, "DELETE FROM t", SQLITE_AUTH, NULL);
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
    expect(f->c, "UPDATE t SET x = 3", SQLITE_AUTH, NULL);
    /* The holder of the state does nothing from SQL. */
    expect(f->c, "SELECT raftsql_host_authorizer()", SQLITE_ERROR, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_host_authorizer_behind_the_guard,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_and_busy, setup, teardown),
    };
    return cmocka_run_group_tests_name("ext_guard", tests, NULL, NULL);
}
