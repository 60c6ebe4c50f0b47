/* A call's values and interrupt (func_call.h). */

#include "func_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../raftsql.h"
#include "precheck.h"

SQLITE_EXTENSION_INIT3

void func_call_value(sqlite3_value *v, struct sql_value *out)
{
    memset(out, 0, sizeof *out);
    switch (sqlite3_value_type(v)) {
        case SQLITE_INTEGER:
            out->type = SQL_INTEGER;
            out->integer = sqlite3_value_int64(v);
            break;
        case SQLITE_FLOAT:
            out->type = SQL_FLOAT;
            out->real = sqlite3_value_double(v);
            break;
        case SQLITE_TEXT:
            out->type = SQL_TEXT;
            out->bytes.p = sqlite3_value_text(v);
            out->bytes.len = (size_t)sqlite3_value_bytes(v);
            break;
        case SQLITE_BLOB:
            out->type = SQL_BLOB;
            out->bytes.p = sqlite3_value_blob(v);
            out->bytes.len = (size_t)sqlite3_value_bytes(v);
            break;
        default:
            out->type = SQL_NULL;
            break;
    }
}

/* func_call_interrupted probes the caller's connection @arg: SQLite
 * interrupts every statement started while an interrupt is pending
 * (https://sqlite.org/c3ref/interrupt.html), so a trivial one fails with
 * SQLITE_INTERRUPT exactly when sqlite3_interrupt was called on it (SQLite
 * 3.40 has no sqlite3_is_interrupted). */
bool func_call_interrupted(void *arg)
{
    sqlite3 *db = arg;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT 1", -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    return (rc & 0xff) == SQLITE_INTERRUPT;
}

void func_call_error(sqlite3_context *ctx, int code, const char *msg)
{
    sqlite3_result_error(ctx, msg, -1);
    /* After the text: sqlite3_result_error sets SQLITE_ERROR. */
    sqlite3_result_error_code(ctx, code);
}

int func_call_params(sqlite3_context *ctx, const char *fn, int argc,
                     sqlite3_value **argv, int first,
                     struct ext_precheck_cache *checked, char *errmsg,
                     size_t errmsg_len, struct sql_param **params,
                     unsigned *n_params)
{
    const char *sql = (const char *)sqlite3_value_text(argv[first]);
    size_t len = (size_t)sqlite3_value_bytes(argv[first]);
    char why[1024];
    bool refused;

    *params = NULL;
    *n_params = (unsigned)(argc - 1 - first);
    if (*n_params > 0) {
        *params = calloc(*n_params, sizeof **params);
        if (*params == NULL) {
            sqlite3_result_error_nomem(ctx);
            return -1;
        }
    }
    for (unsigned i = 0; i < *n_params; i++) {
        (*params)[i].name = NULL;
        func_call_value(argv[i + 1 + first], &(*params)[i].value);
    }
    if (precheck_request(sqlite3_context_db_handle(ctx), sql, len, *n_params,
                         checked, &refused, why, sizeof why) != 0) {
        snprintf(errmsg, errmsg_len, "%s: not applied: %.990s", fn, why);
        func_call_error(ctx, refused ? RAFTSQL_REFUSED : RAFTSQL_INVALID,
                        errmsg);
        return -1;
    }
    return 0;
}

const char *func_call_main_file(sqlite3_context *ctx, const char *fn)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    const char *file = sqlite3_db_filename(db, "main");
    if (file == NULL || file[0] == '\0') {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "%s: the main database is in-memory or temporary; open a "
                 "database file",
                 fn);
        func_call_error(ctx, RAFTSQL_INVALID, msg);
        return NULL;
    }
    return file;
}
