/* The rows a want-rows request returns (raft_query, raft_query_id),
 * collected as JSON while the request applies, on every node alike: the
 * result is part of the request's outcome (stored with a client id, and
 * its size cap is a SQL error that rolls back on every node).
 *
 * The JSON shape (one object, compact, jansson):
 *
 *   {"results": [{"columns": ["id", "a"], "rows": [[1, "x"], ...]}, ...],
 *    "changes": 2, "last_insert_rowid": 7}
 *
 * with one "results" element per statement of the request that returns
 * rows (INSERT/UPDATE/DELETE ... RETURNING, a SELECT), in the order they
 * ran, also when it returned none (its "rows" is then []); "changes" and
 * "last_insert_rowid" are those of the whole request, as raft_exec gives
 * them. Values keep their SQLite types: INTEGER a JSON integer, REAL a
 * JSON real printed with 17 significant digits (1.0 stays 1.0, so a real
 * never reads back as an integer), +Inf and -Inf as {"real": "inf"} and
 * {"real": "-inf"} (JSON has no infinities; SQLite stores no NaN), TEXT a
 * JSON string (NUL bytes as \u0000), NULL null, a BLOB {"base64": "..."}
 * (RFC 4648 with padding, OpenSSL's EVP_EncodeBlock; a zero-length blob
 * is {"base64": ""}, distinct from null and from "").
 *
 * Failure modes (SQL errors of the request, the same on every node):
 * - the JSON would exceed the leader's stamped max_result_bytes: counted
 *   as rows are added (text and blob bytes, number digits) and checked
 *   exactly on the final text;
 * - a TEXT value that is not valid UTF-8 (JSON cannot carry it): cast the
 *   column to a BLOB to get its bytes. */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <sqlite3ext.h>

#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* A request's rows being collected. */
struct sql_rows {
    json_t *results; /* the "results" array */
    json_t *rows;    /* "rows" of the statement running, or NULL */
    uint64_t bytes;  /* JSON bytes counted so far (a lower bound) */
    uint64_t cap;    /* max_result_bytes */
    char *b64;       /* base64 buffer (malloc'd, reused) */
    size_t b64_cap;  /* its size */
};

struct sql_rows *rows_new(uint64_t cap)
{
    struct sql_rows *r = calloc(1, sizeof *r);

    if (r == NULL) {
        return NULL;
    }
    r->results = json_array();
    if (r->results == NULL) {
        free(r);
        return NULL;
    }
    r->cap = cap;
    r->bytes = 64; /* the object's keys and brackets */
    return r;
}

void rows_free(struct sql_rows *r)
{
    if (r == NULL) {
        return;
    }
    json_decref(r->results);
    free(r->b64);
    free(r);
}

/* too_big says whether @r went over its cap, with the message. */
static int too_big(struct sql_rows *r, char *errmsg, size_t errmsg_len)
{
    if (r->bytes <= r->cap) {
        return 0;
    }
    sql_errmsgf(errmsg, errmsg_len,
                "the rows returned exceed max_result_bytes (%" PRIu64
                " bytes of JSON); rolled back on every node",
                r->cap);
    return SQL_ERR_TOOBIG;
}

int rows_statement(struct sql_rows *r, sqlite3_stmt *s, char *errmsg,
                   size_t errmsg_len)
{
    int n = sqlite3_column_count(s);
    json_t *st, *cols, *rows;

    r->rows = NULL;
    if (n == 0) {
        return 0;
    }
    /* The _new setters take the reference also when they fail. */
    st = json_object();
    cols = json_array();
    if (st == NULL || json_object_set_new(st, "columns", cols) != 0) {
        goto nomem;
    }
    for (int i = 0; i < n; i++) {
        const char *name = sqlite3_column_name(s, i);
        json_t *j;

        if (name == NULL) {
            goto nomem;
        }
        j = json_string(name);
        if (j == NULL) {
            json_decref(st);
            sql_errmsgf(errmsg, errmsg_len,
                        "a result column name is not valid UTF-8");
            return SQL_ERR_INVALID;
        }
        if (json_array_append_new(cols, j) != 0) {
            goto nomem;
        }
        r->bytes += strlen(name) + 3;
    }
    rows = json_array();
    if (json_object_set_new(st, "rows", rows) != 0) {
        goto nomem;
    }
    if (json_array_append_new(r->results, st) != 0) {
        st = NULL;
        goto nomem;
    }
    r->rows = rows; /* owned by r->results */
    r->bytes += 24;
    return too_big(r, errmsg, errmsg_len);

nomem:
    json_decref(st);
    sql_errmsgf(errmsg, errmsg_len, "out of memory collecting rows");
    return SQL_ERR_NOMEM;
}

