/* The state machine's apply connection: open (setup, internal tables,
 * settings, first checkpoint), close, and the accessors of sql.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

int fsm_from_sqlite(int rc)
{
    switch (rc & 0xff) {
        case SQLITE_NOMEM:
            return SQL_ERR_NOMEM;
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
            return SQL_ERR_CORRUPT;
        default:
            return SQL_ERR_IOERR;
    }
}

int fsm_fail(struct sql_fsm *f, int rc, const char *what)
{
    sql_errmsgf(f->errmsg, sizeof f->errmsg, "%s: %s (%s)", what,
                sqlite3_errmsg(f->db), sqlite3_errstr(rc));
    return fsm_from_sqlite(rc);
}

/* open_error maps a failure of sqlite3_open_v2 on @path. */
static int open_error(sqlite3 *db, int rc, const char *path, char *errmsg,
                      size_t errmsg_len)
{
    if ((rc & 0xff) == SQLITE_CANTOPEN && access(path, F_OK) != 0 &&
        errno == ENOENT) {
        sql_errmsgf(errmsg, errmsg_len, "open %s: no such database file", path);
        return SQL_ERR_NOTFOUND;
    }
    if ((rc & 0xff) == SQLITE_NOTADB) {
        sql_errmsgf(errmsg, errmsg_len, "open %s: file is not a database",
                    path);
        return SQL_ERR_CORRUPT;
    }
    sql_errmsgf(errmsg, errmsg_len, "open %s: %s (%s)", path,
                db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                sqlite3_errstr(rc));
    return rc == SQLITE_NOMEM ? SQL_ERR_NOMEM : fsm_from_sqlite(rc);
}

/* set_journal_wal switches the database of @db to WAL mode. */
static int set_journal_wal(sqlite3 *db, char *errmsg, size_t errmsg_len)
{
    sqlite3_stmt *s;
    const char *mode;
    int rc;

    rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        goto err;
    }
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        goto err;
    }
    mode = (const char *)sqlite3_column_text(s, 0);
    if (mode == NULL || strcasecmp(mode, "wal") != 0) {
        sql_errmsgf(errmsg, errmsg_len,
                    "cannot switch the database to WAL: journal_mode is %s",
                    mode != NULL ? mode : "unknown");
        sqlite3_finalize(s);
        return SQL_ERR_IOERR;
    }
    sqlite3_finalize(s);
    return 0;
err:
    sql_errmsgf(errmsg, errmsg_len, "journal_mode=WAL: %s (%s)",
                sqlite3_errmsg(db), sqlite3_errstr(rc));
    return fsm_from_sqlite(rc);
}

/* check_replica refuses a database that holds objects but is no raftsql
 * replica (no raftsql_applied table): its data never went through the log,
 * so it would silently differ from the other replicas. It sets f->created
 * when the table is missing (the open creates the raftsql_* tables; an
 * error reading it leaves it false, so nothing is taken for created). */
static int check_replica(struct sql_fsm *f, char *errmsg, size_t errmsg_len)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(
        f->db,
        "SELECT (SELECT count(*) FROM sqlite_schema"
        "        WHERE name = 'raftsql_applied'),"
        "       (SELECT group_concat(name, ', ') FROM"
        "         (SELECT name FROM sqlite_schema"
        "          WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        "          ORDER BY name LIMIT 5))",
        -1, &s, NULL);
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
        f->created = sqlite3_column_int(s, 0) == 0;
    }
    if (f->created && sqlite3_column_type(s, 1) != SQLITE_NULL) {
        sql_errmsgf(errmsg, errmsg_len,
                    "%s already holds objects (%s) but is not a raftsql "
                    "replica: a replica starts from an empty database (to "
                    "bring this data in, start a new cluster's first node "
                    "on an empty database with bootstrap_from=<this file>, "
                    "or load a dump with raft_load_sql)",
                    f->path, (const char *)sqlite3_column_text(s, 1));
        sqlite3_finalize(s);
        return SQL_ERR_INVALID;
    }
    rc = sqlite3_finalize(s);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "read schema: %s",
                    sqlite3_errmsg(f->db));
        return fsm_from_sqlite(rc);
    }
    return 0;
}

/* on_progress is the apply connection's progress handler, called every
 * SQL__FSM_PROGRESS_OPS virtual machine steps: while a request runs, it
 * interrupts the statement once the request has used its work budget
 * (the same count on every node that runs the same SQLite build on the
 * same state) or when sql_fsm_interrupt was called. */
static int on_progress(void *arg)
{
    struct sql_fsm *f = arg;
    if (!f->in_request) {
        return 0;
    }
    if (atomic_load(&f->stopping)) {
        return 1;
    }
    f->steps += SQL__FSM_PROGRESS_OPS;
    if (f->max_steps > 0 && f->steps > f->max_steps) {
        f->budget_hit = 1;
        return 1;
    }
    return 0;
}

