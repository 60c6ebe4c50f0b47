/* raft_load_sql's check before the first chunk (load_check.h).
 *
 * Happy path: a private temporary database is opened, the replica's
 * schema copied into it, the script run there statement by statement in
 * one transaction; the virtual tables the script declared are read back
 * into INSERT statements added to the plan; the transaction is dropped
 * with the database.
 * Failure modes: a statement's error is the answer, naming its line
 * (nothing of the cluster changed); an object of the replica that does
 * not create on the temporary database is left out (a statement that
 * needs it then fails the check). */

#include "load_check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>

#include "../../raft/err.h"
#include "guard_check.h"
#include "precheck.h"

SQLITE_EXTENSION_INIT3

/* The replica's objects copied into the check's database. */
struct copied {
    char **names; /* their names (sqlite3_mprintf'd) */
    char **types; /* their types: table, index, view, trigger */
    unsigned n;   /* of them */
};

/* copied_free frees @c. */
static void copied_free(struct copied *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        sqlite3_free(c->names[i]);
        sqlite3_free(c->types[i]);
    }
    free(c->names);
    free(c->types);
    memset(c, 0, sizeof *c);
}

/* copy_schema creates on @db the objects of the replica @db_path but
 * raftsql's, SQLite's and those that fail (a virtual table's shadow
 * tables, which its CREATE VIRTUAL TABLE made), listing them in @c. A
 * replica that cannot be read is left out whole. */
static int copy_schema(sqlite3 *db, const char *db_path, struct copied *c)
{
    sqlite3 *src = NULL;
    sqlite3_stmt *s = NULL;
    int rc = 0;

    if (db_path == NULL || db_path[0] == '\0' ||
        sqlite3_open_v2(db_path, &src, SQLITE_OPEN_READONLY, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(src,
                           "SELECT type, name, sql FROM sqlite_schema WHERE "
                           "sql IS NOT NULL AND name NOT LIKE 'raftsql\\_%' "
                           "ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' "
                           "ESCAPE '\\' ORDER BY rowid",
                           -1, &s, NULL) != SQLITE_OK) {
        goto out;
    }
    while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(s, 0);
        const char *name = (const char *)sqlite3_column_text(s, 1);
        const char *sql = (const char *)sqlite3_column_text(s, 2);
        char **n, **t;
        if (type == NULL || name == NULL || sql == NULL ||
            sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            continue;
        }
        n = realloc(c->names, (c->n + 1) * sizeof *n);
        if (n != NULL) {
            c->names = n;
        }
        t = realloc(c->types, (c->n + 1) * sizeof *t);
        if (t != NULL) {
            c->types = t;
        }
        if (n == NULL || t == NULL) {
            rc = RAFT_NOMEM;
            break;
        }
        c->names[c->n] = sqlite3_mprintf("%s", name);
        c->types[c->n] = sqlite3_mprintf("%s", type);
        if (c->names[c->n] == NULL || c->types[c->n] == NULL) {
            sqlite3_free(c->names[c->n]);
            sqlite3_free(c->types[c->n]);
            rc = RAFT_NOMEM;
            break;
        }
        c->n++;
    }
out:
    sqlite3_finalize(s);
    sqlite3_close(src);
    return rc;
}

/* unquote writes into @out (@cap bytes) the name that token @p (@n bytes)
 * stands for, as SQLite reads it: without its "...", [...], `...` or
 * '...' quotes, a doubled quote inside read as one. Returns false when it
 * does not fit. */
static bool unquote(const char *p, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    char close = 0;
    if (n >= 2 && (p[0] == '"' || p[0] == '`' || p[0] == '\'')) {
        close = p[0];
    } else if (n >= 2 && p[0] == '[') {
        close = ']';
    }
    if (close != 0 && p[n - 1] == close) {
        p++;
        n -= 2;
    } else {
        close = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (k + 1 >= cap) {
            return false;
        }
        out[k++] = p[i];
        if (close != 0 && close != ']' && p[i] == close && i + 1 < n &&
            p[i + 1] == close) {
            i++; /* a doubled quote stands for one */
        }
    }
    out[k] = '\0';
    return true;
}

