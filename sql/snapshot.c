/* Snapshots of the state machine (contract in sql.h, "Snapshots"): create
 * a consistent copy of the node's database, and install one into the live
 * database so that other connections see the old or the new, never a mix.
 *
 * Happy path, create: a read-only connection of its own runs VACUUM INTO
 * the new file, which reads the live database in one read transaction (WAL
 * readers never block the apply connection's writes); the copy's own
 * raftsql_applied row then tells the index and term it reflects, so they
 * cannot disagree with its content; the file is fsynced.
 *
 * Happy path, install: the file is opened read-only and verified
 * (quick_check, the raftsql_* tables, one raftsql_applied row, the page
 * size); then sqlite3_backup copies it into the apply connection's main
 * database in a single step, i.e. one write transaction, committed with
 * synchronous=FULL so that it is durable before the caller empties the
 * log. Readers on other connections keep their snapshot until their
 * transaction ends, then see the new database (WAL isolation).
 *
 * Failure modes:
 * - Create: any failure removes the partial file and its -journal (and
 *   -wal, -shm); the live database is only read.
 * - Install: a file that fails verification is refused before anything is
 *   written. A failure during the copy rolls the backup's write
 *   transaction back (sqlite3_backup_finish), so the live database is
 *   unchanged. Only a failure to re-read the installed database afterwards
 *   (an environmental one) leaves the new content in place; the fsm then
 *   reports it and the node must stop applying, like any apply failure. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3ext.h>

#include "copy_pace.h"
#include "fsm_internal.h"
#include "sql.h"

SQLITE_EXTENSION_INIT3

#define SQL__SNAPSHOT_BUSY_TIMEOUT_MS 5000

/* The internal tables every snapshot must hold. */
static const char *const snapshot_tables[] = {
    "raftsql_applied", "raftsql_requests", "raftsql_settings",
    "raftsql_config",  "raftsql_cluster",
};

/* from_sqlite is fsm_from_sqlite, except that a database another
 * connection holds (SQLITE_BUSY, SQLITE_LOCKED) is SQL_ERR_BUSY: try again
 * later. */
static int from_sqlite(int rc)
{
    if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) {
        return SQL_ERR_BUSY;
    }
    return fsm_from_sqlite(rc);
}

/* read_applied reads the applied index and term of database @db into
 * *@out_index and *@out_term. Returns SQLITE_OK, SQLITE_CORRUPT when the
 * table or its row is missing, or another SQLite code; @msg (@msg_len)
 * says what. */
static int read_applied(sqlite3 *db, uint64_t *out_index, uint64_t *out_term,
                        char *msg, size_t msg_len)
{
    sqlite3_stmt *s;
    int rc;

    rc = sqlite3_prepare_v2(db,
                            "SELECT idx, term FROM main.raftsql_applied "
                            "WHERE id = 0",
                            -1, &s, NULL);
    if (rc != SQLITE_OK) {
        sql_errmsgf(msg, msg_len, "read raftsql_applied: %s",
                    sqlite3_errmsg(db));
        return (rc & 0xff) == SQLITE_ERROR ? SQLITE_CORRUPT : rc;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *out_index = (uint64_t)sqlite3_column_int64(s, 0);
        *out_term = (uint64_t)sqlite3_column_int64(s, 1);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        sql_errmsgf(msg, msg_len, "raftsql_applied has no row");
        rc = SQLITE_CORRUPT;
    } else {
        sql_errmsgf(msg, msg_len, "read raftsql_applied: %s",
                    sqlite3_errmsg(db));
    }
    sqlite3_finalize(s);
    return rc;
}

/* snapshot_sync_file: fsm_internal.h. */
int snapshot_sync_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int err = 0;

    if (fd < 0) {
        return errno;
    }
    if (fsync(fd) != 0) {
        err = errno;
    }
    close(fd);
    return err;
}

/* remove_copy removes the failed copy @path and what SQLite may have left
 * beside it: a VACUUM INTO whose page cache spilled onto a full disk
 * leaves @path-journal (a hot journal, which nothing would ever roll
 * back), and a -wal or -shm would be as stale. */
