/* Tests of the apply connection (sql/fsm.c, apply.c, authorize.c,
 * schema.c) against fresh database files: transactions per request and per
 * batch, the applied index across reopen, at-most-once, SQL errors as
 * results, parameter binding, refused statements, cluster-wide PRAGMAs, and
 * environmental failures. */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "sql/fsm_internal.h"
#include "tests/sql/helpers.h"

#define MAX_BATCH FSM_FIXTURE_MAX_BATCH

static void reopen(struct fsm_fixture *f)
{
    char msg[256];

    sql_fsm_close(f->fsm);
    f->fsm = NULL;
    if (sql_fsm_open(f->tmp.path, NULL, 0, &f->fsm, msg, sizeof msg) != 0) {
        fail_msg("reopen: %s", msg);
    }
}

/* apply_bufs applies @n payloads (NULL: no-op) as one batch after the
 * applied index, consuming the bufs. Returns sql_fsm_apply's code. */
static int apply_bufs(struct fsm_fixture *f, struct buf **bufs, unsigned n)
{
    struct sql_fsm_entry e[MAX_BATCH];
    uint64_t next = sql_fsm_applied(f->fsm) + 1;
    unsigned i;
    int rc;

    assert_true(n <= MAX_BATCH);
    fsm_fixture_clear(f);
    for (i = 0; i < n; i++) {
        e[i].index = next + i;
        e[i].term = 3;
        entry_set_payload(&e[i], bufs[i]);
    }
    rc = sql_fsm_apply(f->fsm, e, n, f->res);
    if (rc == 0) {
        f->n_res = n;
    }
    for (i = 0; i < n; i++) {
        buf_free(bufs[i]);
    }
    return rc;
}

static uint64_t next_seq = 100;

/* apply_sqls applies one request per SQL text (NULL: no-op) in one batch
 * and expects success of the batch (not of each request). */
static void apply_sqls(struct fsm_fixture *f, const char *const *sqls,
                       unsigned n)
{
    struct buf *bufs[MAX_BATCH];
    unsigned i;
    int rc;

    for (i = 0; i < n; i++) {
        bufs[i] = sqls[i] != NULL ? make_request(next_seq++, sqls[i]) : NULL;
    }
    rc = apply_bufs(f, bufs, n);
    if (rc != 0) {
        fail_msg("apply: %d %s", rc, sql_fsm_errmsg(f->fsm));
    }
}

/* apply1 applies one request and returns its result (valid until the next
 * apply). */
static struct sql_result *apply1(struct fsm_fixture *f, const char *sql)
{
    apply_sqls(f, &sql, 1);
    return &f->res[0];
}

static void assert_ok(const struct sql_result *r)
{
    if (r->rc != 0) {
        fail_msg("request failed: %d %s", r->rc,
                 r->errmsg != NULL ? r->errmsg : "");
    }
    assert_null(r->errmsg);
}

static void assert_error(const struct sql_result *r, int rc, const char *msg)
{
    if (r->rc != rc) {
        fail_msg("rc %d (%s), expected %d", r->rc,
                 r->errmsg != NULL ? r->errmsg : "", rc);
    }
    assert_non_null(r->errmsg);
    if (strstr(r->errmsg, msg) == NULL) {
        fail_msg("message \"%s\" lacks \"%s\"", r->errmsg, msg);
    }
}

/* A new database starts at applied index 0 with the internal tables, WAL
 * journal, and SQLite's documented setting defaults (recursive_triggers is
 * OFF although this build defaults it to ON). */
static void test_open_fresh(void **state)
{
    struct fsm_fixture *f = *state;
    sqlite3_stmt *s;

    assert_int_equal(sql_fsm_applied(f->fsm), 0);
    assert_query(f->tmp.path, "SELECT idx FROM raftsql_applied", "0");
    assert_query(f->tmp.path, "PRAGMA journal_mode", "wal");
    assert_int_equal(sqlite3_prepare_v2(f->fsm->db, "PRAGMA recursive_triggers",
                                        -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 0);
    sqlite3_finalize(s);
}

/* A missing file is NOTFOUND, a non-database file is CORRUPT. */
static void test_open_errors(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_fsm *g = (struct sql_fsm *)0x1;
    char path[160], msg[256];
    FILE *fp;

    snprintf(path, sizeof path, "%s/missing", f->tmp.dir);
    assert_int_equal(sql_fsm_open(path, NULL, 0, &g, msg, sizeof msg),
                     SQL_ERR_NOTFOUND);
    assert_ptr_equal(g, (struct sql_fsm *)0x1);
    assert_non_null(strstr(msg, "missing"));

    snprintf(path, sizeof path, "%s/junk", f->tmp.dir);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "%4096s", "this is not a SQLite database file");
    fclose(fp);
    assert_int_equal(sql_fsm_open(path, NULL, 0, &g, msg, sizeof msg),
                     SQL_ERR_CORRUPT);
    assert_non_null(strstr(msg, "not a database"));
    unlink(path);
}

/* The statements of one request are one transaction: a failure in the
 * last undoes the first; on success changes add up over DML statements
 * only, and last_insert_rowid is the request's own. */
static void test_multi_statement(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_result *r;

    r = apply1(f,
               "CREATE TABLE t(a UNIQUE); INSERT INTO t VALUES (1);"
               "INSERT INTO t VALUES (1)");
    assert_error(r, SQLITE_CONSTRAINT_UNIQUE, "UNIQUE constraint failed");
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name = 't'", "0");

    r = apply1(f,
               "CREATE TABLE t(a UNIQUE); INSERT INTO t VALUES (1), (2);"
               " SELECT * FROM t; CREATE TABLE u(x);"
               " INSERT INTO t VALUES (3);  -- done\n ;; ");
    assert_ok(r);
    assert_int_equal(r->changes, 3);
    assert_int_equal(r->last_insert_rowid, 3);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "1,2,3");

    /* UPDATE: no insert in this request, so last_insert_rowid is 0. */
    r = apply1(f, "UPDATE t SET a = a + 10; SELECT changes()");
    assert_ok(r);
    assert_int_equal(r->changes, 3);
    assert_int_equal(r->last_insert_rowid, 0);
    /* changes() starts at 0 in each request, whatever ran before. */
    r = apply1(f, "INSERT INTO u VALUES (changes())");
    assert_ok(r);
    assert_query(f->tmp.path, "SELECT x FROM u", "0");
}

