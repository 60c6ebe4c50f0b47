/* The state machine: applies committed log entries to the node's SQLite
 * database through its own connection, in batches, deterministically and
 * exactly once across crashes (DESIGN.md "The write path", "Determinism").
 *
 * Happy path: sql_fsm_apply runs BEGIN IMMEDIATE; for each entry it checks
 * the request id against raftsql_requests (at-most-once), opens a SAVEPOINT,
 * sets the entry's seed and time, prepares and steps the request's
 * statements one by one, and RELEASEs; then it records the applied index in
 * raftsql_applied and COMMITs. The applied index thus moves with the data,
 * in the same transaction: after a crash the database says exactly which
 * entries it holds, so each committed entry is applied once, in log order
 * (paper Fig. 2, lastApplied). Request ids give at-most-once execution of
 * client retries (thesis §6.3, client sessions).
 *
 * Failure modes:
 * - A SQL error (syntax, constraint, a refused statement, a missing
 *   parameter) is a result: the request's savepoint rolls back, the error
 *   is reported, and the batch goes on. Every node gets the same result
 *   because it runs the same SQL on the same state.
 * - A statement that rolls back the whole transaction itself (INSERT OR
 *   ROLLBACK, RAISE(ROLLBACK)) also undoes the earlier requests of the
 *   batch: the batch restarts from its first entry with that request marked
 *   failed, so that results never depend on how entries were batched.
 * - An environmental failure (I/O error, disk full, out of memory,
 *   corruption, lock timeout) is not a result: the whole batch rolls back,
 *   the applied index stays, and the caller must stop applying.
 *
 * Durability: the connection runs synchronous=NORMAL (commits are not
 * fsynced); sql_fsm_checkpoint establishes the durable index up to which
 * the log may be compacted (sql.h, "The durable point"). The routine
 * backfill of the WAL runs on a checkpointer thread with a connection of
 * its own (passive checkpoints, woken by the apply connection's WAL hook),
 * not inside the apply connection's commits, where it stalled every
 * waiting caller (docs/performance.md).
 *
 * Deferred foreign key violations are checked at the end of each request
 * (SQLITE_DBSTATUS_DEFERRED_FKS), not at the batch COMMIT, for the same
 * reason: a request's outcome must not depend on its batch. */

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "determinism.h"
#include "fsm.h"
#include "pragma.h"
#include "sql.h"

/* A request id is deduplicated when applied within this many entries. */
#define APPLY__DEDUP_WINDOW 100000
/* Entries of raftsql_requests pruned at once (see sql_fsm_apply). */
#define APPLY__PRUNE_CHUNK 1024
#define APPLY__BUSY_TIMEOUT_MS 5000
/* How long a checkpoint waits for readers before giving up. */
#define APPLY__CHECKPOINT_WAIT_MS 100
#define APPLY__ERRMSG 512
/* WAL frames after which the checkpointer thread backfills the WAL into
 * the database file (SQLite's own automatic checkpoint threshold). */
#define APPLY__CKPT_FRAMES 1000
/* run_request's answer when the request rolled back the whole batch. */
#define APPLY__RESTART (-1)

/* Internal statements, prepared once at open. */
enum {
    STMT_BEGIN,
    STMT_COMMIT,
    STMT_ROLLBACK,
    STMT_SAVEPOINT,
    STMT_RELEASE,
    STMT_ROLLBACK_TO,
    STMT_ZERO_CHANGES,
    STMT_DUP,
    STMT_RECORD,
    STMT_PRUNE,
    STMT_APPLIED,
    STMT_SET,
    STMT_SETTINGS,
    STMT__N,
};

static const char *const stmt_sql[STMT__N] = {
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT raftsql_request",
    "RELEASE raftsql_request",
    "ROLLBACK TO raftsql_request",
    /* Sets changes() to 0, so that it does not depend on what ran
     * before the request on this connection. */
    "UPDATE main.raftsql_applied SET idx = idx WHERE 0",
    "SELECT idx FROM main.raftsql_requests WHERE origin = ?1 AND seq = ?2",
    "INSERT OR REPLACE INTO main.raftsql_requests(origin, seq, idx) "
    "VALUES (?1, ?2, ?3)",
    "DELETE FROM main.raftsql_requests WHERE idx <= ?1",
    "UPDATE main.raftsql_applied SET idx = ?1, term = ?2 WHERE id = 0",
    "INSERT OR REPLACE INTO main.raftsql_settings(name, value) "
    "VALUES (?1, ?2)",
    "SELECT name, value FROM main.raftsql_settings",
};