static void remove_copy(const char *path)
{
    static const char *const suffix[] = {"-journal", "-wal", "-shm"};
    char side[4096];

    unlink(path);
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        if ((size_t)snprintf(side, sizeof side, "%s%s", path, suffix[i]) <
            sizeof side) {
            unlink(side);
        }
    }
}

/* claim_noops moves the applied index and term of the snapshot @path,
 * at *@index, past the no-ops @f applied after it without recording them
 * (sql_fsm_apply), when @f's recorded index is still *@index: the copy's
 * content is then that of every entry up to the applied one. A snapshot
 * of a node whose last entries are no-ops (a new leader's first) would
 * else stay below its applied index, and a diverged follower, which asks
 * for a repair at least at its own, would wait for it forever. Updates
 * *@index and *@term. Returns 0 or an error code with @errmsg set. */
static int claim_noops(struct sql_fsm *f, const char *path, uint64_t *index,
                       uint64_t *term, char *errmsg, size_t errmsg_len)
{
    uint64_t applied, applied_term;
    bool claim;
    sqlite3 *copy = NULL;
    sqlite3_stmt *s = NULL;
    int rc, err;

    pthread_mutex_lock(&f->tail_mu);
    claim = f->recorded == *index && f->applied > *index;
    applied = f->applied;
    applied_term = f->applied_term;
    pthread_mutex_unlock(&f->tail_mu);
    if (!claim) {
        return 0;
    }
    rc = sqlite3_open_v2(path, &copy, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) {
        /* An auto-extension (raftsql's write guard, which refuses writes
         * to a replica's file that no node serves: the copy is one) may
         * have installed one, and a commit hook. The copy is ours. */
        sqlite3_set_authorizer(copy, NULL, NULL);
        sqlite3_commit_hook(copy, NULL, NULL);
        rc = sqlite3_prepare_v2(copy,
                                "UPDATE main.raftsql_applied SET idx = ?1, "
                                "term = ?2, schema_sum_idx = CASE WHEN "
                                "schema_sum_idx = idx THEN ?1 ELSE "
                                "schema_sum_idx END WHERE id = 0",
                                -1, &s, NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, (sqlite3_int64)applied);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)applied_term);
        rc = sqlite3_step(s);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK) {
        sql_errmsgf(
            errmsg, errmsg_len,
            "snapshot create: the copy %s: record index %" PRIu64 ": %s", path,
            applied, copy != NULL ? sqlite3_errmsg(copy) : sqlite3_errstr(rc));
        sqlite3_finalize(s);
        sqlite3_close(copy);
        return from_sqlite(rc);
    }
    sqlite3_finalize(s);
    sqlite3_close(copy);
    err = snapshot_sync_file(path);
    if (err != 0) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: fsync %s: %s", path,
                    strerror(err));
        return err == ENOSPC ? SQL_ERR_NOSPACE : SQL_ERR_IOERR;
    }
    *index = applied;
    *term = applied_term;
    return 0;
}

void sql_fsm_set_copy_gate(struct sql_fsm *f, const struct sql_copy_gate *gate)
{
    memset(&f->copy_gate, 0, sizeof f->copy_gate);
    if (gate != NULL) {
        f->copy_gate = *gate;
    }
}

void sql_fsm_set_pace(struct sql_fsm *f, const struct sql_pace *pace)
{
    memset(&f->pace, 0, sizeof f->pace);
    if (pace != NULL) {
        f->pace = *pace;
    }
}

static int snapshot_write(const char *src_path, const char *path,
                          const struct sql_copy_gate *gate,
                          struct copy_pace *pace, uint64_t *out_index,
                          uint64_t *out_term, char *errmsg, size_t errmsg_len);