/* A failing request in the middle of a batch rolls back only itself. */
static void test_batch_partial_failure(void **state)
{
    struct fsm_fixture *f = *state;
    const char *sqls[] = {
        "CREATE TABLE t(a PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
        "INSERT INTO t VALUES (2); INSERT INTO t VALUES (1)",
        NULL,
        "INSERT INTO t VALUES (3)",
        "SELECT nosuchfunction()",
        "INSERT INTO t VALUES (4)",
    };

    apply_sqls(f, sqls, 7);
    assert_ok(&f->res[0]);
    assert_ok(&f->res[1]);
    assert_error(&f->res[2], SQLITE_CONSTRAINT_PRIMARYKEY, "t.a");
    assert_int_equal(f->res[3].rc, 0);
    assert_true(f->res[3].id[0] == 0 && f->res[3].id[1] == 0);
    assert_ok(&f->res[4]);
    assert_error(&f->res[5], SQLITE_ERROR, "no such function");
    assert_ok(&f->res[6]);
    assert_int_equal(sql_fsm_applied(f->fsm), 7);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "1,3,4");
    assert_query(f->tmp.path, "SELECT idx || '/' || term FROM raftsql_applied",
                 "7/3");
}

/* SQL that rolls back the whole transaction (INSERT OR ROLLBACK) fails
 * alone: the earlier requests of its batch are re-applied, so the outcome
 * is the one of applying each request on its own. */
static void test_or_rollback_restarts_batch(void **state)
{
    struct fsm_fixture *f = *state;
    const char *sqls[] = {
        "CREATE TABLE t(a PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
        "INSERT INTO t VALUES (2); INSERT OR ROLLBACK INTO t VALUES (1)",
        "INSERT INTO t VALUES (3)",
        "CREATE TRIGGER tr BEFORE INSERT ON t WHEN new.a = 9"
        " BEGIN SELECT RAISE(ROLLBACK, 'nine'); END",
        "INSERT INTO t VALUES (9)",
        "INSERT INTO t VALUES (5)",
    };

    apply_sqls(f, sqls, 7);
    assert_ok(&f->res[0]);
    assert_ok(&f->res[1]);
    assert_error(&f->res[2], SQLITE_CONSTRAINT_PRIMARYKEY, "t.a");
    assert_ok(&f->res[3]);
    assert_int_equal(f->res[3].last_insert_rowid, 2);
    assert_ok(&f->res[4]);
    assert_error(&f->res[5], SQLITE_CONSTRAINT_TRIGGER, "nine");
    assert_ok(&f->res[6]);
    assert_int_equal(sql_fsm_applied(f->fsm), 7);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "1,3,5");
}

/* The applied index is stored with the data and resumed after reopen;
 * entries must follow it. */
static void test_applied_resumed(void **state)
{
    struct fsm_fixture *f = *state;
    const char *sqls[] = {"CREATE TABLE t(a)", "INSERT INTO t VALUES (1)",
                          NULL};
    struct sql_fsm_entry e;
    struct sql_result r;

    apply_sqls(f, sqls, 3);
    assert_int_equal(sql_fsm_applied(f->fsm), 3);
    reopen(f);
    assert_int_equal(sql_fsm_applied(f->fsm), 3);
    apply1(f, "INSERT INTO t VALUES (2)");
    assert_int_equal(sql_fsm_applied(f->fsm), 4);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "1,2");

    e.index = 6;
    e.term = 3;
    entry_set_payload(&e, NULL);
    assert_int_equal(sql_fsm_apply(f->fsm, &e, 1, &r), SQL_ERR_INVALID);
    e.index = 4;
    assert_int_equal(sql_fsm_apply(f->fsm, &e, 1, &r), SQL_ERR_INVALID);
    assert_non_null(strstr(sql_fsm_errmsg(f->fsm), "expected 5"));
    assert_int_equal(sql_fsm_applied(f->fsm), 4);
}

/* The latest request stamp applied (sql_fsm_applied_time) is the
 * largest of every batch, whatever their order; batches without requests
 * keep it; it is stored with the applied index (across reopen), and a
 * database of before the column gets it at open, with no stamp. */
static void test_applied_time(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *bufs[3];
    int64_t t = 7;

    assert_false(sql_fsm_applied_time(f->fsm, &t));
    assert_true(t == 7);
    bufs[0] = make_request_ex(1, next_seq++, "CREATE TABLE t(a)", NULL, 0,
                              1700000000300LL, 1);
    bufs[1] = make_request_ex(1, next_seq++, "INSERT INTO t VALUES (1)", NULL,
                              0, 1700000000100LL, 2);
    bufs[2] = NULL;
    assert_int_equal(apply_bufs(f, bufs, 3), 0);
    assert_true(sql_fsm_applied_time(f->fsm, &t));
    assert_true(t == 1700000000300LL);
    bufs[0] = NULL;
    bufs[1] = make_request_ex(1, next_seq++, "INSERT INTO t VALUES (2)", NULL,
                              0, 1700000000200LL, 3);
    assert_int_equal(apply_bufs(f, bufs, 2), 0);
    assert_true(sql_fsm_applied_time(f->fsm, &t) && t == 1700000000300LL);
    bufs[0] = make_request_ex(1, next_seq++, "INSERT INTO t VALUES (3)", NULL,
                              0, 1700000000400LL, 4);
    assert_int_equal(apply_bufs(f, bufs, 1), 0);
    reopen(f);
    assert_int_equal(sql_fsm_applied(f->fsm), 6);
    assert_true(sql_fsm_applied_time(f->fsm, &t) && t == 1700000000400LL);
    assert_query(f->tmp.path,
                 "SELECT time_ms FROM raftsql_applied WHERE id = 0",
                 "1700000000400");

    sql_fsm_close(f->fsm);
    f->fsm = NULL;
    outside_exec(f->tmp.path,
                 "ALTER TABLE raftsql_applied DROP COLUMN time_ms");
    reopen(f);
    assert_int_equal(sql_fsm_applied(f->fsm), 6);
    assert_false(sql_fsm_applied_time(f->fsm, &t));
    apply1(f, "INSERT INTO t VALUES (4)");
    assert_true(sql_fsm_applied_time(f->fsm, &t) && t == 1700000000000LL);
}

/* A request id applied before is skipped, in the same batch, a later
 * batch, and after reopen; failed requests count as applied too; the
 * zero id is never deduplicated. */
