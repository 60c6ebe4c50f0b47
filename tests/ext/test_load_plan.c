/* Tests of ext/surface/load_plan.c, raft_load_sql's plan: statement splitting
 * (quotes, comments, triggers, an open last statement), the script's
 * transaction control left out, the refusals naming their line, chunking
 * by bytes and by count (a PRAGMA alone), request ids chained over the
 * chunks, a sqlite3 .dump script, a replica's dump (raftsql_* left
 * out), a dump's virtual tables (sent as CREATE VIRTUAL TABLE, their
 * shadow tables checked only); and of ext/surface/load_check.c's check of a
 * script: what raft_exec's policy refuses is refused there in
 * raft_exec's words, naming its line, but not in what the plan leaves
 * out or checks only. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ext/surface/load_check.h"
#include "ext/surface/load_plan.h"
#include "raft/err.h"

/* plan_ok plans @text, which must be valid, with the bounds given. */
static struct ext_load_plan plan_ok(const char *text, size_t chunk_bytes,
                                    unsigned chunk_stmts)
{
    struct ext_load_plan p;
    char err[256] = "";
    if (load_plan_make(text, strlen(text), chunk_bytes, chunk_stmts, &p, err,
                       sizeof err) != 0) {
        fail_msg("'%s': %s", text, err);
    }
    return p;
}

/* plan_bad checks that @text (@len bytes, 0 for its strlen) is refused
 * with a message holding @why. */
static void plan_bad(const char *text, size_t len, const char *why)
{
    struct ext_load_plan p;
    char err[256] = "";
    len = len != 0 ? len : strlen(text);
    if (load_plan_make(text, len, 1000, 10, &p, err, sizeof err) == 0) {
        load_plan_free(&p);
        fail_msg("'%s' was planned, not refused (%s)", text, why);
    }
    if (err[0] == '\0' || strstr(err, why) == NULL) {
        fail_msg("'%s' refused with '%s', not '%s'", text, err, why);
    }
}

/* stmt_is checks that statement @i of @p is @want, starting at @line. */
static void stmt_is(const struct ext_load_plan *p, const char *text, unsigned i,
                    const char *want, unsigned line)
{
    const struct ext_load_stmt *s = &p->stmts[i];
    assert_true(i < p->n_stmts);
    if (s->len != strlen(want) || memcmp(text + s->offset, want, s->len)) {
        fail_msg("statement %u is '%.*s', not '%s'", i, (int)s->len,
                 text + s->offset, want);
    }
    assert_int_equal(s->line, line);
}

/* Semicolons inside quotes of every kind and comments end nothing;
 * statements keep their first line. */
static void test_split_quotes_and_comments(void **state)
{
    const char *text =
        "CREATE TABLE t(x);\n"
        "INSERT INTO t VALUES('a;b''c;');\n"
        "-- a comment; with semicolons;\n"
        "/* block; */ INSERT INTO \"t;\" VALUES([x;], `y;`);\n"
        "  \n"
        "SELECT 1; -- trailing; comment\n";
    struct ext_load_plan p = plan_ok(text, 1 << 20, 100);
    (void)state;
    assert_int_equal(p.n_stmts, 4);
    stmt_is(&p, text, 0, "CREATE TABLE t(x);", 1);
    stmt_is(&p, text, 1, "INSERT INTO t VALUES('a;b''c;');", 2);
    stmt_is(&p, text, 2, "INSERT INTO \"t;\" VALUES([x;], `y;`);", 4);
    stmt_is(&p, text, 3, "SELECT 1;", 6);
    assert_int_equal(p.n_skipped, 0);
    load_plan_free(&p);
}

/* A trigger's body, with its inner semicolons, stays one statement. */
static void test_split_trigger(void **state)
{
    const char *text =
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN\n"
        "  INSERT INTO u VALUES(1);\n"
        "  UPDATE u SET x = 'END;';\n"
        "END;\n"
        "INSERT INTO t VALUES(2);";
    struct ext_load_plan p = plan_ok(text, 1 << 20, 100);
    (void)state;
    assert_int_equal(p.n_stmts, 2);
    stmt_is(&p, text, 1, "INSERT INTO t VALUES(2);", 5);
    assert_int_equal(p.stmts[0].line, 1);
    assert_memory_equal(text + p.stmts[0].offset + p.stmts[0].len - 4, "END;",
                        4);
    load_plan_free(&p);
}

