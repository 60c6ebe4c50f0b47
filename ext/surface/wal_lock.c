/* The WAL write lock of a host connection under the write lease
 * (wal_lock.h). */

#include "wal_lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../raft/err.h"
#include "../runtime/node.h"
#include "registry.h"

SQLITE_EXTENSION_INIT3

/* Longest wait for the lock under a lease, ms: the node's applier
 * finishing the batch that caught up to the grant (SQL__BUSY_TIMEOUT_MS is
 * the applier's own patience). */
#define WAL_LOCK_OWN_WORK_MS 5000

/* SQLite's WAL lock slots (wal.c): the writer's, the checkpointer's. */
#define WAL_WRITE_SLOT 0
#define WAL_CKPT_SLOT 1

/* One wrapped file: its methods first, so that the file's pMethods
 * points at this struct. */
struct wrapped {
    sqlite3_io_methods m;           /* the copy the file now uses */
    const sqlite3_io_methods *orig; /* the file's own */
    char *path;                     /* the database file (malloc'd) */
    uint64_t holder;                /* the lease holder's token */
    uint64_t lease;                 /* held with the write lock, 0 */
    int ckpt;                       /* the checkpoint lock is held */
    int write;                      /* the write lock is held */
    char why[400];                  /* why the lock was taken without a
                                          lease ("" otherwise) */
};

static int wrapped_shm_lock(sqlite3_file *f, int ofst, int n, int flags);

/* of returns @f's wrapper, or NULL when @f is not wrapped. */
static struct wrapped *of(sqlite3_file *f)
{
    if (f == NULL || f->pMethods == NULL ||
        f->pMethods->xShmLock != wrapped_shm_lock) {
        return NULL;
    }
    return (struct wrapped *)(void *)f->pMethods;
}

/* wal_lease_acquire asks the node of @w's file for the lease. Returns
 * SQLITE_OK with w->lease set, or with w->why set (taken without one:
 * plain writes are not served here), or SQLITE_BUSY. */
static int wal_lease_acquire(struct wrapped *w)
{
    struct ext_node *node = ext_registry_acquire(w->path);
    uint64_t id = 0;
    int rc;

    w->why[0] = '\0';
    if (node == NULL) {
        snprintf(w->why, sizeof w->why,
                 "no raftsql node serves %s any more (its node stopped): "
                 "start it (raft_start) and write again",
                 w->path);
        return SQLITE_OK;
    }
    rc = ext_node_lease_acquire(node, w->holder, &id, w->why, sizeof w->why);
    ext_registry_release(node);
    if (rc == 0) {
        w->lease = id;
        w->why[0] = '\0';
        return SQLITE_OK;
    }
    if (rc == RAFT_BUSY) {
        return SQLITE_BUSY;
    }
    return SQLITE_OK;
}

/* wal_lease_release ends @w's lease, if any. */
static void wal_lease_release(struct wrapped *w)
{
    struct ext_node *node;
    uint64_t id = w->lease;

    w->lease = 0;
    if (id == 0) {
        return;
    }
    node = ext_registry_acquire(w->path);
    if (node != NULL) {
        ext_node_lease_release(node, id);
        ext_registry_release(node);
    }
}

static int wrapped_shm_lock(sqlite3_file *f, int ofst, int n, int flags)
{
    struct wrapped *w = of(f);
    int rc;

    if (ofst == WAL_CKPT_SLOT && n >= 1 && (flags & SQLITE_SHM_EXCLUSIVE)) {
        rc = w->orig->xShmLock(f, ofst, n, flags);
        if (rc == SQLITE_OK) {
            w->ckpt = (flags & SQLITE_SHM_LOCK) != 0;
        }
        return rc;
    }
    if (ofst != WAL_WRITE_SLOT || n != 1 || !(flags & SQLITE_SHM_EXCLUSIVE)) {
        return w->orig->xShmLock(f, ofst, n, flags);
    }
    if (flags & SQLITE_SHM_UNLOCK) {
        rc = w->orig->xShmLock(f, ofst, n, flags);
        w->write = 0;
        wal_lease_release(w);
        w->why[0] = '\0';
        return rc;
    }
    if (!w->ckpt && w->lease == 0) {
        rc = wal_lease_acquire(w);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    rc = w->orig->xShmLock(f, ofst, n, flags);
    if (rc == SQLITE_BUSY && w->lease != 0) {
        /* Under the lease no other writer may hold the lock: only this
         * node's applier, finishing the batch that caught up to the
         * grant, or a checkpoint. That is the node's own work, briefly:
         * wait for it here rather than hand a connection with no busy
         * timeout (the shell's) SQLITE_BUSY for it. */
        struct timespec t0, now, ms = {.tv_sec = 0, .tv_nsec = 1000000L};
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            nanosleep(&ms, NULL);
            rc = w->orig->xShmLock(f, ofst, n, flags);
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while (rc == SQLITE_BUSY &&
                 (now.tv_sec - t0.tv_sec) * 1000 +
                         (now.tv_nsec - t0.tv_nsec) / 1000000 <
                     WAL_LOCK_OWN_WORK_MS);
    }
    if (rc != SQLITE_OK) {
        wal_lease_release(w);
        return rc;
    }
    w->write = 1;
    return SQLITE_OK;
}

static int wrapped_close(sqlite3_file *f)
{
    struct wrapped *w = of(f);
    int rc;

    /* The lock went with the connection (SQLite unlocks first; a lease
     * still held here is ended all the same). */
    wal_lease_release(w);
    f->pMethods = w->orig;
    rc = w->orig->xClose(f);
    free(w->path);
    free(w);
    return rc;
}

int wal_lock_wrap(sqlite3 *db, const char *path, uint64_t holder, char *why,
                  size_t why_len)
{
    sqlite3_file *f = NULL;
    struct wrapped *w;
    int rc;

    rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f);
    if (rc != SQLITE_OK || f == NULL || f->pMethods == NULL) {
        snprintf(why, why_len, "its database file is not open");
        return -1;
    }
    if (of(f) != NULL) {
        return 0;
    }
    if (f->pMethods->iVersion < 2 || f->pMethods->xShmLock == NULL) {
        snprintf(why, why_len,
                 "its file has no shared-memory lock (a VFS without WAL)");
        return -1;
    }
    w = calloc(1, sizeof *w);
    if (w != NULL) {
        w->path = strdup(path);
    }
    if (w == NULL || w->path == NULL) {
        free(w);
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    w->m = *f->pMethods;
    w->m.xShmLock = wrapped_shm_lock;
    w->m.xClose = wrapped_close;
    w->orig = f->pMethods;
    w->holder = holder;
    f->pMethods = &w->m;
    return 0;
}

uint64_t wal_lock_lease(sqlite3 *db, char *why, size_t why_len)
{
    sqlite3_file *f = NULL;
    struct wrapped *w;

    if (why_len > 0) {
        why[0] = '\0';
    }
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) !=
            SQLITE_OK ||
        (w = of(f)) == NULL) {
        return 0;
    }
    if (w->lease == 0 && w->write) {
        snprintf(why, why_len, "%s", w->why);
    }
    return w->lease;
}
