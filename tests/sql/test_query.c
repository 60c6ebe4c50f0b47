/* Tests of requests with options (format version 3, sql/request.c), of
 * their rows as JSON (sql/rows.c) and of client request ids
 * (sql/client_id.c): the codec and its refusals, every value type in the
 * JSON, the rollback of a request failing after a RETURNING, the result
 * cap, and the id window by count and by time, batching varied. */

#include <math.h>
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

#define MAX_BATCH FSM_FIXTURE_MAX_BATCH
#define T0 1700000000000LL /* entry time of the tests, ms */

/* Offsets of the documented format (request.c). */
#define OFF_VERSION 2
#define OFF_FLAGS 3
#define OFF_ID_WINDOW 52
#define OFF_ID_WINDOW_MS 60
#define OFF_MAX_RESULT 68
#define OFF_CLIENT_ID_LEN 76
#define V3_HEADER 78

static uint64_t next_seq = 100;

/* What a test request carries. */
struct req {
    const char *sql;
    const char *id;     /* client id, or NULL */
    size_t id_len;      /* 0: strlen(id) */
    int want_rows;      /* flag */
    int64_t time_ms;    /* 0: T0 */
    uint64_t window;    /* stamped id window (0: unstamped) */
    uint64_t window_ms; /* stamped id window by time */
    uint64_t max_result;
    const struct sql_param *params;
    unsigned n_params;
};

/* make encodes and stamps @r. */
static struct buf *make(const struct req *r)
{
    uint64_t id[2] = {1, next_seq++};
    struct sql_request_opts o = {r->id, 0, 0};
    struct sql_stamp st = {r->time_ms != 0 ? r->time_ms : T0,
                           id[1],
                           0,
                           r->window,
                           r->window_ms,
                           r->max_result};
    struct buf *b;
    size_t len = 0;
    char msg[256];

    o.client_id_len = r->id == NULL ? 0 : r->id_len ? r->id_len : strlen(r->id);
    o.flags = r->want_rows ? SQL_REQUEST_WANT_ROWS : 0;
    if (sql_request_size_opts(r->sql, strlen(r->sql), r->params, r->n_params,
                              &o, UINT64_MAX, &len, msg, sizeof msg) != 0) {
        fail_msg("size: %s", msg);
    }
    b = buf_new(len);
    assert_int_equal(
        sql_request_encode_opts(id, r->sql, strlen(r->sql), r->params,
                                r->n_params, &o, b->data, len),
        0);
    assert_int_equal(sql_request_stamp(b->data, len, &st, b->data), 0);
    return b;
}

/* apply applies @n requests as one batch and expects the batch to pass. */
static void apply(struct fsm_fixture *f, const struct req *rs, unsigned n)
{
    struct sql_fsm_entry e[MAX_BATCH];
    struct buf *b[MAX_BATCH];
    uint64_t next = sql_fsm_applied(f->fsm) + 1;
    int rc;

    assert_true(n <= MAX_BATCH);
    fsm_fixture_clear(f);
    for (unsigned i = 0; i < n; i++) {
        b[i] = make(&rs[i]);
        e[i].index = next + i;
        e[i].term = 2;
        entry_set_payload(&e[i], b[i]);
    }
    rc = sql_fsm_apply(f->fsm, e, n, f->res);
    if (rc != 0) {
        fail_msg("apply: %d %s", rc, sql_fsm_errmsg(f->fsm));
    }
    f->n_res = n;
    for (unsigned i = 0; i < n; i++) {
        buf_free(b[i]);
    }
}

static struct sql_result *apply_one(struct fsm_fixture *f, struct req r)
{
    apply(f, &r, 1);
    return &f->res[0];
}

static void assert_ok(const struct sql_result *r)
{
    if (r->rc != 0) {
        fail_msg("request failed: %d %s", r->rc,
                 r->errmsg != NULL ? r->errmsg : "");
    }
}

/* A request without options is exactly the version 2 payload; one with a
 * client id (NUL bytes in it) and the flag is version 3 and decodes back,
 * with the stamped window and cap. */