static void test_duplicate(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *b[4];

    apply1(f, "CREATE TABLE t(a)");
    b[0] = make_request_ex(7, 1, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    b[1] =
        make_request_ex(7, 2, "INSERT INTO nosuch VALUES (1)", NULL, 0, 0, 0);
    b[2] = make_request_ex(7, 1, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    b[3] = make_request_ex(8, 1, "INSERT INTO t VALUES (2)", NULL, 0, 0, 0);
    assert_int_equal(apply_bufs(f, b, 4), 0);
    assert_ok(&f->res[0]);
    assert_int_equal(f->res[0].duplicate, 0);
    assert_true(f->res[0].id[0] == 7 && f->res[0].id[1] == 1);
    assert_error(&f->res[1], SQLITE_ERROR, "no such table");
    assert_int_equal(f->res[2].duplicate, 1);
    assert_int_equal(f->res[2].rc, 0);
    assert_int_equal(f->res[3].duplicate, 0);

    reopen(f);
    b[0] = make_request_ex(7, 1, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    b[1] = make_request_ex(7, 2, "CREATE TABLE nosuch(x)", NULL, 0, 0, 0);
    b[2] = make_request_ex(0, 0, "INSERT INTO t VALUES (3)", NULL, 0, 0, 0);
    b[3] = make_request_ex(0, 0, "INSERT INTO t VALUES (3)", NULL, 0, 0, 0);
    assert_int_equal(apply_bufs(f, b, 4), 0);
    assert_int_equal(f->res[0].duplicate, 1);
    assert_int_equal(f->res[1].duplicate, 1);
    assert_int_equal(f->res[2].duplicate, 0);
    assert_int_equal(f->res[3].duplicate, 0);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "1,2,3,3");
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name = 'nosuch'",
                 "0");
}

/* Request ids are remembered for 100000 entries: a retry within the
 * window is skipped, one after it runs again, and old ids are pruned. */
static void test_dedup_window(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *b;

    assert_ok(apply1(f, "CREATE TABLE t(a)"));
    b = make_request_ex(9, 1, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_ok(&f->res[0]);
    assert_query(f->tmp.path,
                 "SELECT idx FROM raftsql_requests WHERE origin = 9", "2");
    /* Jump ahead: entry 100002 is the last one inside the window. */
    assert_int_equal(
        fsm_exec(f->fsm, "UPDATE raftsql_applied SET idx = 100001"), 0);
    reopen(f);
    b = make_request_ex(9, 1, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_int_equal(f->res[0].duplicate, 1);
    /* Pruning goes by chunks of 1024: the row of index 2 is still there,
     * but out of the window for entry 100003, so not a duplicate. */
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM raftsql_requests WHERE origin = 9", "1");
    b = make_request_ex(9, 1, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_int_equal(f->res[0].duplicate, 0);
    assert_ok(&f->res[0]);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "2");
    assert_query(f->tmp.path,
                 "SELECT idx FROM raftsql_requests WHERE origin = 9", "100003");
    /* A batch whose prune bound crosses 1024 deletes every row up to it. */
    assert_int_equal(fsm_exec(f->fsm,
                              "INSERT INTO raftsql_requests VALUES (7, 1, "
                              "1024); UPDATE raftsql_applied SET idx = "
                              "101023"),
                     0);
    reopen(f);
    b = make_request_ex(9, 2, "INSERT INTO t VALUES (1)", NULL, 0, 0, 0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_ok(&f->res[0]);
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM raftsql_requests WHERE origin = 7", "0");
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM raftsql_requests WHERE origin = 9", "2");
}

/* The error text of a SQL error is exactly SQLite's. */
static void test_error_text_is_sqlites(void **state)
{
    struct fsm_fixture *f = *state;
    const char *setup_sql =
        "CREATE TABLE t(a INTEGER NOT NULL, b UNIQUE,"
        " CHECK (a > 0))";
    const char *bad[] = {"INSERT INTO t VALUES (NULL, 1)",
                         "INSERT INTO t VALUES (-1, 1)",
                         "INSERT INTO t VALUES (1, 1), (2, 1)", "SELEKT 1",
                         "INSERT INTO t(c) VALUES (1)"};
    sqlite3 *db;
    size_t i;

    assert_ok(apply1(f, setup_sql));
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    sqlite3_extended_result_codes(db, 1);
    assert_int_equal(sqlite3_exec(db, setup_sql, NULL, NULL, NULL), SQLITE_OK);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sql_result *r = apply1(f, bad[i]);
        int rc = sqlite3_exec(db, bad[i], NULL, NULL, NULL);

        assert_int_not_equal(rc, SQLITE_OK);
        assert_int_equal(r->rc, rc);
        assert_string_equal(r->errmsg, sqlite3_errmsg(db));
    }
    sqlite3_close(db);
}

/* Parameters bind by position (the i-th unnamed value to index i of every
 * statement) and by name; missing and surplus values are SQL errors. */
static void test_params(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_param p[4];
    struct buf *b;

    memset(p, 0, sizeof p);
    assert_ok(apply1(f, "CREATE TABLE t(a, b)"));

    p[0].value.type = SQL_INTEGER;
    p[0].value.integer = 5;
    p[1].name = ":x";
    p[1].value.type = SQL_TEXT;
    p[1].value.bytes.p = "ex";
    p[1].value.bytes.len = 2;
    b = make_request_ex(1, next_seq++,
                        "INSERT INTO t VALUES (?, :x);"
                        "INSERT INTO t(b, a) VALUES (?1, :x); "
                        "INSERT INTO t(a) VALUES (?)",
                        p, 2, 0, 0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_ok(&f->res[0]);
    assert_int_equal(f->res[0].changes, 3);
    assert_query(f->tmp.path,
                 "SELECT group_concat(quote(a) || quote(b), ' ') FROM t",
                 "5'ex' 'ex'5 5NULL");

    b = make_request_ex(1, next_seq++, "INSERT INTO t VALUES (?, ?)", p, 1, 0,
                        0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_error(&f->res[0], SQLITE_ERROR, "missing value for parameter 2 (?)");

    b = make_request_ex(1, next_seq++, "INSERT INTO t VALUES (?, :y)", p, 2, 0,
                        0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_error(&f->res[0], SQLITE_ERROR,
                 "missing value for parameter 2 (:y)");

    p[1] = p[0];
    p[2] = p[0];
    b = make_request_ex(1, next_seq++,
                        "INSERT INTO t VALUES (?, 1); SELECT ?, ?", p, 3, 0, 0);
    assert_int_equal(apply_bufs(f, &b, 1), 0);
    assert_error(&f->res[0], SQLITE_RANGE,
                 "3 values given but no statement of the SQL has more than 2 "
                 "parameters: each statement binds the values from the first "
                 "one on; write ?NNN (?1 to ?3)");
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "3");
}

/* Every value type reaches SQLite intact: int64 extremes, -0.0 and
 * infinities, text with NUL and UTF-8, '' vs zero-length blob vs NULL. */
static void test_value_types(void **state)
{
    struct fsm_fixture *f = *state;
    static const char nul_text[] = {'a', 0, 'b'};
    static const char utf8[] = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    struct sql_param p[9];
    struct buf *b;
    unsigned i;

    memset(p, 0, sizeof p);
    p[0].value.type = SQL_INTEGER;
    p[0].value.integer = INT64_MIN;
    p[1].value.type = SQL_INTEGER;
    p[1].value.integer = INT64_MAX;
    p[2].value.type = SQL_FLOAT;
    p[2].value.real = -1.0 / 0.0;
    p[3].value.type = SQL_TEXT;
    p[3].value.bytes.p = nul_text;
    p[3].value.bytes.len = 3;
    p[4].value.type = SQL_TEXT;
    p[4].value.bytes.p = utf8;
    p[4].value.bytes.len = strlen(utf8);
    p[5].value.type = SQL_TEXT;
    p[6].value.type = SQL_BLOB;
    p[7].value.type = SQL_NULL;
    p[8].value.type = SQL_FLOAT;
    p[8].value.real = 0.1;
    assert_ok(apply1(f,
                     "CREATE TABLE t(i INTEGER PRIMARY KEY, v ANY)"
                     " STRICT"));
    for (i = 0; i < 9; i++) {
        b = make_request_ex(1, next_seq++, "INSERT INTO t(v) VALUES (?)", &p[i],
                            1, 0, 0);
        assert_int_equal(apply_bufs(f, &b, 1), 0);
        assert_ok(&f->res[0]);
    }
    assert_query(f->tmp.path,
                 "SELECT group_concat(typeof(v) || ':' ||"
                 " ifnull(length(CAST(v AS BLOB)), ''), ' ') FROM t",
                 "integer:20 integer:19 real:4 text:3 text:9 text:0 blob:0 "
                 "null: real:3");
    assert_query(f->tmp.path, "SELECT v FROM t WHERE i = 1",
                 "-9223372036854775808");
    assert_query(f->tmp.path, "SELECT v FROM t WHERE i = 2",
                 "9223372036854775807");
    assert_query(f->tmp.path, "SELECT hex(v) FROM t WHERE i = 4", "610062");
    assert_query(f->tmp.path, "SELECT v = 0.1 FROM t WHERE i = 9", "1");
}

/* Statements that would break the batch or touch internal state are
 * refused as SQL errors with a clear message; the batch goes on. */
static void test_refused(void **state)
{
    struct fsm_fixture *f = *state;
    const char *sqls[] = {
        "CREATE TABLE t(a)",
        "BEGIN",
        "INSERT INTO t VALUES (1); COMMIT",
        "ROLLBACK",
        "SAVEPOINT x",
        "RELEASE raftsql_request",
        "ATTACH ':memory:' AS other",
        "VACUUM",
        "  /* c */ vacuum",
        "UPDATE raftsql_applied SET idx = 100",
        "DELETE FROM raftsql_requests",
        "INSERT INTO raftsql_settings VALUES ('foreign_keys', 1)",
        "DROP TABLE raftsql_settings",
        "CREATE TEMP TABLE tt(x)",
        "CREATE VIRTUAL TABLE raftsql_v USING fts5(x)",
        "INSERT INTO t VALUES (2)",
    };
    const char *want[] = {
        NULL,
        "BEGIN cannot be used in raft_exec",
        "COMMIT cannot be used",
        "ROLLBACK cannot be used",
        "SAVEPOINT cannot be used",
        "RELEASE cannot be used",
        "ATTACH cannot be used in raft_exec: attached databases",
        "VACUUM cannot be used",
        "VACUUM cannot be used",
        "raftsql_applied is an internal raftsql table",
        "raftsql_requests is an internal raftsql table",
        "raftsql_settings is an internal raftsql table",
        "raftsql_settings is an internal raftsql table",
        "temporary objects cannot be created",
        "raftsql_v is an internal raftsql table",
        NULL,
    };
    unsigned i, n = sizeof sqls / sizeof sqls[0];

    apply_sqls(f, sqls, n);
    for (i = 0; i < n; i++) {
        if (want[i] == NULL) {
            assert_ok(&f->res[i]);
        } else {
            assert_error(&f->res[i], SQLITE_AUTH, want[i]);
        }
    }
    assert_int_equal(sql_fsm_applied(f->fsm), n);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "2");
    assert_query(f->tmp.path, "SELECT idx FROM raftsql_applied", "16");
    /* raftsql_applied and raftsql_requests depend on where batches end:
     * a request reading them would differ between nodes. The settings are
     * the same everywhere at the same index. */
    /* The SQLite build may differ between nodes (a rolling upgrade): what
     * it says of itself cannot go into the replicated state. */
    assert_error(apply1(f, "INSERT INTO t VALUES (sqlite_version())"),
                 SQLITE_AUTH, "sqlite_version() cannot be used in raft_exec");
    assert_error(apply1(f, "INSERT INTO t SELECT sqlite_source_id()"),
                 SQLITE_AUTH, "sqlite_source_id() cannot be used");
    assert_error(apply1(f,
                        "INSERT INTO t VALUES "
                        "(SQLITE_COMPILEOPTION_GET(0))"),
                 SQLITE_AUTH, "sqlite_compileoption_get() cannot be used");
    assert_error(apply1(f,
                        "INSERT INTO t VALUES "
                        "(sqlite_compileoption_used('THREADSAFE'))"),
                 SQLITE_AUTH, "sqlite_compileoption_used() cannot be used");
    assert_error(apply1(f, "INSERT INTO t SELECT idx FROM raftsql_applied"),
                 SQLITE_AUTH, "raftsql_applied cannot be read in raft_exec");
    assert_error(apply1(f,
                        "INSERT INTO t SELECT count(*) "
                        "FROM raftsql_requests"),
                 SQLITE_AUTH, "raftsql_requests cannot be read in raft_exec");
    assert_ok(apply1(f,
                     "INSERT INTO t SELECT count(*) "
                     "FROM raftsql_settings"));
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "2,0");
    /* What is local to a node cannot reach the replicated tables. */
    assert_error(apply1(f,
                        "INSERT INTO t SELECT file "
                        "FROM pragma_database_list"),
                 SQLITE_AUTH, "PRAGMA database_list cannot be used");
    assert_error(apply1(f,
                        "INSERT INTO t SELECT name "
                        "FROM pragma_function_list"),
                 SQLITE_AUTH, "PRAGMA function_list cannot be used");
    assert_error(apply1(f, "INSERT INTO t SELECT count(*) FROM sqlite_stmt"),
                 SQLITE_AUTH, "sqlite_stmt cannot be read in raft_exec");
    assert_error(apply1(f, "INSERT INTO t SELECT load_extension('x')"),
                 SQLITE_AUTH, "load_extension cannot be used in raft_exec");
    assert_ok(apply1(f,
                     "INSERT INTO t SELECT count(*) "
                     "FROM pragma_table_info('t')"));
    /* data_version differs per node: not into the replicated tables; but
     * FTS5 asks PRAGMA main.data_version inside its statements. */
    assert_error(apply1(f,
                        "INSERT INTO t SELECT data_version "
                        "FROM pragma_data_version"),
                 SQLITE_AUTH, "PRAGMA data_version cannot be used");
    assert_ok(apply1(f, "CREATE VIRTUAL TABLE f5 USING fts5(body)"));
    assert_ok(apply1(f, "INSERT INTO f5 VALUES ('raft log entry')"));
    assert_ok(apply1(f, "INSERT INTO f5 VALUES ('sqlite page')"));
    assert_ok(apply1(f, "DELETE FROM f5 WHERE f5 MATCH 'sqlite'"));
    assert_ok(apply1(f,
                     "INSERT INTO t SELECT count(*) FROM f5 "
                     "WHERE f5 MATCH 'raft'"));
    assert_query(f->tmp.path, "SELECT body FROM f5 WHERE f5 MATCH 'log'",
                 "raft log entry");
    assert_ok(apply1(f,
                     "DELETE FROM t WHERE rowid = (SELECT max(rowid) "
                     "FROM t)"));
    /* RENAME TO a raftsql_ name: the authorizer sees only the old name;
     * the request fails afterwards and leaves the table as it was. */
    assert_ok(apply1(f, "CREATE TABLE u(x)"));
    assert_error(apply1(f, "ALTER TABLE u RENAME TO RAFTSQL_u"), SQLITE_AUTH,
                 "ALTER TABLE cannot rename to RAFTSQL_u");
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name = 'u'", "1");
    assert_ok(apply1(f, "ALTER TABLE u RENAME TO v"));
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "2,0,1");
}

/* PRAGMA foreign_keys through a request is stored cluster-wide, enforced
 * from the next request on (in the same batch too), survives reopen, and
 * can be switched off again; a query of it runs. */
static void test_foreign_keys_pragma(void **state)
{
    struct fsm_fixture *f = *state;
    const char *sqls[] = {
        "CREATE TABLE p(id INTEGER PRIMARY KEY);"
        "CREATE TABLE c(pid REFERENCES p(id))",
        "INSERT INTO c VALUES (1)",
        /* A setting inside a request of several statements: refused
         * (a cluster-wide setting takes effect from the next request
         * on), nothing of the request applies. */
        "PRAGMA foreign_keys = ON; INSERT INTO c VALUES (2)",
        "INSERT INTO c VALUES (2); PRAGMA foreign_keys = ON",
        "PRAGMA foreign_keys = ON",
        "INSERT INTO c VALUES (3)",
        "PRAGMA foreign_keys",
        "INSERT INTO p VALUES (4); INSERT INTO c VALUES (4)",
    };

    apply_sqls(f, sqls, 8);
    assert_ok(&f->res[0]);
    assert_ok(&f->res[1]);
    assert_error(&f->res[2], SQLITE_AUTH,
                 "PRAGMA foreign_keys must be a raft_exec request of its "
                 "own");
    assert_error(&f->res[3], SQLITE_AUTH,
                 "PRAGMA foreign_keys must be a raft_exec request of its "
                 "own");
    assert_ok(&f->res[4]);
    assert_error(&f->res[5], SQLITE_CONSTRAINT_FOREIGNKEY,
                 "FOREIGN KEY constraint failed");
    assert_ok(&f->res[6]);
    assert_ok(&f->res[7]);
    assert_query(f->tmp.path,
                 "SELECT value FROM raftsql_settings"
                 " WHERE name = 'foreign_keys'",
                 "1");
    assert_query(f->tmp.path, "SELECT group_concat(pid) FROM c", "1,4");

    reopen(f);
    assert_error(apply1(f, "INSERT INTO c VALUES (5)"),
                 SQLITE_CONSTRAINT_FOREIGNKEY, "FOREIGN KEY");
    assert_error(apply1(f, "PRAGMA foreign_keys = maybe"), SQLITE_ERROR,
                 "invalid value 'maybe' for PRAGMA foreign_keys");
    assert_error(apply1(f, "PRAGMA foreign_keys = off; SELECT 1"), SQLITE_AUTH,
                 "must be a raft_exec request of its own");
    assert_error(apply1(f, "INSERT INTO c VALUES (6)"),
                 SQLITE_CONSTRAINT_FOREIGNKEY, "FOREIGN KEY");
    assert_ok(apply1(f, "PRAGMA FOREIGN_KEYS = 'false'"));
    assert_ok(apply1(f, "INSERT INTO c VALUES (7)"));
    assert_query(f->tmp.path, "SELECT group_concat(pid) FROM c", "1,4,7");
}

/* Deferred foreign keys are checked at the end of each request, whatever
 * the batch: a request leaving a violation fails even if a later request
 * of the same batch would resolve it. */
static void test_deferred_foreign_keys(void **state)
{
    struct fsm_fixture *f = *state;
    const char *sqls[] = {
        "PRAGMA foreign_keys = yes",
        "CREATE TABLE p(id INTEGER PRIMARY KEY);"
        "CREATE TABLE c(pid REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)",
        "INSERT INTO c VALUES (1)",
        "INSERT INTO p VALUES (1)",
        "INSERT INTO c VALUES (2); INSERT INTO p VALUES (2)",
        "INSERT INTO c VALUES (1)",
    };

    apply_sqls(f, sqls, 6);
    assert_ok(&f->res[0]);
    assert_ok(&f->res[1]);
    assert_error(&f->res[2], SQLITE_CONSTRAINT_FOREIGNKEY,
                 "FOREIGN KEY constraint failed");
    assert_ok(&f->res[3]);
    assert_ok(&f->res[4]);
    assert_ok(&f->res[5]);
    assert_query(f->tmp.path, "SELECT group_concat(pid) FROM c", "2,1");
}

/* Other cluster-wide settings take effect too (recursive_triggers,
 * case_sensitive_like); node-local pragmas are refused by name, file
 * pragmas and queries run. */
static void test_other_pragmas(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_result *r;

    assert_ok(apply1(f, "CREATE TABLE t(a); INSERT INTO t VALUES ('A')"));
    assert_ok(apply1(f,
                     "CREATE TABLE m(x); INSERT INTO m"
                     " SELECT count(*) FROM t WHERE a LIKE 'a'"));
    assert_ok(apply1(f, "PRAGMA case_sensitive_like = 1"));
    assert_ok(apply1(f,
                     "INSERT INTO m SELECT count(*) FROM t"
                     " WHERE a LIKE 'a'"));
    assert_query(f->tmp.path, "SELECT group_concat(x) FROM m", "1,0");
    reopen(f);
    assert_ok(apply1(f,
                     "INSERT INTO m SELECT count(*) FROM t"
                     " WHERE a LIKE 'a'"));
    assert_query(f->tmp.path, "SELECT group_concat(x) FROM m", "1,0,0");
    assert_ok(apply1(f, "PRAGMA foreign_keys; PRAGMA table_list"));

    r = apply1(f, "PRAGMA journal_mode = DELETE");
    assert_error(r, SQLITE_AUTH,
                 "PRAGMA journal_mode cannot be set through raft_exec: it "
                 "is connection-scoped or local to a node");
    assert_string_equal(r->errmsg,
                        "PRAGMA journal_mode cannot be set through "
                        "raft_exec: it is connection-scoped or local to a "
                        "node");
    assert_error(apply1(f, "PRAGMA main.synchronous = OFF"), SQLITE_AUTH,
                 "PRAGMA synchronous cannot be set");
    assert_error(apply1(f, "PRAGMA optimize"), SQLITE_AUTH,
                 "PRAGMA optimize cannot be used");
    /* Query forms with side effects are refused too; applying goes on. */
    assert_error(apply1(f, "PRAGMA wal_checkpoint"), SQLITE_AUTH,
                 "PRAGMA wal_checkpoint cannot be used");
    assert_error(apply1(f, "PRAGMA main.wal_checkpoint"), SQLITE_AUTH,
                 "PRAGMA wal_checkpoint cannot be used");
    assert_error(apply1(f, "PRAGMA shrink_memory"), SQLITE_AUTH,
                 "PRAGMA shrink_memory cannot be used");
    assert_ok(apply1(f, "INSERT INTO m VALUES (42)"));
    assert_query(f->tmp.path, "PRAGMA journal_mode", "wal");
    assert_ok(apply1(f,
                     "PRAGMA user_version = 7; PRAGMA application_id = 9;"
                     " PRAGMA table_info(t); PRAGMA journal_mode;"
                     " PRAGMA integrity_check"));
    assert_query(f->tmp.path, "PRAGMA user_version", "7");
    assert_query(f->tmp.path, "PRAGMA application_id", "9");
}

/* Single-statement requests reuse a prepared statement: the results stay
 * right across schema changes, SQL errors, a batch of the same text, and
 * a statement whose text differs only in a trailing semicolon. */
static void test_statement_cache(void **state)
{
    struct fsm_fixture *f = *state;
    const char *same[4] = {
        "INSERT INTO c(a) VALUES (1)",
        "INSERT INTO c(a) VALUES (1)",
        "INSERT INTO c(a) VALUES (1);",
        "INSERT INTO c(a) VALUES (1)",
    };
    unsigned i;

    assert_ok(apply1(f, "CREATE TABLE c(a UNIQUE)"));
    assert_ok(apply1(f, same[0]));
    assert_int_equal(f->res[0].changes, 1);
    assert_error(apply1(f, same[0]), SQLITE_CONSTRAINT_UNIQUE,
                 "UNIQUE constraint failed: c.a");
    assert_ok(apply1(f, "DELETE FROM c"));
    assert_ok(apply1(f, "ALTER TABLE c ADD COLUMN b DEFAULT 'x'"));
    apply_sqls(f, same, 4);
    assert_ok(&f->res[0]);
    for (i = 1; i < 4; i++) {
        assert_error(&f->res[i], SQLITE_CONSTRAINT_UNIQUE,
                     "UNIQUE constraint failed: c.a");
    }
    assert_ok(apply1(f, "DROP TABLE c"));
    assert_ok(apply1(f, "CREATE TABLE c(a, b, z)"));
    assert_ok(apply1(f, same[0]));
    assert_query(f->tmp.path,
                 "SELECT a || '|' || (b IS NULL) || '|' || (z IS NULL)"
                 " FROM c",
                 "1|1|1");
}

/* Disk full (here: max_page_count) is environmental: the whole batch
 * rolls back, an error is returned, the applied index stays; once space
 * is back the same batch applies. */
static void test_disk_full(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *b[2];
    char sql[64];
    char *pages;

    assert_ok(apply1(f, "CREATE TABLE t(a)"));
    pages = query_text(f->tmp.path, "PRAGMA page_count");
    assert_non_null(pages);
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %s", pages);
    free(pages);
    assert_int_equal(fsm_exec(f->fsm, sql), 0);

    b[0] = make_request(900, "INSERT INTO t VALUES (1)");
    b[1] = make_request(901, "INSERT INTO t VALUES (randomblob(100000))");
    assert_int_equal(apply_bufs(f, b, 2), SQL_ERR_IOERR);
    assert_non_null(strstr(sql_fsm_errmsg(f->fsm), "full"));
    assert_int_equal(sql_fsm_applied(f->fsm), 1);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "0");
    assert_query(f->tmp.path, "SELECT idx FROM raftsql_applied", "1");

    assert_int_equal(fsm_exec(f->fsm, "PRAGMA max_page_count = 100000"), 0);
    b[0] = make_request(900, "INSERT INTO t VALUES (1)");
    b[1] = make_request(901, "INSERT INTO t VALUES (randomblob(100000))");
    assert_int_equal(apply_bufs(f, b, 2), 0);
    assert_ok(&f->res[0]);
    assert_int_equal(f->res[0].duplicate, 0);
    assert_ok(&f->res[1]);
    assert_int_equal(sql_fsm_applied(f->fsm), 3);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "2");
}