/* BEGIN, COMMIT and END of the script are left out and counted; a
 * statement whose text only starts alike is kept. */
static void test_transaction_control_left_out(void **state)
{
    const char *text =
        "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n"
        "INSERT INTO t VALUES(1);\nCOMMIT;\nbegin;\n"
        "INSERT INTO t VALUES(2);\nend transaction;\n"
        "INSERT INTO beginnings VALUES(3);\n";
    struct ext_load_plan p = plan_ok(text, 1 << 20, 100);
    (void)state;
    assert_int_equal(p.n_skipped, 4);
    assert_int_equal(p.n_stmts, 4);
    stmt_is(&p, text, 1, "INSERT INTO t VALUES(1);", 3);
    stmt_is(&p, text, 3, "INSERT INTO beginnings VALUES(3);", 8);
    load_plan_free(&p);
}

/* A last statement without ';' is taken, and its chunk closes it. */
static void test_open_last_statement(void **state)
{
    const char *text = "INSERT INTO t VALUES(1);\nINSERT INTO t VALUES(2) -- x";
    struct ext_load_plan p = plan_ok(text, 1 << 20, 100);
    char *sql;
    (void)state;
    assert_int_equal(p.n_stmts, 2);
    assert_true(p.stmts[1].open_end);
    sql = load_plan_chunk_sql(&p, text, 0);
    assert_non_null(sql);
    assert_string_equal(sql,
                        "INSERT INTO t VALUES(1);\n"
                        "INSERT INTO t VALUES(2) -- x\n;");
    assert_int_equal(strlen(sql), p.chunks[0].bytes);
    free(sql);
    load_plan_free(&p);
}

/* What cannot be loaded is refused, naming the line. */
static void test_refusals(void **state)
{
    static const char nul[] = "SELECT 1;\nSELECT '\0';";
    (void)state;
    plan_bad("SELECT 1;\nINSERT INTO t VALUES('open);\n", 0,
             "line 2: the last statement is incomplete");
    plan_bad("SELECT 1;\nSELECT 2 /* open comment", 0, "line 2: the last");
    plan_bad("INSERT INTO t VALUES(1);\nSAVEPOINT a;\n", 0,
             "line 2: SAVEPOINT");
    plan_bad("\n\nrollback;", 0, "line 3: rollback");
    plan_bad(nul, sizeof nul - 1, "line 2: a NUL byte");
    plan_bad("  -- nothing\n;;", 0, "no statement to load");
    plan_bad("BEGIN; COMMIT;", 0, "only transaction control");
}

/* Chunks are bounded by bytes (their SQL, newlines included) and by
 * count; a statement above the bound is a chunk of its own; each chunk's
 * SQL is its statements joined by newlines. */
static void test_chunking(void **state)
{
    /* Ten statements of 10 bytes each. */
    const char *text =
        "SELECT 10;SELECT 11;SELECT 12;SELECT 13;SELECT 14;"
        "SELECT 15;SELECT 16;SELECT 17;SELECT 18;SELECT 19;";
    struct ext_load_plan p = plan_ok(text, 32, 100);
    char *sql;
    (void)state;
    assert_int_equal(p.n_stmts, 10);
    assert_int_equal(p.n_chunks, 4); /* 3 + 3 + 3 + 1 */
    assert_int_equal(p.chunks[0].n, 3);
    assert_int_equal(p.chunks[0].bytes, 32);
    assert_int_equal(p.chunks[3].first, 9);
    sql = load_plan_chunk_sql(&p, text, 1);
    assert_string_equal(sql, "SELECT 13;\nSELECT 14;\nSELECT 15;");
    free(sql);
    load_plan_free(&p);

    p = plan_ok(text, 1 << 20, 4);
    assert_int_equal(p.n_chunks, 3); /* 4 + 4 + 2 */
    assert_int_equal(p.chunks[2].n, 2);
    load_plan_free(&p);

    p = plan_ok("SELECT 1;SELECT 'a long statement';SELECT 2;", 12, 100);
    assert_int_equal(p.n_chunks, 3);
    assert_int_equal(p.chunks[1].n, 1);
    assert_int_equal(p.chunks[1].bytes, strlen("SELECT 'a long statement';"));
    load_plan_free(&p);
}

