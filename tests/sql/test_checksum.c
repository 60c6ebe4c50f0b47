/* Tests of the replica checksum (sql.h "The replica checksum",
 * sql/checksum*.c): the running value from the pre-update hook equals a
 * full scan after inserts, updates, deletes, REPLACE, WITHOUT ROWID
 * tables, blobs, NULLs and reals; rolled-back requests and batches leave
 * nothing; what the hook misses (ALTER TABLE, DROP TABLE, CREATE TABLE
 * AS, AUTOINCREMENT, ANALYZE) is rescanned; the value does not depend on
 * how entries are batched, survives a reopen, is carried by the file; and
 * sql_checksum_verify finds a write that bypassed the hook. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sql/fsm_internal.h"
#include "tests/sql/helpers.h"

#define MAX_BATCH 16

/* A fixture: a fresh database file and its apply connection, the
 * checksum on. */
struct fixture {
    struct tmpdb tmp;                 /* the database file */
    struct sql_fsm *fsm;              /* its apply connection */
    struct sql_result res[MAX_BATCH]; /* results of the last batch */
    uint64_t seq;                     /* last request sequence number */
};

static void open_fsm(struct fixture *f)
{
    char msg[256];

    if (sql_fsm_open(f->tmp.path, NULL, 0, &f->fsm, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    if (sql_fsm_checksum_enable(f->fsm, 1) != 0) {
        fail_msg("enable: %s", sql_fsm_errmsg(f->fsm));
    }
    assert_string_equal(sql_fsm_checksum_why(f->fsm), "");
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);

    assert_non_null(f);
    tmpdb_init(&f->tmp);
    open_fsm(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    sql_fsm_close(f->fsm);
    tmpdb_remove(&f->tmp);
    free(f);
    return 0;
}

/* apply_on applies the @n requests @sqls as one batch on @fsm (request
 * ids from *@seq on) and checks each result's rc against @rcs (NULL: all
 * SQLITE_OK). Results stay in @res. */
static void apply_on(struct sql_fsm *fsm, uint64_t *seq, struct sql_result *res,
                     const char *const *sqls, unsigned n, const int *rcs)
{
    struct sql_fsm_entry e[MAX_BATCH];
    struct buf *b[MAX_BATCH];
    uint64_t first = sql_fsm_applied(fsm) + 1;
    unsigned i;

    assert_true(n <= MAX_BATCH);
    memset(e, 0, sizeof e);
    for (i = 0; i < n; i++) {
        b[i] = make_request(++*seq, sqls[i]);
        e[i].index = first + i;
        e[i].term = 1;
        entry_set_payload(&e[i], b[i]);
    }
    if (sql_fsm_apply(fsm, e, n, res) != 0) {
        fail_msg("apply: %s", sql_fsm_errmsg(fsm));
    }
    for (i = 0; i < n; i++) {
        int want = rcs != NULL ? rcs[i] : SQLITE_OK;
        if (res[i].rc != want) {
            fail_msg("request %u (%s): rc %d, want %d: %s", i, sqls[i],
                     res[i].rc, want, res[i].errmsg ? res[i].errmsg : "");
        }
        buf_free(b[i]);
    }
}

static void clear_res(struct sql_result *res, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        sql_result_clear(&res[i]);
    }
}

/* apply runs one batch on the fixture, every request expected to pass. */
static void apply(struct fixture *f, const char *const *sqls, unsigned n)
{
    apply_on(f->fsm, &f->seq, f->res, sqls, n, NULL);
    clear_res(f->res, n);
}

#define APPLY(f, ...)                                                          \
    do {                                                                       \
        const char *const sqls_[] = {__VA_ARGS__};                             \
        apply((f), sqls_, sizeof sqls_ / sizeof sqls_[0]);                     \
    } while (0)

/* running returns the running checksum of @f. */
static uint64_t running(struct fixture *f)
{
    uint64_t v = 0;

    assert_int_equal(sql_fsm_checksum(f->fsm, &v), 1);
    return v;
}

/* assert_scan_equal checks that a full scan of the file finds the
 * running value, with no table differing, at the applied index. */
static void assert_scan_equal(struct fixture *f)
{
    struct sql_verify v;
    char msg[256];

    if (sql_checksum_verify(f->tmp.path, &v, msg, sizeof msg) != 0) {
        fail_msg("verify: %s", msg);
    }
    assert_int_equal(v.available, 1);
    assert_int_equal(v.index, sql_fsm_applied(f->fsm));
    for (unsigned i = 0; i < v.n_differ; i++) {
        print_message("differs: %s stored %016llx scanned %016llx\n",
                      v.differ[i].name, (unsigned long long)v.differ[i].stored,
                      (unsigned long long)v.differ[i].scanned);
    }
    assert_int_equal(v.n_differ, 0);
    assert_true(v.stored == running(f));
    assert_true(v.scanned == running(f));
    sql_verify_clear(&v);
}

/* The hook's running value equals a full scan after inserts, updates,
 * deletes, REPLACE and upserts of every storage class, in rowid tables
 * (rowid and INTEGER PRIMARY KEY) and WITHOUT ROWID ones; each change
 * moves it, and each entry's result carries the value after it. */
static void test_hook_matches_scan(void **state)
{
    struct fixture *f = *state;
    uint64_t before;

    APPLY(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL, d BLOB,"
          " e)",
          "CREATE TABLE w(k TEXT PRIMARY KEY, v) WITHOUT ROWID",
          "CREATE TABLE r(x, y)");
    assert_scan_equal(f);
    before = running(f);
    APPLY(f,
          "INSERT INTO t VALUES (1, 'one', 1.5, x'00ff', NULL),"
          " (2, 'two', 2.0, x'', 7), (3, '', -0.0, NULL, 2.25),"
          " (4, 'x', 1e300, zeroblob(3), 'text')",
          "INSERT INTO w VALUES ('a', 1), ('b', NULL), ('c', x'01')",
          "INSERT INTO r VALUES (1, 1), (1, 1), (NULL, 'z')");
    assert_true(running(f) != before);
    assert_scan_equal(f);
    APPLY(f, "UPDATE t SET b = b || '!', c = c * 2 WHERE a <= 2",
          "UPDATE t SET a = 10 WHERE a = 4", "UPDATE w SET v = 'vv'",
          "UPDATE r SET y = 2 WHERE rowid = 2", "DELETE FROM w WHERE k = 'b'",
          "INSERT OR REPLACE INTO t VALUES (1, 'replaced', 0.5, NULL, NULL)",
          "INSERT INTO w VALUES ('a', 5) ON CONFLICT(k) DO UPDATE"
          " SET v = excluded.v + 1",
          "REPLACE INTO w VALUES ('c', 3.0)");
    assert_scan_equal(f);
    {
        const char *const sqls[] = {"DELETE FROM r WHERE rowid = 1",
                                    "DELETE FROM t"};
        apply_on(f->fsm, &f->seq, f->res, sqls, 2, NULL);
        assert_true(f->res[1].checksum == running(f));
        assert_true(f->res[0].checksum != f->res[1].checksum);
        clear_res(f->res, 2);
    }
    assert_scan_equal(f);
}

/* A request whose savepoint rolls back (a constraint fails after it
 * changed rows) leaves the value as it was, also among passing requests
 * of the same batch; so does a request that rolls back the whole batch
 * (INSERT OR ROLLBACK), after which the batch is applied again. */
static void test_rollback_undo(void **state)
{
    struct fixture *f = *state;
    uint64_t v0, v1;

    APPLY(f, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)",
          "INSERT INTO t VALUES (1, 'a')");
    v0 = running(f);
    {
        const char *const sqls[] = {
            "INSERT INTO t VALUES (2, 'b'); INSERT INTO t VALUES (1, 'dup')",
            "UPDATE t SET v = 'c'; INSERT INTO t VALUES (3, NULL)"};
        const int rcs[] = {SQLITE_CONSTRAINT_PRIMARYKEY,
                           SQLITE_CONSTRAINT_NOTNULL};
        apply_on(f->fsm, &f->seq, f->res, sqls, 2, rcs);
        clear_res(f->res, 2);
    }
    assert_true(running(f) == v0);
    assert_scan_equal(f);
    {
        const char *const sqls[] = {
            "INSERT INTO t VALUES (5, 'e')",
            "INSERT INTO t VALUES (6, 'f'); INSERT OR ROLLBACK INTO t"
            " VALUES (1, 'x')",
            "INSERT INTO t VALUES (7, 'g')"};
        const int rcs[] = {SQLITE_OK, SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_OK};
        apply_on(f->fsm, &f->seq, f->res, sqls, 3, rcs);
        assert_true(f->res[0].checksum == f->res[1].checksum);
        clear_res(f->res, 3);
    }
    v1 = running(f);
    assert_true(v1 != v0);
    assert_scan_equal(f);
    APPLY(f, "DELETE FROM t WHERE k IN (5, 7)");
    assert_true(running(f) == v0);
}

