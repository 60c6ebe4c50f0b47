/* raftsql-testhost: a minimal SQLite host for one raftsql node, driven over
 * stdin/stdout by the demo and the end-to-end tests.
 *
 * Usage: raftsql-testhost DBFILE
 *
 * It opens DBFILE (creating it), registers raftsql on every connection it
 * opens (sqlite3_auto_extension), then reads one request per line from
 * stdin: a JSON array [sql, param...] where a param is a JSON number,
 * string, null, or {"blob": "<hex>"}. It runs the single statement `sql`
 * on its connection and writes one JSON line to stdout: {"rows": [[...],
 * ...]} (blobs as {"blob": "<hex>"}) or {"error": "<message>", "code": N}.
 * At end of input it stops its node and exits 0. */

#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/raftsql.h"

static char *hex_encode(const unsigned char *p, int n)
{
    static const char digits[] = "0123456789abcdef";
    char *s = malloc((size_t)n * 2 + 1);
    if (s == NULL) {
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        s[2 * i] = digits[p[i] >> 4];
        s[2 * i + 1] = digits[p[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* bind_param binds JSON value @v to parameter @i of @stmt. */
static int bind_param(sqlite3_stmt *stmt, int i, json_t *v)
{
    if (json_is_integer(v)) {
        return sqlite3_bind_int64(stmt, i, json_integer_value(v));
    }
    if (json_is_real(v)) {
        return sqlite3_bind_double(stmt, i, json_real_value(v));
    }
    if (json_is_string(v)) {
        return sqlite3_bind_text(stmt, i, json_string_value(v),
                                 (int)json_string_length(v), SQLITE_TRANSIENT);
    }
    if (json_is_null(v)) {
        return sqlite3_bind_null(stmt, i);
    }
    if (json_is_object(v) && json_is_string(json_object_get(v, "blob"))) {
        const char *h = json_string_value(json_object_get(v, "blob"));
        size_t len = strlen(h) / 2;
        unsigned char *b = malloc(len + 1);
        int rc;
        if (b == NULL) {
            return SQLITE_NOMEM;
        }
        for (size_t k = 0; k < len; k++) {
            int hi = hex_value(h[2 * k]), lo = hex_value(h[2 * k + 1]);
            if (hi < 0 || lo < 0) {
                free(b);
                return SQLITE_MISMATCH;
            }
            b[k] = (unsigned char)(hi << 4 | lo);
        }
        rc = sqlite3_bind_blob(stmt, i, b, (int)len, SQLITE_TRANSIENT);
        free(b);
        return rc;
    }
    return SQLITE_MISMATCH;
}

static json_t *column_value(sqlite3_stmt *stmt, int c)
{
    switch (sqlite3_column_type(stmt, c)) {
        case SQLITE_INTEGER:
            return json_integer(sqlite3_column_int64(stmt, c));
        case SQLITE_FLOAT:
            return json_real(sqlite3_column_double(stmt, c));
        case SQLITE_TEXT:
            return json_stringn_nocheck(
                (const char *)sqlite3_column_text(stmt, c),
                (size_t)sqlite3_column_bytes(stmt, c));
        case SQLITE_BLOB: {
            char *h = hex_encode(sqlite3_column_blob(stmt, c),
                                 sqlite3_column_bytes(stmt, c));
            json_t *o = json_pack("{s:s}", "blob", h != NULL ? h : "");
            free(h);
            return o;
        }
        default:
            return json_null();
    }
}

static json_t *error_reply(const char *msg, int code)
{
    return json_pack("{s:s, s:i}", "error", msg, "code", code);
}

/* run executes one request and returns the reply. */
static json_t *run(sqlite3 *db, const char *line)
{
    json_error_t jerr;
    json_t *req = json_loads(line, JSON_ALLOW_NUL, &jerr);
    json_t *reply = NULL, *rows;
    sqlite3_stmt *stmt = NULL;
    int rc;

    if (req == NULL || !json_is_array(req) || json_array_size(req) < 1 ||
        !json_is_string(json_array_get(req, 0))) {
        reply = error_reply("request must be a JSON array [sql, param...]",
                            SQLITE_MISUSE);
        goto out;
    }
    rc = sqlite3_prepare_v2(db, json_string_value(json_array_get(req, 0)), -1,
                            &stmt, NULL);
    if (rc != SQLITE_OK) {
        reply = error_reply(sqlite3_errmsg(db), rc);
        goto out;
    }
    for (size_t i = 1; i < json_array_size(req); i++) {
        rc = bind_param(stmt, (int)i, json_array_get(req, i));
        if (rc != SQLITE_OK) {
            reply = error_reply("cannot bind a parameter", rc);
            goto out;
        }
    }
    rows = json_array();
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        json_t *row = json_array();
        for (int c = 0; c < sqlite3_column_count(stmt); c++) {
            json_array_append_new(row, column_value(stmt, c));
        }
        json_array_append_new(rows, row);
    }
    if (rc != SQLITE_DONE) {
        json_decref(rows);
        reply = error_reply(sqlite3_errmsg(db), sqlite3_extended_errcode(db));
        goto out;
    }
    reply = json_pack("{s:o}", "rows", rows);
out:
    sqlite3_finalize(stmt);
    json_decref(req);
    return reply;
}

int main(int argc, char **argv)
{
    sqlite3 *db;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DBFILE\n", argv[0]);
        return 2;
    }
    sqlite3_auto_extension((void (*)(void))sqlite3_raftsql_init);
    if (sqlite3_open(argv[1], &db) != SQLITE_OK) {
        fprintf(stderr, "%s: cannot open %s: %s\n", argv[0], argv[1],
                sqlite3_errmsg(db));
        sqlite3_close(db);
        return 1;
    }
    sqlite3_busy_timeout(db, 5000);
    while ((len = getline(&line, &cap, stdin)) > 0) {
        json_t *reply;
        char *text;
        if (line[0] == '\n') {
            continue;
        }
        reply = run(db, line);
        text = reply != NULL ? json_dumps(reply, JSON_COMPACT) : NULL;
        printf("%s\n", text != NULL
                           ? text
                           : "{\"error\":\"out of memory\",\"code\":7}");
        fflush(stdout);
        free(text);
        json_decref(reply);
    }
    free(line);
    sqlite3_exec(db, "SELECT raft_stop()", NULL, NULL, NULL);
    sqlite3_close(db);
    sqlite3_reset_auto_extension();
    return 0;
}
