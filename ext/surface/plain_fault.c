/* Injected crash and failure points of a plain write's COMMIT
 * (plain_fault.h). */

#include "plain_fault.h"

SQLITE_EXTENSION_INIT3

#ifdef RAFTSQL_TEST_FAULTS

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../sql/sql.h"

/* The point fired already (once per process). */
static atomic_int fired;

/* stop-after-local-commit: armed at the quorum, fired at the unlock. */
static atomic_int stop_armed;

/* full-at-local-commit: the WAL file whose next write fails, and its own
 * methods, which that write puts back. One at a time: it fires once. */
static struct {
    sqlite3_io_methods m;
    const sqlite3_io_methods *orig;
} full;

static int full_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 at)
{
    (void)p;
    (void)n;
    (void)at;
    f->pMethods = full.orig;
    return SQLITE_FULL;
}

/* take returns whether the fault of the environment is @name and has not
 * fired yet, and marks it fired. */
static int take(const char *name)
{
    const char *want = getenv("RAFTSQL_TEST_PLAIN_FAULT");
    int no = 0;
    return want != NULL && strcmp(want, name) == 0 &&
           atomic_compare_exchange_strong(&fired, &no, 1);
}

void plain_fault_after_quorum(sqlite3 *db)
{
    sqlite3_file *wal = NULL;

    if (take("kill-after-quorum")) {
        raise(SIGKILL);
    }
    if (take("stop-after-local-commit")) {
        atomic_store(&stop_armed, 1);
    }
    if (take("full-at-local-commit") &&
        sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) ==
            SQLITE_OK &&
        wal != NULL && wal->pMethods != NULL) {
        full.orig = wal->pMethods;
        full.m = *wal->pMethods;
        full.m.xWrite = full_write;
        wal->pMethods = &full.m;
    }
}

void plain_fault_after_local_commit(void)
{
    if (atomic_exchange(&stop_armed, 0)) {
        raise(SIGSTOP);
    }
}

/* stale returns whether stale-at-lock is chosen. */
static int stale(void)
{
    const char *want = getenv("RAFTSQL_TEST_PLAIN_FAULT");
    return want != NULL && strcmp(want, "stale-at-lock") == 0;
}

int plain_fault_skip_early(void)
{
    return stale();
}

void plain_fault_slow_ask(void)
{
    const char *want = getenv("RAFTSQL_TEST_PLAIN_FAULT");
    struct timespec t = {.tv_sec = 0,
                         .tv_nsec = PLAIN_FAULT_SLOW_ASK_MS * 1000000L};

    if (want != NULL && strcmp(want, "slow-ask") == 0) {
        nanosleep(&t, NULL);
    }
}

void plain_fault_before_ask(sqlite3_file *file)
{
    struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000L};
    unsigned char seen[SQL_WAL_HDR_LEN], now[SQL_WAL_HDR_LEN];

    if (!stale() || sql_wal_header(file, seen) != 0) {
        return;
    }
    for (int i = 0; i < 5000; i++) {
        if (sql_wal_header(file, now) == 0 &&
            memcmp(now, seen, sizeof now) != 0) {
            return;
        }
        nanosleep(&ms, NULL);
    }
}

#else

int plain_fault_skip_early(void)
{
    return 0;
}

void plain_fault_slow_ask(void)
{
}

void plain_fault_before_ask(sqlite3_file *file)
{
    (void)file;
}

void plain_fault_after_quorum(sqlite3 *db)
{
    (void)db;
}

void plain_fault_after_local_commit(void)
{
}

#endif
