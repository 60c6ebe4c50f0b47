/* Tests of the changeset (sql/changeset.h): the codec's round trip of
 * every record kind and value type and its refusal of every malformed
 * payload; the capture on a real connection, each fact its rules rest on
 * checked against an explicit list of the records a COMMIT sends. */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sql/changeset.h"
#include "sql/changeset_internal.h"
#include "sql/codec.h"
#include "tests/sql/helpers.h"

/* ---- Rendering -------------------------------------------------------- */

/* A growing text. */
struct text {
    char s[16384]; /* NUL-terminated */
    size_t len;    /* chars in s */
};

static void text_add(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(t->s + t->len, sizeof t->s - t->len, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof t->s - t->len);
    t->len += (size_t)n;
}

static void render_value(struct text *t, const struct sql_value *v)
{
    size_t i;

    switch (v->type) {
        case SQL_INTEGER:
            text_add(t, "%lld", (long long)v->integer);
            break;
        case SQL_FLOAT:
            text_add(t, "%.17g", v->real);
            break;
        case SQL_TEXT:
            text_add(t, "'%.*s'", (int)v->bytes.len, (const char *)v->bytes.p);
            break;
        case SQL_BLOB:
            text_add(t, "x'");
            for (i = 0; i < v->bytes.len; i++) {
                text_add(t, "%02x", ((const unsigned char *)v->bytes.p)[i]);
            }
            text_add(t, "'");
            break;
        default:
            text_add(t, "NULL");
    }
}

static void render_row(struct text *t, const struct sql_value *row, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++) {
        text_add(t, i == 0 ? "" : ",");
        render_value(t, &row[i]);
    }
}

/* render writes one line per record: "INSERT t 1: 1,'a'", "UPDATE t
 * 1->2: old -> new", "DELETE t 1: old", "SCHEMA text"; without values
 * when @values is 0 (shadow tables' opaque blobs). */
static void render(struct text *t, const struct sql_changeset *cs, int values)
{
    unsigned i;

    for (i = 0; i < cs->n; i++) {
        const struct sql_change *ch = &cs->changes[i];

        switch (ch->kind) {
            case SQL_CHANGE_SCHEMA:
                if (ch->in_txn) {
                    text_add(t, "SCHEMA-IN-TXN 0x%02x %.*s\n", ch->settings,
                             (int)ch->sql_len, ch->sql);
                } else {
                    text_add(t, "SCHEMA %.*s\n", (int)ch->sql_len, ch->sql);
                }
                continue;
            case SQL_CHANGE_INSERT:
                text_add(t, "INSERT %.*s %lld", (int)ch->table_len, ch->table,
                         (long long)ch->new_rowid);
                break;
            case SQL_CHANGE_UPDATE:
                text_add(t, "UPDATE %.*s %lld->%lld", (int)ch->table_len,
                         ch->table, (long long)ch->old_rowid,
                         (long long)ch->new_rowid);
                break;
            default:
                text_add(t, "DELETE %.*s %lld", (int)ch->table_len, ch->table,
                         (long long)ch->old_rowid);
        }
        if (values) {
            text_add(t, ": ");
            if (ch->old_row != NULL) {
                render_row(t, ch->old_row, ch->n_cols);
            }
            if (ch->old_row != NULL && ch->new_row != NULL) {
                text_add(t, " -> ");
            }
            if (ch->new_row != NULL) {
                render_row(t, ch->new_row, ch->n_cols);
            }
        }
        text_add(t, "\n");
    }
}

/* ---- Capture fixture -------------------------------------------------- */

/* A host connection with a capture whose commit hook takes each
 * transaction and logs what it sent or why it was refused. */
struct cap {
    sqlite3 *db;
    struct sql_capture *c;
    int past_guard;  /* arm_on_write arms nothing (a write prepared past
                        the guard) */
    uint64_t id[2];  /* origin id of the next take */
    int values;      /* render values */
    struct text log; /* "COMMIT\n" + records, or "REFUSED rc: why\n" */
};

static int on_commit(void *data)
{
    struct cap *f = data;
    struct sql_changeset cs;
    char err[512];
    void *p = NULL;
    size_t len = 0;
    int rc;

    rc = sql_capture_take(f->c, f->id, 7, &p, &len, err, sizeof err);
    if (rc != 0) {
        text_add(&f->log, "REFUSED %s: %s\n", sql_strerror(rc), err);
        return 0;
    }
    assert_true(sql_changeset_is(p, len));
    rc = sql_changeset_decode(p, len, &cs, err, sizeof err);
    if (rc != 0) {
        fail_msg("decode of a taken changeset: %s", err);
    }
    assert_int_equal(cs.id[0], f->id[0]);
    assert_int_equal(cs.id[1], f->id[1]);
    assert_int_equal(cs.lease, 7);
    f->id[1]++;
    text_add(&f->log, "COMMIT\n");
    render(&f->log, &cs, f->values);
    sql_changeset_free(&cs);
    free(p);
    return 0;
}

/* arm_on_write is the fixture's authorizer, in the guard's place: it
 * arms the capture (sql_capture_arm) as a statement that is not a read
 * is prepared, unless f->past_guard; as the guard, not for an ATTACH or
 * DETACH, or what a VACUUM does in vacuum_db. */
static int arm_on_write(void *arg, int action, const char *a1, const char *a2,
                        const char *db_name, const char *trigger)
{
    struct cap *f = arg;
    (void)a1;
    (void)a2;
    (void)trigger;

    if (action != SQLITE_READ && action != SQLITE_SELECT &&
        action != SQLITE_FUNCTION && action != SQLITE_RECURSIVE &&
        action != SQLITE_ATTACH && action != SQLITE_DETACH &&
        (db_name == NULL || strcmp(db_name, "vacuum_db") != 0) &&
        f->c != NULL && !f->past_guard) {
        sql_capture_arm(f->c);
    }
    return SQLITE_OK;
}

static struct cap *cap_open_path(const char *path, uint64_t max_bytes)
{
    struct cap *f = calloc(1, sizeof *f);
    char why[256];

    assert_non_null(f);
    assert_int_equal(sqlite3_open(path, &f->db), SQLITE_OK);
    if (sql_capture_open(f->db, max_bytes, &f->c, why, sizeof why) != 0) {
        fail_msg("capture: %s", why);
    }
    sqlite3_commit_hook(f->db, on_commit, f);
    sqlite3_set_authorizer(f->db, arm_on_write, f);
    f->id[0] = 3;
    f->id[1] = 1;
    f->values = 1;
    return f;
}

static struct cap *cap_open(uint64_t max_bytes)
{
    return cap_open_path(":memory:", max_bytes);
}

static void cap_close(struct cap *f)
{
    sql_capture_close(f->c, 0);
    assert_int_equal(sqlite3_close(f->db), SQLITE_OK);
    free(f);
}

/* run executes @sql; returns SQLite's code (failures are often the
 * point). */
static int run(struct cap *f, const char *sql)
{
    return sqlite3_exec(f->db, sql, NULL, NULL, NULL);
}

