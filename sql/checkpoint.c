/* The checkpointer thread and the durable index of the state machine: the
 * index up to which the Raft log may be compacted (sql.h, "The durable
 * point").
 *
 * Happy path: the apply connection runs synchronous=NORMAL (commits are not
 * fsynced). Its WAL hook (on_wal) wakes the checkpointer thread once the WAL
 * holds SQL__CHECKPOINT_FRAMES frames; the thread runs a passive checkpoint on a
 * connection of its own and, when that backfilled every frame, records the
 * applied index of the last commit as durable; the apply thread folds it in
 * after its next commit (checkpoint_committed). This keeps the routine
 * backfill out of the apply connection's commits, where SQLite's automatic
 * checkpoint stalled every waiting caller (docs/performance.md).
 * sql_fsm_checkpoint, on the apply thread, runs a checkpoint of its own when
 * the background one cannot move the durable index (a WAL under the
 * threshold, readers holding frames back, the log full).
 *
 * Failure modes:
 * - The checkpointer cannot start (open, PRAGMA or thread failure): the
 *   apply connection keeps SQLite's automatic checkpoint; slower, same
 *   result.
 * - A passive checkpoint fails or leaves frames behind (readers hold them):
 *   nothing is recorded; the next one, or sql_fsm_checkpoint, which
 *   reports errors, catches up.
 * - sql_fsm_checkpoint(SQL_CHECKPOINT_WAIT) waits SQL__CHECKPOINT_WAIT_MS for
 *   readers, then gives up with SQL_ERR_BUSY and leaves the durable index
 *   as it was; sql_fsm_checkpoint(SQL_CHECKPOINT_NOWAIT) gives up so at
 *   once when readers hold frames back or the checkpointer runs one.
 * - The database is replaced or reread (snapshot install): checkpoint_reset
 *   bumps a generation, so a checkpoint begun before reports nothing.
 *
 * Invariant: at most one checkpoint runs at a time on either connection
 * (run_mu), so the durable checkpoint never fails for the checkpointer. */

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <sqlite3ext.h>

#include "copy_pace.h"
#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* How long a checkpoint waits for readers before giving up. */
#define SQL__CHECKPOINT_WAIT_MS 100
/* WAL frames after which the checkpointer thread backfills the WAL into
 * the database file (SQLite's own automatic checkpoint threshold). */
#define SQL__CHECKPOINT_FRAMES 1000
/* WAL frames after which the apply connection backfills the WAL itself,
 * before the next writer's snapshot, so that the WAL restarts (on_wal). */
#define SQL__CHECKPOINT_RESTART_FRAMES (4 * SQL__CHECKPOINT_FRAMES)

void checkpoint_init(struct sql_ckpt *c)
{
    pthread_mutex_init(&c->sig_mu, NULL);
    pthread_mutex_init(&c->run_mu, NULL);
    pthread_cond_init(&c->cond, NULL);
}

void checkpoint_destroy(struct sql_ckpt *c)
{
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->run_mu);
    pthread_mutex_destroy(&c->sig_mu);
}

void checkpoint_committed(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;

    pthread_mutex_lock(&c->sig_mu);
    c->committed = f->recorded;
    if (c->durable > f->durable) {
        f->durable = c->durable;
    }
    pthread_mutex_unlock(&c->sig_mu);
}

void checkpoint_reset(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;

    pthread_mutex_lock(&c->sig_mu);
    c->gen++;
    c->committed = f->recorded;
    c->durable = 0;
    pthread_mutex_unlock(&c->sig_mu);
}

