/* A call's values and interrupt (func_call.h). */

#include "func_call.h"

#include <string.h>

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