/* ok executes @sql, which must succeed. */
static void ok(struct cap *f, const char *sql)
{
    char *err = NULL;

    if (sqlite3_exec(f->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fail_msg("%s: %s", sql, err);
    }
}

/* expect checks what the commits since the last call logged. */
static void expect(struct cap *f, const char *want)
{
    if (strcmp(f->log.s, want) != 0) {
        fail_msg("got:\n%s\nwant:\n%s", f->log.s, want);
    }
    f->log.len = 0;
    f->log.s[0] = 0;
}

/* setup runs @sql with the capture's records forgotten (set-up that is no
 * part of the test), leaving the log empty. */
static void setup(struct cap *f, const char *sql)
{
    ok(f, sql);
    f->log.len = 0;
    f->log.s[0] = 0;
    sql_capture_reset(f->c);
}

/* ---- Codec ------------------------------------------------------------ */

static const unsigned char blob3[] = {0x00, 0xff, 0x10};
static const char text_nul[] = {'a', '\0', 'b'};

/* A payload built with the encoder's pieces, as the capture builds one. */
struct payload {
    uint8_t b[4096];
    size_t len;
    uint32_t n;
};

static void add_values(struct payload *pl, const struct sql_value *vs,
                       unsigned n)
{
    unsigned i;
    int bad = 0;

    for (i = 0; i < n; i++) {
        pl->b[pl->len++] = vs[i].type;
        pl->len += (size_t)codec_value_size(&vs[i], &bad);
        codec_value_put(pl->b + pl->len - codec_value_size(&vs[i], &bad),
                        &vs[i]);
    }
    assert_int_equal(bad, 0);
}

static void add_row(struct payload *pl, uint8_t kind, const char *table,
                    int64_t old_rowid, int64_t new_rowid,
                    const struct sql_value *old_row,
                    const struct sql_value *new_row, unsigned n_cols)
{
    uint8_t *p =
        changeset_codec_row(pl->b + pl->len, kind, table, strlen(table),
                            old_rowid, new_rowid, n_cols);
    pl->len = (size_t)(p - pl->b);
    if (old_row != NULL) {
        add_values(pl, old_row, n_cols);
    }
    if (new_row != NULL) {
        add_values(pl, new_row, n_cols);
    }
    pl->n++;
}

static void add_schema(struct payload *pl, const char *sql)
{
    uint8_t *p = changeset_codec_schema(pl->b + pl->len, sql, strlen(sql));
    pl->len = (size_t)(p - pl->b);
    pl->n++;
}

static void finish(struct payload *pl)
{
    const uint64_t id[2] = {0x0102030405060708u, 0xfffffffffffffffeu};

    changeset_codec_header(pl->b, id, 0xabcdefu, pl->n);
}

/* sample builds one record of each kind, with every value type and its
 * edges. */
static void sample(struct payload *pl)
{
    struct sql_value all[8], two[2];

    memset(pl, 0, sizeof *pl);
    pl->len = SQL_CHANGESET_HEADER;
    memset(all, 0, sizeof all);
    all[0].type = SQL_INTEGER;
    all[0].integer = INT64_MIN;
    all[1].type = SQL_INTEGER;
    all[1].integer = INT64_MAX;
    all[2].type = SQL_FLOAT;
    all[2].real = -0.0;
    all[3].type = SQL_FLOAT;
    all[3].real = 0.1;
    all[4].type = SQL_TEXT;
    all[4].bytes.p = text_nul;
    all[4].bytes.len = sizeof text_nul;
    all[5].type = SQL_BLOB;
    all[5].bytes.p = blob3;
    all[5].bytes.len = sizeof blob3;
    all[6].type = SQL_BLOB; /* zero-length blob */
    all[7].type = SQL_NULL;
    two[0].type = SQL_INTEGER;
    two[0].integer = 1;
    two[1].type = SQL_TEXT;
    two[1].bytes.p = "";
    two[1].bytes.len = 0;
    add_schema(pl, "CREATE TABLE t(a, b)");
    add_row(pl, SQL_CHANGE_INSERT, "t", 0, -5, NULL, all, 8);
    add_row(pl, SQL_CHANGE_UPDATE, "tt", INT64_MIN, INT64_MAX, all, all, 8);
    add_row(pl, SQL_CHANGE_DELETE, "w", 9, 0, two, NULL, 2);
    finish(pl);
}

/* Every kind and value type comes back as encoded, bit for bit. */
static void test_codec_round_trip(void **state)
{
    struct payload pl;
    struct sql_changeset cs;
    struct text t = {{0}, 0};
    char err[256];

    (void)state;
    sample(&pl);
    assert_int_equal(sql_changeset_decode(pl.b, pl.len, &cs, err, sizeof err),
                     0);
    assert_int_equal(cs.id[0], 0x0102030405060708u);
    assert_int_equal(cs.id[1], 0xfffffffffffffffeu);
    assert_int_equal(cs.lease, 0xabcdefu);
    assert_int_equal(cs.n, 4);
    assert_null(cs.changes[0].table);
    assert_null(cs.changes[1].old_row);
    assert_null(cs.changes[3].new_row);
    assert_int_equal(cs.changes[1].new_row[4].bytes.len, 3);
    assert_memory_equal(cs.changes[1].new_row[4].bytes.p, text_nul, 3);
    assert_true(signbit(cs.changes[1].new_row[2].real));
    assert_int_equal(cs.changes[1].new_row[6].type, SQL_BLOB);
    assert_int_equal(cs.changes[1].new_row[6].bytes.len, 0);
    render(&t, &cs, 1);
    assert_string_equal(
        t.s,
        "SCHEMA CREATE TABLE t(a, b)\n"
        "INSERT t -5: -9223372036854775808,9223372036854775807,-0,"
        "0.10000000000000001,'a',x'00ff10',x'',NULL\n"
        "UPDATE tt -9223372036854775808->9223372036854775807: "
        "-9223372036854775808,9223372036854775807,-0,0.10000000000000001,"
        "'a',x'00ff10',x'',NULL -> -9223372036854775808,9223372036854775807,"
        "-0,0.10000000000000001,'a',x'00ff10',x'',NULL\n"
        "DELETE w 9: 1,''\n");
    sql_changeset_free(&cs);
    assert_null(cs.changes);
    sql_changeset_free(NULL);
    assert_false(sql_changeset_is("RQ", 2));
    assert_false(sql_changeset_is("C", 1));
}

/* Each prefix of a valid payload is refused as truncated, never read
 * past its end (ASan), and so is one byte more. */
static void test_codec_truncations(void **state)
{
    struct payload pl;
    struct sql_changeset cs;
    char err[256];
    size_t n;
    uint8_t *copy;

    (void)state;
    sample(&pl);
    for (n = 0; n < pl.len; n++) {
        copy = malloc(n + 1);
        assert_non_null(copy);
        memcpy(copy, pl.b, n);
        assert_int_equal(sql_changeset_decode(copy, n, &cs, err, sizeof err),
                         SQL_ERR_CORRUPT);
        assert_true(err[0] != 0);
        free(copy);
    }
    pl.b[pl.len] = 0;
    assert_int_equal(
        sql_changeset_decode(pl.b, pl.len + 1, &cs, err, sizeof err),
        SQL_ERR_CORRUPT);
    assert_non_null(strstr(err, "1 trailing bytes after record 4"));
}

/* refused decodes @pl with byte @off set to @v and checks the code and
 * that the message holds @msg. */
static void refused(const struct payload *pl, size_t off, uint8_t v, int rc,
                    const char *msg)
{
    struct payload m = *pl;
    struct sql_changeset cs;
    char err[256];

    m.b[off] = v;
    assert_int_equal(sql_changeset_decode(m.b, m.len, &cs, err, sizeof err),
                     rc);
    if (strstr(err, msg) == NULL) {
        fail_msg("offset %zu = %u: \"%s\" lacks \"%s\"", off, v, err, msg);
    }
}

/* Every malformed field is refused with a message naming the record. */
static void test_codec_malformed(void **state)
{
    struct payload pl, one;
    struct sql_value v;
    /* Offsets in sample(): schema record at 32 (kind, len u32, 20 bytes
     * of text), the INSERT at 57: kind, name len at 58, name at 60,
     * rowids at 61, n_cols at 77, first value's type at 79. */
    const size_t ins = 32 + 5 + 20;

    (void)state;
    sample(&pl);
    refused(&pl, 0, 'R', SQL_ERR_CORRUPT, "not a changeset");
    refused(&pl, 2, 2, SQL_ERR_FORMAT, "version 2 is not supported");
    refused(&pl, 2, 0, SQL_ERR_FORMAT, "version 0");
    refused(&pl, 3, 1, SQL_ERR_CORRUPT, "flags 0x01");
    refused(&pl, 28, 0, SQL_ERR_CORRUPT, "trailing bytes after record 0");
    refused(&pl, 28, 5, SQL_ERR_CORRUPT, "record 5: kind needs 1 bytes");
    refused(&pl, 28, 3, SQL_ERR_CORRUPT, "trailing bytes after record 3");
    refused(&pl, 31, 0x40, SQL_ERR_CORRUPT, "cannot fit");
    refused(&pl, 32, 0, SQL_ERR_CORRUPT, "record 1: kind 0");
    refused(&pl, 32, 6, SQL_ERR_CORRUPT, "record 1: kind 6");
    /* Kind 5 reads a settings byte, here the length's 20 (0x14). */
    refused(&pl, 32, 5, SQL_ERR_CORRUPT, "record 1: settings 20");
    refused(&pl, 33, 0, SQL_ERR_CORRUPT, "record 1: SQL length");
    refused(&pl, 36, 1, SQL_ERR_CORRUPT, "record 1: SQL text needs");
    refused(&pl, 40, 0, SQL_ERR_CORRUPT, "record 1: SQL text contains a NUL");
    refused(&pl, ins, 9, SQL_ERR_CORRUPT, "record 2: kind 9");
    refused(&pl, ins + 1, 0, SQL_ERR_CORRUPT, "record 2: table name length 0");
    refused(&pl, ins + 2, 0xff, SQL_ERR_CORRUPT,
            "record 2: table name and rowids needs");
    refused(&pl, ins + 20, 0, SQL_ERR_CORRUPT, "record 2: column count 0");
    refused(&pl, ins + 20, 0xff, SQL_ERR_CORRUPT, "record 2: value type 0");
    refused(&pl, pl.len - 4, 9, SQL_ERR_CORRUPT, "record 4: old row needs 13");
    refused(&pl, ins + 22, 0, SQL_ERR_CORRUPT, "record 2: value type 0");
    refused(&pl, ins + 22, 6, SQL_ERR_CORRUPT, "record 2: value type 6");

    /* A TEXT value whose length runs past the end. */
    memset(&one, 0, sizeof one);
    one.len = SQL_CHANGESET_HEADER;
    memset(&v, 0, sizeof v);
    v.type = SQL_TEXT;
    v.bytes.p = "xy";
    v.bytes.len = 2;
    add_row(&one, SQL_CHANGE_DELETE, "t", 1, 0, &v, NULL, 1);
    finish(&one);
    refused(&one, one.len - 6, 3, SQL_ERR_CORRUPT, "record 1: old row needs 7");
}

/* A schema record run inside a transaction carries its writer's
 * settings; bits the format does not define are refused. */
static void test_codec_schema_in_txn(void **state)
{
    struct payload pl;
    struct sql_changeset cs;
    struct text t = {{0}, 0};
    char err[256];
    uint8_t *p;

    (void)state;
    memset(&pl, 0, sizeof pl);
    pl.len = SQL_CHANGESET_HEADER;
    p = changeset_codec_schema_in_txn(pl.b + pl.len,
                                      SQL_SCHEMA_FKEY | SQL_SCHEMA_DQS_DDL,
                                      "CREATE INDEX i ON t(a)", 22);
    assert_int_equal(p - (pl.b + pl.len), SQL__CHANGE_SCHEMA_IN_TXN_FIXED + 22);
    pl.len = (size_t)(p - pl.b);
    pl.n = 1;
    add_schema(&pl, "DROP TABLE u");
    finish(&pl);
    assert_int_equal(sql_changeset_decode(pl.b, pl.len, &cs, err, sizeof err),
                     0);
    assert_int_equal(cs.changes[0].kind, SQL_CHANGE_SCHEMA);
    assert_int_equal(cs.changes[0].in_txn, 1);
    assert_int_equal(cs.changes[1].in_txn, 0);
    render(&t, &cs, 1);
    assert_string_equal(t.s,
                        "SCHEMA-IN-TXN 0x09 CREATE INDEX i ON t(a)\n"
                        "SCHEMA DROP TABLE u\n");
    sql_changeset_free(&cs);
    refused(&pl, 33, 0x10, SQL_ERR_CORRUPT, "record 1: settings 16");
    refused(&pl, 34, 0, SQL_ERR_CORRUPT, "record 1: SQL length 0");
}

/* ---- Capture: rows ---------------------------------------------------- */

/* Autocommit writes of every kind and value type, on rowid, WITHOUT
 * ROWID and rowid-alias tables; only main and no internal table. */
static void test_capture_rows(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b, c, d, e);"
          "CREATE TABLE w(k TEXT PRIMARY KEY, v) WITHOUT ROWID;"
          "CREATE TABLE n(v);"
          "CREATE TABLE raftsql_x(v); CREATE TABLE RAFTSQL_Y(v);"
          "CREATE TEMP TABLE tmp(v);"
          "ATTACH ':memory:' AS aux; CREATE TABLE aux.t(v)");
    ok(f, "INSERT INTO t VALUES(1, 2.5, 'x', x'00ff', NULL)");
    ok(f, "UPDATE t SET a = 2, b = -1 WHERE a = 1");
    ok(f, "DELETE FROM t");
    ok(f, "INSERT INTO w VALUES('k', 1)");
    ok(f, "INSERT INTO n VALUES(42)");
    ok(f,
       "BEGIN; INSERT INTO raftsql_x VALUES(1); INSERT INTO RAFTSQL_Y "
       "VALUES(1); INSERT INTO temp.tmp VALUES(1); INSERT INTO aux.t "
       "VALUES(1); INSERT INTO n VALUES(43); COMMIT");
    expect(f,
           "COMMIT\nINSERT t 1: 1,2.5,'x',x'00ff',NULL\n"
           "COMMIT\nUPDATE t 1->2: 1,2.5,'x',x'00ff',NULL -> "
           "2,-1,'x',x'00ff',NULL\n"
           "COMMIT\nDELETE t 2: 2,-1,'x',x'00ff',NULL\n"
           "COMMIT\nINSERT w 0: 'k',1\n"
           "COMMIT\nINSERT n 1: 42\n"
           "COMMIT\nINSERT n 2: 43\n");
    /* A transaction of only internal or unreplicated writes sends
     * nothing. */
    ok(f, "INSERT INTO raftsql_x VALUES(2)");
    expect(f,
           "REFUSED invalid argument: nothing to send: the transaction "
           "wrote no replicated row or schema\n");
    assert_int_equal(sql_capture_pending(f->c), 0);
    cap_close(f);
}

