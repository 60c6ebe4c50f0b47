/* Batch apply of committed log entries on the apply connection, with the
 * dedup of request ids (raftsql_requests) and the run of one request:
 * deterministic, exactly once across crashes (DESIGN.md "The write path").
 *
 * Happy path: sql_fsm_apply runs BEGIN IMMEDIATE; for each entry it checks
 * the request id against raftsql_requests (at-most-once), opens a SAVEPOINT,
 * sets the entry's seed and time, prepares and steps the request's
 * statements one by one, and RELEASEs; then it records the applied index
 * (with the latest request stamp, which a snapshot carries for the next
 * leaders' stamps) in raftsql_applied and COMMITs. The applied index thus moves with the data,
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
 * Deferred foreign key violations are checked at the end of each request
 * (SQLITE_DBSTATUS_DEFERRED_FKS), not at the batch COMMIT, for the same
 * reason: a request's outcome must not depend on its batch.
 *
 * Durability: commits are not fsynced (synchronous=NORMAL); checkpoint.c
 * keeps the durable index up to which the log may be compacted. */

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3ext.h>

#include "changeset.h"
#include "fsm_internal.h"
#include "pragma.h"

SQLITE_EXTENSION_INIT3

/* A request id is deduplicated when applied within this many entries. */
#define SQL__APPLY_DEDUP_WINDOW 100000
/* Entries of raftsql_requests pruned at once (see sql_fsm_apply). */
#define SQL__APPLY_PRUNE_CHUNK 1024
/* run_request's answer when the request rolled back the whole batch. */
#define SQL__APPLY_RESTART (-1)
/* The result cap of an unstamped want-rows request (max_result_bytes's
 * default). */
#define SQL__APPLY_MAX_RESULT (16u << 20)

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

/* SQLITE_LOCKED is a result, not environmental: without shared cache it
 * only comes from the request's own statements on this connection (e.g.
 * dropping a table it is reading), the same on every node. */
int fsm_is_environmental(int rc)
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

/* The state of one request being run. */
struct run {
    const struct sql_request *req; /* the request */
    uint64_t index;                /* its log index */
    unsigned n_positional;         /* unnamed parameters given */
    int max_params;                /* most parameters of any statement */
    unsigned n_statements;         /* statements bound so far */
    int64_t changes;               /* rows changed so far */
    int64_t total;                 /* sqlite3_total_changes64 baseline */
    int settings_changed;          /* a setting was stored */
    int err_rc;                    /* SQL error code, or SQLITE_OK */
    char *err_msg;                 /* its text (malloc'd), or NULL */
    size_t stmt_at;                /* 1 + the offset of the statement run
                                      (prepared or stepped), 0 between */
    size_t err_at;                 /* stmt_at of the error */
    struct sql_rows *rows;         /* a want-rows request's rows, or NULL */
};

/* run_error records SQL error @rc with the formatted text; returns 0, or
 * SQL_ERR_NOMEM when the text cannot be allocated. */
static int run_error(struct sql_fsm *f, struct run *run, int rc,
                     const char *fmt, ...)
{
    va_list ap;
    char buf[512];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    run->err_rc = rc;
    run->err_at = run->stmt_at;
    run->err_msg = str_printf("%s", buf);
    if (run->err_msg == NULL) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "entry %" PRIu64 ": out of memory", run->index);
        return SQL_ERR_NOMEM;
    }
    return 0;
}

/* run_sqlite_error records the connection's current error @rc (or the
 * authorizer's refusal, as SQLITE_AUTH: SQLite reports a refused function
 * as SQLITE_ERROR) for the request; returns 0 or SQL_ERR_NOMEM. */
static int run_sqlite_error(struct sql_fsm *f, struct run *run, int rc)
{
    if (((rc & 0xff) == SQLITE_AUTH || (rc & 0xff) == SQLITE_ERROR) &&
        f->deny[0] != '\0') {
        return run_error(f, run, SQLITE_AUTH, "%s", f->deny);
    }
    return run_error(f, run, rc, "%s", sqlite3_errmsg(f->db));
}