/* on_wal is the apply connection's WAL hook, called after each commit
 * with the WAL's frame count: each time it passes another multiple of
 * the threshold, wake the checkpointer.
 * Past SQL__CHECKPOINT_RESTART_FRAMES the WAL failed to restart: run a
 * passive checkpoint here first, on the apply connection (as SQLite's own
 * automatic checkpoint does, from its WAL hook), waiting for a running
 * one to end. SQLite restarts the WAL (writes it from its start again)
 * only in a writer whose snapshot found every frame backfilled; with
 * writers back to back (plain writes from many connections, which each
 * wait for this commit: sql.h "Who committed around a plain write") the
 * background checkpoint, running beside the next writer, always leaves
 * the last commit's frames, and the WAL grows for as long as they come
 * (27 MB in 6 s of 64 plain writers), every write then landing on new
 * pages of the file. Backfilled before the next writer's snapshot, the
 * WAL restarts in that writer, unless a reader holds frames back. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int n_frames)
{
    struct sql_ckpt *c = arg;

    if (n_frames >= SQL__CHECKPOINT_RESTART_FRAMES &&
        n_frames / SQL__CHECKPOINT_FRAMES != c->restart_tried) {
        /* Once per SQL__CHECKPOINT_FRAMES frames: when readers kept the
         * WAL from restarting, the frames still go to the background
         * checkpointer, not through two fsyncs here at every commit. */
        c->restart_tried = n_frames / SQL__CHECKPOINT_FRAMES;
        pthread_mutex_lock(&c->run_mu);
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE,
                                        NULL, NULL); /* failed: a later
                                                        one, or the
                                                        background's */
        pthread_mutex_unlock(&c->run_mu);
    }
    if (n_frames < SQL__CHECKPOINT_RESTART_FRAMES) {
        c->restart_tried = 0;
    }
    /* The background checkpoint once per SQL__CHECKPOINT_FRAMES frames
     * the WAL gained: asked at every commit past the mark while the WAL
     * did not restart, it ran once per plain write (3,439 in 4 s of 64
     * writers), an fsync of the database file each. */
    if (n_frames / SQL__CHECKPOINT_FRAMES != c->asked_mark) {
        c->asked_mark = n_frames / SQL__CHECKPOINT_FRAMES;
        if (n_frames >= SQL__CHECKPOINT_FRAMES) {
            pthread_mutex_lock(&c->sig_mu);
            if (!c->want) {
                c->want = true;
                pthread_cond_signal(&c->cond);
            }
            pthread_mutex_unlock(&c->sig_mu);
        }
    }
    return SQLITE_OK;
}

/* ckpt_main runs a passive checkpoint each time on_wal asks for one, and
 * when it backfilled every frame, records the applied index it made
 * durable. A failure is left for the next one, and for the durable
 * checkpoint of sql_fsm_checkpoint, which reports errors. */
static void *ckpt_main(void *arg)
{
    struct sql_ckpt *c = arg;
    uint64_t committed;
    uint64_t gen;
    int n_log;
    int n_ckpt;
    int rc;

    /* Named for top -H and perf (best effort). */
    pthread_setname_np(pthread_self(), "raftsql-ckpt");
    pthread_mutex_lock(&c->sig_mu);
    for (;;) {
        while (!c->stop && !c->want) {
            pthread_cond_wait(&c->cond, &c->sig_mu);
        }
        if (c->stop) {
            break;
        }
        c->want = false;
        committed = c->committed;
        gen = c->gen;
        pthread_mutex_unlock(&c->sig_mu);
        pthread_mutex_lock(&c->run_mu);
        n_log = -1;
        n_ckpt = -1;
        rc = sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                       &n_log, &n_ckpt);
        pthread_mutex_unlock(&c->run_mu);
        pthread_mutex_lock(&c->sig_mu);
        /* Invariant: @committed's commit finished before this checkpoint
         * read the WAL index, so its frames are among the n_log it saw,
         * and a checkpoint fsyncs the WAL before it copies (this
         * connection runs at synchronous=FULL). With every frame copied,
         * those frames survive a power loss either in the database file
         * or in the WAL: SQLite fsyncs the file after a copy unless a
         * commit came meanwhile, and restarts or truncates the WAL only
         * after a checkpoint that fsynced the file. So @committed is
         * durable. The apply thread folds it in (sql_fsm_apply). */
        if (rc == SQLITE_OK && n_log >= 0 && n_ckpt == n_log && gen == c->gen &&
            committed > c->durable) {
            c->durable = committed;
        }
    }
    pthread_mutex_unlock(&c->sig_mu);
    return NULL;
}

void checkpoint_start(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;
    sqlite3 *db = NULL;

    /* Through a paced VFS of its own (checkpoint_paced), else the
     * default one. */
    if (paced_vfs_init(&c->vfs) != 0) {
        paced_vfs_close(&c->vfs);
    }
    if (sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READWRITE,
                        c->vfs.registered ? c->vfs.name : NULL) != SQLITE_OK) {
        sqlite3_close(db);
        paced_vfs_close(&c->vfs);
        return;
    }
    /* Its checkpoints must fsync (the durable index relies on it),
     * whatever this SQLite's compiled-in default. */
    if (sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) !=
        SQLITE_OK) {
        sqlite3_close(db);
        paced_vfs_close(&c->vfs);
        return;
    }
    /* A first read makes the connection find the WAL: until then its
     * checkpoints do nothing. */
    if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", NULL, NULL,
                     NULL) != SQLITE_OK) {
        sqlite3_close(db);
        paced_vfs_close(&c->vfs);
        return;
    }
    c->db = db;
    c->committed = f->recorded;
    if (pthread_create(&c->thread, NULL, ckpt_main, c) != 0) {
        c->db = NULL;
        sqlite3_close(db);
        paced_vfs_close(&c->vfs);
        return;
    }
    /* Replaces the automatic checkpoint (a WAL hook of its own). */
    sqlite3_wal_hook(f->db, on_wal, c);
}