/* A failing statement in autocommit mode sends nothing (rollback hook);
 * OR FAIL keeps the rows before the failure. */
static void test_capture_autocommit_failures(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b UNIQUE);"
          "INSERT INTO t VALUES(1, 'a')");
    assert_int_equal(run(f, "INSERT INTO t VALUES(3, 'c'), (4, 'a')"),
                     SQLITE_CONSTRAINT);
    assert_int_equal(sql_capture_pending(f->c), 0);
    assert_int_equal(run(f, "INSERT OR FAIL INTO t VALUES(5, 'e'), (6, 'a')"),
                     SQLITE_CONSTRAINT);
    assert_int_equal(run(f,
                         "INSERT OR ROLLBACK INTO t VALUES(7, 'g'), "
                         "(8, 'a')"),
                     SQLITE_CONSTRAINT);
    expect(f, "COMMIT\nINSERT t 5: 5,'e'\n");
    cap_close(f);
}

/* Inside BEGIN a failing statement's rows (its own, its triggers', its
 * foreign key actions') are dropped at its PROFILE; OR FAIL keeps the
 * rows before the failure; OR ROLLBACK drops everything. */
static void test_capture_statement_rollback(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "PRAGMA foreign_keys = ON;"
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b UNIQUE);"
          "CREATE TABLE log(x);"
          "CREATE TRIGGER tg AFTER INSERT ON t BEGIN "
          "INSERT INTO log VALUES(new.a); END;"
          "CREATE TABLE p(id INTEGER PRIMARY KEY);"
          "CREATE TABLE c(id INTEGER PRIMARY KEY, pid REFERENCES p "
          "ON DELETE CASCADE);"
          "INSERT INTO p VALUES(1), (2); INSERT INTO c VALUES(10, 1)");
    ok(f, "BEGIN");
    ok(f, "INSERT INTO t VALUES(1, 'a')");
    assert_int_equal(run(f, "INSERT INTO t VALUES(2, 'b'), (3, 'a')"),
                     SQLITE_CONSTRAINT);
    assert_int_equal(run(f, "INSERT OR FAIL INTO t VALUES(4, 'd'), (5, 'a')"),
                     SQLITE_CONSTRAINT);
    ok(f, "DELETE FROM p WHERE id = 1");
    /* An immediate foreign key failure, found at the statement's end. */
    assert_int_equal(run(f, "INSERT INTO c VALUES(11, 99)"), SQLITE_CONSTRAINT);
    ok(f, "COMMIT");
    expect(f,
           "COMMIT\n"
           "INSERT t 1: 1,'a'\n"
           "INSERT log 1: 1\n"
           "INSERT t 4: 4,'d'\n"
           "INSERT log 2: 4\n" /* rowid 2 again: the failed one's undone */
           "DELETE p 1: 1\n"
           "DELETE c 10: 10,1\n");
    ok(f, "BEGIN; INSERT INTO t VALUES(6, 'f')");
    assert_int_equal(run(f, "INSERT OR ROLLBACK INTO t VALUES(7, 'a')"),
                     SQLITE_CONSTRAINT);
    assert_int_equal(sql_capture_pending(f->c), 0);
    assert_int_equal(run(f, "COMMIT"), SQLITE_ERROR); /* none active */
    expect(f, "");
    cap_close(f);
}

