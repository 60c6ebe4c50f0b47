/* Rewriting the LMDB log's data file compacted (lmdb_log.h,
 * lmdb_log_defragment).
 *
 * Happy path: copy the environment compacted into <dir>/defrag/data.mdb
 * (a consistent read snapshot; the writer is this thread, so nothing
 * changes meanwhile), fsync it, then, holding map_lock exclusive so that
 * no read transaction is open, close the environment, rename the copy
 * over data.mdb, fsync the directory and reopen.
 * Failure modes: the copy fails (a full disk, an I/O error): the partial
 * copy is removed and the log is untouched. The rename is atomic: a crash
 * leaves the old or the new file, both complete. A reopen that fails
 * leaves the log without an environment: every later call fails until
 * the node restarts (it finds the new file). */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "txn.h"

/* fsync_path fsyncs the file or directory @path; returns 0 or errno. */
static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC);
    int rc = 0;
    if (fd < 0) {
        return errno;
    }
    if (fsync(fd) != 0) {
        rc = errno;
    }
    close(fd);
    return rc;
}

/* reopen opens a fresh environment on l->dir with the map size and the
 * two databases of before. Caller holds map_lock exclusive. */
static int reopen(struct lmdb_log *l, const char **what)
{
    MDB_txn *txn = NULL;
    int rc;

    *what = "mdb_env_create";
    rc = mdb_env_create(&l->env);
    if (rc != 0) {
        l->env = NULL;
        return rc;
    }
    *what = "mdb_env_set_maxdbs";
    rc = mdb_env_set_maxdbs(l->env, 2);
    if (rc == 0) {
        *what = "mdb_env_set_mapsize";
        rc = mdb_env_set_mapsize(l->env, (size_t)l->map_bytes);
    }
    if (rc == 0) {
        *what = "mdb_env_open";
        rc = mdb_env_open(l->env, l->dir, MDB_NOTLS, 0600);
    }
    if (rc == 0) {
        *what = "mdb_txn_begin";
        rc = mdb_txn_begin(l->env, NULL, 0, &txn);
    }
    if (rc == 0) {
        /* Opened in the order open_body opens them. */
        *what = "mdb_dbi_open";
        rc = mdb_dbi_open(txn, "entries", 0, &l->entries);
        if (rc == 0) {
            rc = mdb_dbi_open(txn, "meta", 0, &l->meta);
        }
        if (rc == 0) {
            *what = "mdb_txn_commit";
            rc = mdb_txn_commit(txn);
        } else {
            mdb_txn_abort(txn);
        }
    }
    return rc;
}

int lmdb_log_defragment(struct lmdb_log *l)
{
    char tmp[4200], copy[4300], lock[4300], final[4200], buf[128];
    const char *what = "mdb_env_copy2";
    int rc;

    snprintf(tmp, sizeof tmp, "%s/defrag", l->dir);
    snprintf(copy, sizeof copy, "%s/data.mdb", tmp);
    snprintf(lock, sizeof lock, "%s/lock.mdb", tmp);
    snprintf(final, sizeof final, "%s/data.mdb", l->dir);
    unlink(copy);
    unlink(lock);
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
        rc = errno;
        what = "mkdir";
        goto err_copy;
    }
    rc = mdb_env_copy2(l->env, tmp, MDB_CP_COMPACT);
    if (rc == 0) {
        what = "fsync";
        rc = fsync_path(copy, O_RDONLY);
    }
    if (rc != 0) {
        goto err_copy;
    }

    pthread_rwlock_wrlock(&l->map_lock);
    mdb_env_close(l->env);
    l->env = NULL;
    if (rename(copy, final) != 0) {
        rc = errno;
        what = "rename";
    } else {
        (void)fsync_path(l->dir, O_RDONLY | O_DIRECTORY);
    }
    {
        int rc2 = reopen(l, &what);
        if (rc2 != 0) {
            if (l->env != NULL) {
                mdb_env_close(l->env);
                l->env = NULL;
            }
            pthread_rwlock_unlock(&l->map_lock);
            txn_set_errmsg(l,
                           "defragment: reopen %s: %s: %s (restart the node)",
                           l->dir, what, txn_code_name(rc2, buf, sizeof buf));
            return RAFT_IOERR;
        }
    }
    pthread_rwlock_unlock(&l->map_lock);
    unlink(lock);
    rmdir(tmp);
    if (rc != 0) {
        txn_set_errmsg(l, "defragment: %s %s: %s", what, final,
                       txn_code_name(rc, buf, sizeof buf));
        return txn_to_raft(rc) == RAFT_NOSPACE ? RAFT_NOSPACE : RAFT_IOERR;
    }
    return 0;

err_copy:
    unlink(copy);
    unlink(lock);
    rmdir(tmp);
    txn_set_errmsg(l, "defragment: %s %s: %s", what, tmp,
                   txn_code_name(rc, buf, sizeof buf));
    return txn_to_raft(rc) == RAFT_NOSPACE ? RAFT_NOSPACE : RAFT_IOERR;
}
