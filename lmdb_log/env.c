/* Opening and closing the LMDB log (lmdb_log.h): the environment, its map
 * size and ceiling, the format records checked (or written, or upgraded
 * from version 1) in open's write transaction, and the accessors.
 *
 * Happy path: open creates the directory, sizes the map (min(64 MiB, the
 * ceiling) or the data file's size, whichever is larger), opens the
 * environment MDB_NOTLS with LMDB's default synchronous commits, and
 * checks the format records in one write transaction; a new log's
 * directory entry is then flushed.
 *
 * Failure modes: any failure closes what was opened and frees the log; the
 * message is copied into the caller's buffer. */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format.h"
#include "internal.h"
#include "txn.h"

#define LMDB_LOG__MIB (1024u * 1024u)
#define LMDB_LOG__INITIAL_MAP (64u * LMDB_LOG__MIB) /* default first map */
#define LMDB_LOG__MIN_BYTES (256u * 1024u)          /* smallest ceiling */
#define LMDB_LOG__RESERVE_PAGES 16u /* + ceiling/128 kept from entries */
#define LMDB_LOG__DATA_FILE "data.mdb"

/* What open's write transaction reports back. */
struct open_args {
    const char *dir; /* the log's directory, for messages */
    bool created;    /* out: the format records were written just now */
};

/* Opens both databases, then checks the format records or writes those of
 * a new log. */
static void open_body(struct txn *t, void *arg)
{
    struct open_args *a = arg;
    struct lmdb_log *l = t->log;
    uint8_t buf[LMDB_LOG_FORMAT_VERSION_LEN];
    MDB_val key = {strlen(LMDB_LOG_FORMAT_META_FORMAT),
                   LMDB_LOG_FORMAT_META_FORMAT};
    MDB_val val;
    MDB_stat st_entries;
    MDB_stat st_meta;
    uint32_t version;
    uint64_t value;
    uint64_t first = 0;
    uint64_t snapshot = 0;
    int rc;

    a->created = false;
    txn_check(t, mdb_dbi_open(t->txn, "entries", MDB_CREATE, &l->entries),
              "mdb_dbi_open");
    if (t->rc == 0) {
        txn_check(t, mdb_dbi_open(t->txn, "meta", MDB_CREATE, &l->meta),
                  "mdb_dbi_open");
    }
    if (t->rc != 0) {
        return;
    }
    rc = mdb_get(t->txn, l->meta, &key, &val);
    if (rc == MDB_NOTFOUND) {
        txn_check(t, mdb_stat(t->txn, l->entries, &st_entries), "mdb_stat");
        txn_check(t, mdb_stat(t->txn, l->meta, &st_meta), "mdb_stat");
        if (t->rc == 0 && (st_entries.ms_entries || st_meta.ms_entries)) {
            txn_fail(t, RAFT_CORRUPT,
                     "%s: the format record is missing from a log that "
                     "holds data",
                     a->dir);
            return;
        }
        format_version_encode(LMDB_LOG_FORMAT_VERSION, buf);
        val.mv_size = sizeof buf;
        val.mv_data = buf;
        if (t->rc == 0) {
            txn_check(t, mdb_put(t->txn, l->meta, &key, &val, 0), "mdb_put");
        }
        txn_meta_put(t, LMDB_LOG_FORMAT_META_TERM, 0);
        txn_meta_put(t, LMDB_LOG_FORMAT_META_VOTE, 0);
        txn_meta_put(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, 1);
        txn_meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, 0);
        txn_meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, 0);
        a->created = true;
        return;
    }
    txn_check(t, rc, "mdb_get");
    if (t->rc != 0) {
        return;
    }
    if (format_version_decode(val.mv_data, val.mv_size, &version) != 0) {
        txn_fail(t, RAFT_CORRUPT,
                 "%s: the format record is corrupt (%zu "
                 "bytes)",
                 a->dir, val.mv_size);
        return;
    }
    if (version < LMDB_LOG_FORMAT_VERSION_MIN ||
        version > LMDB_LOG_FORMAT_VERSION) {
        txn_fail(t, RAFT_FORMAT,
                 "%s: the log was written in format version %lu; this "
                 "build reads version %u to version %u",
                 a->dir, (unsigned long)version, LMDB_LOG_FORMAT_VERSION_MIN,
                 LMDB_LOG_FORMAT_VERSION);
        return;
    }
    txn_meta_get(t, LMDB_LOG_FORMAT_META_TERM, &value);
    txn_meta_get(t, LMDB_LOG_FORMAT_META_VOTE, &value);
    txn_meta_get(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, &first);
    if (t->rc == 0 && first == 0) {
        txn_fail(t, RAFT_CORRUPT, "%s: meta record \"first_index\" is 0",
                 a->dir);
    }
    if (t->rc != 0) {
        return;
    }
    if (version == 1) {
        /* Version 1 never compacted: its first index is always 1. */
        if (first != 1) {
            txn_fail(t, RAFT_CORRUPT,
                     "%s: a version 1 log with first_index %llu", a->dir,
                     (unsigned long long)first);
            return;
        }
        txn_meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, 0);
        txn_meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, 0);
        format_version_encode(LMDB_LOG_FORMAT_VERSION, buf);
        val.mv_size = sizeof buf;
        val.mv_data = buf;
        if (t->rc == 0) {
            txn_check(t, mdb_put(t->txn, l->meta, &key, &val, 0), "mdb_put");
        }
        return;
    }
    txn_meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &snapshot);
    txn_meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, &value);
    if (t->rc == 0 && first != snapshot + 1) {
        txn_fail(t, RAFT_CORRUPT,
                 "%s: meta records disagree: first_index %llu, "
                 "snapshot_index %llu",
                 a->dir, (unsigned long long)first,
                 (unsigned long long)snapshot);
    }
}

