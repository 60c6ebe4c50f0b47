/* The capture of changeset.h: a host connection's write transaction as
 * row changes and schema statements, recorded by its hooks as they fire
 * and encoded at COMMIT. Nothing here runs SQL or reads the database.
 *
 * Happy path: SQLITE_TRACE_STMT pushes a mark for each new statement
 * (records and bytes so far) and records a schema statement's text; the
 * pre-update hook appends one encoded record per row; SQLITE_TRACE_PROFILE
 * pops the mark; the host's commit hook calls sql_capture_take, which
 * prepends the header and forgets the records.
 *
 * Failure modes, and the rules that keep the records the transaction's
 * real effect (measured on SQLite 3.40.1, tests/sql/test_changeset.c):
 *   - ROLLBACK, or a failure that rolls the transaction back (any failing
 *     statement in autocommit mode, OR ROLLBACK, an interrupted write):
 *     the rollback hook forgets everything.
 *   - A statement that fails inside a transaction rolls back its own rows
 *     and fires no hook. At its PROFILE, sqlite3_changes() is 0 then,
 *     while a statement that wrote rows of its own counts them (REPLACE's
 *     deletes and a trigger's rows come with a counted row): so when the
 *     statement, or a statement nested in it (a virtual table's writes to
 *     its shadow tables), recorded rows of trigger depth 0 and changes()
 *     is 0, its records are dropped back to its mark. OR FAIL keeps the
 *     rows before the failure, and changes() counts them.
 *   - A statement whose rows are all a trigger's (a write to a view
 *     through INSTEAD OF triggers) counts no change whether it failed or
 *     not; inside a transaction that is unknowable: the transaction is
 *     poisoned (sql_capture_take refuses it). In autocommit mode the
 *     commit or rollback hook has decided before its PROFILE.
 *   - A schema statement changes no count either, fires no pre-update
 *     hook for its sqlite_schema writes (nested parses), and its failure
 *     at run time leaves nothing the public API shows to a trace
 *     callback (SQLite 3.40.1's sqlite3Step calls the profile callback
 *     after sqlite3VdbeHalt rolled the statement back but before it sets
 *     db->errCode; the error sits in the statement's private rc). In
 *     autocommit mode the commit or rollback hook tells. Inside a
 *     transaction (CREATE UNIQUE INDEX on duplicates, an ALTER TABLE
 *     check, whose error a host may ignore and then commit) it is
 *     recorded at its start as SQL_CHANGE_SCHEMA_IN_TXN with the
 *     connection's settings, in its place among the rows, and the
 *     replay decides: on the state the writer had when it ran, under the
 *     writer's settings, it fails exactly when the writer's run did
 *     (changeset_apply.c). Its rows are never recorded (the text
 *     replays them), so a failed one leaves nothing else to drop.
 *   - A statement reset before its last row (RETURNING) is profiled
 *     before it halts; its halt keeps its rows unless an immediate
 *     foreign key check fails then: with foreign keys on, inside a
 *     transaction, that poisons it.
 *   - ROLLBACK TO fires nothing: SAVEPOINT, RELEASE and ROLLBACK TO are
 *     read from the statement's text and ROLLBACK TO drops the records
 *     back to the savepoint's mark.
 *   - A statement re-prepared after SQLITE_SCHEMA is profiled twice and
 *     traced once: a mark profiled while its statement is expired, with
 *     no rows, is kept ("pending") for the re-run, and dropped at the
 *     next statement unless that one runs inside the re-run.
 *   - sqlite3_blob_write (a pre-update DELETE with a blob column) poisons
 *     the transaction; past max_bytes it is marked too big and recording
 *     stops; out of memory in a hook poisons it as SQL_ERR_NOMEM. */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>

#include "changeset_internal.h"
#include "codec.h"
#include "preupdate.h"

SQLITE_EXTENSION_INIT3

#define SQL__CAPTURE_TRACE (SQLITE_TRACE_STMT | SQLITE_TRACE_PROFILE)

/* Statements ended at rest before the first quiet_look, and the most
 * between two when the last one found a statement that may write (each
 * look doubles the wait up to it): a look walks the connection's
 * prepared statements (a driver's cache may hold a hundred). */
#define SQL__QUIET_FIRST 16u
#define SQL__QUIET_MOST 4096u

/* Why a write that ran while the capture was not armed is refused. */
#define SQL__UNARMED                                                           \
    "a write ran that raftsql did not see prepared (prepared past its "        \
    "guard: the connection's authorizer was replaced), so its changes "        \
    "cannot be replicated; leave the authorizer to raftsql on a "              \
    "connection that writes to a replica"

/* The mark of one running statement. */
struct capture_stmt {
    sqlite3_stmt *stmt; /* the statement (never dereferenced by us) */
    unsigned n_at;      /* records at its start */
    size_t len_at;      /* record bytes at its start */
    uint64_t rows0;     /* depth-0 rows recorded since, nested ones too */
    uint64_t rows_deep; /* trigger rows recorded since */
    int schema;         /* a schema statement: its rows are not recorded */
    int pending;        /* profiled expired with no rows: a re-run may
                           follow, untraced */
};

/* One savepoint of the running transaction. */
struct capture_savepoint {
    char *name;     /* dequoted, malloc'd */
    unsigned n_at;  /* records when it was opened */
    size_t len_at;  /* record bytes then */
    int starts_txn; /* opened outside BEGIN: its RELEASE commits */
};

