/* Tests of replaying a changeset on the apply connection
 * (sql/changeset_apply.c, through sql_fsm_apply): a host connection's
 * transaction on replica A is captured (sql/changeset_capture.c); its
 * changeset is applied on replica B (replayed) and on A, where the
 * writer's own commit either happened (landed: only recorded) or was
 * vetoed (the writer died before its local commit: replayed). Each test
 * ends with both files equal, row for row (rowids and sqlite_sequence
 * included), and with equal running checksums that a full scan confirms
 * (what raft_verify() compares). The last ones play a commit of a
 * process without raftsql around the writer's: with the writer's
 * readings of the WAL-index header (sql_fsm_writer_marks) or without,
 * it is caught; a checkpoint is not taken for one, and a writer alone
 * costs no scan. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sql/changeset.h"
#include "sql/fsm_internal.h"
#include "tests/sql/helpers.h"

/* Two replicas and a writer on A's file. */
struct fixture {
    struct tmpdb a, b;       /* the two files */
    struct sql_fsm *fa, *fb; /* their apply connections */
    uint64_t seq;            /* request sequence numbers */
    sqlite3 *w;              /* the writer, a host connection on A */
    struct sql_capture *cap; /* its capture */
    struct buf *taken;       /* the changeset its last COMMIT sent */
    char take_msg[256];      /* sql_capture_take's message */
    int take_rc;             /* and code */
    bool veto;               /* the writer dies before its local commit */
};

/* apply_one applies payload @b alone in a batch on @fsm and returns
 * sql_fsm_apply's code; a request must succeed as SQL. */
static int apply_one(struct sql_fsm *fsm, const struct buf *b)
{
    struct sql_fsm_entry e;
    struct sql_result res;
    int rc;

    e.index = sql_fsm_applied(fsm) + 1;
    e.term = 1;
    entry_set_payload(&e, b);
    rc = sql_fsm_apply(fsm, &e, 1, &res);
    if (rc == 0) {
        if (res.rc != SQLITE_OK) {
            fail_msg("entry %llu: %s", (unsigned long long)e.index,
                     res.errmsg != NULL ? res.errmsg : "?");
        }
        sql_result_clear(&res);
    } else {
        print_message("apply: %s\n", sql_fsm_errmsg(fsm));
    }
    return rc;
}

/* both applies request @sql on both replicas (raft_exec's path). */
static void both(struct fixture *f, const char *sql)
{
    struct buf *b = make_request(++f->seq, sql);

    assert_int_equal(apply_one(f->fa, b), 0);
    assert_int_equal(apply_one(f->fb, b), 0);
    buf_free(b);
}

/* on_commit is the writer's commit hook: it takes the changeset, as the
 * guard's commit hook will, and lets the commit go on, or vetoes it when
 * the test plays a writer that died before its local commit. */
static int on_commit(void *data)
{
    struct fixture *f = data;
    uint64_t id[2] = {7, ++f->seq};
    void *p = NULL;
    size_t len = 0;

    buf_free(f->taken);
    f->taken = NULL;
    f->take_rc = sql_capture_take(f->cap, id, 0, &p, &len, f->take_msg,
                                  sizeof f->take_msg);
    if (f->take_rc == 0) {
        f->taken = buf_copy(p, len);
        free(p);
    }
    return f->veto ? 1 : 0;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char msg[256] = "";

    assert_non_null(f);
    tmpdb_init(&f->a);
    tmpdb_init(&f->b);
    if (sql_fsm_open(f->a.path, NULL, 0, &f->fa, msg, sizeof msg) != 0 ||
        sql_fsm_open(f->b.path, NULL, 0, &f->fb, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    assert_int_equal(sql_fsm_checksum_enable(f->fa, 1), 0);
    assert_int_equal(sql_fsm_checksum_enable(f->fb, 1), 0);
    assert_int_equal(sqlite3_open(f->a.path, &f->w), SQLITE_OK);
    sqlite3_busy_timeout(f->w, 5000);
    if (sql_capture_open(f->w, 1u << 20, &f->cap, msg, sizeof msg) != 0) {
        fail_msg("capture: %s", msg);
    }
    sqlite3_commit_hook(f->w, on_commit, f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    sql_capture_close(f->cap, 0);
    sqlite3_close(f->w);
    buf_free(f->taken);
    sql_fsm_close(f->fa);
    sql_fsm_close(f->fb);
    tmpdb_remove(&f->a);
    tmpdb_remove(&f->b);
    free(f);
    return 0;
}

/* write runs @sql on the writer; a COMMIT it makes must have taken a
 * changeset. Returns the SQLite code of sqlite3_exec. */
static int write_sql(struct fixture *f, const char *sql)
{
    char *err = NULL;
    int rc;

    rc = sqlite3_exec(f->w, sql, NULL, NULL, &err);
    sqlite3_free(err);
    return rc;
}

/* dump_all returns every row of every table of @path but raftsql's,
 * sqlite_sequence included, in a fixed order, as text (malloc'd). */
static char *dump_all(const char *path)
{
    sqlite3 *db;
    sqlite3_stmt *t;
    sqlite3_str *out;
    char *s, *copy;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    out = sqlite3_str_new(db);
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT l.name, l.wr FROM pragma_table_list l "
                           "WHERE l.schema = 'main' AND l.type = 'table' AND "
                           "l.name NOT LIKE 'raftsql\\_%' ESCAPE '\\' AND "
                           "l.name <> 'sqlite_schema' ORDER BY l.name",
                           -1, &t, NULL),
        SQLITE_OK);
    while (sqlite3_step(t) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(t, 0);
        char *q = sqlite3_mprintf(sqlite3_column_int(t, 1)
                                      ? "SELECT * FROM \"%w\""
                                      : "SELECT rowid, * FROM \"%w\" "
                                        "ORDER BY rowid",
                                  name);
        sqlite3_stmt *s2;

        sqlite3_str_appendf(out, "[%s]\n", name);
        assert_int_equal(sqlite3_prepare_v2(db, q, -1, &s2, NULL), SQLITE_OK);
        sqlite3_free(q);
        while (sqlite3_step(s2) == SQLITE_ROW) {
            for (int i = 0; i < sqlite3_column_count(s2); i++) {
                sqlite3_str_appendf(
                    out, "%d:%s|", sqlite3_column_type(s2, i),
                    sqlite3_column_type(s2, i) == SQLITE_BLOB
                        ? "(blob)"
                        : (const char *)sqlite3_column_text(s2, i));
            }
            sqlite3_str_appendall(out, "\n");
        }
        sqlite3_finalize(s2);
    }
    sqlite3_finalize(t);
    s = sqlite3_str_finish(out);
    copy = strdup(s != NULL ? s : "");
    sqlite3_free(s);
    sqlite3_close(db);
    return copy;
}

/* assert_equal_replicas checks both files row for row, and the running
 * checksums equal and confirmed by a full scan on each. */
static void assert_equal_replicas(struct fixture *f)
{
    char *da = dump_all(f->a.path), *db = dump_all(f->b.path);
    char differ[200];
    uint64_t ca = 0, cb = 0;

    assert_string_equal(da, db);
    free(da);
    free(db);
    assert_int_equal(sql_fsm_verify(f->fa, differ, sizeof differ), 0);
    assert_int_equal(sql_fsm_verify(f->fb, differ, sizeof differ), 0);
    assert_int_equal(sql_fsm_checksum(f->fa, &ca), 1);
    assert_int_equal(sql_fsm_checksum(f->fb, &cb), 1);
    assert_true(ca == cb);
}

/* commit_and_apply runs @sql (ending in a commit) on the writer, then
 * applies the changeset it sent on both replicas and checks them. With
 * @veto the writer's local commit fails (it "died" before it): A
 * replays. */
static void commit_and_apply(struct fixture *f, const char *sql, bool veto)
{
    int rc;

    f->veto = veto;
    rc = write_sql(f, sql);
    if (veto) {
        assert_int_equal(rc, SQLITE_CONSTRAINT);
    } else if (rc != SQLITE_OK) {
        fail_msg("%s: %s", sql, sqlite3_errmsg(f->w));
    }
    if (f->taken == NULL) {
        fail_msg("no changeset taken (%d: %s)", f->take_rc, f->take_msg);
    }
    assert_true(sql_changeset_is(f->taken->data, f->taken->len));
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_equal_replicas(f);
}

/* Rows in autocommit statements: landed on A, replayed on B. */
static void test_rows_landed(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT UNIQUE, c)");
    both(f, "INSERT INTO t VALUES(1, 'one', 1.5), (2, 'two', x'00ff')");
    commit_and_apply(f, "INSERT INTO t(b, c) VALUES('three', NULL)", false);
    commit_and_apply(f, "UPDATE t SET c = 'x' || a WHERE a < 3", false);
    commit_and_apply(f, "DELETE FROM t WHERE a = 1", false);
    commit_and_apply(f, "UPDATE t SET a = 10 WHERE a = 2", false);
    assert_query(f->b.path, "SELECT b || c FROM t WHERE a = 10", "twox2");
}