/* drop_copied drops the object of the replica named in @msg, SQLite's
 * "<type> <name> already exists" (the name as the script wrote it, quotes
 * and all), when it is one copy_schema made: the script creates it
 * itself. Returns whether it did. */
static bool drop_copied(sqlite3 *db, struct copied *c, const char *msg)
{
    const char *sp = strchr(msg, ' ');
    const char *end = strstr(msg, " already exists");
    char name[1024];
    if (sp == NULL || end == NULL || end <= sp ||
        !unquote(sp + 1, (size_t)(end - sp - 1), name, sizeof name)) {
        return false;
    }
    for (unsigned i = 0; i < c->n; i++) {
        char *sql;
        bool dropped;
        if (c->names[i][0] == '\0' || sqlite3_stricmp(c->names[i], name) != 0) {
            continue;
        }
        sql = sqlite3_mprintf("DROP %s \"%w\"",
                              strcmp(c->types[i], "table") == 0   ? "TABLE"
                              : strcmp(c->types[i], "index") == 0 ? "INDEX"
                              : strcmp(c->types[i], "view") == 0  ? "VIEW"
                                                                  : "TRIGGER",
                              c->names[i]);
        dropped =
            sql != NULL && sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK;
        sqlite3_free(sql);
        c->names[i][0] = '\0'; /* dropped once */
        return dropped;
    }
    return false;
}

/* raft_exec's check of the statement being prepared on the check's
 * database (run_stmt). */
struct stmt_check {
    struct guard_check seen; /* what note_policy noted since the prepare
                                began */
    bool on;                 /* check this statement: it is sent */
    bool alone;              /* it is a request of its own (a PRAGMA) */
    bool refused;            /* out: refused by raft_exec's policy (else a
                                bad call) */
    char why[600];           /* out: why it fails the check */
};

/* note_policy is the check's database's authorizer: it notes, as the
 * guard does for raft_exec's own check, what raft_exec's policy says of
 * the statement being prepared (guard_check_note into the stmt_check
 * @arg), and allows everything: run_stmt decides before running it. */
static int note_policy(void *arg, int action, const char *a1, const char *a2,
                       const char *db_name, const char *trigger)
{
    struct stmt_check *c = arg;
    (void)trigger;
    guard_check_note(&c->seen, action, a1, a2, db_name);
    return SQLITE_OK;
}

/* Returned by run_stmt when the statement fails raft_exec's check. */
#define LOAD_CHECK_FAILED (-1)

/* run_stmt prepares @sql (@len bytes, one statement) on @db and, when
 * @run, runs it to its end. With @c->on (the statement is sent),
 * raft_exec's check of one statement (precheck_statement: its policy,
 * a setting beside other statements, a parameter without a value)
 * applies first, before anything runs. Returns SQLite's code (its
 * message stays in sqlite3_errmsg(@db)), or LOAD_CHECK_FAILED with
 * @c->why and @c->refused. */
static int run_stmt(sqlite3 *db, const char *sql, size_t len,
                    struct stmt_check *c, bool run)
{
    sqlite3_stmt *s = NULL;
    int max_params = 0;
    int rc;

    c->seen.refused[0] = '\0';
    c->seen.setting = NULL;
    c->refused = false;
    rc = sqlite3_prepare_v2(db, sql, (int)len, &s, NULL);
    if (c->on && precheck_statement(rc == SQLITE_OK ? s : NULL, &c->seen,
                                    c->seen.setting, !c->alone, 0, &max_params,
                                    &c->refused, c->why, sizeof c->why) != 0) {
        sqlite3_finalize(s);
        return LOAD_CHECK_FAILED;
    }
    while (run && rc == SQLITE_OK && s != NULL) {
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
            break;
        }
        rc = rc == SQLITE_ROW ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK) {
        /* sqlite3_finalize keeps the statement's error as the
         * connection's. */
        (void)sqlite3_finalize(s);
        return rc;
    }
    sqlite3_finalize(s);
    return SQLITE_OK;
}