/* REPLACE and UPSERT, in a transaction, are recorded as SQLite does
 * them: the replaced row's DELETE, then the INSERT. */
static void test_capture_replace_upsert(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b UNIQUE);"
          "INSERT INTO t VALUES(1, 'a'), (2, 'b')");
    ok(f, "BEGIN");
    ok(f, "INSERT OR REPLACE INTO t VALUES(3, 'a')");
    ok(f, "INSERT INTO t VALUES(4, 'b') ON CONFLICT(b) DO UPDATE SET a = 9");
    ok(f, "INSERT INTO t VALUES(5, 'b') ON CONFLICT(b) DO NOTHING");
    ok(f, "REPLACE INTO t VALUES(9, 'z')");
    /* A REPLACE that then fails is dropped whole. */
    assert_int_equal(run(f,
                         "REPLACE INTO t VALUES(6, 'z'), (7, NULL), "
                         "(8, 'q'), ('x', 'y')"),
                     SQLITE_MISMATCH);
    ok(f, "COMMIT");
    expect(f,
           "COMMIT\n"
           "DELETE t 1: 1,'a'\n"
           "INSERT t 3: 3,'a'\n"
           "UPDATE t 2->9: 2,'b' -> 9,'b'\n"
           "DELETE t 9: 9,'b'\n"
           "INSERT t 9: 9,'z'\n");
    cap_close(f);
}

/* ---- Capture: savepoints ---------------------------------------------- */

/* ROLLBACK TO drops back to its savepoint's mark, in every spelling;
 * RELEASE pops the nested ones; names are case-insensitive and may be
 * quoted. */
static void test_capture_savepoints(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f, "CREATE TABLE t(a INTEGER PRIMARY KEY)");
    ok(f, "BEGIN; INSERT INTO t VALUES(1)");
    ok(f, "SAVEPOINT a; INSERT INTO t VALUES(2)");
    ok(f, "SAVEPOINT \"B b\"; INSERT INTO t VALUES(3)");
    ok(f, "/* c */ ROLLBACK TRANSACTION TO SAVEPOINT \"b B\"");
    ok(f, "INSERT INTO t VALUES(4)");
    ok(f, "savepoint [c]; INSERT INTO t VALUES(5); rollback to C");
    ok(f, "RELEASE a"); /* pops "B b" and c */
    ok(f, "SAVEPOINT 'q''s'; INSERT INTO t VALUES(6)");
    ok(f, "ROLLBACK TO `q's`");
    ok(f, "RELEASE SAVEPOINT 'q''s'");
    ok(f, "COMMIT");
    expect(f, "COMMIT\nINSERT t 1: 1\nINSERT t 2: 2\nINSERT t 4: 4\n");

    /* After RELEASE a, "ROLLBACK TO a" is no such savepoint: nothing is
     * dropped; a same-named outer savepoint is found once the inner is
     * released. */
    ok(f,
       "BEGIN; SAVEPOINT x; INSERT INTO t VALUES(10); SAVEPOINT x;"
       "INSERT INTO t VALUES(11); RELEASE x; INSERT INTO t VALUES(12)");
    ok(f, "ROLLBACK TO x; INSERT INTO t VALUES(13); COMMIT");
    expect(f, "COMMIT\nINSERT t 13: 13\n");

    /* A SAVEPOINT outside BEGIN starts the transaction; ROLLBACK TO it
     * keeps the transaction; its RELEASE commits. */
    ok(f,
       "SAVEPOINT s; INSERT INTO t VALUES(20); ROLLBACK TO s;"
       "INSERT INTO t VALUES(21); SAVEPOINT n; INSERT INTO t VALUES(22)");
    ok(f, "RELEASE s");
    expect(f, "COMMIT\nINSERT t 21: 21\nINSERT t 22: 22\n");

    /* A full ROLLBACK fires the rollback hook. */
    ok(f, "BEGIN; INSERT INTO t VALUES(30); ROLLBACK");
    assert_int_equal(sql_capture_pending(f->c), 0);
    expect(f, "");
    cap_close(f);
}

/* ---- Capture: triggers, views, virtual tables ------------------------- */

/* A write through INSTEAD OF triggers is recorded in autocommit mode;
 * inside a transaction it poisons it (success and failure look alike). */
static void test_capture_instead_of(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b UNIQUE);"
          "CREATE VIEW v AS SELECT * FROM t;"
          "CREATE TRIGGER vi INSTEAD OF INSERT ON v BEGIN "
          "INSERT INTO t VALUES(new.a, new.b); END");
    ok(f, "INSERT INTO v VALUES(1, 1), (2, 2)");
    assert_int_equal(run(f, "INSERT INTO v VALUES(3, 3), (4, 1)"),
                     SQLITE_CONSTRAINT);
    expect(f, "COMMIT\nINSERT t 1: 1,1\nINSERT t 2: 2,2\n");
    ok(f, "BEGIN; INSERT INTO v VALUES(5, 5); COMMIT");
    expect(f,
           "REFUSED invalid argument: a write through INSTEAD OF "
           "triggers inside a transaction cannot be replicated (SQLite "
           "does not tell whether it failed): run it in autocommit "
           "mode\n");
    cap_close(f);
}