int sql_fsm_snapshot_create(struct sql_fsm *f, const char *path,
                            uint64_t *out_index, uint64_t *out_term,
                            char *errmsg, size_t errmsg_len)
{
    struct copy_pace pace;
    int rc;

    f->copy_slept_ms = 0;
    copy_pace_init(&pace, f, &f->pace, path);
    rc = snapshot_write(f->path, path,
                        f->copy_gate.begin != NULL ? &f->copy_gate : NULL,
                        &pace, out_index, out_term, errmsg, errmsg_len);
    if (rc == 0) {
        rc = claim_noops(f, path, out_index, out_term, errmsg, errmsg_len);
        if (rc != 0) {
            remove_copy(path);
        }
    }
    return rc;
}

/* How many virtual machine instructions between two looks of the copy's
 * progress handler at its read transaction (copy_progress). */
#define SQL__COPY_PROGRESS_OPS 64

/* A copy under way through its gate and at its pace (copy_progress). */
struct copy_pass {
    sqlite3 *src;                     /* the copy's connection */
    const struct sql_copy_gate *gate; /* NULL: none */
    bool open;                        /* the gate is held (begin done, end
                                         not yet) */
    struct copy_pace *pace;           /* NULL: unpaced */
};

/* copy_end ends @p's hold of its gate, once. */
static void copy_end(struct copy_pass *p)
{
    if (p->open) {
        p->open = false;
        p->gate->end(p->gate->arg);
    }
}

/* copy_progress, VACUUM INTO's progress handler: ends the gate's hold
 * once the copy's read transaction on main began: from then on the
 * copy's content is fixed; then keeps the copy at its pace
 * (copy_pace_step). VACUUM INTO attaches the new file as
 * "vacuum_db" (main may be read meanwhile, its schema, in a read
 * transaction of its own that ends), then begins the read transaction on
 * main that it keeps, and only then writes into vacuum_db: a write
 * transaction there says main's is the copy's
 * (test_snapshot.c test_create_through_gate checks it). Never interrupts
 * (returns 0). */
static int copy_progress(void *arg)
{
    struct copy_pass *p = arg;

    if (p->open && sqlite3_txn_state(p->src, "vacuum_db") == SQLITE_TXN_WRITE &&
        sqlite3_txn_state(p->src, "main") != SQLITE_TXN_NONE) {
        copy_end(p);
    }
    if (!p->open && p->pace != NULL) {
        copy_pace_step(p->pace);
    }
    return 0;
}

int sql_snapshot_write(const char *src_path, const char *path,
                       const struct sql_copy_gate *gate, uint64_t *out_index,
                       uint64_t *out_term, char *errmsg, size_t errmsg_len)
{
    return snapshot_write(src_path, path, gate, NULL, out_index, out_term,
                          errmsg, errmsg_len);
}

/* snapshot_write is sql_snapshot_write at @pace (NULL: unpaced; closed
 * here). */
