/* SQLite's pre-update hook, resolved at run time: the host's API table
 * (sqlite3ext.h) has no preupdate_* entries, so they are looked up in the
 * SQLite copy whose API this code calls, or found missing. Private to
 * sql/. */

#ifndef SQL_PREUPDATE_H
#define SQL_PREUPDATE_H

#include <stddef.h>

#include <sqlite3ext.h>

/* The pre-update callback's signature (sqlite3_preupdate_hook). */
typedef void (*sql_preupdate_cb)(void *data, sqlite3 *db, int op,
                                 const char *db_name, const char *table,
                                 sqlite3_int64 key1, sqlite3_int64 key2);

/* The functions of the pre-update hook, all from the same SQLite copy as
 * the API in use, or none. */
struct sql_preupdate {
    void *(*hook)(sqlite3 *db, sql_preupdate_cb cb, void *data); /* set */
    int (*old)(sqlite3 *db, int col, sqlite3_value **out);       /* old value */
    int (*new_)(sqlite3 *db, int col, sqlite3_value **out);      /* new value */
    int (*count)(sqlite3 *db);     /* columns of the row */
    int (*depth)(sqlite3 *db);     /* trigger depth: 0 for the statement's own
                                  rows, 1 for a trigger's, and so on */
    int (*blobwrite)(sqlite3 *db); /* column an sqlite3_blob_write writes,
                                      -1 for another change; NULL when the
                                      copy is older than 3.36.0 (its blob
                                      writes fire no pre-update hook) */
};

/* preupdate_resolve fills @out with the pre-update functions of the
 * SQLite copy that this code calls (the one whose
 * sqlite3_libversion_number is the function the API in use reaches) and
 * returns 0. It returns -1, with @why (@why_len bytes) saying what is
 * missing, when that copy has none (built without
 * SQLITE_ENABLE_PREUPDATE_HOOK), when they cannot be found (a host with a
 * static SQLite that exports nothing), or when the ones found belong to
 * another copy: calling those on our connections would corrupt memory.
 * sqlite3_preupdate_blobwrite alone may be missing (SQLite before 3.36.0):
 * @out->blobwrite is NULL then, and the caller decides. Any thread. */
int preupdate_resolve(struct sql_preupdate *out, char *why, size_t why_len);

#endif /* SQL_PREUPDATE_H */