/* An undecodable payload is CORRUPT: nothing of the batch is applied. */
static void test_corrupt_payload(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *b[2];

    assert_ok(apply1(f, "CREATE TABLE t(a)"));
    b[0] = make_request(950, "INSERT INTO t VALUES (1)");
    b[1] = buf_copy("garbage", 7);
    assert_int_equal(apply_bufs(f, b, 2), SQL_ERR_CORRUPT);
    assert_non_null(strstr(sql_fsm_errmsg(f->fsm), "entry 3"));
    assert_int_equal(sql_fsm_applied(f->fsm), 1);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "0");
}

/* The background checkpointer moves the durable index by itself once the
 * WAL passes its threshold (no sql_fsm_checkpoint call), never past the
 * applied index. (That its index survives a power loss rests on SQLite's
 * WAL rules; see sql.h, "The durable point".) */
static void test_background_checkpoint_durable(void **state)
{
    struct fsm_fixture *f = *state;
    const char *ins[MAX_BATCH];
    uint64_t durable = 0;
    unsigned i, round;

    for (i = 0; i < MAX_BATCH; i++) {
        ins[i] = "INSERT INTO t VALUES (randomblob(3000))";
    }
    assert_ok(apply1(f, "CREATE TABLE t(a)"));
    assert_int_equal(sql_fsm_durable(f->fsm), 0);
    /* About 1,600 pages: past the checkpointer's 1,000 WAL frames. */
    for (round = 0; round < 100; round++) {
        apply_sqls(f, ins, MAX_BATCH);
    }
    /* The durable index is taken in at the next commit: poll up to 10 s. */
    for (round = 0; round < 1000 && durable == 0; round++) {
        usleep(10000);
        assert_ok(apply1(f, "INSERT INTO t VALUES (1)"));
        durable = sql_fsm_durable(f->fsm);
    }
    if (durable == 0) {
        fail_msg("durable index still 0 after 10 s at applied %llu",
                 (unsigned long long)sql_fsm_applied(f->fsm));
    }
    assert_true(durable <= sql_fsm_applied(f->fsm));
    assert_true(durable > 1);
}