int fsm_bind_value(sqlite3_stmt *s, int k, const struct sql_value *v)
{
    switch (v->type) {
        case SQL_INTEGER:
            return sqlite3_bind_int64(s, k, v->integer);
        case SQL_FLOAT:
            return sqlite3_bind_double(s, k, v->real);
        case SQL_TEXT:
            /* A NULL pointer would bind NULL, not ''. */
            return sqlite3_bind_text64(s, k, v->bytes.len > 0 ? v->bytes.p : "",
                                       (sqlite3_uint64)v->bytes.len,
                                       SQLITE_STATIC, SQLITE_UTF8);
        case SQL_BLOB:
            if (v->bytes.len == 0) {
                return sqlite3_bind_zeroblob(s, k, 0);
            }
            return sqlite3_bind_blob64(
                s, k, v->bytes.p, (sqlite3_uint64)v->bytes.len, SQLITE_STATIC);
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

    run->n_statements++;
    if (n > run->max_params) {
        run->max_params = n;
    }
    if (n == 0) {
        return 0;
    }
    bound = calloc((size_t)n + 1, 1);
    if (bound == NULL) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg,
                    "entry %" PRIu64 ": out of memory", run->index);
        return SQL_ERR_NOMEM;
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
        brc = fsm_bind_value(s, k, &p->value);
        if (brc != SQLITE_OK) {
            if (fsm_is_environmental(brc)) {
                rc = fsm_fail(f, brc, "bind");
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
    rc = schema_run(f, STMT_SET, "store setting");
    if (rc != 0) {
        return rc;
    }
    run->settings_changed = 1;
    return 0;
}

/* rows_error records failure @rc of rows.c (message @msg) for the
 * request: a SQL error, or out of memory. */
static int rows_error(struct sql_fsm *f, struct run *run, int rc,
                      const char *msg)
{
    if (rc == SQL_ERR_NOMEM) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg, "entry %" PRIu64 ": %s",
                    run->index, msg);
        return rc;
    }
    return run_error(
        f, run, rc == SQL_ERR_TOOBIG ? SQLITE_TOOBIG : SQLITE_ERROR, "%s", msg);
}

/* step_rows steps @s to its end, collecting its rows when the request
 * wants them. Returns SQLITE_DONE, the failing SQLite code, or 0 with a
 * rows failure recorded in @run (*@out_rc then holds the project code). */
static int step_rows(struct sql_fsm *f, struct run *run, sqlite3_stmt *s,
                     int *out_rc)
{
    char msg[256];
    int rc;

    *out_rc = 0;
    if (run->rows == NULL) {
        do {
            rc = sqlite3_step(s);
        } while (rc == SQLITE_ROW);
        return rc;
    }
    rc = rows_statement(run->rows, s, msg, sizeof msg);
    while (rc == 0) {
        rc = sqlite3_step(s);
        if (rc != SQLITE_ROW) {
            return rc;
        }
        rc = rows_add(run->rows, s, msg, sizeof msg);
    }
    sqlite3_reset(s);
    *out_rc = rows_error(f, run, rc, msg);
    return 0;
}

/* run_statement runs one prepared statement of a request. Returns 0 (a
 * SQL error may be recorded in @run) or an error code. */
static int run_statement(struct sql_fsm *f, struct run *run, sqlite3_stmt *s)
{
    int64_t total;
    int rc, prc;

    if (sql_refusal_statement(sqlite3_sql(s), f->deny, sizeof f->deny)) {
        return run_error(f, run, SQLITE_AUTH, "%s", f->deny);
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
    checksum_statement(f, s);
    rc = step_rows(f, run, s, &prc);
    if (rc == 0) {
        return prc;
    }
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
        if (*p != ';' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            return 0;
        }
    }
    return 1;
}

/* request_text copies the request's SQL text (not NUL-terminated in the
 * payload) into @f's reusable buffer with a NUL after it, so that each
 * sqlite3_prepare_v2 can be given the length of the rest including the
 * NUL: SQLite then reads the text in place, where a length without it
 * makes SQLite copy the whole rest of the text for every statement
 * (quadratic in the number of statements). Returns the copy, or NULL when
 * out of memory. */