/* other_pragma tells whether statement @sql (@len bytes) is a PRAGMA
 * other than writable_schema: the check does not run it. */
static bool other_pragma(const char *sql, size_t len)
{
    size_t i = 0;
    while (i < len && strchr(" \t\r\n", sql[i]) != NULL) {
        i++;
    }
    if (len - i < 6 || strncasecmp(sql + i, "PRAGMA", 6) != 0) {
        return false;
    }
    for (size_t k = i; k + 15 <= len; k++) {
        if (strncasecmp(sql + k, "writable_schema", 15) == 0) {
            return false;
        }
    }
    return true;
}

/* fail_at writes "line L: <@sql of @len bytes, shortened>: @why" into
 * @errmsg (@errmsg_len bytes) for a statement on @line. */
static void fail_at(unsigned line, const char *sql, size_t len, const char *why,
                    char *errmsg, size_t errmsg_len)
{
    char head[81];
    size_t n = len < 60 ? len : 60;
    for (size_t j = 0; j < n; j++) {
        char ch = sql[j];
        head[j] = ch == '\n' || ch == '\r' || ch == '\t' ? ' ' : ch;
    }
    snprintf(head + n, sizeof head - n, "%s", len > 60 ? "..." : "");
    snprintf(errmsg, errmsg_len, "line %u: %s: %s", line, head, why);
}

/* check_sent applies raft_exec's check (run_stmt, @c->on) to the text
 * sent for statement @s of a plan of @text when it is not the text the
 * check runs (a virtual table's CREATE, a row rebuilt): prepared only,
 * its prepare's errors left to the text the check runs. Returns 0 or
 * RAFT_INVALID with @errmsg. */
static int check_sent(sqlite3 *db, struct stmt_check *c,
                      const struct ext_load_stmt *s, const char *text,
                      char *errmsg, size_t errmsg_len)
{
    size_t len;
    const char *sql = load_plan_stmt_text(s, text, &len);
    c->on = true;
    c->alone = s->alone;
    if (run_stmt(db, sql, len, c, false) != LOAD_CHECK_FAILED) {
        return 0;
    }
    fail_at(s->line, sql, len, c->why, errmsg, errmsg_len);
    return RAFT_INVALID;
}

/* run_script runs @p's script on @db; see load_check_run. */
static int run_script(sqlite3 *db, struct copied *c, struct stmt_check *chk,
                      const struct ext_load_plan *p, const char *text,
                      char *errmsg, size_t errmsg_len)
{
    for (unsigned i = 0; i < p->n_script; i++) {
        const struct ext_load_stmt *s = &p->script[i];
        const char *sql = text + s->offset;
        bool pragma = other_pragma(sql, s->script_len);
        int rc;
        if (s->role == EXT_LOAD_VTAB &&
            check_sent(db, chk, s, text, errmsg, errmsg_len) != 0) {
            return RAFT_INVALID;
        }
        /* The text as written: a .dump's virtual table is declared as
         * the shell does, writable_schema on. What is sent as written
         * passes raft_exec's check first. A PRAGMA other than
         * writable_schema is prepared only: its setting is the
         * cluster's. */
        chk->on = s->role == EXT_LOAD_SEND;
        chk->alone = s->alone;
        rc = run_stmt(db, sql, s->script_len, chk, !pragma);
        if (rc != SQLITE_OK && rc != LOAD_CHECK_FAILED &&
            drop_copied(db, c, sqlite3_errmsg(db))) {
            rc = run_stmt(db, sql, s->script_len, chk, !pragma);
        }
        if (rc == SQLITE_OK || (pragma && rc != LOAD_CHECK_FAILED)) {
            continue;
        }
        if (rc == SQLITE_NOMEM) {
            snprintf(errmsg, errmsg_len, "out of memory");
            return RAFT_NOMEM;
        }
        fail_at(s->line, sql, s->script_len,
                rc == LOAD_CHECK_FAILED ? chk->why : sqlite3_errmsg(db), errmsg,
                errmsg_len);
        return RAFT_INVALID;
    }
    return 0;
}