/* What the hook does not see is rescanned: ALTER TABLE ADD COLUMN (with
 * a DEFAULT, then updates of the rows written before it), RENAME COLUMN,
 * DROP COLUMN, RENAME TO, DROP TABLE, CREATE TABLE AS SELECT, an
 * AUTOINCREMENT table's sqlite_sequence, ANALYZE's sqlite_stat1, and a
 * table with a generated column. */
static void test_schema_changes(void **state)
{
    struct fixture *f = *state;
    uint64_t v;

    APPLY(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)",
          "INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, 'z')");
    v = running(f);
    APPLY(f, "ALTER TABLE t ADD COLUMN c DEFAULT 7");
    assert_true(running(f) != v);
    assert_scan_equal(f);
    APPLY(f, "UPDATE t SET b = 'w' WHERE a = 1", "DELETE FROM t WHERE a = 2",
          "INSERT INTO t(a, b) VALUES (4, 'q')");
    assert_scan_equal(f);
    APPLY(f, "ALTER TABLE t RENAME COLUMN b TO bb");
    assert_scan_equal(f);
    APPLY(f, "ALTER TABLE t DROP COLUMN c");
    assert_scan_equal(f);
    APPLY(f, "ALTER TABLE t RENAME TO t2");
    assert_scan_equal(f);
    APPLY(f, "CREATE TABLE u AS SELECT * FROM t2", "DROP TABLE t2");
    assert_scan_equal(f);
    APPLY(f, "CREATE TABLE s(id INTEGER PRIMARY KEY AUTOINCREMENT, x)",
          "INSERT INTO s(x) VALUES (1), (2)", "DELETE FROM s WHERE x = 2",
          "INSERT INTO s(x) VALUES (3)");
    assert_scan_equal(f);
    APPLY(f, "CREATE INDEX u_a ON u(a)", "ANALYZE");
    assert_scan_equal(f);
    APPLY(f, "CREATE TABLE g(a, b AS (a * 2), c AS (a + 1) STORED)",
          "INSERT INTO g(a) VALUES (1), (2)", "UPDATE g SET a = 5 WHERE a = 1");
    assert_scan_equal(f);
    APPLY(f, "DROP TABLE u", "DROP TABLE s", "DROP TABLE g");
    assert_scan_equal(f);
}

