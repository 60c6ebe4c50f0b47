/* The WAL write lock of a host connection under the write lease
 * (wal_lock.h). */

#include "wal_lock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../raft/err.h"
#include "../../sql/sql.h"
#include "../runtime/node.h"
#include "busy_clock.h"
#include "lease_client.h"
#include "plain_fault.h"

SQLITE_EXTENSION_INIT3

/* Longest wait for the lock under a lease, ms: the node's applier
 * finishing the batch that caught up to the grant (SQL__BUSY_TIMEOUT_MS is
 * the applier's own patience). */
#define WAL_LOCK_OWN_WORK_MS 5000
/* ... on a busy handler's retry: a try within WAL_LOCK_AGAIN_MS of the
 * last one that found the lock kept. SQLite's busy timeout counts only
 * the handler's own sleeps: 5 s at each of its retries made a writer
 * with a busy timeout of 300 ms meet SQLITE_BUSY after 65 s. */
#define WAL_LOCK_AGAIN_WORK_MS 20
#define WAL_LOCK_AGAIN_MS 250
/* How long the first ask at a read lock (read_ask) asks again while the
 * lease is busy, ms: a first ask's wait in the node's queue. */
#define WAL_READ_ASK_FIRST_MS 250

/* SQLite's WAL lock slots (wal.c): the writer's, the checkpointer's,
 * and the readers' marks (WAL_READ_LOCK(0) to (4)). */
#define WAL_WRITE_SLOT 0
#define WAL_CKPT_SLOT 1
#define WAL_READ_SLOT 3
#define WAL_READ_SLOTS 5

/* One wrapped file: its methods first, so that the file's pMethods
 * points at this struct. */
/* The -wal file of a wrapped database file, its sync wrapped: a copy of
 * its methods with xSync and xClose replaced (wal_lock_skip_sync). Owned
 * by its database file's wrapper (freed with it); @file NULL once the
 * -wal file closed (SQLite closes it first). */
struct wal_sync {
    sqlite3_io_methods m;           /* the copy the -wal file uses */
    const sqlite3_io_methods *orig; /* its own */
    sqlite3_file *file;             /* the -wal file, NULL when closed */
    int skip;                       /* its syncs are skipped now */
};

struct wrapped {
    sqlite3_io_methods m;           /* the copy the file now uses */
    const sqlite3_io_methods *orig; /* the file's own */
    char *path;                     /* the database file (malloc'd) */
    sqlite3 *db;                    /* the connection it was wrapped for
                                       (read_begin's argument; not used
                                       while shared) */
    uint64_t holder;                /* the lease holder's token */
    struct lease_hold lease;        /* held with the write lock */
    const void *early;              /* the statement that took the lease
                                       before the lock (wal_lock_early),
                                       until the lock is taken */
    const void *asked;              /* the statement whose start asked
                                       for the lease in vain
                                       (wal_lock_early), until it ends
                                       (a retry asks for it again) */
    int refused;                    /* asked's ask at a read lock was
                                       answered busy, not yet passed on
                                       at the write lock */
    int read_asks;                  /* asks at read locks for asked */
    int txn_hold;                   /* a lease granted for the statement
                                       that asked (wal_lock_txn_early)
                                       is held to its transaction's end,
                                       not the statement's */
    int starved;                    /* one_try's write was let go for a
                                       stale snapshot, or refused the
                                       lease (wal_lock_stmt_end) */
    const void *one_try;            /* the statement that writes after
                                       its transaction read
                                       (wal_lock_one_try), until it ends
                                       or the lock is let go */
    int ckpt;                       /* the checkpoint lock is held */
    int write;                      /* the write lock is held */
    struct sql_wal_marks marks;     /* the WAL-index header read under
                                          it (sql.h) */
    int locked_read;                /* marks.locked was read when the
                                          lock was taken under a lease */
    char why[400];                  /* why the lock was taken without a
                                          lease ("" otherwise) */
    char busy_why[400];             /* why the latest lease ask answered
                                       busy ("" before the first) */
    int64_t busy_at;                /* when, CLOCK_MONOTONIC ns */
    int64_t kept_at;                /* when a try under a lease last found
                                       the lock kept, CLOCK_MONOTONIC ns,
                                       0 */
    struct wal_sync *wal;           /* its -wal file's sync, once wrapped */
    /* The connection's capture is not armed: a write transaction's lock
     * is refused (wal_lock_set_armed). */
    atomic_int unarmed;
    /* Wrapped for more than one connection (a shared cache; set from
     * another connection's thread): unarmed means nothing. */
    atomic_int shared;
    /* A read slot is locked: a read transaction is open (a write lock
     * taken without one is a WAL recovery's). */
    int reading;
    /* Wrapped for its read transactions only (wal_lock_wrap_reads): every
     * other lock is SQLite's own, followed for write alone. */
    int reads_only;
};