/* Flushes the directory entry of a newly created data file. */
static int sync_dir(struct lmdb_log *l, const char *dir)
{
    char buf[128];
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0 || fsync(fd) != 0) {
        rc = errno;
        txn_set_errmsg(l, "open: fsync of directory %s: %s", dir,
                       txn_code_name(rc, buf, sizeof buf));
    }
    if (fd >= 0) {
        close(fd);
    }
    return txn_to_raft(rc);
}

/* Rounds @n up to a multiple of @page; 0 when that overflows. */
static uint64_t round_up(uint64_t n, uint64_t page)
{
    if (n > UINT64_MAX - (page - 1)) {
        return 0;
    }
    return (n + page - 1) / page * page;
}

/* Copies @l's message into the caller's buffer @errmsg (@errmsg_len). */
static void copy_errmsg(const struct lmdb_log *l, char *errmsg,
                        size_t errmsg_len)
{
    if (errmsg != NULL && errmsg_len > 0) {
        snprintf(errmsg, errmsg_len, "%s", l->errmsg);
    }
}

int lmdb_log_open_sized(const char *dir, uint64_t initial_bytes,
                        uint64_t max_bytes, struct lmdb_log **out, char *errmsg,
                        size_t errmsg_len)
{
    struct lmdb_log *l;
    pthread_rwlockattr_t attr;
    struct open_args args = {dir, false};
    struct stat st;
    char path[4096];
    char buf[128];
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t initial;
    const char *what;
    MDB_envinfo info;
    int dead;
    int rc;

    l = calloc(1, sizeof *l);
    if (l == NULL) {
        if (errmsg != NULL && errmsg_len > 0) {
            snprintf(errmsg, errmsg_len, "open: out of memory");
        }
        return RAFT_NOMEM;
    }
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = pthread_rwlock_init(&l->map_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        snprintf(l->errmsg, sizeof l->errmsg, "open: pthread_rwlock_init: %s",
                 txn_code_name(rc, buf, sizeof buf));
        rc = txn_to_raft(rc);
        goto err_free;
    }
    rc = pthread_mutex_init(&l->errmsg_lock, NULL);
    if (rc != 0) {
        snprintf(l->errmsg, sizeof l->errmsg, "open: pthread_mutex_init: %s",
                 txn_code_name(rc, buf, sizeof buf));
        rc = txn_to_raft(rc);
        goto err_rwlock;
    }

    l->max_bytes = round_up(max_bytes, page);
    if (max_bytes < LMDB_LOG__MIN_BYTES || l->max_bytes == 0 ||
        l->max_bytes > SIZE_MAX / 2) {
        txn_set_errmsg(l,
                       "open: max_bytes %llu (log_max_mb) is outside [%u, "
                       "%zu]",
                       (unsigned long long)max_bytes, LMDB_LOG__MIN_BYTES,
                       (size_t)(SIZE_MAX / 2));
        rc = RAFT_INVALID;
        goto err_mutex;
    }
    l->entries_budget =
        l->max_bytes -
        round_up(LMDB_LOG__RESERVE_PAGES * page + l->max_bytes / 128, page);
    if (initial_bytes == 0) {
        txn_set_errmsg(l, "open: the initial map size is 0");
        rc = RAFT_INVALID;
        goto err_mutex;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        rc = errno;
        txn_set_errmsg(l, "open: mkdir %s: %s", dir,
                       txn_code_name(rc, buf, sizeof buf));
        rc = txn_to_raft(rc);
        goto err_mutex;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir,
                         LMDB_LOG__DATA_FILE) >= sizeof path) {
        txn_set_errmsg(l, "open: directory name too long: %s", dir);
        rc = RAFT_INVALID;
        goto err_mutex;
    }
    snprintf(l->dir, sizeof l->dir, "%s", dir);
    initial = initial_bytes < l->max_bytes ? initial_bytes : l->max_bytes;
    if (stat(path, &st) == 0) {
        if ((uint64_t)st.st_size > initial) {
            initial = (uint64_t)st.st_size;
        }
    } else if (errno != ENOENT) {
        rc = errno;
        txn_set_errmsg(l, "open: stat %s: %s", path,
                       txn_code_name(rc, buf, sizeof buf));
        rc = txn_to_raft(rc);
        goto err_mutex;
    }
    initial = round_up(initial, page);

    what = "mdb_env_create";
    rc = mdb_env_create(&l->env);
    if (rc != 0) {
        l->env = NULL;
        goto err_lmdb;
    }
    what = "mdb_env_set_maxdbs";
    rc = mdb_env_set_maxdbs(l->env, LMDB_LOG__DBS);
    if (rc == 0) {
        what = "mdb_env_set_mapsize";
        rc = mdb_env_set_mapsize(l->env, (size_t)initial);
    }
    if (rc == 0) {
        /* Default synchronous commits: never MDB_NOSYNC and friends. */
        what = "mdb_env_open";
        rc = mdb_env_open(l->env, dir, MDB_NOTLS, 0600);
    }
    if (rc == 0) {
        what = "mdb_env_info";
        rc = mdb_env_info(l->env, &info);
    }
    if (rc == 0) {
        /* Frees reader slots left by crashed processes. */
        what = "mdb_reader_check";
        rc = mdb_reader_check(l->env, &dead);
    }
    if (rc != 0) {
        goto err_lmdb;
    }
    l->map_bytes = info.me_mapsize;

    rc = txn_run_write(l, "open", open_body, &args);
    if (rc != 0) {
        goto err_env;
    }
    if (args.created) {
        rc = sync_dir(l, dir);
        if (rc != 0) {
            goto err_env;
        }
    }
    l->errmsg[0] = '\0';
    *out = l;
    return 0;

