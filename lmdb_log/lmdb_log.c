/* The durable Raft log on LMDB (contract in lmdb_log.h, record encoding in
 * format.h). The only file that includes <lmdb.h>: LMDB's codes and errno
 * become project codes here, once, in code_to_raft.
 *
 * Happy path: every write (open's format check and upgrade, append,
 * truncate_suffix, compact, reset) is one write transaction run by
 * run_write; it commits with LMDB's default
 * synchronous commit, so a 0 return means durable. Reads run in a short
 * read-only transaction and copy what they return out of the map.
 *
 * Failure modes:
 *   - MDB_MAP_FULL anywhere in a write transaction (a put, a delete or the
 *     commit) aborts it, doubles the map up to the ceiling and runs the
 *     whole transaction again. With the map at its ceiling the call fails
 *     with RAFT_NOSPACE ("log full"). An aborted transaction leaves the log
 *     exactly as it was, so nothing is ever half-written.
 *   - A full log must still take a new term or vote (or the node could
 *     never vote again) and be truncated, and both need a few free pages
 *     (copy-on-write, freelist records). So entries may not fill the whole
 *     map: an append whose entries would take more than entries_budget
 *     (the ceiling less a reserve) fails with RAFT_NOSPACE before commit,
 *     and the reserve stays for hard state updates and deletions.
 *   - A value whose checksum or shape is wrong gives RAFT_CORRUPT with its
 *     index in the message; it is never returned as an entry.
 *   - Resizing the map remaps it, which must not happen under a reader:
 *     readers hold map_lock shared for the life of their transaction and
 *     the writer takes it exclusively only for mdb_env_set_mapsize. */

#include "lmdb_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#include "format.h"
#include "internal.h"

#define LMDB_LOG__MIB (1024u * 1024u)
#define LMDB_LOG__INITIAL_MAP (64u * LMDB_LOG__MIB) /* default first map */
#define LMDB_LOG__MIN_BYTES (256u * 1024u)         /* smallest ceiling */
#define LMDB_LOG__RESERVE_PAGES 16u /* + ceiling/128 kept from entries */
#define LMDB_LOG__ERRMSG_LEN 512
#define LMDB_LOG__DATA_FILE "data.mdb"

struct lmdb_log {
    MDB_env *env;                      /* the environment of the directory */
    MDB_dbi entries;                   /* "entries" database handle */
    MDB_dbi meta;                      /* "meta" database handle */
    uint64_t map_bytes;                /* current map size (writer only) */
    uint64_t max_bytes;                /* map ceiling, a page multiple */
    uint64_t entries_budget;           /* most bytes entries may occupy */
    pthread_rwlock_t map_lock;         /* shared: a read txn is open;
                                          exclusive: the map is resized */
    pthread_mutex_t errmsg_lock;       /* serializes writes of @errmsg */
    char errmsg[LMDB_LOG__ERRMSG_LEN]; /* last failure, "" when none */
};

/* A transaction in progress and its first error. Helpers taking a struct
 * txn do nothing once @rc is set (sticky errors).
 * Invariant: @mdb_rc != 0 implies @rc == code_to_raft(@mdb_rc); when @rc
 * != 0 and @mdb_rc == 0 the message is already in log->errmsg. */
struct txn {
    struct lmdb_log *log; /* the log */
    const char *op;       /* public operation, first word of messages */
    MDB_txn *txn;         /* the LMDB transaction, NULL when ended */
    bool read_locked;     /* map_lock held shared (read transactions) */
    int rc;               /* project code of the first error, 0 if none */
    int mdb_rc;           /* LMDB or errno code behind @rc, 0 if none */
    const char *what;     /* the LMDB call that returned @mdb_rc */
};

/* Translates an LMDB return code or errno value into a project code. */
static int code_to_raft(int rc)
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

/* Names an LMDB return code ("MDB_MAP_FULL") or describes an errno value,
 * using @buf (@len bytes) when needed. */