/* id_of returns chunk @k's request id of @p (a static buffer per @slot). */
static const char *id_of(const struct ext_load_plan *p, unsigned k,
                         unsigned slot)
{
    static char ids[4][EXT_LOAD_ID_MAX];
    load_plan_request_id(p, k, ids[slot]);
    return ids[slot];
}

/* Ids chain over the chunks: chunk k's id is the same in two scripts
 * exactly when chunks 0 to k hold the same text, whatever follows and
 * whatever the bounds that made them; it names its number. */
static void test_request_ids(void **state)
{
    /* Chunks of two statements: (1 2) (3 4) (5). */
    const char *a =
        "INSERT INTO t VALUES(1);INSERT INTO t VALUES(2);"
        "INSERT INTO t VALUES(3);INSERT INTO t VALUES(4);"
        "INSERT INTO t VALUES(5);";
    /* Chunk 1 changed. */
    const char *b =
        "INSERT INTO t VALUES(1);INSERT INTO t VALUES(2);"
        "INSERT INTO t VALUES(3);INSERT INTO t VALUES(9);"
        "INSERT INTO t VALUES(5);";
    /* Chunk 2 changed, and comments and blanks between statements. */
    const char *c =
        "-- a dump\nINSERT INTO t VALUES(1);INSERT INTO t "
        "VALUES(2);\n\nINSERT INTO t VALUES(3);INSERT INTO t "
        "VALUES(4);INSERT INTO t VALUES(6);";
    struct ext_load_plan pa = plan_ok(a, 1 << 20, 2),
                         pa2 = plan_ok(a, 1 << 20, 2);
    struct ext_load_plan pb = plan_ok(b, 1 << 20, 2),
                         pc = plan_ok(c, 1 << 20, 2);
    struct ext_load_plan pone = plan_ok(a, 1 << 20, 1);
    struct ext_load_plan pbig = plan_ok(a, 49, 100);
    (void)state;
    assert_int_equal(pa.n_chunks, 3);
    for (unsigned k = 0; k < 3; k++) {
        assert_string_equal(id_of(&pa, k, 0), id_of(&pa2, k, 1));
    }
    assert_string_equal(id_of(&pa, 0, 0), id_of(&pb, 0, 1));
    assert_string_not_equal(id_of(&pa, 1, 0), id_of(&pb, 1, 1));
    assert_string_not_equal(id_of(&pa, 2, 0), id_of(&pb, 2, 1));
    assert_string_equal(id_of(&pa, 0, 0), id_of(&pc, 0, 1));
    assert_string_equal(id_of(&pa, 1, 0), id_of(&pc, 1, 1));
    assert_string_not_equal(id_of(&pa, 2, 0), id_of(&pc, 2, 1));
    /* Other bounds, other chunks: other ids. */
    assert_string_not_equal(id_of(&pa, 0, 0), id_of(&pone, 0, 1));
    /* Other bounds, the same first chunk (49 bytes: two statements and
     * their newline): the same id. */
    assert_int_equal(pbig.chunks[0].n, 2);
    assert_string_equal(id_of(&pa, 0, 0), id_of(&pbig, 0, 1));
    /* Two chunks of the same text at other places differ. */
    assert_string_not_equal(id_of(&pone, 0, 0), id_of(&pone, 1, 1));
    assert_int_equal(strncmp(id_of(&pa, 2, 0), "load2:2:", 8), 0);
    assert_int_equal(strlen(id_of(&pa, 2, 0)), 8 + 32);
    load_plan_free(&pa);
    load_plan_free(&pa2);
    load_plan_free(&pb);
    load_plan_free(&pc);
    load_plan_free(&pone);
    load_plan_free(&pbig);
}