static int wrapped_shm_lock(sqlite3_file *f, int ofst, int n, int flags);

/* mono_ns returns CLOCK_MONOTONIC now, ns. */
static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The process's read-begin check (wal_lock_set_read_begin), NULL
 * before it is set. */
static _Atomic(wal_lock_read_begin_cb) read_begin;

void wal_lock_set_read_begin(wal_lock_read_begin_cb cb)
{
    atomic_store(&read_begin, cb);
}

/* of returns @f's wrapper, or NULL when @f is not wrapped. */
static struct wrapped *of(sqlite3_file *f)
{
    if (f == NULL || f->pMethods == NULL ||
        f->pMethods->xShmLock != wrapped_shm_lock) {
        return NULL;
    }
    return (struct wrapped *)(void *)f->pMethods;
}

/* wal_lease_acquire asks the node serving @w's file (this process's, or
 * another's: lease_client.h) for the lease, with @flags (EXT_LEASE_*).
 * Returns SQLITE_OK with w->lease held, or with w->why set (taken without
 * one: plain writes are not served here), or SQLITE_BUSY. */
static int wal_lease_acquire(struct wrapped *w, unsigned flags)
{
    int64_t t0 = mono_ns();
    int rc;

    w->why[0] = '\0';
    plain_fault_slow_ask();
    rc = lease_client_acquire(w->path, w->holder, flags, &w->lease, w->why,
                              sizeof w->why);
    /* A wait SQLite's busy handler does not count: its next sleeps are
     * that much shorter (busy_clock.h). */
    busy_clock_owe(mono_ns() - t0);
    if (rc == 0) {
        /* Granted: the busy answers before it were the wait, no refusal
         * (raft_last_error() gives none for a write that went through). */
        w->why[0] = '\0';
        w->busy_why[0] = '\0';
        return SQLITE_OK;
    }
    if (rc == RAFT_BUSY) {
        snprintf(w->busy_why, sizeof w->busy_why, "%s", w->why);
        w->busy_at = mono_ns();
        return SQLITE_BUSY;
    }
    return SQLITE_OK;
}

/* wal_lease_release ends @w's lease, if any, with @marks (NULL: not
 * read). */
static void wal_lease_release(struct wrapped *w,
                              const struct sql_wal_marks *marks)
{
    w->early = NULL;
    w->txn_hold = 0;
    lease_client_release(w->path, &w->lease, marks);
    w->locked_read = 0;
}

/* read_ask asks for the lease for @w's statement whose ask at its start
 * was answered busy (w->asked), as SQLite takes a read mark (file @f's
 * read lock) to begin its read transaction, at the statement's first
 * try or a busy handler's retry: before its snapshot is settled. SQLite
 * checks after the read lock that the WAL-index header did not move, and
 * reads it again if it did: a grant that came after another writer's
 * commit leaves the statement a snapshot that is not stale, where a
 * wait at the write lock leaves it one that is (SQLITE_BUSY_SNAPSHOT,
 * and the lease let go unused). At the statement's first try it asks
 * again while busy, up to WAL_READ_ASK_FIRST_MS; at a retry, once (the
 * node waits 20 ms for a retry: lease_patience_ms), or not at all while
 * the asks so far took longer than the busy handler slept
 * (busy_clock_ahead: refused, as if answered busy). A grant is held for
 * the statement and let go at its end if unused (wal_lock_stmt_end); a
 * refusal is kept for the write lock (w->refused), and no read lock
 * asks again until it answered. */