/* Internal tables. raftsql_applied has exactly one row (id 0). */
static const char schema_sql[] =
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS main.raftsql_applied("
    " id INTEGER PRIMARY KEY CHECK (id = 0),"
    " idx INTEGER NOT NULL, term INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO main.raftsql_applied(id, idx, term)"
    " VALUES (0, 0, 0);"
    "CREATE TABLE IF NOT EXISTS main.raftsql_requests("
    " origin INTEGER NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL,"
    " PRIMARY KEY (origin, seq)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS main.raftsql_requests_idx"
    " ON raftsql_requests(idx);"
    "CREATE TABLE IF NOT EXISTS main.raftsql_settings("
    " name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "COMMIT;";

/* The checkpointer: a thread with a connection of its own that runs
 * SQLite's passive checkpoints, which the apply connection would
 * otherwise run inside a commit (automatic checkpoint: a backfill and
 * two fsyncs, 10 to 30 ms here) while every caller of the batch waits.
 * Invariant: at most one checkpoint runs at a time on either connection
 * (run_mu), so the durable checkpoint never fails for the checkpointer. */
struct sql_ckpt {
    sqlite3 *db;                     /* its connection; NULL: not running,
                                        SQLite's automatic checkpoint
                                        stays on the apply connection */
    pthread_t thread;                /* runs ckpt_main */
    pthread_mutex_t sig_mu;          /* guards want and stop */
    pthread_cond_t cond;             /* want or stop became true */
    bool want;                       /* the WAL passed APPLY__CKPT_FRAMES */
    bool stop;                       /* the thread returns */
    uint64_t committed;              /* applied index of the apply
                                        connection's last commit (sig_mu) */
    uint64_t durable;                /* the committed index read before the
                                        last checkpoint that backfilled
                                        every frame (sig_mu); 0: none */
    uint64_t gen;                    /* bumped when the database is
                                        replaced or reread (sig_mu): a
                                        checkpoint begun before reports
                                        nothing */
    pthread_mutex_t run_mu;          /* held while a checkpoint runs */
};

struct sql_fsm {
    sqlite3 *db;                     /* the apply connection */
    char *path;                      /* its database file (malloc'd);
                                        immutable after open, so any thread
                                        may read it */
    uint64_t durable;                /* applied index known durable in the
                                        database file (see sql.h) */
    struct sql_determinism det;      /* seeded random(), entry-time VFS */
    sqlite3_stmt *stmts[STMT__N];    /* internal statements */
    uint64_t applied;                /* last applied index (as stored) */
    uint64_t applied_term;           /* its term */
    int internal;                    /* 1: our own statement, authorize all */
    int altered;                     /* 1: the request ran ALTER TABLE */
    int pragma_setting;              /* setting captured by the authorizer,
                                        or -1 */
    int pragma_value;                /* its value, -1 when not a boolean */
    char pragma_text[64];            /* the value as written */
    char deny[256];                  /* why the authorizer refused, or "" */
    char errmsg[APPLY__ERRMSG];      /* message of the last failure */
    struct sql_cache cache;          /* prepared single-statement requests */
    struct sql_ckpt ckpt;            /* background checkpoints */
};

/* ckpt_committed tells the checkpointer the applied index of the commit
 * just made, and folds in the durable index its last complete checkpoint
 * found. Thread: the apply thread, after a COMMIT. */
static void ckpt_committed(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;

    pthread_mutex_lock(&c->sig_mu);
    c->committed = f->applied;
    if (c->durable > f->durable) {
        f->durable = c->durable;
    }
    pthread_mutex_unlock(&c->sig_mu);
}

/* ckpt_reset forgets what the checkpointer knew of the database after it
 * was replaced (snapshot install) or reread: a checkpoint already running
 * reports nothing. Thread: the apply thread. */
static void ckpt_reset(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;

    pthread_mutex_lock(&c->sig_mu);
    c->gen++;
    c->committed = f->applied;
    c->durable = 0;
    pthread_mutex_unlock(&c->sig_mu);
}

/* str_printf returns a malloc'd formatted string, or NULL. */
static char *str_printf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (s == NULL) {
        return NULL;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* is_environmental tells whether SQLite code @rc is a failure of this
 * node's environment rather than a result of the SQL. SQLITE_LOCKED is a
 * result: without shared cache it only comes from the request's own
 * statements on this connection (e.g. dropping a table it is reading), the
 * same on every node. */
static int is_environmental(int rc)
{
    switch (rc & 0xff) {
        case SQLITE_IOERR:
        case SQLITE_FULL:
        case SQLITE_NOMEM:
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
        case SQLITE_CANTOPEN:
        case SQLITE_READONLY:
        case SQLITE_BUSY:
        case SQLITE_PROTOCOL:
        case SQLITE_PERM:
        case SQLITE_INTERRUPT:
        case SQLITE_NOLFS:
            return 1;
        default:
            return 0;
    }
}

int sql_to_raft(int rc)
{
    switch (rc & 0xff) {
        case SQLITE_NOMEM:
            return RAFT_NOMEM;
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
            return RAFT_CORRUPT;
        default:
            return RAFT_IOERR;
    }
}

/* fail_sqlite records a failure of SQLite code @rc during @what and
 * returns the project code. */
static int fail_sqlite(struct sql_fsm *f, int rc, const char *what)
{
    raft_errmsgf(f->errmsg, sizeof f->errmsg, "%s: %s (%s)", what,
            sqlite3_errmsg(f->db), sqlite3_errstr(rc));
    return sql_to_raft(rc);
}

static int is_internal_name(const char *name)
{
    return name != NULL && strncasecmp(name, "raftsql_", 8) == 0;
}

/* is_node_local_table tells whether @name is one of SQLite's eponymous
 * virtual tables whose rows differ per node: the connection's prepared
 * statements, the file's page layout, a statement's bytecode. */
static int is_node_local_table(const char *name)
{
    static const char *const local[] = {
        "sqlite_stmt", "dbstat", "sqlite_dbpage", "bytecode", "tables_used",
    };
    size_t i;

    for (i = 0; name != NULL && i < sizeof local / sizeof local[0]; i++) {
        if (strcasecmp(name, local[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* deny refuses the action being authorized, keeping the first reason. */
static int deny(struct sql_fsm *f, const char *fmt, ...)
{
    va_list ap;

    if (f->deny[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(f->deny, sizeof f->deny, fmt, ap);
        va_end(ap);
    }
    return SQLITE_DENY;
}

static int deny_internal(struct sql_fsm *f, const char *name)
{
    return deny(f,
                "%s is an internal raftsql table: raft_exec cannot change "
                "it",
                name);
}

/* authorize_pragma applies the PRAGMA policy of pragma.c. */
static int authorize_pragma(struct sql_fsm *f, const char *name,
                            const char *value)
{
    int setting = -1;

    switch (pragma_classify(name, value, &setting)) {
        case SQL__PRAGMA_RUN:
            return SQLITE_OK;
        case SQL__PRAGMA_SETTING:
            /* Not run here (foreign_keys is a no-op in a transaction):
             * IGNORE makes the statement a no-op, and the request stores
             * the setting. */
            f->pragma_setting = setting;
            f->pragma_value = -1;
            pragma_bool(value, &f->pragma_value);
            snprintf(f->pragma_text, sizeof f->pragma_text, "%s", value);
            return SQLITE_IGNORE;
        default:
            if (strcasecmp(name, "optimize") == 0) {
                return deny(f,
                            "PRAGMA optimize cannot be used in raft_exec: "
                            "its effect depends on the node's query "
                            "history");
            }
            if (value == NULL) {
                return deny(f,
                            "PRAGMA %s cannot be used in raft_exec: only "
                            "read-only PRAGMA queries answered alike on "
                            "every node run there (its answer or effect "
                            "would differ per node or break the apply "
                            "transaction)",
                            name);
            }
            return deny(f,
                        "PRAGMA %s cannot be set through raft_exec: it is "
                        "connection-scoped or local to a node",
                        name);
    }
}

/* authorize is the apply connection's authorizer: user SQL may neither
 * write raftsql_* tables nor control transactions, attach databases,
 * create temporary objects (they would live on one node's connection
 * only) or run non-replicable pragmas, nor read raftsql_applied or
 * raftsql_requests (their contents depend on where each node's apply
 * batches end, so a request reading them would differ between nodes).
 * Our own statements pass. */
static int authorize(void *arg, int action, const char *a1, const char *a2,
                     const char *db_name, const char *trigger)
{
    struct sql_fsm *f = arg;

    (void)db_name;
    (void)trigger;
    if (f->internal) {
        return SQLITE_OK;
    }
    switch (action) {
        case SQLITE_READ:
            /* a1 is the table; called with an empty column name for a
             * table read without its columns (count(*)). */
            if (a1 != NULL && (strcasecmp(a1, "raftsql_applied") == 0 ||
                               strcasecmp(a1, "raftsql_requests") == 0)) {
                return deny(f,
                            "%s cannot be read in raft_exec: it depends on "
                            "how each node batches its applies (read it "
                            "outside raft_exec)",
                            a1);
            }
            if (is_node_local_table(a1)) {
                return deny(f,
                            "%s cannot be read in raft_exec: it shows what "
                            "is local to one node (its connection, file "
                            "layout or build)",
                            a1);
            }
            return SQLITE_OK;
        case SQLITE_FUNCTION:
            /* a2 is the function's name. */
            if (a2 != NULL && strcasecmp(a2, "load_extension") == 0) {
                return deny(f,
                            "load_extension cannot be used in raft_exec: "
                            "extensions are loaded per node");
            }
            return SQLITE_OK;
        case SQLITE_INSERT:
        case SQLITE_UPDATE:
        case SQLITE_DELETE:
        case SQLITE_CREATE_TABLE:
        case SQLITE_DROP_TABLE:
        case SQLITE_CREATE_VIEW:
        case SQLITE_DROP_VIEW:
        case SQLITE_CREATE_VTABLE:
        case SQLITE_DROP_VTABLE:
            if (is_internal_name(a1)) {
                return deny_internal(f, a1);
            }
            return SQLITE_OK;
        case SQLITE_ALTER_TABLE:
            if (is_internal_name(a2)) {
                return deny_internal(f, a2);
            }
            /* The new name of a RENAME is not given here: run_request
             * checks the schema after the request (check_renamed). */
            f->altered = 1;
            return SQLITE_OK;
        case SQLITE_CREATE_INDEX:
        case SQLITE_DROP_INDEX:
        case SQLITE_CREATE_TRIGGER:
        case SQLITE_DROP_TRIGGER:
            if (is_internal_name(a2)) {
                return deny_internal(f, a2);
            }
            if (is_internal_name(a1)) {
                return deny_internal(f, a1);
            }
            return SQLITE_OK;
        case SQLITE_CREATE_TEMP_TABLE:
        case SQLITE_CREATE_TEMP_INDEX:
        case SQLITE_CREATE_TEMP_TRIGGER:
        case SQLITE_CREATE_TEMP_VIEW:
            return deny(f,
                        "temporary objects cannot be created through "
                        "raft_exec: they would exist on one node's "
                        "connection only");
        case SQLITE_TRANSACTION:
            return deny(f,
                        "%s cannot be used in raft_exec: each request "
                        "already runs as one transaction",
                        a1 != NULL ? a1 : "transaction control");
        case SQLITE_SAVEPOINT:
            return deny(f,
                        "%s cannot be used in raft_exec: each request "
                        "already runs as one transaction",
                        a1 == NULL                   ? "SAVEPOINT"
                        : strcmp(a1, "BEGIN") == 0   ? "SAVEPOINT"
                        : strcmp(a1, "RELEASE") == 0 ? "RELEASE"
                                                     : "ROLLBACK TO");
        case SQLITE_ATTACH:
        case SQLITE_DETACH:
            return deny(f,
                        "%s cannot be used in raft_exec: attached "
                        "databases are local to a node",
                        action == SQLITE_ATTACH ? "ATTACH" : "DETACH");
        case SQLITE_PRAGMA:
            return authorize_pragma(f, a1, a2);
        default:
            return SQLITE_OK;
    }
}

/* step_internal runs internal statement @which to completion and resets
 * it. Returns SQLITE_OK or the (extended) SQLite error code, with
 * sqlite3_errmsg still describing it. */
static int step_internal(struct sql_fsm *f, int which)
{
    sqlite3_stmt *s = f->stmts[which];
    int rc;

    f->internal = 1;
    do {
        rc = sqlite3_step(s);
    } while (rc == SQLITE_ROW);
    f->internal = 0;
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        /* Keep the message: reset would not change it, but make sure the
         * statement is reusable. */
        char msg[256];

        snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(f->db));
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        raft_errmsgf(f->errmsg, sizeof f->errmsg, "%s", msg);
        return rc;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return SQLITE_OK;
}

/* run_internal is step_internal with the failure recorded as "@what: ...";
 * returns 0 or a project code. */
static int run_internal(struct sql_fsm *f, int which, const char *what)
{
    int rc = step_internal(f, which);
    char msg[APPLY__ERRMSG];

    if (rc == SQLITE_OK) {
        return 0;
    }
    memcpy(msg, f->errmsg, sizeof msg);
    raft_errmsgf(f->errmsg, sizeof f->errmsg, "%s: %s (%s)", what, msg,
            sqlite3_errstr(rc));
    return sql_to_raft(rc);
}

/* load_settings applies the stored cluster-wide settings to the
 * connection, with SQLite's default (0) for those never stored. */
static int load_settings(struct sql_fsm *f)
{
    sqlite3_stmt *s = f->stmts[STMT_SETTINGS];
    int values[16] = {0};
    int n = pragma_setting_count();
    int i, rc;

    f->internal = 1;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        int k = name != NULL ? pragma_setting_find(name) : -1;

        if (k >= 0 && k < 16) {
            values[k] = sqlite3_column_int64(s, 1) != 0;
        }
    }
    if (rc != SQLITE_DONE) {
        f->internal = 0;
        rc = fail_sqlite(f, rc, "read raftsql_settings");
        sqlite3_reset(s);
        return rc;
    }
    sqlite3_reset(s);
    for (i = 0; i < n && i < 16; i++) {
        rc = pragma_setting_apply(f->db, i, values[i]);
        if (rc != SQLITE_OK) {
            f->internal = 0;
            return fail_sqlite(f, rc, pragma_setting_name(i));
        }
    }
    f->internal = 0;
    return 0;
}

/* skip_space_comments returns @p past whitespace and SQL comments. */
static const char *skip_space_comments(const char *p)
{
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' ||
               *p == '\f' || *p == '\v') {
            p++;
        }
        if (p[0] == '-' && p[1] == '-') {
            while (*p != '\0' && *p != '\n') {
                p++;
            }
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end != NULL ? end + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

/* is_vacuum tells whether statement text @sql is a VACUUM (which the
 * authorizer does not see). */
static int is_vacuum(const char *sql)
{
    const char *p;
    char c;

    if (sql == NULL) {
        return 0;
    }
    p = skip_space_comments(sql);
    if (strncasecmp(p, "vacuum", 6) != 0) {
        return 0;
    }
    c = p[6];
    return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             (c >= '0' && c <= '9') || c == '_' || c == '$' ||
             (unsigned char)c >= 0x80);
}

/* The state of one request being run. */
struct run {
    const struct sql_request *req; /* the request */
    uint64_t index;                /* its log index */
    unsigned n_positional;         /* unnamed parameters given */
    int max_params;                /* most parameters of any statement */
    int64_t changes;               /* rows changed so far */
    int64_t total;                 /* sqlite3_total_changes64 baseline */
    int settings_changed;          /* a setting was stored */
    int err_rc;                    /* SQL error code, or SQLITE_OK */
    char *err_msg;                 /* its text (malloc'd), or NULL */
};

/* run_error records SQL error @rc with the formatted text; returns 0, or
 * RAFT_NOMEM when the text cannot be allocated. */
static int run_error(struct sql_fsm *f, struct run *run, int rc,
                     const char *fmt, ...)
{
    va_list ap;
    char buf[512];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    run->err_rc = rc;
    run->err_msg = str_printf("%s", buf);
    if (run->err_msg == NULL) {
        raft_errmsgf(f->errmsg, sizeof f->errmsg,
                "entry %" PRIu64 ": out of memory", run->index);
        return RAFT_NOMEM;
    }
    return 0;
}

/* run_sqlite_error records the connection's current error @rc (or the
 * authorizer's refusal, as SQLITE_AUTH: SQLite reports a refused function
 * as SQLITE_ERROR) for the request; returns 0 or RAFT_NOMEM. */
static int run_sqlite_error(struct sql_fsm *f, struct run *run, int rc)
{
    if (((rc & 0xff) == SQLITE_AUTH || (rc & 0xff) == SQLITE_ERROR) &&
        f->deny[0] != '\0') {
        return run_error(f, run, SQLITE_AUTH, "%s", f->deny);
    }
    return run_error(f, run, rc, "%s", sqlite3_errmsg(f->db));
}

static int bind_value(sqlite3_stmt *s, int k, const struct sql_value *v)
{
    switch (v->type) {
        case SQL_INTEGER:
            return sqlite3_bind_int64(s, k, v->integer);
        case SQL_FLOAT:
            return sqlite3_bind_double(s, k, v->real);
        case SQL_TEXT:
            /* A NULL pointer would bind NULL, not ''. */
            return sqlite3_bind_text64(
                s, k, v->bytes.len > 0 ? v->bytes.p : "",
                (sqlite3_uint64)v->bytes.len, SQLITE_STATIC, SQLITE_UTF8);
        case SQL_BLOB:
            if (v->bytes.len == 0) {
                return sqlite3_bind_zeroblob(s, k, 0);
            }
            return sqlite3_bind_blob64(s, k, v->bytes.p,
                                       (sqlite3_uint64)v->bytes.len,
                                       SQLITE_STATIC);
        default:
            return sqlite3_bind_null(s, k);
    }
}

/* bind_params binds the request's parameters to statement @s: the i-th
 * unnamed one to index i, named ones by name where the statement has
 * them. Returns 0 (a SQL error may be recorded in @run) or a project
 * code. */
static int bind_params(struct sql_fsm *f, struct run *run, sqlite3_stmt *s)
{
    const struct sql_request *req = run->req;
    int n = sqlite3_bind_parameter_count(s);
    unsigned char *bound;
    unsigned i;
    int pos = 0, k, rc = 0;

    if (n > run->max_params) {
        run->max_params = n;
    }
    if (n == 0) {
        return 0;
    }
    bound = calloc((size_t)n + 1, 1);
    if (bound == NULL) {
        raft_errmsgf(f->errmsg, sizeof f->errmsg,
                "entry %" PRIu64 ": out of memory", run->index);
        return RAFT_NOMEM;
    }
    for (i = 0; i < req->n_params; i++) {
        const struct sql_param *p = &req->params[i];
        int brc;

        if (p->name == NULL) {
            k = ++pos <= n ? pos : 0;
        } else {
            k = sqlite3_bind_parameter_index(s, p->name);
        }
        if (k <= 0) {
            continue;
        }
        brc = bind_value(s, k, &p->value);
        if (brc != SQLITE_OK) {
            if (is_environmental(brc)) {
                rc = fail_sqlite(f, brc, "bind");
            } else {
                rc = run_sqlite_error(f, run, brc);
            }
            goto out;
        }
        bound[k] = 1;
    }
    for (k = 1; k <= n; k++) {
        if (!bound[k]) {
            const char *name = sqlite3_bind_parameter_name(s, k);

            rc = run_error(f, run, SQLITE_ERROR,
                           "missing value for parameter %d (%s)", k,
                           name != NULL ? name : "?");
            goto out;
        }
    }
out:
    free(bound);
    return rc;
}

/* store_setting records the PRAGMA captured by the authorizer in
 * raftsql_settings, inside the request's savepoint. */
static int store_setting(struct sql_fsm *f, struct run *run)
{
    sqlite3_stmt *s = f->stmts[STMT_SET];
    const char *name = pragma_setting_name(f->pragma_setting);
    int rc;

    if (f->pragma_value < 0) {
        return run_error(f, run, SQLITE_ERROR,
                         "invalid value '%s' for PRAGMA %s: expected ON "
                         "or OFF",
                         f->pragma_text, name);
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, f->pragma_value);
    rc = run_internal(f, STMT_SET, "store setting");
    if (rc != 0) {
        return rc;
    }
    run->settings_changed = 1;
    return 0;
}

/* run_statement runs one prepared statement of a request. Returns 0 (a
 * SQL error may be recorded in @run) or a project code. */
static int run_statement(struct sql_fsm *f, struct run *run,
                         sqlite3_stmt *s)
{
    int64_t total;
    int rc;

    if (is_vacuum(sqlite3_sql(s))) {
        return run_error(f, run, SQLITE_AUTH,
                         "VACUUM cannot be used in raft_exec: each "
                         "request runs inside a transaction");
    }
    if (f->pragma_setting >= 0) {
        /* The statement is the no-op left by the authorizer. */
        if (sqlite3_stmt_isexplain(s)) {
            return 0;
        }
        return store_setting(f, run);
    }
    rc = bind_params(f, run, s);
    if (rc != 0 || run->err_rc != SQLITE_OK) {
        return rc;
    }
    do {
        rc = sqlite3_step(s);
    } while (rc == SQLITE_ROW);
    if (rc != SQLITE_DONE) {
        return run_sqlite_error(f, run, rc);
    }
    /* sqlite3_changes64 only moves for INSERT, UPDATE and DELETE: count it
     * when the statement changed rows. */
    total = sqlite3_total_changes64(f->db);
    if (total != run->total) {
        run->changes += sqlite3_changes64(f->db);
        run->total = total;
    }
    return 0;
}

/* only_blanks says whether [@p, @end) holds only white space and
 * semicolons (nothing left to prepare). */
static int only_blanks(const char *p, const char *end)
{
    for (; p < end; p++) {
        if (*p != ';' && *p != ' ' && *p != '\t' && *p != '\n' &&
            *p != '\r') {
            return 0;
        }
    }
    return 1;
}

/* run_statements prepares (or takes from the cache) and runs the
 * request's statements in order, stopping at the first SQL error. */
static int run_statements(struct sql_fsm *f, struct run *run)
{
    const char *tail = run->req->sql;
    const char *end = tail + run->req->sql_len;
    int rc;

    if (run->req->sql_len > (size_t)INT_MAX) {
        return run_error(f, run, SQLITE_TOOBIG, "SQL text too long");
    }
    while (tail < end) {
        const char *next = NULL;
        sqlite3_stmt *s = NULL;
        int cacheable;

        f->deny[0] = '\0';
        f->pragma_setting = -1;
        if (tail == run->req->sql) {
            s = cache_take(&f->cache, tail, (size_t)(end - tail));
        }
        if (s != NULL) {
            next = end;
        } else {
            rc = sqlite3_prepare_v2(f->db, tail, (int)(end - tail), &s,
                                    &next);
            if (rc != SQLITE_OK) {
                return run_sqlite_error(f, run, rc);
            }
        }
        if (s == NULL) {
            /* Only whitespace, comments or semicolons were left. */
            if (next == NULL || next <= tail) {
                break;
            }
            tail = next;
            continue;
        }
        /* A request of exactly one plain statement is worth keeping
         * prepared (its text is the whole request; trailing blanks and
         * semicolons are part of the key). */
        cacheable = tail == run->req->sql && only_blanks(next, end) &&
                    f->pragma_setting < 0 && f->deny[0] == '\0' &&
                    !is_vacuum(sqlite3_sql(s));
        tail = next;
        rc = run_statement(f, run, s);
        if (cacheable) {
            cache_put(&f->cache, run->req->sql, run->req->sql_len, s);
        } else {
            sqlite3_finalize(s);
        }
        f->pragma_setting = -1;
        if (rc != 0 || run->err_rc != SQLITE_OK) {
            return rc;
        }
    }
    if (run->n_positional > (unsigned)run->max_params) {
        return run_error(f, run, SQLITE_RANGE,
                         "%u values given but the SQL has only %d "
                         "parameters",
                         run->n_positional, run->max_params);
    }
    return 0;
}

/* run_request runs request @req (log index @index) in its own savepoint
 * and fills @res. Returns 0, a project code (environmental failure: the
 * caller rolls back the batch), or APPLY__RESTART when the request's SQL
 * rolled back the whole transaction (@res then holds its error). */
/* check_renamed fails the request (run_error) when it left a schema
 * object under a raftsql_ name other than the internal ones: ALTER TABLE
 * ... RENAME TO raftsql_x, which the authorizer cannot see (it is given
 * the old name only). Returns 0 or a project error code. */
static int check_renamed(struct sql_fsm *f, struct run *run)
{
    sqlite3_stmt *s = NULL;
    int rc;

    f->internal = 1;
    rc = sqlite3_prepare_v2(
        f->db,
        "SELECT name FROM main.sqlite_schema"
        " WHERE lower(substr(name, 1, 8)) = 'raftsql_' AND name NOT IN"
        " ('raftsql_applied', 'raftsql_requests', 'raftsql_settings',"
        "  'raftsql_requests_idx') LIMIT 1",
        -1, &s, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
    }
    f->internal = 0;
    if (rc == SQLITE_ROW) {
        rc = run_error(f, run, SQLITE_AUTH,
                       "ALTER TABLE cannot rename to %s: raftsql_ names "
                       "are reserved for raftsql's internal tables",
                       (const char *)sqlite3_column_text(s, 0));
    } else if (rc == SQLITE_DONE) {
        rc = 0;
    } else {
        rc = fail_sqlite(f, rc, "read the schema");
    }
    sqlite3_finalize(s);
    return rc;
}

static int run_request(struct sql_fsm *f, const struct sql_request *req,
                       uint64_t index, struct sql_result *res)
{
    struct run run;
    int cur = 0, hi = 0;
    unsigned i;
    int rc;

    memset(&run, 0, sizeof run);
    run.req = req;
    run.index = index;
    for (i = 0; i < req->n_params; i++) {
        if (req->params[i].name == NULL) {
            run.n_positional++;
        }
    }
    rc = run_internal(f, STMT_SAVEPOINT, "SAVEPOINT");
    if (rc == 0) {
        rc = run_internal(f, STMT_ZERO_CHANGES, "reset changes");
    }
    if (rc != 0) {
        return rc;
    }
    sqlite3_set_last_insert_rowid(f->db, 0);
    run.total = sqlite3_total_changes64(f->db);

    determinism_begin(&f->det, req->seed, req->time_ms);
    f->altered = 0;
    rc = run_statements(f, &run);
    if (rc == 0 && run.err_rc == SQLITE_OK) {
        /* Deferred constraints are checked per request, as if it were
         * committed alone. */
        sqlite3_db_status(f->db, SQLITE_DBSTATUS_DEFERRED_FKS, &cur, &hi,
                          0);
        if (cur != 0) {
            rc = run_error(f, &run, SQLITE_CONSTRAINT_FOREIGNKEY,
                           "FOREIGN KEY constraint failed");
        }
    }
    if (rc == 0 && run.err_rc == SQLITE_OK && f->altered) {
        rc = check_renamed(f, &run);
    }
    determinism_end(&f->det);
    if (rc != 0) {
        free(run.err_msg);
        return rc;
    }

    if (run.err_rc != SQLITE_OK) {
        if (is_environmental(run.err_rc)) {
            raft_errmsgf(f->errmsg, sizeof f->errmsg,
                    "entry %" PRIu64 ": %s (%s)", index, run.err_msg,
                    sqlite3_errstr(run.err_rc));
            free(run.err_msg);
            return sql_to_raft(run.err_rc);
        }
        res->rc = run.err_rc;
        res->errmsg = run.err_msg;
        res->changes = 0;
        res->last_insert_rowid = 0;
        if (sqlite3_get_autocommit(f->db)) {
            return APPLY__RESTART;
        }
        rc = run_internal(f, STMT_ROLLBACK_TO, "ROLLBACK TO");
        if (rc == 0) {
            rc = run_internal(f, STMT_RELEASE, "RELEASE");
        }
        return rc;
    }

    rc = run_internal(f, STMT_RELEASE, "RELEASE");
    if (rc != 0) {
        return rc;
    }
    res->rc = SQLITE_OK;
    res->changes = run.changes;
    res->last_insert_rowid = sqlite3_last_insert_rowid(f->db);
    if (run.settings_changed) {
        /* From the next request on, on every node alike. */
        rc = load_settings(f);
    }
    return rc;
}

/* is_duplicate tells (in *@out) whether request @id was applied within
 * the dedup window before entry @index (thesis §6.3: a session remembers
 * the requests it executed). Rows older than the window may or may not
 * have been pruned yet, so they never count.
 * Invariant: pruning at the end of a batch ending at L deletes only rows
 * with idx <= L - window, which no later entry counts: the answer does not
 * depend on batching. */
static int is_duplicate(struct sql_fsm *f, const uint64_t id[2],
                        uint64_t index, int *out)
{
    sqlite3_stmt *s = f->stmts[STMT_DUP];
    int rc;

    *out = 0;
    sqlite3_bind_int64(s, 1, (sqlite3_int64)id[0]);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)id[1]);
    f->internal = 1;
    rc = sqlite3_step(s);
    f->internal = 0;
    if (rc == SQLITE_ROW) {
        uint64_t idx = (uint64_t)sqlite3_column_int64(s, 0);

        *out = idx + APPLY__DEDUP_WINDOW >= index;
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) {
        rc = fail_sqlite(f, rc, "read raftsql_requests");
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return rc;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return 0;
}

static int is_zero_id(const uint64_t id[2])
{
    return id[0] == 0 && id[1] == 0;
}

/* apply_entry applies entry @e into @res inside the batch transaction.
 * When @forced, the request already failed by rolling back the batch:
 * its result is kept and it is only recorded. */
static int apply_entry(struct sql_fsm *f, const struct sql_fsm_entry *e,
                       struct sql_result *res, int forced)
{
    struct sql_request req;
    char msg[256];
    int dup = 0;
    int rc;

    if (e->payload == NULL) {
        return 0;
    }
    rc = sql_request_decode(e->payload->data, e->payload->len, &req, msg,
                            sizeof msg);
    if (rc != 0) {
        raft_errmsgf(f->errmsg, sizeof f->errmsg, "entry %" PRIu64 ": %s",
                e->index, msg);
        return rc == RAFT_NOMEM ? RAFT_NOMEM : RAFT_CORRUPT;
    }
    res->id[0] = req.id[0];
    res->id[1] = req.id[1];
    if (!is_zero_id(req.id)) {
        rc = is_duplicate(f, req.id, e->index, &dup);
        if (rc != 0) {
            goto out;
        }
    }
    if (dup) {
        res->duplicate = 1;
        goto out;
    }
    if (!forced) {
        rc = run_request(f, &req, e->index, res);
        if (rc != 0) {
            goto out;
        }
    }
    if (!is_zero_id(req.id)) {
        sqlite3_stmt *s = f->stmts[STMT_RECORD];

        sqlite3_bind_int64(s, 1, (sqlite3_int64)req.id[0]);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)req.id[1]);
        sqlite3_bind_int64(s, 3, (sqlite3_int64)e->index);
        rc = run_internal(f, STMT_RECORD, "record request id");
    }
out:
    sql_request_free(&req);
    return rc;
}

static void clear_results(struct sql_result *results, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++) {
        sql_result_clear(&results[i]);
    }
}

int sql_fsm_apply(struct sql_fsm *f, const struct sql_fsm_entry *entries,
                  unsigned n, struct sql_result *results)
{
    const struct sql_fsm_entry *last;
    unsigned char *forced = NULL;
    unsigned i, j;
    int rc;

    if (n == 0) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (entries[i].index != f->applied + 1 + i) {
            raft_errmsgf(f->errmsg, sizeof f->errmsg,
                    "apply: entry %u has index %" PRIu64
                    ", expected %" PRIu64,
                    i, entries[i].index, f->applied + 1 + i);
            return RAFT_INVALID;
        }
    }
    memset(results, 0, n * sizeof *results);
    last = &entries[n - 1];

restart:
    rc = run_internal(f, STMT_BEGIN, "BEGIN IMMEDIATE");
    if (rc != 0) {
        goto err;
    }
    for (i = 0; i < n; i++) {
        rc = apply_entry(f, &entries[i], &results[i],
                         forced != NULL && forced[i]);
        if (rc == APPLY__RESTART) {
            /* Invariant: each restart marks one more entry, so the batch
             * restarts at most n times. */
            if (forced == NULL) {
                forced = calloc(n, 1);
                if (forced == NULL) {
                    raft_errmsgf(f->errmsg, sizeof f->errmsg,
                            "apply: out of memory");
                    rc = RAFT_NOMEM;
                    goto err;
                }
            }
            forced[i] = 1;
            for (j = 0; j < i; j++) {
                if (!forced[j]) {
                    sql_result_clear(&results[j]);
                }
            }
            rc = load_settings(f);
            if (rc != 0) {
                goto err;
            }
            goto restart;
        }
        if (rc != 0) {
            goto err;
        }
    }
    /* Pruned in chunks (whenever the bound crosses a multiple of
     * APPLY__PRUNE_CHUNK): one delete per chunk rewrites fewer pages than
     * one per batch. The lookup checks the window itself (is_duplicate),
     * so when rows go changes no result. */
    if (last->index > APPLY__DEDUP_WINDOW &&
        (last->index - APPLY__DEDUP_WINDOW) / APPLY__PRUNE_CHUNK !=
            (f->applied > APPLY__DEDUP_WINDOW
                 ? f->applied - APPLY__DEDUP_WINDOW
                 : 0) / APPLY__PRUNE_CHUNK) {
        sqlite3_bind_int64(f->stmts[STMT_PRUNE], 1,
                           (sqlite3_int64)(last->index -
                                           APPLY__DEDUP_WINDOW));
        rc = run_internal(f, STMT_PRUNE, "prune raftsql_requests");
        if (rc != 0) {
            goto err;
        }
    }
    sqlite3_bind_int64(f->stmts[STMT_APPLIED], 1,
                       (sqlite3_int64)last->index);
    sqlite3_bind_int64(f->stmts[STMT_APPLIED], 2, (sqlite3_int64)last->term);
    rc = run_internal(f, STMT_APPLIED, "update raftsql_applied");
    if (rc != 0) {
        goto err;
    }
    rc = run_internal(f, STMT_COMMIT, "COMMIT");
    if (rc != 0) {
        goto err;
    }
    f->applied = last->index;
    f->applied_term = last->term;
    ckpt_committed(f);
    free(forced);
    return 0;

err:
    if (!sqlite3_get_autocommit(f->db)) {
        step_internal(f, STMT_ROLLBACK);
    }
    clear_results(results, n);
    free(forced);
    {
        /* The rollback undid any setting stored by the batch: restore the
         * connection to the stored ones, keeping the first message. */
        char msg[APPLY__ERRMSG];

        memcpy(msg, f->errmsg, sizeof msg);
        load_settings(f);
        memcpy(f->errmsg, msg, sizeof msg);
    }
    return rc;
}

/* open_error maps a failure of sqlite3_open_v2 on @path. */
static int open_error(sqlite3 *db, int rc, const char *path, char *errmsg,
                      size_t errmsg_len)
{
    if ((rc & 0xff) == SQLITE_CANTOPEN && access(path, F_OK) != 0 &&
        errno == ENOENT) {
        raft_errmsgf(errmsg, errmsg_len, "open %s: no such database file",
                     path);
        return RAFT_NOTFOUND;
    }
    if ((rc & 0xff) == SQLITE_NOTADB) {
        raft_errmsgf(errmsg, errmsg_len, "open %s: file is not a database",
                path);
        return RAFT_CORRUPT;
    }
    raft_errmsgf(errmsg, errmsg_len, "open %s: %s (%s)", path,
            db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
            sqlite3_errstr(rc));
    return rc == SQLITE_NOMEM ? RAFT_NOMEM : sql_to_raft(rc);
}

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
        raft_errmsgf(errmsg, errmsg_len,
                "cannot switch the database to WAL: journal_mode is %s",
                mode != NULL ? mode : "unknown");
        sqlite3_finalize(s);
        return RAFT_IOERR;
    }
    sqlite3_finalize(s);
    return 0;