/* The same with the writer's local commit vetoed: A replays, as B. */
static void test_rows_not_landed(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT UNIQUE, c)");
    both(f, "INSERT INTO t VALUES(1, 'one', 1.5), (2, 'two', x'00ff')");
    commit_and_apply(f, "INSERT INTO t(b, c) VALUES('three', NULL)", true);
    commit_and_apply(f, "UPDATE t SET c = 'x' || a WHERE a < 3", true);
    commit_and_apply(f, "DELETE FROM t WHERE a = 1", true);
    assert_query(f->a.path,
                 "SELECT group_concat(b) FROM (SELECT b FROM t ORDER BY a)",
                 "two,three");
}

/* A REAL column holding whole numbers: SQLite stores 1.0 as the integer
 * 1 on disk, and the writer's row image (sqlite3_preupdate_new/old)
 * carries that integer, while a read of the column gives 1.0. A user's
 * second plain INSERT into such a table found the first "neither as
 * before nor as after it" and the replica diverged. Landed and replayed,
 * as key and as value, in a rowid table and one WITHOUT ROWID. */
static void test_real_column_whole_numbers(void **state)
{
    struct fixture *f = *state;

    both(f,
         "CREATE TABLE t(id INTEGER PRIMARY KEY, v REAL, d DOUBLE, "
         "f FLOAT NOT NULL DEFAULT 0)");
    both(f, "CREATE TABLE k(x REAL PRIMARY KEY, y REAL) WITHOUT ROWID");
    commit_and_apply(f, "INSERT INTO t VALUES(1, 1, 2.0, 3)", false);
    commit_and_apply(f, "INSERT INTO t VALUES(2, 2, -7, 1e3)", false);
    commit_and_apply(f, "UPDATE t SET v = 5 WHERE id = 1", false);
    commit_and_apply(f, "UPDATE t SET v = v + 1.5, d = 4 WHERE id = 2", true);
    commit_and_apply(f, "INSERT INTO k VALUES(1, 2), (2.5, 3)", false);
    commit_and_apply(f, "UPDATE k SET y = 9 WHERE x = 1", false);
    commit_and_apply(f, "UPDATE k SET x = 4 WHERE x = 1", true);
    commit_and_apply(f, "DELETE FROM t WHERE id = 1", false);
    commit_and_apply(f, "DELETE FROM k WHERE x = 4", false);
    assert_query(f->b.path,
                 "SELECT group_concat(quote(v) || '/' || quote(d) || '/' || "
                 "quote(f)) FROM t",
                 "3.5/4.0/1000.0");
    assert_query(f->b.path,
                 "SELECT group_concat(quote(x) || '/' || quote(y)) "
                 "FROM k",
                 "2.5/3.0");
}

/* An explicit transaction with reads, a failing statement and a savepoint
 * rolled back: only what the transaction kept travels. */
static void test_transaction(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT UNIQUE)");
    both(f, "INSERT INTO t VALUES(1, 'one')");
    write_sql(f, "BEGIN");
    write_sql(f, "INSERT INTO t VALUES(2, 'two')");
    assert_int_equal(write_sql(f, "INSERT INTO t VALUES(3, 'x'), (4, 'one')"),
                     SQLITE_CONSTRAINT);
    write_sql(f,
              "SAVEPOINT s; INSERT INTO t VALUES(5, 'five'); "
              "ROLLBACK TO s; RELEASE s");
    commit_and_apply(f, "UPDATE t SET b = upper(b); COMMIT", false);
    assert_query(f->b.path, "SELECT group_concat(a || b) FROM t", "1ONE,2TWO");
}