/* The same entries give the same value at every index, however they are
 * batched: one batch of five on one file, five batches of one on
 * another. */
static void test_batch_independence(void **state)
{
    struct fixture *f = *state;
    struct fixture g;
    const char *const sqls[] = {
        "CREATE TABLE t(k INTEGER PRIMARY KEY, v)",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
        "INSERT INTO t VALUES (1, 'dup')",
        "UPDATE t SET v = v || v",
        "DELETE FROM t WHERE k = 1",
    };
    const int rcs[] = {SQLITE_OK, SQLITE_OK, SQLITE_CONSTRAINT_PRIMARYKEY,
                       SQLITE_OK, SQLITE_OK};
    struct sql_result one[5];
    uint64_t seq = 0;

    memset(&g, 0, sizeof g);
    tmpdb_init(&g.tmp);
    open_fsm(&g);
    apply_on(f->fsm, &f->seq, f->res, sqls, 5, rcs);
    for (unsigned i = 0; i < 5; i++) {
        apply_on(g.fsm, &seq, one, &sqls[i], 1, &rcs[i]);
        assert_true(one[0].checksum == f->res[i].checksum);
        clear_res(one, 1);
    }
    clear_res(f->res, 5);
    sql_fsm_close(g.fsm);
    tmpdb_remove(&g.tmp);
}

/* The sums are stored with the applied index: a reopened connection has
 * the same value without a scan, and a copy of the file (a snapshot)
 * carries it. With the checksum off, the stored sums are forgotten and
 * turning it on again computes them afresh, to the same value. */
static void test_restart_and_off(void **state)
{
    struct fixture *f = *state;
    uint64_t v, w = 0;

    APPLY(f, "CREATE TABLE t(k, v)", "INSERT INTO t VALUES (1, 2), (3, 4)");
    v = running(f);
    sql_fsm_close(f->fsm);
    open_fsm(f);
    assert_true(running(f) == v);
    assert_query(f->tmp.path, "SELECT typeof(sums) FROM raftsql_applied",
                 "blob");
    assert_int_equal(sql_fsm_checksum_enable(f->fsm, 0), 0);
    assert_int_equal(sql_fsm_checksum(f->fsm, &w), 0);
    assert_string_equal(sql_fsm_checksum_why(f->fsm), "off (checksum=off)");
    assert_query(f->tmp.path, "SELECT typeof(sums) FROM raftsql_applied",
                 "null");
    APPLY(f, "INSERT INTO t VALUES (5, 6)", "DELETE FROM t WHERE k = 5");
    assert_int_equal(sql_fsm_checksum_enable(f->fsm, 1), 0);
    assert_true(running(f) == v);
    assert_scan_equal(f);
}