/* on_busy is the apply connection's busy handler: SQLite's own busy
 * timeout (the same waits of 1, 2, 5, ... 100 ms, up to f->busy_ms in
 * all), but it gives up at once once sql_fsm_interrupt was called, since
 * sqlite3_interrupt does not end a wait for a lock: a node stopping while
 * another process's writer held the file's write lock waited out the whole
 * timeout (5 s) in its apply batch. Apply thread (SQLite calls it). */
static int on_busy(void *arg, int count)
{
    static const unsigned char delays[] = {1,  2,  5,  10, 15, 20,
                                           25, 25, 25, 50, 50, 100};
    enum { N = sizeof delays / sizeof delays[0] };
    struct sql_fsm *f = arg;
    unsigned delay, prior = 0;
    int i;

    if (atomic_load(&f->stopping)) {
        return 0;
    }
    for (i = 0; i < count && i < N - 1; i++) {
        prior += delays[i];
    }
    if (count < N) {
        delay = delays[count];
    } else {
        delay = delays[N - 1];
        prior += (unsigned)(count - (N - 1)) * delays[N - 1];
    }
    if (prior >= f->busy_ms) {
        return 0;
    }
    if (prior + delay > f->busy_ms) {
        delay = f->busy_ms - prior;
    }
    sqlite3_sleep((int)delay);
    return !atomic_load(&f->stopping);
}

void sql_fsm_set_busy_ms(struct sql_fsm *f, unsigned ms)
{
    f->busy_ms = ms;
}

void sql_fsm_interrupt(struct sql_fsm *f)
{
    atomic_store(&f->stopping, 1);
    sqlite3_interrupt(f->db);
}

/* setup prepares the freshly opened connection of @f, removing the
 * @n_hidden functions of @hidden. */
static int setup(struct sql_fsm *f, const struct sql_function *hidden,
                 unsigned n_hidden, char *errmsg, size_t errmsg_len)
{
    sqlite3 *db = f->db;
    unsigned i;
    int rc;

    sqlite3_extended_result_codes(db, 1);
    /* Another extension (an auto-extension: raftsql's own, in every
     * process that loaded raftsql.so and in a program that registers it
     * so) may have installed one, and a commit hook (raftsql's vetoes
     * commits to a replica that got past no guard). */
    sqlite3_set_authorizer(db, NULL, NULL);
    sqlite3_commit_hook(db, NULL, NULL);
    /* Nor may a request reach the host's functions that the caller
     * hides (ext/'s would wait on the apply thread from inside it). */
    for (i = 0; i < n_hidden; i++) {
        sqlite3_create_function_v2(db, hidden[i].name, hidden[i].n_arg,
                                   SQLITE_UTF8, NULL, NULL, NULL, NULL, NULL);
    }
    f->busy_ms = SQL__BUSY_TIMEOUT_MS;
    sqlite3_busy_handler(db, on_busy, f);
    sqlite3_progress_handler(db, SQL__FSM_PROGRESS_OPS, on_progress, f);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);

    rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) {
            sql_errmsgf(errmsg, errmsg_len, "%s is not a SQLite database (%s)",
                        f->path, sqlite3_errmsg(db));
            return SQL_ERR_CORRUPT;
        }
        sql_errmsgf(errmsg, errmsg_len, "read schema: %s (%s)",
                    sqlite3_errmsg(db), sqlite3_errstr(rc));
        return fsm_from_sqlite(rc);
    }
    rc = check_replica(f, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    rc = set_journal_wal(db, errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    /* Commits are not fsynced: the log replays what a power loss drops,
     * as long as it is compacted only up to the durable index (sql.h). */
    rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "synchronous=NORMAL: %s",
                    sqlite3_errmsg(db));
        return fsm_from_sqlite(rc);
    }
    rc = determinism_install(&f->det, db);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "install random(): %s",
                    sqlite3_errmsg(db));
        return fsm_from_sqlite(rc);
    }
    return schema_create(f, errmsg, errmsg_len);
}

/* drop_created drops the raftsql_* tables of @f's database, in one
 * transaction on its apply connection (sql_fsm_discard_on_close). */
static void drop_created(struct sql_fsm *f)
{
    sqlite3_stmt *st = NULL;
    sqlite3_str *sql = sqlite3_str_new(f->db);
    char *text;

    atomic_store(&f->stopping, 0); /* a stop's interrupt is over */
    f->internal = 1;
    sqlite3_str_appendall(sql, "BEGIN IMMEDIATE;");
    if (sqlite3_prepare_v2(f->db,
                           "SELECT name FROM main.sqlite_master WHERE type = "
                           "'table' AND name LIKE 'raftsql\\_%' ESCAPE "
                           "'\\'",
                           -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            sqlite3_str_appendf(sql, "DROP TABLE main.\"%w\";",
                                (const char *)sqlite3_column_text(st, 0));
        }
    }
    sqlite3_finalize(st);
    sqlite3_str_appendall(sql, "COMMIT;");
    text = sqlite3_str_finish(sql);
    if (text == NULL ||
        sqlite3_exec(f->db, text, NULL, NULL, NULL) != SQLITE_OK) {
        if (!sqlite3_get_autocommit(f->db)) {
            sqlite3_exec(f->db, "ROLLBACK", NULL, NULL, NULL);
        }
    }
    sqlite3_free(text);
    f->internal = 0;
}