/* Trigger rows and foreign-key actions were captured as rows: the replay
 * fires neither again. */
static void test_triggers_and_cascades_fire_once(void **state)
{
    struct fixture *f = *state;

    both(f, "PRAGMA foreign_keys = ON");
    both(f, "CREATE TABLE p(id INTEGER PRIMARY KEY)");
    both(f,
         "CREATE TABLE c(id INTEGER PRIMARY KEY, "
         "pid REFERENCES p ON DELETE CASCADE)");
    both(f, "CREATE TABLE log(x)");
    both(f,
         "CREATE TRIGGER tr AFTER INSERT ON p BEGIN "
         "INSERT INTO log VALUES(new.id); END");
    both(f, "INSERT INTO p VALUES(1); INSERT INTO c VALUES(10, 1), (11, 1)");
    write_sql(f, "PRAGMA foreign_keys = ON");
    commit_and_apply(f, "INSERT INTO p VALUES(2)", false);
    commit_and_apply(f, "DELETE FROM p WHERE id = 1", true);
    assert_query(f->b.path, "SELECT count(*) FROM log", "2");
    assert_query(f->b.path, "SELECT count(*) FROM c", "0");
}

/* AUTOINCREMENT counters agree though sqlite_sequence fires nothing; a
 * table without a declared key and a WITHOUT ROWID table replay by rowid
 * and by key. */
static void test_identity(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE s(id INTEGER PRIMARY KEY AUTOINCREMENT, v)");
    both(f, "CREATE TABLE n(v)");
    both(f,
         "CREATE TABLE w(k1 TEXT, k2 INT, v, PRIMARY KEY(k2, k1)) "
         "WITHOUT ROWID");
    commit_and_apply(f,
                     "BEGIN; INSERT INTO s(v) VALUES('a'), ('b'); "
                     "DELETE FROM s WHERE v = 'b'; INSERT INTO n VALUES(1), "
                     "(2), (1); DELETE FROM n WHERE rowid = 2; "
                     "INSERT INTO w VALUES('x', 1, 'v1'), ('y', 1, 'v2'); "
                     "COMMIT",
                     false);
    commit_and_apply(f,
                     "BEGIN; UPDATE w SET v = 'new', k2 = 2 WHERE k1 = 'x'; "
                     "UPDATE n SET v = 9 WHERE rowid = 3; DELETE FROM w WHERE "
                     "k1 = 'y'; INSERT INTO s(v) VALUES('c'); COMMIT",
                     true);
    assert_query(f->b.path, "SELECT seq FROM sqlite_sequence", "3");
    assert_query(f->b.path, "SELECT group_concat(rowid || ':' || v) FROM n",
                 "1:1,3:9");
}

/* Autocommit schema statements travel as text, landed or replayed. */
static void test_schema(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    commit_and_apply(f, "CREATE TABLE u(x TEXT PRIMARY KEY, y) WITHOUT ROWID",
                     false);
    commit_and_apply(f, "INSERT INTO u VALUES('k', 1)", false);
    commit_and_apply(f, "ALTER TABLE t ADD COLUMN c DEFAULT 7", false);
    commit_and_apply(f, "INSERT INTO t(b) VALUES('b')", false);
    commit_and_apply(f, "CREATE INDEX t_b ON t(b)", true);
    commit_and_apply(f, "CREATE TABLE v(z)", true);
    commit_and_apply(f, "INSERT INTO v VALUES(1)", true);
    commit_and_apply(f, "DROP TABLE u", false);
    commit_and_apply(f, "UPDATE t SET c = 8", true);
    assert_query(f->b.path,
                 "SELECT group_concat(name) FROM (SELECT name "
                 "FROM sqlite_schema WHERE tbl_name NOT LIKE "
                 "'raftsql%' ORDER BY name)",
                 "t,t_b,v");
    assert_query(f->b.path, "SELECT b || c FROM t", "b8");
}

/* The tables a changeset replays are learnt once and kept while the
 * schema stays the same: a schema change between two changesets (here a
 * request's, on the apply connection itself, then a foreign one's) makes
 * the next changeset learn the table again, its new column included. */
static void test_tables_learnt_again_after_a_schema_change(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    commit_and_apply(f, "INSERT INTO t VALUES(1, 'one')", false);
    commit_and_apply(f, "INSERT INTO t VALUES(2, 'two')", true);
    both(f, "ALTER TABLE t ADD COLUMN c");
    /* (The writer reads the new schema before it prepares against it.) */
    assert_int_equal(sqlite3_exec(f->w, "SELECT 1 FROM t", NULL, NULL, NULL),
                     SQLITE_OK);
    commit_and_apply(f, "INSERT INTO t VALUES(3, 'three', 3)", false);
    commit_and_apply(f, "UPDATE t SET c = a * 10 WHERE a < 3", true);
    both(f, "ALTER TABLE t RENAME COLUMN b TO bb");
    assert_int_equal(sqlite3_exec(f->w, "SELECT 1 FROM t", NULL, NULL, NULL),
                     SQLITE_OK);
    commit_and_apply(f, "UPDATE t SET bb = upper(bb) WHERE a = 2", true);
    commit_and_apply(f, "INSERT INTO t(a, bb) VALUES(4, 'four')", false);
    assert_query(f->b.path,
                 "SELECT group_concat(a || bb || c, ',') FROM "
                 "(SELECT * FROM t ORDER BY a)",
                 "1one10,2TWO20,3three3");
}

/* A row stored before ALTER TABLE ADD COLUMN with a DEFAULT holds no
 * value for that column: SQLite reads the DEFAULT there, but 3.40's
 * sqlite3_preupdate_old gives the writer NULL, so a plain UPDATE or DELETE
 * of such a row carried NULL in its old row, and every replica the
 * writer's commit had not landed on took itself for diverged (neither
 * before nor after) and was repaired. */
