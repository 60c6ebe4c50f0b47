/* Tests of the determinism shims (sql/determinism.c) on their own and
 * through the apply connection: the same entries give the same tables on
 * every replica whatever the batching, "now" is the entry's time, and
 * random values follow the entry's seed. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "sql/determinism.h"
#include "tests/sql/helpers.h"

#define T0 1700000000123LL /* 2023-11-14 22:13:20.123 UTC */

/* A replica: a fresh database and its apply connection. */
struct replica {
    struct tmpdb tmp;    /* the database file */
    struct sql_fsm *fsm; /* its apply connection */
};

static void replica_open(struct replica *r)
{
    char msg[256];

    tmpdb_init(&r->tmp);
    if (sql_fsm_open(r->tmp.path, NULL, 0, &r->fsm, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
}

static void replica_close(struct replica *r)
{
    sql_fsm_close(r->fsm);
    tmpdb_remove(&r->tmp);
}

/* replica_apply applies @n entries (index from 1 on) in batches of
 * @batch, expecting every request to succeed. */
static void replica_apply(struct replica *r, struct buf **bufs, unsigned n,
                          unsigned batch)
{
    struct sql_fsm_entry e[32];
    struct sql_result res[32];
    unsigned i;

    assert_true(n <= 32);
    for (i = 0; i < n; i++) {
        e[i].index = i + 1;
        e[i].term = 1;
        entry_set_payload(&e[i], bufs[i]);
    }
    for (i = 0; i < n; i += batch) {
        unsigned m = n - i < batch ? n - i : batch;

        if (sql_fsm_apply(r->fsm, &e[i], m, &res[i]) != 0) {
            fail_msg("apply: %s", sql_fsm_errmsg(r->fsm));
        }
    }
    for (i = 0; i < n; i++) {
        if (res[i].rc != 0) {
            fail_msg("entry %u: %s", i + 1, res[i].errmsg);
        }
        sql_result_clear(&res[i]);
    }
}

/* The workload: every source of nondeterminism SQLite has for "now" and
 * randomness, directly, in DEFAULTs and in triggers. */
static unsigned workload(struct buf **bufs, uint64_t seed_base)
{
    static const char *const sqls[] = {
        "CREATE TABLE t(id INTEGER PRIMARY KEY, r, b, d, j, u, f, dt, tm,"
        " ts DEFAULT CURRENT_TIMESTAMP, cd DEFAULT CURRENT_DATE,"
        " ct DEFAULT (CURRENT_TIME));"
        "CREATE TABLE log(x, y, z);"
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN"
        " INSERT INTO log VALUES (random(), hex(randomblob(4)),"
        " datetime('now', '+1 day')); END",
        "INSERT INTO t(r, b, d, j, u, f, dt, tm) VALUES (random(),"
        " randomblob(16), datetime('now'), julianday('now'),"
        " unixepoch('now'), strftime('%Y-%m-%d %H:%M:%f', 'now'),"
        " date('now'), time('now'))",
        "INSERT INTO t(r, b, d, j, u, f) SELECT random(), randomblob(16),"
        " datetime(), julianday('now'), unixepoch(), strftime('%s', 'now')"
        " FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)",
        "UPDATE t SET r = r + (random() % 1000) WHERE id % 2 = 0",
        "INSERT INTO t(r) VALUES (abs(random()) % 100)",
        "DELETE FROM t WHERE id = (SELECT min(id) FROM t) AND"
        " random() > 0",
    };
    unsigned i, n = sizeof sqls / sizeof sqls[0];

    for (i = 0; i < n; i++) {
        bufs[i] =
            make_request_ex(1, i + 1, sqls[i], NULL, 0, T0 + (int64_t)i * 61001,
                            seed_base + i * 7919);
    }
    return n;
}

/* The same entries applied to two fresh databases, one in a single batch
 * and one entry per batch, give identical tables. */
static void test_replicas_identical(void **state)
{
    struct replica a, b;
    struct buf *bufs[16];
    unsigned i, n = workload(bufs, 42);
    char *da, *db, *la, *lb;

    (void)state;
    replica_open(&a);
    replica_open(&b);
    replica_apply(&a, bufs, n, n);
    replica_apply(&b, bufs, n, 1);
    da = dump_table(a.tmp.path, "t");
    db = dump_table(b.tmp.path, "t");
    la = dump_table(a.tmp.path, "log");
    lb = dump_table(b.tmp.path, "log");
    assert_string_equal(da, db);
    assert_string_equal(la, lb);
    /* The table really holds random and time values. */
    assert_true(strlen(da) > 200);
    assert_non_null(strstr(da, "t:2023-11-14"));
    assert_non_null(strstr(la, "t:2023-11-15"));
    free(da);
    free(db);
    free(la);
    free(lb);
    for (i = 0; i < n; i++) {
        buf_free(bufs[i]);
    }
    replica_close(&a);
    replica_close(&b);
}

/* sql_refusal_statement refuses VACUUM and a 'localtime' or 'utc'
 * literal given to a date function, whatever the case and blanks; the
 * same words as data, in another function or in a comment pass. */
static void test_refusal_statement(void **state)
{
    static const char *const refused[] = {
        "VACUUM",
        " /* c */ vacuum main",
        "SELECT datetime('now', 'localtime')",
        "SELECT date(x, ' UTC ') FROM t",
        "INSERT INTO t VALUES(strftime('%H', 'now',\n'LocalTime'))",
        "SELECT \"date\"('now', 'utc')",
        "SELECT unixepoch(julianday('now', 'utc'))",
    };
    static const char *const passed[] = {
        "INSERT INTO t VALUES('localtime', 'utc')",
        "SELECT date('now'), 'utc'",
        "SELECT date('now', substr('utc', 1))",
        "SELECT date('now', 'utc' || '')",
        "SELECT vacuum FROM t",
        "SELECT datetime('now') -- 'localtime'",
        "SELECT mydate('now', 'utc')",
    };
    char why[256];

    (void)state;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        why[0] = '\0';
        if (sql_refusal_statement(refused[i], why, sizeof why) != 1) {
            fail_msg("not refused: %s", refused[i]);
        }
        assert_true(strstr(why, "cannot be used in raft_exec") != NULL);
    }
    for (size_t i = 0; i < sizeof passed / sizeof passed[0]; i++) {
        if (sql_refusal_statement(passed[i], why, sizeof why) != 0) {
            fail_msg("refused: %s (%s)", passed[i], why);
        }
    }
    assert_int_equal(sql_refusal_statement(NULL, why, sizeof why), 0);
}

/* Time-zone modifiers and total_changes() would differ between nodes:
 * they are refused as SQL errors; date arithmetic on "now" still works. */
static void test_node_local_refused(void **state)
{
    static const struct {
        const char *sql;
        const char *err;
    } cases[] = {
        {"INSERT INTO z VALUES (datetime('now', 'localtime'))",
         "'localtime' modifier depends on each node's time zone"},
        {"INSERT INTO z VALUES (date('2020-01-01', ' UTC '))",
         "' UTC ' modifier depends on each node's time zone"},
        {"INSERT INTO z VALUES (strftime('%H', 'now', 'LocalTime'))",
         "modifier depends on each node's time zone"},
        {"INSERT INTO z VALUES (total_changes())",
         "total_changes() counts each node's own history"},
    };
    struct replica a;
    struct buf *b;
    struct sql_fsm_entry e;
    struct sql_result res;
    unsigned i;

    (void)state;
    replica_open(&a);
    b = make_request_ex(1, 1, "CREATE TABLE z(v)", NULL, 0, T0, 1);
    replica_apply(&a, &b, 1, 1);
    buf_free(b);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        b = make_request_ex(1, 2 + i, cases[i].sql, NULL, 0, T0, 1);
        e.index = 2 + i;
        e.term = 1;
        entry_set_payload(&e, b);
        assert_int_equal(sql_fsm_apply(a.fsm, &e, 1, &res), 0);
        assert_int_not_equal(res.rc, 0);
        assert_non_null(strstr(res.errmsg, cases[i].err));
        sql_result_clear(&res);
        buf_free(b);
    }
    b = make_request_ex(1, 100,
                        "INSERT INTO z VALUES (datetime('now', '+1 day'))",
                        NULL, 0, T0, 1);
    e.index = 2 + i;
    e.term = 1;
    entry_set_payload(&e, b);
    assert_int_equal(sql_fsm_apply(a.fsm, &e, 1, &res), 0);
    assert_int_equal(res.rc, 0);
    sql_result_clear(&res);
    buf_free(b);
    assert_query(a.tmp.path, "SELECT group_concat(v) FROM z",
                 "2023-11-15 22:13:20");
    replica_close(&a);
}