static const char *code_name(int rc, char *buf, size_t len)
{
    switch (rc) {
#define LMDB_LOG__NAME(code) \
    case code:               \
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

static void set_errmsg(struct lmdb_log *l, const char *fmt, ...)
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

/* Records the LMDB result @mdb_rc of the call @what as @t's first error. */
static void txn_check(struct txn *t, int mdb_rc, const char *what)
{
    if (t->rc == 0 && mdb_rc != 0) {
        t->rc = code_to_raft(mdb_rc);
        t->mdb_rc = mdb_rc;
        t->what = what;
    }
}

/* entries_cursor opens a cursor on the entries database in @t, or records
 * the failure in @t and returns NULL. */
static MDB_cursor *entries_cursor(struct txn *t)
{
    MDB_cursor *cur = NULL;
    int rc = mdb_cursor_open(t->txn, t->log->entries, &cur);
    txn_check(t, rc, "mdb_cursor_open");
    return rc == 0 ? cur : NULL;
}

/* Records @rc as @t's first error, with the message "<op>: <fmt...>". */
static void txn_fail(struct txn *t, int rc, const char *fmt, ...)
{
    char detail[LMDB_LOG__ERRMSG_LEN];
    va_list ap;

    if (t->rc != 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    set_errmsg(t->log, "%s: %s", t->op, detail);
    t->rc = rc;
}

/* Writes the message of an LMDB failure recorded in @t. */
static void txn_report(struct txn *t)
{
    char buf[128];

    if (t->rc != 0 && t->mdb_rc != 0) {
        set_errmsg(t->log, "%s: %s: %s", t->op, t->what,
                   code_name(t->mdb_rc, buf, sizeof buf));
    }
}

/* Begins a short read transaction for the operation @op. */
static void read_begin(struct txn *t, struct lmdb_log *l, const char *op)
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

/* Ends the read transaction of @t and returns its result. */
static int read_end(struct txn *t)
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

/* Reads the u64 meta record @name into *@out. */
static void meta_get(struct txn *t, const char *name, uint64_t *out)
{
    MDB_val key = {strlen(name), (void *)name};
    MDB_val val;
    int rc;

    if (t->rc != 0) {
        return;
    }
    rc = mdb_get(t->txn, t->log->meta, &key, &val);
    if (rc == MDB_NOTFOUND) {
        txn_fail(t, RAFT_CORRUPT, "meta record \"%s\" is missing", name);
        return;
    }
    txn_check(t, rc, "mdb_get");
    if (rc == 0 && format_meta_decode(name, val.mv_data, val.mv_size, out)) {
        txn_fail(t, RAFT_CORRUPT, "meta record \"%s\" is corrupt", name);
    }
}

/* Writes the u64 meta record @name. */
static void meta_put(struct txn *t, const char *name, uint64_t value)
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

/* Decodes the entry key @key into *@out. */
static void key_get(struct txn *t, const MDB_val *key, raft_index *out)
{
    if (t->rc == 0 && format_key_decode(key->mv_data, key->mv_size, out)) {
        txn_fail(t, RAFT_CORRUPT, "entry key of %zu bytes", key->mv_size);
    }
}

/* Reads the first and last stored index (see lmdb_log_bounds). */
static void txn_bounds(struct txn *t, raft_index *out_first,
                       raft_index *out_last)
{
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    raft_index first = 0;
    raft_index last = 0;
    int rc;

    if (t->rc != 0) {
        return;
    }
    cur = entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
    if (rc == MDB_NOTFOUND) {
        mdb_cursor_close(cur);
        meta_get(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, &first);
        if (t->rc == 0) {
            *out_first = first;
            *out_last = first - 1;
        }
        return;
    }
    txn_check(t, rc, "mdb_cursor_get");
    key_get(t, &key, &first);
    if (t->rc == 0) {
        txn_check(t, mdb_cursor_get(cur, &key, &val, MDB_LAST),
                  "mdb_cursor_get");
    }
    key_get(t, &key, &last);
    mdb_cursor_close(cur);
    if (t->rc == 0) {
        *out_first = first;
        *out_last = last;
    }
}

/* Deletes every entry with index >= @index. */
static void delete_from(struct txn *t, raft_index index)
{
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    int rc;

    if (t->rc != 0) {
        return;
    }
    cur = entries_cursor(t);
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
        set_errmsg(l, "%s: mdb_env_set_mapsize: %s", op,
                   code_name(rc, buf, sizeof buf));
        return code_to_raft(rc);
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
        set_errmsg(l, "%s: mdb_env_set_mapsize: %s", op,
                   code_name(rc, buf, sizeof buf));
        return code_to_raft(rc);
    }
    l->map_bytes = info.me_mapsize;
    return 0;
}

/* The body of a write transaction: does its writes through @t. */
typedef void (*lmdb_log_body_cb)(struct txn *t, void *arg);

/* Runs @body in a write transaction and commits it durably, growing the
 * map and running it again whenever LMDB reports MDB_MAP_FULL. Returns 0
 * or a project code with the message in l->errmsg; on failure nothing of
 * @body's writes is stored. Writer thread only. */
static int run_write(struct lmdb_log *l, const char *op,
                     lmdb_log_body_cb body, void *arg)
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
        if (t.mdb_rc != MDB_MAP_FULL) {
            txn_report(&t);
            return t.rc;
        }
        rc = grow_map(l, op);
        if (rc == RAFT_NOSPACE) {
            set_errmsg(l,
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
        meta_put(t, LMDB_LOG_FORMAT_META_TERM, 0);
        meta_put(t, LMDB_LOG_FORMAT_META_VOTE, 0);
        meta_put(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, 1);
        meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, 0);
        meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, 0);
        a->created = true;
        return;
    }
    txn_check(t, rc, "mdb_get");
    if (t->rc != 0) {
        return;
    }
    if (format_version_decode(val.mv_data, val.mv_size, &version) != 0) {
        txn_fail(t, RAFT_CORRUPT, "%s: the format record is corrupt (%zu "
                 "bytes)", a->dir, val.mv_size);
        return;
    }
    if (version < LMDB_LOG_FORMAT_VERSION_MIN ||
        version > LMDB_LOG_FORMAT_VERSION) {
        txn_fail(t, RAFT_FORMAT,
                 "%s: the log was written in format version %lu; this "
                 "build reads version %u to version %u",
                 a->dir, (unsigned long)version,
                 LMDB_LOG_FORMAT_VERSION_MIN, LMDB_LOG_FORMAT_VERSION);
        return;
    }
    meta_get(t, LMDB_LOG_FORMAT_META_TERM, &value);
    meta_get(t, LMDB_LOG_FORMAT_META_VOTE, &value);
    meta_get(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, &first);
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
        meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, 0);
        meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, 0);
        format_version_encode(LMDB_LOG_FORMAT_VERSION, buf);
        val.mv_size = sizeof buf;
        val.mv_data = buf;
        if (t->rc == 0) {
            txn_check(t, mdb_put(t->txn, l->meta, &key, &val, 0), "mdb_put");
        }
        return;
    }
    meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &snapshot);
    meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, &value);
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
        set_errmsg(l, "open: fsync of directory %s: %s", dir,
                   code_name(rc, buf, sizeof buf));
    }
    if (fd >= 0) {
        close(fd);
    }
    return code_to_raft(rc);
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
                        uint64_t max_bytes, struct lmdb_log **out,
                        char *errmsg, size_t errmsg_len)
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
    pthread_rwlockattr_setkind_np(
        &attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = pthread_rwlock_init(&l->map_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "open: pthread_rwlock_init: %s",
                 code_name(rc, buf, sizeof buf));
        rc = code_to_raft(rc);
        goto err_free;
    }
    rc = pthread_mutex_init(&l->errmsg_lock, NULL);
    if (rc != 0) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "open: pthread_mutex_init: %s",
                 code_name(rc, buf, sizeof buf));
        rc = code_to_raft(rc);
        goto err_rwlock;
    }

    l->max_bytes = round_up(max_bytes, page);
    if (max_bytes < LMDB_LOG__MIN_BYTES || l->max_bytes == 0 ||
        l->max_bytes > SIZE_MAX / 2) {
        set_errmsg(l,
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
        set_errmsg(l, "open: the initial map size is 0");
        rc = RAFT_INVALID;
        goto err_mutex;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        rc = errno;
        set_errmsg(l, "open: mkdir %s: %s", dir,
                   code_name(rc, buf, sizeof buf));
        rc = code_to_raft(rc);
        goto err_mutex;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir,
                         LMDB_LOG__DATA_FILE) >= sizeof path) {
        set_errmsg(l, "open: directory name too long: %s", dir);
        rc = RAFT_INVALID;
        goto err_mutex;
    }
    initial = initial_bytes < l->max_bytes ? initial_bytes : l->max_bytes;
    if (stat(path, &st) == 0) {
        if ((uint64_t)st.st_size > initial) {
            initial = (uint64_t)st.st_size;
        }
    } else if (errno != ENOENT) {
        rc = errno;
        set_errmsg(l, "open: stat %s: %s", path,
                   code_name(rc, buf, sizeof buf));
        rc = code_to_raft(rc);
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
    rc = mdb_env_set_maxdbs(l->env, 2);
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

    rc = run_write(l, "open", open_body, &args);
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
    set_errmsg(l, "open: %s %s: %s", what, dir,
               code_name(rc, buf, sizeof buf));
    rc = code_to_raft(rc);
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

int lmdb_log_hard_state(struct lmdb_log *l, struct raft_hard_state *out)
{
    struct txn t;
    uint64_t term = 0;
    uint64_t vote = 0;

    read_begin(&t, l, "hard_state");
    meta_get(&t, LMDB_LOG_FORMAT_META_TERM, &term);
    meta_get(&t, LMDB_LOG_FORMAT_META_VOTE, &vote);
    if (read_end(&t) != 0) {
        return t.rc;
    }
    out->term = term;
    out->vote = vote;
    return 0;
}

int lmdb_log_bounds(struct lmdb_log *l, raft_index *out_first,
                    raft_index *out_last)
{
    struct txn t;
    raft_index first = 0;
    raft_index last = 0;

    read_begin(&t, l, "bounds");
    txn_bounds(&t, &first, &last);
    if (read_end(&t) != 0) {
        return t.rc;
    }
    *out_first = first;
    *out_last = last;
    return 0;
}

void lmdb_log_entries_free(struct raft_entry *entries, unsigned n)
{
    if (entries == NULL) {
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        raft_buf_unref(entries[i].data);
    }
    free(entries);
}

/* Appends one more slot to the array *@a (*@n used, *@cap allocated). */
static int reserve_slot(struct raft_entry **a, unsigned *n, unsigned *cap,
                        uint64_t wanted)
{
    struct raft_entry *grown;
    unsigned next;

    if (*n < *cap) {
        return 0;
    }
    if (*cap == UINT_MAX) {
        return RAFT_NOMEM;
    }
    next = *cap == 0 ? 16 : (*cap > UINT_MAX / 2 ? UINT_MAX : *cap * 2);
    if (next > wanted) {
        next = (unsigned)wanted;
    }
    grown = realloc(*a, (size_t)next * sizeof **a);
    if (grown == NULL) {
        return RAFT_NOMEM;
    }
    *a = grown;
    *cap = next;
    return 0;
}

int lmdb_log_entries(struct lmdb_log *l, raft_index lo, raft_index hi,
                     uint64_t max_bytes, struct raft_entry **out,
                     unsigned *out_n)
{
    struct txn t;
    struct raft_entry *a = NULL;
    unsigned n = 0;
    unsigned cap = 0;
    uint64_t total = 0;
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_cursor *cur = NULL;
    MDB_val key;
    MDB_val val;
    raft_index first = 0;
    raft_index last = 0;
    raft_index index = 0;
    const char *defect;
    MDB_cursor_op op = MDB_SET_KEY;
    int rc;

    if (lo > hi) {
        *out = NULL;
        *out_n = 0;
        return 0;
    }
    read_begin(&t, l, "entries");
    txn_bounds(&t, &first, &last);
    if (t.rc == 0 && lo >= 1 && lo < first) {
        txn_fail(&t, RAFT_COMPACTED,
                 "[%llu, %llu] is not stored: entries up to %llu were "
                 "compacted into a snapshot",
                 (unsigned long long)lo, (unsigned long long)hi,
                 (unsigned long long)(first - 1));
    }
    if (t.rc == 0 && (lo < first || hi > last)) {
        txn_fail(&t, RAFT_NOTFOUND,
                 "[%llu, %llu] is not stored: the log holds [%llu, %llu]",
                 (unsigned long long)lo, (unsigned long long)hi,
                 (unsigned long long)first, (unsigned long long)last);
    }
    if (t.rc == 0) {
        rc = mdb_cursor_open(t.txn, l->entries, &cur);
        txn_check(&t, rc, "mdb_cursor_open");
    }
    format_key_encode(lo, buf);
    key.mv_size = sizeof buf;
    key.mv_data = buf;
    for (raft_index want = lo; t.rc == 0; want++) {
        rc = mdb_cursor_get(cur, &key, &val, op);
        op = MDB_NEXT;
        if (rc == MDB_NOTFOUND) {
            txn_fail(&t, RAFT_NOTFOUND, "index %llu is not stored",
                     (unsigned long long)want);
            break;
        }
        txn_check(&t, rc, "mdb_cursor_get");
        key_get(&t, &key, &index);
        if (t.rc == 0 && index != want) {
            txn_fail(&t, RAFT_NOTFOUND, "index %llu is not stored",
                     (unsigned long long)want);
        }
        if (t.rc != 0) {
            break;
        }
        defect = format_entry_check(index, val.mv_data, val.mv_size);
        if (defect != NULL) {
            txn_fail(&t, RAFT_CORRUPT, "index %llu: %s",
                     (unsigned long long)index, defect);
            break;
        }
        if (n > 0 && max_bytes > 0 &&
            total + (val.mv_size - LMDB_LOG_FORMAT_ENTRY_EXTRA) > max_bytes) {
            break;
        }
        if (reserve_slot(&a, &n, &cap, hi - lo + 1) != 0 ||
            format_entry_decode(index, val.mv_data, val.mv_size, &a[n])) {
            txn_fail(&t, RAFT_NOMEM, "out of memory at index %llu",
                     (unsigned long long)index);
            break;
        }
        total += val.mv_size - LMDB_LOG_FORMAT_ENTRY_EXTRA;
        n++;
        if (index == hi) {
            break;
        }
    }
    if (cur != NULL) {
        mdb_cursor_close(cur);
    }
    if (read_end(&t) != 0) {
        lmdb_log_entries_free(a, n);
        return t.rc;
    }
    *out = a;
    *out_n = n;
    return 0;
}

/* Fails @t with RAFT_NOSPACE when the entries now take more pages than
 * entries_budget allows (see the file comment: the rest is a reserve for
 * hard state updates and deletions). */
static void check_budget(struct txn *t)
{
    MDB_stat st;
    uint64_t used;

    if (t->rc != 0) {
        return;
    }
    txn_check(t, mdb_stat(t->txn, t->log->entries, &st), "mdb_stat");
    if (t->rc != 0) {
        return;
    }
    used = ((uint64_t)st.ms_branch_pages + st.ms_leaf_pages +
            st.ms_overflow_pages) *
           st.ms_psize;
    if (used > t->log->entries_budget) {
        txn_fail(t, RAFT_NOSPACE,
                 "log full: entries would take %llu bytes, over the %llu "
                 "that the ceiling of %llu bytes set by log_max_mb leaves "
                 "them; compact or truncate the log or raise log_max_mb",
                 (unsigned long long)used,
                 (unsigned long long)t->log->entries_budget,
                 (unsigned long long)t->log->max_bytes);
    }
}

/* The request of one append. */
struct append_args {
    const struct raft_hard_state *hs; /* hard state to store, or NULL */
    const struct raft_entry *entries; /* entries to store, n long */
    unsigned n;                       /* number of entries */
};

/* Stores the hard state, deletes the conflicting suffix and appends.
 * Invariant: after it, the stored indexes are consecutive and end with
 * entries[n - 1].index (paper Fig. 2, AppendEntries receiver rules 3-4). */
static void append_body(struct txn *t, void *arg)
{
    const struct append_args *a = arg;
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    raft_index first = 0;
    raft_index last = 0;
    raft_index start;
    size_t payload_len;
    int rc;

    if (a->hs != NULL) {
        meta_put(t, LMDB_LOG_FORMAT_META_TERM, a->hs->term);
        meta_put(t, LMDB_LOG_FORMAT_META_VOTE, a->hs->vote);
    }
    if (a->n == 0) {
        return;
    }
    start = a->entries[0].index;
    txn_bounds(t, &first, &last);
    if (t->rc == 0 && (start < first || start > last + 1)) {
        txn_fail(t, RAFT_INVALID,
                 "entries start at index %llu but the log holds [%llu, "
                 "%llu]: a gap after the log or below its first index",
                 (unsigned long long)start, (unsigned long long)first,
                 (unsigned long long)last);
    }
    if (t->rc == 0 && start <= last) {
        delete_from(t, start);
    }
    if (t->rc != 0) {
        return;
    }
    cur = entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    for (unsigned i = 0; i < a->n && t->rc == 0; i++) {
        const struct raft_entry *e = &a->entries[i];
        payload_len = e->data != NULL ? e->data->len : 0;
        format_key_encode(e->index, buf);
        key.mv_size = sizeof buf;
        key.mv_data = buf;
        val.mv_size = format_entry_len(payload_len);
        val.mv_data = NULL;
        rc = mdb_cursor_put(cur, &key, &val, MDB_APPEND | MDB_RESERVE);
        txn_check(t, rc, "mdb_cursor_put");
        if (rc == 0) {
            format_entry_encode(e, val.mv_data);
        }
    }
    mdb_cursor_close(cur);
    check_budget(t);
}

int lmdb_log_append(struct lmdb_log *l, const struct raft_hard_state *hs,
                    const struct raft_entry *entries, unsigned n)
{
    struct append_args args = {hs, entries, n};
    size_t payload_len;

    if (n > 0 && entries == NULL) {
        set_errmsg(l, "append: %u entries but no array", n);
        return RAFT_INVALID;
    }
    for (unsigned i = 0; i < n; i++) {
        if (entries[i].index == 0 ||
            entries[i].index != entries[0].index + i) {
            set_errmsg(l,
                       "append: entries[%u] has index %llu, expected "
                       "%llu: indexes must be consecutive and >= 1",
                       i, (unsigned long long)entries[i].index,
                       (unsigned long long)(entries[0].index + i));
            return RAFT_INVALID;
        }
        payload_len = entries[i].data != NULL ? entries[i].data->len : 0;
        if (payload_len > LMDB_LOG_FORMAT_MAX_PAYLOAD) {
            set_errmsg(l, "append: index %llu: payload of %zu bytes "
                       "exceeds the format's limit",
                       (unsigned long long)entries[i].index, payload_len);
            return RAFT_INVALID;
        }
    }
    if (hs == NULL && n == 0) {
        return 0;
    }
    return run_write(l, "append", append_body, &args);
}

/* Deletes every entry with index >= *arg, never one at or below the
 * snapshot boundary. */
static void truncate_body(struct txn *t, void *arg)
{
    raft_index index = *(const raft_index *)arg;
    uint64_t snapshot = 0;

    meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &snapshot);
    if (t->rc == 0 && index <= snapshot) {
        txn_fail(t, RAFT_INVALID,
                 "index %llu is at or below the snapshot boundary %llu",
                 (unsigned long long)index, (unsigned long long)snapshot);
    }
    delete_from(t, index);
}