err:
    raft_errmsgf(errmsg, errmsg_len, "journal_mode=WAL: %s (%s)",
            sqlite3_errmsg(db), sqlite3_errstr(rc));
    return sql_to_raft(rc);
}

/* The SQL functions of ext/ (name, argument count): removed from the
 * apply connection when an auto-extension registered them there. */
static const struct {
    const char *name;
    int n_arg;
} raft_functions[] = {
    {"raft_start", 1},  {"raft_exec", -1},  {"raft_last_insert_rowid", 0},
    {"raft_status", 0}, {"raft_leader", 0}, {"raft_stop", 0},
};

/* check_replica refuses a database that holds objects but is no raftsql
 * replica (no raftsql_applied table): its data never went through the log,
 * so it would silently differ from the other replicas. */
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
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
        sqlite3_column_int(s, 0) == 0 &&
        sqlite3_column_type(s, 1) != SQLITE_NULL) {
        raft_errmsgf(errmsg, errmsg_len,
                "%s already holds objects (%s) but is not a raftsql "
                "replica: a replica starts from an empty database (load "
                "existing data through raft_exec instead)",
                f->path, (const char *)sqlite3_column_text(s, 1));
        sqlite3_finalize(s);
        return RAFT_INVALID;
    }
    rc = sqlite3_finalize(s);
    if (rc != SQLITE_OK) {
        raft_errmsgf(errmsg, errmsg_len, "read schema: %s",
                     sqlite3_errmsg(f->db));
        return sql_to_raft(rc);
    }
    return 0;
}