/* "now" inside a request is the entry's timestamp, to the millisecond,
 * through every date and time function. */
static void test_now_is_entry_time(void **state)
{
    struct replica a;
    struct buf *bufs[2];

    (void)state;
    replica_open(&a);
    bufs[0] = make_request_ex(
        1, 1,
        "CREATE TABLE n(d, ts DEFAULT CURRENT_TIMESTAMP, j, u, f, sub);"
        "INSERT INTO n(d, j, u, f, sub) VALUES (datetime('now'),"
        " julianday('now'), unixepoch('now'),"
        " strftime('%Y-%m-%d %H:%M:%f', 'now'),"
        " CAST(round((julianday('now') - 2440587.5) * 86400000.0)"
        " AS INTEGER))",
        NULL, 0, T0, 1);
    bufs[1] = make_request_ex(1, 2, "INSERT INTO n(d) VALUES (datetime('now'))",
                              NULL, 0, 0, 1);
    replica_apply(&a, bufs, 2, 2);
    assert_query(a.tmp.path, "SELECT d FROM n WHERE rowid = 1",
                 "2023-11-14 22:13:20");
    assert_query(a.tmp.path, "SELECT ts FROM n WHERE rowid = 1",
                 "2023-11-14 22:13:20");
    assert_query(a.tmp.path, "SELECT u FROM n WHERE rowid = 1", "1700000000");
    assert_query(a.tmp.path, "SELECT f FROM n WHERE rowid = 1",
                 "2023-11-14 22:13:20.123");
    assert_query(a.tmp.path, "SELECT sub FROM n WHERE rowid = 1",
                 "1700000000123");
    assert_query(a.tmp.path,
                 "SELECT j = julianday('2023-11-14 22:13:20.123')"
                 " FROM n WHERE rowid = 1",
                 "1");
    assert_query(a.tmp.path, "SELECT ts FROM n WHERE rowid = 2",
                 "1970-01-01 00:00:00");
    buf_free(bufs[0]);
    buf_free(bufs[1]);
    replica_close(&a);
}

