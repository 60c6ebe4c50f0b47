/* Replaying a changeset (changeset.h) on the apply connection, inside the
 * batch transaction of sql_fsm_apply, and telling from the file alone
 * whether its writer's own commit already holds it.
 *
 * Happy path: changeset_apply opens the entry's SAVEPOINT, asks
 * whether the database already shows the changeset's effect (the
 * writer's local commit on this node) and, when not, replays its records
 * in order: each row record is one INSERT, UPDATE or DELETE that
 * addresses the row by rowid (rowid tables) or by its PRIMARY KEY
 * (WITHOUT ROWID tables), with triggers and foreign keys off
 * (SQLITE_DBCONFIG_ENABLE_TRIGGER and SQLITE_DBCONFIG_ENABLE_FKEY, which
 * act inside a transaction, unlike PRAGMA foreign_keys): the writer's
 * trigger and foreign-key action rows were captured as records of their
 * own, so nothing may fire a second time. A schema record runs its text.
 * Then RELEASE.
 *
 * Landed, from the file alone (DESIGN.md "Exactly once across crashes"):
 * the writer held the lease, so its transaction read the state this
 * connection has before the entry; the file holds either that state (the
 * writer's commit did not happen) or that state with the changeset's
 * effect (it did). changeset_landed finds a row whose state the
 * changeset changes (its state before the first record that touches it
 * differs from its state after the last one) and reads it: equal to the
 * after state, landed; to the before state, not; else the replica
 * diverged. A changeset that changes no row's state (an insert and a
 * delete of one row, an update to equal values) replays to the same
 * effect either way. A changeset with schema statements is landed when
 * the schema cookie moved since this connection's last own commit
 * (f->schema_version): one of them took effect, so the writer committed.
 * When it did not move, every schema statement failed or did nothing
 * (in-transaction ones may have failed: SQL_CHANGE_SCHEMA_IN_TXN) and
 * the schema is the same on either side, so its rows tell as above; a
 * row after a schema statement that is in neither state does not tell
 * (its table may be one the statement replaces, on a file before it).
 *
 * Failure modes: a record that does not apply (no such table, a row
 * missing or already there, a schema statement of an autocommit writer
 * that fails) means this replica is not in the state the writer read:
 * SQL_ERR_DIVERGED with the record named, and the batch rolls back. A
 * schema statement its writer ran inside a transaction may have failed
 * there unseen (SQL_CHANGE_SCHEMA_IN_TXN): replayed in a savepoint under
 * the writer's settings, it fails here exactly when it failed there, and
 * is then skipped; unless the failure depends on this replica (no such
 * function, collation or module: a divergence, try_schema). SQLite's
 * environmental failures (I/O, full disk, memory, lock) are returned as
 * such.
 *
 * Cost: the tables a changeset touches are looked up once per changeset
 * (pragma table_list and table_xinfo) and their statements prepared once
 * per changeset; the landed check reads one row in the common case. */

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>

#include "changeset.h"
#include "codec.h"
#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* One table as a changeset replays it, learnt from the apply
 * connection's schema (equal to the writer's). */
struct table {
    char *name;           /* NUL-terminated copy of the records' name */
    int n_cols;           /* columns, in table_xinfo order */
    char **cols;          /* their names (malloc'd) */
    int *pk;              /* per column: 1-based PRIMARY KEY position, or 0 */
    int *v;               /* per column: its value in a record's row image,
                           or -1 (a VIRTUAL column has none) */
    int n_vals;           /* values per row image: the columns not
                           VIRTUAL */
    int n_pk;             /* PRIMARY KEY columns */
    int *w;               /* the columns written: not generated, not the
                           rowid alias (the rowid is written instead) */
    int n_w;              /* how many */
    bool rowid;           /* a rowid table */
    sqlite3_stmt *ins;    /* INSERT of a whole row */
    sqlite3_stmt *upd;    /* UPDATE of a whole row, by key */
    sqlite3_stmt *del;    /* DELETE by key */
    sqlite3_stmt *sel;    /* SELECT of the written columns, by key */
    sqlite3_value **dflt; /* per column: its DEFAULT's value (SELECT of the
                             default's text), NULL for none, a NULL one,
                             or one that did not evaluate */
    bool *real;           /* per column: REAL affinity (real_affinity) */
};

struct changeset_cache;

/* One changeset being applied. */
struct replay {
    struct sql_fsm *f;
    const struct sql_changeset *cs;
    uint64_t index;                /* the entry's log index */
    struct changeset_cache *cache; /* f->tables: the tables learnt */
    unsigned *of;  /* per record: its table, UINT_MAX for schema */
    bool shadow;   /* SQLITE_DBCONFIG_DEFENSIVE is off for a shadow
                          table's statements (allow_shadow_writes) */
    int defensive; /* what it was before, while @shadow */
};

/* diverged words record @i (0-based) that does not apply. */
static int diverged(struct replay *r, unsigned i, const char *what)
{
    sql_errmsgf(r->f->errmsg, sizeof r->f->errmsg,
                "entry %" PRIu64
                ": changeset record %u does not apply on "
                "this replica (it is not in the state the writer read): %s",
                r->index, i + 1, what);
    return SQL_ERR_DIVERGED;
}

/* sqlite_err maps SQLite failure @rc of record @i: an environmental one
 * as such (fsm_fail), any other as a divergence. */
static int sqlite_err(struct replay *r, unsigned i, int rc)
{
    if (fsm_is_environmental(rc)) {
        return fsm_fail(r->f, rc, "apply a changeset");
    }
    return diverged(r, i, sqlite3_errmsg(r->f->db));
}

/* allow_shadow_writes turns SQLITE_DBCONFIG_DEFENSIVE off on the apply
 * connection for the rest of the changeset: SQLite refuses, at prepare
 * time, writes to a virtual table's shadow tables (its module's writes,
 * recorded) on a DEFENSIVE connection, so their statements, the landed
 * check's included, need it off. Only then: any change of the setting
 * expires every prepared statement of the connection (the request
 * statements and its own, prepared again at their next use), which cost
 * every plain commit its applier's record twice over. */
static void allow_shadow_writes(struct replay *r)
{
    if (!r->shadow) {
        sqlite3_db_config(r->f->db, SQLITE_DBCONFIG_DEFENSIVE, -1,
                          &r->defensive);
        sqlite3_db_config(r->f->db, SQLITE_DBCONFIG_DEFENSIVE, 0, NULL);
        r->shadow = true;
    }
}