static int snapshot_write(const char *src_path, const char *path,
                          const struct sql_copy_gate *gate,
                          struct copy_pace *pace, uint64_t *out_index,
                          uint64_t *out_term, char *errmsg, size_t errmsg_len)
{
    struct copy_pass pass = {NULL, gate, false, pace};
    uint64_t pace_ms;
    sqlite3 *src = NULL;
    sqlite3 *copy = NULL;
    sqlite3_stmt *s = NULL;
    struct stat st;
    uint64_t index = 0;
    uint64_t term = 0;
    char msg[256];
    int rc;
    int err;

    if (stat(path, &st) == 0) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: %s already exists",
                    path);
        return SQL_ERR_INVALID;
    }
    if (errno != ENOENT) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: %s: %s", path,
                    strerror(errno));
        return SQL_ERR_INVALID;
    }
    rc = sqlite3_open_v2(src_path, &src, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: open %s: %s",
                    src_path,
                    src != NULL ? sqlite3_errmsg(src) : sqlite3_errstr(rc));
        rc = from_sqlite(rc);
        goto err_close;
    }
    /* An auto-extension (raftsql's write guard) may have installed one,
     * which would take the copy for a write to a replica's file. The
     * connection is ours. */
    sqlite3_set_authorizer(src, NULL, NULL);
    sqlite3_busy_timeout(src, SQL__SNAPSHOT_BUSY_TIMEOUT_MS);
    /* One statement, one read transaction: a consistent copy. */
    rc = sqlite3_prepare_v2(src, "VACUUM INTO ?1", -1, &s, NULL);
    if (rc == SQLITE_OK && gate != NULL) {
        err = gate->begin(gate->arg, msg, sizeof msg);
        if (err != 0) {
            sql_errmsgf(errmsg, errmsg_len, "snapshot create: %s", msg);
            sqlite3_finalize(s);
            sqlite3_close(src);
            return err;
        }
        pass.open = true;
    }
    if (rc == SQLITE_OK && (gate != NULL || pace != NULL)) {
        pass.src = src;
        sqlite3_progress_handler(src, SQL__COPY_PROGRESS_OPS, copy_progress,
                                 &pass);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_progress_handler(src, 0, NULL, NULL);
    copy_end(&pass);
    if (pace != NULL) {
        pace_ms = copy_pace_close(pace);
        if (pace->f != NULL) {
            pace->f->copy_slept_ms = pace_ms;
        }
    }
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: VACUUM INTO %s: %s",
                    path, sqlite3_errmsg(src));
        rc = from_sqlite(rc);
        goto err_unlink;
    }
    sqlite3_finalize(s);
    s = NULL;
    sqlite3_close(src);
    src = NULL;

    rc = sqlite3_open_v2(path, &copy, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK) {
        rc = read_applied(copy, &index, &term, msg, sizeof msg);
    } else {
        sql_errmsgf(msg, sizeof msg, "%s", sqlite3_errstr(rc));
    }
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: the copy %s: %s",
                    path, msg);
        rc = from_sqlite(rc);
        goto err_unlink;
    }
    sqlite3_close(copy);
    copy = NULL;
    err = snapshot_sync_file(path);
    if (err != 0) {
        sql_errmsgf(errmsg, errmsg_len, "snapshot create: fsync %s: %s", path,
                    strerror(err));
        rc = err == ENOSPC ? SQL_ERR_NOSPACE : SQL_ERR_IOERR;
        goto err_unlink;
    }
    *out_index = index;
    *out_term = term;
    return 0;

err_unlink:
    sqlite3_finalize(s);
    sqlite3_close(copy);
    sqlite3_close(src); /* first: it may hold the copy's journal */
    remove_copy(path);
    return rc;
err_close:
    sqlite3_close(src);
    return rc;
}

/* fail records "snapshot install: <fmt...>" as @f's message and returns
 * @rc. */
static int fail(struct sql_fsm *f, int rc, const char *fmt, ...)
{
    char detail[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    sql_errmsgf(f->errmsg, sizeof f->errmsg, "snapshot install: %s", detail);
    return rc;
}

/* snapshot_query_int: fsm_internal.h. */
int snapshot_query_int(sqlite3 *db, const char *sql, int64_t *out)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);

    if (rc != SQLITE_OK) {
        return rc;
    }
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_CORRUPT;
    }
    sqlite3_finalize(s);
    return rc;
}

/* verify checks the snapshot database @snap (file @path) against the live
 * one @live, reading its applied index and term into *@out_index and
 * *@out_term. Returns 0 or an error code with @f's message set. */