struct sql_capture {
    sqlite3 *db;                   /* the host connection */
    struct sql_preupdate pu;       /* the pre-update functions */
    uint64_t max_bytes;            /* cap of the encoded payload */
    uint8_t *buf;                  /* the records, encoded */
    size_t len;                    /* bytes in buf */
    size_t cap;                    /* bytes allocated */
    unsigned n;                    /* records in buf */
    uint64_t wanted;               /* payload bytes the records need */
    int too_big;                   /* wanted went past max_bytes */
    int nomem;                     /* a hook ran out of memory */
    int poisoned;                  /* the transaction cannot be replicated */
    int sequence;                  /* an INSERT ran that may have written
                                      sqlite_sequence with no row */
    char why[600];                 /* why, when poisoned */
    sql_capture_gate_cb gate;      /* asked at each writing statement's
                                      start (NULL: none) */
    void *gate_arg;                /* its first argument */
    sql_capture_stmt_cb stmt_cb;   /* told at statements' starts and ends
                                      (NULL: none) */
    void *stmt_arg;                /* its first argument */
    struct capture_stmt *stmts;    /* running statements, innermost last */
    unsigned n_stmts;              /* entries in stmts */
    unsigned cap_stmts;            /* entries allocated */
    unsigned schema_depth;         /* schema statements among them */
    int armed;                     /* the trace hook's mask is
                                      SQL__CAPTURE_TRACE, not 0 (quiet_look,
                                      sql_capture_arm) */
    unsigned quiet_ends;           /* statements ended at rest since the
                                      last quiet_look */
    unsigned quiet_wait;           /* of them, before the next one */
    sql_capture_armed_cb armed_cb; /* told when armed changes (NULL:
                                      none) */
    void *armed_arg;               /* its first argument */
    int replaced;                  /* the trace hook was not ours when
                                      sql_capture_arm armed it again
                                      (sql_capture_intact tells) */
    struct capture_savepoint *sps; /* open savepoints, innermost last */
    unsigned n_sps;                /* entries in sps */
    unsigned cap_sps;              /* entries allocated */
};

/* poison marks the running transaction as one that cannot be replicated,
 * keeping the first reason. */
