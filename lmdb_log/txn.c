/* The transaction layer of the LMDB log (txn.h): LMDB's codes and errno
 * become project codes here, once, in txn_to_raft; every write runs in
 * txn_run_write and every read between txn_read_begin and txn_read_end.
 *
 * Happy path: every write (open's format check and upgrade, append,
 * truncate_suffix, compact, reset) is one write transaction run by
 * txn_run_write; it commits with LMDB's default
 * synchronous commit, so a 0 return means durable. Reads run in a short
 * read-only transaction and copy what they return out of the map.
 *
 * Failure modes:
 *   - MDB_MAP_FULL anywhere in a write transaction (a put, a delete or the
 *     commit) aborts it, doubles the map up to the ceiling and runs the
 *     whole transaction again. With the map at its ceiling the call fails
 *     with RAFT_NOSPACE ("log full"). An aborted transaction leaves the log
 *     exactly as it was, so nothing is ever half-written.
 *   - Resizing the map remaps it, which must not happen under a reader:
 *     readers hold map_lock shared for the life of their transaction and
 *     the writer takes it exclusively only for mdb_env_set_mapsize. */

#include "txn.h"

#include <errno.h>
#include <sys/statvfs.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "format.h"

int txn_to_raft(int rc)
{
    switch (rc) {
        case 0:
            return 0;
        case ENOMEM:
            return RAFT_NOMEM;
        case MDB_MAP_FULL:
        case MDB_TXN_FULL:
        case ENOSPC:
        case EDQUOT:
            return RAFT_NOSPACE;
        case MDB_CORRUPTED:
        case MDB_PAGE_NOTFOUND:
        case MDB_INVALID:
            return RAFT_CORRUPT;
        case MDB_VERSION_MISMATCH:
            return RAFT_FORMAT;
        case MDB_NOTFOUND:
            return RAFT_NOTFOUND;
        default:
            return RAFT_IOERR;
    }
}

const char *txn_code_name(int rc, char *buf, size_t len)
{
    switch (rc) {
#define LMDB_LOG__NAME(code)                                                   \
    case code:                                                                 \
        return #code;
        LMDB_LOG__NAME(MDB_KEYEXIST)
        LMDB_LOG__NAME(MDB_NOTFOUND)
        LMDB_LOG__NAME(MDB_PAGE_NOTFOUND)
        LMDB_LOG__NAME(MDB_CORRUPTED)
        LMDB_LOG__NAME(MDB_PANIC)
        LMDB_LOG__NAME(MDB_VERSION_MISMATCH)
        LMDB_LOG__NAME(MDB_INVALID)
        LMDB_LOG__NAME(MDB_MAP_FULL)
        LMDB_LOG__NAME(MDB_DBS_FULL)
        LMDB_LOG__NAME(MDB_READERS_FULL)
        LMDB_LOG__NAME(MDB_TLS_FULL)
        LMDB_LOG__NAME(MDB_TXN_FULL)
        LMDB_LOG__NAME(MDB_CURSOR_FULL)
        LMDB_LOG__NAME(MDB_PAGE_FULL)
        LMDB_LOG__NAME(MDB_MAP_RESIZED)
        LMDB_LOG__NAME(MDB_INCOMPATIBLE)
        LMDB_LOG__NAME(MDB_BAD_RSLOT)
        LMDB_LOG__NAME(MDB_BAD_TXN)
        LMDB_LOG__NAME(MDB_BAD_VALSIZE)
        LMDB_LOG__NAME(MDB_BAD_DBI)
#undef LMDB_LOG__NAME
        default:
            return strerror_r(rc, buf, len);
    }
}

void txn_set_errmsg(struct lmdb_log *l, const char *fmt, ...)
{
    char msg[LMDB_LOG__ERRMSG_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&l->errmsg_lock);
    memcpy(l->errmsg, msg, sizeof msg);
    pthread_mutex_unlock(&l->errmsg_lock);
}

void txn_check(struct txn *t, int mdb_rc, const char *what)
{
    if (t->rc == 0 && mdb_rc != 0) {
        t->rc = txn_to_raft(mdb_rc);
        t->mdb_rc = mdb_rc;
        t->what = what;
    }
}

MDB_cursor *txn_entries_cursor(struct txn *t)
{
    MDB_cursor *cur = NULL;
    int rc;

    if (t->rc != 0) {
        return NULL;
    }
    rc = mdb_cursor_open(t->txn, t->log->entries, &cur);
    txn_check(t, rc, "mdb_cursor_open");
    return rc == 0 ? cur : NULL;
}

