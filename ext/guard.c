/* The write guard (see guard.h). */

#include "guard.h"

#include <stdio.h>
#include <string.h>

#include "registry.h"

SQLITE_EXTENSION_INIT3

static int is_main(const char *db)
{
    return db != NULL && strcmp(db, "main") == 0;
}

static int guard(void *arg, int action, const char *a1, const char *a2,
                 const char *db_name, const char *trigger)
{
    sqlite3 *db = arg;
    const char *what = NULL;
    const char *file;
    (void)trigger;

    switch (action) {
        case SQLITE_INSERT:
        case SQLITE_UPDATE:
        case SQLITE_DELETE:
        case SQLITE_CREATE_INDEX:
        case SQLITE_CREATE_TABLE:
        case SQLITE_CREATE_TRIGGER:
        case SQLITE_CREATE_VIEW:
        case SQLITE_DROP_INDEX:
        case SQLITE_DROP_TABLE:
        case SQLITE_DROP_TRIGGER:
        case SQLITE_DROP_VIEW:
        case SQLITE_CREATE_VTABLE:
        case SQLITE_DROP_VTABLE:
        case SQLITE_REINDEX:
        case SQLITE_ANALYZE:
            if (is_main(db_name)) {
                what = a1;
            }
            break;
        case SQLITE_ALTER_TABLE:
            if (is_main(a1)) {
                what = a2;
            }
            break;
        case SQLITE_PRAGMA:
            /* The pragmas that write the database file itself. */
            if (a2 != NULL && (db_name == NULL || is_main(db_name)) &&
                (sqlite3_stricmp(a1, "user_version") == 0 ||
                 sqlite3_stricmp(a1, "application_id") == 0)) {
                what = a1;
            }
            break;
        default:
            break;
    }
    if (what == NULL) {
        return SQLITE_OK;
    }
    file = sqlite3_db_filename(db, "main");
    if (file == NULL || file[0] == '\0' || !ext_registry_running(file)) {
        return SQLITE_OK;
    }
    if (sqlite3_strnicmp(what, "sqlite_", 7) == 0) {
        what = "the schema";
    }
    fprintf(stderr,
            "raftsql: direct write to %s refused: this database is a Raft "
            "replica; write through raft_exec('...')\n",
            what);
    return SQLITE_DENY;
}

int ext_guard_install(sqlite3 *db)
{
    return sqlite3_set_authorizer(db, guard, db);
}