static __attribute__((noinline)) void read_ask(struct wrapped *w,
                                               sqlite3_file *f)
{
    int64_t t0;
    int rc;

    if (w->asked == NULL || w->refused || w->lease.id != 0 || w->write ||
        w->ckpt) {
        return;
    }
    if (w->read_asks > 0 && busy_clock_ahead()) {
        /* A retry before the busy handler's time (busy_clock.h): busy
         * at once, with the last answer's reason. */
        w->refused = 1;
        return;
    }
    plain_fault_before_ask(f);
    t0 = mono_ns();
    for (;;) {
        rc = wal_lease_acquire(w, 0);
        /* The first try waits its turn as a first ask would: the ask
         * at the statement's start, answered busy after 250 ms, left it
         * close to its turn (with 64 writers of one node the queue's
         * wait is about that long), and the node answers each ask of a
         * retry within 20 ms. */
        if (rc != SQLITE_BUSY || w->read_asks > 0 ||
            mono_ns() - t0 >= WAL_READ_ASK_FIRST_MS * 1000000LL) {
            break;
        }
    }
    w->read_asks++;
    if (rc != SQLITE_OK) {
        w->refused = 1;
    } else if (w->lease.id != 0) {
        w->early = w->asked;
    }
}

/* shm_lock_rest is wrapped_shm_lock for every lock but a read mark's
 * (the checkpoint's and the write lock), out of the read path's way. */