static void test_codec_v3(void **state)
{
    static const uint64_t id[2] = {3, 4};
    static const char cid[] = {'a', 0, 'b', (char)0xff};
    struct sql_param p = {":x", {.type = SQL_INTEGER, .integer = 5}};
    struct sql_request_opts none = {NULL, 0, 0};
    struct sql_request_opts o = {cid, sizeof cid, SQL_REQUEST_WANT_ROWS};
    struct sql_stamp st = {T0, 9, 10, 11, 12, 13};
    struct sql_request r;
    size_t len2 = 0, len3 = 0, lenn = 0;
    uint8_t *a, *b, *c;
    char msg[256];

    (void)state;
    assert_int_equal(sql_request_size("SELECT :x", 9, &p, 1, 1 << 20, &len2,
                                      msg, sizeof msg),
                     0);
    assert_int_equal(sql_request_size_opts("SELECT :x", 9, &p, 1, &none,
                                           1 << 20, &lenn, msg, sizeof msg),
                     0);
    assert_int_equal(len2, lenn);
    a = malloc(len2);
    c = malloc(len2);
    assert_int_equal(sql_request_encode(id, "SELECT :x", 9, &p, 1, a, len2), 0);
    assert_int_equal(
        sql_request_encode_opts(id, "SELECT :x", 9, &p, 1, &none, c, len2), 0);
    assert_memory_equal(a, c, len2);
    assert_int_equal(a[OFF_VERSION], 2);

    assert_int_equal(sql_request_size_opts("SELECT :x", 9, &p, 1, &o, 1 << 20,
                                           &len3, msg, sizeof msg),
                     0);
    assert_int_equal(len3, len2 + (V3_HEADER - 52) + sizeof cid);
    b = malloc(len3);
    assert_int_equal(
        sql_request_encode_opts(id, "SELECT :x", 9, &p, 1, &o, b, len3), 0);
    assert_int_equal(b[OFF_VERSION], 3);
    assert_int_equal(b[OFF_FLAGS],
                     SQL_REQUEST_CLIENT_ID | SQL_REQUEST_WANT_ROWS);
    assert_int_equal(b[OFF_CLIENT_ID_LEN], sizeof cid);
    assert_int_equal(sql_request_stamp(b, len3, &st, b), 0);
    assert_int_equal(sql_request_decode(b, len3, &r, msg, sizeof msg), 0);
    assert_int_equal(r.client_id_len, sizeof cid);
    assert_memory_equal(r.client_id, cid, sizeof cid);
    assert_int_equal(r.want_rows, 1);
    assert_true(r.time_ms == T0 && r.seed == 9 && r.max_steps == 10);
    assert_true(r.id_window == 11 && r.id_window_ms == 12 &&
                r.max_result_bytes == 13);
    assert_int_equal(r.sql_len, 9);
    assert_memory_equal(r.sql, "SELECT :x", 9);
    assert_int_equal(r.n_params, 1);
    assert_string_equal(r.params[0].name, ":x");
    assert_true(r.params[0].value.integer == 5);
    assert_ptr_equal(r.params_data, (const uint8_t *)r.sql + r.sql_len);
    sql_request_free(&r);

    /* Rows only: version 3, no id. */
    o.client_id = NULL;
    o.client_id_len = 0;
    assert_int_equal(sql_request_size_opts("SELECT 1", 8, NULL, 0, &o, 1 << 20,
                                           &lenn, msg, sizeof msg),
                     0);
    assert_int_equal(lenn, V3_HEADER + 8);

    /* Every truncation of the version 3 payload is refused. */
    for (size_t cut = 0; cut < len3; cut++) {
        uint8_t *t = malloc(cut > 0 ? cut : 1);
        memcpy(t, b, cut);
        assert_int_not_equal(sql_request_decode(t, cut, &r, msg, sizeof msg),
                             0);
        free(t);
    }
    /* Unknown flags; an id length that disagrees with the flag; an id
     * over 256 bytes. */
    b[OFF_FLAGS] |= 4;
    assert_int_equal(sql_request_decode(b, len3, &r, msg, sizeof msg),
                     SQL_ERR_CORRUPT);
    b[OFF_FLAGS] = SQL_REQUEST_WANT_ROWS;
    assert_int_equal(sql_request_decode(b, len3, &r, msg, sizeof msg),
                     SQL_ERR_CORRUPT);
    assert_non_null(strstr(msg, "client id"));
    b[OFF_FLAGS] = SQL_REQUEST_CLIENT_ID;
    b[OFF_CLIENT_ID_LEN + 1] = 1; /* 260 bytes */
    assert_int_equal(sql_request_decode(b, len3, &r, msg, sizeof msg),
                     SQL_ERR_CORRUPT);
    {
        char big[SQL_CLIENT_ID_MAX + 1];
        struct sql_request_opts ob = {big, sizeof big, 0};
        memset(big, 'x', sizeof big);
        assert_int_equal(sql_request_size_opts("SELECT 1", 8, NULL, 0, &ob,
                                               1 << 20, &lenn, msg, sizeof msg),
                         SQL_ERR_INVALID);
        ob.client_id_len = SQL_CLIENT_ID_MAX;
        assert_int_equal(sql_request_size_opts("SELECT 1", 8, NULL, 0, &ob,
                                               1 << 20, &lenn, msg, sizeof msg),
                         0);
        ob.flags = 8;
        assert_int_equal(sql_request_size_opts("SELECT 1", 8, NULL, 0, &ob,
                                               1 << 20, &lenn, msg, sizeof msg),
                         SQL_ERR_INVALID);
    }
    /* A version 2 payload is stamped without the version 3 fields. */
    assert_int_equal(sql_request_stamp(a, len2, &st, a), 0);
    assert_int_equal(sql_request_decode(a, len2, &r, msg, sizeof msg), 0);
    assert_true(r.client_id == NULL && r.want_rows == 0 && r.id_window == 0);
    assert_true(r.max_steps == 10);
    sql_request_free(&r);
    free(a);
    free(b);
    free(c);
}

