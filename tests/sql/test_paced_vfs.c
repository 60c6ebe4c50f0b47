/* Unit tests of the paced VFS (sql/paced_vfs.c): writes through it reach
 * the file, and a failed sync of the pace's is the next sync's failure,
 * as the kernel reports a lost write-back once per open file. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sqlite3.h>

#include "sql/copy_pace.h"
#include "sql/paced_vfs.h"
#include "tests/sql/helpers.h"

/* A VFS under the paced one whose main database files fail their first
 * xSync after @arm (EIO met by a background write-back: reported once). */
static sqlite3_vfs *real_vfs;
static sqlite3_vfs fail_vfs;
static sqlite3_io_methods fail_io;
static int (*real_sync)(sqlite3_file *, int);
static int armed;        /* the next main database xSync fails */
static int failed_syncs; /* how many did */
static int main_syncs;   /* main database xSyncs seen */

static int fail_sync(sqlite3_file *f, int flags)
{
    main_syncs++;
    if (armed) {
        armed = 0;
        failed_syncs++;
        return SQLITE_IOERR_FSYNC;
    }
    return real_sync(f, flags);
}

static int fail_open(sqlite3_vfs *v, const char *name, sqlite3_file *file,
                     int flags, int *out_flags)
{
    int rc = real_vfs->xOpen(real_vfs, name, file, flags, out_flags);

    (void)v;
    if (rc == SQLITE_OK && (flags & SQLITE_OPEN_MAIN_DB) != 0 &&
        file->pMethods != NULL) {
        if (real_sync == NULL) {
            fail_io = *file->pMethods;
            real_sync = fail_io.xSync;
            fail_io.xSync = fail_sync;
        }
        file->pMethods = &fail_io;
    }
    return rc;
}

static uint64_t still(void *arg)
{
    (void)arg;
    return 1;
}

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;

    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fail_msg("%s: %s", sql, err);
    }
}

/* 12 MiB written under a pace with no rate: the pace syncs the file
 * after 8 MiB; when that sync fails, the commit's own sync (which the
 * kernel would let pass) fails instead, and the transaction is not
 * reported committed; without the failure, everything is written. */
static void test_sync_failure_is_reported(void **state)
{
    struct tmpdb t;
    struct paced_vfs v;
    struct copy_pace pace;
    struct sql_pace cfg = {0, still, NULL};
    sqlite3 *db;
    int rc;

    (void)state;
    tmpdb_init(&t);
    real_vfs = sqlite3_vfs_find(NULL);
    fail_vfs = *real_vfs;
    fail_vfs.zName = "test-fail-sync";
    fail_vfs.xOpen = fail_open;
    assert_int_equal(sqlite3_vfs_register(&fail_vfs, 1), SQLITE_OK);
    assert_int_equal(paced_vfs_init(&v), 0);
    assert_int_equal(sqlite3_vfs_register(real_vfs, 1), SQLITE_OK);

    assert_int_equal(
        sqlite3_open_v2(t.path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        v.name),
        SQLITE_OK);
    exec_ok(db, "PRAGMA cache_size=-1024; CREATE TABLE b(x BLOB)");
    copy_pace_init(&pace, NULL, &cfg, NULL);
    paced_vfs_set(&v, &pace);

    exec_ok(db,
            "BEGIN; WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT "
            "i + 1 FROM c WHERE i < 3000) INSERT INTO b SELECT "
            "randomblob(4000) FROM c; COMMIT");
    assert_int_equal(failed_syncs, 0);
    assert_true(main_syncs >= 2); /* the pace's, then the commit's */

    armed = 1;
    rc = sqlite3_exec(db,
                      "BEGIN; WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
                      "SELECT i + 1 FROM c WHERE i < 3000) INSERT INTO b "
                      "SELECT randomblob(4000) FROM c; COMMIT",
                      NULL, NULL, NULL);
    assert_int_equal(failed_syncs, 1);
    if ((rc & 0xff) != SQLITE_IOERR) {
        fail_msg(
            "the commit after a failed sync of the pace's returned "
            "%d (%s), not SQLITE_IOERR",
            rc, sqlite3_errmsg(db));
    }
    (void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);

    paced_vfs_set(&v, NULL);
    (void)copy_pace_close(&pace);
    sqlite3_close(db);
    paced_vfs_close(&v);
    sqlite3_vfs_unregister(&fail_vfs);
    tmpdb_remove(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_failure_is_reported),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