static __attribute__((noinline)) int shm_lock_rest(struct wrapped *w,
                                                   sqlite3_file *f, int ofst,
                                                   int n, int flags)
{
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
    if (w->reads_only) {
        rc = w->orig->xShmLock(f, ofst, n, flags);
        if (rc == SQLITE_OK) {
            w->write = (flags & SQLITE_SHM_LOCK) != 0;
        }
        return rc;
    }
    if (flags & SQLITE_SHM_UNLOCK) {
        /* Still under the lock, after the commit: nobody but this
         * connection committed since marks.locked was read. */
        const struct sql_wal_marks *marks =
            w->lease.id != 0 && w->locked_read &&
                    sql_wal_header(f, w->marks.done) == 0
                ? &w->marks
                : NULL;
        rc = w->orig->xShmLock(f, ofst, n, flags);
        if (w->one_try != NULL && marks != NULL &&
            memcmp(w->marks.locked, w->marks.done, SQL_WAL_HDR_LEN) == 0) {
            /* Let go while the write of a transaction that read is still
             * running, nothing committed: SQLite found its snapshot
             * stale (SQLITE_BUSY_SNAPSHOT), which says nothing more. */
            w->busy_at = mono_ns();
            w->starved = 1;
            snprintf(w->busy_why, sizeof w->busy_why,
                     "another writer committed after this transaction "
                     "read (its snapshot is stale: SQLITE_BUSY_SNAPSHOT); "
                     "nothing was written: ROLLBACK and run the "
                     "transaction again within %d s (this connection's "
                     "transactions that begin with the same read then "
                     "ask for the write lease before they read), or open "
                     "it with BEGIN IMMEDIATE",
                     WAL_LOCK_STARVED_MS / 1000);
        }
        w->write = 0;
        w->one_try = NULL;
        if (w->wal != NULL) {
            w->wal->skip = 0;
        }
        if (w->lease.id != 0) {
            plain_fault_after_local_commit();
        }
        wal_lease_release(w, marks);
        w->why[0] = '\0';
        return rc;
    }
    if (!w->ckpt && w->reading &&
        atomic_load_explicit(&w->unarmed, memory_order_relaxed) &&
        !atomic_load_explicit(&w->shared, memory_order_relaxed)) {
        /* Every statement that is not a read arms the capture as the
         * guard sees it prepared: this write got past the guard (an
         * in-place VACUUM, or any write, after the host replaced the
         * authorizer), and nothing of it would be replicated. Refused
         * at once: not busy, which SQLite's busy handler would retry. */
        w->busy_at = mono_ns();
        snprintf(w->busy_why, sizeof w->busy_why,
                 "a write began that raftsql did not see prepared (the "
                 "connection's authorizer, raftsql's guard, was replaced; "
                 "or a blob opened for writing, which no authorizer sees): "
                 "nothing was written; leave the authorizer to raftsql on a "
                 "connection that writes to a replica, and open blobs "
                 "read-only");
        return SQLITE_READONLY;
    }
    if (!w->ckpt && w->lease.id == 0) {
        if (w->asked != NULL && w->one_try == NULL && w->refused) {
            /* Its ask as it began to read was answered busy: asking
             * again here would wait with a snapshot, which another
             * writer's commit meanwhile makes stale. Busy, with that
             * answer's reason: the busy handler's retry reads again. */
            w->refused = 0;
            return SQLITE_BUSY;
        }
        if (w->one_try == NULL && busy_clock_ahead()) {
            return SQLITE_BUSY; /* before the handler's time, as above */
        }
        /* SQLite calls no busy handler for a transaction that read
         * before this write: its one try (EXT_LEASE_ONE_TRY). */
        rc = wal_lease_acquire(w, w->one_try != NULL ? EXT_LEASE_ONE_TRY : 0);
        if (rc != SQLITE_OK) {
            w->starved = w->one_try != NULL;
            return rc;
        }
    }
    rc = w->orig->xShmLock(f, ofst, n, flags);
    if (rc == SQLITE_BUSY && w->lease.id != 0) {
        /* Under the lease no other writer may hold the lock: only this
         * node's applier, finishing the batch that caught up to the
         * grant, or a checkpoint. That is the node's own work, briefly:
         * wait for it here rather than hand a connection with no busy
         * timeout (the shell's) SQLITE_BUSY for it. */
        struct timespec t0, now, ms = {.tv_sec = 0, .tv_nsec = 1000000L};
        int64_t start;
        int limit;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        start = (int64_t)t0.tv_sec * 1000000000 + t0.tv_nsec;
        limit = w->kept_at != 0 &&
                        start - w->kept_at < WAL_LOCK_AGAIN_MS * 1000000LL
                    ? WAL_LOCK_AGAIN_WORK_MS
                    : WAL_LOCK_OWN_WORK_MS;
        do {
            nanosleep(&ms, NULL);
            rc = w->orig->xShmLock(f, ofst, n, flags);
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while (rc == SQLITE_BUSY &&
                 (now.tv_sec - t0.tv_sec) * 1000 +
                         (now.tv_nsec - t0.tv_nsec) / 1000000 <
                     limit);
        busy_clock_owe((int64_t)(now.tv_sec - t0.tv_sec) * 1000000000 +
                       (now.tv_nsec - t0.tv_nsec));
        if (rc == SQLITE_BUSY) {
            /* raft_last_error() says why: the lease was no reason. */
            w->kept_at = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
            w->busy_at = w->kept_at;
            snprintf(w->busy_why, sizeof w->busy_why,
                     "the write lease was granted, but another connection "
                     "keeps the file's write lock (this node's apply or a "
                     "checkpoint, a writer whose COMMIT still waits for its "
                     "outcome, or a process without raftsql writing the "
                     "file; waited %d ms, %d ms at each retry of the busy "
                     "handler): nothing was written; try again",
                     WAL_LOCK_OWN_WORK_MS, WAL_LOCK_AGAIN_WORK_MS);
        } else {
            w->kept_at = 0;
        }
    }
    if (rc != SQLITE_OK) {
        wal_lease_release(w, NULL);
        return rc;
    }
    w->write = 1;
    w->early = NULL;
    /* The header as the lease's transaction finds it: the node's
     * applier compares it with its own last reading. */
    w->locked_read =
        w->lease.id != 0 && sql_wal_header(f, w->marks.locked) == 0;
    return SQLITE_OK;
}

/* read_end_release lets go of the lease held for a transaction that
 * read and never wrote (wrapped_shm_lock, at its read mark's unlock). */
static __attribute__((noinline)) void read_end_release(struct wrapped *w)
{
    wal_lease_release(w, NULL);
}

/* wrapped_shm_lock is the wrapped file's xShmLock. A read transaction's
 * two calls (its read mark locked and unlocked, shared) come first, with
 * the fewest loads and no call but SQLite's own: they are every plain
 * read's cost of the wrapper (docs/performance.md); the rest is
 * shm_lock_rest. SQLite calls it only through the wrapped file's
 * methods, so f->pMethods is its wrapper. */
static int wrapped_shm_lock(sqlite3_file *f, int ofst, int n, int flags)
{
    struct wrapped *w = (struct wrapped *)(void *)f->pMethods;
    int rc;

    if ((unsigned)(ofst - WAL_READ_SLOT) < WAL_READ_SLOTS && n == 1) {
        if (flags == (SQLITE_SHM_LOCK | SQLITE_SHM_SHARED)) {
            /* A read transaction begins: a statement prepared before the
             * guard began refusing reads of the file, on a connection
             * too busy since to be expired, is refused here
             * (SQLITE_SCHEMA: prepared anew) before it reads. */
            wal_lock_read_begin_cb cb =
                atomic_load_explicit(&read_begin, memory_order_relaxed);
            /* Not under the write lock: SQLite takes a read mark there in
             * a commit, as it restarts the WAL (walRestartLog), after the
             * commit hook accepted it (failing it then would roll back a
             * commit the cluster took); nor under a checkpoint's. */
            if (cb != NULL && !w->write && !w->ckpt &&
                !atomic_load_explicit(&w->shared, memory_order_relaxed) &&
                cb(w->db) != SQLITE_OK) {
                return SQLITE_SCHEMA;
            }
            if (w->asked != NULL) {
                read_ask(w, f);
            }
            rc = w->orig->xShmLock(f, ofst, n, flags);
            w->reading = rc == SQLITE_OK;
            return rc;
        }
        if (flags == (SQLITE_SHM_UNLOCK | SQLITE_SHM_SHARED)) {
            /* The read transaction ends (or SQLite reads its header
             * again, before any read: nothing commits under the lease).
             * A lease held for a transaction that never wrote goes with
             * it. */
            rc = w->orig->xShmLock(f, ofst, n, flags);
            w->reading = 0;
            if (w->txn_hold && w->lease.id != 0 && !w->write) {
                read_end_release(w);
            }
            return rc;
        }
    }
    return shm_lock_rest(w, f, ofst, n, flags);
}

/* file_of returns the wrapper of @db's main file, or NULL. */
static struct wrapped *file_of(sqlite3 *db)
{
    sqlite3_file *f = NULL;

    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) !=
        SQLITE_OK) {
        return NULL;
    }
    return of(f);
}