/* Every value type comes back typed in the JSON: large integers, reals
 * with 17 digits (1.0 stays a real), +-Inf, text with quotes, a NUL byte
 * and non-ASCII, NULL, '' and a zero-length blob apart, blobs with NUL
 * bytes in base64. */
static void test_rows_types(void **state)
{
    struct fsm_fixture *f = *state;
    static const char nul_text[] = {'a', '"', 0, 'b', '\\'};
    static const unsigned char blob[] = {0, 0xff, 0, 'x'};
    struct sql_param ps[] = {
        {NULL, {.type = SQL_INTEGER, .integer = INT64_MIN}},
        {NULL, {.type = SQL_FLOAT, .real = 0.1}},
        {NULL, {.type = SQL_TEXT, .bytes = {nul_text, sizeof nul_text}}},
        {NULL, {.type = SQL_BLOB, .bytes = {blob, sizeof blob}}},
        {NULL, {.type = SQL_BLOB, .bytes = {NULL, 0}}},
    };
    struct sql_result *r;

    assert_ok(
        apply_one(f, (struct req){.sql = "CREATE TABLE t(a, b, c, d, e)"}));
    r = apply_one(
        f, (struct req){.sql = "INSERT INTO t VALUES (9223372036854775807, "
                               "1.0, 'h\xc3\xa9 \xe2\x82\xac', NULL, ''), "
                               "(?, ?, ?, ?, ?), (9e999, -9e999, 1e-300, "
                               "-0.5, x'') RETURNING *",
                        .want_rows = 1,
                        .params = ps,
                        .n_params = 5});
    assert_ok(r);
    assert_non_null(r->rows);
    assert_string_equal(
        r->rows,
        "{\"results\":[{\"columns\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"rows\":"
        "[[9223372036854775807,1.0,\"h\xc3\xa9 \xe2\x82\xac\",null,\"\"],"
        "[-9223372036854775808,0.10000000000000001,\"a\\\"\\u0000b\\\\\","
        "{\"base64\":\"AP8AeA==\"},{\"base64\":\"\"}],"
        "[{\"real\":\"inf\"},{\"real\":\"-inf\"},1e-300,-0.5,"
        "{\"base64\":\"\"}]]}],\"changes\":3,\"last_insert_rowid\":3}");
    assert_int_equal(r->changes, 3);

    /* No statement returning rows: an empty list; a RETURNING that
     * matched nothing: its columns and no rows. */
    r = apply_one(
        f, (struct req){.sql = "UPDATE t SET a = 1 WHERE 0", .want_rows = 1});
    assert_ok(r);
    assert_string_equal(r->rows,
                        "{\"results\":[],\"changes\":0,"
                        "\"last_insert_rowid\":0}");
    r = apply_one(f, (struct req){.sql = "DELETE FROM t WHERE 0 RETURNING a",
                                  .want_rows = 1});
    assert_ok(r);
    assert_string_equal(r->rows,
                        "{\"results\":[{\"columns\":[\"a\"],\"rows\":"
                        "[]}],\"changes\":0,\"last_insert_rowid\":0}");
    /* Without the flag, no rows. */
    r = apply_one(f, (struct req){.sql = "DELETE FROM t WHERE 0 RETURNING a"});
    assert_ok(r);
    assert_null(r->rows);
}

