/* Commits the node did not make (fsm_internal.h, foreign.c): PRAGMA
 * data_version on the apply connection changes when another connection,
 * of any process, committed to the database file, or checkpointed it
 * with wal_checkpoint(TRUNCATE); with the checksum on, a full scan tells
 * the two apart (foreign_confirm).
 *
 * A plain writer's commit moves data_version too, before the applier
 * records its entry: the WAL-index header readings of the writer and of
 * the applier (sql.h, "Who committed around a plain write") tell whether
 * it was the only commit since the applier's last look (foreign_landed);
 * when they cannot, the entry is counted and the file scanned
 * (foreign_landed_confirm), so that no other commit is taken for the
 * writer's. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"

SQLITE_EXTENSION_INIT3

/* read_pragma reads the integer of PRAGMA @sql on the apply connection
 * into @out (a read transaction of its own, or the running one). */
static int read_pragma(struct sql_fsm *f, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc;

    f->internal = 1;
    rc = sqlite3_prepare_v2(f->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    f->internal = 0;
    return rc == SQLITE_OK ? 0 : fsm_fail(f, rc, sql);
}

/* read_version reads PRAGMA data_version on the apply connection
 * into @out (a read transaction of its own, or the running one), by its
 * prepared statement. */
static int read_version(struct sql_fsm *f, int64_t *out)
{
    sqlite3_stmt *s = f->stmts[STMT_DATA_VERSION];
    int rc;

    f->internal = 1;
    rc = sqlite3_step(s);
    f->internal = 0;
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    }
    sqlite3_reset(s);
    return rc == SQLITE_OK ? 0 : fsm_fail(f, rc, "PRAGMA main.data_version");
}

/* Reads of a WAL-index header before sql_wal_header gives up on copies
 * that disagree (a writer rewriting them: two stores of 48 bytes). */
#define SQL__WAL_HDR_TRIES 1000

int sql_wal_header(struct sqlite3_file *file,
                   unsigned char out[SQL_WAL_HDR_LEN])
{
    const struct sqlite3_io_methods *m;
    volatile void *map = NULL;

    if (file == NULL || (m = file->pMethods) == NULL || m->iVersion < 2 ||
        m->xShmMap == NULL || m->xShmBarrier == NULL ||
        m->xShmMap(file, 0, 32768, 0, &map) != SQLITE_OK || map == NULL) {
        return -1;
    }
    for (int i = 0; i < SQL__WAL_HDR_TRIES; i++) {
        const volatile unsigned char *p = map;
        unsigned char a[SQL_WAL_HDR_LEN], b[SQL_WAL_HDR_LEN];

        /* As SQLite's walIndexTryHdr: the first copy, a barrier, the
         * second (a writer stores the second first). */
        for (int k = 0; k < SQL_WAL_HDR_LEN; k++) {
            a[k] = p[k];
        }
        m->xShmBarrier(file);
        for (int k = 0; k < SQL_WAL_HDR_LEN; k++) {
            b[k] = p[SQL_WAL_HDR_LEN + k];
        }
        /* isInit, byte 12: a header written at least once. */
        if (memcmp(a, b, sizeof a) == 0 && a[12] != 0) {
            memcpy(out, a, sizeof a);
            return 0;
        }
    }
    return -1;
}

/* read_header reads the WAL-index header of the apply connection's file
 * into @out (sql_wal_header). Returns 0 or -1. */
static int read_header(struct sql_fsm *f, unsigned char out[SQL_WAL_HDR_LEN])
{
    sqlite3_file *file = NULL;

    if (sqlite3_file_control(f->db, "main", SQLITE_FCNTL_FILE_POINTER, &file) !=
        SQLITE_OK) {
        return -1;
    }
    return sql_wal_header(file, out);
}

/* take_data_version takes data_version as the baseline, and the WAL-index
 * header read just before it as f->wal_base: a reading at or before the
 * state of that data_version, so any later commit moves the header away
 * from it. */
static int take_data_version(struct sql_fsm *f)
{
    unsigned char h[SQL_WAL_HDR_LEN];
    bool ok = read_header(f, h) == 0;
    int rc = read_version(f, &f->data_version);

    f->wal_base_ok = rc == 0 && ok;
    if (f->wal_base_ok) {
        memcpy(f->wal_base, h, sizeof h);
    }
    return rc;
}