static int verify(struct sql_fsm *f, sqlite3 *snap, sqlite3 *live,
                  const char *path, uint64_t *out_index, uint64_t *out_term)
{
    sqlite3_stmt *s;
    const char *verdict;
    char msg[256];
    int64_t snap_page = 0;
    int64_t live_page = 0;
    int64_t n = 0;
    size_t i;
    int rc;

    rc = sqlite3_prepare_v2(snap, "PRAGMA quick_check(1)", -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
    }
    if (rc != SQLITE_ROW) {
        rc = fail(
            f,
            from_sqlite(rc) == SQL_ERR_NOMEM ? SQL_ERR_NOMEM : SQL_ERR_CORRUPT,
            "%s is not a readable database: %s", path, sqlite3_errmsg(snap));
        sqlite3_finalize(s);
        return rc;
    }
    verdict = (const char *)sqlite3_column_text(s, 0);
    if (verdict == NULL || strcmp(verdict, "ok") != 0) {
        rc = fail(f, SQL_ERR_CORRUPT, "%s fails quick_check: %s", path,
                  verdict != NULL ? verdict : "no verdict");
        sqlite3_finalize(s);
        return rc;
    }
    sqlite3_finalize(s);

    for (i = 0; i < sizeof snapshot_tables / sizeof *snapshot_tables; i++) {
        char sql[160];

        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM main.sqlite_schema WHERE type = "
                 "'table' AND name = '%s'",
                 snapshot_tables[i]);
        rc = snapshot_query_int(snap, sql, &n);
        if (rc != SQLITE_OK || n != 1) {
            return fail(f, SQL_ERR_CORRUPT,
                        "%s is not a raftsql snapshot: table %s is missing",
                        path, snapshot_tables[i]);
        }
    }
    rc = read_applied(snap, out_index, out_term, msg, sizeof msg);
    if (rc != SQLITE_OK) {
        return fail(f, SQL_ERR_CORRUPT, "%s: %s", path, msg);
    }
    rc = snapshot_query_int(snap, "PRAGMA main.page_size", &snap_page);
    if (rc == SQLITE_OK) {
        rc = snapshot_query_int(live, "PRAGMA main.page_size", &live_page);
    }
    if (rc != SQLITE_OK) {
        return fail(f, from_sqlite(rc), "read page_size: %s",
                    sqlite3_errstr(rc));
    }
    if (snap_page != live_page) {
        return fail(f, SQL_ERR_INVALID,
                    "%s has pages of %" PRId64
                    " bytes but the live "
                    "database (in WAL mode) has pages of %" PRId64
                    " bytes: the backup cannot change it",
                    path, snap_page, live_page);
    }
    return 0;
}

/* set_synchronous sets PRAGMA synchronous on the apply connection of @f
 * (as an internal statement: the authorizer refuses it to requests).
 * Returns 0 or an error code with @f's message set. */
static int set_synchronous(struct sql_fsm *f, const char *level)
{
    char sql[64];

    snprintf(sql, sizeof sql, "PRAGMA main.synchronous=%s", level);
    return fsm_exec(f, sql);
}

/* copy_failed restores the apply connection after a failed copy: the
 * normal synchronous level, and the data_version baseline its failure
 * moved (foreign_rebase), keeping @f's message. */
static void copy_failed(struct sql_fsm *f)
{
    char msg[SQL__ERRMSG];
    memcpy(msg, f->errmsg, sizeof msg);
    set_synchronous(f, "NORMAL");
    foreign_rebase(f);
    memcpy(f->errmsg, msg, sizeof msg);
}

/* Pages an install copies at a time (backup_paced). */
#define SQL__INSTALL_STEP_PAGES 256

/* How many times a step that met SQLITE_BUSY or SQLITE_LOCKED is
 * retried, 10 ms apart (backup_paced). */
#define SQL__INSTALL_STEP_RETRIES 500

/* backup_paced runs the install's backup @b into @f's database (pages of
 * @page_size bytes) to its end at @f's pace (sql_fsm_set_pace): steps
 * of SQL__INSTALL_STEP_PAGES, the copy's pages going into the WAL, which
 * the pace hands to writeback and spreads over time while the cluster
 * takes writes; a step that met a lock is tried again (the write
 * transaction stays open between steps), for 5 s at most. Returns the
 * last step's code: SQLITE_DONE when complete (committed), else the
 * error (sqlite3_backup_finish rolls back). */