static void test_old_row_before_add_column_default(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    both(f,
         "INSERT INTO t VALUES(1, 'one'), (2, 'two'), (3, 'three'), "
         "(4, 'four')");
    both(f, "ALTER TABLE t ADD COLUMN c DEFAULT 7");
    both(f, "ALTER TABLE t ADD COLUMN d DEFAULT 'x'");
    both(f, "UPDATE t SET b = 'uno' WHERE a = 1");
    assert_equal_replicas(f);
    /* (The writer reads the new schema before it prepares against it.) */
    assert_int_equal(sqlite3_exec(f->w, "SELECT 1 FROM t", NULL, NULL, NULL),
                     SQLITE_OK);
    commit_and_apply(f, "UPDATE t SET b = 'dos' WHERE a = 2", true);
    commit_and_apply(f, "UPDATE t SET b = 'tres' WHERE a = 3", false);
    commit_and_apply(f, "DELETE FROM t WHERE a = 4", true);
    commit_and_apply(f, "UPDATE t SET c = NULL WHERE a = 3", false);
    assert_query(f->b.path,
                 "SELECT group_concat(a || b || ifnull(c, '-') || d, ',') "
                 "FROM (SELECT * FROM t ORDER BY a)",
                 "1uno7x,2dos7x,3tres-x");
}

/* A schema statement the writer prepared before another connection
 * changed the schema meets SQLITE_SCHEMA: SQLite rolls its first run back
 * and runs it again untraced. It is sent all the same. */
static void test_schema_after_a_schema_change(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    assert_int_equal(write_sql(f, "SELECT count(*) FROM t"), SQLITE_OK);
    both(f, "CREATE TABLE other(x)");
    commit_and_apply(f, "CREATE TABLE u(x)", false);
    both(f, "CREATE TABLE other2(x)");
    commit_and_apply(f, "CREATE INDEX t_b ON t(b)", true);
    assert_query(f->b.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name IN ('u', "
                 "'t_b')",
                 "2");
}

/* Schema-only changesets in one batch on a replica that did not write
 * them: the first one moves the schema cookie, and the next one is still
 * replayed, not taken for its writer's own commit (before: dropped). */
static void test_schema_changesets_in_one_batch(void **state)
{
    struct fixture *f = *state;
    struct buf *cs[3];
    struct sql_fsm_entry e[3];
    struct sql_result res[3];
    static const char *const ddl[] = {"CREATE TABLE s0(a)",
                                      "CREATE TABLE s1(a)",
                                      "CREATE VIEW s2 AS SELECT 1"};

    f->veto = true; /* A stays as B: the writer's commits never land */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(write_sql(f, ddl[i]), SQLITE_CONSTRAINT);
        assert_non_null(f->taken);
        cs[i] = f->taken;
        f->taken = NULL;
    }
    for (int i = 0; i < 3; i++) {
        e[i].index = sql_fsm_applied(f->fb) + 1 + (uint64_t)i;
        e[i].term = 1;
        entry_set_payload(&e[i], cs[i]);
    }
    assert_int_equal(sql_fsm_apply(f->fb, e, 3, res), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].rc, SQLITE_OK);
        sql_result_clear(&res[i]);
        e[i].index = sql_fsm_applied(f->fa) + 1 + (uint64_t)i;
    }
    assert_int_equal(sql_fsm_apply(f->fa, e, 3, res), 0);
    for (int i = 0; i < 3; i++) {
        sql_result_clear(&res[i]);
        buf_free(cs[i]);
    }
    assert_query(f->b.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name IN ('s0', "
                 "'s1', 's2')",
                 "3");
    assert_equal_replicas(f);
}

/* Schema statements inside BEGIN...COMMIT travel in their place among
 * the rows (SQL_CHANGE_SCHEMA_IN_TXN), landed or replayed. Before: the
 * capture refused the transaction (no changeset taken). */
static void test_schema_in_transaction(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE old(a INTEGER PRIMARY KEY, b)");
    both(f, "INSERT INTO old VALUES(1, 'x'), (2, 'y')");
    commit_and_apply(f,
                     "BEGIN; CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT); "
                     "INSERT INTO t VALUES(1, 'one'), (2, 'two'); "
                     "CREATE INDEX t_b ON t(b); UPDATE old SET b = 'z'; "
                     "COMMIT",
                     false);
    commit_and_apply(f,
                     "BEGIN; CREATE TABLE u(k TEXT PRIMARY KEY, v) WITHOUT "
                     "ROWID; INSERT INTO u VALUES('k', 1); COMMIT",
                     true);
    /* ALTER TABLE: a column added, a column and a table renamed. */
    commit_and_apply(f,
                     "BEGIN; ALTER TABLE t ADD COLUMN c DEFAULT 7; "
                     "UPDATE t SET c = c + a; ALTER TABLE t RENAME COLUMN b "
                     "TO bb; ALTER TABLE u RENAME TO u2; INSERT INTO u2 "
                     "VALUES('k2', 2); COMMIT",
                     false);
    commit_and_apply(f,
                     "BEGIN; ALTER TABLE old ADD COLUMN d; UPDATE old SET d = "
                     "b || a; ALTER TABLE old RENAME TO older; COMMIT",
                     true);
    /* DROP TABLE, with rows before and after it. */
    commit_and_apply(f,
                     "BEGIN; DELETE FROM t WHERE a = 1; DROP TABLE u2; "
                     "INSERT INTO t(bb) VALUES('three'); COMMIT",
                     false);
    commit_and_apply(f,
                     "BEGIN; DROP TABLE older; CREATE TABLE older(z); "
                     "INSERT INTO older VALUES('new'); COMMIT",
                     true);
    assert_query(f->b.path,
                 "SELECT group_concat(name) FROM (SELECT name FROM "
                 "sqlite_schema WHERE name NOT LIKE 'raftsql%' AND name NOT "
                 "LIKE 'sqlite%' ORDER BY name)",
                 "older,t,t_b");
    assert_query(f->b.path, "SELECT group_concat(a || bb || c) FROM t",
                 "2two9,3three7");
    assert_query(f->a.path, "SELECT z FROM older", "new");
}

/* A schema statement that fails inside a transaction, whose error the
 * host ignores before it commits: SQLite shows the capture nothing, the
 * replay fails the same way on the state the writer had and skips it.
 * The replicas end equal, landed (the writer's file) or replayed. */