/* read_baseline reads data_version (and the header) and schema_version
 * into @f. */
static int read_baseline(struct sql_fsm *f)
{
    int rc = take_data_version(f);
    if (rc == 0) {
        rc = read_pragma(f, "PRAGMA main.schema_version", &f->schema_version);
    }
    return rc;
}

void foreign_mark(struct sql_fsm *f)
{
    unsigned char h[SQL_WAL_HDR_LEN];
    int64_t v = 0;

    f->wal_base_ok = false;
    if (f->foreign || read_header(f, h) != 0) {
        return;
    }
    if (read_version(f, &v) == 0 && v == f->data_version) {
        memcpy(f->wal_base, h, sizeof h);
        f->wal_base_ok = true;
    }
}

int foreign_reset(struct sql_fsm *f)
{
    int rc = read_baseline(f);
    if (rc == 0) {
        f->foreign = 0;
        f->foreign_why[0] = '\0';
        f->landed_confirm = 0;
    }
    return rc;
}

int foreign_note_schema(struct sql_fsm *f)
{
    if (f->ck == NULL || !f->ck->on) {
        return 0;
    }
    return read_pragma(f, "PRAGMA main.schema_version", &f->schema_version);
}

/* The scan of foreign_confirm. */
struct confirm {
    sqlite3 *db;             /* the apply connection */
    struct sql_checksum *ck; /* the running sums */
    struct checksum_buf buf; /* row encodings */
    bool *seen;              /* per ck->tables: listed */
    char differ[200];        /* the tables that differ, comma-separated */
    unsigned n_differ;       /* how many */
};

/* note_differ adds table @name to c->differ. */
static void note_differ(struct confirm *c, const char *name)
{
    size_t len = strlen(c->differ);

    if (len + strlen(name) + 8 < sizeof c->differ) {
        snprintf(c->differ + len, sizeof c->differ - len, "%s%s",
                 c->n_differ > 0 ? ", " : "", name);
    } else if (strstr(c->differ, "...") == NULL) {
        snprintf(c->differ + len, sizeof c->differ - len, ", ...");
    }
    c->n_differ++;
}

/* on_table scans one listed table and compares it with its running sum
 * (none: 0, an empty table). */
static int on_table(void *data, const struct checksum_listed *t)
{
    struct confirm *c = data;
    uint64_t scanned = 0, running = 0;
    int rc;

    rc = checksum_scan(c->db, &c->buf, t->name, t->rowid, &scanned);
    if (rc != SQLITE_OK) {
        return rc;
    }
    for (unsigned i = 0; i < c->ck->n_tables; i++) {
        const struct checksum_table *r = &c->ck->tables[i];
        if (!c->seen[i] && strcasecmp(r->name, t->name) == 0) {
            c->seen[i] = true;
            running = r->sum + r->batch + r->req;
            break;
        }
    }
    if (scanned != running) {
        note_differ(c, t->name);
    }
    return SQLITE_OK;
}

int foreign_confirm(struct sql_fsm *f, char *differ, size_t differ_len)
{
    struct confirm c;
    int rc;

    memset(&c, 0, sizeof c);
    c.db = f->db;
    c.ck = f->ck;
    c.seen = calloc(c.ck->n_tables + 1, sizeof *c.seen);
    if (c.seen == NULL) {
        return fsm_fail(f, SQLITE_NOMEM, "verify");
    }
    f->internal = 1;
    rc = checksum_list(f->db, on_table, &c);
    f->internal = 0;
    /* Running sums of tables that are gone. */
    for (unsigned i = 0; rc == SQLITE_OK && i < c.ck->n_tables; i++) {
        const struct checksum_table *r = &c.ck->tables[i];
        if (!c.seen[i] && r->sum + r->batch + r->req != 0) {
            note_differ(&c, r->name);
        }
    }
    free(c.seen);
    free(c.buf.p);
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "verify: scan");
    }
    snprintf(differ, differ_len, "%s", c.differ);
    return c.n_differ > 0 ? SQL_ERR_DIVERGED : 0;
}

/* confirm_moved is foreign_check's second look once data_version moved to
 * @v: the schema cookie and a full scan against the running sums, in the
 * running transaction. Returns 0 when nothing changed (a checkpoint:
 * @v becomes the baseline and f->foreign_note says so), 1 when the file
 * changed, or an error code. */