int lmdb_log_truncate_suffix(struct lmdb_log *l, raft_index index)
{
    return run_write(l, "truncate_suffix", truncate_body, &index);
}

/* Deletes every entry with index <= @index. */
static void delete_to(struct txn *t, raft_index index)
{
    MDB_cursor *cur;
    MDB_val key;
    MDB_val val;
    raft_index at = 0;
    int rc;

    if (t->rc != 0) {
        return;
    }
    cur = entries_cursor(t);
    if (cur == NULL) {
        return;
    }
    while (t->rc == 0) {
        rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
        if (rc == MDB_NOTFOUND) {
            break;
        }
        txn_check(t, rc, "mdb_cursor_get");
        key_get(t, &key, &at);
        if (t->rc != 0 || at > index) {
            break;
        }
        txn_check(t, mdb_cursor_del(cur, 0), "mdb_cursor_del");
    }
    mdb_cursor_close(cur);
}

/* Records the snapshot boundary (@index, @term) and the first index after
 * it. Invariant: first_index == snapshot_index + 1 (format.h). */
static void put_boundary(struct txn *t, raft_index index, raft_term term)
{
    meta_put(t, LMDB_LOG_FORMAT_META_FIRST_INDEX, index + 1);
    meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, index);
    meta_put(t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, term);
}

