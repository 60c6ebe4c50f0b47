/* Helpers shared by the tests of sql/ (header-only, static inline): fresh
 * temporary database files, request payloads and entries, and reading a
 * database back through a separate plain connection. Include after
 * <cmocka.h>. */

#ifndef TESTS_SQL_HELPERS_H
#define TESTS_SQL_HELPERS_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "sql/sql.h"

/* A temporary directory holding one database file. */
struct tmpdb {
    char dir[64];  /* the directory */
    char path[96]; /* dir + "/db", an empty (valid) SQLite file */
};

/* tmpdb_init creates a directory and an empty database file in it. */
static inline void tmpdb_init(struct tmpdb *t)
{
    FILE *fp;

    snprintf(t->dir, sizeof t->dir, "/tmp/raftsql-sql-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/db", t->dir);
    fp = fopen(t->path, "w");
    assert_non_null(fp);
    fclose(fp);
}

/* tmpdb_reset replaces the database of @t (and its WAL files) with a new
 * empty file, leaving whatever else the directory holds. */
static inline void tmpdb_reset(struct tmpdb *t)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char p[128];
    FILE *fp;

    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", t->path, suffixes[i]);
        unlink(p);
    }
    fp = fopen(t->path, "w");
    assert_non_null(fp);
    fclose(fp);
}

/* tmpdb_remove_entry is tmpdb_remove's nftw callback: it removes @path
 * (a file or an emptied directory); a failure is ignored. */