static void table_free(struct table *t)
{
    free(t->name);
    for (int c = 0; c < t->n_cols && t->cols != NULL; c++) {
        free(t->cols[c]);
    }
    free(t->cols);
    free(t->pk);
    free(t->v);
    free(t->w);
    for (int c = 0; c < t->n_cols && t->dflt != NULL; c++) {
        sqlite3_value_free(t->dflt[c]);
    }
    free(t->dflt);
    free(t->real);
    sqlite3_finalize(t->ins);
    sqlite3_finalize(t->upd);
    sqlite3_finalize(t->del);
    sqlite3_finalize(t->sel);
    memset(t, 0, sizeof *t);
}

/* The tables learnt, kept from one changeset to the next while the
 * schema is the one they were learnt from (PRAGMA schema_version, read
 * at each changeset's start): a plain commit's record, and every replay,
 * looked its table up (two pragma queries) and prepared its four
 * statements again, about 90 us of the record's 250 on this machine.
 * Dropped after a schema record, after a changeset that turned DEFENSIVE
 * off for a shadow table (its statements would not prepare again once
 * it is back on), when the database is replaced (changeset_cache_clear)
 * and with the connection. The apply thread's. */
struct changeset_cache {
    struct table *tables; /* n of cap */
    unsigned n, cap;
    int64_t schema;        /* schema_version they were learnt at */
    bool valid;            /* @schema holds: no schema record since */
    sqlite3_stmt *version; /* PRAGMA main.schema_version */
};

void changeset_cache_clear(struct sql_fsm *f)
{
    struct changeset_cache *c = f->tables;

    if (c == NULL) {
        return;
    }
    for (unsigned k = 0; k < c->n; k++) {
        table_free(&c->tables[k]);
    }
    c->n = 0;
    c->valid = false;
}

void changeset_cache_free(struct sql_fsm *f)
{
    struct changeset_cache *c = f->tables;

    if (c == NULL) {
        return;
    }
    changeset_cache_clear(f);
    free(c->tables);
    sqlite3_finalize(c->version);
    free(c);
    f->tables = NULL;
}

/* cache_open makes @r's table cache current: created on first use, and
 * emptied when the schema is not the one its tables were learnt from;
 * with room for @n more tables (one changeset's records at most). */
static int cache_open(struct replay *r, unsigned n)
{
    struct sql_fsm *f = r->f;
    struct changeset_cache *c = f->tables;
    int64_t v = 0;
    int rc;

    if (c == NULL) {
        c = calloc(1, sizeof *c);
        if (c == NULL) {
            return fsm_fail(f, SQLITE_NOMEM, "changeset tables");
        }
        f->tables = c;
    }
    if (c->version == NULL) {
        f->internal = 1;
        rc = sqlite3_prepare_v2(f->db, "PRAGMA main.schema_version", -1,
                                &c->version, NULL);
        f->internal = 0;
        if (rc != SQLITE_OK) {
            return fsm_fail(f, rc, "read schema_version");
        }
    }
    rc = sqlite3_step(c->version);
    if (rc == SQLITE_ROW) {
        v = sqlite3_column_int64(c->version, 0);
    }
    sqlite3_reset(c->version);
    if (rc != SQLITE_ROW) {
        return fsm_fail(f, rc, "read schema_version");
    }
    if (!c->valid || v != c->schema) {
        changeset_cache_clear(f);
        c->schema = v;
        c->valid = true;
    }
    if (c->n + n > c->cap) {
        unsigned cap = c->n + n + 8;
        struct table *t = realloc(c->tables, cap * sizeof *t);
        if (t == NULL) {
            return fsm_fail(f, SQLITE_NOMEM, "changeset tables");
        }
        memset(t + c->cap, 0, (cap - c->cap) * sizeof *t);
        c->tables = t;
        c->cap = cap;
    }
    r->cache = c;
    return 0;
}

/* cache_drop empties @r's table cache at once (a schema record ran:
 * what the tables were learnt from may have changed). */
static void cache_drop(struct replay *r)
{
    changeset_cache_clear(r->f);
}

/* put_where appends @t's key condition: rowid = ?@k, or its PRIMARY KEY
 * columns in key order, bound from ?@k on. */
static void put_where(sqlite3_str *s, const struct table *t, int k)
{
    sqlite3_str_appendall(s, " WHERE ");
    if (t->rowid) {
        sqlite3_str_appendf(s, "rowid = ?%d", k);
        return;
    }
    for (int p = 1; p <= t->n_pk; p++) {
        for (int c = 0; c < t->n_cols; c++) {
            if (t->pk[c] == p) {
                sqlite3_str_appendf(s, "%s\"%w\" = ?%d", p > 1 ? " AND " : "",
                                    t->cols[c], k + p - 1);
            }
        }
    }
}

/* prepare finishes statement text @s and prepares it into *@out. */
static int prepare(struct replay *r, sqlite3_str *s, sqlite3_stmt **out)
{
    char *sql = sqlite3_str_finish(s);
    int rc;

    if (sql == NULL) {
        return fsm_fail(r->f, SQLITE_NOMEM, "changeset statement");
    }
    r->f->internal = 1;
    rc = sqlite3_prepare_v2(r->f->db, sql, -1, out, NULL);
    r->f->internal = 0;
    sqlite3_free(sql);
    if (rc != SQLITE_OK) {
        return fsm_fail(r->f, rc, "prepare a changeset statement");
    }
    return 0;
}