/* Several statements: one result per statement returning rows. A
 * statement failing after a RETURNING rolls the whole request back, rows
 * and all (rqlite #2530). TEXT that is no UTF-8 is a SQL error. */
static void test_rows_multi_and_rollback(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_result *r;

    assert_ok(apply_one(
        f, (struct req){.sql = "CREATE TABLE t(id INTEGER PRIMARY KEY, a)"}));
    r = apply_one(
        f, (struct req){.sql = "INSERT INTO t(a) VALUES (1) RETURNING id; "
                               "INSERT INTO t(a) VALUES (2); "
                               "UPDATE t SET a = a * 10 RETURNING a AS x",
                        .want_rows = 1});
    assert_ok(r);
    assert_string_equal(
        r->rows,
        "{\"results\":[{\"columns\":[\"id\"],\"rows\":[[1]]},"
        "{\"columns\":[\"x\"],\"rows\":[[10],[20]]}],\"changes\":4,"
        "\"last_insert_rowid\":2}");
    r = apply_one(
        f, (struct req){.sql = "INSERT INTO t(a) VALUES (3) RETURNING id; "
                               "INSERT INTO t(id) VALUES (1)",
                        .want_rows = 1});
    assert_int_equal(r->rc & 0xff, SQLITE_CONSTRAINT);
    assert_null(r->rows);
    assert_query(f->tmp.path, "SELECT group_concat(a) FROM t", "10,20");
    r = apply_one(
        f, (struct req){.sql = "SELECT CAST(x'ff00' AS TEXT)", .want_rows = 1});
    assert_int_equal(r->rc, SQLITE_ERROR);
    assert_non_null(strstr(r->errmsg, "not valid UTF-8"));
}

/* A statement's error names where the statement starts in the request
 * (err_at: 1 + the offset where SQLite was given it, for a runtime error
 * as for one when it is prepared); an error of the whole request, and a
 * first outcome under a client id, name none. */
static void test_error_statement_offset(void **state)
{
    struct fsm_fixture *f = *state;
    const char *two =
        "CREATE TABLE e(id INTEGER PRIMARY KEY);\n"
        "INSERT INTO e VALUES(1);\nINSERT INTO nosuch VALUES(1);";
    const char *three = "INSERT INTO e VALUES(2); INSERT INTO e VALUES(1);";
    struct sql_result *r;

    r = apply_one(f, (struct req){.sql = two, .id = "e1"});
    assert_int_equal(r->rc, SQLITE_ERROR);
    /* Prepared from just after the second statement's ';'. */
    assert_int_equal(r->err_at, strstr(two, "\nINSERT INTO nosuch") - two + 1);
    r = apply_one(f, (struct req){.sql = two, .id = "e1"});
    assert_int_equal(r->id_duplicate, 1);
    assert_int_equal(r->err_at, 0);
    assert_ok(apply_one(f, (struct req){.sql = "CREATE TABLE e(id INTEGER "
                                               "PRIMARY KEY); INSERT INTO e "
                                               "VALUES(1)"}));
    r = apply_one(f, (struct req){.sql = three});
    assert_int_equal(r->rc & 0xff, SQLITE_CONSTRAINT);
    assert_int_equal(r->err_at, strchr(three, ';') - three + 2);
    r = apply_one(f, (struct req){.sql = "INSERT INTO e VALUES(?)"});
    assert_int_equal(r->rc, SQLITE_ERROR); /* missing value */
    assert_int_equal(r->err_at, 1);
    assert_ok(apply_one(f, (struct req){.sql = "SELECT 1"}));
    assert_int_equal(f->res[0].err_at, 0);
}