static void test_schema_failing_in_transaction(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    both(f, "INSERT INTO t VALUES(1, 'dup'), (2, 'dup')");
    for (int veto = 0; veto < 2; veto++) {
        assert_int_equal(write_sql(f, "BEGIN; INSERT INTO t(b) VALUES('n')"),
                         SQLITE_OK);
        assert_int_equal(write_sql(f, "CREATE UNIQUE INDEX t_u ON t(b)"),
                         SQLITE_CONSTRAINT);
        assert_int_equal(write_sql(f, "ALTER TABLE t ADD COLUMN nn NOT NULL"),
                         SQLITE_ERROR);
        commit_and_apply(f, "UPDATE t SET b = b || a WHERE a = 1; COMMIT",
                         veto != 0);
    }
    /* A transaction of only a failing schema statement and rows after
     * it; and one with a failing and a succeeding one. */
    assert_int_equal(write_sql(f, "BEGIN"), SQLITE_OK);
    assert_int_equal(write_sql(f, "CREATE UNIQUE INDEX t_u ON t(b)"),
                     SQLITE_CONSTRAINT);
    commit_and_apply(f, "INSERT INTO t(b) VALUES('after'); COMMIT", false);
    assert_int_equal(write_sql(f, "BEGIN; CREATE INDEX t_b ON t(b)"),
                     SQLITE_OK);
    assert_int_equal(write_sql(f, "CREATE UNIQUE INDEX t_u ON t(b)"),
                     SQLITE_CONSTRAINT);
    commit_and_apply(f, "DELETE FROM t WHERE a = 2; COMMIT", false);
    assert_query(f->b.path,
                 "SELECT group_concat(name) FROM (SELECT name FROM "
                 "sqlite_schema WHERE type = 'index' AND tbl_name = 't' "
                 "ORDER BY name)",
                 "t_b");
    assert_query(f->b.path, "SELECT count(*) FROM pragma_table_info('t')", "2");
}

/* A failing schema statement whose replay changed rows of another table
 * before it failed (the implicit DELETE of a DROP TABLE with foreign keys
 * on cascades to c, then a row of g that references c stops it): the
 * rows come back, and so does the running checksum (the tables the hook
 * saw are rescanned), which a full scan confirms. */
static void test_schema_failing_after_rows(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE p(id INTEGER PRIMARY KEY, v)");
    both(f,
         "CREATE TABLE c(id INTEGER PRIMARY KEY, pid REFERENCES p(id) ON "
         "DELETE CASCADE)");
    both(f, "CREATE TABLE g(id INTEGER PRIMARY KEY, cid REFERENCES c(id))");
    both(f,
         "INSERT INTO p VALUES(1, 'a'), (2, 'b'); INSERT INTO c "
         "VALUES(10, 1), (11, 2); INSERT INTO g VALUES(100, 11)");
    assert_int_equal(write_sql(f, "PRAGMA foreign_keys = ON"), SQLITE_OK);
    for (int veto = 0; veto < 2; veto++) {
        assert_int_equal(write_sql(f, "BEGIN; UPDATE p SET v = v || 'x'"),
                         SQLITE_OK);
        assert_int_equal(write_sql(f, "DROP TABLE p"), SQLITE_CONSTRAINT);
        commit_and_apply(f, "INSERT INTO p VALUES(3 + 0, 'c'); COMMIT",
                         veto != 0);
        commit_and_apply(f, "DELETE FROM p WHERE id = 3", false);
    }
    assert_query(f->b.path, "SELECT group_concat(v) FROM p", "axx,bxx");
    assert_query(f->b.path, "SELECT count(*) FROM c", "2");
    assert_equal_replicas(f);
}

/* Django's table remake inside one transaction, with foreign keys off
 * outside it as Django turns them off (the replicas have them on) and
 * PRAGMA foreign_key_check inside: the replay runs each schema
 * statement under the writer's settings, so the DROP TABLE of a parent
 * with children neither fails nor cascades there. */
static void test_schema_django_remake(void **state)
{
    struct fixture *f = *state;

    both(f, "PRAGMA foreign_keys = ON");
    both(f, "CREATE TABLE x(id INTEGER PRIMARY KEY, name TEXT NOT NULL)");
    both(f,
         "CREATE TABLE child(id INTEGER PRIMARY KEY, x_id INTEGER "
         "REFERENCES x(id) ON DELETE CASCADE)");
    both(f, "INSERT INTO x VALUES(1, 'a'), (2, 'b')");
    both(f, "INSERT INTO child VALUES(10, 1), (11, 2)");
    for (int veto = 0; veto < 2; veto++) {
        assert_int_equal(write_sql(f, "PRAGMA foreign_keys = OFF"), SQLITE_OK);
        commit_and_apply(
            f,
            "BEGIN; CREATE TABLE new__x(id INTEGER PRIMARY KEY, name "
            "TEXT NOT NULL, extra INTEGER NOT NULL DEFAULT 0); "
            "INSERT INTO new__x(id, name, extra) SELECT id, name, 0 FROM "
            "x; DROP TABLE x; ALTER TABLE new__x RENAME TO x; "
            "CREATE INDEX x_name ON x(name); PRAGMA foreign_key_check; "
            "COMMIT",
            veto != 0);
        assert_int_equal(write_sql(f, "PRAGMA foreign_keys = ON"), SQLITE_OK);
        commit_and_apply(f, "DROP INDEX x_name", false);
    }
    assert_query(f->b.path, "SELECT count(*) FROM child", "2");
    assert_query(f->b.path, "SELECT group_concat(id || name || extra) FROM x",
                 "1a0,2b0");
    assert_query(f->b.path,
                 "SELECT \"table\" FROM pragma_foreign_key_list('child')", "x");
}

static void host_function(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    sqlite3_result_value(ctx, argv[0]);
}

/* A schema statement that fails on the replay for a reason of the
 * replica's (a function only the writer's connection has) is no failure
 * of the writer's: a divergence, said so, and the batch applies
 * nothing. */
static void test_schema_in_transaction_replica_lacks(void **state)
{
    struct fixture *f = *state;
    uint64_t applied;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    assert_int_equal(sqlite3_create_function(f->w, "host_only", 1,
                                             SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                             NULL, host_function, NULL, NULL),
                     SQLITE_OK);
    f->veto = true;
    assert_int_equal(write_sql(f,
                               "BEGIN; INSERT INTO t VALUES(1, 2); CREATE "
                               "INDEX ti ON t(host_only(b)); COMMIT"),
                     SQLITE_CONSTRAINT);
    assert_non_null(f->taken);
    applied = sql_fsm_applied(f->fb);
    assert_int_equal(apply_one(f->fb, f->taken), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fb), "depends on this replica"));
    assert_non_null(strstr(sql_fsm_errmsg(f->fb), "no such function"));
    assert_int_equal(sql_fsm_applied(f->fb), applied);
}

