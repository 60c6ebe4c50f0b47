/* sql_checksum_verify (sql.h): the replica checksum recomputed from the
 * database file by a full scan, table by table, beside the running sums
 * stored with the applied index, on a read-only connection of its own in
 * one read transaction. */

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sqlite3.h>

#include "checksum.h"
#include "fsm_internal.h"

/* The scan in progress. */
struct verify {
    sqlite3 *db;              /* the read-only connection */
    struct checksum_buf buf;  /* row encodings */
    struct sql_verify *out;   /* the result being built */
    sqlite3_stmt *stored;     /* reads one stored sum */
    unsigned cap;             /* allocated at out->differ */
    int rc;                   /* the first SQLite error */
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

/* on_table scans one listed table and compares it with its stored sum. */
static int on_table(void *data, const struct checksum_listed *t)
{
    struct verify *v = data;
    uint64_t scanned = 0, stored = 0;
    int rc;

    rc = checksum_scan(v->db, &v->buf, t->name, t->rowid, &scanned);
    if (rc != SQLITE_OK) {
        return rc;
    }
    sqlite3_bind_text(v->stored, 1, t->name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(v->stored);
    if (rc == SQLITE_ROW) {
        stored = (uint64_t)sqlite3_column_int64(v->stored, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK; /* an empty table may have no stored row */
    }
    sqlite3_reset(v->stored);
    if (rc != SQLITE_OK) {
        return rc;
    }
    v->out->scanned += scanned;
    if (scanned != stored) {
        return note_differ(v, t->name, stored, scanned);
    }
    return SQLITE_OK;
}

/* read_stored sums the stored rows into out->stored and notes those of
 * tables that are no longer there; says in out->available whether the
 * marker is there. */
static int read_stored(struct verify *v)
{
    sqlite3_stmt *s = NULL;
    int rc;

    rc = sqlite3_prepare_v2(
        v->db,
        "SELECT c.name, c.sum, c.name = 'raftsql_checksum',"
        " (SELECT count(*) FROM pragma_table_list l WHERE l.schema = 'main'"
        "   AND l.name = c.name COLLATE NOCASE)"
        " FROM main.raftsql_checksum c",
        -1, &s, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        uint64_t sum = (uint64_t)sqlite3_column_int64(s, 1);
        rc = SQLITE_OK;
        if (sqlite3_column_int(s, 2)) {
            v->out->available = sum == 1;
            continue;
        }
        v->out->stored += sum;
        if (sqlite3_column_int(s, 3) == 0 && sum != 0) {
            rc = note_differ(v, name != NULL ? name : "", sum, 0);
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

int sql_checksum_verify(const char *path, struct sql_verify *out, char *errmsg,
                        size_t errmsg_len)
{
    struct sql_verify r;
    struct verify v;
    int rc;

    memset(&r, 0, sizeof r);
    memset(&v, 0, sizeof v);
    v.out = &r;
    if (access(path, F_OK) != 0) {
        sql_errmsgf(errmsg, errmsg_len, "verify: no database file %s", path);
        return SQL_ERR_NOTFOUND;
    }
    rc = sqlite3_open_v2(path, &v.db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(v.db, 5000);
        rc = sqlite3_exec(v.db, "BEGIN", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        rc = fail(v.db, rc, "open", errmsg, errmsg_len);
        goto out;
    }
    rc = sqlite3_prepare_v2(v.db, "SELECT idx FROM main.raftsql_applied", -1,
                            &v.stored, NULL);
    if (rc == SQLITE_OK && sqlite3_step(v.stored) == SQLITE_ROW) {
        r.index = (uint64_t)sqlite3_column_int64(v.stored, 0);
    }
    sqlite3_finalize(v.stored);
    v.stored = NULL;
    if (rc == SQLITE_OK) {
        rc = read_stored(&v);
    }
    if (rc != SQLITE_OK) {
        rc = fail(v.db, rc, "read raftsql_checksum", errmsg, errmsg_len);
        goto out;
    }
    if (r.available) {
        rc = sqlite3_prepare_v2(
            v.db,
            "SELECT sum FROM main.raftsql_checksum WHERE name = ?1"
            " COLLATE NOCASE",
            -1, &v.stored, NULL);
        if (rc == SQLITE_OK) {
            rc = checksum_list(v.db, on_table, &v);
        }
        if (rc != SQLITE_OK) {
            rc = fail(v.db, rc, "scan", errmsg, errmsg_len);
            goto out;
        }
    } else {
        sql_verify_clear(&r);
    }
    *out = r;
    memset(&r, 0, sizeof r);
    rc = 0;
out:
    sql_verify_clear(&r);
    sqlite3_finalize(v.stored);
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