/* add_rows adds to @p, for each row of @select on @db (one text column:
 * a statement), that statement, with line @line. */
static int add_rows(sqlite3 *db, struct ext_load_plan *p, const char *select,
                    unsigned line, char *errmsg, size_t errmsg_len)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(db, select, -1, &s, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *sql = (const char *)sqlite3_column_text(s, 0);
        char *copy = sql != NULL ? strdup(sql) : NULL;
        if (copy == NULL || load_plan_add(p, copy, line) != 0) {
            sqlite3_finalize(s);
            snprintf(errmsg, errmsg_len, "out of memory");
            return RAFT_NOMEM;
        }
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
        snprintf(errmsg, errmsg_len, "reading back %.200s: %s", select,
                 sqlite3_errmsg(db));
        sqlite3_finalize(s);
        return RAFT_INVALID;
    }
    sqlite3_finalize(s);
    return 0;
}

/* rebuild adds to @p the statements that fill virtual table @v as it is
 * on @db: FTS5's configuration, then every row, through the table. */
static int rebuild(sqlite3 *db, struct ext_load_plan *p,
                   const struct ext_load_vtab *v, char *errmsg,
                   size_t errmsg_len)
{
    bool rtree = strncasecmp(v->module, "rtree", 5) == 0;
    bool fts34 = strncasecmp(v->module, "fts3", 4) == 0 ||
                 strncasecmp(v->module, "fts4", 4) == 0;
    sqlite3_str *cols = sqlite3_str_new(db), *vals = sqlite3_str_new(db);
    sqlite3_stmt *s = NULL;
    char *names = NULL, *quoted = NULL, *select = NULL, *head = NULL;
    int rc = 0;

    if (strcasecmp(v->module, "fts5") == 0) {
        head = sqlite3_mprintf("INSERT INTO \"%w\"(\"%w\", rank) VALUES(",
                               v->name, v->name);
        select = head == NULL ? NULL
                              : sqlite3_mprintf(
                                    "SELECT %Q || quote(k) || ', ' || "
                                    "quote(v) || ');' FROM \"%w_config\" "
                                    "WHERE k <> 'version' ORDER BY k",
                                    head, v->name);
        sqlite3_free(head);
        head = NULL;
        rc = select == NULL
                 ? RAFT_NOMEM
                 : add_rows(db, p, select, v->line, errmsg, errmsg_len);
        sqlite3_free(select);
        select = NULL;
        if (rc != 0) {
            goto out;
        }
    }
    /* The columns, as the table shows them (hidden ones left out);
     * R*Tree's first is its rowid. */
    select = sqlite3_mprintf("SELECT * FROM \"%w\"", v->name);
    if (select == NULL ||
        sqlite3_prepare_v2(db, select, -1, &s, NULL) != SQLITE_OK) {
        rc = select == NULL ? RAFT_NOMEM : RAFT_INVALID;
        snprintf(errmsg, errmsg_len, "virtual table %s (line %u): %s", v->name,
                 v->line, sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_free(select);
    select = NULL;
    if (!rtree) {
        sqlite3_str_appendall(cols, fts34 ? "docid" : "rowid");
        sqlite3_str_appendall(vals, fts34 ? "quote(docid)" : "quote(rowid)");
    }
    for (int i = 0; i < sqlite3_column_count(s); i++) {
        bool first = i == 0 && rtree;
        sqlite3_str_appendf(cols, "%s\"%w\"", first ? "" : ", ",
                            sqlite3_column_name(s, i));
        sqlite3_str_appendf(vals, "%squote(\"%w\")",
                            first ? "" : " || ', ' || ",
                            sqlite3_column_name(s, i));
    }
    sqlite3_finalize(s);
    s = NULL;
    names = sqlite3_str_finish(cols);
    quoted = sqlite3_str_finish(vals);
    cols = vals = NULL;
    head =
        names != NULL && quoted != NULL
            ? sqlite3_mprintf("INSERT INTO \"%w\"(%s) VALUES(", v->name, names)
            : NULL;
    select = head != NULL ? sqlite3_mprintf(
                                "SELECT %Q || %s || ');' FROM \"%w\" "
                                "ORDER BY %s",
                                head, quoted, v->name,
                                rtree   ? "1"
                                : fts34 ? "docid"
                                        : "rowid")
                          : NULL;
    rc = select == NULL ? RAFT_NOMEM
                        : add_rows(db, p, select, v->line, errmsg, errmsg_len);
out:
    sqlite3_finalize(s);
    sqlite3_free(select);
    sqlite3_free(head);
    sqlite3_free(names);
    sqlite3_free(quoted);
    sqlite3_free(sqlite3_str_finish(cols));
    sqlite3_free(sqlite3_str_finish(vals));
    if (rc == RAFT_NOMEM) {
        snprintf(errmsg, errmsg_len, "out of memory");
    }
    return rc;
}

int load_check_run(const char *db_path, struct ext_load_plan *p,
                   const char *text, bool *out_refused, char *errmsg,
                   size_t errmsg_len)
{
    struct stmt_check chk;
    struct copied c = {0};
    sqlite3 *db = NULL;
    int rc;

    memset(&chk, 0, sizeof chk);
    *out_refused = false;

    if (sqlite3_open_v2("", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        NULL) != SQLITE_OK) {
        snprintf(errmsg, errmsg_len, "a temporary database to check it: %s",
                 db != NULL ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return RAFT_IOERR;
    }
    /* raftsql, registered on every connection by a host (auto
     * extension), made it DEFENSIVE and guarded: the shell's load of a
     * .dump needs neither. */
    sqlite3_set_authorizer(db, NULL, NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 0, (int *)NULL);
    rc = copy_schema(db, db_path, &c);
    if (rc == 0) {
        /* From here on, what raft_exec's policy says of each statement
         * prepared is noted for run_stmt. */
        sqlite3_set_authorizer(db, note_policy, &chk);
        rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK
                 ? run_script(db, &c, &chk, p, text, errmsg, errmsg_len)
                 : RAFT_IOERR;
    }
    /* A virtual table declared by writing the schema table shows once
     * the schema is read again. */
    if (rc == 0 && p->n_vtabs > 0 &&
        sqlite3_exec(db, "PRAGMA writable_schema=RESET", NULL, NULL, NULL) !=
            SQLITE_OK) {
        snprintf(errmsg, errmsg_len, "reading the schema back: %s",
                 sqlite3_errmsg(db));
        rc = RAFT_INVALID;
    }
    for (unsigned i = 0; rc == 0 && i < p->n_vtabs; i++) {
        rc = rebuild(db, p, &p->vtabs[i], errmsg, errmsg_len);
    }
    /* The rows rebuilt are sent too. */
    for (unsigned i = 0; rc == 0 && i < p->n_gen; i++) {
        rc = check_sent(db, &chk, &p->gen[i], text, errmsg, errmsg_len);
    }
    *out_refused = rc == RAFT_INVALID && chk.refused;
    if (rc == RAFT_NOMEM) {
        snprintf(errmsg, errmsg_len, "out of memory");
    } else if (rc == RAFT_IOERR && errmsg[0] == '\0') {
        snprintf(errmsg, errmsg_len, "a temporary database to check it: %s",
                 sqlite3_errmsg(db));
    }
    copied_free(&c);
    sqlite3_close(db);
    return rc;
}
