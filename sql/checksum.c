/* The running replica checksum (checksum.h): the pre-update hook adds the
 * hash of every row written and subtracts that of every row deleted,
 * per table, into the running request's deltas; a request that fails
 * drops them, one that succeeds folds them into the batch's; the batch
 * stores the tables' sums in raftsql_applied.sums with the applied index
 * (one row, one page: no page more per batch), so the
 * stored sums always go with the applied index (and travel in
 * snapshots, which are the database file).
 *
 * Happy path: hook -> checksum_request_end(ok) before RELEASE ->
 * checksum_batch_store before COMMIT -> checksum_batch_end(ok).
 * Failure modes: what the hook cannot see (ALTER TABLE ... ADD/DROP
 * COLUMN, ANALYZE, sqlite_sequence, DROP TABLE, a table created with its
 * rows) is recomputed by a scan of those tables at the end of the request
 * that did it; a batch that rolls back drops its deltas and the sums are
 * read again from the database; the hook running out of memory fails the
 * request as an environmental error, so the batch is retried. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>

#include "checksum.h"
#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

static const char *const system_scanned[] = {"sqlite_sequence", "sqlite_stat1",
                                             "sqlite_stat4"};

/* find returns the index of table @name (case-insensitive, as SQLite's
 * names), or n_tables. */
static unsigned find(struct sql_checksum *ck, const char *name)
{
    if (ck->last < ck->n_tables &&
        strcasecmp(ck->tables[ck->last].name, name) == 0) {
        return ck->last;
    }
    for (unsigned i = 0; i < ck->n_tables; i++) {
        if (strcasecmp(ck->tables[i].name, name) == 0) {
            ck->last = i;
            return i;
        }
    }
    return ck->n_tables;
}

/* add appends table @name of @kind with zero sums; returns its index, or
 * n_tables when out of memory. */
static unsigned add(struct sql_checksum *ck, const char *name, int kind)
{
    struct checksum_table *t;

    if (ck->n_tables == ck->cap_tables) {
        unsigned cap = ck->cap_tables == 0 ? 16 : 2 * ck->cap_tables;
        t = realloc(ck->tables, cap * sizeof *t);
        if (t == NULL) {
            return ck->n_tables;
        }
        ck->tables = t;
        ck->cap_tables = cap;
    }
    t = &ck->tables[ck->n_tables];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (t->name == NULL) {
        return ck->n_tables;
    }
    t->seed = checksum_seed(name);
    t->kind = (uint8_t)kind;
    t->rowid = true;
    return ck->n_tables++;
}

/* push appends @i to the list @list (@n used, @cap allocated). */
static bool push(unsigned **list, unsigned *n, unsigned *cap, unsigned i)
{
    if (*n == *cap) {
        unsigned c = *cap == 0 ? 16 : 2 * *cap;
        unsigned *l = realloc(*list, c * sizeof *l);
        if (l == NULL) {
            return false;
        }
        *list = l;
        *cap = c;
    }
    (*list)[(*n)++] = i;
    return true;
}

/* in_request lists table @i among those the running request changed. */
static void in_request(struct sql_checksum *ck, unsigned i)
{
    if (!ck->tables[i].in_req) {
        if (!push(&ck->req_list, &ck->n_req, &ck->cap_req, i)) {
            ck->broken = true;
            return;
        }
        ck->tables[i].in_req = true;
    }
}

/* mark_dirty has table @name rescanned at the end of the running request
 * (listed with @kind when it was not known). */
static void mark_dirty(struct sql_checksum *ck, const char *name, int kind)
{
    unsigned i = find(ck, name);

    if (i == ck->n_tables) {
        i = add(ck, name, kind);
        if (i == ck->n_tables) {
            ck->broken = true;
            return;
        }
        ck->resync = true;
    }
    ck->tables[i].dirty = true;
    in_request(ck, i);
}