/* prepare_all builds @t's four statements. */
static int prepare_all(struct replay *r, struct table *t)
{
    sqlite3 *db = r->f->db;
    sqlite3_str *s;
    int k, rc;

    /* INSERT INTO main."t"(rowid, "a", ...) VALUES(?1, ?2, ...) */
    s = sqlite3_str_new(db);
    sqlite3_str_appendf(s, "INSERT INTO main.\"%w\"(", t->name);
    k = 0;
    if (t->rowid) {
        sqlite3_str_appendall(s, "rowid");
        k++;
    }
    for (int i = 0; i < t->n_w; i++, k++) {
        sqlite3_str_appendf(s, "%s\"%w\"", k > 0 ? ", " : "", t->cols[t->w[i]]);
    }
    sqlite3_str_appendall(s, ") VALUES(");
    for (int i = 1; i <= k; i++) {
        sqlite3_str_appendf(s, "%s?%d", i > 1 ? ", " : "", i);
    }
    sqlite3_str_appendall(s, ")");
    if ((rc = prepare(r, s, &t->ins)) != 0) {
        return rc;
    }

    /* UPDATE main."t" SET rowid = ?1, "a" = ?2, ... WHERE key */
    s = sqlite3_str_new(db);
    sqlite3_str_appendf(s, "UPDATE main.\"%w\" SET ", t->name);
    k = 0;
    if (t->rowid) {
        sqlite3_str_appendall(s, "rowid = ?1");
        k++;
    }
    for (int i = 0; i < t->n_w; i++, k++) {
        sqlite3_str_appendf(s, "%s\"%w\" = ?%d", k > 0 ? ", " : "",
                            t->cols[t->w[i]], k + 1);
    }
    put_where(s, t, k + 1);
    if ((rc = prepare(r, s, &t->upd)) != 0) {
        return rc;
    }

    s = sqlite3_str_new(db);
    sqlite3_str_appendf(s, "DELETE FROM main.\"%w\"", t->name);
    put_where(s, t, 1);
    if ((rc = prepare(r, s, &t->del)) != 0) {
        return rc;
    }

    s = sqlite3_str_new(db);
    sqlite3_str_appendall(s, "SELECT 1");
    for (int i = 0; i < t->n_w; i++) {
        sqlite3_str_appendf(s, ", \"%w\"", t->cols[t->w[i]]);
    }
    sqlite3_str_appendf(s, " FROM main.\"%w\"", t->name);
    put_where(s, t, 1);
    return prepare(r, s, &t->sel);
}

/* Record tables: UINT_MAX for a schema record, NOT_HERE for a table not
 * (or not yet, or not so) in the schema, UNRESOLVED before lookup. */
#define NOT_HERE (UINT_MAX - 1)
#define UNRESOLVED (UINT_MAX - 2)

/* default_value evaluates a column's DEFAULT, @text as table_xinfo gives
 * it, on @db: its value (sqlite3_value_dup'd), or NULL for a NULL one and
 * one that does not evaluate. Caller sets f->internal. */
static sqlite3_value *default_value(sqlite3 *db, const char *text)
{
    sqlite3_stmt *s = NULL;
    sqlite3_value *v = NULL;
    char *sql = sqlite3_mprintf("SELECT (%s)", text);

    if (sql != NULL && sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW &&
        sqlite3_column_type(s, 0) != SQLITE_NULL) {
        v = sqlite3_value_dup(sqlite3_column_value(s, 0));
    }
    sqlite3_finalize(s);
    sqlite3_free(sql);
    return v;
}

/* real_affinity says whether a column declared with type @type (NULL
 * for none) has REAL affinity, by SQLite's rules (datatype3.html, 3.1):
 * no "INT", "CHAR", "CLOB", "TEXT" or "BLOB", not empty, and "REAL",
 * "FLOA" or "DOUB", in any case. */
static bool real_affinity(const char *type)
{
    if (type == NULL || type[0] == '\0' || strcasestr(type, "INT") != NULL ||
        strcasestr(type, "CHAR") != NULL || strcasestr(type, "CLOB") != NULL ||
        strcasestr(type, "TEXT") != NULL || strcasestr(type, "BLOB") != NULL) {
        return false;
    }
    return strcasestr(type, "REAL") != NULL ||
           strcasestr(type, "FLOA") != NULL || strcasestr(type, "DOUB") != NULL;
}

/* table_load fills @t for table @name of record @i from the schema.
 * Returns 0, NOT_FOUND_SOFT when @soft and the table is not there, or an
 * error code. */
#define NOT_FOUND_SOFT (-2)
static int table_load(struct replay *r, unsigned i, const char *name,
                      struct table *t, bool soft)
{
    sqlite3 *db = r->f->db;
    sqlite3_stmt *s = NULL;
    int rc, cap = 0, alias = -1;
    bool found = false;