/* wal_frames returns the frames in the WAL of @db's file, as a passive
 * checkpoint on @db reports them; while the background checkpointer's own
 * runs (SQLITE_BUSY), it asks again, for up to 5 s. */
static int wal_frames(sqlite3 *db)
{
    int n_log = -1, rc = SQLITE_BUSY;
    for (int i = 0; i < 500 && rc == SQLITE_BUSY; i++) {
        rc = sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                       &n_log, NULL);
        if (rc == SQLITE_BUSY) {
            usleep(10000);
        }
    }
    assert_int_equal(rc, SQLITE_OK);
    return n_log;
}

/* The WAL restarts when writers come back to back: SQLite restarts it
 * only in a writer whose snapshot found every frame backfilled, so a WAL
 * that grew while a reader held it (past 4,000 frames) is backfilled by
 * the apply connection's next commit itself, before it returns, and the
 * next writer (a host's plain write, here another connection at once)
 * writes from the WAL's start, where it would otherwise write at its end
 * for as long as writers follow each other. */
static void test_wal_restarts_back_to_back(void **state)
{
    struct fsm_fixture *f = *state;
    sqlite3 *reader = NULL, *writer = NULL;
    int n;

    assert_ok(apply1(f, "CREATE TABLE t(a)"));
    assert_int_equal(sqlite3_open(f->tmp.path, &reader), SQLITE_OK);
    assert_int_equal(sqlite3_open(f->tmp.path, &writer), SQLITE_OK);
    /* A reader's snapshot keeps every later frame in the WAL. */
    assert_int_equal(
        sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM t", NULL, NULL, NULL),
        SQLITE_OK);
    assert_ok(apply1(f,
                     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                     "SELECT x + 1 FROM c WHERE x < 2500) "
                     "INSERT INTO t SELECT randomblob(3000) FROM c"));
    assert_ok(apply1(f,
                     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                     "SELECT x + 1 FROM c WHERE x < 2500) "
                     "INSERT INTO t SELECT randomblob(3000) FROM c"));
    assert_int_equal(sqlite3_exec(reader, "COMMIT", NULL, NULL, NULL),
                     SQLITE_OK);
    /* Over 5,000 frames, the reader gone: the next commit (another
     * thousand frames) backfills them all before it returns. */
    assert_ok(apply1(f,
                     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                     "SELECT x + 1 FROM c WHERE x < 1500) "
                     "INSERT INTO t SELECT randomblob(3000) FROM c"));
    assert_int_equal(
        sqlite3_exec(writer, "INSERT INTO t VALUES (1)", NULL, NULL, NULL),
        SQLITE_OK);
    n = wal_frames(writer);
    if (n < 0 || n > 10) {
        fail_msg(
            "the WAL did not restart at the next writer: it holds %d "
            "frames",
            n);
    }
    sqlite3_close(writer);
    sqlite3_close(reader);
}