/* row_hash hashes the old (@old) or new row of the hook's change. */
static uint64_t row_hash(struct sql_checksum *ck, sqlite3 *db,
                         const struct checksum_table *t, bool old,
                         sqlite3_int64 key, int n)
{
    bool ok = true;
    uint64_t h;

    for (int c = 0; c < n; c++) {
        int rc = old ? ck->pu.old(db, c, &ck->vals[c])
                     : ck->pu.new_(db, c, &ck->vals[c]);
        if (rc != SQLITE_OK) {
            ck->broken = true;
            return 0;
        }
    }
    h = checksum_row_hash(&ck->enc, t->seed, t->rowid ? key : 0, ck->vals, n,
                          &ok);
    if (!ok) {
        ck->broken = true;
    }
    return h;
}

/* follow returns the table of a row change (@op, SQLite's) to @table
 * whose sums follow its rows, listed in the running request; NULL when
 * they do not: ignored, or marked for a rescan at the request's end (a
 * table not listed yet, or one the hook cannot follow), and
 * sqlite_sequence too after an insert into an AUTOINCREMENT table. */
static struct checksum_table *follow(struct sql_checksum *ck, const char *table,
                                     int op)
{
    struct checksum_table *t;
    unsigned i = find(ck, table);

    if (i == ck->n_tables) {
        mark_dirty(ck, table, checksum_kind_of(table, NULL));
        return NULL;
    }
    t = &ck->tables[i];
    if (t->kind == CHECKSUM_IGNORED) {
        return NULL;
    }
    if (t->autoinc && op != SQLITE_DELETE) {
        mark_dirty(ck, "sqlite_sequence", CHECKSUM_SCAN);
        t = &ck->tables[i]; /* the array may have moved */
    }
    if (t->kind != CHECKSUM_ROWS) {
        mark_dirty(ck, t->name, t->kind);
        return NULL;
    }
    in_request(ck, i);
    return t;
}

/* on_preupdate is the apply connection's pre-update hook. */
static void on_preupdate(void *data, sqlite3 *db, int op, const char *db_name,
                         const char *table, sqlite3_int64 key1,
                         sqlite3_int64 key2)
{
    struct sql_fsm *f = data;
    struct sql_checksum *ck = f->ck;
    struct checksum_table *t;
    int n;

    if (strcmp(db_name, "main") != 0 ||
        strncasecmp(table, "raftsql_", 8) == 0) {
        return;
    }
    t = follow(ck, table, op);
    if (t == NULL) {
        return;
    }
    n = ck->pu.count(db);
    if (n > ck->cap_vals) {
        sqlite3_value **v = realloc(ck->vals, (size_t)n * sizeof *v);
        if (v == NULL) {
            ck->broken = true;
            return;
        }
        ck->vals = v;
        ck->cap_vals = n;
    }
    if (op == SQLITE_DELETE || op == SQLITE_UPDATE) {
        t->req -= row_hash(ck, db, t, true, key1, n);
    }
    if (op == SQLITE_INSERT || op == SQLITE_UPDATE) {
        t->req += row_hash(ck, db, t, false, key2, n);
        ck->skew_table = (unsigned)(t - ck->tables);
        ck->skew_rowid = key2;
    }
}

void checksum_landed_row(struct sql_fsm *f, const char *table, int op,
                         int64_t old_rowid, const struct sql_value *old,
                         int64_t new_rowid, const struct sql_value *new_,
                         unsigned n)
{
    struct sql_checksum *ck = f->ck;
    struct checksum_table *t;
    bool ok = true;

    if (ck == NULL || !ck->on || strncasecmp(table, "raftsql_", 8) == 0) {
        return;
    }
    t = follow(ck, table, op);
    if (t == NULL) {
        return;
    }
    if (old != NULL) {
        t->req -= checksum_row_hash_values(
            &ck->enc, t->seed, t->rowid ? old_rowid : 0, old, n, &ok);
    }
    if (new_ != NULL) {
        t->req += checksum_row_hash_values(
            &ck->enc, t->seed, t->rowid ? new_rowid : 0, new_, n, &ok);
    }
    if (!ok) {
        ck->broken = true;
    }
}