/* setup prepares the freshly opened connection of @f. */
static int setup(struct sql_fsm *f, char *errmsg, size_t errmsg_len)
{
    sqlite3 *db = f->db;
    char *err = NULL;
    int rc, i;

    sqlite3_extended_result_codes(db, 1);
    /* Another extension (an auto-extension, raftsql's own in a program
     * that registers it so) may have installed one. */
    sqlite3_set_authorizer(db, NULL, NULL);
    /* Nor may a request reach raftsql's SQL functions from inside the
     * apply thread (raft_exec would wait on itself, raft_stop join it). */
    for (i = 0; i < (int)(sizeof raft_functions / sizeof raft_functions[0]);
         i++) {
        sqlite3_create_function_v2(db, raft_functions[i].name,
                                   raft_functions[i].n_arg, SQLITE_UTF8,
                                   NULL, NULL, NULL, NULL, NULL);
    }
    sqlite3_busy_timeout(db, APPLY__BUSY_TIMEOUT_MS);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);

    rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT) {
            raft_errmsgf(errmsg, errmsg_len,
                         "%s is not a SQLite database (%s)", f->path,
                         sqlite3_errmsg(db));
            return RAFT_CORRUPT;
        }
        raft_errmsgf(errmsg, errmsg_len, "read schema: %s (%s)",
                sqlite3_errmsg(db), sqlite3_errstr(rc));
        return sql_to_raft(rc);
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
        raft_errmsgf(errmsg, errmsg_len, "synchronous=NORMAL: %s",
                sqlite3_errmsg(db));
        return sql_to_raft(rc);
    }
    rc = determinism_install(&f->det, db);
    if (rc != SQLITE_OK) {
        raft_errmsgf(errmsg, errmsg_len, "install random(): %s",
                sqlite3_errmsg(db));
        return sql_to_raft(rc);
    }
    rc = sqlite3_exec(db, schema_sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        raft_errmsgf(errmsg, errmsg_len, "create raftsql tables: %s (%s)",
                err != NULL ? err : sqlite3_errstr(rc), sqlite3_errstr(rc));
        sqlite3_free(err);
        if (!sqlite3_get_autocommit(db)) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        }
        return sql_to_raft(rc);
    }
    for (i = 0; i < STMT__N; i++) {
        rc = sqlite3_prepare_v3(db, stmt_sql[i], -1,
                                SQLITE_PREPARE_PERSISTENT, &f->stmts[i],
                                NULL);
        if (rc != SQLITE_OK) {
            raft_errmsgf(errmsg, errmsg_len, "prepare \"%s\": %s", stmt_sql[i],
                    sqlite3_errmsg(db));
            return sql_to_raft(rc);
        }
    }
    return 0;
}