static int confirm_moved(struct sql_fsm *f, int64_t v)
{
    char differ[200];
    int64_t schema = 0;
    int rc;

    rc = read_pragma(f, "PRAGMA main.schema_version", &schema);
    if (rc != 0) {
        return rc;
    }
    if (schema != f->schema_version) {
        sql_errmsgf(f->foreign_why, sizeof f->foreign_why,
                    "a write the node did not make was committed to %s "
                    "(PRAGMA data_version changed, and the schema: "
                    "schema_version %" PRId64 ", was %" PRId64
                    ") before index %" PRIu64,
                    f->path, schema, f->schema_version, f->applied + 1);
        return 1;
    }
    rc = foreign_confirm(f, differ, sizeof differ);
    if (rc == SQL_ERR_DIVERGED) {
        sql_errmsgf(f->foreign_why, sizeof f->foreign_why,
                    "a write the node did not make was committed to %s "
                    "(PRAGMA data_version changed, and the content of "
                    "%s differs from the running checksum) before index "
                    "%" PRIu64,
                    f->path, differ, f->applied + 1);
        return 1;
    }
    if (rc != 0) {
        return rc;
    }
    sql_errmsgf(f->foreign_note, sizeof f->foreign_note,
                "PRAGMA data_version of %s changed before index %" PRIu64
                ", but its schema and content are the node's own (a "
                "checkpoint by another connection, e.g. "
                "wal_checkpoint(TRUNCATE)): no foreign write",
                f->path, f->applied + 1);
    f->data_version = v;
    return 0;
}

int foreign_check(struct sql_fsm *f)
{
    unsigned char h[SQL_WAL_HDR_LEN];
    bool h_ok;
    int64_t v = 0;
    int rc;

    if (!f->foreign) {
        /* The header first: a reading at or before the baseline's
         * state when data_version is found to be (or becomes) it. */
        h_ok = read_header(f, h) == 0;
        rc = read_version(f, &v);
        if (rc != 0) {
            return rc;
        }
        if (v == f->data_version) {
            if (h_ok) {
                memcpy(f->wal_base, h, sizeof h);
                f->wal_base_ok = true;
            }
            return 0;
        }
        if (f->ck == NULL || !f->ck->on) {
            /* No running sums to tell a checkpoint from a commit. */
            sql_errmsgf(f->foreign_why, sizeof f->foreign_why,
                        "a write the node did not make was committed to %s "
                        "(PRAGMA data_version changed) before index "
                        "%" PRIu64,
                        f->path, f->applied + 1);
        } else {
            bool own = sqlite3_get_autocommit(f->db);
            if (own) {
                /* One read transaction: the data_version taken as the
                 * baseline is the one of the content scanned. */
                f->internal = 1;
                rc = sqlite3_exec(f->db, "BEGIN", NULL, NULL, NULL);
                f->internal = 0;
                if (rc != SQLITE_OK) {
                    return fsm_fail(f, rc, "BEGIN");
                }
                rc = read_version(f, &v);
            }
            if (rc == 0) {
                rc = confirm_moved(f, v);
            }
            if (own) {
                f->internal = 1;
                sqlite3_exec(f->db, "COMMIT", NULL, NULL, NULL);
                f->internal = 0;
            }
            if (rc == 0) {
                /* The new baseline: the header read before it. */
                f->wal_base_ok = h_ok;
                if (h_ok) {
                    memcpy(f->wal_base, h, sizeof h);
                }
            }
            if (rc != 1) {
                return rc;
            }
        }
        f->foreign = 1;
    }
    sql_errmsgf(f->errmsg, sizeof f->errmsg, "%s", f->foreign_why);
    return SQL_ERR_DIVERGED;
}

int foreign_rebase(struct sql_fsm *f)
{
    return f->foreign ? 0 : read_baseline(f);
}

void sql_fsm_writer_marks(struct sql_fsm *f, uint64_t index,
                          const struct sql_wal_marks *m)
{
    f->marks_index = m != NULL ? index : 0;
    if (m != NULL) {
        f->marks = *m;
    }
}

