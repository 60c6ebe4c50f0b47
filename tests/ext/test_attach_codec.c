/* Tests of ext/surface/attach_codec.c: calls and answers of the attach socket
 * round-trip every value type (integers stay integers, blobs and text
 * with NUL or invalid UTF-8 survive), and malformed texts are refused. */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ext/surface/attach_codec.h"
#include "ext/raftsql.h"
#include "raft/err.h"

/* A call with one value of each type comes back unchanged. */
static void test_call_round_trip(void **state)
{
    static const unsigned char blob[] = {0, 0xff, 1};
    static const char bad_utf8[] = {'a', (char)0xc3, 0, 'b'};
    struct sql_value in[7], *out = NULL;
    char fn[EXT_ATTACH_FN_MAX], err[128], *text = NULL;
    size_t len = 0;
    unsigned n = 0;
    (void)state;

    memset(in, 0, sizeof in);
    in[0].type = SQL_INTEGER;
    in[0].integer = INT64_MIN;
    in[1].type = SQL_FLOAT;
    in[1].real = 1.0; /* stays a float, not an integer */
    in[2].type = SQL_TEXT;
    in[2].bytes.p = "héllo";
    in[2].bytes.len = strlen("héllo");
    in[3].type = SQL_BLOB;
    in[3].bytes.p = blob;
    in[3].bytes.len = sizeof blob;
    in[4].type = SQL_NULL;
    in[5].type = SQL_TEXT;
    in[5].bytes.p = bad_utf8;
    in[5].bytes.len = sizeof bad_utf8;
    in[6].type = SQL_FLOAT;
    in[6].real = -INFINITY;

    assert_int_equal(attach_codec_call_encode("raft_exec", in, 7, &text, &len),
                     0);
    assert_int_equal(
        attach_codec_call_decode(text, len, fn, &out, &n, err, sizeof err), 0);
    free(text);
    assert_string_equal(fn, "raft_exec");
    assert_int_equal(n, 7);
    assert_int_equal(out[0].type, SQL_INTEGER);
    assert_true(out[0].integer == INT64_MIN);
    assert_int_equal(out[1].type, SQL_FLOAT);
    assert_true(out[1].real == 1.0);
    assert_int_equal(out[2].type, SQL_TEXT);
    assert_memory_equal(out[2].bytes.p, "héllo", out[2].bytes.len);
    assert_int_equal(out[3].type, SQL_BLOB);
    assert_int_equal(out[3].bytes.len, sizeof blob);
    assert_memory_equal(out[3].bytes.p, blob, sizeof blob);
    assert_int_equal(out[4].type, SQL_NULL);
    assert_int_equal(out[5].type, SQL_TEXT);
    assert_int_equal(out[5].bytes.len, sizeof bad_utf8);
    assert_memory_equal(out[5].bytes.p, bad_utf8, sizeof bad_utf8);
    assert_int_equal(out[6].type, SQL_FLOAT);
    assert_true(isinf(out[6].real) && out[6].real < 0);
    attach_codec_values_free(out, n);
}

/* Answers: a value with its rowid, an error, a table. */
static void test_answer_round_trip(void **state)
{
    struct ext_attach_answer a, b;
    struct sql_value cells[4];
    char err[128], *text = NULL;
    size_t len = 0;
    (void)state;

    memset(&a, 0, sizeof a);
    a.ok = true;
    a.value.type = SQL_INTEGER;
    a.value.integer = 3;
    a.rowid = 42;
    assert_int_equal(attach_codec_answer_encode(&a, &text, &len), 0);
    assert_int_equal(attach_codec_answer_decode(text, len, &b, err, sizeof err),
                     0);
    free(text);
    assert_true(b.ok);
    assert_int_equal(b.value.type, SQL_INTEGER);
    assert_int_equal(b.value.integer, 3);
    assert_int_equal(b.rowid, 42);
    attach_codec_answer_free(&b);

    memset(&a, 0, sizeof a);
    a.code = 2067;
    snprintf(a.errmsg, sizeof a.errmsg, "UNIQUE constraint failed: kv.k");
    assert_int_equal(attach_codec_answer_encode(&a, &text, &len), 0);
    assert_int_equal(attach_codec_answer_decode(text, len, &b, err, sizeof err),
                     0);
    free(text);
    assert_false(b.ok);
    assert_int_equal(b.code, 2067);
    assert_string_equal(b.errmsg, "UNIQUE constraint failed: kv.k");

    memset(&a, 0, sizeof a);
    memset(cells, 0, sizeof cells);
    a.ok = true;
    a.cells = cells;
    a.n_rows = 2;
    a.n_cols = 2;
    cells[0].type = SQL_INTEGER;
    cells[0].integer = 1;
    cells[1].type = SQL_TEXT;
    cells[1].bytes.p = "voter";
    cells[1].bytes.len = 5;
    cells[2].type = SQL_INTEGER;
    cells[2].integer = 2;
    cells[3].type = SQL_NULL;
    assert_int_equal(attach_codec_answer_encode(&a, &text, &len), 0);
    assert_int_equal(attach_codec_answer_decode(text, len, &b, err, sizeof err),
                     0);
    free(text);
    assert_int_equal(b.n_rows, 2);
    assert_int_equal(b.n_cols, 2);
    assert_int_equal(b.cells[2].integer, 2);
    assert_memory_equal(b.cells[1].bytes.p, "voter", 5);
    assert_int_equal(b.cells[3].type, SQL_NULL);
    attach_codec_answer_free(&b);
}