static void poison(struct sql_capture *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void poison(struct sql_capture *c, const char *fmt, ...)
{
    va_list ap;

    if (c->poisoned) {
        return;
    }
    c->poisoned = 1;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
}

static void pop_savepoints(struct sql_capture *c, unsigned keep)
{
    while (c->n_sps > keep) {
        free(c->sps[--c->n_sps].name);
    }
}

/* reset_txn forgets the running transaction: records, savepoints, flags.
 * The running statements' marks move to the (empty) start. */
static void reset_txn(struct sql_capture *c)
{
    unsigned i;

    c->len = 0;
    c->n = 0;
    c->wanted = SQL_CHANGESET_HEADER;
    c->too_big = 0;
    c->nomem = 0;
    c->poisoned = 0;
    c->sequence = 0;
    c->why[0] = 0;
    pop_savepoints(c, 0);
    for (i = 0; i < c->n_stmts; i++) {
        c->stmts[i].n_at = 0;
        c->stmts[i].len_at = 0;
        c->stmts[i].rows0 = 0;
        c->stmts[i].rows_deep = 0;
    }
}

/* truncate drops the records after mark (@n_at, @len_at). */
static void truncate_to(struct sql_capture *c, unsigned n_at, size_t len_at)
{
    unsigned i;

    if (c->too_big || n_at > c->n) {
        return; /* nothing kept to drop (too big), or nothing after it */
    }
    c->n = n_at;
    c->len = len_at;
    c->wanted = SQL_CHANGESET_HEADER + (uint64_t)len_at;
    for (i = 0; i < c->n_stmts; i++) {
        if (c->stmts[i].n_at > n_at) {
            c->stmts[i].n_at = n_at;
            c->stmts[i].len_at = len_at;
        }
    }
    for (i = 0; i < c->n_sps; i++) {
        if (c->sps[i].n_at > n_at) {
            c->sps[i].n_at = n_at;
            c->sps[i].len_at = len_at;
        }
    }
}

/* reserve accounts for a record of @size bytes and returns where to write
 * it, or NULL: too big (recording stops, the records are freed) or out of
 * memory. */
static uint8_t *reserve(struct sql_capture *c, uint64_t size)
{
    c->wanted += size;
    if (c->too_big) {
        return NULL;
    }
    if (c->wanted > c->max_bytes) {
        c->too_big = 1;
        free(c->buf);
        c->buf = NULL;
        c->len = 0;
        c->cap = 0;
        c->n = 0;
        return NULL;
    }
    if (c->len + size > c->cap) {
        size_t cap = c->cap == 0 ? 4096 : c->cap;
        uint8_t *b;

        while (cap < c->len + size) {
            cap *= 2;
        }
        b = realloc(c->buf, cap);
        if (b == NULL) {
            c->nomem = 1;
            return NULL;
        }
        c->buf = b;
        c->cap = cap;
    }
    return c->buf + c->len;
}

/* ---- Rows ------------------------------------------------------------- */

/* is_internal says whether table @name is never captured: sqlite_* and
 * raftsql_* (case-insensitive, as SQLite's names). */
static int is_internal(const char *name)
{
    return strncasecmp(name, "sqlite_", 7) == 0 ||
           strncasecmp(name, "raftsql_", 8) == 0;
}

/* value_of reads @v into @out (TEXT as UTF-8). Returns 0, or -1 when the
 * text conversion runs out of memory. */
static int value_of(sqlite3_value *v, struct sql_value *out)
{
    out->type = (uint8_t)sqlite3_value_type(v);
    switch (out->type) {
        case SQLITE_INTEGER:
            out->integer = sqlite3_value_int64(v);
            return 0;
        case SQLITE_FLOAT:
            out->real = sqlite3_value_double(v);
            return 0;
        case SQLITE_TEXT:
            out->bytes.p = sqlite3_value_text(v);
            out->bytes.len = (size_t)sqlite3_value_bytes(v);
            return out->bytes.p == NULL ? -1 : 0;
        case SQLITE_BLOB:
            out->bytes.p = sqlite3_value_blob(v);
            out->bytes.len = (size_t)sqlite3_value_bytes(v);
            return 0;
        default:
            out->type = SQL_NULL;
            return 0;
    }
}

/* image reads column @i of the old (@new_ 0) or new row. Returns
 * SQLITE_OK, SQLITE_RANGE past the stored columns, or another code. */
static int image(struct sql_capture *c, int new_, int i, struct sql_value *out)
{
    sqlite3_value *v = NULL;
    int rc = new_ ? c->pu.new_(c->db, i, &v) : c->pu.old(c->db, i, &v);

    if (rc != SQLITE_OK) {
        return rc;
    }
    if (v == NULL || value_of(v, out) != 0) {
        return SQLITE_NOMEM;
    }
    return SQLITE_OK;
}

/* row_values sizes (@out NULL) or writes the values of one row image;
 * *@n_cols is the count to read, lowered on the first pass to the
 * columns the row has (a VIRTUAL generated column has no value: SQLite
 * answers SQLITE_RANGE for the last ones). Returns the bytes, or 0 with
 * *@rc set. */
static uint64_t row_values(struct sql_capture *c, int new_, int *n_cols,
                           uint8_t *out, int *rc)
{
    uint64_t size = 0;
    struct sql_value v;
    int i, bad = 0;

    for (i = 0; i < *n_cols; i++) {
        *rc = image(c, new_, i, &v);
        if (*rc == SQLITE_RANGE && out == NULL && i > 0) {
            *n_cols = i;
            break;
        }
        if (*rc != SQLITE_OK) {
            return 0;
        }
        if (v.type == SQLITE_TEXT || v.type == SQLITE_BLOB) {
            if (v.bytes.len > UINT32_MAX) {
                *rc = SQLITE_TOOBIG;
                return 0;
            }
        }
        size += 1 + codec_value_size(&v, &bad);
        if (out != NULL) {
            *out++ = v.type;
            out = codec_value_put(out, &v);
        }
    }
    *rc = SQLITE_OK;
    return size;
}

/* record_row appends the record of one pre-update change. */
static void record_row(struct sql_capture *c, int op, const char *table,
                       sqlite3_int64 key1, sqlite3_int64 key2)
{
    size_t table_len = strlen(table);
    uint8_t kind = op == SQLITE_INSERT   ? SQL_CHANGE_INSERT
                   : op == SQLITE_DELETE ? SQL_CHANGE_DELETE
                                         : SQL_CHANGE_UPDATE;
    int has_old = kind != SQL_CHANGE_INSERT,
        has_new = kind != SQL_CHANGE_DELETE;
    int n_cols = c->pu.count(c->db), n_old = n_cols, n_new = n_cols;
    uint64_t size = SQL__CHANGE_ROW_FIXED + (uint64_t)table_len;
    int rc = SQLITE_OK;
    uint8_t *p;

    if (table_len == 0 || table_len > UINT16_MAX || n_cols <= 0 ||
        n_cols > UINT16_MAX) {
        poison(c,
               "table %s: a name of %zu bytes or %d columns do not fit "
               "the changeset format",
               table, table_len, n_cols);
        return;
    }
    if (has_old) {
        size += row_values(c, 0, &n_old, NULL, &rc);
    }
    if (rc == SQLITE_OK && has_new) {
        size += row_values(c, 1, &n_new, NULL, &rc);
    }
    if (rc == SQLITE_OK && has_old && has_new && n_old != n_new) {
        rc = SQLITE_CORRUPT;
    }
    if (rc != SQLITE_OK) {
        if (rc == SQLITE_NOMEM) {
            c->nomem = 1;
        } else {
            poison(c, "table %s: a row's values cannot be read (%s)", table,
                   sqlite3_errstr(rc));
        }
        return;
    }
    n_cols = has_old ? n_old : n_new;
    p = reserve(c, size);
    if (p == NULL) {
        return;
    }
    p = changeset_codec_row(p, kind, table, table_len, has_old ? key1 : 0,
                            has_new ? key2 : 0, (unsigned)n_cols);
    if (has_old) {
        p += row_values(c, 0, &n_cols, p, &rc);
    }
    if (rc == SQLITE_OK && has_new) {
        p += row_values(c, 1, &n_cols, p, &rc);
    }
    if (rc != SQLITE_OK) {
        c->nomem = 1; /* read once already: only memory can fail now */
        return;
    }
    c->len += (size_t)size;
    c->n++;
}

/* on_preupdate is the pre-update hook of the host connection. */
static void on_preupdate(void *data, sqlite3 *db, int op, const char *db_name,
                         const char *table, sqlite3_int64 key1,
                         sqlite3_int64 key2)
{
    struct sql_capture *c = data;
    int depth;

    if (strcmp(db_name, "main") != 0 || is_internal(table)) {
        return;
    }
    if (!c->armed) {
        poison(c, "%s", SQL__UNARMED);
        return;
    }
    if (c->pu.blobwrite(db) >= 0) {
        poison(c,
               "sqlite3_blob_write on table %s cannot be replicated; use "
               "UPDATE",
               table);
        return;
    }
    if (c->schema_depth > 0 || c->poisoned || c->too_big || c->nomem) {
        return;
    }
    depth = c->pu.depth(db);
    record_row(c, op, table, key1, key2);
    if (c->n_stmts > 0 && !c->too_big && !c->nomem) {
        if (depth == 0) {
            c->stmts[c->n_stmts - 1].rows0++;
        } else {
            c->stmts[c->n_stmts - 1].rows_deep++;
        }
    }
}

/* ---- Statement text --------------------------------------------------- */

/* skip_space skips whitespace, semicolons and comments, as SQLite reads
 * them (an unterminated C-style comment runs to the end). */
static const char *skip_space(const char *s)
{
    for (;;) {
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' ||
            *s == '\v') {
            s++;
        } else if (s[0] == '-' && s[1] == '-') {
            while (*s != 0 && *s != '\n') {
                s++;
            }
        } else if (s[0] == '/' && s[1] == '*') {
            s += 2;
            while (*s != 0 && !(s[0] == '*' && s[1] == '/')) {
                s++;
            }
            if (*s != 0) {
                s += 2;
            }
        } else {
            return s;
        }
    }
}

static int is_ident(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '_' || ch == '$' ||
           (unsigned char)ch >= 0x80;
}

/* keyword advances *@s past keyword @kw (case-insensitive) and returns 1
 * when it comes next, else 0. */
static int keyword(const char **s, const char *kw)
{
    const char *p = skip_space(*s);
    size_t n = strlen(kw);

    if (strncasecmp(p, kw, n) != 0 || is_ident(p[n])) {
        return 0;
    }
    *s = p + n;
    return 1;
}