err_lmdb:
    txn_set_errmsg(l, "open: %s %s: %s", what, dir,
                   txn_code_name(rc, buf, sizeof buf));
    rc = txn_to_raft(rc);
err_env:
    if (l->env != NULL) {
        mdb_env_close(l->env);
    }
err_mutex:
    pthread_mutex_destroy(&l->errmsg_lock);
err_rwlock:
    pthread_rwlock_destroy(&l->map_lock);
err_free:
    copy_errmsg(l, errmsg, errmsg_len);
    free(l);
    return rc;
}

int lmdb_log_open(const char *dir, uint64_t max_bytes, struct lmdb_log **out,
                  char *errmsg, size_t errmsg_len)
{
    return lmdb_log_open_sized(dir, LMDB_LOG__INITIAL_MAP, max_bytes, out,
                               errmsg, errmsg_len);
}

void lmdb_log_close(struct lmdb_log *l)
{
    if (l == NULL) {
        return;
    }
    mdb_env_close(l->env);
    pthread_mutex_destroy(&l->errmsg_lock);
    pthread_rwlock_destroy(&l->map_lock);
    free(l);
}

const char *lmdb_log_errmsg(const struct lmdb_log *l)
{
    return l->errmsg;
}

uint64_t lmdb_log_map_bytes(const struct lmdb_log *l)
{
    return l->map_bytes;
}

uint64_t lmdb_log_max_bytes(const struct lmdb_log *l)
{
    return l->max_bytes;
}