/* clear_tables forgets every table. */
static void clear_tables(struct sql_checksum *ck)
{
    for (unsigned i = 0; i < ck->n_tables; i++) {
        free(ck->tables[i].name);
    }
    ck->n_tables = 0;
    ck->n_req = 0;
    ck->n_batch = 0;
    ck->last = 0;
    ck->committed = 0;
    ck->batch_total = 0;
}

/* on_listed takes one table of a listing: known ones get their kind,
 * new ones are added (dirty when @data's resync asks). */
struct listing {
    struct sql_checksum *ck; /* the state */
    bool mark_new;           /* rescan tables not known before */
    bool oom;                /* out of memory */
};

static int on_listed(void *data, const struct checksum_listed *l)
{
    struct listing *ls = data;
    struct sql_checksum *ck = ls->ck;
    unsigned i = find(ck, l->name);
    struct checksum_table *t;
    bool fresh = i == ck->n_tables;

    if (fresh) {
        i = add(ck, l->name, l->kind);
        if (i == ck->n_tables) {
            ls->oom = true;
            return SQLITE_NOMEM;
        }
    }
    t = &ck->tables[i];
    fresh = fresh || !t->exists || t->kind == CHECKSUM_UNRESOLVED;
    t->kind = (uint8_t)(t->pinned ? CHECKSUM_SCAN : l->kind);
    t->rowid = l->rowid;
    t->autoinc = l->autoinc;
    t->exists = true;
    if (fresh && ls->mark_new) {
        t->dirty = true;
        in_request(ck, i);
    }
    return SQLITE_OK;
}

/* list_tables lists the tables again: those gone are marked gone (and
 * rescanned, to 0, when @mark), new ones added (rescanned when @mark). */
static int list_tables(struct sql_fsm *f, bool mark)
{
    struct sql_checksum *ck = f->ck;
    struct listing ls = {ck, mark, false};
    bool *was = NULL;
    unsigned n = ck->n_tables;
    int rc;

    if (n > 0) {
        was = calloc(n, sizeof *was);
        if (was == NULL) {
            return fsm_fail(f, SQLITE_NOMEM, "checksum: list tables");
        }
    }
    for (unsigned i = 0; i < n; i++) {
        was[i] = ck->tables[i].exists;
        ck->tables[i].exists = false;
    }
    f->internal = 1;
    rc = checksum_list(f->db, on_listed, &ls);
    f->internal = 0;
    for (unsigned i = 0; rc == SQLITE_OK && mark && i < n; i++) {
        struct checksum_table *t = &ck->tables[i];
        if (was[i] && !t->exists && t->kind != CHECKSUM_IGNORED) {
            t->dirty = true;
            in_request(ck, i);
        }
    }
    free(was);
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "checksum: list tables");
    }
    return 0;
}

/* on_stored takes one table of the stored sums into the list. */
static int on_stored(void *data, const char *name, uint64_t sum, bool pinned)
{
    struct sql_checksum *ck = data;
    unsigned i = add(ck, name, CHECKSUM_UNRESOLVED);

    if (i == ck->n_tables) {
        return -1;
    }
    ck->tables[i].sum = sum;
    ck->tables[i].pinned = pinned;
    ck->tables[i].exists = true;
    ck->committed += sum;
    return 0;
}

/* load reads the stored sums (raftsql_applied.sums) and lists the
 * tables; returns 0, 1 when no sums are stored, or an error code. */