/* read_name reads the identifier next in *@s (bare, or quoted with "",
 * '', `` or []) into a malloc'd, dequoted string. Returns NULL when there
 * is none or out of memory (*@nomem set). */
static char *read_name(const char *s, int *nomem)
{
    const char *p = skip_space(s);
    char close, *out;
    size_t i = 0, n;

    *nomem = 0;
    close = *p == '"'    ? '"'
            : *p == '\'' ? '\''
            : *p == '`'  ? '`'
            : *p == '['  ? ']'
                         : 0;
    n = strlen(p);
    out = malloc(n + 1);
    if (out == NULL) {
        *nomem = 1;
        return NULL;
    }
    if (close == 0) {
        while (is_ident(*p)) {
            out[i++] = *p++;
        }
    } else {
        for (p++; *p != 0; p++) {
            if (*p == close) {
                if (close != ']' && p[1] == close) {
                    out[i++] = *p++; /* a doubled quote */
                    continue;
                }
                break;
            }
            out[i++] = *p;
        }
        if (*p != close) {
            i = 0; /* unterminated: no name */
        }
    }
    out[i] = 0;
    if (i == 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* skip_name moves *@s past the identifier next in it (bare, or quoted
 * with "", '', `` or []). Returns 0 when there is none. */
static int skip_name(const char **s)
{
    const char *p = skip_space(*s);
    char close = *p == '"'    ? '"'
                 : *p == '\'' ? '\''
                 : *p == '`'  ? '`'
                 : *p == '['  ? ']'
                              : 0;

    if (close == 0) {
        if (!is_ident(*p)) {
            return 0;
        }
        while (is_ident(*p)) {
            p++;
        }
        *s = p;
        return 1;
    }
    for (p++; *p != 0; p++) {
        if (*p == close) {
            if (close != ']' && p[1] == close) {
                p++; /* a doubled quote */
                continue;
            }
            *s = p + 1;
            return 1;
        }
    }
    return 0;
}

/* is_create_as_select says whether schema statement @sql is a CREATE
 * TABLE ... AS SELECT: "CREATE TABLE [IF NOT EXISTS] [schema.]name AS". */
static int is_create_as_select(const char *sql)
{
    const char *s = sql;

    if (!keyword(&s, "CREATE") || !keyword(&s, "TABLE")) {
        return 0;
    }
    if (keyword(&s, "IF")) {
        keyword(&s, "NOT");
        keyword(&s, "EXISTS");
    }
    if (!skip_name(&s)) {
        return 0;
    }
    s = skip_space(s);
    if (*s == '.') {
        s++;
        if (!skip_name(&s)) {
            return 0;
        }
    }
    return keyword(&s, "AS");
}

/* What a statement's text says it is, to the capture. */
enum capture_kind {
    CAPTURE_OTHER,
    CAPTURE_SCHEMA,      /* CREATE, DROP, ALTER: recorded as text */
    CAPTURE_SCHEMA_TEMP, /* CREATE TEMP ...: not replicated */
    CAPTURE_SAVEPOINT,
    CAPTURE_RELEASE,
    CAPTURE_ROLLBACK_TO,
};

/* classify reads the first keywords of @sql; for the savepoint
 * statements, *@name_at is where the name starts. */
static enum capture_kind classify(const char *sql, const char **name_at)
{
    const char *s = skip_space(sql);

    /* One look at the first letter picks the keywords to compare: most
     * statements (SELECT, INSERT, ...) are none of these. */
    switch (*s | 0x20) {
        case 'c':
            if (keyword(&s, "CREATE")) {
                return keyword(&s, "TEMP") || keyword(&s, "TEMPORARY")
                           ? CAPTURE_SCHEMA_TEMP
                           : CAPTURE_SCHEMA;
            }
            break;
        case 'd':
        case 'a':
            if (keyword(&s, "DROP") || keyword(&s, "ALTER")) {
                return CAPTURE_SCHEMA;
            }
            break;
        case 's':
            if ((s[1] | 0x20) == 'a' && keyword(&s, "SAVEPOINT")) {
                *name_at = s;
                return CAPTURE_SAVEPOINT;
            }
            break;
        case 'r':
            if (keyword(&s, "RELEASE")) {
                keyword(&s, "SAVEPOINT");
                *name_at = s;
                return CAPTURE_RELEASE;
            }
            if (keyword(&s, "ROLLBACK")) {
                keyword(&s, "TRANSACTION");
                if (keyword(&s, "TO")) {
                    keyword(&s, "SAVEPOINT");
                    *name_at = s;
                    return CAPTURE_ROLLBACK_TO;
                }
            }
            break;
        default:
            break;
    }
    return CAPTURE_OTHER;
}

/* may_move_sequence says whether statement text @sql is an INSERT or a
 * REPLACE (one after WITH included) into a table that is not internal:
 * SQLite ends one into an AUTOINCREMENT table by writing its
 * sqlite_sequence row, even when it added no row (INSERT INTO t SELECT
 * ... matching nothing adds ('t', 0) when t had none), and no hook tells.
 * 0 when out of memory: that transaction's rows still travel. */
static int may_move_sequence(const char *sql)
{
    const char *s = sql;
    char *name;
    int nomem, internal;

    if (keyword(&s, "WITH")) {
        return 1;
    }
    if (keyword(&s, "INSERT")) {
        if (keyword(&s, "OR")) {
            if (!(keyword(&s, "ROLLBACK") || keyword(&s, "ABORT") ||
                  keyword(&s, "REPLACE") || keyword(&s, "FAIL") ||
                  keyword(&s, "IGNORE"))) {
                return 1;
            }
        }
    } else if (!keyword(&s, "REPLACE")) {
        return 0;
    }
    if (!keyword(&s, "INTO") || (name = read_name(s, &nomem)) == NULL) {
        return 1;
    }
    internal = is_internal(name);
    free(name);
    return !internal;
}

/* ---- Statements and savepoints ---------------------------------------- */

/* live_busy says whether @s is still a statement of @c's connection and
 * running (pointers of finalized statements are only compared). */
static int live_busy(struct sql_capture *c, sqlite3_stmt *s)
{
    sqlite3_stmt *x;

    for (x = sqlite3_next_stmt(c->db, NULL); x != NULL;
         x = sqlite3_next_stmt(c->db, x)) {
        if (x == s) {
            return sqlite3_stmt_busy(s);
        }
    }
    return 0;
}

static void pop_stmt(struct sql_capture *c)
{
    struct capture_stmt *e = &c->stmts[--c->n_stmts];

    if (e->schema) {
        c->schema_depth--;
    }
    if (c->n_stmts > 0) {
        /* The rows it kept are its parent's too. */
        c->stmts[c->n_stmts - 1].rows0 += e->rows0;
        c->stmts[c->n_stmts - 1].rows_deep += e->rows_deep;
    }
}

/* other_writers says whether a write statement other than the innermost
 * runs: SQLite then refuses SAVEPOINT and RELEASE. */
static int other_writers(struct sql_capture *c)
{
    unsigned i;

    for (i = 0; i + 1 < c->n_stmts; i++) {
        if (!sqlite3_stmt_readonly(c->stmts[i].stmt) &&
            sqlite3_stmt_busy(c->stmts[i].stmt)) {
            return 1;
        }
    }
    return 0;
}

/* find_savepoint returns the index of the innermost savepoint @name
 * (case-insensitive, as SQLite), or -1. */
static int find_savepoint(struct sql_capture *c, const char *name)
{
    unsigned i = c->n_sps;

    while (i-- > 0) {
        if (strcasecmp(c->sps[i].name, name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* on_savepoint follows SAVEPOINT, RELEASE and ROLLBACK TO (@kind), whose
 * name starts at @name_at. */
static void on_savepoint(struct sql_capture *c, enum capture_kind kind,
                         const char *name_at)
{
    int nomem, i;
    char *name = read_name(name_at, &nomem);

    if (name == NULL) {
        if (nomem) {
            c->nomem = 1;
        }
        return; /* SQLite refuses it too */
    }
    i = find_savepoint(c, name);
    if (kind == CAPTURE_SAVEPOINT) {
        if (other_writers(c)) {
            free(name);
            return; /* "cannot open savepoint - SQL statements in progress" */
        }
        if (c->n_sps == c->cap_sps) {
            unsigned cap = c->cap_sps == 0 ? 8 : 2 * c->cap_sps;
            struct capture_savepoint *sps = realloc(c->sps, cap * sizeof *sps);
            if (sps == NULL) {
                free(name);
                c->nomem = 1;
                return;
            }
            c->sps = sps;
            c->cap_sps = cap;
        }
        c->sps[c->n_sps].name = name;
        c->sps[c->n_sps].n_at = c->n;
        c->sps[c->n_sps].len_at = c->len;
        c->sps[c->n_sps].starts_txn = sqlite3_get_autocommit(c->db);
        c->n_sps++;
        return;
    }
    free(name);
    if (i < 0) {
        return; /* "no such savepoint" */
    }
    if (kind == CAPTURE_ROLLBACK_TO) {
        truncate_to(c, c->sps[i].n_at, c->sps[i].len_at);
        pop_savepoints(c, (unsigned)i + 1);
    } else if (!other_writers(c) && !(i == 0 && c->sps[0].starts_txn)) {
        /* (Releasing the savepoint that began the transaction commits
         * it: the commit hook's take ends it, or it fails and stays.) */
        pop_savepoints(c, (unsigned)i);
    }
}

/* schema_settings reads the connection's settings that a schema
 * statement's replay needs (SQL_SCHEMA_* bits). sqlite3_db_config with
 * -1 only reads: no SQL runs. */
static uint8_t schema_settings(sqlite3 *db)
{
    static const struct {
        int op;
        uint8_t bit;
    } map[] = {
        {SQLITE_DBCONFIG_ENABLE_FKEY, SQL_SCHEMA_FKEY},
        {SQLITE_DBCONFIG_ENABLE_TRIGGER, SQL_SCHEMA_TRIGGER},
        {SQLITE_DBCONFIG_LEGACY_ALTER_TABLE, SQL_SCHEMA_LEGACY_ALTER},
        {SQLITE_DBCONFIG_DQS_DDL, SQL_SCHEMA_DQS_DDL},
    };
    uint8_t out = 0;

    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        int on = 0;

        sqlite3_db_config(db, map[i].op, -1, &on);
        if (on) {
            out |= map[i].bit;
        }
    }
    return out;
}

/* record_schema appends schema statement @stmt, of text @sql: inside a
 * transaction (@in_txn) as SQL_CHANGE_SCHEMA_IN_TXN with the
 * connection's settings, whose replay decides whether it failed. */
static void record_schema(struct sql_capture *c, sqlite3_stmt *stmt,
                          const char *sql, int in_txn)
{
    char *expanded = NULL;
    size_t len, fixed = in_txn ? SQL__CHANGE_SCHEMA_IN_TXN_FIXED
                               : SQL__CHANGE_SCHEMA_FIXED;
    uint8_t *p;

    if (sqlite3_bind_parameter_count(stmt) > 0) {
        expanded = sqlite3_expanded_sql(stmt);
        if (expanded == NULL) {
            poison(c, "a schema statement's parameters cannot be expanded");
            return;
        }
        sql = expanded;
    }
    len = strlen(sql);
    if (len == 0 || len > UINT32_MAX) {
        poison(c, "a schema statement of %zu bytes", len);
    } else {
        p = reserve(c, fixed + (uint64_t)len);
        if (p != NULL) {
            if (in_txn) {
                changeset_codec_schema_in_txn(p, schema_settings(c->db), sql,
                                              len);
            } else {
                changeset_codec_schema(p, sql, len);
            }
            c->len += fixed + len;
            c->n++;
        }
    }
    sqlite3_free(expanded);
}

/* on_stmt follows SQLITE_TRACE_STMT: statement @stmt starts, of text
 * @text ("-- " and the text for one nested in another, "-- " and a
 * comment for a trigger's sub-statement). */
static void on_stmt(struct sql_capture *c, sqlite3_stmt *stmt, const char *text)
{
    struct capture_stmt *e;
    const char *sql = text, *name_at = NULL;
    enum capture_kind kind;

    if (strncmp(text, "-- ", 3) != 0) {
        /* A statement's own start, not a trigger's or a nested one's
         * line: no entry left by another statement that is not running
         * can be its parent (one finalized or reset with no end traced,
         * such as a statement stepped and dropped on this connection
         * while a raft_exec() checked its request). */
        while (c->n_stmts > 0 && c->stmts[c->n_stmts - 1].stmt != stmt &&
               !live_busy(c, c->stmts[c->n_stmts - 1].stmt)) {
            pop_stmt(c);
        }
    }
    /* Pending marks whose re-run did not come. */
    while (c->n_stmts > 0 && c->stmts[c->n_stmts - 1].pending &&
           c->stmts[c->n_stmts - 1].stmt != stmt &&
           !live_busy(c, c->stmts[c->n_stmts - 1].stmt)) {
        pop_stmt(c);
    }
    if (c->n_stmts > 0 && c->stmts[c->n_stmts - 1].stmt == stmt) {
        if (!c->stmts[c->n_stmts - 1].pending) {
            return; /* a trigger's sub-statement */
        }
        pop_stmt(c); /* its pointer runs a new statement */
    }
    if (strncmp(sql, "-- ", 3) == 0) {
        /* Nested in another statement: that one's mark, if any, is on
         * the stack; a read at rest has none (quiet_read), and a write
         * nested in it (a function's CREATE TABLE) is classified by its
         * own text all the same. */
        sql += 3;
    }
    if (c->n_stmts > 0) {
        c->stmts[c->n_stmts - 1].pending = 0; /* @stmt runs in its re-run */
    } else if (sqlite3_get_autocommit(c->db) &&
               ((c->n == 0 && !c->poisoned && !c->too_big && !c->nomem) ||
                sqlite3_txn_state(c->db, NULL) != SQLITE_TXN_WRITE)) {
        /* No transaction is open: what is left is of one that ended
         * without sql_capture_take or the rollback hook. (Not while an
         * implicit one writes and something was noted of it: a
         * statement nested in a read that wrote before it, such as the
         * second write of a function called by a SELECT, whose mark
         * quiet_read left out; a blob opened for writing, whose
         * transaction stays open over the statements run meanwhile and
         * whose write poisoned it.) */
        reset_txn(c);
    }
    if (!c->sequence && !sqlite3_stmt_readonly(stmt) &&
        may_move_sequence(sql)) {
        c->sequence = 1;
    }
    if (c->n_stmts == c->cap_stmts) {
        unsigned cap = c->cap_stmts == 0 ? 8 : 2 * c->cap_stmts;
        struct capture_stmt *s = realloc(c->stmts, cap * sizeof *s);
        if (s == NULL) {
            c->nomem = 1;
            return;
        }
        c->stmts = s;
        c->cap_stmts = cap;
    }
    e = &c->stmts[c->n_stmts++];
    memset(e, 0, sizeof *e);
    e->stmt = stmt;
    e->n_at = c->n;
    e->len_at = c->len;
    kind = classify(sql, &name_at);
    if (kind == CAPTURE_SCHEMA || kind == CAPTURE_SCHEMA_TEMP) {
        e->schema = 1;
        if (c->schema_depth++ == 0 && kind == CAPTURE_SCHEMA && !c->poisoned &&
            !c->too_big && !c->nomem) {
            /* With the writer's settings always (SQL_CHANGE_SCHEMA_IN_TXN):
             * what a schema statement does depends on them (a DROP TABLE
             * with foreign keys on deletes the children its ON DELETE
             * CASCADE names, rows no hook records). */
            record_schema(c, stmt, sql, 1);
            if (is_create_as_select(sql)) {
                poison(c,
                       "CREATE TABLE ... AS SELECT cannot be replicated as a "
                       "plain write (its rows reach no hook, and its SELECT "
                       "may read what only this connection has: TEMP "
                       "tables, ATTACHed files, random()): create the "
                       "table, then INSERT INTO ... SELECT");
            }
        }
    } else if (kind != CAPTURE_OTHER && c->n_stmts == 1) {
        on_savepoint(c, kind, name_at);
    }
    if (c->gate != NULL && strncmp(text, "-- ", 3) != 0 &&
        !sqlite3_stmt_readonly(stmt)) {
        char why[sizeof c->why];
        if (c->gate(c->gate_arg, stmt, why, sizeof why) != 0) {
            poison(c, "%s", why);
        }
    }
}

/* on_profile follows SQLITE_TRACE_PROFILE: statement @stmt ended (or was
 * reset before its end). */
static void on_profile(struct sql_capture *c, sqlite3_stmt *stmt)
{
    struct capture_stmt *e;
    int busy, in_txn, fk = 0;

    while (c->n_stmts > 0 && c->stmts[c->n_stmts - 1].stmt != stmt &&
           c->stmts[c->n_stmts - 1].pending) {
        pop_stmt(c);
    }
    if (c->n_stmts == 0 || c->stmts[c->n_stmts - 1].stmt != stmt) {
        return; /* one traced before the capture began */
    }
    e = &c->stmts[c->n_stmts - 1];
    busy = sqlite3_stmt_busy(stmt);
    in_txn = !sqlite3_get_autocommit(c->db);
    if (busy) {
        /* Reset before its end: the halt that follows keeps its rows,
         * unless its immediate foreign key check fails there. */
        sqlite3_db_config(c->db, SQLITE_DBCONFIG_ENABLE_FKEY, -1, &fk);
        if (in_txn && fk && e->rows0 + e->rows_deep > 0) {
            poison(c,
                   "a statement reset before its last row, with foreign "
                   "keys on, inside a transaction cannot be replicated "
                   "(its foreign key check may undo it unseen): step it "
                   "to its end");
        }
    } else if (e->rows0 > 0) {
        if (sqlite3_changes(c->db) == 0) {
            truncate_to(c, e->n_at, e->len_at); /* it failed: undone */
            e->rows0 = 0;
            e->rows_deep = 0;
        }
    } else if (e->rows_deep > 0 && in_txn) {
        poison(c,
               "a write through INSTEAD OF triggers inside a transaction "
               "cannot be replicated (SQLite does not tell whether it "
               "failed): run it in autocommit mode");
    }
    if (!busy && e->rows0 == 0 && e->rows_deep == 0 && c->n == e->n_at &&
        sqlite3_expired(stmt)) {
        e->pending = 1; /* maybe re-prepared and run again, untraced */
        if (e->schema && c->schema_depth == 1 && !in_txn && !c->poisoned &&
            !c->too_big && !c->nomem && sqlite3_sql(stmt) != NULL) {
            /* A schema statement that met SQLITE_SCHEMA (another
             * connection changed the schema since it was prepared): its
             * first run was rolled back, with its record, and its re-run
             * is not traced. Record it for the re-run. */
            record_schema(c, stmt, sqlite3_sql(stmt), 1);
        }
        return;
    }
    pop_stmt(c);
}

/* quiet_text tells whether statement text @text begins with SELECT,
 * WITH or VALUES (blanks before it skipped; a comment is not): what,
 * with sqlite3_stmt_readonly, makes a read that opens no transaction
 * (not BEGIN, SAVEPOINT, RELEASE or a PRAGMA, which it also calls
 * read-only). */
static int quiet_text(const char *text)
{
    const char *s = text;

    if (s == NULL) {
        return 0;
    }
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
        s++;
    }
    /* (Letter by letter, unrolled: every read of a connection that
     * wrote asks this, at its start.) */
    switch (*s | 0x20) {
        case 's':
            return (s[1] | 0x20) == 'e' && (s[2] | 0x20) == 'l' &&
                   (s[3] | 0x20) == 'e' && (s[4] | 0x20) == 'c' &&
                   (s[5] | 0x20) == 't' && !is_ident(s[6]);
        case 'w':
            return (s[1] | 0x20) == 'i' && (s[2] | 0x20) == 't' &&
                   (s[3] | 0x20) == 'h' && !is_ident(s[4]);
        case 'v':
            return (s[1] | 0x20) == 'a' && (s[2] | 0x20) == 'l' &&
                   (s[3] | 0x20) == 'u' && (s[4] | 0x20) == 'e' &&
                   (s[5] | 0x20) == 's' && !is_ident(s[6]);
        default:
            return 0;
    }
}

/* at_rest tells whether @c's connection is at rest: none of the
 * capture's statements running, nothing recorded or noted of a
 * transaction, none open. */
static int at_rest(const struct sql_capture *c)
{
    return c->n_stmts == 0 && c->n == 0 && !c->poisoned && !c->too_big &&
           !c->nomem && !c->sequence && sqlite3_get_autocommit(c->db);
}

/* quiet_read tells whether statement @stmt, starting with text @text,
 * is a read at rest: read-only and quiet_text, no transaction open, none
 * of the capture's statements running and nothing recorded. Such a
 * statement changes nothing the capture or the plain-write path keeps
 * (on_stmt would push a mark that its end pops, and the statement
 * callback would note a read outside any transaction): it is let
 * through untouched, and its end finds no mark (on_profile). A write
 * nested in it (a function's) pushes its own. What every read of a
 * connection that wrote pays here instead of on_stmt's ~300
 * instructions (docs/performance.md). */
static int quiet_read(const struct sql_capture *c, sqlite3_stmt *stmt,
                      const char *text)
{
    return at_rest(c) && sqlite3_stmt_readonly(stmt) && quiet_text(text);
}

static int on_trace(unsigned type, void *data, void *p, void *x);

/* set_armed gives @c's trace hook its mask: SQL__CAPTURE_TRACE (@on 1),
 * or 0 (SQLite then reads no clock and calls no hook for a statement;
 * the hook's argument stays, for sql_capture_intact). */
static void set_armed(struct sql_capture *c, int on)
{
    int was = c->armed;

    c->armed = on;
    c->quiet_ends = 0;
    sqlite3_trace_v2(c->db, on ? SQL__CAPTURE_TRACE : 0, on ? on_trace : NULL,
                     c);
    if (was != on && c->armed_cb != NULL) {
        c->armed_cb(c->armed_arg, on);
    }
}

/* quiet_look, at the end of a statement at rest (at_rest), walks
 * the connection's prepared statements: when every one is a read that
 * quiet_read lets through (read-only and quiet_text), nothing needs
 * tracing until one that is not runs, and the capture disarms
 * (set_armed 0): such a statement is prepared after this, and its
 * prepare arms the capture again (sql_capture_arm, from the guard),
 * before it can step. Otherwise the next look waits twice as many ends,
 * up to SQL__QUIET_MOST. */
static void quiet_look(struct sql_capture *c)
{
    sqlite3_stmt *x;

    c->quiet_ends = 0;
    if (sqlite3_txn_state(c->db, NULL) == SQLITE_TXN_WRITE) {
        return; /* an implicit write transaction still open */
    }
    for (x = sqlite3_next_stmt(c->db, NULL); x != NULL;
         x = sqlite3_next_stmt(c->db, x)) {
        if (!sqlite3_stmt_readonly(x) || !quiet_text(sqlite3_sql(x))) {
            c->quiet_wait = c->quiet_wait >= SQL__QUIET_MOST / 2
                                ? SQL__QUIET_MOST
                                : 2 * c->quiet_wait;
            return;
        }
    }
    c->quiet_wait = SQL__QUIET_FIRST;
    set_armed(c, 0);
}

static int on_trace(unsigned type, void *data, void *p, void *x)
{
    struct sql_capture *c = data;

    if (type == SQLITE_TRACE_STMT) {
        if (quiet_read(c, p, x)) {
            return 0;
        }
        if (c->stmt_cb != NULL && strncmp(x, "-- ", 3) != 0) {
            c->stmt_cb(c->stmt_arg, p, SQL_CAPTURE_STMT_START);
        }
        on_stmt(c, p, x);
    } else if (type == SQLITE_TRACE_PROFILE) {
        on_profile(c, p);
        if (c->stmt_cb != NULL) {
            c->stmt_cb(c->stmt_arg, p, SQL_CAPTURE_STMT_END);
        }
        if (at_rest(c) && ++c->quiet_ends >= c->quiet_wait) {
            quiet_look(c);
        }
    }
    return 0;
}

static void on_rollback(void *data)
{
    reset_txn(data);
}

/* ---- API -------------------------------------------------------------- */

int sql_capture_open(sqlite3 *db, uint64_t max_bytes, struct sql_capture **out,
                     char *why, size_t why_len)
{
    struct sql_capture *c;
    struct sql_preupdate pu;

    if (preupdate_resolve(&pu, why, why_len) != 0) {
        return SQL_ERR_INVALID;
    }
    if (pu.blobwrite == NULL) {
        sql_errmsgf(why, why_len,
                    "SQLite %s is older than 3.36.0: its sqlite3_blob_write "
                    "fires no pre-update hook, so the capture would miss "
                    "such writes",
                    sqlite3_libversion());
        return SQL_ERR_INVALID;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        sql_errmsgf(why, why_len, "out of memory");
        return SQL_ERR_NOMEM;
    }
    c->db = db;
    c->pu = pu;
    c->max_bytes = max_bytes;
    c->wanted = SQL_CHANGESET_HEADER;
    c->quiet_wait = SQL__QUIET_FIRST;
    c->pu.hook(db, on_preupdate, c);
    set_armed(c, 1);
    sqlite3_rollback_hook(db, on_rollback, c);
    *out = c;
    return 0;
}

int sql_capture_intact(struct sql_capture *c)
{
    void *pu = c->pu.hook(c->db, on_preupdate, c);
    void *rb = sqlite3_rollback_hook(c->db, on_rollback, c);
    void *tr = sqlite3_trace(c->db, NULL, NULL);
    int replaced = c->replaced;

    c->replaced = 0;
    set_armed(c, c->armed);
    return pu == c && rb == c && tr == c && !replaced;
}

unsigned sql_capture_pending(const struct sql_capture *c)
{
    if (c->n == 0 && (c->poisoned || c->too_big || c->nomem || !c->armed)) {
        return 1; /* for sql_capture_take to refuse, saying why */
    }
    return c->n > 0 ? c->n : (unsigned)c->sequence;
}

int sql_capture_take(struct sql_capture *c, const uint64_t id[2],
                     uint64_t lease, void **out, size_t *out_len, char *errmsg,
                     size_t errmsg_len)
{
    uint8_t *p;
    int rc = 0;

    if (c->nomem) {
        sql_errmsgf(errmsg, errmsg_len,
                    "out of memory while capturing the transaction");
        rc = SQL_ERR_NOMEM;
    } else if (c->poisoned) {
        sql_errmsgf(errmsg, errmsg_len, "%s", c->why);
        rc = SQL_ERR_INVALID;
    } else if (!c->armed) {
        /* A commit with nothing traced: what it wrote (a schema change
         * fires no pre-update hook) was prepared past the guard. */
        sql_errmsgf(errmsg, errmsg_len, "%s", SQL__UNARMED);
        rc = SQL_ERR_INVALID;
    } else if (c->too_big) {
        sql_errmsgf(errmsg, errmsg_len,
                    "the transaction's changeset of at least %" PRIu64
                    " bytes exceeds max_request_bytes (%" PRIu64
                    ") by %" PRIu64,
                    c->wanted, c->max_bytes, c->wanted - c->max_bytes);
        rc = SQL_ERR_TOOBIG;
    } else if (c->n == 0 && !c->sequence) {
        sql_errmsgf(errmsg, errmsg_len,
                    "nothing to send: the transaction wrote no replicated "
                    "row or schema");
        rc = SQL_ERR_INVALID;
    }
    if (rc != 0) {
        reset_txn(c);
        return rc;
    }
    p = malloc(SQL_CHANGESET_HEADER + c->len);
    if (p == NULL) {
        sql_errmsgf(errmsg, errmsg_len,
                    "out of memory (a changeset of %zu bytes)",
                    SQL_CHANGESET_HEADER + c->len);
        reset_txn(c);
        return SQL_ERR_NOMEM;
    }
    changeset_codec_header(p, id, lease, c->n);
    if (c->len > 0) {
        memcpy(p + SQL_CHANGESET_HEADER, c->buf, c->len);
    }
    *out = p;
    *out_len = SQL_CHANGESET_HEADER + c->len;
    reset_txn(c);
    return 0;
}

void sql_capture_set_gate(struct sql_capture *c, sql_capture_gate_cb gate,
                          void *arg)
{
    c->gate = gate;
    c->gate_arg = arg;
}

void sql_capture_set_stmt_cb(struct sql_capture *c, sql_capture_stmt_cb cb,
                             void *arg)
{
    c->stmt_cb = cb;
    c->stmt_arg = arg;
}

void sql_capture_reset(struct sql_capture *c)
{
    reset_txn(c);
}

void sql_capture_arm(struct sql_capture *c)
{
    /* Put back whatever the mask is, not only when c->armed says it is
     * off: a VACUUM restores the mask it saved at its start. A host
     * that set its own trace hook meanwhile: set_armed puts ours back
     * over it, and the next sql_capture_intact says that it had been
     * replaced. */
    if (sqlite3_trace(c->db, NULL, NULL) != c) {
        c->replaced = 1;
    }
    set_armed(c, 1);
}

void sql_capture_set_armed_cb(struct sql_capture *c, sql_capture_armed_cb cb,
                              void *arg)
{
    c->armed_cb = cb;
    c->armed_arg = arg;
}

void sql_capture_close(struct sql_capture *c, int closed)
{
    if (c == NULL) {
        return;
    }
    if (!closed) {
        c->pu.hook(c->db, NULL, NULL);
        sqlite3_trace_v2(c->db, 0, NULL, NULL);
        sqlite3_rollback_hook(c->db, NULL, NULL);
    }
    pop_savepoints(c, 0);
    free(c->sps);
    free(c->stmts);
    free(c->buf);
    free(c);
}