/* Rows over the stamped max_result_bytes are a SQL error (SQLITE_TOOBIG),
 * the request rolled back; under it they pass. */
static void test_rows_cap(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_result *r;
    const char *ins =
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
        "WHERE i < 20) INSERT INTO t SELECT i, printf('%.100c', 'x') FROM n "
        "RETURNING *";

    assert_ok(apply_one(f, (struct req){.sql = "CREATE TABLE t(a, b)"}));
    r = apply_one(f,
                  (struct req){.sql = ins, .want_rows = 1, .max_result = 1024});
    assert_int_equal(r->rc, SQLITE_TOOBIG);
    assert_non_null(strstr(r->errmsg, "max_result_bytes (1024"));
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "0");
    r = apply_one(f,
                  (struct req){.sql = ins, .want_rows = 1, .max_result = 4096});
    assert_ok(r);
    assert_true(strlen(r->rows) <= 4096 && strlen(r->rows) > 2000);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "20");
}

/* The same id with the same request: the first outcome (changes, rowid,
 * rows), nothing applied again, also after a reopen; other SQL or other
 * parameters under the id: refused, nothing applied; a failed request's
 * outcome is replayed as that SQL error. */
static void test_client_id(void **state)
{
    struct fsm_fixture *f = *state;
    struct sql_param p1 = {NULL, {.type = SQL_INTEGER, .integer = 1}};
    struct sql_param p2 = {NULL, {.type = SQL_INTEGER, .integer = 2}};
    struct req a = {.sql = "INSERT INTO t(a) VALUES (?) RETURNING id, a",
                    .id = "k1",
                    .want_rows = 1,
                    .params = &p1,
                    .n_params = 1};
    struct req b = a, c = a, d = a;
    struct sql_result *r;
    char *first;

    b.params = &p2;
    c.sql = "INSERT INTO t(a) VALUES (?) RETURNING a";
    d.want_rows = 0;
    assert_ok(apply_one(
        f, (struct req){.sql = "CREATE TABLE t(id INTEGER PRIMARY KEY, a)"}));
    r = apply_one(f, a);
    assert_ok(r);
    assert_int_equal(r->id_duplicate, 0);
    first = strdup(r->rows);
    r = apply_one(f, a);
    assert_ok(r);
    assert_int_equal(r->id_duplicate, 1);
    assert_string_equal(r->rows, first);
    assert_true(r->changes == 1 && r->last_insert_rowid == 1);
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "1");
    apply(f, (struct req[]){b, c, d}, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->res[i].rc, SQLITE_CONSTRAINT);
        assert_non_null(strstr(f->res[i].errmsg,
                               "request id 'k1' was used for different "
                               "SQL or parameters"));
        assert_null(f->res[i].rows);
    }
    assert_query(f->tmp.path, "SELECT count(*) FROM t", "1");

    fsm_fixture_clear(f);
    sql_fsm_close(f->fsm);
    {
        char msg[256];
        assert_int_equal(
            sql_fsm_open(f->tmp.path, NULL, 0, &f->fsm, msg, sizeof msg), 0);
    }
    r = apply_one(f, a);
    assert_int_equal(r->id_duplicate, 1);
    assert_string_equal(r->rows, first);
    free(first);

    /* A failed request: its error is the stored outcome. */
    a.id = "\x01\x02";
    a.sql = "INSERT INTO nosuch VALUES (?)";
    r = apply_one(f, a);
    assert_int_equal(r->rc, SQLITE_ERROR);
    assert_string_equal(r->errmsg, "no such table: nosuch");
    assert_ok(apply_one(f, (struct req){.sql = "CREATE TABLE nosuch(x)"}));
    r = apply_one(f, a);
    assert_int_equal(r->id_duplicate, 1);
    assert_int_equal(r->rc, SQLITE_ERROR);
    assert_string_equal(r->errmsg, "no such table: nosuch");
    assert_query(f->tmp.path, "SELECT count(*) FROM nosuch", "0");
    /* A request that rolls the whole batch back (OR ROLLBACK): its
     * outcome is recorded at the batch's restart, and replayed. */
    assert_ok(apply_one(
        f, (struct req){.sql = "CREATE TABLE u(a PRIMARY KEY); INSERT INTO u "
                               "VALUES (1)"}));
    {
        struct req rb = {.sql = "INSERT OR ROLLBACK INTO u VALUES (1)",
                         .id = "rb"};
        apply(f, (struct req[]){{.sql = "INSERT INTO u VALUES (2)"}, rb}, 2);
        assert_ok(&f->res[0]);
        assert_int_equal(f->res[1].rc & 0xff, SQLITE_CONSTRAINT);
        apply(f, &rb, 1);
        assert_int_equal(f->res[0].id_duplicate, 1);
        assert_int_equal(f->res[0].rc & 0xff, SQLITE_CONSTRAINT);
        assert_query(f->tmp.path, "SELECT group_concat(a) FROM u", "1,2");
    }
    /* The id shows in hex when it is not printable. */
    a.sql = "SELECT 1";
    r = apply_one(f, a);
    assert_non_null(strstr(r->errmsg, "request id x'0102'"));
}