static int load(struct sql_fsm *f)
{
    struct sql_checksum *ck = f->ck;
    sqlite3_stmt *s = NULL;
    int rc, marked = 0;

    clear_tables(ck);
    f->internal = 1;
    rc = sqlite3_prepare_v2(f->db,
                            "SELECT sums, schema_sum, schema_sum_idx = idx"
                            " FROM main.raftsql_applied WHERE id = 0",
                            -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        /* Not trusted when a release before it applied batches since it
         * was stored (its index behind the applied one): computed at the
         * next batch. */
        ck->schema_known = sqlite3_column_type(s, 1) == SQLITE_INTEGER &&
                           sqlite3_column_int(s, 2) == 1;
        ck->schema_sum = (uint64_t)sqlite3_column_int64(s, 1);
        if (sqlite3_column_type(s, 0) == SQLITE_BLOB) {
            marked = 1;
            if (checksum_sums_each(sqlite3_column_blob(s, 0),
                                   (size_t)sqlite3_column_bytes(s, 0),
                                   on_stored, ck) != 0) {
                rc = SQLITE_CORRUPT;
            }
        }
    }
    sqlite3_finalize(s);
    f->internal = 0;
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        clear_tables(ck);
        return fsm_fail(f, rc, "checksum: read raftsql_applied.sums");
    }
    if (!marked) {
        clear_tables(ck);
        return 1;
    }
    ck->reload = false;
    return list_tables(f, false);
}

/* exec_internal runs @sql as our own statement. */
static int exec_internal(struct sql_fsm *f, const char *sql)
{
    int rc;

    f->internal = 1;
    rc = sqlite3_exec(f->db, sql, NULL, NULL, NULL);
    f->internal = 0;
    return rc;
}

/* encode_sums writes every table's sum as of the batch's end into
 * ck->store (checksum_sums_put). Returns false when out of memory. */
static bool encode_sums(struct sql_checksum *ck)
{
    ck->store.len = 0;
    if (!checksum_sums_put(&ck->store, NULL, 0, false)) {
        return false;
    }
    for (unsigned i = 0; i < ck->n_tables; i++) {
        const struct checksum_table *t = &ck->tables[i];
        uint64_t sum = t->sum + t->batch;
        if (t->kind == CHECKSUM_IGNORED || (!t->exists && sum == 0)) {
            continue;
        }
        if (!checksum_sums_put(&ck->store, t->name, sum, t->pinned)) {
            return false;
        }
    }
    return true;
}

/* init computes every table's sum by a scan and stores them, in one
 * transaction of its own. */
static int init(struct sql_fsm *f)
{
    struct sql_checksum *ck = f->ck;
    sqlite3_stmt *s = NULL;
    int rc;

    clear_tables(ck);
    rc = exec_internal(f, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK) {
        rc = fsm_fail(f, rc, "checksum: begin");
        goto err;
    }
    rc = list_tables(f, false);
    for (unsigned i = 0; rc == 0 && i < ck->n_tables; i++) {
        struct checksum_table *t = &ck->tables[i];
        f->internal = 1;
        rc = checksum_scan(f->db, &ck->enc, t->name, t->rowid, &t->sum);
        f->internal = 0;
        rc = rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "checksum: scan");
        ck->committed += t->sum;
    }
    if (rc == 0 && !encode_sums(ck)) {
        rc = fsm_fail(f, SQLITE_NOMEM, "checksum: store");
    }
    if (rc == 0) {
        f->internal = 1;
        rc = schema_sum_compute(f->db, &ck->schema_sum);
        f->internal = 0;
        rc = rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "checksum: schema sum");
    }
    if (rc == 0) {
        f->internal = 1;
        rc = sqlite3_prepare_v2(f->db,
                                "UPDATE main.raftsql_applied SET sums = ?1,"
                                " schema_sum = ?2, schema_sum_idx = idx"
                                " WHERE id = 0",
                                -1, &s, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_blob(s, 1, ck->store.p, (int)ck->store.len,
                              SQLITE_STATIC);
            sqlite3_bind_int64(s, 2, (sqlite3_int64)ck->schema_sum);
            rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK
                                                : sqlite3_errcode(f->db);
        }
        sqlite3_finalize(s);
        f->internal = 0;
        rc = rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "checksum: store");
    }
    if (rc == 0) {
        rc = exec_internal(f, "COMMIT");
        rc = rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "checksum: commit");
    }
    if (rc == 0) {
        ck->schema_known = true;
        return 0;
    }