    t->name = strdup(name);
    if (t->name == NULL) {
        return fsm_fail(r->f, SQLITE_NOMEM, "changeset table");
    }
    r->f->internal = 1;
    rc = sqlite3_prepare_v2(db,
                            "SELECT wr, type = 'shadow' FROM pragma_table_list "
                            "WHERE schema = 'main' AND type IN ('table', "
                            "'shadow') AND name = ?1 COLLATE NOCASE",
                            -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            found = true;
            t->rowid = sqlite3_column_int(s, 0) == 0;
            if (sqlite3_column_int(s, 1)) {
                allow_shadow_writes(r);
            }
            rc = SQLITE_DONE;
        }
    }
    sqlite3_finalize(s);
    s = NULL;
    if (rc == SQLITE_DONE && found) {
        rc =
            sqlite3_prepare_v2(db,
                               "SELECT name, type, pk, hidden, dflt_value FROM "
                               "pragma_table_xinfo(?1, 'main') ORDER BY cid",
                               -1, &s, NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
            const char *col = (const char *)sqlite3_column_text(s, 0);
            const char *type = (const char *)sqlite3_column_text(s, 1);
            int hidden = sqlite3_column_int(s, 3);

            if (t->n_cols == cap) {
                int ncap = cap > 0 ? 2 * cap : 8;
                char **c = realloc(t->cols, (size_t)ncap * sizeof *c);
                int *p =
                    c != NULL ? realloc(t->pk, (size_t)ncap * sizeof *p) : NULL;
                int *v =
                    p != NULL ? realloc(t->v, (size_t)ncap * sizeof *v) : NULL;
                int *w =
                    v != NULL ? realloc(t->w, (size_t)ncap * sizeof *w) : NULL;
                sqlite3_value **d =
                    w != NULL ? realloc(t->dflt, (size_t)ncap * sizeof *d)
                              : NULL;
                bool *re = d != NULL
                               ? realloc(t->real, (size_t)ncap * sizeof *re)
                               : NULL;
                if (c != NULL) {
                    t->cols = c;
                }
                if (p != NULL) {
                    t->pk = p;
                }
                if (v != NULL) {
                    t->v = v;
                }
                if (w != NULL) {
                    t->w = w;
                }
                if (d != NULL) {
                    t->dflt = d;
                }
                if (re == NULL) {
                    rc = SQLITE_NOMEM;
                    break;
                }
                t->real = re;
                cap = ncap;
            }
            t->dflt[t->n_cols] = NULL;
            t->real[t->n_cols] = real_affinity(type);
            t->cols[t->n_cols] = strdup(col != NULL ? col : "");
            if (t->cols[t->n_cols] == NULL) {
                rc = SQLITE_NOMEM;
                break;
            }
            t->pk[t->n_cols] = sqlite3_column_int(s, 2);
            if (t->pk[t->n_cols] > 0) {
                t->n_pk++;
                if (t->pk[t->n_cols] == 1 && type != NULL &&
                    strcasecmp(type, "INTEGER") == 0) {
                    alias = t->n_cols;
                }
            }
            /* hidden 2: VIRTUAL generated (no value in the row image),
             * 3: STORED generated (its value there, never written). */
            if (sqlite3_column_type(s, 4) == SQLITE_TEXT) {
                t->dflt[t->n_cols] =
                    default_value(db, (const char *)sqlite3_column_text(s, 4));
            }
            t->v[t->n_cols] = hidden == 2 ? -1 : t->n_vals++;
            if (hidden != 2 && hidden != 3) {
                t->w[t->n_w++] = t->n_cols;
            }
            t->n_cols++;
        }
    }
    sqlite3_finalize(s);
    r->f->internal = 0;
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        return fsm_fail(r->f, rc, "read a changeset table's columns");
    }
    if ((!found || t->n_cols == 0) && soft) {
        return NOT_FOUND_SOFT;
    }
    if (!found || t->n_cols == 0) {
        char what[300];
        sql_errmsgf(what, sizeof what, "no table %s", name);
        return diverged(r, i, what);
    }
    if (t->rowid && t->n_pk == 1 && alias >= 0) {
        /* The INTEGER PRIMARY KEY is the rowid: written as rowid. */
        int k = 0;
        for (int j = 0; j < t->n_w; j++) {
            if (t->w[j] != alias) {
                t->w[k++] = t->w[j];
            }
        }
        t->n_w = k;
    }
    if (!t->rowid && t->n_pk == 0) {
        return diverged(r, i, "a WITHOUT ROWID table without a key");
    }
    return prepare_all(r, t);
}

/* lookup finds or loads the table of row record @i into r->of[i]. When
 * @soft, a table that is not there, or not with the record's columns,
 * gives NOT_HERE rather than a divergence. */
static int lookup(struct replay *r, unsigned i, bool soft)
{
    const struct sql_change *c = &r->cs->changes[i];
    char name[512];
    unsigned k;
    int rc;

    if (c->table_len >= sizeof name) {
        return diverged(r, i, "table name too long");
    }
    memcpy(name, c->table, c->table_len);
    name[c->table_len] = '\0';
    for (k = 0; k < r->cache->n; k++) {
        if (strcmp(r->cache->tables[k].name, name) == 0) {
            break;
        }
    }
    if (k == r->cache->n) {
        rc = table_load(r, i, name, &r->cache->tables[k], soft);
        if (rc != 0) {
            table_free(&r->cache->tables[k]);
        }
        if (rc == NOT_FOUND_SOFT) {
            r->of[i] = NOT_HERE;
            return 0;
        }
        if (rc != 0) {
            return rc;
        }
        r->cache->n++;
    }
    if ((int)c->n_cols != r->cache->tables[k].n_vals) {
        char what[600];
        if (soft) {
            r->of[i] = NOT_HERE;
            return 0;
        }
        sql_errmsgf(what, sizeof what,
                    "table %s has %d stored columns, the changeset %u", name,
                    r->cache->tables[k].n_vals, c->n_cols);
        return diverged(r, i, what);
    }
    r->of[i] = k;
    return 0;
}

/* forget makes every row record be looked up again (in the cache, or
 * learnt anew after cache_drop). */
static void forget(struct replay *r)
{
    for (unsigned i = 0; i < r->cs->n; i++) {
        r->of[i] =
            r->cs->changes[i].kind == SQL_CHANGE_SCHEMA ? UINT_MAX : UNRESOLVED;
    }
}

/* bind_row binds @t's written columns of @row from parameter @k on.
 * Returns the next parameter. */
static int bind_row(sqlite3_stmt *s, const struct table *t,
                    const struct sql_value *row, int k)
{
    for (int i = 0; i < t->n_w; i++) {
        fsm_bind_value(s, k++, &row[t->v[t->w[i]]]);
    }
    return k;
}

/* bind_key binds the key of a row (@rowid, or @row's PRIMARY KEY) from
 * parameter @k on. */
static void bind_key(sqlite3_stmt *s, const struct table *t, int64_t rowid,
                     const struct sql_value *row, int k)
{
    if (t->rowid) {
        sqlite3_bind_int64(s, k, rowid);
        return;
    }
    for (int c = 0; c < t->n_cols; c++) {
        if (t->pk[c] > 0) {
            fsm_bind_value(s, k + t->pk[c] - 1, &row[t->v[c]]);
        }
    }
}

/* run_stmt steps @s once to its end and resets it; returns the step's
 * code. */
