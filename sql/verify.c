/* sql_checksum_verify (sql.h): the replica checksum recomputed from the
 * database file by a full scan, table by table, beside the running sums
 * stored with the applied index, on a read-only connection of its own in
 * one read transaction. */

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sqlite3ext.h>

#include "checksum.h"
#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* Virtual machine steps between two calls of the interrupted hook: a few
 * hundred microseconds of a scan. */
#define SQL__VERIFY_PROGRESS_STEPS 10000

/* A table's stored sum (sql_verify's copy of raftsql_applied.sums). */
struct stored {
    char *name;   /* malloc'd */
    uint64_t sum; /* its running sum */
    bool seen;    /* a listed table matched it */
};

/* The scan in progress. */
struct verify {
    sqlite3 *db;                          /* the read-only connection */
    struct checksum_buf buf;              /* row encodings */
    struct sql_verify *out;               /* the result being built */
    struct stored *stored;                /* the stored sums */
    unsigned n_stored;                    /* used */
    unsigned cap_stored;                  /* allocated */
    unsigned cap;                         /* allocated at out->differ */
    const struct sql_verify_hooks *hooks; /* the caller's, or NULL */
};

/* note_differ adds table @name to the result. */
static int note_differ(struct verify *v, const char *name, uint64_t stored,
                       uint64_t scanned)
{
    struct sql_verify *o = v->out;

    if (o->n_differ == v->cap) {
        unsigned cap = v->cap == 0 ? 8 : 2 * v->cap;
        struct sql_verify_table *d = realloc(o->differ, cap * sizeof *d);
        if (d == NULL) {
            return SQLITE_NOMEM;
        }
        o->differ = d;
        v->cap = cap;
    }
    o->differ[o->n_differ].name = strdup(name);
    if (o->differ[o->n_differ].name == NULL) {
        return SQLITE_NOMEM;
    }
    o->differ[o->n_differ].stored = stored;
    o->differ[o->n_differ].scanned = scanned;
    o->n_differ++;
    return SQLITE_OK;
}

/* on_stored keeps one stored table sum. */
static int on_stored(void *data, const char *name, uint64_t sum, bool pinned)
{
    struct verify *v = data;
    (void)pinned;

    if (v->n_stored == v->cap_stored) {
        unsigned cap = v->cap_stored == 0 ? 16 : 2 * v->cap_stored;
        struct stored *s = realloc(v->stored, cap * sizeof *s);
        if (s == NULL) {
            return SQLITE_NOMEM;
        }
        v->stored = s;
        v->cap_stored = cap;
    }
    v->stored[v->n_stored].name = strdup(name);
    if (v->stored[v->n_stored].name == NULL) {
        return SQLITE_NOMEM;
    }
    v->stored[v->n_stored].sum = sum;
    v->stored[v->n_stored].seen = false;
    v->n_stored++;
    v->out->stored += sum;
    return 0;
}

/* on_table scans one listed table and compares it with its stored sum
 * (none: 0, an empty table). */
static int on_table(void *data, const struct checksum_listed *t)
{
    struct verify *v = data;
    uint64_t scanned = 0, stored = 0;
    int rc;

    rc = checksum_scan(v->db, &v->buf, t->name, t->rowid, &scanned);
    if (rc != SQLITE_OK) {
        return rc;
    }
    for (unsigned i = 0; i < v->n_stored; i++) {
        if (!v->stored[i].seen && strcasecmp(v->stored[i].name, t->name) == 0) {
            v->stored[i].seen = true;
            stored = v->stored[i].sum;
            break;
        }
    }
    v->out->scanned += scanned;
    if (scanned != stored) {
        return note_differ(v, t->name, stored, scanned);
    }
    return SQLITE_OK;
}

/* read_stored reads the applied index, the stored sums and the stored
 * schema sum, and says in out->available and out->schema_available
 * whether there are any. */
static int read_stored(struct verify *v)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = sqlite3_prepare_v2(v->db,
                            "SELECT idx, sums, schema_sum, schema_sum_idx = idx"
                            " FROM main.raftsql_applied WHERE id = 0",
                            -1, &s, NULL);
    if (rc != SQLITE_OK) {
        /* A file of a release before the schema sum. */
        rc = sqlite3_prepare_v2(
            v->db,
            "SELECT idx, sums, NULL, 0 FROM main.raftsql_applied WHERE id = 0",
            -1, &s, NULL);
    }
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        v->out->index = (uint64_t)sqlite3_column_int64(s, 0);
        /* A schema sum that a release before it left behind (its index
         * behind the applied one) is not compared. */
        if (sqlite3_column_type(s, 2) == SQLITE_INTEGER &&
            sqlite3_column_int(s, 3) == 1) {
            v->out->schema_available = 1;
            v->out->schema_stored = (uint64_t)sqlite3_column_int64(s, 2);
        }
        if (sqlite3_column_type(s, 1) == SQLITE_BLOB) {
            v->out->available = 1;
            rc = checksum_sums_each(sqlite3_column_blob(s, 1),
                                    (size_t)sqlite3_column_bytes(s, 1),
                                    on_stored, v);
            if (rc == -1) {
                rc = SQLITE_CORRUPT;
            }
        }
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
}