/* Every raftsql result code (raftsql.h) crosses the socket unchanged, so
 * a caller in another process sees the code the node's function set; the
 * codes are distinct, keep their primary code and are raftsql's own. */
static void test_error_codes_round_trip(void **state)
{
    static const int codes[] = {
        RAFTSQL_NOT_APPLIED, RAFTSQL_BUSY,        RAFTSQL_STALE,
        RAFTSQL_DIVERGED,    RAFTSQL_FULL,        RAFTSQL_TOOBIG,
        RAFTSQL_UNKNOWN,     RAFTSQL_INTERRUPTED, RAFTSQL_INTERRUPTED_UNKNOWN,
        RAFTSQL_INVALID,     RAFTSQL_NO_NODE,
    };
    static const int primary[] = {
        SQLITE_BUSY,      SQLITE_BUSY,   SQLITE_BUSY,     SQLITE_BUSY,
        SQLITE_FULL,      SQLITE_TOOBIG, SQLITE_ERROR,    SQLITE_INTERRUPT,
        SQLITE_INTERRUPT, SQLITE_ERROR,  SQLITE_CANTOPEN,
    };
    struct ext_attach_answer a, b;
    char err[128], *text = NULL;
    size_t len = 0;
    (void)state;

    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        assert_int_equal(codes[i] & 0xff, primary[i]);
        assert_true(RAFTSQL_IS_OWN_CODE(codes[i]));
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(codes[i], codes[j]);
        }
        memset(&a, 0, sizeof a);
        a.code = codes[i];
        snprintf(a.errmsg, sizeof a.errmsg, "raft_exec: not applied: x");
        assert_int_equal(attach_codec_answer_encode(&a, &text, &len), 0);
        assert_int_equal(
            attach_codec_answer_decode(text, len, &b, err, sizeof err), 0);
        free(text);
        assert_false(b.ok);
        assert_int_equal(b.code, codes[i]);
        attach_codec_answer_free(&b);
    }
    assert_false(RAFTSQL_IS_OWN_CODE(SQLITE_CONSTRAINT_UNIQUE));
    assert_false(RAFTSQL_IS_OWN_CODE(SQLITE_BUSY));
}

/* Malformed texts are refused with a reason, leaving nothing allocated. */
static void test_malformed_refused(void **state)
{
    static const char *const calls[] = {
        "",
        "[1]",
        "{\"args\": []}",
        "{\"fn\": \"\", \"args\": []}",
        "{\"fn\": \"raft_exec\"}",
        "{\"fn\": \"raft_exec\", \"args\": [{\"b\": \"0\"}]}",
        "{\"fn\": \"raft_exec\", \"args\": [{\"b\": \"zz\"}]}",
        "{\"fn\": \"raft_exec\", \"args\": [{\"q\": 1}]}",
        "{\"fn\": \"raft_exec\", \"args\": [[1]]}",
        "{\"fn\": \"raft_exec\", \"args\": [\"ok\", {\"r\": \"nan\"}]}",
        "{\"fn\": \"a_function_name_far_too_long_to_be_ours\", \"args\": []}",
    };
    static const char *const answers[] = {
        "{}",
        "{\"ok\": false}",
        "{\"ok\": true, \"v\": 1}",
        "{\"ok\": true, \"rowid\": 1}",
        "{\"ok\": true, \"rowid\": 1, \"cols\": 2, \"cells\": [1, 2, 3]}",
        "{\"ok\": true, \"rowid\": 1, \"cols\": 0, \"cells\": []}",
    };
    char fn[EXT_ATTACH_FN_MAX], err[128];
    struct sql_value *out = NULL;
    struct ext_attach_answer b;
    unsigned n = 0;
    (void)state;

    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        err[0] = '\0';
        assert_int_equal(
            attach_codec_call_decode(calls[i], strlen(calls[i]), fn, &out, &n,
                                     err, sizeof err),
            RAFT_PROTO);
        assert_true(err[0] != '\0');
    }
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++) {
        assert_int_equal(
            attach_codec_answer_decode(answers[i], strlen(answers[i]), &b, err,
                                       sizeof err),
            RAFT_PROTO);
    }
    {
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(attach_codec_call_encode("", NULL, 0, &text, &len),
                         RAFT_INVALID);
        assert_null(text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_call_round_trip),
        cmocka_unit_test(test_answer_round_trip),
        cmocka_unit_test(test_error_codes_round_trip),
        cmocka_unit_test(test_malformed_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