/* read_applied loads the applied index and term of @f. */
static int read_applied(struct sql_fsm *f)
{
    sqlite3_stmt *s;
    int rc;

    /* Ours: the authorizer refuses this read to requests only. */
    f->internal = 1;
    rc = sqlite3_prepare_v2(f->db,
                            "SELECT idx, term FROM main.raftsql_applied "
                            "WHERE id = 0",
                            -1, &s, NULL);
    if (rc != SQLITE_OK) {
        f->internal = 0;
        return fail_sqlite(f, rc, "read raftsql_applied");
    }
    rc = sqlite3_step(s);
    f->internal = 0;
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
        sqlite3_finalize(s);
        raft_errmsgf(f->errmsg, sizeof f->errmsg,
                "read raftsql_applied: %s",
                rc == SQLITE_CORRUPT ? "the row is missing"
                                     : sqlite3_errmsg(f->db));
        return sql_to_raft(rc);
    }
    f->applied = (uint64_t)sqlite3_column_int64(s, 0);
    f->applied_term = (uint64_t)sqlite3_column_int64(s, 1);
    sqlite3_finalize(s);
    return 0;
}

/* on_wal is the apply connection's WAL hook, called after each commit
 * with the WAL's frame count: past the threshold, wake the checkpointer.
 * Never blocks on a running checkpoint. */