/* fail fills @errmsg from @db's error @rc of @what, returns a code. */
static int fail(sqlite3 *db, int rc, const char *what, char *errmsg,
                size_t errmsg_len)
{
    sql_errmsgf(errmsg, errmsg_len, "verify: %s: %s (%s)", what,
                db != NULL ? sqlite3_errmsg(db) : "out of memory",
                sqlite3_errstr(rc));
    return fsm_from_sqlite(rc);
}

/* on_progress is the scan's progress handler: the caller's interrupted
 * hook says whether to stop. */
static int on_progress(void *data)
{
    const struct verify *v = data;
    return v->hooks->interrupted(v->hooks->data);
}

/* The thread opens a scan's connection (sql_verify_opening). */
static _Thread_local bool opening;

bool sql_verify_opening(void)
{
    return opening;
}

int sql_checksum_verify(const char *path, struct sql_verify *out, char *errmsg,
                        size_t errmsg_len)
{
    return sql_checksum_verify_hooked(path, NULL, out, errmsg, errmsg_len);
}

int sql_checksum_verify_hooked(const char *path,
                               const struct sql_verify_hooks *hooks,
                               struct sql_verify *out, char *errmsg,
                               size_t errmsg_len)
{
    struct sql_verify r;
    struct verify v;
    int rc;

    memset(&r, 0, sizeof r);
    memset(&v, 0, sizeof v);
    v.out = &r;
    v.hooks = hooks;
    if (access(path, F_OK) != 0) {
        sql_errmsgf(errmsg, errmsg_len, "verify: no database file %s", path);
        return SQL_ERR_NOTFOUND;
    }
    opening = true;
    rc = sqlite3_open_v2(path, &v.db, SQLITE_OPEN_READONLY, NULL);
    opening = false;
    if (rc == SQLITE_OK) {
        /* An auto-extension other than raftsql's (sql_verify_opening)
         * may have installed an authorizer, which could refuse reads of
         * a diverged replica: the very one to look at. The connection is
         * read-only and ours. */
        sqlite3_set_authorizer(v.db, NULL, NULL);
        sqlite3_busy_timeout(v.db, 5000);
        if (hooks != NULL && hooks->interrupted != NULL) {
            sqlite3_progress_handler(v.db, SQL__VERIFY_PROGRESS_STEPS,
                                     on_progress, &v);
        }
        rc = sqlite3_exec(v.db, "BEGIN", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        rc = fail(v.db, rc, "open", errmsg, errmsg_len);
        goto out;
    }
    rc = read_stored(&v);
    if (rc != SQLITE_OK) {
        rc = fail(v.db, rc, "read raftsql_applied", errmsg, errmsg_len);
        goto out;
    }
    if (hooks != NULL && hooks->snapshot != NULL) {
        hooks->snapshot(hooks->data, r.index);
    }
    if (r.available) {
        rc = checksum_list(v.db, on_table, &v);
        /* Stored sums of tables that are gone. */
        for (unsigned i = 0; rc == SQLITE_OK && i < v.n_stored; i++) {
            if (!v.stored[i].seen && v.stored[i].sum != 0) {
                rc = note_differ(&v, v.stored[i].name, v.stored[i].sum, 0);
            }
        }
        if (rc != SQLITE_OK) {
            rc = fail(v.db, rc, "scan", errmsg, errmsg_len);
            goto out;
        }
        if (r.schema_available) {
            rc = schema_sum_compute(v.db, &r.schema_scanned);
            if (rc != SQLITE_OK) {
                rc = fail(v.db, rc, "schema sum", errmsg, errmsg_len);
                goto out;
            }
        }
    } else {
        sql_verify_clear(&r);
    }
    *out = r;
    memset(&r, 0, sizeof r);
    rc = 0;
out:
    sql_verify_clear(&r);
    for (unsigned i = 0; i < v.n_stored; i++) {
        free(v.stored[i].name);
    }
    free(v.stored);
    if (v.db != NULL) {
        sqlite3_exec(v.db, "COMMIT", NULL, NULL, NULL);
    }
    sqlite3_close(v.db);
    free(v.buf.p);
    return rc;
}

void sql_verify_clear(struct sql_verify *v)
{
    for (unsigned i = 0; i < v->n_differ; i++) {
        free(v->differ[i].name);
    }
    free(v->differ);
    memset(v, 0, sizeof *v);
}