err:
    if (!sqlite3_get_autocommit(f->db)) {
        exec_internal(f, "ROLLBACK");
    }
    clear_tables(ck);
    return rc;
}

int checksum_reload(struct sql_fsm *f)
{
    struct sql_checksum *ck = f->ck;
    int rc;

    if (ck == NULL || !ck->on) {
        return 0;
    }
    ck->schema_known = false;
    ck->schema_force = false;
    rc = load(f);
    if (rc == 1) {
        rc = init(f);
    }
    if (rc == 0) {
        /* The stored schema sum stands for the file as it is now: a
         * schema changed while no node ran stays as the scan finds it. */
        f->internal = 1;
        rc = schema_sum_cookie(f->db, ck->cookie_stmts, &ck->schema_at);
        f->internal = 0;
        rc = rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "checksum: schema cookie");
    }
    return rc;
}

/* turn_off removes the hook and the stored sums, keeping @why. */
static int turn_off(struct sql_fsm *f, const char *why)
{
    struct sql_checksum *ck = f->ck;
    int rc;

    if (ck->on) {
        ck->pu.hook(f->db, NULL, NULL);
    }
    ck->on = false;
    sql_errmsgf(ck->why, sizeof ck->why, "%s", why);
    clear_tables(ck);
    ck->schema_known = false;
    rc = exec_internal(f,
                       "UPDATE main.raftsql_applied SET sums = NULL,"
                       " schema_sum = NULL, schema_sum_idx = NULL"
                       " WHERE id = 0");
    return rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "checksum: forget the sums");
}

int checksum_enable(struct sql_fsm *f, bool on)
{
    struct sql_checksum *ck = f->ck;
    char why[200];
    int rc;

    if (ck == NULL) {
        ck = f->ck = calloc(1, sizeof *ck);
        if (ck == NULL) {
            return fsm_fail(f, SQLITE_NOMEM, "checksum");
        }
    }
    if (!on) {
        return turn_off(f, "off (checksum=off)");
    }
    if (preupdate_resolve(&ck->pu, why, sizeof why) != 0) {
        char msg[sizeof why + 40];
        sql_errmsgf(msg, sizeof msg, "unavailable: %s", why);
        return turn_off(f, msg);
    }
    ck->on = true;
    ck->why[0] = '\0';
    rc = checksum_reload(f);
    if (rc != 0) {
        ck->on = false;
        sql_errmsgf(ck->why, sizeof ck->why, "failed: %s", f->errmsg);
        return rc;
    }
    ck->pu.hook(f->db, on_preupdate, f);
    return 0;
}

void checksum_free(struct sql_fsm *f)
{
    struct sql_checksum *ck = f->ck;

    if (ck == NULL) {
        return;
    }
    if (ck->on) {
        ck->pu.hook(f->db, NULL, NULL);
    }
    clear_tables(ck);
    schema_sum_cookie_free(ck->cookie_stmts);
    free(ck->store.p);
    free(ck->tables);
    free(ck->req_list);
    free(ck->batch_list);
    free(ck->enc.p);
    free(ck->vals);
    free(ck);
    f->ck = NULL;
}

/* keyword_is says whether statement text @sql starts, after blanks and
 * comments, with keyword @kw (case-insensitive). */