static const char *request_text(struct sql_fsm *f, const struct run *run)
{
    size_t len = run->req->sql_len;
    if (len + 1 > f->text_cap) {
        size_t cap = len + 1 > 2 * f->text_cap ? len + 1 : 2 * f->text_cap;
        char *t = realloc(f->text, cap);
        if (t == NULL) {
            return NULL;
        }
        f->text = t;
        f->text_cap = cap;
    }
    memcpy(f->text, run->req->sql, len);
    f->text[len] = '\0';
    return f->text;
}

/* run_statements prepares (or takes from the cache) and runs the
 * request's statements in order, stopping at the first SQL error. */
static int run_statements(struct sql_fsm *f, struct run *run)
{
    const char *text, *tail, *end;
    int rc;

    if (run->req->sql_len >= (size_t)INT_MAX) {
        return run_error(f, run, SQLITE_TOOBIG, "SQL text too long");
    }
    text = request_text(f, run);
    if (text == NULL) {
        return fsm_fail(f, SQLITE_NOMEM, "copy the SQL text");
    }
    tail = text;
    end = text + run->req->sql_len;
    while (tail < end) {
        const char *next = NULL;
        sqlite3_stmt *s = NULL;
        int cacheable, single;

        f->deny[0] = '\0';
        f->pragma_setting = -1;
        run->stmt_at = (size_t)(tail - text) + 1;
        if (tail == text) {
            s = cache_take(&f->cache, tail, (size_t)(end - tail));
        }
        if (s != NULL) {
            next = end;
        } else {
            /* The length includes the NUL after the text. */
            rc = sqlite3_prepare_v2(f->db, tail, (int)(end - tail) + 1, &s,
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
        single = tail == text && only_blanks(next, end);
        cacheable = single && f->pragma_setting < 0 && f->deny[0] == '\0' &&
                    !authorize_is_vacuum(sqlite3_sql(s));
        if (f->pragma_setting >= 0 && !single) {
            /* Plain SQLite ignores PRAGMA foreign_keys inside a
             * transaction, and here a setting applies from the next
             * request on: within a request of several statements either
             * would surprise, so it must come alone. */
            sqlite3_finalize(s);
            sql_refusal_setting_alone(pragma_setting_name(f->pragma_setting),
                                      f->deny, sizeof f->deny);
            return run_error(f, run, SQLITE_AUTH, "%s", f->deny);
        }
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
    run->stmt_at = 0;
    if (run->n_positional > (unsigned)run->max_params) {
        char msg[256];

        sql_request_surplus_msg(msg, sizeof msg, run->n_positional,
                                run->max_params, run->n_statements);
        return run_error(f, run, SQLITE_RANGE, "%s", msg);
    }
    return 0;
}

/* check_renamed fails the request (run_error) when it left a schema
 * object under a raftsql_ name other than the internal ones: ALTER TABLE
 * ... RENAME TO raftsql_x, which the authorizer cannot see (it is given
 * the old name only). Returns 0 or a project error code. */
static int check_renamed(struct sql_fsm *f, struct run *run)
{
    char name[256] = "";
    int rc = schema_find_renamed(f, name, sizeof name);

    if (rc == 0 && name[0] != '\0') {
        rc = run_error(f, run, SQLITE_AUTH,
                       "ALTER TABLE cannot rename to %s: raftsql_ names "
                       "are reserved for raftsql's internal tables",
                       name);
    }
    return rc;
}

/* run_request runs request @req (log index @index) in its own savepoint
 * and fills @res. Returns 0, an error code (environmental failure: the
 * caller rolls back the batch), or SQL__APPLY_RESTART when the request's SQL
 * rolled back the whole transaction (@res then holds its error). */
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
    if (req->want_rows) {
        run.rows = rows_new(req->max_result_bytes != 0 ? req->max_result_bytes
                                                       : SQL__APPLY_MAX_RESULT);
        if (run.rows == NULL) {
            sql_errmsgf(f->errmsg, sizeof f->errmsg,
                        "entry %" PRIu64 ": out of memory", index);
            return SQL_ERR_NOMEM;
        }
    }
    for (i = 0; i < req->n_params; i++) {
        if (req->params[i].name == NULL) {
            run.n_positional++;
        }
    }
    rc = schema_run(f, STMT_SAVEPOINT, "SAVEPOINT");
    if (rc == 0) {
        rc = schema_run(f, STMT_ZERO_CHANGES, "reset changes");
    }
    if (rc != 0) {
        rows_free(run.rows);
        return rc;
    }
    sqlite3_set_last_insert_rowid(f->db, 0);
    run.total = sqlite3_total_changes64(f->db);

    determinism_begin(&f->det, req->seed, req->time_ms);
    f->altered = 0;
    f->max_steps = req->max_steps;
    f->steps = 0;
    f->budget_hit = 0;
    f->in_request = 1;
    rc = run_statements(f, &run);
    f->in_request = 0;
    if (rc == 0 && f->budget_hit) {
        /* A result, the same on every node: the statement was interrupted
         * at the same step everywhere. */
        free(run.err_msg);
        run.err_msg = NULL;
        rc = run_error(f, &run, SQLITE_ERROR,
                       "request interrupted after %" PRIu64
                       " SQLite virtual machine steps: it exceeds the "
                       "leader's max_request_steps (%" PRIu64
                       "); rolled back on every node",
                       f->steps, f->max_steps);
    }
    if (rc == 0 && run.err_rc == SQLITE_OK) {
        /* Deferred constraints are checked per request, as if it were
         * committed alone. */
        sqlite3_db_status(f->db, SQLITE_DBSTATUS_DEFERRED_FKS, &cur, &hi, 0);
        if (cur != 0) {
            rc = run_error(f, &run, SQLITE_CONSTRAINT_FOREIGNKEY,
                           "FOREIGN KEY constraint failed");
        }
    }
    if (rc == 0 && run.err_rc == SQLITE_OK && f->altered) {
        rc = check_renamed(f, &run);
    }
    if (rc == 0 && run.err_rc == SQLITE_OK && run.rows != NULL) {
        char msg[256];
        int frc =
            rows_finish(run.rows, run.changes, sqlite3_last_insert_rowid(f->db),
                        &res->rows, msg, sizeof msg);
        if (frc != 0) {
            rc = rows_error(f, &run, frc, msg);
        }
    }
    rows_free(run.rows);
    determinism_end(&f->det);
    if (rc != 0) {
        free(run.err_msg);
        free(res->rows);
        res->rows = NULL;
        return rc;
    }

    if (run.err_rc != SQLITE_OK) {
        if (fsm_is_environmental(run.err_rc) && !f->budget_hit) {
            sql_errmsgf(f->errmsg, sizeof f->errmsg,
                        "entry %" PRIu64 ": %s (%s)", index, run.err_msg,
                        sqlite3_errstr(run.err_rc));
            free(run.err_msg);
            return fsm_from_sqlite(run.err_rc);
        }
        res->rc = run.err_rc;
        res->errmsg = run.err_msg;
        res->err_at = run.err_at;
        res->changes = 0;
        res->last_insert_rowid = 0;
        checksum_request_end(f, false);
        if (sqlite3_get_autocommit(f->db)) {
            return SQL__APPLY_RESTART;
        }
        rc = schema_run(f, STMT_ROLLBACK_TO, "ROLLBACK TO");
        if (rc == 0) {
            rc = schema_run(f, STMT_RELEASE, "RELEASE");
        }
        return rc;
    }

    checksum_test_skew(f, index);
    rc = checksum_request_end(f, true);
    if (rc == 0) {
        rc = schema_run(f, STMT_RELEASE, "RELEASE");
    }
    if (rc != 0) {
        return rc;
    }
    res->rc = SQLITE_OK;
    res->changes = run.changes;
    res->last_insert_rowid = sqlite3_last_insert_rowid(f->db);
    if (run.settings_changed) {
        /* From the next request on, on every node alike. */
        rc = schema_load_settings(f);
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
static int is_duplicate(struct sql_fsm *f, const uint64_t id[2], uint64_t index,
                        int *out)
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

        *out = idx + SQL__APPLY_DEDUP_WINDOW >= index;
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE) {
        rc = fsm_fail(f, rc, "read raftsql_requests");
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

/* apply_changeset applies changeset entry @e (changeset.h) into @res
 * inside the batch transaction, in a savepoint of its own: replayed, or
 * only recorded when its writer's commit already holds it; its id is
 * deduplicated and recorded as a request's. */
static int apply_changeset(struct sql_fsm *f, const struct sql_fsm_entry *e,
                           struct sql_result *res)
{
    struct sql_changeset cs;
    char msg[256];
    bool landed = false;
    int dup = 0;
    int rc;

    rc = sql_changeset_decode(e->data, e->len, &cs, msg, sizeof msg);
    if (rc != 0) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg, "entry %" PRIu64 ": %s",
                    e->index, msg);
        return rc == SQL_ERR_NOMEM ? SQL_ERR_NOMEM : SQL_ERR_CORRUPT;
    }
    res->id[0] = cs.id[0];
    res->id[1] = cs.id[1];
    if (!is_zero_id(cs.id)) {
        rc = is_duplicate(f, cs.id, e->index, &dup);
        if (rc != 0) {
            goto out;
        }
    }
    if (dup) {
        res->duplicate = 1;
        goto out;
    }
    for (unsigned i = 0; i < cs.n; i++) {
        if (cs.changes[i].kind == SQL_CHANGE_SCHEMA) {
            /* Landed or replayed (a replay that changes nothing: its
             * writer's commit landed, unseen after a restart). */
            checksum_schema_changed(f);
            break;
        }
    }
    rc = schema_run(f, STMT_SAVEPOINT, "SAVEPOINT");
    if (rc == 0) {
        /* Only a batch's first entry can be one its writer committed
         * here (the writer's node applied everything before it first,
         * and holds its applier until the writer's local commit):
         * first_landed asked the file for that one. Any other is
         * replayed: the file then shows the batch's own earlier entries
         * (a schema cookie they moved is no writer's commit). */
        rc = changeset_apply(
            f, &cs, e->index,
            f->landed_index == e->index ? CHANGESET_LANDED : CHANGESET_REPLAY,
            &landed);
    }
    if (rc == 0) {
        rc = checksum_request_end(f, true);
    } else {
        checksum_request_end(f, false);
    }
    if (rc == 0) {
        rc = schema_run(f, STMT_RELEASE, "RELEASE");
    }
    if (rc == 0 && !is_zero_id(cs.id)) {
        sqlite3_stmt *s = f->stmts[STMT_RECORD];

        sqlite3_bind_int64(s, 1, (sqlite3_int64)cs.id[0]);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)cs.id[1]);
        sqlite3_bind_int64(s, 3, (sqlite3_int64)e->index);
        rc = schema_run(f, STMT_RECORD, "record changeset id");
    }
    res->rc = SQLITE_OK;
out:
    sql_changeset_free(&cs);
    return rc;
}