static int run_stmt(struct replay *r, sqlite3_stmt *s)
{
    int rc;

    r->f->internal = 1;
    rc = sqlite3_step(s);
    r->f->internal = 0;
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

/* replay_row applies row record @i. */
static int replay_row(struct replay *r, unsigned i)
{
    const struct sql_change *c = &r->cs->changes[i];
    struct table *t = &r->cache->tables[r->of[i]];
    sqlite3_stmt *s;
    int rc, k;

    switch (c->kind) {
        case SQL_CHANGE_INSERT:
            s = t->ins;
            k = 1;
            if (t->rowid) {
                sqlite3_bind_int64(s, k++, c->new_rowid);
            }
            bind_row(s, t, c->new_row, k);
            break;
        case SQL_CHANGE_UPDATE:
            s = t->upd;
            k = 1;
            if (t->rowid) {
                sqlite3_bind_int64(s, k++, c->new_rowid);
            }
            k = bind_row(s, t, c->new_row, k);
            bind_key(s, t, c->old_rowid, c->old_row, k);
            break;
        default:
            s = t->del;
            bind_key(s, t, c->old_rowid, c->old_row, 1);
            break;
    }
    rc = run_stmt(r, s);
    if (rc != SQLITE_DONE) {
        return sqlite_err(r, i, rc);
    }
    if (c->kind != SQL_CHANGE_INSERT && sqlite3_changes(r->f->db) != 1) {
        char what[300];
        sql_errmsgf(what, sizeof what, "no row of %s to %s at that key",
                    t->name,
                    c->kind == SQL_CHANGE_UPDATE ? "update" : "delete");
        return diverged(r, i, what);
    }
    return 0;
}

/* The writer's settings a SQL_CHANGE_SCHEMA_IN_TXN record carries. */
static const struct {
    int op;
    uint8_t bit;
} schema_settings[] = {
    {SQLITE_DBCONFIG_ENABLE_FKEY, SQL_SCHEMA_FKEY},
    {SQLITE_DBCONFIG_ENABLE_TRIGGER, SQL_SCHEMA_TRIGGER},
    {SQLITE_DBCONFIG_LEGACY_ALTER_TABLE, SQL_SCHEMA_LEGACY_ALTER},
    {SQLITE_DBCONFIG_DQS_DDL, SQL_SCHEMA_DQS_DDL},
};
#define N_SCHEMA_SETTINGS (sizeof schema_settings / sizeof schema_settings[0])

/* set_settings puts the apply connection's settings to the writer's
 * @bits, keeping the previous ones in @prev; restore_settings puts
 * @prev back. */
static void set_settings(sqlite3 *db, uint8_t bits, int prev[])
{
    for (size_t k = 0; k < N_SCHEMA_SETTINGS; k++) {
        sqlite3_db_config(db, schema_settings[k].op, -1, &prev[k]);
        sqlite3_db_config(db, schema_settings[k].op,
                          (bits & schema_settings[k].bit) != 0, NULL);
    }
}

static void restore_settings(sqlite3 *db, const int prev[])
{
    for (size_t k = 0; k < N_SCHEMA_SETTINGS; k++) {
        sqlite3_db_config(db, schema_settings[k].op, prev[k], NULL);
    }
}

/* replica_lacks says whether SQLite message @msg names something this
 * replica may lack while the writer has it (a function, collation,
 * module or tokenizer a host registered): a failure that says nothing
 * about the writer's run. */
static bool replica_lacks(const char *msg)
{
    static const char *const words[] = {
        "no such function",  "no such collation", "no such module",
        "no such tokenizer", "unknown tokenizer", "wrong number of arguments",
        "not authorized",
    };

    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        if (msg != NULL && strcasestr(msg, words[k]) != NULL) {
            return true;
        }
    }
    return false;
}

/* run_schema prepares and runs the first statement of @sql, under the
 * apply connection's authorizer as any request's, and points *@tail
 * after it (at the end when only blanks are left). Returns SQLite's
 * code (SQLITE_OK for a finished statement), its message copied to
 * @msg. */
static int run_schema(struct sql_fsm *f, const char *sql, const char **tail,
                      char *msg, size_t msg_len)
{
    sqlite3_stmt *s = NULL;
    int rc;

    f->deny[0] = '\0';
    rc = sqlite3_prepare_v2(f->db, sql, -1, &s, tail);
    if (rc == SQLITE_OK && s == NULL) {
        *tail = sql + strlen(sql);
    } else if (rc == SQLITE_OK) {
        checksum_statement(f, s);
        f->in_request = 1;
        rc = sqlite3_step(s);
        f->in_request = 0;
        if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
            rc = SQLITE_OK;
        }
    }
    sql_errmsgf(msg, msg_len, "%s", sqlite3_errmsg(f->db));
    sqlite3_finalize(s);
    return rc;
}

/* try_schema runs in-transaction schema record @i (its text is @sql):
 * inside a savepoint, under the writer's settings. The replica holds the
 * state the writer's connection had when it ran the statement (the
 * records before it replayed on the writer's starting state), and the
 * settings are the writer's, so the statement fails here exactly when it
 * failed there, unless the failure depends on the replica: a function,
 * collation or module it lacks (a divergence, said so), or its
 * environment (I/O, memory: fsm_fail). A failure of the writer's own
 * (CREATE UNIQUE INDEX on duplicate rows, an ALTER TABLE check) is
 * skipped as the writer's host skipped it: rolled back to the
 * savepoint, and the tables the checksum saw touched are rescanned. */
static int try_schema(struct replay *r, unsigned i, const char *sql)
{
    const struct sql_change *c = &r->cs->changes[i];
    struct sql_fsm *f = r->f;
    int prev[N_SCHEMA_SETTINGS];
    const char *tail;
    char msg[400];
    int rc;

    f->internal = 1;
    rc = sqlite3_exec(f->db, "SAVEPOINT raftsql_schema", NULL, NULL, NULL);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "changeset schema savepoint");
    }
    set_settings(f->db, c->settings, prev);
    rc = run_schema(f, sql, &tail, msg, sizeof msg);
    restore_settings(f->db, prev);
    if (sqlite3_get_autocommit(f->db)) {
        /* The whole batch transaction was rolled back (OR ROLLBACK, an
         * I/O error): the writer's would have been too, and nothing
         * would have been sent. */
        if (rc != SQLITE_OK && fsm_is_environmental(rc)) {
            return fsm_fail(f, rc, "apply a changeset");
        }
        return diverged(r, i,
                        "its schema statement rolled the whole "
                        "transaction back here");
    }
    if (rc != SQLITE_OK) {
        if (fsm_is_environmental(rc)) {
            return fsm_fail(f, rc, "apply a changeset");
        }
        if (f->deny[0] != '\0') {
            return diverged(r, i, f->deny);
        }
        if (replica_lacks(msg)) {
            char what[600];
            sql_errmsgf(what, sizeof what,
                        "its schema statement fails here for a reason "
                        "that depends on this replica, not on the state "
                        "the writer had: %s (load what the writer's "
                        "connection had: the same functions, collations "
                        "and modules)",
                        msg);
            return diverged(r, i, what);
        }
        /* The writer's run failed the same way: skipped there too. */
        checksum_rescan_touched(f);
        f->internal = 1;
        rc =
            sqlite3_exec(f->db, "ROLLBACK TO raftsql_schema", NULL, NULL, NULL);
        f->internal = 0;
        if (rc != SQLITE_OK) {
            return fsm_fail(f, rc, "changeset schema rollback");
        }
    }
    f->internal = 1;
    rc = sqlite3_exec(f->db, "RELEASE raftsql_schema", NULL, NULL, NULL);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "changeset schema release");
    }
    return 0;
}