/* What a sqlite3 .dump writes plans as it is: each PRAGMA in a chunk of
 * its own, the dump's transaction left out, the sqlite_sequence lines
 * and the bodies of triggers and views (their ';') kept whole. */
static void test_sqlite3_dump(void **state)
{
    const char *text =
        "PRAGMA foreign_keys=OFF;\n"
        "BEGIN TRANSACTION;\n"
        "CREATE TABLE a(id INTEGER PRIMARY KEY AUTOINCREMENT, x);\n"
        "INSERT INTO a VALUES(1,X'00ff3b');\n"
        "DELETE FROM sqlite_sequence;\n"
        "INSERT INTO sqlite_sequence VALUES('a',1);\n"
        "CREATE TRIGGER tr AFTER INSERT ON a BEGIN INSERT INTO a "
        "VALUES(NULL, 'x;'); SELECT 1; END;\n"
        "CREATE VIEW v AS SELECT * FROM a WHERE x <> ';';\n"
        "PRAGMA user_version=3;\n"
        "INSERT INTO a VALUES(2,'y');\n"
        "COMMIT;\n";
    struct ext_load_plan p = plan_ok(text, 1 << 20, 100);
    char *sql;
    (void)state;
    assert_int_equal(p.n_skipped, 2);
    assert_int_equal(p.n_stmts, 9);
    assert_int_equal(p.n_chunks, 4);
    assert_int_equal(p.chunks[0].n, 1);
    sql = load_plan_chunk_sql(&p, text, 0);
    assert_string_equal(sql, "PRAGMA foreign_keys=OFF;");
    free(sql);
    assert_int_equal(p.chunks[1].first, 1);
    assert_int_equal(p.chunks[1].n, 6);
    stmt_is(&p, text, 5,
            "CREATE TRIGGER tr AFTER INSERT ON a BEGIN INSERT "
            "INTO a VALUES(NULL, 'x;'); SELECT 1; END;",
            7);
    stmt_is(&p, text, 6, "CREATE VIEW v AS SELECT * FROM a WHERE x <> ';';", 8);
    assert_int_equal(p.chunks[2].n, 1);
    stmt_is(&p, text, p.chunks[2].first, "PRAGMA user_version=3;", 9);
    assert_int_equal(p.chunks[3].n, 1);
    stmt_is(&p, text, p.chunks[3].first, "INSERT INTO a VALUES(2,'y');", 10);
    load_plan_free(&p);
}

/* A replica's .dump: the statements of its raftsql_* tables (CREATE
 * TABLE, INSERT, CREATE INDEX on them, quoted names too) are left out and
 * counted; the user's tables stay, raftsql-like names that are not
 * raftsql_ included. */
static void test_replica_dump_leaves_internal_tables_out(void **state)
{
    const char *text =
        "PRAGMA foreign_keys=OFF;\n"
        "BEGIN TRANSACTION;\n"
        "CREATE TABLE raftsql_applied( id INTEGER PRIMARY KEY, idx);\n"
        "INSERT INTO raftsql_applied VALUES(0,6);\n"
        "CREATE TABLE \"raftsql_settings\"(name, value);\n"
        "INSERT INTO \"RAFTSQL_settings\" VALUES('foreign_keys',1);\n"
        "CREATE TABLE kv(k, v);\n"
        "INSERT INTO kv VALUES('raftsql_x', 1);\n"
        "CREATE TABLE raftsqlx(a);\n"
        "CREATE INDEX raftsql_requests_idx ON raftsql_requests(idx);\n"
        "CREATE INDEX kv_v ON main.\"raftsql_config\"(v);\n"
        "COMMIT;\n";
    struct ext_load_plan p = plan_ok(text, 1 << 20, 100);
    (void)state;
    assert_int_equal(p.n_internal, 6);
    assert_int_equal(p.n_stmts, 4);
    stmt_is(&p, text, 1, "CREATE TABLE kv(k, v);", 7);
    stmt_is(&p, text, 2, "INSERT INTO kv VALUES('raftsql_x', 1);", 8);
    stmt_is(&p, text, 3, "CREATE TABLE raftsqlx(a);", 9);
    load_plan_free(&p);
    plan_bad("CREATE TABLE raftsql_a(x);\nINSERT INTO raftsql_a VALUES(1);\n",
             0, "only raftsql's internal tables");
}

