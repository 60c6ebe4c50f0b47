/* The schema sum of a replica (checksum.h): what the running checksum
 * does not cover of the file, its schema and its header's two user
 * numbers, as one hash recorded with the applied index
 * (raftsql_applied.schema_sum), so that the start's scan finds an index,
 * a trigger, a view or a user_version changed while no node ran. */

#include <string.h>

#include <xxhash.h>

#include "checksum.h"
#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* The schema's rows in a fixed order; raftsql's own are left out (each
 * node creates and alters them as its release does). rootpage is left
 * out too: the same schema has other page numbers on another replica. */
static const char rows_sql[] =
    "SELECT type, name, tbl_name, sql FROM main.sqlite_schema"
    " WHERE lower(substr(name, 1, 8)) <> 'raftsql_'"
    " ORDER BY name, type";

/* The header's numbers that move with a schema change or a PRAGMA of
 * the user's: schema_version (the schema cookie), user_version,
 * application_id; each PRAGMA reads its cookie alone (a table-valued
 * pragma_*() would open a virtual table at every batch). */
static const char *const cookie_sql[SCHEMA_COOKIE_STMTS] = {
    "PRAGMA main.schema_version",
    "PRAGMA main.user_version",
    "PRAGMA main.application_id",
};

/* put_text feeds @p (@len bytes, or NULL) into @st, length first, so
 * that no two rows run into each other. */
static void put_text(XXH3_state_t *st, const unsigned char *p, int len)
{
    int64_t n = p == NULL ? -1 : len;

    XXH3_64bits_update(st, &n, sizeof n);
    if (p != NULL && len > 0) {
        XXH3_64bits_update(st, p, (size_t)len);
    }
}

int schema_sum_compute(sqlite3 *db, uint64_t *out)
{
    sqlite3_stmt *s = NULL;
    XXH3_state_t *st = XXH3_createState();
    int rc;

    if (st == NULL) {
        return SQLITE_NOMEM;
    }
    XXH3_64bits_reset(st);
    rc = sqlite3_prepare_v2(db, rows_sql, -1, &s, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        for (int i = 0; i < 4; i++) {
            put_text(st, sqlite3_column_text(s, i), sqlite3_column_bytes(s, i));
        }
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    s = NULL;
    if (rc == SQLITE_DONE) {
        sqlite3_stmt *cookie[SCHEMA_COOKIE_STMTS] = {NULL};
        struct schema_cookie c;
        rc = schema_sum_cookie(db, cookie, &c);
        schema_sum_cookie_free(cookie);
        if (rc == SQLITE_OK) {
            int64_t numbers[2] = {c.user_version, c.application_id};
            XXH3_64bits_update(st, numbers, sizeof numbers);
        }
    }
    if (rc == SQLITE_OK) {
        *out = XXH3_64bits_digest(st);
    }
    XXH3_freeState(st);
    return rc;
}

int schema_sum_cookie(sqlite3 *db, sqlite3_stmt **stmts,
                      struct schema_cookie *out)
{
    int64_t v[SCHEMA_COOKIE_STMTS];
    int rc = SQLITE_OK;

    for (int i = 0; rc == SQLITE_OK && i < SCHEMA_COOKIE_STMTS; i++) {
        if (stmts[i] == NULL) {
            rc = sqlite3_prepare_v2(db, cookie_sql[i], -1, &stmts[i], NULL);
        }
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(stmts[i]);
        }
        if (rc == SQLITE_ROW) {
            v[i] = sqlite3_column_int64(stmts[i], 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            rc = SQLITE_ERROR;
        }
        if (stmts[i] != NULL) {
            sqlite3_reset(stmts[i]);
        }
    }
    if (rc == SQLITE_OK) {
        out->schema_version = v[0];
        out->user_version = v[1];
        out->application_id = v[2];
    }
    return rc;
}

void schema_sum_cookie_free(sqlite3_stmt **stmts)
{
    for (int i = 0; i < SCHEMA_COOKIE_STMTS; i++) {
        sqlite3_finalize(stmts[i]);
        stmts[i] = NULL;
    }
}