static inline int tmpdb_remove_entry(const char *path, const struct stat *sb,
                                     int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

/* tmpdb_remove deletes the directory and everything in it: the database,
 * its WAL files and whatever a test made beside them (copies, snapshot
 * files). */
static inline void tmpdb_remove(struct tmpdb *t)
{
    nftw(t->dir, tmpdb_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Most entries of one batch whose results a fsm_fixture keeps. */
#define FSM_FIXTURE_MAX_BATCH 16

/* A cmocka fixture: a fresh database file and its apply connection. */
struct fsm_fixture {
    struct tmpdb tmp;                             /* the database file */
    struct sql_fsm *fsm;                          /* its apply connection */
    struct sql_result res[FSM_FIXTURE_MAX_BATCH]; /* the last batch's */
    unsigned n_res;                               /* entries in it */
};

/* fsm_fixture_setup is a cmocka setup: it sets *@state to a new
 * fsm_fixture with an empty database open for applying (fails the test
 * when it cannot). */
static inline int fsm_fixture_setup(void **state)
{
    struct fsm_fixture *f = calloc(1, sizeof *f);
    char msg[256];

    assert_non_null(f);
    tmpdb_init(&f->tmp);
    if (sql_fsm_open(f->tmp.path, NULL, 0, &f->fsm, msg, sizeof msg) != 0) {
        fail_msg("open: %s", msg);
    }
    *state = f;
    return 0;
}

/* fsm_fixture_clear frees the results of @f's last batch. */
static inline void fsm_fixture_clear(struct fsm_fixture *f)
{
    for (unsigned i = 0; i < f->n_res; i++) {
        sql_result_clear(&f->res[i]);
    }
    f->n_res = 0;
}

/* fsm_fixture_teardown is a cmocka teardown: it closes and removes what
 * fsm_fixture_setup made (*@state). */
static inline int fsm_fixture_teardown(void **state)
{
    struct fsm_fixture *f = *state;

    fsm_fixture_clear(f);
    sql_fsm_close(f->fsm);
    tmpdb_remove(&f->tmp);
    free(f);
    return 0;
}

/* A payload made by a test: @len bytes at @data, malloc'd with the struct
 * (free it with buf_free). */
struct buf {
    size_t len;           /* bytes */
    unsigned char data[]; /* payload */
};

/* buf_new returns a new buf of @len bytes (contents undefined). */
static inline struct buf *buf_new(size_t len)
{
    struct buf *b = malloc(sizeof *b + len);

    assert_non_null(b);
    b->len = len;
    return b;
}

/* buf_copy returns a new buf holding @len bytes of @p. */
static inline struct buf *buf_copy(const void *p, size_t len)
{
    struct buf *b = buf_new(len);

    memcpy(b->data, p, len);
    return b;
}

/* buf_free frees @b (NULL is ignored). */
static inline void buf_free(struct buf *b)
{
    free(b);
}

/* encode_request is sql_request_size, then sql_request_encode into a new
 * buf (*@out, the caller's; left alone on failure). Returns
 * sql_request_size's code, with its message in @msg (@msg_len bytes). */
static inline int encode_request(const uint64_t id[2], const char *sql,
                                 size_t sql_len, const struct sql_param *ps,
                                 unsigned n, uint64_t max_bytes,
                                 struct buf **out, char *msg, size_t msg_len)
{
    struct buf *b;
    size_t len = 0;
    int rc;

    rc = sql_request_size(sql, sql_len, ps, n, max_bytes, &len, msg, msg_len);
    if (rc != 0) {
        return rc;
    }
    b = buf_new(len);
    assert_int_equal(sql_request_encode(id, sql, sql_len, ps, n, b->data, len),
                     0);
    *out = b;
    return 0;
}

/* make_request_ex encodes and stamps (in place) a request; the result is
 * owned by the caller (buf_free). */
static inline struct buf *make_request_ex(uint64_t origin, uint64_t seq,
                                          const char *sql,
                                          const struct sql_param *ps,
                                          unsigned n, int64_t time_ms,
                                          uint64_t seed)
{
    uint64_t id[2] = {origin, seq};
    struct buf *b = NULL;
    char msg[256] = "";
    int rc;

    rc = encode_request(id, sql, strlen(sql), ps, n, UINT64_MAX, &b, msg,
                        sizeof msg);
    if (rc != 0) {
        fail_msg("encode: %s", msg);
    }
    assert_int_equal(
        sql_request_stamp(b->data, b->len,
                          &(struct sql_stamp){.time_ms = time_ms, .seed = seed},
                          b->data),
        0);
    return b;
}

/* make_request: request (1, @seq) with a fixed time and a seed of @seq. */
static inline struct buf *make_request(uint64_t seq, const char *sql)
{
    return make_request_ex(1, seq, sql, NULL, 0, 1700000000000LL, seq);
}

/* entry_set_payload makes entry @e a request entry carrying payload @b
 * (NULL: a no-op entry, which carries no request). @b must outlive the
 * entry's use. */
static inline void entry_set_payload(struct sql_fsm_entry *e,
                                     const struct buf *b)
{
    e->kind = SQL_ENTRY_REQUEST;
    e->data = b != NULL ? b->data : NULL;
    e->len = b != NULL ? b->len : 0;
}

/* outside_exec commits @sql to @path from a plain connection of its own:
 * a process that does not load raftsql. */
static inline void outside_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    char *err = NULL;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                     SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fail_msg("%s: %s", sql, err);
    }
    sqlite3_close(db);
}

/* query_text runs @sql (one row, one column expected) on a separate plain
 * connection to @path and returns the value as text (malloc'd), or NULL
 * for SQL NULL or no row. */
static inline char *query_text(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    char *out = NULL;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
        fail_msg("prepare %s: %s", sql, sqlite3_errmsg(db));
    }
    if (sqlite3_step(s) == SQLITE_ROW &&
        sqlite3_column_type(s, 0) != SQLITE_NULL) {
        out = strdup((const char *)sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
}

/* assert_query checks that @sql on @path gives @expected (NULL: SQL NULL
 * or no row). */
#define assert_query(path, sql, expected)                                      \
    do {                                                                       \
        char *got_ = query_text((path), (sql));                                \
        const char *exp_ = (expected);                                         \
        if (exp_ == NULL) {                                                    \
            assert_null(got_);                                                 \
        } else {                                                               \
            assert_non_null(got_);                                             \
            assert_string_equal(got_, exp_);                                   \
        }                                                                      \
        free(got_);                                                            \
    } while (0)

/* dump_table returns every row of "SELECT * FROM @table ORDER BY rowid"
 * on @path as text (typed, blobs in hex, reals to 17 digits), malloc'd. */
static inline char *dump_table(const char *path, const char *table)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    char sql[128];
    sqlite3_str *str;
    int i, n;

    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    snprintf(sql, sizeof sql, "SELECT * FROM %s ORDER BY rowid", table);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    str = sqlite3_str_new(db);
    n = sqlite3_column_count(s);
    while (sqlite3_step(s) == SQLITE_ROW) {
        for (i = 0; i < n; i++) {
            switch (sqlite3_column_type(s, i)) {
                case SQLITE_INTEGER:
                    sqlite3_str_appendf(str, "i:%lld|",
                                        sqlite3_column_int64(s, i));
                    break;
                case SQLITE_FLOAT:
                    sqlite3_str_appendf(str, "f:%.17g|",
                                        sqlite3_column_double(s, i));
                    break;
                case SQLITE_TEXT:
                    sqlite3_str_appendf(str, "t:%s|",
                                        sqlite3_column_text(s, i));
                    break;
                case SQLITE_BLOB: {
                    const unsigned char *b = sqlite3_column_blob(s, i);
                    int k, len = sqlite3_column_bytes(s, i);

                    sqlite3_str_appendall(str, "b:");
                    for (k = 0; k < len; k++) {
                        sqlite3_str_appendf(str, "%02x", b[k]);
                    }
                    sqlite3_str_appendall(str, "|");
                    break;
                }
                default:
                    sqlite3_str_appendall(str, "null|");
            }
        }
        sqlite3_str_appendall(str, "\n");
    }
    sqlite3_finalize(s);
    {
        char *t = sqlite3_str_finish(str);
        char *out = strdup(t != NULL ? t : "");

        sqlite3_free(t);
        sqlite3_close(db);
        return out;
    }
}

#endif /* TESTS_SQL_HELPERS_H */