/* early_ask asks for the lease for statement @stmt of @w at its start
 * (wal_lock_early, wal_lock_txn_early). */
static void early_ask(struct wrapped *w, const void *stmt)
{
    /* Busy, or no node: nothing held, the read lock asks again. */
    w->asked = NULL;
    w->refused = 0;
    w->read_asks = 0;
    /* A statement begins: the waits of the ones before are not its own. */
    busy_clock_forget();
    if (plain_fault_skip_early()) {
        w->asked = stmt;
        return;
    }
    if (wal_lease_acquire(w, 0) == SQLITE_OK && w->lease.id != 0) {
        w->early = stmt;
    } else {
        w->asked = stmt;
    }
}

void wal_lock_early(sqlite3 *db, const void *stmt)
{
    struct wrapped *w = file_of(db);

    if (w == NULL || w->lease.id != 0 || w->write || w->ckpt) {
        return;
    }
    early_ask(w, stmt);
}

void wal_lock_txn_early(sqlite3 *db, const void *stmt)
{
    struct wrapped *w = file_of(db);

    if (w == NULL || w->lease.id != 0 || w->write || w->ckpt) {
        return;
    }
    w->txn_hold = 1;
    early_ask(w, stmt);
}

void wal_lock_one_try(sqlite3 *db, const void *stmt)
{
    struct wrapped *w = file_of(db);

    if (w != NULL && w->lease.id == 0 && !w->write && !w->ckpt) {
        w->one_try = stmt;
    }
}

bool wal_lock_stmt_end(sqlite3 *db, const void *stmt)
{
    struct wrapped *w = file_of(db);
    bool starved = false;

    busy_clock_forget();

    if (w != NULL && w->one_try == stmt) {
        w->one_try = NULL;
    }
    if (w != NULL && w->starved) {
        w->starved = 0;
        starved = true;
    }
    if (w != NULL && w->asked == stmt) {
        w->asked = NULL;
        w->refused = 0;
        w->read_asks = 0;
    }
    if (w == NULL || w->early == NULL || w->early != stmt) {
        if (w != NULL && w->txn_hold && w->lease.id == 0) {
            w->txn_hold = 0; /* refused: nothing to hold */
        }
        return starved;
    }
    w->early = NULL;
    if (w->lease.id != 0 && !w->write && !w->txn_hold) {
        wal_lease_release(w, NULL);
    }
    return starved;
}

/* wal_of returns the sync wrapper of -wal file @f (its methods are the
 * wrapper's first member). */
static struct wal_sync *wal_of(sqlite3_file *f)
{
    return (struct wal_sync *)(void *)f->pMethods;
}

static int wal_sync(sqlite3_file *f, int flags)
{
    struct wal_sync *s = wal_of(f);
    return s->skip ? SQLITE_OK : s->orig->xSync(f, flags);
}

static int wal_close(sqlite3_file *f)
{
    struct wal_sync *s = wal_of(f);
    f->pMethods = s->orig;
    s->file = NULL;
    return s->orig->xClose(f);
}

