/* The configuration stored in the state machine (sql.h, "The
 * configuration"): writing raftsql_config as a configuration entry is
 * applied, and reading it back from the apply connection or from a
 * snapshot file not yet installed. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"
#include "sql.h"

SQLITE_EXTENSION_INIT3

/* read_row reads the row of raftsql_config of database @db into *@out.
 * Returns 0, or an error code with @msg (@msg_len bytes) saying why:
 * SQL_ERR_CORRUPT when the table is missing or its row malformed. */
static int read_row(sqlite3 *db, struct sql_config *out, char *msg,
                    size_t msg_len)
{
    struct sql_config c = {0, 0, NULL, 0};
    sqlite3_stmt *s = NULL;
    int rc;

    rc = sqlite3_prepare_v2(db,
                            "SELECT idx, term, data FROM main.raftsql_config "
                            "WHERE id = 0",
                            -1, &s, NULL);
    if (rc != SQLITE_OK) {
        sql_errmsgf(msg, msg_len, "read raftsql_config: %s",
                    sqlite3_errmsg(db));
        /* SQLITE_ERROR here is "no such table". */
        return (rc & 0xff) == SQLITE_ERROR ? SQL_ERR_CORRUPT
                                           : fsm_from_sqlite(rc);
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const void *p;
        int64_t index = sqlite3_column_int64(s, 0);
        int64_t term = sqlite3_column_int64(s, 1);

        if (sqlite3_column_type(s, 0) != SQLITE_INTEGER ||
            sqlite3_column_type(s, 1) != SQLITE_INTEGER ||
            sqlite3_column_type(s, 2) != SQLITE_BLOB || index <= 0 ||
            term < 0) {
            sql_errmsgf(msg, msg_len,
                        "read raftsql_config: the row is malformed");
            sqlite3_finalize(s);
            return SQL_ERR_CORRUPT;
        }
        c.index = (uint64_t)index;
        c.term = (uint64_t)term;
        p = sqlite3_column_blob(s, 2);
        c.len = (size_t)sqlite3_column_bytes(s, 2);
        if (c.len > 0) {
            c.data = p != NULL ? malloc(c.len) : NULL;
            if (c.data == NULL) {
                sql_errmsgf(msg, msg_len, "read raftsql_config: out of memory");
                sqlite3_finalize(s);
                return SQL_ERR_NOMEM;
            }
            memcpy(c.data, p, c.len);
        }
    } else if (rc != SQLITE_DONE) {
        sql_errmsgf(msg, msg_len, "read raftsql_config: %s (%s)",
                    sqlite3_errmsg(db), sqlite3_errstr(rc));
        sqlite3_finalize(s);
        return fsm_from_sqlite(rc);
    }
    sqlite3_finalize(s);
    *out = c;
    return 0;
}

int config_store(struct sql_fsm *f, const struct sql_fsm_entry *e)
{
    sqlite3_stmt *s = f->stmts[STMT_CONFIG];
    char what[64];

    sqlite3_bind_int64(s, 1, (sqlite3_int64)e->index);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)e->term);
    /* A zero-length blob, never NULL (the column is NOT NULL). */
    if (e->len > 0) {
        sqlite3_bind_blob64(s, 3, e->data, (sqlite3_uint64)e->len,
                            SQLITE_STATIC);
    } else {
        sqlite3_bind_zeroblob(s, 3, 0);
    }
    snprintf(what, sizeof what, "entry %" PRIu64 ": store the configuration",
             e->index);
    return schema_run(f, STMT_CONFIG, what);
}

int sql_fsm_config_read(struct sql_fsm *f, struct sql_config *out)
{
    int rc;

    /* Ours: the authorizer refuses this read to requests only. */
    f->internal = 1;
    rc = read_row(f->db, out, f->errmsg, sizeof f->errmsg);
    f->internal = 0;
    return rc;
}

int sql_snapshot_config_read(const char *path, struct sql_config *out,
                             char *errmsg, size_t errmsg_len)
{
    sqlite3 *db = NULL;
    struct stat st;
    char msg[300];
    int rc;

    if (stat(path, &st) != 0) {
        int err = errno;

        sql_errmsgf(errmsg, errmsg_len, "snapshot %s: %s", path, strerror(err));
        return err == ENOENT ? SQL_ERR_NOTFOUND : SQL_ERR_IOERR;
    }
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot %s: open: %s", path,
                    db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return (rc & 0xff) == SQLITE_NOMEM ? SQL_ERR_NOMEM : SQL_ERR_CORRUPT;
    }
    sqlite3_extended_result_codes(db, 1);
    rc = read_row(db, out, msg, sizeof msg);
    if (rc != 0) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot %s: %s", path, msg);
    }
    sqlite3_close(db);
    return rc;
}

void sql_config_clear(struct sql_config *c)
{
    free(c->data);
    memset(c, 0, sizeof *c);
}