void checkpoint_stop(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;

    if (c->db == NULL) {
        return;
    }
    pthread_mutex_lock(&c->sig_mu);
    c->stop = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->sig_mu);
    pthread_join(c->thread, NULL);
    sqlite3_close(c->db);
    c->db = NULL;
    paced_vfs_close(&c->vfs);
}

void checkpoint_paced(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;
    struct copy_pace pace;

    if (c->db == NULL || !c->vfs.registered) {
        return;
    }
    /* No path: the pace hands the file to the disk through the VFS's
     * file (copy_pace_wrote_file), never a descriptor of its own. */
    copy_pace_init(&pace, f, &f->pace, NULL);
    pthread_mutex_lock(&c->run_mu);
    paced_vfs_set(&c->vfs, &pace);
    (void)sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                    NULL, NULL);
    paced_vfs_set(&c->vfs, NULL);
    pthread_mutex_unlock(&c->run_mu);
    f->install_slept_ms += copy_pace_close(&pace);
}

uint64_t sql_fsm_durable(const struct sql_fsm *f)
{
    return f->durable;
}

int sql_fsm_checkpoint(struct sql_fsm *f, enum sql_checkpoint_wait wait,
                       uint64_t *out_durable_index)
{
    int n_log = -1;
    int n_ckpt = -1;
    sqlite3_mutex *mu;
    int rc;

    /* Lock order: the connection's mutex, then run_mu, as in on_wal
     * (which runs inside a step, holding the connection's mutex); the
     * checkpoint enters the (recursive) connection mutex again. */
    mu = sqlite3_db_mutex(f->db);
    sqlite3_mutex_enter(mu);
    if (wait == SQL_CHECKPOINT_WAIT) {
        /* Wait briefly for readers: the caller needs the durable point
         * now (the log is full, the node stops, the file was opened). */
        pthread_mutex_lock(&f->ckpt.run_mu);
        sql_fsm_set_busy_ms(f, SQL__CHECKPOINT_WAIT_MS);
        rc = sqlite3_wal_checkpoint_v2(
            f->db, "main", SQLITE_CHECKPOINT_TRUNCATE, &n_log, &n_ckpt);
        sql_fsm_set_busy_ms(f, SQL__BUSY_TIMEOUT_MS);
    } else if (pthread_mutex_trylock(&f->ckpt.run_mu) != 0) {
        /* The background checkpointer runs one: it moves the durable
         * point itself if it backfills every frame; else the caller's
         * next try. */
        sqlite3_mutex_leave(mu);
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "checkpoint: the background checkpoint runs; the "
                    "durable index stays %" PRIu64,
                    f->durable);
        return SQL_ERR_BUSY;
    } else {
        /* Waits for nobody: a reader that holds frames back (a
         * snapshot's or a backup's copy holds one for as long as the
         * copy takes, a minute for a few GB) leaves them in the WAL. A
         * TRUNCATE waited for it, 100 ms of the busy handler's sleeps,
         * after every batch on the apply thread while the durable point
         * lagged: every write waited 100 ms for as long as the copy ran
         * (a 4 GB join, bench/scale.py: 10 writes a second). */
        rc = sqlite3_wal_checkpoint_v2(f->db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                       &n_log, &n_ckpt);
        if (rc == SQLITE_OK && n_log >= 0 && n_ckpt == n_log) {
            /* Every frame is in the file (synced): restart the WAL if
             * no reader or writer uses it now, without waiting; else
             * the next writer restarts it (SQLite does so once every
             * frame is backfilled). */
            sql_fsm_set_busy_ms(f, 0);
            (void)sqlite3_wal_checkpoint_v2(
                f->db, "main", SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
            sql_fsm_set_busy_ms(f, SQL__BUSY_TIMEOUT_MS);
        }
    }
    pthread_mutex_unlock(&f->ckpt.run_mu);
    sqlite3_mutex_leave(mu);
    if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY) {
        return fsm_fail(f, rc, "checkpoint");
    }
    /* A TRUNCATE restarts the WAL, which rewrites its header: read it
     * again, or the next plain write would look crowded (foreign.c). */
    foreign_mark(f);
    /* Invariant: every frame backfilled means every committed transaction,
     * through the one that wrote f->recorded to raftsql_applied, is in the
     * database file,
     * and SQLite fsynced that file after backfilling (checkpoints sync
     * under synchronous=NORMAL). */
    if (n_log < 0 || n_ckpt != n_log) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "checkpoint: readers hold %d of %d WAL frames back; the "
                    "durable index stays %" PRIu64,
                    n_log - n_ckpt, n_log, f->durable);
        return SQL_ERR_BUSY;
    }
    f->durable = f->recorded;
    *out_durable_index = f->durable;
    return 0;
}

void checkpoint_set_durable(struct sql_fsm *f, uint64_t index)
{
    f->durable = index;
    checkpoint_reset(f);
}