/* random() follows the seed: another seed gives other values, the same
 * seed in another request gives the same values (the PRNG is reseeded per
 * request), and successive calls differ. randomblob(N) has N bytes (at
 * least 1). */
static void test_seed(void **state)
{
    struct replica a;
    struct buf *bufs[4];
    const char *ins =
        "INSERT INTO r VALUES (random(), random(),"
        " randomblob(16), length(randomblob(0)),"
        " length(randomblob(-3)), length(randomblob(16)))";
    char *v1, *v2, *v3;

    (void)state;
    replica_open(&a);
    bufs[0] = make_request_ex(1, 1, "CREATE TABLE r(a, b, c, l0, ln, l16)",
                              NULL, 0, T0, 0);
    bufs[1] = make_request_ex(1, 2, ins, NULL, 0, T0, 1);
    bufs[2] = make_request_ex(1, 3, ins, NULL, 0, T0, 2);
    bufs[3] = make_request_ex(1, 4, ins, NULL, 0, T0 + 5000, 1);
    replica_apply(&a, bufs, 4, 4);
    v1 = query_text(a.tmp.path, "SELECT a || hex(c) FROM r WHERE rowid = 1");
    v2 = query_text(a.tmp.path, "SELECT a || hex(c) FROM r WHERE rowid = 2");
    v3 = query_text(a.tmp.path, "SELECT a || hex(c) FROM r WHERE rowid = 3");
    assert_string_not_equal(v1, v2);
    assert_string_equal(v1, v3);
    assert_query(a.tmp.path, "SELECT count(*) FROM r WHERE a = b", "0");
    assert_query(a.tmp.path,
                 "SELECT count(*) FROM r WHERE l0 = 1 AND ln = 1"
                 " AND l16 = 16 AND length(c) = 16",
                 "3");
    free(v1);
    free(v2);
    free(v3);
    for (unsigned i = 0; i < 4; i++) {
        buf_free(bufs[i]);
    }
    replica_close(&a);
}