void txn_fail(struct txn *t, int rc, const char *fmt, ...)
{
    char detail[LMDB_LOG__ERRMSG_LEN];
    va_list ap;

    if (t->rc != 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    txn_set_errmsg(t->log, "%s: %s", t->op, detail);
    t->rc = rc;
}

void txn_report(struct txn *t)
{
    char buf[128];

    if (t->rc != 0 && t->mdb_rc != 0) {
        txn_set_errmsg(t->log, "%s: %s: %s", t->op, t->what,
                       txn_code_name(t->mdb_rc, buf, sizeof buf));
    }
}

void txn_read_begin(struct txn *t, struct lmdb_log *l, const char *op)
{
    int rc;

    memset(t, 0, sizeof *t);
    t->log = l;
    t->op = op;
    pthread_rwlock_rdlock(&l->map_lock);
    t->read_locked = true;
    rc = mdb_txn_begin(l->env, NULL, MDB_RDONLY, &t->txn);
    if (rc != 0) {
        t->txn = NULL;
    }
    txn_check(t, rc, "mdb_txn_begin");
}

int txn_read_end(struct txn *t)
{
    if (t->txn != NULL) {
        mdb_txn_abort(t->txn);
        t->txn = NULL;
    }
    if (t->read_locked) {
        pthread_rwlock_unlock(&t->log->map_lock);
        t->read_locked = false;
    }
    txn_report(t);
    return t->rc;
}

void txn_meta_find(struct txn *t, const char *name, uint64_t *out,
                   bool *out_found)
{
    MDB_val key = {strlen(name), (void *)name};
    MDB_val val;
    int rc;

    if (t->rc != 0) {
        return;
    }
    rc = mdb_get(t->txn, t->log->meta, &key, &val);
    *out_found = rc != MDB_NOTFOUND;
    if (rc == MDB_NOTFOUND) {
        return;
    }
    txn_check(t, rc, "mdb_get");
    if (rc == 0 && format_meta_decode(name, val.mv_data, val.mv_size, out)) {
        txn_fail(t, RAFT_CORRUPT, "meta record \"%s\" is corrupt", name);
    }
}

void txn_meta_get(struct txn *t, const char *name, uint64_t *out)
{
    bool found = true;

    txn_meta_find(t, name, out, &found);
    if (!found) {
        txn_fail(t, RAFT_CORRUPT, "meta record \"%s\" is missing", name);
    }
}

int txn_read_meta(struct lmdb_log *l, const char *op, const char *name_a,
                  uint64_t *out_a, const char *name_b, uint64_t *out_b)
{
    struct txn t;
    uint64_t a = 0;
    uint64_t b = 0;

    txn_read_begin(&t, l, op);
    txn_meta_get(&t, name_a, &a);
    txn_meta_get(&t, name_b, &b);
    if (txn_read_end(&t) != 0) {
        return t.rc;
    }
    *out_a = a;
    *out_b = b;
    return 0;
}

void txn_meta_put(struct txn *t, const char *name, uint64_t value)
{
    uint8_t buf[LMDB_LOG_FORMAT_META_LEN];
    MDB_val key = {strlen(name), (void *)name};
    MDB_val val = {sizeof buf, buf};

    if (t->rc != 0) {
        return;
    }
    format_meta_encode(name, value, buf);
    txn_check(t, mdb_put(t->txn, t->log->meta, &key, &val, 0), "mdb_put");
}

void txn_key_get(struct txn *t, const MDB_val *key, raft_index *out)
{
    if (t->rc == 0 && format_key_decode(key->mv_data, key->mv_size, out)) {
        txn_fail(t, RAFT_CORRUPT, "entry key of %zu bytes", key->mv_size);
    }
}

void txn_bounds(struct txn *t, raft_index *out_first, raft_index *out_last)
{
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    raft_index first = 0;
    raft_index last = 0;
    int rc;

    cur = txn_entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
    if (rc == MDB_NOTFOUND) {
        mdb_cursor_close(cur);
        txn_meta_get(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, &first);
        if (t->rc == 0) {
            *out_first = first;
            *out_last = first - 1;
        }
        return;
    }
    txn_check(t, rc, "mdb_cursor_get");
    txn_key_get(t, &key, &first);
    if (t->rc == 0) {
        txn_check(t, mdb_cursor_get(cur, &key, &val, MDB_LAST),
                  "mdb_cursor_get");
    }
    txn_key_get(t, &key, &last);
    mdb_cursor_close(cur);
    if (t->rc == 0) {
        *out_first = first;
        *out_last = last;
    }
}

void txn_delete_from(struct txn *t, raft_index index)
{
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    int rc;

    cur = txn_entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    format_key_encode(index, buf);
    for (;;) {
        /* Position afresh after each delete rather than trusting where a
         * delete leaves the cursor. */
        key.mv_size = sizeof buf;
        key.mv_data = buf;
        rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND) {
            break;
        }
        txn_check(t, rc, "mdb_cursor_get");
        if (rc == 0) {
            rc = mdb_cursor_del(cur, 0);
            txn_check(t, rc, "mdb_cursor_del");
        }
        if (rc != 0) {
            break;
        }
    }
    mdb_cursor_close(cur);
}