/* Deletes the prefix through *arg and moves the boundary there, reading
 * the boundary's term from its entry before deleting it (thesis §5.1: the
 * snapshot keeps the last included index and term). */
static void compact_body(struct txn *t, void *arg)
{
    raft_index index = *(const raft_index *)arg;
    uint8_t buf[LMDB_LOG_FORMAT_KEY_LEN];
    MDB_val key = {sizeof buf, buf};
    MDB_val val;
    uint64_t snapshot = 0;
    raft_index first = 0;
    raft_index last = 0;
    const char *defect;
    raft_term term;
    int rc;

    meta_get(t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &snapshot);
    txn_bounds(t, &first, &last);
    if (t->rc != 0 || index <= snapshot) {
        return;
    }
    if (index > last) {
        txn_fail(t, RAFT_INVALID,
                 "index %llu is past the last stored index %llu",
                 (unsigned long long)index, (unsigned long long)last);
        return;
    }
    format_key_encode(index, buf);
    rc = mdb_get(t->txn, t->log->entries, &key, &val);
    if (rc == MDB_NOTFOUND) {
        txn_fail(t, RAFT_CORRUPT, "index %llu is missing from [%llu, %llu]",
                 (unsigned long long)index, (unsigned long long)first,
                 (unsigned long long)last);
        return;
    }
    txn_check(t, rc, "mdb_get");
    if (t->rc != 0) {
        return;
    }
    defect = format_entry_check(index, val.mv_data, val.mv_size);
    if (defect != NULL) {
        txn_fail(t, RAFT_CORRUPT, "index %llu: %s",
                 (unsigned long long)index, defect);
        return;
    }
    term = format_entry_term(val.mv_data);
    delete_to(t, index);
    put_boundary(t, index, term);
}

