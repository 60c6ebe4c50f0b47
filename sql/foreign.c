/* Commits the node did not make (fsm_internal.h, foreign.c): PRAGMA
 * data_version on the apply connection changes exactly when another
 * connection, of any process, committed to the database file. */

#include <inttypes.h>
#include <stdio.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* read_version reads PRAGMA data_version of the apply connection into
 * @out (a read transaction of its own, or the running one). */
static int read_version(struct sql_fsm *f, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc;

    f->internal = 1;
    rc = sqlite3_prepare_v2(f->db, "PRAGMA main.data_version", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    f->internal = 0;
    return rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "PRAGMA data_version");
}

int foreign_reset(struct sql_fsm *f)
{
    int rc = read_version(f, &f->data_version);
    if (rc == 0) {
        f->foreign = 0;
        f->foreign_why[0] = '\0';
    }
    return rc;
}

int foreign_check(struct sql_fsm *f)
{
    int64_t v = 0;
    int rc;

    if (!f->foreign) {
        rc = read_version(f, &v);
        if (rc != 0) {
            return rc;
        }
        if (v == f->data_version) {
            return 0;
        }
        f->foreign = 1;
        sql_errmsgf(f->foreign_why, sizeof f->foreign_why,
                    "a write the node did not make was committed to %s "
                    "(PRAGMA data_version changed) before index %" PRIu64,
                    f->path, f->applied + 1);
    }
    sql_errmsgf(f->errmsg, sizeof f->errmsg, "%s", f->foreign_why);
    return SQL_ERR_DIVERGED;
}

int foreign_rebase(struct sql_fsm *f)
{
    return f->foreign ? 0 : read_version(f, &f->data_version);
}

int sql_fsm_foreign_check(struct sql_fsm *f)
{
    return foreign_check(f);
}