void sql_fsm_discard_on_close(struct sql_fsm *f)
{
    if (f != NULL) {
        f->discard = true;
    }
}

int sql_fsm_host_check(char *errmsg, size_t errmsg_len)
{
#ifndef SQLITE_CORE
    if (sqlite3_api->progress_handler == NULL) {
        sql_errmsgf(errmsg, errmsg_len,
                    "this process's SQLite %s has no progress handler (it is "
                    "built with SQLITE_OMIT_PROGRESS_CALLBACK, as "
                    "better-sqlite3's is), which a node's apply connection "
                    "needs: run the node in another process (raftsql-node, "
                    "or a host whose SQLite has it) and call raftsql's "
                    "functions here without raft_start: they go to that "
                    "node through its socket",
                    sqlite3_libversion());
        return SQL_ERR_INVALID;
    }
#else
    (void)errmsg;
    (void)errmsg_len;
#endif
    return 0;
}

int sql_fsm_open(const char *path, const struct sql_function *hidden,
                 unsigned n_hidden, struct sql_fsm **out, char *errmsg,
                 size_t errmsg_len)
{
    struct sql_fsm *f;
    int rc;

    rc = sql_fsm_host_check(errmsg, errmsg_len);
    if (rc != 0) {
        return rc;
    }
    f = calloc(1, sizeof *f);
    if (f == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "out of memory");
        return SQL_ERR_NOMEM;
    }
    f->pragma_setting = -1;
    pthread_mutex_init(&f->tail_mu, NULL);
    rc = determinism_init(&f->det, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    checkpoint_init(&f->ckpt);
    rc = sqlite3_open_v2(path, &f->db, SQLITE_OPEN_READWRITE, f->det.name);
    if (rc != SQLITE_OK) {
        rc = open_error(f->db, rc, path, errmsg, errmsg_len);
        goto err_close;
    }
    f->path = strdup(sqlite3_db_filename(f->db, "main"));
    if (f->path == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "out of memory");
        rc = SQL_ERR_NOMEM;
        goto err_close;
    }
    rc = setup(f, hidden, n_hidden, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_close;
    }
    rc = schema_read_applied(f);
    if (rc == 0) {
        rc = schema_load_settings(f);
    }
    if (rc == 0) {
        rc = foreign_reset(f);
    }
    if (rc == 0) {
        /* Whatever WAL recovery found becomes durable here, or else the
         * durable index stays 0 until a checkpoint completes. */
        uint64_t durable;

        rc = sql_fsm_checkpoint(f, SQL_CHECKPOINT_WAIT, &durable);
        if (rc == SQL_ERR_BUSY) {
            rc = 0;
        }
    }
    if (rc != 0) {
        sql_errmsgf(errmsg, errmsg_len, "%s", f->errmsg);
        goto err_close;
    }
    authorize_install(f);
    checkpoint_start(f);
    f->errmsg[0] = '\0';
    *out = f;
    return 0;

err_close:
    sql_fsm_close(f);
    return rc;
err_free:
    pthread_mutex_destroy(&f->tail_mu);
    free(f);
    return rc;
}

void sql_fsm_close(struct sql_fsm *f)
{
    if (f == NULL) {
        return;
    }
    checkpoint_stop(f);
    checksum_free(f);
    schema_finalize(f);
    changeset_cache_free(f);
    cache_clear(&f->cache);
    free(f->text);
    if (f->discard && f->created && f->db != NULL) {
        drop_created(f);
    }
    sqlite3_close(f->db);
    determinism_close(&f->det);
    checkpoint_destroy(&f->ckpt);
    pthread_mutex_destroy(&f->tail_mu);
    free(f->path);
    free(f);
}

uint64_t sql_fsm_applied(const struct sql_fsm *f)
{
    return f->applied;
}

unsigned sql_fsm_settings(const struct sql_fsm *f)
{
    return f->settings;
}

uint64_t sql_fsm_applied_term(const struct sql_fsm *f)
{
    return f->applied_term;
}

bool sql_fsm_applied_time(const struct sql_fsm *f, int64_t *out)
{
    if (f->has_applied_time) {
        *out = f->applied_time_ms;
    }
    return f->has_applied_time;
}

const char *sql_source_id(void)
{
    return sqlite3_sourceid();
}

const char *sql_fsm_errmsg(const struct sql_fsm *f)
{
    return f->errmsg;
}

int fsm_reload(struct sql_fsm *f)
{
    int rc = schema_applied_columns(f);

    if (rc == 0) {
        rc = schema_read_applied(f);
    }

    checkpoint_reset(f);
    changeset_cache_clear(f);
    if (rc == 0) {
        rc = schema_load_settings(f);
    }
    if (rc == 0) {
        rc = checksum_reload(f);
    }
    if (rc == 0) {
        rc = schema_client_table(f);
    }
    return rc;
}

int fsm_exec(struct sql_fsm *f, const char *sql)
{
    int rc;

    f->internal = 1;
    rc = sqlite3_exec(f->db, sql, NULL, NULL, NULL);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "exec");
    }
    return 0;
}