/* A .dump of virtual tables: the declaration through sqlite_schema is
 * sent as its CREATE VIRTUAL TABLE (quotes undone, with its ';'), PRAGMA
 * writable_schema and the shadow tables' statements are checked only,
 * the tables of SQLite's modules are listed, an ordinary table named
 * like a shadow one stays, and the rows added go where PRAGMA
 * writable_schema=OFF was. */
static void test_virtual_tables_of_a_dump(void **state)
{
    const char *text =
        "PRAGMA foreign_keys=OFF;\n"
        "BEGIN TRANSACTION;\n"
        "CREATE TABLE plain(a);\n"
        "PRAGMA writable_schema=ON;\n"
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES("
        "'table','rt','rt',0,'CREATE VIRTUAL TABLE rt USING "
        "rtree(id,x0,x1)');\n"
        "CREATE TABLE IF NOT EXISTS \"rt_rowid\"(rowid INTEGER PRIMARY "
        "KEY,nodeno);\n"
        "INSERT INTO rt_rowid VALUES(1,1);\n"
        "CREATE TABLE IF NOT EXISTS \"rt_node\"(nodeno INTEGER PRIMARY "
        "KEY,data);\n"
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES("
        "'table','f 5','f 5',0,'CREATE VIRTUAL TABLE \"f 5\" USING fts5(a, "
        "b, tokenize=''porter'')');\n"
        "CREATE TABLE IF NOT EXISTS 'f 5_data'(id INTEGER PRIMARY KEY, "
        "block BLOB);\n"
        "INSERT INTO \"f 5_data\" VALUES(1,X'0203');\n"
        "CREATE TABLE rt_extra(x);\n"
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES("
        "'table','z','z',0,'CREATE VIRTUAL TABLE z USING mymod(q)');\n"
        "PRAGMA writable_schema=OFF;\n"
        "CREATE INDEX plain_a ON plain(a);\n"
        "COMMIT;\n";
    struct ext_load_plan p;
    char err[256] = "";
    char *sql;
    (void)state;
    assert_int_equal(load_plan_split(text, strlen(text), &p, err, sizeof err),
                     0);
    assert_int_equal(p.n_script, 14);
    assert_int_equal(p.script[2].role, EXT_LOAD_CHECK); /* PRAGMA ON */
    assert_int_equal(p.script[3].role, EXT_LOAD_VTAB);  /* rt */
    assert_int_equal(p.script[4].role, EXT_LOAD_CHECK); /* rt_rowid */
    assert_int_equal(p.script[5].role, EXT_LOAD_CHECK);
    assert_int_equal(p.script[6].role, EXT_LOAD_CHECK); /* rt_node */
    assert_int_equal(p.script[8].role, EXT_LOAD_CHECK); /* f 5_data */
    assert_int_equal(p.script[9].role, EXT_LOAD_CHECK);
    assert_int_equal(p.script[10].role, EXT_LOAD_SEND);  /* rt_extra */
    assert_int_equal(p.script[11].role, EXT_LOAD_VTAB);  /* z */
    assert_int_equal(p.script[12].role, EXT_LOAD_CHECK); /* OFF */
    assert_int_equal(p.gen_at, 12);
    assert_int_equal(p.n_vtabs, 2);
    assert_string_equal(p.vtabs[0].name, "rt");
    assert_string_equal(p.vtabs[0].module, "rtree");
    assert_string_equal(p.vtabs[1].name, "f 5");
    assert_string_equal(p.vtabs[1].module, "fts5");
    assert_int_equal(p.vtabs[1].line, 9);
    assert_int_equal(
        load_plan_add(&p, strdup("INSERT INTO rt VALUES(1, 2, 3);"), 5), 0);
    assert_int_equal(load_plan_finish(&p, text, 1 << 20, 100, err, sizeof err),
                     0);
    assert_int_equal(p.n_stmts, 8);
    assert_int_equal(p.n_chunks, 2);
    sql = load_plan_chunk_sql(&p, text, 1);
    assert_string_equal(sql,
                        "CREATE TABLE plain(a);\n"
                        "CREATE VIRTUAL TABLE rt USING rtree(id,x0,x1);\n"
                        "CREATE VIRTUAL TABLE \"f 5\" USING fts5(a, b, "
                        "tokenize='porter');\n"
                        "CREATE TABLE rt_extra(x);\n"
                        "CREATE VIRTUAL TABLE z USING mymod(q);\n"
                        "INSERT INTO rt VALUES(1, 2, 3);\n"
                        "CREATE INDEX plain_a ON plain(a);");
    free(sql);
    load_plan_free(&p);
}

/* What a dump cannot load through the log is refused naming its line: a
 * write to the schema table that is no virtual table's declaration, a
 * contentless FTS table (its dump holds the index only). */
static void test_schema_writes_refused(void **state)
{
    (void)state;
    plan_bad(
        "CREATE TABLE a(x);\nPRAGMA writable_schema=ON;\n"
        "INSERT INTO sqlite_master VALUES('table','b','b',0,"
        "'CREATE TABLE b(y)');\n",
        0, "line 3: a write to sqlite_master cannot be loaded");
    plan_bad(
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)"
        "VALUES('table','t','t',0,'CREATE TABLE t(x)');\n",
        0, "line 1: a write to sqlite_schema");
    plan_bad(
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)"
        "VALUES('table','f','f',0,'CREATE VIRTUAL TABLE f USING "
        "fts5(a, content='''')');\n",
        0, "line 1: the virtual table f is contentless");
    plan_bad(
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)"
        "VALUES('table','f','f',0,'CREATE VIRTUAL TABLE f USING "
        "fts4(a, content=\"\")');\n",
        0, "contentless");
}