/* replay_schema runs schema record @i's statement, under the apply
 * connection's authorizer as any request's; one run inside a
 * transaction by its writer goes through try_schema. */
static int replay_schema(struct replay *r, unsigned i)
{
    const struct sql_change *c = &r->cs->changes[i];
    struct sql_fsm *f = r->f;
    const char *tail;
    char *sql, msg[400];
    int rc;

    sql = malloc(c->sql_len + 1);
    if (sql == NULL) {
        return fsm_fail(f, SQLITE_NOMEM, "changeset schema statement");
    }
    memcpy(sql, c->sql, c->sql_len);
    sql[c->sql_len] = '\0';
    if (c->in_txn) {
        rc = try_schema(r, i, sql);
        free(sql);
        return rc;
    }
    tail = sql;
    rc = SQLITE_OK;
    while (rc == SQLITE_OK && *tail != '\0') {
        rc = run_schema(f, tail, &tail, msg, sizeof msg);
    }
    free(sql);
    if (rc != SQLITE_OK) {
        if (f->deny[0] != '\0') {
            return diverged(r, i, f->deny);
        }
        return sqlite_err(r, i, rc);
    }
    return 0;
}

/* value_matches compares a column value read from the database with a
 * changeset's value, as value_equal. In a column of REAL affinity
 * (@real) SQLite stores a whole number as an integer and reads it back
 * as a real (datatype3.html, 3.2), and the writer's row image
 * (sqlite3_preupdate_old/new) holds the integer: the two are the same
 * value. */
static bool value_matches(sqlite3_value *v, const struct sql_value *b,
                          bool real)
{
    struct sql_value a;

    if (real && b->type == SQL_INTEGER &&
        sqlite3_value_type(v) == SQLITE_FLOAT) {
        return sqlite3_value_double(v) == (double)b->integer;
    }
    memset(&a, 0, sizeof a);
    switch (sqlite3_value_type(v)) {
        case SQLITE_INTEGER:
            a.type = SQL_INTEGER;
            a.integer = sqlite3_value_int64(v);
            break;
        case SQLITE_FLOAT:
            a.type = SQL_FLOAT;
            a.real = sqlite3_value_double(v);
            break;
        case SQLITE_TEXT:
            a.type = SQL_TEXT;
            a.bytes.p = sqlite3_value_text(v);
            a.bytes.len = (size_t)sqlite3_value_bytes(v);
            break;
        case SQLITE_BLOB:
            a.type = SQL_BLOB;
            a.bytes.p = sqlite3_value_blob(v);
            a.bytes.len = (size_t)sqlite3_value_bytes(v);
            break;
        default:
            a.type = SQL_NULL;
            break;
    }
    return codec_value_equal(&a, b);
}

/* The state of one row: absent, or present with values @row. */
/* value_is says whether @v and @d are the same value: type and bytes. */
static bool value_is(sqlite3_value *v, sqlite3_value *d)
{
    int type = sqlite3_value_type(v);

    if (type != sqlite3_value_type(d)) {
        return false;
    }
    switch (type) {
        case SQLITE_INTEGER:
            return sqlite3_value_int64(v) == sqlite3_value_int64(d);
        case SQLITE_FLOAT:
            return sqlite3_value_double(v) == sqlite3_value_double(d);
        case SQLITE_TEXT:
        case SQLITE_BLOB: {
            int n = sqlite3_value_bytes(v);
            const void *a = type == SQLITE_TEXT
                                ? (const void *)sqlite3_value_text(v)
                                : sqlite3_value_blob(v);
            const void *b = type == SQLITE_TEXT
                                ? (const void *)sqlite3_value_text(d)
                                : sqlite3_value_blob(d);
            return n == sqlite3_value_bytes(d) &&
                   (n == 0 || memcmp(a, b, (size_t)n) == 0);
        }
        default:
            return true;
    }
}

struct state {
    bool present;
    const struct sql_value *row;
};

/* same_key says whether record @a's key (@a_new: its new key, else its
 * old one) and record @b's (@b_new likewise) name the same row. */
static bool same_key(const struct replay *r, unsigned a, bool a_new, unsigned b,
                     bool b_new)
{
    const struct sql_change *x = &r->cs->changes[a], *y = &r->cs->changes[b];
    const struct table *t;

    if (r->of[a] != r->of[b]) {
        return false;
    }
    t = &r->cache->tables[r->of[a]];
    if (t->rowid) {
        return (a_new ? x->new_rowid : x->old_rowid) ==
               (b_new ? y->new_rowid : y->old_rowid);
    }
    for (int c = 0; c < t->n_cols; c++) {
        if (t->pk[c] > 0 &&
            !codec_value_equal(
                a_new ? &x->new_row[t->v[c]] : &x->old_row[t->v[c]],
                b_new ? &y->new_row[t->v[c]] : &y->old_row[t->v[c]])) {
            return false;
        }
    }
    return true;
}

static bool has_old(const struct sql_change *c)
{
    return c->kind == SQL_CHANGE_UPDATE || c->kind == SQL_CHANGE_DELETE;
}

static bool has_new(const struct sql_change *c)
{
    return c->kind == SQL_CHANGE_UPDATE || c->kind == SQL_CHANGE_INSERT;
}

/* before_after gives the state of the row named by record @i's key
 * (@is_new: its new key) before the first record that touches it and
 * after the last one. */
static void before_after(const struct replay *r, unsigned i, bool is_new,
                         struct state *before, struct state *after)
{
    const struct sql_change *cs = r->cs->changes;
    unsigned n = r->cs->n;