/* blob_value returns {"base64": ...} of @n bytes at @p, or NULL. */
static json_t *blob_value(struct sql_rows *r, const void *p, int n)
{
    size_t need = 4 * (((size_t)n + 2) / 3) + 1;
    int len = 0;

    if (need > r->b64_cap) {
        char *b = realloc(r->b64, need);
        if (b == NULL) {
            return NULL;
        }
        r->b64 = b;
        r->b64_cap = need;
    }
    if (n > 0) {
        len = EVP_EncodeBlock((unsigned char *)r->b64, p, n);
    }
    r->bytes += (uint64_t)len + 14;
    return json_pack("{s:s#}", "base64", n > 0 ? r->b64 : "", (size_t)len);
}

/* column_value returns the JSON of column @i of @s's row, or NULL with
 * *@bad_text set when it is TEXT that is not UTF-8. */
static json_t *column_value(struct sql_rows *r, sqlite3_stmt *s, int i,
                            int *bad_text)
{
    char num[32];
    json_t *j;

    switch (sqlite3_column_type(s, i)) {
        case SQLITE_INTEGER: {
            sqlite3_int64 v = sqlite3_column_int64(s, i);
            r->bytes += (uint64_t)snprintf(num, sizeof num, "%lld", v) + 1;
            return json_integer((json_int_t)v);
        }
        case SQLITE_FLOAT: {
            double v = sqlite3_column_double(s, i);
            if (isinf(v)) {
                r->bytes += 16;
                return json_pack("{s:s}", "real", v > 0 ? "inf" : "-inf");
            }
            r->bytes += (uint64_t)snprintf(num, sizeof num, "%.17g", v) + 1;
            return json_real(v);
        }
        case SQLITE_TEXT: {
            const char *t = (const char *)sqlite3_column_text(s, i);
            int n = sqlite3_column_bytes(s, i);
            if (t == NULL) {
                return NULL;
            }
            r->bytes += (uint64_t)n + 3;
            j = json_stringn(t, (size_t)n);
            if (j == NULL) {
                *bad_text = 1;
            }
            return j;
        }
        case SQLITE_BLOB: {
            const void *p = sqlite3_column_blob(s, i);
            int n = sqlite3_column_bytes(s, i);
            if (p == NULL && n > 0) {
                return NULL;
            }
            return blob_value(r, p, n);
        }
        default:
            r->bytes += 5;
            return json_null();
    }
}

int rows_add(struct sql_rows *r, sqlite3_stmt *s, char *errmsg,
             size_t errmsg_len)
{
    int n = sqlite3_column_count(s);
    json_t *row;
    int rc;

    if (r->rows == NULL) {
        return 0;
    }
    row = json_array();
    if (row == NULL) {
        goto nomem;
    }
    r->bytes += 3;
    for (int i = 0; i < n; i++) {
        int bad_text = 0;
        json_t *v = column_value(r, s, i, &bad_text);

        if (v == NULL && bad_text) {
            json_decref(row);
            sql_errmsgf(errmsg, errmsg_len,
                        "column \"%s\" of a returned row is TEXT that is not "
                        "valid UTF-8, which JSON cannot carry; CAST it AS "
                        "BLOB",
                        sqlite3_column_name(s, i) != NULL
                            ? sqlite3_column_name(s, i)
                            : "?");
            return SQL_ERR_INVALID;
        }
        if (v == NULL || json_array_append_new(row, v) != 0) {
            json_decref(row);
            goto nomem;
        }
        rc = too_big(r, errmsg, errmsg_len);
        if (rc != 0) {
            json_decref(row);
            return rc;
        }
    }
    if (json_array_append_new(r->rows, row) != 0) {
        goto nomem;
    }
    return 0;

nomem:
    sql_errmsgf(errmsg, errmsg_len, "out of memory collecting rows");
    return SQL_ERR_NOMEM;
}

int rows_finish(struct sql_rows *r, int64_t changes, int64_t last_insert_rowid,
                char **out, char *errmsg, size_t errmsg_len)
{
    json_t *o = json_pack("{s:O,s:I,s:I}", "results", r->results, "changes",
                          (json_int_t)changes, "last_insert_rowid",
                          (json_int_t)last_insert_rowid);
    char *text;

    if (o == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "out of memory collecting rows");
        return SQL_ERR_NOMEM;
    }
    text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (text == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "out of memory writing rows");
        return SQL_ERR_NOMEM;
    }
    r->bytes = strlen(text);
    if (too_big(r, errmsg, errmsg_len) != 0) {
        free(text);
        return SQL_ERR_TOOBIG;
    }
    *out = text;
    return 0;
}