static int backup_paced(struct sql_fsm *f, sqlite3_backup *b, int64_t page_size)
{
    struct copy_pace pace;
    char wal[4096];
    int retries = 0;
    int rc;

    f->install_slept_ms = 0;
    if ((size_t)snprintf(wal, sizeof wal, "%s-wal", f->path) >= sizeof wal) {
        return sqlite3_backup_step(b, -1);
    }
    copy_pace_init(&pace, f, &f->pace, wal);
    for (;;) {
        rc = sqlite3_backup_step(b, SQL__INSTALL_STEP_PAGES);
        if (((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) &&
            retries++ < SQL__INSTALL_STEP_RETRIES) {
            sqlite3_sleep(10);
            continue;
        }
        if (rc != SQLITE_OK) {
            break;
        }
        copy_pace_wrote(&pace, (uint64_t)(sqlite3_backup_pagecount(b) -
                                          sqlite3_backup_remaining(b)) *
                                   (uint64_t)page_size);
    }
    f->install_slept_ms = copy_pace_close(&pace);
    return rc;
}

int sql_fsm_snapshot_install(struct sql_fsm *f, const char *path,
                             uint64_t *out_index, uint64_t *out_term)
{
    sqlite3 *live = f->db;
    sqlite3 *snap = NULL;
    sqlite3_backup *b;
    int64_t page_size = 4096;
    uint64_t index = 0;
    uint64_t term = 0;
    uint64_t durable;
    struct stat st;
    int rc;
    int rc2;

    if (stat(path, &st) != 0) {
        return fail(f, errno == ENOENT ? SQL_ERR_NOTFOUND : SQL_ERR_IOERR,
                    "%s: %s", path, strerror(errno));
    }
    rc = sqlite3_open_v2(path, &snap, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        rc = fail(
            f,
            from_sqlite(rc) == SQL_ERR_NOMEM ? SQL_ERR_NOMEM : SQL_ERR_CORRUPT,
            "open %s: %s", path,
            snap != NULL ? sqlite3_errmsg(snap) : sqlite3_errstr(rc));
        goto out;
    }
    sqlite3_extended_result_codes(snap, 1);
    rc = verify(f, snap, live, path, &index, &term);
    if (rc != 0) {
        goto out;
    }

    /* The copy must be durable before the caller empties its log. */
    rc = set_synchronous(f, "FULL");
    if (rc != 0) {
        goto out;
    }
    /* Read before the backup begins: its destination is not to be used
     * until sqlite3_backup_finish. */
    (void)snapshot_query_int(live, "PRAGMA main.page_size", &page_size);
    b = sqlite3_backup_init(live, "main", snap, "main");
    if (b == NULL) {
        rc = sqlite3_errcode(live);
        rc = fail(f, from_sqlite(rc), "backup: %s", sqlite3_errmsg(live));
        set_synchronous(f, "NORMAL");
        goto out;
    }
    /* A foreign commit is seen now or stays seen (sticky): a copy that
     * fails below resets the connection's cache, which moves
     * data_version too (foreign_rebase). */
    (void)foreign_check(f);
    /* Every page in one write transaction (the steps keep it open). */
    rc = backup_paced(f, b, page_size);
    rc2 = sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
        rc = fail(f, from_sqlite(rc), "backup of %s: %s (%s)", path,
                  sqlite3_errmsg(live), sqlite3_errstr(rc));
        copy_failed(f);
        goto out;
    }
    if (rc2 != SQLITE_OK) {
        rc = fail(f, from_sqlite(rc2), "backup of %s: %s", path,
                  sqlite3_errstr(rc2));
        copy_failed(f);
        goto out;
    }
    rc = set_synchronous(f, "NORMAL");
    if (rc != 0) {
        goto out;
    }
    rc = fsm_reload(f);
    if (rc == 0) {
        /* The database holds the snapshot only: a foreign commit seen
         * before is gone with the content it changed. */
        rc = foreign_reset(f);
    }
    if (rc != 0) {
        goto out;
    }
    if (f->applied != index) {
        rc = fail(f, SQL_ERR_CORRUPT,
                  "installed %s at index %" PRIu64
                  " but the database "
                  "now says %" PRIu64,
                  path, index, f->applied);
        goto out;
    }
    checkpoint_set_durable(f, index);
    /* The copy into the database file at the pace, then (below) the
     * WAL truncated. */
    checkpoint_paced(f);
    /* Best effort: move the copy out of the WAL now. The commit above was
     * synchronous, so the index is durable either way. */
    sql_fsm_checkpoint(f, SQL_CHECKPOINT_WAIT, &durable);
    *out_index = index;
    *out_term = term;
    rc = 0;

out:
    sqlite3_close(snap);
    return rc;
}