    before->present = false;
    before->row = NULL;
    for (unsigned j = 0; j < n; j++) {
        if (r->of[j] >= NOT_HERE) {
            continue;
        }
        if (has_old(&cs[j]) && same_key(r, j, false, i, is_new)) {
            before->present = true;
            before->row = cs[j].old_row;
            break;
        }
        if (has_new(&cs[j]) && same_key(r, j, true, i, is_new)) {
            break; /* first made by this changeset */
        }
    }
    after->present = false;
    after->row = NULL;
    for (unsigned j = n; j-- > 0;) {
        if (r->of[j] >= NOT_HERE) {
            continue;
        }
        if (has_new(&cs[j]) && same_key(r, j, true, i, is_new)) {
            after->present = true;
            after->row = cs[j].new_row;
            break;
        }
        if (has_old(&cs[j]) && same_key(r, j, false, i, is_new)) {
            break; /* deleted, or moved away, last */
        }
    }
}

/* same_state compares two states of a row of @t over its written
 * columns. */
static bool same_state(const struct table *t, const struct state *a,
                       const struct state *b)
{
    if (a->present != b->present) {
        return false;
    }
    if (!a->present) {
        return true;
    }
    for (int i = 0; i < t->n_w; i++) {
        int k = t->v[t->w[i]];
        if (!codec_value_equal(&a->row[k], &b->row[k])) {
            return false;
        }
    }
    return true;
}

/* matches says (in *@out) whether the file's row of @t at the key of @key
 * (@rowid, or @key_row's PRIMARY KEY) is in state @st. */
static int matches(struct replay *r, unsigned i, const struct table *t,
                   int64_t rowid, const struct sql_value *key_row,
                   const struct state *st, bool before, bool *out)
{
    sqlite3_stmt *s = t->sel;
    int rc;

    bind_key(s, t, rowid, key_row, 1);
    r->f->internal = 1;
    rc = sqlite3_step(s);
    r->f->internal = 0;
    if (rc == SQLITE_DONE) {
        *out = !st->present;
    } else if (rc == SQLITE_ROW) {
        *out = st->present;
        for (int c = 0; *out && c < t->n_w; c++) {
            int col = t->w[c];
            sqlite3_value *v = sqlite3_column_value(s, c + 1);
            const struct sql_value *b = &st->row[t->v[col]];
            /* A row stored before ALTER TABLE ADD COLUMN holds no value
             * for the column: SQLite reads its DEFAULT there, but 3.40's
             * sqlite3_preupdate_old gave the writer NULL for it. */
            *out = value_matches(v, b, t->real[col]) ||
                   (before && b->type == SQL_NULL && t->dflt[col] != NULL &&
                    value_is(v, t->dflt[col]));
        }
        rc = SQLITE_DONE;
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE) {
        return sqlite_err(r, i, rc);
    }
    return 0;
}

/* landed says (in *@out) whether the file already holds the changeset's
 * effect (see the top of the file). */
static int landed(struct replay *r, bool *out)
{
    const struct sql_changeset *cs = r->cs;
    unsigned first_schema = cs->n;
    int rc;

    *out = false;
    forget(r);
    for (unsigned i = 0; i < cs->n; i++) {
        if (r->of[i] == UNRESOLVED && (rc = lookup(r, i, true)) != 0) {
            return rc;
        }
        if (r->of[i] == UINT_MAX && first_schema == cs->n) {
            first_schema = i;
        }
    }
    if (first_schema < cs->n && r->f->ck != NULL && r->f->ck->on) {
        /* A moved schema cookie is the writer's commit of a schema
         * statement that took effect; one that did not move leaves the
         * schema as before, whichever side the file is on. */
        int64_t v = 0;
        rc = snapshot_query_int(r->f->db, "PRAGMA main.schema_version", &v);
        if (rc != SQLITE_OK) {
            return fsm_fail(r->f, rc, "read schema_version");
        }
        if (v != r->f->schema_version) {
            *out = true;
            return 0;
        }
    }
    for (unsigned i = cs->n; i-- > 0;) {
        const struct sql_change *c = &cs->changes[i];
        const struct table *t;
        struct state before, after;
        bool is_new, at_after = false, at_before = false;

        if (r->of[i] == UINT_MAX) {
            continue;
        }
        if (r->of[i] == NOT_HERE) {
            continue; /* created or altered by the changeset itself */
        }
        t = &r->cache->tables[r->of[i]];
        is_new = has_new(c);
        before_after(r, i, is_new, &before, &after);
        if (same_state(t, &before, &after)) {
            continue; /* this row's state does not tell */
        }
        rc =
            matches(r, i, t, is_new ? c->new_rowid : c->old_rowid,
                    is_new ? c->new_row : c->old_row, &after, false, &at_after);
        if (rc == 0 && !at_after) {
            rc = matches(r, i, t, is_new ? c->new_rowid : c->old_rowid,
                         is_new ? c->new_row : c->old_row, &before, true,
                         &at_before);
        }
        if (rc != 0) {
            return rc;
        }
        if (!at_after && !at_before && i > first_schema) {
            /* After a schema statement: its table may be one that the
             * statement replaces, on a file before the changeset. */
            continue;
        }
        if (!at_after && !at_before) {
            char what[400];
            sql_errmsgf(what, sizeof what,
                        "the row of %s it changes is neither as before "
                        "nor as after it",
                        t->name);
            return diverged(r, i, what);
        }
        *out = at_after;
        return 0;
    }
    /* No row's state tells: the writer's commit may still have moved
     * sqlite_sequence, which no record carries (a row inserted and
     * deleted in one transaction, an INSERT of no row: SQLite writes the
     * counter anyway). The running checksum holds it as before the
     * changeset, so a file whose sqlite_sequence differs from it holds
     * the writer's commit; one that does not replays to the same effect
     * either way. */
    return checksum_moved(r->f, "sqlite_sequence", out);
}

/* set_replay_mode turns triggers and foreign keys off (@on) for a
 * replay, or back to what they were (@prev, from the first call). */
static void set_replay_mode(sqlite3 *db, bool on, int prev[2])
{
    if (on) {
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, -1, &prev[0]);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FKEY, -1, &prev[1]);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FKEY, 0, NULL);
    } else {
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, prev[0], NULL);
        sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_FKEY, prev[1], NULL);
    }
}

/* note_landed counts the changeset's rows in the running checksum, as
 * the apply connection's hook would have had it replayed them: the
 * writer's commit put them in the file, unseen by that hook. From the
 * changeset's whole rows: no table is scanned but sqlite_sequence and
 * those the hook cannot follow either (checksum_landed_row). After a
 * schema statement every table is listed again and rescanned. */