/* Generated columns: a STORED one is in the row image but never written,
 * a VIRTUAL one is not in it. */
static void test_generated_columns(void **state)
{
    struct fixture *f = *state;

    both(f,
         "CREATE TABLE g(a INTEGER PRIMARY KEY, v AS (b * 2) VIRTUAL, "
         "b, s AS (b + 1) STORED, c)");
    commit_and_apply(f, "INSERT INTO g(b, c) VALUES(1, 'x'), (2, 'y')", false);
    commit_and_apply(f, "UPDATE g SET b = 10 WHERE a = 1", true);
    commit_and_apply(f, "DELETE FROM g WHERE a = 2", false);
    assert_query(f->b.path, "SELECT v || ',' || s || ',' || c FROM g",
                 "20,11,x");
}

/* Virtual tables (R*Tree, FTS5): their modules' writes to their shadow
 * tables travel as rows and are checked and replayed on the apply
 * connection, which is DEFENSIVE (SQLite refuses shadow-table writes
 * there at prepare time): landed and not. */
static void test_virtual_tables(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE VIRTUAL TABLE rt USING rtree(id, x0, x1, y0, y1)");
    both(f, "CREATE VIRTUAL TABLE ft USING fts5(title, body)");
    commit_and_apply(f, "INSERT INTO rt VALUES(1, 0, 10, 0, 10)", false);
    commit_and_apply(f, "INSERT INTO rt VALUES(2, 5, 6, 20, 30)", true);
    commit_and_apply(f, "INSERT INTO ft VALUES('one', 'hello raft')", false);
    commit_and_apply(f, "INSERT INTO ft VALUES('two', 'log entry')", true);
    commit_and_apply(f, "DELETE FROM rt WHERE id = 1", false);
    assert_query(f->b.path, "SELECT group_concat(id) FROM rt", "2");
    assert_query(f->b.path, "SELECT title FROM ft WHERE ft MATCH 'entry'",
                 "two");
}

/* An autocommit DROP TABLE on a writer with foreign keys on deletes the
 * children its ON DELETE CASCADE names (rows no hook records): the
 * statement travels with the writer's settings, and every replica ends
 * alike, landed or not. */
static void test_schema_with_writer_settings(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE p(id INTEGER PRIMARY KEY)");
    both(f,
         "CREATE TABLE c(id INTEGER PRIMARY KEY, pid INT REFERENCES "
         "p(id) ON DELETE CASCADE)");
    both(f,
         "INSERT INTO p VALUES(1), (2); INSERT INTO c VALUES(10, 1), "
         "(11, 2)");
    both(f, "CREATE TABLE p2(id INTEGER PRIMARY KEY)");
    both(f,
         "CREATE TABLE c2(id INTEGER PRIMARY KEY, pid INT REFERENCES "
         "p2(id) ON DELETE CASCADE)");
    both(f, "INSERT INTO p2 VALUES(1); INSERT INTO c2 VALUES(10, 1)");
    write_sql(f, "PRAGMA foreign_keys=ON");
    commit_and_apply(f, "DROP TABLE p", false);
    commit_and_apply(f, "DROP TABLE p2", true);
    assert_query(f->b.path, "SELECT count(*) FROM c", "0");
    assert_query(f->a.path, "SELECT count(*) FROM c2", "0");
}

/* A changeset that changes no row's state applies alike, landed or not. */
static void test_no_net_change(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    both(f, "INSERT INTO t VALUES(1, 'x')");
    commit_and_apply(f,
                     "BEGIN; INSERT INTO t VALUES(2, 'y'); DELETE FROM t "
                     "WHERE a = 2; UPDATE t SET b = 'z' WHERE a = 1; "
                     "UPDATE t SET b = 'x' WHERE a = 1; COMMIT",
                     false);
}

/* sqlite_sequence, which no record carries, ends the same on both
 * replicas, landed or not: an INSERT of no row into an AUTOINCREMENT
 * table adds its row of seq 0 on the writer's file (dropped on every
 * replica), a row inserted and deleted in one transaction moves its
 * counter (the writer's node finds its commit landed by that alone), and
 * an empty AUTOINCREMENT table remade as Django does. */
static void test_autoincrement_sequence(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE a(id INTEGER PRIMARY KEY AUTOINCREMENT, v)");
    both(f, "CREATE TABLE m(id INTEGER PRIMARY KEY AUTOINCREMENT, app)");
    for (int veto = 0; veto < 2; veto++) {
        commit_and_apply(f, "INSERT INTO a SELECT * FROM a WHERE 0", veto != 0);
        commit_and_apply(f,
                         "BEGIN; INSERT INTO a(v) VALUES(1); DELETE FROM a; "
                         "COMMIT",
                         veto != 0);
        commit_and_apply(
            f,
            "BEGIN; CREATE TABLE new__a(id INTEGER PRIMARY KEY "
            "AUTOINCREMENT, v, w); INSERT INTO new__a(id, v) SELECT id, v "
            "FROM a; DROP TABLE a; ALTER TABLE new__a RENAME TO a; "
            "INSERT INTO m(app) VALUES('x'); COMMIT",
            veto != 0);
        commit_and_apply(f, "ALTER TABLE a DROP COLUMN w", false);
    }
    assert_query(f->b.path,
                 "SELECT group_concat(name || '=' || seq) FROM "
                 "(SELECT * FROM sqlite_sequence ORDER BY name)",
                 "m=2");
}

/* reopen_a closes A's apply connection and opens a new one (a restarted
 * node), with the checksum on. */