/* fn_host is a function of the host: it returns 7. */
static void fn_host(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_int(ctx, 7);
}

/* register_host_fn is an auto-extension: it registers host_fn() on every
 * new connection, the apply connection's too. */
static int register_host_fn(sqlite3 *db, char **err,
                            const struct sqlite3_api_routines *api)
{
    (void)err;
    (void)api;
    return sqlite3_create_function_v2(db, "host_fn", 0, SQLITE_UTF8, NULL,
                                      fn_host, NULL, NULL, NULL);
}

/* The functions given to sql_fsm_open are removed from the apply
 * connection; a request can call the others. */
static void test_hidden_functions(void **state)
{
    static const struct sql_function hidden[] = {{"host_fn", 0}};
    struct fsm_fixture *f = *state;
    char msg[256];

    assert_int_equal(sqlite3_auto_extension((void (*)(void))register_host_fn),
                     SQLITE_OK);
    reopen(f);
    assert_ok(apply1(f, "SELECT host_fn()"));
    sql_fsm_close(f->fsm);
    f->fsm = NULL;
    if (sql_fsm_open(f->tmp.path, hidden, 1, &f->fsm, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    assert_error(apply1(f, "SELECT host_fn()"), SQLITE_ERROR,
                 "no such function: host_fn");
    sqlite3_cancel_auto_extension((void (*)(void))register_host_fn);
}

/* A request of many statements is prepared one statement at a time
 * without SQLite copying the rest of the text for each (a length passed
 * to sqlite3_prepare_v2 that leaves out the terminating NUL makes every
 * prepare copy the remaining text: 80,000 statements took quadratic
 * time). Checked deterministically: SQLite's largest single
 * allocation while applying stays far below the request's size. */
static void test_many_statements_linear(void **state)
{
    struct fsm_fixture *f = *state;
    enum { N_STMTS = 20000 };
    size_t cap = (size_t)N_STMTS * 32, len = 0;
    char *sql = malloc(cap);
    sqlite3_int64 cur = 0, largest = 0;

    assert_non_null(sql);
    assert_ok(apply1(f, "CREATE TABLE t(x)"));
    for (int i = 0; i < N_STMTS; i++) {
        len += (size_t)snprintf(sql + len, cap - len,
                                "INSERT INTO t VALUES(%d);\n", i);
    }
    assert_true(len > 400000);
    assert_int_equal(
        sqlite3_status64(SQLITE_STATUS_MALLOC_SIZE, &cur, &largest, 1),
        SQLITE_OK);
    assert_ok(apply1(f, sql));
    assert_int_equal(
        sqlite3_status64(SQLITE_STATUS_MALLOC_SIZE, &cur, &largest, 0),
        SQLITE_OK);
    if (largest >= (sqlite3_int64)len / 2) {
        fail_msg(
            "largest SQLite allocation %lld bytes for a %zu-byte "
            "request: the text is copied per statement",
            (long long)largest, len);
    }
    assert_int_equal(f->res[0].changes, N_STMTS);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "20000");
    free(sql);
}

/* budget_request is request @sql stamped with work budget @max_steps. */
static struct buf *budget_request(const char *sql, uint64_t max_steps)
{
    struct buf *b = make_request(next_seq++, sql);
    struct sql_stamp st = {
        .time_ms = 1700000000000LL, .seed = 9, .max_steps = max_steps};
    assert_int_equal(sql_request_stamp(b->data, b->len, &st, b->data), 0);
    return b;
}

/* A runaway request (a recursive CTE without end: it would hold the
 * apply thread, and every node, for ever) is
 * interrupted once it used the work budget the leader stamped into it:
 * its result is an error naming max_request_steps, nothing of it stays,
 * and the requests around it in the same batch apply. */
static void test_work_budget(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *bufs[4];
    uint64_t before;

    assert_ok(apply1(f, "CREATE TABLE t(x)"));
    before = sql_fsm_applied(f->fsm);
    bufs[0] = budget_request("INSERT INTO t VALUES (1)", 1000000);
    bufs[1] = budget_request(
        "INSERT INTO t SELECT x FROM (WITH RECURSIVE c(x) AS (SELECT 1 "
        "UNION ALL SELECT x+1 FROM c) SELECT x FROM c)",
        1000000);
    bufs[2] = budget_request("INSERT INTO t VALUES (2)", 1000000);
    /* Within its budget, or with none: applied. */
    bufs[3] = budget_request(
        "INSERT INTO t SELECT x FROM (WITH RECURSIVE c(x) AS (SELECT 1 "
        "UNION ALL SELECT x+1 FROM c LIMIT 1000) SELECT x FROM c)",
        0);
    assert_int_equal(apply_bufs(f, bufs, 4), 0);
    assert_ok(&f->res[0]);
    assert_error(&f->res[1], SQLITE_ERROR,
                 "exceeds the leader's max_request_steps (1000000)");
    assert_ok(&f->res[2]);
    assert_ok(&f->res[3]);
    assert_int_equal(sql_fsm_applied(f->fsm), before + 4);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "1002");
    assert_query(f->tmp.path, "SELECT count(*) FROM t WHERE x > 1000", "0");
}