/* FTS5 and R*Tree write their shadow tables through nested statements:
 * those rows are recorded, and dropped with the outer statement that
 * fails; CREATE VIRTUAL TABLE is one schema record. */
static void test_capture_virtual_tables(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    f->values = 0;
    ok(f, "CREATE VIRTUAL TABLE ft USING fts5(x)");
    expect(
        f,
        "COMMIT\nSCHEMA-IN-TXN 0x0a CREATE VIRTUAL TABLE ft USING fts5(x)\n");
    ok(f, "BEGIN; INSERT INTO ft(rowid, x) VALUES(1, 'hello world')");
    assert_int_equal(run(f, "INSERT INTO ft(rowid, x) VALUES(1, 'dup')"),
                     SQLITE_CONSTRAINT);
    ok(f, "COMMIT");
    expect(f,
           "COMMIT\n"
           "INSERT ft_content 1\n"
           "INSERT ft_docsize 1\n"
           "DELETE ft_data 1\n"
           "INSERT ft_data 1\n"
           "INSERT ft_data 137438953473\n"
           "INSERT ft_idx 0\n"
           "DELETE ft_data 10\n"
           "INSERT ft_data 10\n");
    ok(f, "CREATE VIRTUAL TABLE rt USING rtree(id, x0, x1)");
    expect(f,
           "COMMIT\nSCHEMA-IN-TXN 0x0a CREATE VIRTUAL TABLE rt USING "
           "rtree(id, x0, "
           "x1)\n");
    ok(f, "BEGIN; INSERT INTO rt VALUES(1, 0, 1)");
    assert_int_equal(run(f, "INSERT INTO rt VALUES(2, 0, 1), (3, 5, 1)"),
                     SQLITE_CONSTRAINT);
    ok(f, "COMMIT");
    expect(f,
           "COMMIT\n"
           "INSERT rt_rowid 1\n"
           "DELETE rt_node 1\n"
           "INSERT rt_node 1\n");
    cap_close(f);
}

/* ---- Capture: statements reset, interrupted, re-prepared -------------- */

/* step_some steps @sql @n times (each must give a row), then resets it. */
/* write_twice is a SQL function w() that writes two rows of n through
 * its own connection (the argument's), each INSERT nested in the
 * statement that called it. */
static void write_twice(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    (void)argc;
    (void)argv;
    if (sqlite3_exec(db, "INSERT INTO n VALUES(1); INSERT INTO n VALUES(2)",
                     NULL, NULL, NULL) != SQLITE_OK) {
        sqlite3_result_error(ctx, sqlite3_errmsg(db), -1);
        return;
    }
    sqlite3_result_int(ctx, 2);
}

/* make_table is a SQL function mk() that creates table z through its
 * own connection, nested in the statement that called it. */
static void make_table(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    (void)argc;
    (void)argv;
    if (sqlite3_exec(db, "CREATE TABLE z(v)", NULL, NULL, NULL) != SQLITE_OK) {
        sqlite3_result_error(ctx, sqlite3_errmsg(db), -1);
        return;
    }
    sqlite3_result_int(ctx, 1);
}

/* Reads at rest (a SELECT, WITH or VALUES with no transaction open) are
 * let through without a mark (quiet_read): writes nested in one, and
 * the transactions around them, are recorded as before. */
static void test_capture_reads_at_rest(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f, "CREATE TABLE n(v)");
    assert_int_equal(sqlite3_create_function(f->db, "w", 0, SQLITE_UTF8, NULL,
                                             write_twice, NULL, NULL),
                     SQLITE_OK);
    ok(f, "SELECT w()");
    ok(f, "WITH x(v) AS (SELECT w()) SELECT v FROM x");
    ok(f, "VALUES(w())");
    expect(f,
           "COMMIT\nINSERT n 1: 1\nCOMMIT\nINSERT n 2: 2\n"
           "COMMIT\nINSERT n 3: 1\nCOMMIT\nINSERT n 4: 2\n"
           "COMMIT\nINSERT n 5: 1\nCOMMIT\nINSERT n 6: 2\n");
    /* A schema statement nested in one (SQLite traces it as "-- " and
     * its text) is recorded as such. */
    assert_int_equal(sqlite3_create_function(f->db, "mk", 0, SQLITE_UTF8, NULL,
                                             make_table, NULL, NULL),
                     SQLITE_OK);
    ok(f, "SELECT mk()");
    expect(f, "COMMIT\nSCHEMA-IN-TXN 0x0a CREATE TABLE z(v)\n");
    /* Inside a transaction, the same reads and writes are one commit. */
    ok(f,
       "BEGIN; SELECT count(*) FROM n; SELECT w(); INSERT INTO n "
       "VALUES(3); SELECT v FROM n; COMMIT");
    expect(f, "COMMIT\nINSERT n 7: 1\nINSERT n 8: 2\nINSERT n 9: 3\n");
    /* A read at rest between a failed write and the next write: the
     * failed one sent nothing, the next one its row. */
    assert_int_not_equal(run(f, "INSERT INTO nosuch VALUES(1)"), SQLITE_OK);
    ok(f, "SELECT v FROM n WHERE rowid = 1");
    ok(f, "INSERT INTO n VALUES(4)");
    expect(f, "COMMIT\nINSERT n 10: 4\n");
    cap_close(f);
}

/* log_stmt is a statement callback that logs what it is told of each
 * statement: "start" or "end", and its first word. */
static void log_stmt(void *arg, sqlite3_stmt *stmt, int end)
{
    const char *sql = sqlite3_sql(stmt);
    size_t word = strcspn(sql, " (;");

    text_add(arg, "%s %.*s\n", end == SQL_CAPTURE_STMT_START ? "start" : "end",
             (int)word, sql);
}

/* reads runs @n reads at rest, each prepared and finalized. */
static void reads(struct cap *f, int n)
{
    for (int i = 0; i < n; i++) {
        ok(f, "SELECT count(*) FROM n");
    }
}

/* expect_told checks what the statement callback logged since the last
 * call. */
static void expect_told(struct text *t, const char *want)
{
    if (strcmp(t->s, want) != 0) {
        fail_msg("told:\n%s\nwant:\n%s", t->s, want);
    }
    t->len = 0;
    t->s[0] = 0;
}

/* While every prepared statement is a read and none runs, the capture
 * disarms (no trace: no clock read, no hook for a read); a statement
 * that is not a read arms it again as it is prepared (the guard's
 * sql_capture_arm; here the fixture's authorizer), and each write is
 * captured as before. A write kept prepared keeps it armed. A write
 * prepared past the guard while it is disarmed is refused at COMMIT,
 * rows or schema. */