/* first_landed says (in *@out) whether the batch's first entry @e that may
 * write (after its no-ops) is a
 * changeset that its writer's own commit already holds: then the moved
 * data_version is that commit, the node's own. */
static int first_landed(struct sql_fsm *f, const struct sql_fsm_entry *e,
                        bool *out)
{
    struct sql_changeset cs;
    char msg[256];
    int rc;

    *out = false;
    if (e->kind != SQL_ENTRY_REQUEST || e->data == NULL ||
        !sql_changeset_is(e->data, e->len)) {
        return 0;
    }
    if (f->landed_index == e->index) {
        /* Found so before a restart of the batch: the baseline moved. */
        *out = true;
        return 0;
    }
    rc = sql_changeset_decode(e->data, e->len, &cs, msg, sizeof msg);
    if (rc != 0) {
        /* apply_entry words it. */
        return 0;
    }
    rc = changeset_apply(f, &cs, e->index, CHANGESET_CHECK, out);
    if (rc == 0 && *out) {
        f->landed_index = e->index;
        f->landed_schema = false;
        for (unsigned i = 0; i < cs.n; i++) {
            if (cs.changes[i].kind == SQL_CHANGE_SCHEMA) {
                f->landed_schema = true;
            }
        }
    }
    sql_changeset_free(&cs);
    return rc;
}