static void reopen_a(struct fixture *f)
{
    char msg[256] = "";

    sql_fsm_close(f->fa);
    if (sql_fsm_open(f->a.path, NULL, 0, &f->fa, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    assert_int_equal(sql_fsm_checksum_enable(f->fa, 1), 0);
}

/* The landed question is answered from the file alone: after the writer
 * committed, a new apply connection (a restarted node) records the entry
 * without replaying it. */
static void test_landed_after_restart(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    f->veto = false;
    assert_int_equal(write_sql(f, "INSERT INTO t VALUES(1, 'x')"), SQLITE_OK);
    assert_non_null(f->taken);
    reopen_a(f);
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_equal_replicas(f);
}

/* A writer's schema change lands, and its node restarts before it
 * records the entry (window 2 of the plain-write crash windows): the
 * stored schema sum is the one before it, and the header's numbers read
 * at the reopen already show it; recording the landed entry computes the
 * schema sum again, so the file's schema is the node's own (else every
 * later start scan took it for a change made while no node ran). */
static void test_landed_schema_after_restart(void **state)
{
    struct fixture *f = *state;
    struct sql_verify v;
    char msg[256];

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    f->veto = false;
    assert_int_equal(write_sql(f, "CREATE INDEX t_b ON t(b)"), SQLITE_OK);
    assert_non_null(f->taken);
    reopen_a(f);
    assert_int_equal(sql_checksum_verify(f->a.path, &v, msg, sizeof msg), 0);
    assert_int_equal(v.schema_available, 1);
    assert_true(v.schema_stored != v.schema_scanned);
    sql_verify_clear(&v);
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_equal_replicas(f);
    assert_int_equal(sql_checksum_verify(f->a.path, &v, msg, sizeof msg), 0);
    assert_int_equal(v.schema_available, 1);
    assert_true(v.schema_stored == v.schema_scanned);
    sql_verify_clear(&v);
}

/* apply_noops applies @n no-op entries (a new leader's first entries)
 * in one batch on @fsm; it must succeed. */
static void apply_noops(struct sql_fsm *fsm, unsigned n)
{
    struct sql_fsm_entry e[4];
    struct sql_result res[4];

    assert_true(n <= 4);
    for (unsigned i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof e[i]);
        e[i].index = sql_fsm_applied(fsm) + 1 + i;
        e[i].term = 2;
        entry_set_payload(&e[i], NULL);
    }
    assert_int_equal(sql_fsm_apply(fsm, e, n, res), 0);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(res[i].rc, SQLITE_OK);
        sql_result_clear(&res[i]);
    }
}

/* A host transaction that read before a batch of no-ops (a leader change
 * in the middle of BEGIN ... SELECT ... UPDATE) writes after it: the
 * batch commits nothing to the file, so the transaction's snapshot is
 * still the latest. Before, raftsql_applied's row alone was committed
 * and the UPDATE failed with SQLITE_BUSY_SNAPSHOT. */
static void test_noops_leave_a_reader_snapshot_current(void **state)
{
    struct fixture *f = *state;
    uint64_t before, durable = 0;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    both(f, "INSERT INTO t VALUES(1, 'x')");
    f->veto = false;
    assert_int_equal(write_sql(f, "BEGIN; SELECT * FROM t"), SQLITE_OK);
    before = sql_fsm_applied(f->fa);
    apply_noops(f->fa, 2);
    apply_noops(f->fb, 2);
    assert_true(sql_fsm_applied(f->fa) == before + 2);
    if (write_sql(f, "UPDATE t SET b = 'y' WHERE a = 1; COMMIT") != SQLITE_OK) {
        fail_msg("UPDATE after the no-ops: %s (%d)", sqlite3_errmsg(f->w),
                 sqlite3_extended_errcode(f->w));
    }
    assert_non_null(f->taken);
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_equal_replicas(f);
    /* Only what raftsql_applied records is durable. */
    apply_noops(f->fa, 1);
    assert_int_equal(sql_fsm_checkpoint(f->fa, SQL_CHECKPOINT_WAIT, &durable),
                     0);
    assert_true(durable == sql_fsm_applied(f->fa) - 1);
    assert_true(sql_fsm_durable(f->fa) == durable);
}

/* A writer commits after its node applied no-ops it did not record
 * (the grant's catch-up), and the node restarts before it records the
 * writer's entry: the file says the index before the no-ops, and the
 * batch of no-ops then the writer's entry takes that entry as landed
 * (only recorded), not as one to replay on top of itself. */
static void test_landed_after_unrecorded_noops_and_a_restart(void **state)
{
    struct fixture *f = *state;
    struct sql_fsm_entry e[3];
    struct sql_result res[3];
    uint64_t recorded;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    recorded = sql_fsm_applied(f->fa);
    apply_noops(f->fa, 2);
    apply_noops(f->fb, 2);
    f->veto = false;
    assert_int_equal(write_sql(f, "INSERT INTO t VALUES(1, 'x')"), SQLITE_OK);
    assert_non_null(f->taken);
    reopen_a(f);
    assert_true(sql_fsm_applied(f->fa) == recorded);
    for (unsigned i = 0; i < 3; i++) {
        memset(&e[i], 0, sizeof e[i]);
        e[i].index = recorded + 1 + i;
        e[i].term = 2;
        entry_set_payload(&e[i], i < 2 ? NULL : f->taken);
    }
    if (sql_fsm_apply(f->fa, e, 3, res) != 0) {
        fail_msg("apply after the restart: %s", sql_fsm_errmsg(f->fa));
    }
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(res[i].rc, SQLITE_OK);
        sql_result_clear(&res[i]);
    }
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_true(sql_fsm_applied(f->fa) == sql_fsm_applied(f->fb));
    assert_equal_replicas(f);
}

/* A changeset that does not fit a replica's state is a divergence: the
 * batch applies nothing. */
static void test_divergence(void **state)
{
    struct fixture *f = *state;
    uint64_t applied;
    struct buf *b;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    both(f, "INSERT INTO t VALUES(1, 'x')");
    f->veto = true;
    assert_int_equal(write_sql(f, "UPDATE t SET b = 'y' WHERE a = 1"),
                     SQLITE_CONSTRAINT);
    assert_non_null(f->taken);
    b = make_request(++f->seq, "DELETE FROM t");
    assert_int_equal(apply_one(f->fb, b), 0);
    buf_free(b);
    applied = sql_fsm_applied(f->fb);
    assert_int_equal(apply_one(f->fb, f->taken), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fb), "does not apply"));
    assert_int_equal(sql_fsm_applied(f->fb), applied);
}

/* header reads the WAL-index header of A's file as the writer's
 * connection sees it (sql_wal_header). */