/* check_script plans @text and checks it (load_check_run, no replica
 * schema); returns its code, *@refused and its message in @err (256
 * bytes). */
static int check_script(const char *text, bool *refused, char *err)
{
    struct ext_load_plan p;
    int rc;
    err[0] = '\0';
    if (load_plan_split(text, strlen(text), &p, err, 256) != 0) {
        fail_msg("'%s' not planned: %s", text, err);
    }
    rc = load_check_run(NULL, &p, text, refused, err, 256);
    load_plan_free(&p);
    return rc;
}

/* A statement raft_exec's policy refuses, in the middle of a script, is
 * refused by the check naming its line, with raft_exec's reason and
 * *out_refused; a parameter without a value fails it as a bad call. */
static void test_check_applies_raft_exec_policy(void **state)
{
    static const struct {
        const char *stmt; /* line 4 of the script */
        bool refused;     /* raft_exec's policy refuses it */
        const char *why;  /* the start of the reason */
    } cases[] = {
        {"VACUUM;", true, "VACUUM cannot be used in raft_exec"},
        {"ATTACH DATABASE ':memory:' AS aux;", true,
         "ATTACH cannot be used in raft_exec"},
        {"CREATE TEMP TABLE tmp(x);", true,
         "temporary objects cannot be created through raft_exec"},
        {"CREATE TEMP VIEW tv AS SELECT 1;", true, "temporary objects"},
        {"SELECT sqlite_version();", true,
         "sqlite_version() cannot be used in raft_exec"},
        {"INSERT INTO t VALUES(load_extension('x'));", true,
         "load_extension cannot be used in raft_exec"},
        {"INSERT INTO t SELECT total_changes();", true, "total_changes()"},
        {"UPDATE t SET x = datetime(x, 'localtime');", true,
         "datetime(): the 'localtime' modifier"},
        {"PRAGMA journal_mode=DELETE;", true,
         "PRAGMA journal_mode cannot be set through raft_exec"},
        {"PRAGMA cache_size;", true, "PRAGMA cache_size cannot be used"},
        {"EXPLAIN PRAGMA foreign_keys=ON;", true,
         "PRAGMA foreign_keys must be a raft_exec request of its own"},
        {"INSERT INTO t VALUES(?);", false,
         "missing value for parameter 1 (?)"},
        {"INSERT INTO t VALUES(:v);", false,
         "missing value for parameter 1 (:v)"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512], err[256], want[256];
        bool refused = !cases[i].refused;
        snprintf(text, sizeof text,
                 "PRAGMA foreign_keys=OFF;\nBEGIN;\nCREATE TABLE t(x);\n%s\n"
                 "INSERT INTO t VALUES(1);\nCOMMIT;\n",
                 cases[i].stmt);
        snprintf(want, sizeof want, "line 4: %s: %s", cases[i].stmt,
                 cases[i].why);
        if (check_script(text, &refused, err) != RAFT_INVALID ||
            strncmp(err, want, strlen(want)) != 0 ||
            refused != cases[i].refused) {
            fail_msg("'%s': '%s' (refused %d), not '%s' (refused %d)",
                     cases[i].stmt, err, refused, want, cases[i].refused);
        }
    }
}