/* A snapshot carries the sums: a node that installs it has the value of
 * the node that made it at that index, and both go on alike; a snapshot
 * of a node with the checksum off has none, and the installer computes
 * them by a scan. */
static void test_snapshot_carries(void **state)
{
    struct fixture *f = *state;
    struct fixture g;
    char snap[160], msg[256];
    uint64_t idx = 0, term = 0, seq = 1000;
    struct sql_result r[1];
    const char *const more[] = {"INSERT INTO t VALUES (9, 'after')"};

    APPLY(f, "CREATE TABLE t(k INTEGER PRIMARY KEY, v)",
          "INSERT INTO t VALUES (1, 'a'), (2, 'b')");
    snprintf(snap, sizeof snap, "%s/snap", f->tmp.dir);
    memset(&g, 0, sizeof g);
    tmpdb_init(&g.tmp);
    open_fsm(&g);
    for (int off = 0; off < 2; off++) {
        if (off) {
            assert_int_equal(sql_fsm_checksum_enable(f->fsm, 0), 0);
        }
        if (sql_fsm_snapshot_create(f->fsm, snap, &idx, &term, msg,
                                    sizeof msg) != 0) {
            fail_msg("snapshot: %s", msg);
        }
        assert_int_equal(sql_fsm_snapshot_install(g.fsm, snap, &idx, &term), 0);
        unlink(snap);
        if (!off) {
            assert_true(running(&g) == running(f));
            apply_on(f->fsm, &f->seq, f->res, more, 1, NULL);
            apply_on(g.fsm, &seq, r, more, 1, NULL);
            assert_true(r[0].checksum == f->res[0].checksum);
            assert_true(running(&g) == running(f));
            clear_res(f->res, 1);
            clear_res(r, 1);
        }
        assert_scan_equal(&g);
    }
    sql_fsm_close(g.fsm);
    tmpdb_remove(&g.tmp);
}

/* A database of before the checksum (raftsql_applied without its sums
 * column, a user table with rows) gets the column at open and its sums
 * by a scan when the checksum is turned on. */