static void test_capture_disarmed(void **state)
{
    struct cap *f = cap_open(1 << 20);
    static struct text told; /* (16 KiB: not on the stack) */
    sqlite3_stmt *kept = NULL;

    (void)state;
    setup(f, "CREATE TABLE n(v)");
    sql_capture_set_stmt_cb(f->c, log_stmt, &told);
    reads(f, 40); /* (the first ones' ends are told) */
    told.len = 0;
    told.s[0] = 0;
    reads(f, 5);
    expect_told(&told, "");
    ok(f, "INSERT INTO n VALUES(1)");
    expect_told(&told, "start INSERT\nend INSERT\n");
    expect(f, "COMMIT\nINSERT n 1: 1\n");

    /* A write kept prepared: every end stays traced. */
    assert_int_equal(
        sqlite3_prepare_v2(f->db, "INSERT INTO n VALUES(2)", -1, &kept, NULL),
        SQLITE_OK);
    reads(f, 200);
    told.len = 0;
    told.s[0] = 0;
    reads(f, 2);
    expect_told(&told, "end SELECT\nend SELECT\n");
    assert_int_equal(sqlite3_step(kept), SQLITE_DONE);
    expect_told(&told, "start INSERT\nend INSERT\n");
    assert_int_equal(sqlite3_finalize(kept), SQLITE_OK);

    /* A transaction after reads: its BEGIN arms as it is prepared. */
    reads(f, 40);
    told.len = 0;
    told.s[0] = 0;
    ok(f, "BEGIN; INSERT INTO n VALUES(3); SELECT 1; COMMIT");
    expect_told(&told,
                "start BEGIN\nend BEGIN\nstart INSERT\nend INSERT\n"
                "start SELECT\nend SELECT\nstart COMMIT\n"
                "end COMMIT\n");
    expect(f, "COMMIT\nINSERT n 2: 2\nCOMMIT\nINSERT n 3: 3\n");

    /* Prepared past the guard while disarmed: refused, rows and schema
     * alike, and untold. */
    reads(f, 40);
    told.len = 0;
    told.s[0] = 0;
    f->past_guard = 1;
    ok(f, "INSERT INTO n VALUES(4)");
    ok(f, "CREATE TABLE z(v)");
    expect_told(&told, "");
    expect(f,
           "REFUSED invalid argument: a write ran that raftsql did not see "
           "prepared (prepared past its guard: the connection's authorizer "
           "was replaced), so its changes cannot be replicated; leave the "
           "authorizer to raftsql on a connection that writes to a "
           "replica\n"
           "REFUSED invalid argument: a write ran that raftsql did not see "
           "prepared (prepared past its guard: the connection's authorizer "
           "was replaced), so its changes cannot be replicated; leave the "
           "authorizer to raftsql on a connection that writes to a "
           "replica\n");
    assert_int_not_equal(sql_capture_pending(f->c), 0);
    /* Armed directly (sql_capture_arm) before the next write. */
    sql_capture_arm(f->c);
    ok(f, "INSERT INTO n VALUES(5)");
    expect_told(&told, "start INSERT\nend INSERT\n");
    expect(f, "COMMIT\nINSERT n 5: 5\n");

    /* A VACUUM INTO while disarmed (SQLite saves the trace mask at its
     * start and puts it back at its end): what follows is traced, its
     * savepoints and schema statements recorded, and nothing of the
     * VACUUM's own work goes with them. */
    f->past_guard = 0;
    reads(f, 40);
    {
        char into[64];
        char sql[128];
        snprintf(into, sizeof into, "/tmp/test_changeset_vacuum_%d.db",
                 (int)getpid());
        unlink(into);
        snprintf(sql, sizeof sql, "VACUUM INTO '%s'", into);
        ok(f, sql);
        unlink(into);
    }
    told.len = 0;
    told.s[0] = 0;
    ok(f,
       "BEGIN; INSERT INTO n VALUES(6); SAVEPOINT s; INSERT INTO n "
       "VALUES(7); ROLLBACK TO s; COMMIT");
    ok(f, "CREATE TABLE t2(a)");
    expect(f,
           "COMMIT\nINSERT n 6: 6\n"
           "COMMIT\nSCHEMA-IN-TXN 0x0a CREATE TABLE t2(a)\n");
    cap_close(f);
}

static void step_some(struct cap *f, const char *sql, int n)
{
    sqlite3_stmt *s;
    int i;

    assert_int_equal(sqlite3_prepare_v2(f->db, sql, -1, &s, NULL), SQLITE_OK);
    for (i = 0; i < n; i++) {
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    }
    sqlite3_reset(s);
    sqlite3_finalize(s);
}

/* A RETURNING statement reset before its last row keeps all its rows
 * (autocommit, and BEGIN with foreign keys off); with foreign keys on
 * inside a transaction it poisons it. */
static void test_capture_returning_reset(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b); INSERT INTO t "
          "VALUES(0, 0)");
    step_some(f, "INSERT INTO t VALUES(1, 1), (2, 2) RETURNING a", 1);
    expect(f, "COMMIT\nINSERT t 1: 1,1\nINSERT t 2: 2,2\n");
    ok(f, "BEGIN");
    ok(f, "DELETE FROM t WHERE a = 0");       /* changes() is 1 */
    ok(f, "UPDATE t SET b = 0 WHERE a = 99"); /* changes() is 0 */
    step_some(f, "UPDATE t SET b = b + 10 RETURNING a", 1);
    ok(f, "COMMIT");
    expect(f,
           "COMMIT\nDELETE t 0: 0,0\nUPDATE t 1->1: 1,1 -> 1,11\n"
           "UPDATE t 2->2: 2,2 -> 2,12\n");
    ok(f, "PRAGMA foreign_keys = ON; BEGIN");
    step_some(f, "DELETE FROM t RETURNING a", 1);
    ok(f, "COMMIT");
    expect(f,
           "REFUSED invalid argument: a statement reset before its last "
           "row, with foreign keys on, inside a transaction cannot be "
           "replicated (its foreign key check may undo it unseen): step "
           "it to its end\n");
    cap_close(f);
}

static int interrupt_after(void *data)
{
    int *left = data;

    if (--*left == 0) {
        return 1; /* interrupts, as sqlite3_interrupt does */
    }
    return 0;
}

/* An interrupted write statement rolls the transaction back: the
 * rollback hook forgets it. sqlite3_interrupt from the progress handler
 * too. */
static void test_capture_interrupt(void **state)
{
    struct cap *f = cap_open(1 << 20);
    int left = 0;

    (void)state;
    setup(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    ok(f, "BEGIN; INSERT INTO t VALUES(1, 1)");
    left = 50;
    sqlite3_progress_handler(f->db, 10, interrupt_after, &left);
    assert_int_equal(run(f,
                         "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL "
                         "SELECT i + 1 FROM n WHERE i < 1000) "
                         "INSERT INTO t SELECT i, i FROM n"),
                     SQLITE_INTERRUPT);
    sqlite3_progress_handler(f->db, 0, NULL, NULL);
    assert_int_equal(sqlite3_get_autocommit(f->db), 1);
    assert_int_equal(sql_capture_pending(f->c), 0);
    ok(f, "INSERT INTO t VALUES(5, 5)");
    expect(f, "COMMIT\nINSERT t 5: 5,5\n");
    cap_close(f);
}

/* An INSERT that adds no row still ends by writing an AUTOINCREMENT
 * table's sqlite_sequence row, which no hook shows: its transaction is
 * sent as a changeset of no record (its apply settles sqlite_sequence);
 * one into an internal table, or a write that is no INSERT, sends
 * nothing. */
static void test_capture_insert_of_no_row(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE a(id INTEGER PRIMARY KEY AUTOINCREMENT, v);"
          "CREATE TABLE raftsql_x(v)");
    ok(f, "INSERT INTO a SELECT * FROM a WHERE 0");
    ok(f, "BEGIN; INSERT OR IGNORE INTO \"a\" SELECT 1, 2 WHERE 0; COMMIT");
    ok(f, "UPDATE a SET v = 1 WHERE 0");
    ok(f, "INSERT INTO raftsql_x SELECT 1 WHERE 0");
    expect(f,
           "COMMIT\nCOMMIT\n"
           "REFUSED invalid argument: nothing to send: the transaction "
           "wrote no replicated row or schema\n"
           "REFUSED invalid argument: nothing to send: the transaction "
           "wrote no replicated row or schema\n");
    assert_int_equal(sql_capture_pending(f->c), 0);
    cap_close(f);
}

/* A statement re-prepared after another connection's schema change
 * (SQLITE_SCHEMA at its first OP_Transaction: profiled twice, traced
 * once) keeps its mark: its failure inside a transaction still drops its
 * rows. */