static void header(struct fixture *f, unsigned char out[SQL_WAL_HDR_LEN])
{
    sqlite3_file *file = NULL;

    assert_int_equal(sqlite3_exec(f->w, "SELECT count(*) FROM sqlite_schema",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(
        sqlite3_file_control(f->w, "main", SQLITE_FCNTL_FILE_POINTER, &file),
        SQLITE_OK);
    assert_int_equal(sql_wal_header(file, out), 0);
}

/* marked_write runs @sql (autocommit, landing) on the writer between two
 * readings of the header, as its wrapped file takes them under the WAL
 * write lock (ext/surface/wal_lock.c), and gives A those readings for
 * the entry. */
static void marked_write(struct fixture *f, const char *sql)
{
    struct sql_wal_marks m;

    f->veto = false;
    header(f, m.locked);
    if (write_sql(f, sql) != SQLITE_OK) {
        fail_msg("%s: %s", sql, sqlite3_errmsg(f->w));
    }
    assert_non_null(f->taken);
    header(f, m.done);
    sql_fsm_writer_marks(f->fa, sql_fsm_applied(f->fa) + 1, &m);
}

/* outside commits @sql to A's file from a connection of its own (a
 * process without raftsql). */
static void outside(struct fixture *f, const char *sql)
{
    outside_exec(f->a.path, sql);
}

/* running_sum returns the running sum of table @name of @fsm. */
static uint64_t *running_sum(struct sql_fsm *fsm, const char *name)
{
    for (unsigned i = 0; i < fsm->ck->n_tables; i++) {
        if (strcmp(fsm->ck->tables[i].name, name) == 0) {
            return &fsm->ck->tables[i].sum;
        }
    }
    fail_msg("no running sum of %s", name);
    return NULL;
}

/* A writer whose readings show its commit alone in the file costs no
 * scan: a running sum made wrong on purpose is not looked at. */
static void test_landed_alone_costs_no_scan(void **state)
{
    struct fixture *f = *state;
    uint64_t *sum;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    both(f, "CREATE TABLE u(a INTEGER PRIMARY KEY, b)");
    both(f, "INSERT INTO u VALUES(1, 'u')");
    marked_write(f, "INSERT INTO t VALUES(1, 'x')");
    sum = running_sum(f->fa, "u");
    *sum += 1;
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    *sum -= 1;
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_equal_replicas(f);
    /* The same without readings: the file is scanned, and the sum seen
     * wrong. */
    f->veto = false;
    assert_int_equal(write_sql(f, "INSERT INTO t VALUES(2, 'y')"), SQLITE_OK);
    *sum += 1;
    assert_int_equal(apply_one(f->fa, f->taken), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fa), "the content of u differs"));
}

/* A commit of a process without raftsql between the writer's and the
 * batch that records its entry is caught, with the writer's readings
 * (the header moved after them) or without (a scan): the batch applies
 * nothing, and the replica stays diverged. */
static void test_foreign_after_landed(void **state)
{
    struct fixture *f = *state;
    uint64_t applied;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    marked_write(f, "INSERT INTO t VALUES(1, 'x')");
    outside(f, "INSERT INTO t VALUES(99, 'foreign')");
    applied = sql_fsm_applied(f->fa);
    assert_int_equal(apply_one(f->fa, f->taken), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fa),
                           "around the local commit of plain write entry"));
    assert_non_null(strstr(sql_fsm_errmsg(f->fa), "the content of t differs"));
    assert_int_equal(sql_fsm_applied(f->fa), applied);
    assert_int_equal(sql_fsm_foreign_check(f->fa), SQL_ERR_DIVERGED);
}

/* The same without readings (the writer died after its local commit,
 * or its lease ended at its deadline). */
static void test_foreign_after_landed_no_marks(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    f->veto = false;
    assert_int_equal(write_sql(f, "INSERT INTO t VALUES(1, 'x')"), SQLITE_OK);
    outside(f, "INSERT INTO t VALUES(99, 'foreign')");
    assert_int_equal(apply_one(f->fa, f->taken), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fa), "the content of t differs"));
}

/* A foreign commit before the writer took the lock shows in its first
 * reading. */
static void test_foreign_before_landed(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    outside(f, "INSERT INTO t VALUES(99, 'foreign')");
    marked_write(f, "INSERT INTO t VALUES(1, 'x')");
    assert_int_equal(apply_one(f->fa, f->taken), SQL_ERR_DIVERGED);
}

/* A foreign schema change (an empty table, which no row sum shows) is
 * caught by the schema cookie when the entry changes no schema. */
static void test_foreign_schema_after_landed(void **state)
{
    struct fixture *f = *state;

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    marked_write(f, "INSERT INTO t VALUES(1, 'x')");
    outside(f, "CREATE TABLE sneaky(a)");
    assert_int_equal(apply_one(f->fa, f->taken), SQL_ERR_DIVERGED);
    assert_non_null(strstr(sql_fsm_errmsg(f->fa), "the schema changed"));
}

/* A TRUNCATE checkpoint by another connection between the writer's
 * commit and the batch moves the header, but the file is the node's
 * own: recorded, with a note saying so. A landed schema change with
 * nobody else in the file, readings or none, is no foreign write
 * either. */
static void test_checkpoint_after_landed_is_not_foreign(void **state)
{
    struct fixture *f = *state;
    char note[600];

    both(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    marked_write(f, "INSERT INTO t VALUES(1, 'x')");
    outside(f, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_int_equal(sql_fsm_foreign_note(f->fa, note, sizeof note), 1);
    assert_non_null(strstr(note, "no foreign write"));
    marked_write(f, "CREATE TABLE v(a)");
    outside(f, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    f->veto = false;
    assert_int_equal(write_sql(f, "CREATE INDEX ti ON t(b)"), SQLITE_OK);
    assert_int_equal(apply_one(f->fa, f->taken), 0);
    assert_int_equal(apply_one(f->fb, f->taken), 0);
    assert_int_equal(sql_fsm_foreign_check(f->fa), 0);
    assert_equal_replicas(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rows_landed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_not_landed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_real_column_whole_numbers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_triggers_and_cascades_fire_once,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(test_old_row_before_add_column_default,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_tables_learnt_again_after_a_schema_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_virtual_tables, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_with_writer_settings, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_generated_columns, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_schema_in_transaction, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_schema_failing_in_transaction,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_django_remake, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_schema_failing_after_rows, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_schema_in_transaction_replica_lacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_after_a_schema_change,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_changesets_in_one_batch,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_net_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_autoincrement_sequence, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_landed_schema_after_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_landed_after_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_divergence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_landed_alone_costs_no_scan, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_foreign_after_landed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_foreign_after_landed_no_marks,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_before_landed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_foreign_schema_after_landed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_checkpoint_after_landed_is_not_foreign, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_noops_leave_a_reader_snapshot_current, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_landed_after_unrecorded_noops_and_a_restart, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