/* interrupt_later calls sql_fsm_interrupt after 100 ms. */
static void *interrupt_later(void *arg)
{
    usleep(100 * 1000);
    sql_fsm_interrupt(arg);
    return NULL;
}

/* sql_fsm_interrupt stops a request that has no budget (for a stop that
 * must not wait): the batch fails, nothing of it is applied. */
static void test_interrupt(void **state)
{
    struct fsm_fixture *f = *state;
    struct buf *bufs[1];
    pthread_t t;
    uint64_t before;

    assert_ok(apply1(f, "CREATE TABLE t(x)"));
    before = sql_fsm_applied(f->fsm);
    bufs[0] = budget_request(
        "INSERT INTO t SELECT x FROM (WITH RECURSIVE c(x) AS (SELECT 1 "
        "UNION ALL SELECT x+1 FROM c) SELECT x FROM c)",
        0);
    assert_int_equal(pthread_create(&t, NULL, interrupt_later, f->fsm), 0);
    assert_int_not_equal(apply_bufs(f, bufs, 1), 0);
    pthread_join(t, NULL);
    assert_int_equal(sql_fsm_applied(f->fsm), before);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "0");
}

/* An apply run on its own thread (apply_in_thread), and when it ended. */
struct apply_run {
    struct fsm_fixture *f;
    struct buf *buf;
    int rc;
    int done; /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cond;
};