static bool keyword_is(const char *sql, const char *kw)
{
    size_t n = strlen(kw);

    for (;;) {
        while (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r') {
            sql++;
        }
        if (sql[0] == '-' && sql[1] == '-') {
            sql = strchr(sql, '\n');
            if (sql == NULL) {
                return false;
            }
        } else if (sql[0] == '/' && sql[1] == '*') {
            sql = strstr(sql + 2, "*/");
            if (sql == NULL) {
                return false;
            }
            sql += 2;
        } else {
            break;
        }
    }
    return strncasecmp(sql, kw, n) == 0 &&
           !(sql[n] == '_' || (sql[n] >= 'a' && sql[n] <= 'z') ||
             (sql[n] >= 'A' && sql[n] <= 'Z') ||
             (sql[n] >= '0' && sql[n] <= '9'));
}

void checksum_statement(struct sql_fsm *f, sqlite3_stmt *s)
{
    struct sql_checksum *ck = f->ck;
    const char *sql;

    if (ck == NULL || !ck->on || (sql = sqlite3_sql(s)) == NULL ||
        sqlite3_stmt_readonly(s)) {
        return;
    }
    if (keyword_is(sql, "CREATE") || keyword_is(sql, "DROP") ||
        keyword_is(sql, "ALTER")) {
        ck->resync = true;
        if (keyword_is(sql, "ALTER") && strcasestr(sql, "DEFAULT") != NULL) {
            ck->alter_default = true;
        }
    }
    if (keyword_is(sql, "ANALYZE") || strcasestr(sql, "sqlite_") != NULL) {
        ck->resync = true;
        for (size_t i = 0; i < sizeof system_scanned / sizeof *system_scanned;
             i++) {
            mark_dirty(ck, system_scanned[i], CHECKSUM_SCAN);
        }
    }
}

void checksum_altered(struct sql_fsm *f, const char *name)
{
    struct sql_checksum *ck = f->ck;
    unsigned i;

    if (ck == NULL || !ck->on || name == NULL) {
        return;
    }
    mark_dirty(ck, name, CHECKSUM_UNRESOLVED);
    i = find(ck, name);
    if (i < ck->n_tables) {
        ck->tables[i].altered = true;
    }
}

void checksum_rescan(struct sql_fsm *f, const char *name)
{
    struct sql_checksum *ck = f->ck;

    if (ck == NULL || !ck->on) {
        return;
    }
    if (name == NULL) {
        ck->resync = true;
        return;
    }
    mark_dirty(ck, name,
               strncasecmp(name, "sqlite_", 7) == 0 ? CHECKSUM_SCAN
                                                    : CHECKSUM_UNRESOLVED);
}

void checksum_rescan_listed(struct sql_fsm *f, const char *name)
{
    struct sql_checksum *ck = f->ck;
    unsigned i;

    if (ck == NULL || !ck->on) {
        return;
    }
    i = find(ck, name);
    if (i < ck->n_tables && ck->tables[i].kind != CHECKSUM_IGNORED) {
        ck->tables[i].dirty = true;
        in_request(ck, i);
    }
}

int checksum_moved(struct sql_fsm *f, const char *name, bool *out)
{
    struct sql_checksum *ck = f->ck;
    struct checksum_buf buf;
    uint64_t scanned = 0, running = 0;
    bool rowid = true;
    unsigned i;
    int rc;

    *out = false;
    if (ck == NULL || !ck->on || ck->reload) {
        return 0;
    }
    i = find(ck, name);
    if (i < ck->n_tables) {
        const struct checksum_table *t = &ck->tables[i];
        running = t->sum + t->batch + t->req;
        rowid = t->kind == CHECKSUM_UNRESOLVED || t->rowid;
    }
    memset(&buf, 0, sizeof buf);
    f->internal = 1;
    rc = checksum_scan(f->db, &buf, name, rowid, &scanned);
    f->internal = 0;
    free(buf.p);
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "checksum: scan");
    }
    *out = scanned != running;
    return 0;
}