static int on_wal(void *arg, sqlite3 *db, const char *name, int n_frames)
{
    struct sql_ckpt *c = arg;

    (void)db;
    (void)name;
    if (n_frames >= APPLY__CKPT_FRAMES) {
        pthread_mutex_lock(&c->sig_mu);
        if (!c->want) {
            c->want = true;
            pthread_cond_signal(&c->cond);
        }
        pthread_mutex_unlock(&c->sig_mu);
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
        rc = sqlite3_wal_checkpoint_v2(c->db, "main",
                                       SQLITE_CHECKPOINT_PASSIVE, &n_log,
                                       &n_ckpt);
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
        if (rc == SQLITE_OK && n_log >= 0 && n_ckpt == n_log &&
            gen == c->gen && committed > c->durable) {
            c->durable = committed;
        }
    }
    pthread_mutex_unlock(&c->sig_mu);
    return NULL;
}

/* ckpt_start opens the checkpointer's connection and thread and moves the
 * automatic checkpoint from the apply connection to it. On any failure
 * the apply connection keeps SQLite's automatic checkpoint: slower, same
 * result. */
static void ckpt_start(struct sql_fsm *f)
{
    struct sql_ckpt *c = &f->ckpt;
    sqlite3 *db = NULL;

    if (sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READWRITE, NULL) !=
        SQLITE_OK) {
        sqlite3_close(db);
        return;
    }
    /* Its checkpoints must fsync (the durable index relies on it),
     * whatever this SQLite's compiled-in default. */
    if (sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) !=
        SQLITE_OK) {
        sqlite3_close(db);
        return;
    }
    /* A first read makes the connection find the WAL: until then its
     * checkpoints do nothing. */
    if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", NULL, NULL,
                     NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return;
    }
    c->db = db;
    c->committed = f->applied;
    if (pthread_create(&c->thread, NULL, ckpt_main, c) != 0) {
        c->db = NULL;
        sqlite3_close(db);
        return;
    }
    /* Replaces the automatic checkpoint (a WAL hook of its own). */
    sqlite3_wal_hook(f->db, on_wal, c);
}