int sql_fsm_landed(struct sql_fsm *f, const struct sql_fsm_entry *e, bool *out)
{
    *out = false;
    if (e->index != f->applied + 1) {
        return 0;
    }
    return first_landed(f, e, out);
}

/* apply_entry applies entry @e into @res inside the batch transaction.
 * When @forced, the request already failed by rolling back the batch:
 * its result is kept and it is only recorded. */
static int apply_entry(struct sql_fsm *f, const struct sql_fsm_entry *e,
                       struct sql_result *res, int forced)
{
    struct sql_request req;
    char msg[256];
    struct client_key key;
    int dup = 0, done = 0;
    int rc;

    if (e->kind == SQL_ENTRY_CONFIG) {
        return config_store(f, e);
    }
    if (e->kind == SQL_ENTRY_CLUSTER_ID) {
        return cluster_id_store(f, e);
    }
    if (e->data == NULL) {
        return 0;
    }
    if (sql_changeset_is(e->data, e->len)) {
        return apply_changeset(f, e, res);
    }
    rc = sql_request_decode(e->data, e->len, &req, msg, sizeof msg);
    if (rc != 0) {
        sql_errmsgf(f->errmsg, sizeof f->errmsg, "entry %" PRIu64 ": %s",
                    e->index, msg);
        return rc == SQL_ERR_NOMEM ? SQL_ERR_NOMEM : SQL_ERR_CORRUPT;
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
    if (!forced && req.client_id_len > 0) {
        rc = client_id_lookup(f, &req, res, &done, &key);
        if (rc != 0) {
            goto out;
        }
    }
    if (!forced && !done) {
        rc = run_request(f, &req, e->index, res);
        if (rc != 0) {
            goto out;
        }
    }
    if (!done && req.client_id_len > 0) {
        /* Also a failed request's outcome: its savepoint rolled back. */
        /* The request's own statements cannot write the table (the
         * authorizer refuses writes to raftsql_ tables): @key holds. */
        rc = client_id_record(f, &req, res, forced ? NULL : &key);
        if (rc != 0) {
            goto out;
        }
    }
    if (!is_zero_id(req.id)) {
        sqlite3_stmt *s = f->stmts[STMT_RECORD];

        sqlite3_bind_int64(s, 1, (sqlite3_int64)req.id[0]);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)req.id[1]);
        sqlite3_bind_int64(s, 3, (sqlite3_int64)e->index);
        rc = schema_run(f, STMT_RECORD, "record request id");
    }