/* run_window applies, with batches of @batch entries, id "w" then
 * @n_between other ids, then "w" again, all with window @count by count
 * and @ms by time, the retry @dt ms later; returns whether the retry was
 * a duplicate. */
static int run_window(struct fsm_fixture *f, int batch, unsigned n_between,
                      uint64_t count, uint64_t ms, int64_t dt)
{
    struct req rs[MAX_BATCH];
    char ids[MAX_BATCH][16];
    unsigned total = n_between + 2, done = 0, k;
    int dup = -1;

    while (done < total) {
        for (k = 0; k < (unsigned)batch && done + k < total; k++) {
            unsigned i = done + k;
            memset(&rs[k], 0, sizeof rs[k]);
            rs[k].sql = "INSERT INTO t VALUES (1)";
            rs[k].window = count;
            rs[k].window_ms = ms;
            if (i == 0 || i == total - 1) {
                rs[k].id = "w";
            } else {
                snprintf(ids[k], sizeof ids[k], "o%u", i);
                rs[k].id = ids[k];
            }
            rs[k].time_ms = T0 + (i == total - 1 ? dt : 0);
        }
        apply(f, rs, k);
        done += k;
        if (done == total) {
            dup = f->res[k - 1].id_duplicate;
        }
    }
    return dup;
}

/* The window by count: with a window of 3, the retry is a duplicate after
 * 1 other id (ordinal distance 2), not after 3; by time: inside 1000 ms
 * yes, 1001 ms later no; the same whatever the batching. */
static void test_client_id_window(void **state)
{
    struct fsm_fixture *f = *state;
    static const int batches[] = {1, 2, 7};

    /* others between, window by count, by time, retry delay, dup */
    static const struct {
        unsigned between;
        uint64_t count, ms;
        int64_t dt;
        int dup;
    } cases[] = {
        {1, 3, 1000, 0, 1},      {2, 3, 1000, 0, 0},      {3, 3, 1000, 0, 0},
        {0, 100, 1000, 1000, 1}, {0, 100, 1000, 1001, 0},
    };

    assert_ok(apply_one(f, (struct req){.sql = "CREATE TABLE t(a)"}));
    for (unsigned b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            /* Each case starts clean: ids of before would count. */
            assert_int_equal(
                fsm_exec(f->fsm, "DELETE FROM raftsql_client_requests"), 0);
            assert_int_equal(
                run_window(f, batches[b], cases[c].between, cases[c].count,
                           cases[c].ms, cases[c].dt),
                cases[c].dup);
        }
    }
    /* Pruning keeps at most the window: 3 ids by count. */
    assert_query(f->tmp.path,
                 "SELECT count(*) <= 3 FROM raftsql_client_requests", "1");
    /* The ids are outside the replica checksum and the schema guard. */
    assert_query(f->tmp.path,
                 "SELECT count(*) FROM sqlite_schema WHERE name LIKE "
                 "'raftsql_client_requests%'",
                 "3");
}