static void *apply_in_thread(void *arg)
{
    struct apply_run *a = arg;
    int rc = apply_bufs(a->f, &a->buf, 1);
    pthread_mutex_lock(&a->mu);
    a->rc = rc;
    a->done = 1;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* A stop does not wait out the apply connection's busy timeout: while
 * another connection holds the file's write lock (a host's writer in
 * another process), a batch waits for it in SQLite's busy handler, which
 * sqlite3_interrupt does not end; after sql_fsm_interrupt the apply
 * connection's own handler gives up at once, nothing applied. */
static void test_interrupt_ends_lock_wait(void **state)
{
    struct fsm_fixture *f = *state;
    struct apply_run a = {.f = f};
    sqlite3 *holder = NULL;
    struct timespec until;
    pthread_t t;
    uint64_t before;

    assert_ok(apply1(f, "CREATE TABLE t(x)"));
    before = sql_fsm_applied(f->fsm);
    assert_int_equal(sqlite3_open(f->tmp.path, &holder), SQLITE_OK);
    assert_int_equal(sqlite3_exec(holder, "BEGIN IMMEDIATE", NULL, NULL, NULL),
                     SQLITE_OK);
    sql_fsm_set_busy_ms(f->fsm, 600000); /* ten minutes of patience */
    sql_fsm_interrupt(f->fsm);
    a.buf = budget_request("INSERT INTO t VALUES (1)", 0);
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cond, NULL);
    assert_int_equal(pthread_create(&t, NULL, apply_in_thread, &a), 0);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&a.mu);
    while (!a.done && pthread_cond_timedwait(&a.cond, &a.mu, &until) == 0) {
    }
    pthread_mutex_unlock(&a.mu);
    if (!a.done) {
        /* Let it end before failing: the lock goes. */
        sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
        pthread_join(t, NULL);
        fail_msg(
            "the interrupted apply still waited for the write lock "
            "60 s later (busy timeout 600 s)");
    }
    pthread_join(t, NULL);
    assert_int_not_equal(a.rc, 0);
    assert_int_equal(sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(holder);
    pthread_cond_destroy(&a.cond);
    pthread_mutex_destroy(&a.mu);
    assert_int_equal(sql_fsm_applied(f->fsm), before);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "0");
}

int main(void)
{
#define T(name)                                                                \
    cmocka_unit_test_setup_teardown(name, fsm_fixture_setup,                   \
                                    fsm_fixture_teardown)
    const struct CMUnitTest tests[] = {
        T(test_open_fresh),
        T(test_open_errors),
        T(test_multi_statement),
        T(test_batch_partial_failure),
        T(test_or_rollback_restarts_batch),
        T(test_applied_resumed),
        T(test_applied_time),
        T(test_duplicate),
        T(test_dedup_window),
        T(test_error_text_is_sqlites),
        T(test_params),
        T(test_value_types),
        T(test_refused),
        T(test_statement_cache),
        T(test_foreign_keys_pragma),
        T(test_deferred_foreign_keys),
        T(test_other_pragmas),
        T(test_disk_full),
        T(test_corrupt_payload),
        T(test_background_checkpoint_durable),
        T(test_wal_restarts_back_to_back),
        T(test_hidden_functions),
        T(test_many_statements_linear),
        T(test_work_budget),
        T(test_interrupt),
        T(test_interrupt_ends_lock_wait),
    };
#undef T

    return cmocka_run_group_tests(tests, NULL, NULL);
}