out:
    sql_request_free(&req);
    return rc;
}

/* batch_time gives in *@out the latest stamp among @f's applied
 * requests and the @n requests of @entries, and says whether there is
 * one: the value raftsql_applied.time_ms takes with the batch. Only the
 * headers are read (sql_request_time): changesets, no-ops and the
 * other kinds carry no stamp. */
static bool batch_time(const struct sql_fsm *f,
                       const struct sql_fsm_entry *entries, unsigned n,
                       int64_t *out)
{
    bool has = f->has_applied_time;
    int64_t latest = f->applied_time_ms;

    for (unsigned i = 0; i < n; i++) {
        int64_t t;

        if (entries[i].kind == SQL_ENTRY_REQUEST && entries[i].data != NULL &&
            sql_request_time(entries[i].data, entries[i].len, &t) == 0 &&
            (!has || t > latest)) {
            latest = t;
            has = true;
        }
    }
    *out = latest;
    return has;
}

/* is_noop says whether @e is a no-op (a new leader's first entry): a
 * request kind with no payload, which changes nothing in the file. */
static bool is_noop(const struct sql_fsm_entry *e)
{
    return e->kind == SQL_ENTRY_REQUEST && e->data == NULL;
}

/* apply_noops counts a batch of @n no-ops only (@entries) as applied,
 * with no write to the file: a commit of the apply connection there,
 * raftsql_applied's row alone, would make every host transaction that
 * read before it fail at its first write with SQLITE_BUSY_SNAPSHOT,
 * although nothing it read changed (a leader change in the middle of a
 * follower's BEGIN ... SELECT ... UPDATE). raftsql_applied keeps the
 * last index written (f->recorded); the next batch that writes records
 * past these, and after a restart they are applied again from the log,
 * which holds them: the durable index, up to which the log may be
 * compacted, counts only what is recorded (checkpoint.c). A foreign
 * commit is looked for all the same (no write lock needed: nothing is
 * written), so that it is found at the next entry, as before. Returns 0,
 * or foreign_check's error with nothing applied. */