void checksum_rescan_touched(struct sql_fsm *f)
{
    struct sql_checksum *ck = f->ck;

    if (ck == NULL || !ck->on) {
        return;
    }
    ck->resync = true;
    for (unsigned k = 0; k < ck->n_req; k++) {
        ck->tables[ck->req_list[k]].dirty = true;
    }
}

/* request_reset forgets the running request's notes. */
static void request_reset(struct sql_checksum *ck)
{
    for (unsigned k = 0; k < ck->n_req; k++) {
        struct checksum_table *t = &ck->tables[ck->req_list[k]];
        t->req = 0;
        t->dirty = false;
        t->in_req = false;
        t->altered = false;
    }
    ck->n_req = 0;
    ck->resync = false;
    ck->alter_default = false;
    ck->broken = false;
}

int checksum_request_end(struct sql_fsm *f, bool ok)
{
    struct sql_checksum *ck = f->ck;
    int rc = 0;

    if (ck == NULL || !ck->on) {
        return 0;
    }
    if (!ok) {
        request_reset(ck);
        return 0;
    }
    if (ck->broken) {
        request_reset(ck);
        return fsm_fail(f, SQLITE_NOMEM, "checksum: hook");
    }
    if (ck->resync) {
        rc = list_tables(f, true);
    }
    for (unsigned k = 0; rc == 0 && k < ck->n_req; k++) {
        struct checksum_table *t = &ck->tables[ck->req_list[k]];
        if (t->altered && ck->alter_default && t->kind != CHECKSUM_IGNORED) {
            t->pinned = true;
            t->kind = CHECKSUM_SCAN;
        }
        if (t->dirty && t->kind != CHECKSUM_IGNORED) {
            uint64_t v = 0;
            f->internal = 1;
            rc = t->exists
                     ? checksum_scan(f->db, &ck->enc, t->name, t->rowid, &v)
                     : SQLITE_OK;
            f->internal = 0;
            if (rc != SQLITE_OK) {
                rc = fsm_fail(f, rc, "checksum: scan");
                break;
            }
            t->req = v - t->sum - t->batch;
        }
        t->batch += t->req;
        ck->batch_total += t->req;
        if (!t->touched) {
            if (!push(&ck->batch_list, &ck->n_batch, &ck->cap_batch,
                      ck->req_list[k])) {
                rc = fsm_fail(f, SQLITE_NOMEM, "checksum");
                break;
            }
            t->touched = true;
        }
        t->req = 0;
    }
    if (rc != 0) {
        /* The caller rolls the batch back: its deltas go with it. */
        ck->reload = true;
    }
    request_reset(ck);
    return rc;
}

int checksum_batch_begin(struct sql_fsm *f)
{
    struct sql_checksum *ck = f->ck;
    int rc;

    if (ck == NULL || !ck->on || !ck->reload) {
        return 0;
    }
    rc = load(f);
    if (rc == 1) {
        rc = fsm_fail(f, SQLITE_CORRUPT,
                      "checksum: raftsql_applied lost its sums");
    }
    return rc;
}

/* schema_store binds to parameter @param of @s the schema sum as of the
 * batch's end when the batch moved the header's numbers (its own schema
 * changes, a PRAGMA user_version of a request, a landed plain write's),
 * applied or recorded a changeset with schema statements
 * (checksum_schema_changed), or none is stored yet; else leaves it NULL
 * (the stored one stays). Returns 0 or an error code. */
static int schema_store(struct sql_fsm *f, sqlite3_stmt *s, int param)
{
    struct sql_checksum *ck = f->ck;
    struct schema_cookie now;
    int rc;

    f->internal = 1;
    rc = schema_sum_cookie(f->db, ck->cookie_stmts, &now);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "checksum: schema cookie");
    }
    if (ck->schema_known && !ck->schema_force &&
        memcmp(&now, &ck->schema_at, sizeof now) == 0) {
        return 0;
    }
    f->internal = 1;
    rc = schema_sum_compute(f->db, &ck->pending_sum);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "checksum: schema sum");
    }
    ck->pending_at = now;
    ck->schema_pending = true;
    sqlite3_bind_int64(s, param, (sqlite3_int64)ck->pending_sum);
    return 0;
}

