/* Tests of ext/load_plan.c, raft_load_sql's plan: statement splitting
 * (quotes, comments, triggers, an open last statement), the script's
 * transaction control left out, the refusals naming their line, chunking
 * by bytes and by count, and request ids derived from the content. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ext/load_plan.h"
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

/* Ids depend on the content, the bounds and the chunk number only. */
static void test_request_ids(void **state)
{
    const char *a = "INSERT INTO t VALUES(1);INSERT INTO t VALUES(2);";
    const char *b = "INSERT INTO t VALUES(1);INSERT INTO t VALUES(3);";
    struct ext_load_plan p1 = plan_ok(a, 30, 10), p2 = plan_ok(a, 30, 10);
    struct ext_load_plan p3 = plan_ok(b, 30, 10), p4 = plan_ok(a, 31, 10);
    char i1[EXT_LOAD_ID_MAX], i2[EXT_LOAD_ID_MAX], i3[EXT_LOAD_ID_MAX];
    char i4[EXT_LOAD_ID_MAX], i5[EXT_LOAD_ID_MAX];
    (void)state;
    assert_int_equal(p1.n_chunks, 2);
    load_plan_request_id(&p1, 0, i1);
    load_plan_request_id(&p2, 0, i2);
    load_plan_request_id(&p3, 0, i3);
    load_plan_request_id(&p4, 0, i4);
    load_plan_request_id(&p1, 1, i5);
    assert_string_equal(i1, i2);
    assert_string_not_equal(i1, i3);
    assert_string_not_equal(i1, i4);
    assert_string_not_equal(i1, i5);
    assert_int_equal(strncmp(i1, "load1:", 6), 0);
    assert_int_equal(strlen(p1.hash), 32);
    assert_non_null(strstr(i5, ":30:10:1"));
    load_plan_free(&p1);
    load_plan_free(&p2);
    load_plan_free(&p3);
    load_plan_free(&p4);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