/* query_int64 runs a one-value query on @db. */
static int64_t query_int64(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s;
    int64_t v;

    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* The shim on its own: outside an entry "now" is the real clock; inside,
 * the entry's; two contexts with their own VFS coexist; the PRNG is a pure
 * function of the seed. */
static void test_shim_direct(void **state)
{
    struct sql_determinism *d1 = calloc(1, sizeof *d1);
    struct sql_determinism *d2 = calloc(1, sizeof *d2);
    sqlite3 *db1, *db2;
    char msg[128];
    int64_t now, r1, r2;
    uint64_t x[3];

    (void)state;
    assert_non_null(d1);
    assert_non_null(d2);
    assert_int_equal(determinism_init(d1, msg, sizeof msg), 0);
    assert_int_equal(determinism_init(d2, msg, sizeof msg), 0);
    assert_string_not_equal(d1->name, d2->name);
    assert_int_equal(
        sqlite3_open_v2(":memory:", &db1,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, d1->name),
        SQLITE_OK);
    assert_int_equal(
        sqlite3_open_v2(":memory:", &db2,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, d2->name),
        SQLITE_OK);
    assert_int_equal(determinism_install(d1, db1), SQLITE_OK);
    assert_int_equal(determinism_install(d2, db2), SQLITE_OK);

    now = (int64_t)time(NULL);
    r1 = query_int64(db1, "SELECT unixepoch('now')");
    assert_true(r1 >= now - 5 && r1 <= now + 5);

    determinism_begin(d1, 9, 86400000);
    determinism_begin(d2, 9, 2 * 86400000);
    assert_int_equal(query_int64(db1, "SELECT unixepoch('now')"), 86400);
    assert_int_equal(query_int64(db2, "SELECT unixepoch('now')"), 172800);
    r1 = query_int64(db1, "SELECT random()");
    r2 = query_int64(db2, "SELECT random()");
    assert_true(r1 == r2);
    determinism_end(d1);
    determinism_end(d2);
    r1 = query_int64(db1, "SELECT unixepoch('now')");
    assert_true(r1 >= now - 5 && r1 <= now + 5);

    determinism_begin(d1, 12345, 0);
    x[0] = determinism_next(d1);
    x[1] = determinism_next(d1);
    determinism_begin(d1, 12345, 0);
    assert_true(determinism_next(d1) == x[0]);
    assert_true(determinism_next(d1) == x[1]);
    determinism_begin(d1, 12346, 0);
    x[2] = determinism_next(d1);
    assert_true(x[2] != x[0]);
    determinism_end(d1);

    sqlite3_close(db1);
    sqlite3_close(db2);
    determinism_close(d1);
    determinism_close(d2);
    assert_null(sqlite3_vfs_find(d1->name));
    free(d1);
    free(d2);
}

/* Two apply connections in one process keep their own entry time. */
static void test_two_fsms(void **state)
{
    struct replica a, b;
    struct buf *ba, *bb;

    (void)state;
    replica_open(&a);
    replica_open(&b);
    ba = make_request_ex(1, 1, "CREATE TABLE x AS SELECT date('now') AS d",
                         NULL, 0, 0, 0);
    bb = make_request_ex(1, 1, "CREATE TABLE x AS SELECT date('now') AS d",
                         NULL, 0, T0, 0);
    replica_apply(&a, &ba, 1, 1);
    replica_apply(&b, &bb, 1, 1);
    assert_query(a.tmp.path, "SELECT d FROM x", "1970-01-01");
    assert_query(b.tmp.path, "SELECT d FROM x", "2023-11-14");
    buf_free(ba);
    buf_free(bb);
    replica_close(&a);
    replica_close(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_identical),
        cmocka_unit_test(test_now_is_entry_time),
        cmocka_unit_test(test_node_local_refused),
        cmocka_unit_test(test_refusal_statement),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_shim_direct),
        cmocka_unit_test(test_two_fsms),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