/* ckpt_stop stops the checkpointer thread and closes its connection. */
static void ckpt_stop(struct sql_fsm *f)
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
}

int sql_fsm_open(const char *path, struct sql_fsm **out, char *errmsg,
                 size_t errmsg_len)
{
    struct sql_fsm *f;
    int rc;

    f = calloc(1, sizeof *f);
    if (f == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        return RAFT_NOMEM;
    }
    f->pragma_setting = -1;
    rc = determinism_init(&f->det, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_free;
    }
    pthread_mutex_init(&f->ckpt.sig_mu, NULL);
    pthread_mutex_init(&f->ckpt.run_mu, NULL);
    pthread_cond_init(&f->ckpt.cond, NULL);
    rc = sqlite3_open_v2(path, &f->db, SQLITE_OPEN_READWRITE, f->det.name);
    if (rc != SQLITE_OK) {
        rc = open_error(f->db, rc, path, errmsg, errmsg_len);
        goto err_close;
    }
    f->path = strdup(sqlite3_db_filename(f->db, "main"));
    if (f->path == NULL) {
        raft_errmsgf(errmsg, errmsg_len, "out of memory");
        rc = RAFT_NOMEM;
        goto err_close;
    }
    rc = setup(f, errmsg, errmsg_len);
    if (rc != 0) {
        goto err_close;
    }
    rc = read_applied(f);
    if (rc == 0) {
        rc = load_settings(f);
    }
    if (rc == 0) {
        /* Whatever WAL recovery found becomes durable here, or else the
         * durable index stays 0 until a checkpoint completes. */
        uint64_t durable;

        rc = sql_fsm_checkpoint(f, &durable);
        if (rc == RAFT_BUSY) {
            rc = 0;
        }
    }
    if (rc != 0) {
        raft_errmsgf(errmsg, errmsg_len, "%s", f->errmsg);
        goto err_close;
    }
    sqlite3_set_authorizer(f->db, authorize, f);
    ckpt_start(f);
    f->errmsg[0] = '\0';
    *out = f;
    return 0;

err_close:
    sql_fsm_close(f);
    return rc;
err_free:
    free(f);
    return rc;
}