static void test_capture_reprepare(void **state)
{
    struct tmpdb tmp;
    struct cap *f;
    sqlite3 *other;
    sqlite3_stmt *s;

    (void)state;
    tmpdb_init(&tmp);
    f = cap_open_path(tmp.path, 1 << 20);
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b UNIQUE);"
          "INSERT INTO t VALUES(1, 'a')");
    assert_int_equal(sqlite3_prepare_v2(f->db,
                                        "INSERT INTO t VALUES(2, 'b'), "
                                        "(3, 'a')",
                                        -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_open(tmp.path, &other), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(other, "CREATE TABLE other(x)", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_close(other), SQLITE_OK);
    ok(f, "BEGIN");
    assert_int_equal(sqlite3_step(s), SQLITE_CONSTRAINT);
    sqlite3_finalize(s);
    ok(f, "INSERT INTO t VALUES(4, 'd'); COMMIT");
    expect(f, "COMMIT\nINSERT t 4: 4,'d'\n");
    cap_close(f);
    tmpdb_remove(&tmp);
}

/* ---- Capture: schema, blobs, size, hooks ------------------------------ */

/* Schema statements are recorded as text (their rows, and
 * sqlite_sequence's, are not); inside a transaction with the connection's
 * settings, failing ones too; REINDEX, ANALYZE and VACUUM send nothing. */
static void test_capture_schema(void **state)
{
    struct cap *f = cap_open(1 << 20);
    sqlite3_stmt *s;

    (void)state;
    ok(f,
       "  -- comment\n/* c */ create table s(x INTEGER PRIMARY KEY "
       "AUTOINCREMENT, y)");
    ok(f, "INSERT INTO s(y) VALUES('a')");
    ok(f, "CREATE TABLE c AS SELECT * FROM s");
    ok(f, "DROP TABLE c");
    ok(f, "ALTER TABLE s ADD COLUMN z DEFAULT 3");
    ok(f, "CREATE TEMP TABLE tt(v)");
    assert_int_equal(sqlite3_prepare_v2(f->db,
                                        "CREATE VIEW v AS SELECT ?1 AS k, "
                                        "'it''s' AS j",
                                        -1, &s, NULL),
                     SQLITE_ERROR); /* SQLite refuses parameters in views */
    ok(f, "REINDEX");
    ok(f, "ANALYZE");
    ok(f, "VACUUM");
    expect(f,
           "COMMIT\nSCHEMA-IN-TXN 0x0a   -- comment\n/* c */ create table "
           "s(x INTEGER PRIMARY KEY AUTOINCREMENT, y)\n"
           "COMMIT\nINSERT s 1: 1,'a'\n"
           /* Its rows reach no hook: refused (the test's hook lets the
            * local commit go, so c exists for the DROP). */
           "REFUSED invalid argument: CREATE TABLE ... AS SELECT cannot be "
           "replicated as a plain write (its rows reach no hook, and its "
           "SELECT may read what only this connection has: TEMP tables, "
           "ATTACHed files, random()): create the table, then INSERT INTO "
           "... SELECT\n"
           /* Autocommit schema statements carry the writer's settings
            * too (0x0a: foreign keys off, triggers on, ...). */
           "COMMIT\nSCHEMA-IN-TXN 0x0a DROP TABLE c\n"
           "COMMIT\nSCHEMA-IN-TXN 0x0a ALTER TABLE s ADD COLUMN z DEFAULT 3\n"
           /* REINDEX, ANALYZE (sqlite_stat1 only); VACUUM fires no
               * commit hook at all */
           "REFUSED invalid argument: nothing to send: the transaction "
           "wrote no replicated row or schema\n"
           "REFUSED invalid argument: nothing to send: the transaction "
           "wrote no replicated row or schema\n");
    /* CREATE TABLE ... AS SELECT, the one schema statement that takes a
     * parameter, with IF NOT EXISTS and a schema name: refused too. */
    assert_int_equal(
        sqlite3_prepare_v2(f->db,
                           "CREATE TABLE IF NOT EXISTS main.\"p q\" AS "
                           "SELECT ?1 AS k",
                           -1, &s, NULL),
        SQLITE_OK);
    sqlite3_bind_text(s, 1, "it's", -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
    expect(f,
           "REFUSED invalid argument: CREATE TABLE ... AS SELECT cannot be "
           "replicated as a plain write (its rows reach no hook, and its "
           "SELECT may read what only this connection has: TEMP tables, "
           "ATTACHed files, random()): create the table, then INSERT INTO "
           "... SELECT\n");
    ok(f, "CREATE TABLE asx(\"AS\" TEXT)"); /* a column named AS: no CTAS */
    expect(f, "COMMIT\nSCHEMA-IN-TXN 0x0a CREATE TABLE asx(\"AS\" TEXT)\n");
    /* Inside a transaction a schema statement is recorded in its place
     * among the rows, with the connection's settings, failing or not (a
     * failing CREATE UNIQUE INDEX looks like a successful one there: its
     * replay decides). Before: the transaction was refused. */
    ok(f,
       "BEGIN; INSERT INTO s(y) VALUES('a'); CREATE INDEX i ON s(y); "
       "INSERT INTO s(y) VALUES('b')");
    assert_int_equal(
        sqlite3_exec(f->db, "CREATE UNIQUE INDEX u ON s(y)", NULL, NULL, NULL),
        SQLITE_CONSTRAINT);
    ok(f, "PRAGMA legacy_alter_table = ON");
    ok(f, "ALTER TABLE s RENAME TO s2; COMMIT");
    ok(f, "PRAGMA legacy_alter_table = OFF");
    expect(f,
           "COMMIT\nINSERT s 2: 2,'a',3\n"
           "SCHEMA-IN-TXN 0x0a CREATE INDEX i ON s(y);\n"
           "INSERT s 3: 3,'b',3\n"
           "SCHEMA-IN-TXN 0x0a CREATE UNIQUE INDEX u ON s(y)\n"
           "SCHEMA-IN-TXN 0x0e ALTER TABLE s RENAME TO s2;\n");
    /* ROLLBACK TO drops one with the rows after the savepoint. */
    ok(f,
       "BEGIN; SAVEPOINT a; CREATE TABLE gone(x); INSERT INTO gone "
       "VALUES(1); ROLLBACK TO a; CREATE TABLE kept(x); COMMIT");
    expect(f, "COMMIT\nSCHEMA-IN-TXN 0x0a CREATE TABLE kept(x);\n");
    cap_close(f);
}

/* sqlite3_blob_write poisons the transaction, naming the table. */
/* blob_table creates t(a, b) with row 1's b a blob of 4 zero bytes. */
static void blob_table(struct cap *f)
{
    setup(f,
          "CREATE TABLE t(a INTEGER PRIMARY KEY, b); INSERT INTO t "
          "VALUES(1, zeroblob(4))");
}

/* blob_written opens row 1's b for writing and writes "ab" at its
 * start; returns the open blob. */
static sqlite3_blob *blob_written(struct cap *f)
{
    sqlite3_blob *b;

    assert_int_equal(sqlite3_blob_open(f->db, "main", "t", "b", 1, 1, &b),
                     SQLITE_OK);
    assert_int_equal(sqlite3_blob_write(b, "ab", 2, 0), SQLITE_OK);
    return b;
}

/* blob_refused checks that the last commit was refused for the blob
 * write, that the next transaction is captured clean, and closes @f. */
static void blob_refused(struct cap *f)
{
    expect(f,
           "REFUSED invalid argument: sqlite3_blob_write on table t "
           "cannot be replicated; use UPDATE\n");
    ok(f, "INSERT INTO t VALUES(3, 3)"); /* the next transaction is clean */
    expect(f, "COMMIT\nINSERT t 3: 3,3\n");
    cap_close(f);
}

static void test_capture_blob_write(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    blob_table(f);
    ok(f, "BEGIN; INSERT INTO t VALUES(2, 2)");
    sqlite3_blob_close(blob_written(f));
    ok(f, "COMMIT");
    blob_refused(f);
}

/* The same in autocommit, with a statement run while the blob is open:
 * the blob's implicit transaction stays open over it, and its poison
 * must stay too (a user's blob write reached the file, read back, and
 * was repaired away a second later: the SELECT's start had forgotten
 * the poison, so the blob's commit was taken as empty and let go). */
static void test_capture_blob_write_autocommit(void **state)
{
    struct cap *f = cap_open(1 << 20);
    sqlite3_blob *b;

    (void)state;
    blob_table(f);
    b = blob_written(f);
    ok(f, "SELECT 1");
    ok(f, "SELECT a FROM t");
    sqlite3_blob_close(b);
    blob_refused(f);
}

/* Past max_bytes the transaction is refused as too big, and the next one
 * is captured again. */
static void test_capture_too_big(void **state)
{
    /* Header 32 + one INSERT of t(a, b) with (1, 'x'): 1+2+1+8+8+2 +
     * 9 + 6 = 37 bytes: 69 fits, a second row does not. */
    struct cap *f = cap_open(69 + 10);

    (void)state;
    setup(f, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
    ok(f, "INSERT INTO t VALUES(1, 'x')");
    ok(f, "INSERT INTO t VALUES(2, 'x'), (3, 'x')");
    ok(f, "INSERT INTO t VALUES(4, 'x')");
    expect(f,
           "COMMIT\nINSERT t 1: 1,'x'\n"
           "REFUSED too big: the transaction's changeset of at least 106 "
           "bytes exceeds max_request_bytes (79) by 27\n"
           "COMMIT\nINSERT t 4: 4,'x'\n");
    cap_close(f);
}

/* Generated columns: sqlite3_preupdate_count counts them all, but the
 * values are the stored columns' (a STORED one with its value), in their
 * order: a VIRTUAL one has none, and the image is shorter by one. */
static void test_capture_generated(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE g(a INTEGER PRIMARY KEY, b, c AS (b * 2) STORED, "
          "d AS (b + 1) VIRTUAL, e)");
    ok(f, "INSERT INTO g(a, b, e) VALUES(1, 10, 'x')");
    ok(f, "UPDATE g SET b = 11");
    ok(f, "DELETE FROM g");
    expect(f,
           "COMMIT\nINSERT g 1: 1,10,20,'x'\n"
           "COMMIT\nUPDATE g 1->1: 1,10,20,'x' -> 1,11,22,'x'\n"
           "COMMIT\nDELETE g 1: 1,11,22,'x'\n");
    cap_close(f);
}

static void other_rollback(void *data)
{
    (void)data;
}

/* sql_capture_intact tells a replaced hook; close removes the hooks. */
static void test_capture_intact(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    assert_int_equal(sql_capture_intact(f->c), 1);
    assert_int_equal(sql_capture_intact(f->c), 1);
    sqlite3_rollback_hook(f->db, other_rollback, f);
    assert_int_equal(sql_capture_intact(f->c), 0);
    assert_int_equal(sql_capture_intact(f->c), 1); /* re-installed */
    sqlite3_trace_v2(f->db, SQLITE_TRACE_STMT, NULL, NULL);
    assert_int_equal(sql_capture_intact(f->c), 0);
    sql_capture_close(f->c, 0);
    f->c = NULL;
    assert_null(sqlite3_rollback_hook(f->db, NULL, NULL));
    assert_int_equal(sqlite3_close(f->db), SQLITE_OK);
    free(f);
}

/* A gate that logs the statements it is asked about and refuses those
 * whose text holds "'no'". */
static int test_gate(void *arg, sqlite3_stmt *stmt, char *why, size_t why_len)
{
    struct cap *f = arg;

    text_add(&f->log, "GATE %s\n", sqlite3_sql(stmt));
    if (strstr(sqlite3_sql(stmt), "'no'") != NULL) {
        snprintf(why, why_len, "the gate says no");
        return 1;
    }
    return 0;
}

/* The gate is asked at the start of each statement that may write (not
 * a read, not a trigger's sub-statement); a transaction it refused is
 * refused by take with its reason, and the next one starts clean. */
static void test_capture_gate(void **state)
{
    struct cap *f = cap_open(1 << 20);

    (void)state;
    setup(f,
          "CREATE TABLE t(x INTEGER PRIMARY KEY, y);"
          "CREATE TABLE u(x);"
          "CREATE TRIGGER tu AFTER INSERT ON t BEGIN "
          "INSERT INTO u VALUES (new.y); END");
    sql_capture_set_gate(f->c, test_gate, f);
    ok(f, "SELECT * FROM t");
    ok(f, "INSERT INTO t VALUES (1, 'yes')");
    expect(f,
           "GATE INSERT INTO t VALUES (1, 'yes')\n"
           "COMMIT\n"
           "INSERT t 1: 1,'yes'\n"
           "INSERT u 1: 'yes'\n");
    ok(f, "INSERT INTO t VALUES (2, 'no')");
    expect(f,
           "GATE INSERT INTO t VALUES (2, 'no')\n"
           "REFUSED invalid argument: the gate says no\n");
    ok(f,
       "BEGIN; INSERT INTO t VALUES (3, 'no'); "
       "INSERT INTO t VALUES (4, 'yes'); COMMIT");
    expect(f,
           "GATE INSERT INTO t VALUES (3, 'no');\n"
           "GATE INSERT INTO t VALUES (4, 'yes');\n"
           "REFUSED invalid argument: the gate says no\n");
    ok(f, "UPDATE t SET y = 'ok' WHERE x = 1");
    expect(f,
           "GATE UPDATE t SET y = 'ok' WHERE x = 1\n"
           "COMMIT\n"
           "UPDATE t 1->1: 1,'yes' -> 1,'ok'\n");
    /* (The fixture's commit hook lets refused transactions commit
     * locally: u has rows 1 to 4.) */
    sql_capture_set_gate(f->c, NULL, NULL);
    ok(f, "INSERT INTO t VALUES (5, 'no')");
    expect(f,
           "COMMIT\n"
           "INSERT t 5: 5,'no'\n"
           "INSERT u 5: 'no'\n");
    cap_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_round_trip),
        cmocka_unit_test(test_codec_truncations),
        cmocka_unit_test(test_codec_malformed),
        cmocka_unit_test(test_codec_schema_in_txn),
        cmocka_unit_test(test_capture_rows),
        cmocka_unit_test(test_capture_autocommit_failures),
        cmocka_unit_test(test_capture_statement_rollback),
        cmocka_unit_test(test_capture_replace_upsert),
        cmocka_unit_test(test_capture_savepoints),
        cmocka_unit_test(test_capture_instead_of),
        cmocka_unit_test(test_capture_virtual_tables),
        cmocka_unit_test(test_capture_reads_at_rest),
        cmocka_unit_test(test_capture_disarmed),
        cmocka_unit_test(test_capture_returning_reset),
        cmocka_unit_test(test_capture_interrupt),
        cmocka_unit_test(test_capture_insert_of_no_row),
        cmocka_unit_test(test_capture_reprepare),
        cmocka_unit_test(test_capture_schema),
        cmocka_unit_test(test_capture_blob_write),
        cmocka_unit_test(test_capture_blob_write_autocommit),
        cmocka_unit_test(test_capture_too_big),
        cmocka_unit_test(test_capture_generated),
        cmocka_unit_test(test_capture_intact),
        cmocka_unit_test(test_capture_gate),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