void checksum_schema_changed(struct sql_fsm *f)
{
    if (f->ck != NULL && f->ck->on) {
        f->ck->schema_force = true;
    }
}

int checksum_batch_store(struct sql_fsm *f, sqlite3_stmt *s, int param,
                         int schema_param)
{
    struct sql_checksum *ck = f->ck;

    if (ck == NULL || !ck->on) {
        return 0; /* the statement keeps the stored sums */
    }
    if (ck->n_batch > 0) {
        if (!encode_sums(ck)) {
            return fsm_fail(f, SQLITE_NOMEM, "checksum: store");
        }
        sqlite3_bind_blob(s, param, ck->store.p, (int)ck->store.len,
                          SQLITE_STATIC);
    }
    return schema_store(f, s, schema_param);
}

void checksum_batch_end(struct sql_fsm *f, bool ok)
{
    struct sql_checksum *ck = f->ck;
    unsigned i;

    if (ck == NULL || !ck->on) {
        return;
    }
    request_reset(ck);
    if (ok && ck->schema_pending) {
        ck->schema_known = true;
        ck->schema_sum = ck->pending_sum;
        ck->schema_at = ck->pending_at;
        ck->schema_force = false;
    }
    ck->schema_pending = false;
    for (unsigned k = 0; k < ck->n_batch; k++) {
        struct checksum_table *t = &ck->tables[ck->batch_list[k]];
        if (ok) {
            t->sum += t->batch;
        }
        t->batch = 0;
        t->touched = false;
    }
    ck->n_batch = 0;
    if (ok) {
        ck->committed += ck->batch_total;
    } else {
        ck->reload = true;
    }
    ck->batch_total = 0;
    /* Tables gone for good leave the list. */
    for (i = 0; ok && i < ck->n_tables;) {
        struct checksum_table *t = &ck->tables[i];
        if (!t->exists && t->sum == 0) {
            free(t->name);
            *t = ck->tables[--ck->n_tables];
        } else {
            i++;
        }
    }
    ck->last = 0;
}

#ifdef RAFTSQL_TEST_FAULTS
void checksum_test_skew(struct sql_fsm *f, uint64_t index)
{
    const char *env = getenv("RAFTSQL_TEST_APPLY_SKEW");
    struct sql_checksum *ck = f->ck;
    char *sql;

    if (env == NULL || strtoull(env, NULL, 10) != index || ck == NULL ||
        ck->skew_table >= ck->n_tables) {
        return;
    }
    sql = sqlite3_mprintf("DELETE FROM main.\"%w\" WHERE rowid = %lld",
                          ck->tables[ck->skew_table].name, ck->skew_rowid);
    if (sql != NULL) {
        int rc = exec_internal(f, sql);
        fprintf(stderr,
                "raftsql: TEST FAULT RAFTSQL_TEST_APPLY_SKEW: entry %llu "
                "applied differently (%s: %s)\n",
                (unsigned long long)index, sql, sqlite3_errstr(rc));
        sqlite3_free(sql);
    }
}
#endif

uint64_t checksum_value(const struct sql_fsm *f)
{
    const struct sql_checksum *ck = f->ck;

    return ck == NULL ? 0 : ck->committed + ck->batch_total;
}

int sql_fsm_checksum_enable(struct sql_fsm *f, int on)
{
    return checksum_enable(f, on != 0);
}

int sql_fsm_checksum(const struct sql_fsm *f, uint64_t *out)
{
    if (f->ck == NULL || !f->ck->on) {
        return 0;
    }
    *out = checksum_value(f);
    return 1;
}

const char *sql_fsm_checksum_why(const struct sql_fsm *f)
{
    return f->ck == NULL ? "off (checksum=off)" : f->ck->why;
}