static int note_landed(struct replay *r)
{
    static const int ops[] = {
        [SQL_CHANGE_INSERT] = SQLITE_INSERT,
        [SQL_CHANGE_UPDATE] = SQLITE_UPDATE,
        [SQL_CHANGE_DELETE] = SQLITE_DELETE,
    };
    char name[512];

    for (unsigned i = 0; i < r->cs->n; i++) {
        const struct sql_change *c = &r->cs->changes[i];

        if (c->kind == SQL_CHANGE_SCHEMA) {
            checksum_rescan(r->f, NULL);
            continue;
        }
        if (c->kind > SQL_CHANGE_DELETE || c->kind < SQL_CHANGE_INSERT) {
            continue; /* the decoder knows no other */
        }
        if (c->table_len >= sizeof name) {
            checksum_rescan(r->f, NULL);
            continue;
        }
        memcpy(name, c->table, c->table_len);
        name[c->table_len] = '\0';
        checksum_landed_row(r->f, name, ops[c->kind], c->old_rowid, c->old_row,
                            c->new_rowid, c->new_row, c->n_cols);
    }
    /* One row per AUTOINCREMENT table: its counters move without a row
     * telling (an insert of no row, a row inserted and deleted). */
    checksum_rescan_listed(r->f, "sqlite_sequence");
    return 0;
}

/* replay_all replays every record in order, triggers and foreign keys
 * off. */
static int replay_all(struct replay *r)
{
    int prev[2] = {1, 0};
    int rc = 0;

    forget(r);
    set_replay_mode(r->f->db, true, prev);
    for (unsigned i = 0; rc == 0 && i < r->cs->n; i++) {
        if (r->of[i] == UINT_MAX) {
            /* As raft_exec would run it: the connection's own settings. */
            set_replay_mode(r->f->db, false, prev);
            rc = replay_schema(r, i);
            set_replay_mode(r->f->db, true, prev);
            cache_drop(r);
            forget(r);
            continue;
        }
        if (r->of[i] == UNRESOLVED && (rc = lookup(r, i, false)) != 0) {
            break;
        }
        rc = replay_row(r, i);
    }
    set_replay_mode(r->f->db, false, prev);
    return rc;
}

/* The statements of settle_sequences, in order; the first counts. */
static const char *const settle_sql[] = {
    "SELECT count(*) FROM main.sqlite_sequence AS s WHERE rowid <> "
    "(SELECT count(*) FROM main.sqlite_sequence AS o WHERE o.name <= s.name)",
    "UPDATE main.sqlite_sequence SET rowid = -rowid",
    "UPDATE main.sqlite_sequence SET rowid = (SELECT count(*) FROM "
    "main.sqlite_sequence AS o WHERE o.name <= sqlite_sequence.name)",
};

/* settle_sequences brings sqlite_sequence to one form on every replica
 * after every changeset. A writer's INSERT that adds no row into an
 * AUTOINCREMENT table with no sqlite_sequence row adds one of seq 0 on its
 * file alone (no record carries it; INSERT INTO t SELECT ... matching
 * nothing, a table remade while empty), which also shifts the rowids of
 * the rows added after it: rows of seq 0 are deleted (a seq of 0 numbers
 * the table's next rows as no row does: max(seq, largest rowid) + 1),
 * then, when the rowids are not the rows' ranks by name, they are made
 * so. Both depend on the rows' names and counters only, which the
 * replicas share. */
static int settle_sequences(struct sql_fsm *f)
{
    int64_t n = 0, unranked = 0;
    int changed = 0;
    int rc;

    f->internal = 1;
    rc = snapshot_query_int(f->db,
                            "SELECT count(*) FROM main.sqlite_schema WHERE "
                            "type = 'table' AND name = 'sqlite_sequence'",
                            &n);
    if (rc == SQLITE_OK && n > 0) {
        rc = sqlite3_exec(f->db,
                          "DELETE FROM main.sqlite_sequence WHERE seq = 0",
                          NULL, NULL, NULL);
        changed = rc == SQLITE_OK && sqlite3_changes(f->db) > 0;
    }
    if (rc == SQLITE_OK && n > 0) {
        rc = snapshot_query_int(f->db, settle_sql[0], &unranked);
    }
    for (unsigned i = 1; rc == SQLITE_OK && unranked > 0 &&
                         i < sizeof settle_sql / sizeof *settle_sql;
         i++) {
        rc = sqlite3_exec(f->db, settle_sql[i], NULL, NULL, NULL);
        changed = 1;
    }
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "settle sqlite_sequence");
    }
    if (changed) {
        checksum_rescan(f, "sqlite_sequence");
    }
    return 0;
}

int changeset_apply(struct sql_fsm *f, const struct sql_changeset *cs,
                    uint64_t index, enum changeset_mode mode, bool *out_landed)
{
    struct replay r;
    bool done = mode == CHANGESET_LANDED;
    int rc = 0;

    memset(&r, 0, sizeof r);
    r.f = f;
    r.cs = cs;
    r.index = index;
    r.of = calloc(cs->n + 1, sizeof *r.of);
    if (r.of == NULL) {
        rc = fsm_fail(f, SQLITE_NOMEM, "apply a changeset");
    }
    if (rc == 0 && mode != CHANGESET_LANDED) {
        rc = cache_open(&r, cs->n + 1); /* (LANDED looks up no table) */
    }
    if (rc == 0) {
        forget(&r);
    }
    if (rc == 0 && mode != CHANGESET_LANDED && mode != CHANGESET_REPLAY) {
        rc = landed(&r, &done);
    }
    if (rc == 0 && mode != CHANGESET_CHECK) {
        rc = done ? note_landed(&r) : replay_all(&r);
    }
    if (rc == 0 && mode != CHANGESET_CHECK) {
        rc = settle_sequences(f);
    }
    if (out_landed != NULL) {
        *out_landed = done;
    }
    free(r.of);
    if (r.shadow) {
        sqlite3_db_config(f->db, SQLITE_DBCONFIG_DEFENSIVE, r.defensive, NULL);
        changeset_cache_clear(f);
    }
    for (unsigned i = 0; i < cs->n; i++) {
        if (cs->changes[i].kind == SQL_CHANGE_SCHEMA) {
            /* Its schema_version may not be the one read at the start
             * (a statement took effect, or a rollback undid one). */
            changeset_cache_clear(f);
            break;
        }
    }
    return rc;
}