int lmdb_log_compact(struct lmdb_log *l, raft_index index)
{
    return run_write(l, "compact", compact_body, &index);
}

int lmdb_log_snapshot(struct lmdb_log *l, raft_index *out_index,
                      raft_term *out_term)
{
    struct txn t;
    uint64_t index = 0;
    uint64_t term = 0;

    read_begin(&t, l, "snapshot");
    meta_get(&t, LMDB_LOG_FORMAT_META_SNAPSHOT_INDEX, &index);
    meta_get(&t, LMDB_LOG_FORMAT_META_SNAPSHOT_TERM, &term);
    if (read_end(&t) != 0) {
        return t.rc;
    }
    *out_index = index;
    *out_term = term;
    return 0;
}

/* The boundary of a reset. */
struct reset_args {
    raft_index index; /* snapshot index */
    raft_term term;   /* snapshot term */
};

/* Deletes every entry and sets the boundary (paper Fig. 13, receiver rule
 * 7: discard the entire log). */
static void reset_body(struct txn *t, void *arg)
{
    const struct reset_args *a = arg;

    delete_from(t, 0);
    put_boundary(t, a->index, a->term);
}

int lmdb_log_reset(struct lmdb_log *l, raft_index snapshot_index,
                   raft_term snapshot_term)
{
    struct reset_args args = {snapshot_index, snapshot_term};

    if (snapshot_index == UINT64_MAX ||
        (snapshot_index == 0) != (snapshot_term == 0)) {
        set_errmsg(l,
                   "reset: snapshot index %llu with term %llu: both must "
                   "be 0, or both non-zero and the index below 2^64 - 1",
                   (unsigned long long)snapshot_index,
                   (unsigned long long)snapshot_term);
        return RAFT_INVALID;
    }
    return run_write(l, "reset", reset_body, &args);
}