static int apply_noops(struct sql_fsm *f, const struct sql_fsm_entry *entries,
                       unsigned n, struct sql_result *results)
{
    int rc = foreign_check(f);

    if (rc != 0) {
        return rc;
    }
    for (unsigned i = 0; i < n; i++) {
        results[i].checksum = checksum_value(f);
    }
    pthread_mutex_lock(&f->tail_mu);
    f->applied = entries[n - 1].index;
    f->applied_term = entries[n - 1].term;
    pthread_mutex_unlock(&f->tail_mu);
    return 0;
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
    int64_t time_ms = 0;
    bool has_time;
    unsigned char *forced = NULL;
    int checked = 0; /* the foreign check passed under the write lock */
    unsigned i, j, k;
    int rc;

    if (n == 0) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (entries[i].kind != SQL_ENTRY_REQUEST &&
            entries[i].kind != SQL_ENTRY_CONFIG &&
            entries[i].kind != SQL_ENTRY_CLUSTER_ID) {
            sql_errmsgf(f->errmsg, sizeof f->errmsg,
                        "apply: entry %" PRIu64 " has unknown kind %u",
                        entries[i].index, (unsigned)entries[i].kind);
            return SQL_ERR_INVALID;
        }
        if (entries[i].index != f->applied + 1 + i) {
            sql_errmsgf(f->errmsg, sizeof f->errmsg,
                        "apply: entry %u has index %" PRIu64
                        ", expected %" PRIu64,
                        i, entries[i].index, f->applied + 1 + i);
            return SQL_ERR_INVALID;
        }
    }
    memset(results, 0, n * sizeof *results);
    /* Entry @k is the first that may write: the first a plain writer's
     * own commit may hold (its node applied the no-ops before it in
     * memory only, a grant's catch-up, then its writer committed). */
    for (k = 0; k < n && is_noop(&entries[k]); k++) {
    }
    if (k == n) {
        return apply_noops(f, entries, n, results);
    }
    last = &entries[n - 1];
    has_time = batch_time(f, entries, n, &time_ms);