/* Grows the map: doubles it, capped at the ceiling. Returns 0, RAFT_NOSPACE
 * when the map is at its ceiling already (no message written), or another
 * code with a message. Called by the writer with no transaction open. */
static int grow_map(struct lmdb_log *l, const char *op)
{
    uint64_t next;
    char buf[128];
    int rc;

    if (l->map_bytes >= l->max_bytes) {
        return RAFT_NOSPACE;
    }
    next = l->map_bytes <= l->max_bytes / 2 ? l->map_bytes * 2 : l->max_bytes;
    pthread_rwlock_wrlock(&l->map_lock);
    rc = mdb_env_set_mapsize(l->env, (size_t)next);
    pthread_rwlock_unlock(&l->map_lock);
    if (rc != 0) {
        txn_set_errmsg(l, "%s: mdb_env_set_mapsize: %s", op,
                       txn_code_name(rc, buf, sizeof buf));
        return txn_to_raft(rc);
    }
    l->map_bytes = next;
    return 0;
}

/* Adopts a map size grown by another process (MDB_MAP_RESIZED). */
static int adopt_map(struct lmdb_log *l, const char *op)
{
    MDB_envinfo info;
    char buf[128];
    int rc;

    pthread_rwlock_wrlock(&l->map_lock);
    rc = mdb_env_set_mapsize(l->env, 0);
    if (rc == 0) {
        rc = mdb_env_info(l->env, &info);
    }
    pthread_rwlock_unlock(&l->map_lock);
    if (rc != 0) {
        txn_set_errmsg(l, "%s: mdb_env_set_mapsize: %s", op,
                       txn_code_name(rc, buf, sizeof buf));
        return txn_to_raft(rc);
    }
    l->map_bytes = info.me_mapsize;
    return 0;
}

/* disk_full says whether the filesystem of @l's directory is (nearly)
 * full: less than 1 MiB available to the process. */
static bool disk_full(const struct lmdb_log *l)
{
    struct statvfs vfs;
    return statvfs(l->dir, &vfs) == 0 &&
           (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)1 << 20);
}

int txn_run_write(struct lmdb_log *l, const char *op, lmdb_log_body_cb body,
                  void *arg)
{
    struct txn t;
    int rc;

    for (;;) {
        memset(&t, 0, sizeof t);
        t.log = l;
        t.op = op;
        rc = mdb_txn_begin(l->env, NULL, 0, &t.txn);
        if (rc == MDB_MAP_RESIZED) {
            rc = adopt_map(l, op);
            if (rc != 0) {
                return rc;
            }
            continue;
        }
        txn_check(&t, rc, "mdb_txn_begin");
        if (t.rc == 0) {
            body(&t, arg);
            if (t.rc == 0) {
                /* The commit frees the transaction even when it fails. */
                txn_check(&t, mdb_txn_commit(t.txn), "mdb_txn_commit");
            } else {
                mdb_txn_abort(t.txn);
            }
            t.txn = NULL;
        }
        if (t.rc == 0) {
            return 0;
        }
        if (t.mdb_rc == ENOSPC || t.mdb_rc == EDQUOT ||
            (t.mdb_rc == EIO && disk_full(l))) {
            /* A full filesystem: LMDB reports a short write as EIO. Like a
             * full log, it heals once space is freed. */
            char buf[128];
            txn_set_errmsg(l,
                           "%s: disk full: the filesystem of %s has no room "
                           "for the log (%s: %s); writes resume once space "
                           "is freed",
                           op, l->dir, t.what,
                           txn_code_name(t.mdb_rc, buf, sizeof buf));
            return RAFT_NOSPACE;
        }
        if (t.mdb_rc != MDB_MAP_FULL) {
            txn_report(&t);
            return t.rc;
        }
        rc = grow_map(l, op);
        if (rc == RAFT_NOSPACE) {
            txn_set_errmsg(l,
                           "%s: log full: the LMDB map reached its ceiling of "
                           "%llu bytes set by log_max_mb; compact or truncate "
                           "the log or raise log_max_mb (%s: MDB_MAP_FULL)",
                           op, (unsigned long long)l->max_bytes, t.what);
            return RAFT_NOSPACE;
        }
        if (rc != 0) {
            return rc;
        }
    }
}