int foreign_landed(struct sql_fsm *f, uint64_t index)
{
    unsigned char now[SQL_WAL_HDR_LEN];
    bool known;

    if (f->foreign) {
        return 0; /* foreign_check says so */
    }
    known =
        f->marks_index == index && f->wal_base_ok && read_header(f, now) == 0;
    if (f->landed_confirm != index && known &&
        memcmp(f->marks.locked, f->wal_base, SQL_WAL_HDR_LEN) == 0 &&
        memcmp(f->marks.done, now, SQL_WAL_HDR_LEN) == 0) {
        /* Alone: the moved data_version is the writer's commit. */
        return read_baseline(f);
    }
    if (f->landed_confirm != index) {
        f->landed_moved = known;
    }
    f->landed_confirm = index;
    /* The schema cookie stays the node's own, for the confirmation. */
    return take_data_version(f);
}

/* landed_foreign marks the replica diverged: a foreign commit around the
 * writer's of entry @index, @what saying how it shows. */
static int landed_foreign(struct sql_fsm *f, uint64_t index, const char *what)
{
    sql_errmsgf(f->foreign_why, sizeof f->foreign_why,
                "a write the node did not make was committed to %s "
                "around the local commit of plain write entry %" PRIu64 " (%s)",
                f->path, index, what);
    f->foreign = 1;
    sql_errmsgf(f->errmsg, sizeof f->errmsg, "%s", f->foreign_why);
    return SQL_ERR_DIVERGED;
}

int foreign_landed_confirm(struct sql_fsm *f, uint64_t index)
{
    char differ[200], what[320];
    int64_t schema = 0;
    int rc;

    if (f->landed_confirm != index || f->foreign) {
        return 0;
    }
    if (f->ck == NULL || !f->ck->on) {
        /* No running sums: readings that differ are taken for a
         * foreign commit, as a moved data_version is (foreign_check);
         * none, for the writer's alone, as before they existed. */
        return f->landed_moved
                   ? landed_foreign(f, index,
                                    "the WAL-index header moved around "
                                    "it, and no checksum tells a "
                                    "checkpoint apart")
                   : 0;
    }
    if (!f->landed_schema) {
        rc = read_pragma(f, "PRAGMA main.schema_version", &schema);
        if (rc != 0) {
            return rc;
        }
        if (schema != f->schema_version) {
            snprintf(what, sizeof what,
                     "the schema changed: schema_version %" PRId64
                     ", was %" PRId64 ", and the entry changes none",
                     schema, f->schema_version);
            return landed_foreign(f, index, what);
        }
    }
    rc = foreign_confirm(f, differ, sizeof differ);
    if (rc == SQL_ERR_DIVERGED) {
        snprintf(what, sizeof what,
                 "with the entry counted, the content of %s differs from "
                 "the running checksum",
                 differ);
        return landed_foreign(f, index, what);
    }
    if (rc == 0 && f->landed_moved) {
        sql_errmsgf(f->foreign_note, sizeof f->foreign_note,
                    "the WAL-index header of %s moved around the local "
                    "commit of plain write entry %" PRIu64
                    " (a checkpoint by another connection?), but its "
                    "schema and content are the node's own: no foreign "
                    "write",
                    f->path, index);
    }
    return rc;
}

int sql_fsm_foreign_check(struct sql_fsm *f)
{
    return foreign_check(f);
}

int sql_fsm_foreign_note(struct sql_fsm *f, char *out, size_t out_len)
{
    if (f->foreign_note[0] == '\0') {
        return 0;
    }
    snprintf(out, out_len, "%s", f->foreign_note);
    f->foreign_note[0] = '\0';
    return 1;
}

int sql_fsm_verify(struct sql_fsm *f, char *differ, size_t differ_len)
{
    int rc;

    differ[0] = '\0';
    if (f->ck == NULL || !f->ck->on) {
        return 0;
    }
    f->internal = 1;
    rc = sqlite3_exec(f->db, "BEGIN", NULL, NULL, NULL);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        return fsm_fail(f, rc, "BEGIN");
    }
    rc = foreign_confirm(f, differ, differ_len);
    f->internal = 1;
    sqlite3_exec(f->db, "COMMIT", NULL, NULL, NULL);
    f->internal = 0;
    return rc;
}

bool sql_fsm_wal_base(const struct sql_fsm *f,
                      unsigned char out[SQL_WAL_HDR_LEN])
{
    if (!f->wal_base_ok) {
        return false;
    }
    memcpy(out, f->wal_base, SQL_WAL_HDR_LEN);
    return true;
}