void wal_lock_skip_sync(sqlite3 *db)
{
    sqlite3_file *wal = NULL;
    struct wrapped *w = file_of(db);

    if (w == NULL || w->lease.id == 0 ||
        sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) !=
            SQLITE_OK ||
        wal == NULL || wal->pMethods == NULL || wal->pMethods->xSync == NULL) {
        return;
    }
    if (w->wal == NULL) {
        w->wal = calloc(1, sizeof *w->wal);
        if (w->wal == NULL) {
            return; /* it syncs, as SQLite would */
        }
    }
    if (w->wal->file != wal || wal->pMethods != &w->wal->m) {
        if (w->wal->file != NULL && w->wal->file->pMethods == &w->wal->m) {
            return; /* another -wal file is wrapped: leave both alone */
        }
        w->wal->orig = wal->pMethods;
        w->wal->m = *wal->pMethods;
        w->wal->m.xSync = wal_sync;
        w->wal->m.xClose = wal_close;
        w->wal->file = wal;
        wal->pMethods = &w->wal->m;
    }
    w->wal->skip = 1;
}

static int wrapped_close(sqlite3_file *f)
{
    struct wrapped *w = of(f);
    int rc;

    /* The lock went with the connection (SQLite unlocks first; a lease
     * still held here is ended all the same). */
    wal_lease_release(w, NULL);
    f->pMethods = w->orig;
    rc = w->orig->xClose(f);
    if (w->wal != NULL && w->wal->file != NULL &&
        w->wal->file->pMethods == &w->wal->m) {
        /* Not closed first, against SQLite's order: its own again. */
        w->wal->file->pMethods = w->wal->orig;
    }
    free(w->wal);
    free(w->path);
    free(w);
    return rc;
}

/* wrap is wal_lock_wrap (@reads 0) and wal_lock_wrap_reads (@reads 1,
 * @holder 0). */
static int wrap(sqlite3 *db, const char *path, uint64_t holder, int reads,
                char *why, size_t why_len)
{
    sqlite3_file *f = NULL;
    struct wrapped *w;
    int rc;

    rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f);
    if (rc != SQLITE_OK || f == NULL || f->pMethods == NULL) {
        snprintf(why, why_len, "its database file is not open");
        return -1;
    }
    if ((w = of(f)) != NULL) {
        if (w->db == db) {
            /* Wrapped for its reads at its start, now for plain writes
             * too: the capture that opened with them is armed. */
            if (!reads && w->reads_only) {
                w->holder = holder;
                atomic_store_explicit(&w->unarmed, 0, memory_order_relaxed);
                w->reads_only = 0;
            }
            return 0;
        }
        /* Another connection's file (SQLite's shared cache): one wrapper,
         * whose capture flag no single connection owns. */
        atomic_store_explicit(&w->shared, 1, memory_order_relaxed);
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
    w->db = db;
    w->holder = holder;
    w->reads_only = reads;
    lease_hold_init(&w->lease);
    f->pMethods = &w->m;
    return 0;
}

int wal_lock_wrap(sqlite3 *db, const char *path, uint64_t holder, char *why,
                  size_t why_len)
{
    return wrap(db, path, holder, 0, why, why_len);
}

int wal_lock_wrap_reads(sqlite3 *db, const char *path, char *why,
                        size_t why_len)
{
    return wrap(db, path, 0, 1, why, why_len);
}

void wal_lock_set_armed(sqlite3 *db, bool armed)
{
    struct wrapped *w = file_of(db);

    if (w != NULL) {
        atomic_store_explicit(&w->unarmed, !armed, memory_order_relaxed);
    }
}

const unsigned char *wal_lock_locked_mark(sqlite3 *db)
{
    struct wrapped *w = file_of(db);

    return w != NULL && w->write && w->lease.id != 0 && w->locked_read
               ? w->marks.locked
               : NULL;
}

const struct lease_hold *wal_lock_lease(sqlite3 *db, char *why, size_t why_len)
{
    struct wrapped *w = file_of(db);

    if (why_len > 0) {
        why[0] = '\0';
    }
    if (w == NULL) {
        return NULL;
    }
    if (w->lease.id == 0 && w->write) {
        snprintf(why, why_len, "%s", w->why);
    }
    return w->lease.id != 0 ? &w->lease : NULL;
}

int64_t wal_lock_busy_reason(sqlite3 *db, char *why, size_t why_len)
{
    struct wrapped *w = file_of(db);

    if (why_len > 0) {
        why[0] = '\0';
    }
    if (w == NULL || w->busy_why[0] == '\0') {
        return 0;
    }
    snprintf(why, why_len, "%s", w->busy_why);
    return w->busy_at;
}