void sql_fsm_close(struct sql_fsm *f)
{
    int i;

    if (f == NULL) {
        return;
    }
    ckpt_stop(f);
    for (i = 0; i < STMT__N; i++) {
        sqlite3_finalize(f->stmts[i]);
    }
    cache_clear(&f->cache);
    sqlite3_close(f->db);
    determinism_close(&f->det);
    pthread_cond_destroy(&f->ckpt.cond);
    pthread_mutex_destroy(&f->ckpt.run_mu);
    pthread_mutex_destroy(&f->ckpt.sig_mu);
    free(f->path);
    free(f);
}

uint64_t sql_fsm_applied(const struct sql_fsm *f)
{
    return f->applied;
}

uint64_t sql_fsm_applied_term(const struct sql_fsm *f)
{
    return f->applied_term;
}

uint64_t sql_fsm_durable(const struct sql_fsm *f)
{
    return f->durable;
}

int sql_fsm_checkpoint(struct sql_fsm *f, uint64_t *out_durable_index)
{
    int n_log = -1;
    int n_ckpt = -1;
    int rc;

    /* Wait briefly for readers (a snapshot copy may hold one for long):
     * the apply thread must not stall behind them. */
    sqlite3_busy_timeout(f->db, APPLY__CHECKPOINT_WAIT_MS);
    pthread_mutex_lock(&f->ckpt.run_mu);
    rc = sqlite3_wal_checkpoint_v2(f->db, "main",
                                   SQLITE_CHECKPOINT_TRUNCATE, &n_log,
                                   &n_ckpt);
    pthread_mutex_unlock(&f->ckpt.run_mu);
    sqlite3_busy_timeout(f->db, APPLY__BUSY_TIMEOUT_MS);
    if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY) {
        return fail_sqlite(f, rc, "checkpoint");
    }
    /* Invariant: every frame backfilled means every committed transaction,
     * through the one that recorded f->applied, is in the database file,
     * and SQLite fsynced that file after backfilling (checkpoints sync
     * under synchronous=NORMAL). */
    if (n_log < 0 || n_ckpt != n_log) {
        raft_errmsgf(f->errmsg, sizeof f->errmsg,
                "checkpoint: readers hold %d of %d WAL frames back; the "
                "durable index stays %" PRIu64,
                n_log - n_ckpt, n_log, f->durable);
        return RAFT_BUSY;
    }
    f->durable = f->applied;
    *out_durable_index = f->durable;
    return 0;
}

const char *sql_fsm_path(const struct sql_fsm *f)
{
    return f->path;
}

int sql_fsm_reload(struct sql_fsm *f)
{
    int rc = read_applied(f);

    ckpt_reset(f);
    if (rc == 0) {
        rc = load_settings(f);
    }
    return rc;
}

void sql_fsm_set_durable(struct sql_fsm *f, uint64_t index)
{
    f->durable = index;
    ckpt_reset(f);
}

char *sql_fsm_errbuf(struct sql_fsm *f, size_t *out_len)
{
    *out_len = sizeof f->errmsg;
    return f->errmsg;
}

const char *sql_fsm_errmsg(const struct sql_fsm *f)
{
    return f->errmsg;
}

sqlite3 *sql_fsm_db(struct sql_fsm *f)
{
    return f->db;
}

int sql_fsm_exec(struct sql_fsm *f, const char *sql)
{
    int rc;

    f->internal = 1;
    rc = sqlite3_exec(f->db, sql, NULL, NULL, NULL);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fail_sqlite(f, rc, "exec");
    }
    return 0;
}

void sql_result_clear(struct sql_result *r)
{
    free(r->errmsg);
    memset(r, 0, sizeof *r);
}