/* A snapshot carries the client ids: a retry applied on a node restored
 * from it is still a duplicate. A snapshot of before client ids (no
 * table) installs, and the table is made anew. The ids stay outside the
 * replica checksum: the same SQL with or without an id sums alike. */
static void test_client_id_snapshot_and_checksum(void **state)
{
    struct fsm_fixture *f = *state;
    struct req a = {.sql = "INSERT INTO t VALUES (1)", .id = "snap"};
    struct sql_fsm *g;
    struct tmpdb other;
    char snap[600], msg[256];
    uint64_t idx, term, va = 0, vb = 0;

    assert_int_equal(sql_fsm_checksum_enable(f->fsm, 1), 0);
    assert_ok(apply_one(f, (struct req){.sql = "CREATE TABLE t(a)"}));
    assert_ok(apply_one(f, a));
    assert_int_equal(sql_fsm_checksum(f->fsm, &va), 1);

    /* The same two requests without an id, on another replica. */
    tmpdb_init(&other);
    assert_int_equal(sql_fsm_open(other.path, NULL, 0, &g, msg, sizeof msg), 0);
    assert_int_equal(sql_fsm_checksum_enable(g, 1), 0);
    {
        struct sql_fsm *keep = f->fsm;
        f->fsm = g;
        assert_ok(apply_one(f, (struct req){.sql = "CREATE TABLE t(a)"}));
        assert_ok(apply_one(f, (struct req){.sql = a.sql}));
        assert_int_equal(sql_fsm_checksum(g, &vb), 1);
        assert_true(va == vb);

        /* Restored from f's snapshot, g knows the id. */
        snprintf(snap, sizeof snap, "%s.snap", other.path);
        assert_int_equal(
            sql_fsm_snapshot_create(keep, snap, &idx, &term, msg, sizeof msg),
            0);
        fsm_fixture_clear(f);
        assert_int_equal(sql_fsm_snapshot_install(g, snap, &idx, &term), 0);
        assert_int_equal(apply_one(f, a)->id_duplicate, 1);
        assert_query(other.path, "SELECT count(*) FROM t", "1");
        remove(snap);

        /* A snapshot without the table (an older release's). */
        assert_int_equal(fsm_exec(keep, "DROP TABLE raftsql_client_requests"),
                         0);
        assert_int_equal(
            sql_fsm_snapshot_create(keep, snap, &idx, &term, msg, sizeof msg),
            0);
        fsm_fixture_clear(f);
        assert_int_equal(sql_fsm_snapshot_install(g, snap, &idx, &term), 0);
        assert_int_equal(apply_one(f, a)->id_duplicate, 0);
        assert_int_equal(apply_one(f, a)->id_duplicate, 1);
        assert_query(other.path, "SELECT count(*) FROM t", "2");
        remove(snap);
        fsm_fixture_clear(f);
        f->fsm = keep;
    }
    sql_fsm_close(g);
    tmpdb_remove(&other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_v3),
        cmocka_unit_test_setup_teardown(test_rows_types, fsm_fixture_setup,
                                        fsm_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_rows_multi_and_rollback,
                                        fsm_fixture_setup,
                                        fsm_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_rows_cap, fsm_fixture_setup,
                                        fsm_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_error_statement_offset,
                                        fsm_fixture_setup,
                                        fsm_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_client_id, fsm_fixture_setup,
                                        fsm_fixture_teardown),
        cmocka_unit_test_setup_teardown(
            test_client_id_window, fsm_fixture_setup, fsm_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_client_id_snapshot_and_checksum,
                                        fsm_fixture_setup,
                                        fsm_fixture_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