restart:
    rc = schema_run(f, STMT_BEGIN, "BEGIN IMMEDIATE");
    if (rc == 0) {
        bool own = false;

        /* A host connection's plain write: its own commit of the first
         * entry moved data_version. When its writer's readings show it
         * alone, that move is the node's; else the entry is confirmed
         * by a scan once counted (foreign_landed). */
        rc = first_landed(f, &entries[k], &own);
        if (rc == 0 && own) {
            rc = foreign_landed(f, entries[k].index);
        }
    }
    if (rc == 0) {
        /* Under the write lock: nothing applies on top of a foreign
         * commit. */
        rc = foreign_check(f);
        checked = rc == 0;
        if (rc == 0) {
            rc = checksum_batch_begin(f);
        }
    }
    if (rc != 0) {
        goto err;
    }
    for (i = 0; i < n; i++) {
        rc = apply_entry(f, &entries[i], &results[i],
                         forced != NULL && forced[i]);
        if (rc == SQL__APPLY_RESTART) {
            /* Invariant: each restart marks one more entry, so the batch
             * restarts at most n times. */
            if (forced == NULL) {
                forced = calloc(n, 1);
                if (forced == NULL) {
                    sql_errmsgf(f->errmsg, sizeof f->errmsg,
                                "apply: out of memory");
                    rc = SQL_ERR_NOMEM;
                    goto err;
                }
            }
            forced[i] = 1;
            for (j = 0; j < i; j++) {
                if (!forced[j]) {
                    sql_result_clear(&results[j]);
                }
            }
            checksum_batch_end(f, false);
            rc = schema_load_settings(f);
            if (rc != 0) {
                goto err;
            }
            goto restart;
        }
        if (rc == 0 && i == k) {
            /* Under the write lock, before anything applies on top. */
            rc = foreign_landed_confirm(f, entries[k].index);
        }
        if (rc != 0) {
            goto err;
        }
        results[i].checksum = checksum_value(f);
    }
    /* Pruned in chunks (whenever the bound crosses a multiple of
     * SQL__APPLY_PRUNE_CHUNK): one delete per chunk rewrites fewer pages than
     * one per batch. The lookup checks the window itself (is_duplicate),
     * so when rows go changes no result. */
    if (last->index > SQL__APPLY_DEDUP_WINDOW &&
        (last->index - SQL__APPLY_DEDUP_WINDOW) / SQL__APPLY_PRUNE_CHUNK !=
            (f->applied > SQL__APPLY_DEDUP_WINDOW
                 ? f->applied - SQL__APPLY_DEDUP_WINDOW
                 : 0) /
                SQL__APPLY_PRUNE_CHUNK) {
        sqlite3_bind_int64(
            f->stmts[STMT_PRUNE], 1,
            (sqlite3_int64)(last->index - SQL__APPLY_DEDUP_WINDOW));
        rc = schema_run(f, STMT_PRUNE, "prune raftsql_requests");
        if (rc != 0) {
            goto err;
        }
    }
    rc = checksum_batch_store(f, f->stmts[STMT_APPLIED], 3, 5);
    if (rc != 0) {
        goto err;
    }
    sqlite3_bind_int64(f->stmts[STMT_APPLIED], 1, (sqlite3_int64)last->index);
    sqlite3_bind_int64(f->stmts[STMT_APPLIED], 2, (sqlite3_int64)last->term);
    if (has_time) {
        sqlite3_bind_int64(f->stmts[STMT_APPLIED], 4, (sqlite3_int64)time_ms);
    }
    rc = schema_run(f, STMT_APPLIED, "update raftsql_applied");
    if (rc != 0) {
        goto err;
    }
    if ((rc = foreign_note_schema(f)) != 0) {
        goto err;
    }
    rc = schema_run(f, STMT_COMMIT, "COMMIT");
    if (rc != 0) {
        goto err;
    }
    pthread_mutex_lock(&f->tail_mu);
    f->applied = last->index;
    f->recorded = last->index;
    f->applied_term = last->term;
    pthread_mutex_unlock(&f->tail_mu);
    f->applied_time_ms = time_ms;
    f->has_applied_time = has_time;
    f->landed_confirm = 0;
    checksum_batch_end(f, true);
    checkpoint_committed(f);
    foreign_mark(f);
    free(forced);
    return 0;

err:
    if (!sqlite3_get_autocommit(f->db)) {
        schema_step(f, STMT_ROLLBACK);
    }
    checksum_batch_end(f, false);
    clear_results(results, n);
    free(forced);
    {
        /* The rollback undid any setting stored by the batch: restore the
         * connection to the stored ones, keeping the first message. */
        char msg[SQL__ERRMSG];

        memcpy(msg, f->errmsg, sizeof msg);
        schema_load_settings(f);
        if (checked) {
            /* A failure under the write lock (a full disk) resets the
             * connection's cache, which moves data_version too. */
            foreign_rebase(f);
        }
        memcpy(f->errmsg, msg, sizeof msg);
    }
    return rc;
}

void sql_result_clear(struct sql_result *r)
{
    free(r->errmsg);
    free(r->rows);
    memset(r, 0, sizeof *r);
}