/* What the plan leaves out or checks only is not held to raft_exec's
 * policy: a .dump's PRAGMA writable_schema and shadow tables, its
 * transaction, a replica's raftsql_* tables; a cluster-wide setting
 * (a chunk of its own) and a PRAGMA stored in the file pass. */
static void test_check_leaves_out_what_is_not_sent(void **state)
{
    const char *text =
        "PRAGMA foreign_keys=OFF;\n"
        "BEGIN TRANSACTION;\n"
        "CREATE TABLE raftsql_applied(id INTEGER PRIMARY KEY, x);\n"
        "INSERT INTO raftsql_applied VALUES(1, 5);\n"
        "CREATE TABLE plain(a);\n"
        "INSERT INTO plain VALUES(date('2020-01-01'));\n"
        "PRAGMA writable_schema=ON;\n"
        "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES("
        "'table','ft','ft',0,'CREATE VIRTUAL TABLE ft USING fts4(body)');\n"
        "CREATE TABLE IF NOT EXISTS 'ft_content'(docid INTEGER PRIMARY KEY, "
        "'c0body');\n"
        "INSERT INTO ft_content VALUES(1, 'raft');\n"
        "CREATE TABLE IF NOT EXISTS 'ft_segments'(blockid INTEGER PRIMARY "
        "KEY, block BLOB);\n"
        "CREATE TABLE IF NOT EXISTS 'ft_segdir'(level INTEGER,idx "
        "INTEGER,start_block INTEGER,leaves_end_block INTEGER,end_block "
        "INTEGER,root BLOB,PRIMARY KEY(level, idx));\n"
        "CREATE TABLE IF NOT EXISTS 'ft_docsize'(docid INTEGER PRIMARY KEY, "
        "size BLOB);\n"
        "CREATE TABLE IF NOT EXISTS 'ft_stat'(id INTEGER PRIMARY KEY, value "
        "BLOB);\n"
        "PRAGMA writable_schema=OFF;\n"
        "PRAGMA user_version=3;\n"
        "COMMIT;\n";
    char err[256];
    bool refused = true;
    (void)state;
    struct ext_load_plan p;
    if (load_plan_split(text, strlen(text), &p, err, sizeof err) != 0 ||
        load_check_run(NULL, &p, text, &refused, err, sizeof err) != 0) {
        fail_msg("the dump was refused: %s", err);
    }
    assert_false(refused);
    /* The row of ft, rebuilt (and checked) as an INSERT through it. */
    assert_int_equal(p.n_gen, 1);
    assert_string_equal(p.gen[0].sql,
                        "INSERT INTO \"ft\"(docid, \"body\") VALUES(1, "
                        "'raft');");
    load_plan_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_quotes_and_comments),
        cmocka_unit_test(test_split_trigger),
        cmocka_unit_test(test_transaction_control_left_out),
        cmocka_unit_test(test_open_last_statement),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_chunking),
        cmocka_unit_test(test_request_ids),
        cmocka_unit_test(test_sqlite3_dump),
        cmocka_unit_test(test_replica_dump_leaves_internal_tables_out),
        cmocka_unit_test(test_virtual_tables_of_a_dump),
        cmocka_unit_test(test_schema_writes_refused),
        cmocka_unit_test(test_check_applies_raft_exec_policy),
        cmocka_unit_test(test_check_leaves_out_what_is_not_sent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