static void test_database_of_before(void **state)
{
    struct fixture *f = *state;
    struct fixture g;
    sqlite3 *db;

    (void)f;
    memset(&g, 0, sizeof g);
    tmpdb_init(&g.tmp);
    assert_int_equal(sqlite3_open(g.tmp.path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL;"
                     "CREATE TABLE raftsql_applied(id INTEGER PRIMARY KEY"
                     " CHECK (id = 0), idx INTEGER NOT NULL,"
                     " term INTEGER NOT NULL);"
                     "INSERT INTO raftsql_applied VALUES (0, 7, 1);"
                     "CREATE TABLE t(k, v); INSERT INTO t VALUES (1, 'a');",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    open_fsm(&g);
    assert_int_equal(sql_fsm_applied(g.fsm), 7);
    assert_true(running(&g) != 0);
    assert_scan_equal(&g);
    sql_fsm_close(g.fsm);
    tmpdb_remove(&g.tmp);
}

/* A write that bypassed the hook (a plain connection, as a process
 * without the extension) is found by sql_checksum_verify, naming the
 * table and both sums (also one whose table is gone). */
static void test_verify_finds_bypass(void **state)
{
    struct fixture *f = *state;
    struct sql_verify v;
    sqlite3 *db;
    char msg[256];

    APPLY(f, "CREATE TABLE t(k, v)", "CREATE TABLE other(x)",
          "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
          "INSERT INTO other VALUES (1)");
    assert_int_equal(sqlite3_open(f->tmp.path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "UPDATE t SET v = 'B' WHERE k = 2", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(sql_checksum_verify(f->tmp.path, &v, msg, sizeof msg), 0);
    assert_int_equal(v.available, 1);
    assert_int_equal(v.n_differ, 1);
    assert_string_equal(v.differ[0].name, "t");
    assert_true(v.differ[0].stored != v.differ[0].scanned);
    assert_true(v.stored == running(f));
    assert_true(v.scanned != v.stored);
    sql_verify_clear(&v);
    assert_int_equal(sqlite3_open(f->tmp.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE other", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(sql_checksum_verify(f->tmp.path, &v, msg, sizeof msg), 0);
    assert_int_equal(v.n_differ, 2);
    assert_string_equal(v.differ[1].name, "other");
    assert_true(v.differ[1].scanned == 0);
    sql_verify_clear(&v);
}

/* verify_schema runs sql_checksum_verify on @f's file and returns
 * whether its schema sum differs from the stored one (which must be
 * there). */
static bool verify_schema(struct fixture *f)
{
    struct sql_verify v;
    char msg[256];
    bool differs;

    assert_int_equal(sql_checksum_verify(f->tmp.path, &v, msg, sizeof msg), 0);
    assert_int_equal(v.schema_available, 1);
    assert_int_equal(v.n_differ, 0);
    differs = v.schema_stored != v.schema_scanned;
    sql_verify_clear(&v);
    return differs;
}

/* The schema sum stored with the applied index follows the node's own
 * schema changes (DDL, a user_version PRAGMA, both in one batch with
 * rows), and survives a reopen; an index, a trigger, a view or a
 * user_version written behind the node shows as a differing schema sum
 * while every row is as stored, and stays so across a reopen and the
 * batches after it (the stored sum is computed again only when the
 * node's own work moves the header's numbers). */
static void test_schema_sum(void **state)
{
    static const char *const behind[] = {
        "CREATE INDEX t_v ON t(v)",
        "CREATE TRIGGER t_t AFTER INSERT ON t BEGIN SELECT 1; END",
        "CREATE VIEW t_view AS SELECT k FROM t",
        "PRAGMA user_version = 9",
        "PRAGMA application_id = 77",
    };
    struct fixture *f = *state;
    sqlite3 *db;

    assert_false(verify_schema(f));
    APPLY(f, "CREATE TABLE t(k, v)", "INSERT INTO t VALUES (1, 'a')");
    assert_false(verify_schema(f));
    APPLY(f, "CREATE INDEX t_k ON t(k)", "PRAGMA user_version = 3",
          "INSERT INTO t VALUES (2, 'b')");
    assert_false(verify_schema(f));
    APPLY(f, "ALTER TABLE t ADD COLUMN w", "DROP INDEX t_k");
    assert_false(verify_schema(f));
    sql_fsm_close(f->fsm);
    open_fsm(f);
    APPLY(f, "INSERT INTO t VALUES (3, 'c', NULL)");
    assert_false(verify_schema(f));
    for (size_t i = 0; i < sizeof behind / sizeof *behind; i++) {
        assert_int_equal(sqlite3_open(f->tmp.path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, behind[i], NULL, NULL, NULL),
                         SQLITE_OK);
        sqlite3_close(db);
        assert_true(verify_schema(f));
        /* Found at the next start too, after batches of rows. */
        sql_fsm_close(f->fsm);
        open_fsm(f);
        APPLY(f, "UPDATE t SET v = v || '+'");
        assert_true(verify_schema(f));
        /* Repaired as a snapshot install would: the file as the stored
         * sum says (undo the change behind the node). */
        assert_int_equal(sqlite3_open(f->tmp.path, &db), SQLITE_OK);
        assert_int_equal(
            sqlite3_exec(db,
                         "DROP INDEX IF EXISTS t_v; DROP TRIGGER IF EXISTS t_t;"
                         "DROP VIEW IF EXISTS t_view; PRAGMA user_version = 3;"
                         "PRAGMA application_id = 0",
                         NULL, NULL, NULL),
            SQLITE_OK);
        sqlite3_close(db);
        assert_false(verify_schema(f));
        sql_fsm_close(f->fsm);
        open_fsm(f);
    }
    /* A release before the schema sum applies batches without it (its
     * node ran the file between two of this release's, a rolling upgrade
     * or a downgrade): the stored sum stays behind the schema it
     * changes, and its index behind the applied one. Not compared then
     * (a healthy replica was found diverged: a new-user trial), and
     * computed again at this release's next batch. */
    assert_int_equal(sqlite3_open(f->tmp.path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db,
                     "BEGIN; CREATE INDEX t_w ON t(w);"
                     "UPDATE raftsql_applied SET idx = idx + 1; COMMIT",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    {
        struct sql_verify v;
        char msg[256];
        assert_int_equal(sql_checksum_verify(f->tmp.path, &v, msg, sizeof msg),
                         0);
        assert_int_equal(v.schema_available, 0);
        sql_verify_clear(&v);
    }
    sql_fsm_close(f->fsm);
    open_fsm(f);
    APPLY(f, "INSERT INTO t VALUES (4, 'd', NULL)");
    assert_false(verify_schema(f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hook_matches_scan, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rollback_undo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_independence, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restart_and_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_carries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_database_of_before, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_verify_finds_bypass, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_schema_sum, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
