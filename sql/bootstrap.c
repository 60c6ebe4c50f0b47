/* A new cluster's initial state from an existing SQLite file
 * (sql_fsm_bootstrap_from, sql.h "Bootstrap from a file").
 *
 * Happy path: the source is opened read-only and checked (a regular
 * file, a SQLite database, not the live one); the backup API copies it,
 * in one read transaction, into a new file beside the log; a replica
 * copy is verified against the running checksum stored in it; a name
 * starting with raftsql_ that is not internal is refused (any in a plain
 * database); on that copy the raftsql_* tables are dropped and made anew (applied index,
 * term and configuration given, the cluster-wide settings kept), the
 * journal mode set to DELETE and the page size to the live database's
 * (VACUUM); the copy, fsynced, is then installed
 * like any snapshot (sql_fsm_snapshot_install: one write transaction).
 * Failure modes: any failure before the install leaves the live database
 * as it was; the copy is removed in every case; the source is never
 * written (read-only connection). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3ext.h>

#include "fsm_internal.h"
#include "sql.h"

SQLITE_EXTENSION_INIT3

/* code_of maps SQLite's @rc met while reading the source to sql's. */
static int code_of(int rc)
{
    switch (rc & 0xff) {
        case SQLITE_NOTADB:
        case SQLITE_CORRUPT:
            return SQL_ERR_CORRUPT;
        case SQLITE_NOMEM:
            return SQL_ERR_NOMEM;
        case SQLITE_FULL:
            return SQL_ERR_NOSPACE;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
            return SQL_ERR_BUSY;
        default:
            return SQL_ERR_IOERR;
    }
}

/* Names of the internal objects: raftsql_* (any case) and their
 * automatic indexes. */
#define BOOT__INTERNAL                                                         \
    "(lower(substr(name, 1, 8)) = 'raftsql_' OR "                              \
    "lower(substr(name, 1, 25)) = 'sqlite_autoindex_raftsql_')"

/* check_live refuses a live database (@f) that is no fresh replica. */
static int check_live(struct sql_fsm *f, char *errmsg, size_t errmsg_len)
{
    int64_t n = 0;
    int rc;
    if (f->applied != 0) {
        sql_errmsgf(errmsg, errmsg_len,
                    "the database %s is a replica applied up to index %" PRIu64
                    ": bootstrap_from= fills a new, empty database only",
                    f->path, f->applied);
        return SQL_ERR_INVALID;
    }
    f->internal = 1;
    rc = snapshot_query_int(
        f->db,
        "SELECT count(*) FROM main.sqlite_schema WHERE NOT " BOOT__INTERNAL,
        &n);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "read the schema of %s: %s", f->path,
                    sqlite3_errmsg(f->db));
        return code_of(rc);
    }
    if (n > 0) {
        sql_errmsgf(errmsg, errmsg_len,
                    "the database %s holds %" PRId64
                    " schema objects already: bootstrap_from= fills a new, "
                    "empty database only",
                    f->path, n);
        return SQL_ERR_INVALID;
    }
    return 0;
}

/* check_source checks that @src is a regular readable file, not the live
 * database @live_path. */
static int check_source(const char *src, const char *live_path, char *errmsg,
                        size_t errmsg_len)
{
    struct stat a, b;
    int fd;
    if (stat(src, &a) != 0) {
        int err = errno;
        sql_errmsgf(errmsg, errmsg_len, "%s: %s", src, strerror(err));
        return err == ENOENT ? SQL_ERR_NOTFOUND : SQL_ERR_IOERR;
    }
    if (!S_ISREG(a.st_mode)) {
        sql_errmsgf(errmsg, errmsg_len, "%s is not a regular file", src);
        return SQL_ERR_INVALID;
    }
    if (stat(live_path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        sql_errmsgf(errmsg, errmsg_len,
                    "%s is this node's own database file: give another "
                    "file (e.g. a copy)",
                    src);
        return SQL_ERR_INVALID;
    }
    fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sql_errmsgf(errmsg, errmsg_len, "%s is unreadable: %s", src,
                    strerror(errno));
        return SQL_ERR_IOERR;
    }
    close(fd);
    return 0;
}

/* copy_source copies @src (opened read-only) into the new file @tmp with
 * the backup API; *@out is the connection to @tmp. */
static int copy_source(const char *src, const char *tmp, sqlite3 **out,
                       char *errmsg, size_t errmsg_len)
{
    sqlite3 *from = NULL, *to = NULL;
    sqlite3_backup *b;
    int64_t n = 0;
    int rc;

    rc = sqlite3_open_v2(src, &from, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(from, 5000);
        /* Reading the schema is where a file that is not a database
         * fails ("file is not a database"). */
        rc = snapshot_query_int(from, "SELECT count(*) FROM main.sqlite_schema",
                                &n);
    }
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "%s: %s", src,
                    from != NULL ? sqlite3_errmsg(from) : sqlite3_errstr(rc));
        rc = code_of(rc);
        goto out;
    }
    rc = sqlite3_open_v2(tmp, &to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                         NULL);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "create %s: %s", tmp,
                    to != NULL ? sqlite3_errmsg(to) : sqlite3_errstr(rc));
        rc = code_of(rc);
        goto out;
    }
    /* An auto-extension (raftsql's write guard, which refuses writes to
     * a replica's file that no node serves: a replica's copy is one) may
     * have installed one, and a commit hook. The copy is ours until it is
     * renamed. */
    sqlite3_set_authorizer(to, NULL, NULL);
    sqlite3_commit_hook(to, NULL, NULL);
    b = sqlite3_backup_init(to, "main", from, "main");
    if (b == NULL) {
        sql_errmsgf(errmsg, errmsg_len, "copy %s: %s", src, sqlite3_errmsg(to));
        rc = code_of(sqlite3_errcode(to));
        goto out;
    }
    rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
        sql_errmsgf(errmsg, errmsg_len, "copy %s: %s", src, sqlite3_errstr(rc));
        rc = code_of(rc);
        goto out;
    }
    *out = to;
    to = NULL;
    rc = 0;
out:
    sqlite3_close(to);
    sqlite3_close(from);
    return rc;
}

/* check_replica_copy refuses the copy @tmp of @src when it is a replica
 * copy whose content differs from the running checksum stored in it (a
 * foreign write copied with it: raft_verify would say equal:false), naming
 * the tables that differ. A plain database, or a copy without stored sums
 * (checksum=off), has nothing to check. */
static int check_replica_copy(const char *src, const char *tmp, char *errmsg,
                              size_t errmsg_len)
{
    struct sql_verify v;
    char names[300] = "";
    char why[300];
    size_t used = 0;

    memset(&v, 0, sizeof v);
    if (sql_checksum_verify(tmp, &v, why, sizeof why) != 0) {
        /* No raftsql_applied (a plain database): nothing to check; any
         * other failure shows again in the copy's reshape. */
        return 0;
    }
    if (!v.available || v.n_differ == 0) {
        sql_verify_clear(&v);
        return 0;
    }
    for (unsigned i = 0; i < v.n_differ && used + 8 < sizeof names; i++) {
        int k = snprintf(names + used, sizeof names - used, "%s%s",
                         i > 0 ? ", " : "", v.differ[i].name);
        used = k < 0 ? sizeof names : used + (size_t)k;
    }
    sql_errmsgf(errmsg, errmsg_len,
                "%s is a replica copy (applied index %" PRIu64
                ") whose content differs from the running checksum stored "
                "in it, in %s: a write that bypassed raftsql is in it "
                "(raft_verify() on the file says equal:false); found the "
                "cluster on a healthy replica's raft_backup(), or, to take "
                "this content as it is, drop its raftsql_applied table "
                "first (in a process that did not load raftsql, which "
                "refuses writes to a replica's file that no node serves)",
                src, v.index, names);
    sql_verify_clear(&v);
    return SQL_ERR_INVALID;
}

/* check_reserved refuses a copy @db of @src holding a schema object whose
 * name starts with raftsql_ (any case) that is not internal: any such
 * name in a plain database (no raftsql_applied), a name none of the
 * internal ones in a replica copy. The internal objects are dropped and
 * made anew; a user's object of a reserved name would go with them. */
static int check_reserved(sqlite3 *db, const char *src, char *errmsg,
                          size_t errmsg_len)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(
        db,
        "SELECT type, name FROM main.sqlite_schema"
        " WHERE lower(substr(name, 1, 8)) = 'raftsql_' AND"
        " (name NOT IN " SCHEMA_INTERNAL_NAMES
        " OR NOT EXISTS"
        "  (SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND"
        "   name = 'raftsql_applied'))"
        " ORDER BY type = 'table' DESC, name LIMIT 1",
        -1, &s, NULL);

    if (rc == SQLITE_OK) {
        rc = sqlite3_step(s);
    }
    if (rc == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(s, 0);
        sql_errmsgf(errmsg, errmsg_len,
                    "%s has a%s %s %s: names starting with raftsql_ are "
                    "reserved; rename it first",
                    src, strcmp(type, "index") == 0 ? "n" : "", type,
                    (const char *)sqlite3_column_text(s, 1));
        sqlite3_finalize(s);
        return SQL_ERR_INVALID;
    }
    if (rc != SQLITE_DONE) {
        sql_errmsgf(errmsg, errmsg_len, "read the schema of the copy of %s: %s",
                    src, sqlite3_errmsg(db));
        sqlite3_finalize(s);
        return code_of(rc);
    }
    sqlite3_finalize(s);
    return 0;
}

/* The cluster-wide settings (PRAGMA foreign_keys=ON and the like through
 * raft_exec, pragma.c) a replica copy holds: replicated state, carried
 * into the new cluster. The rest of its raftsql_* tables is not: the
 * applied index, term, configuration and cluster id are the new
 * cluster's, and the request ids (raftsql_requests,
 * raftsql_client_requests) belong to the old cluster's log and clients. */
struct settings {
    char names[8][64]; /* setting names */
    int64_t values[8]; /* their values */
    unsigned n;        /* used */
};

/* read_settings reads the copy @db's raftsql_settings into @out (none
 * without the table: a plain database). */
static int read_settings(sqlite3 *db, struct settings *out, char *errmsg,
                         size_t errmsg_len)
{
    sqlite3_stmt *s = NULL;
    int64_t n = 0;
    int rc;

    out->n = 0;
    rc = snapshot_query_int(db,
                            "SELECT count(*) FROM main.sqlite_schema WHERE "
                            "type = 'table' AND name = 'raftsql_settings'",
                            &n);
    if (rc == SQLITE_OK && n > 0) {
        rc = sqlite3_prepare_v2(db,
                                "SELECT name, value FROM main.raftsql_settings"
                                " ORDER BY name",
                                -1, &s, NULL);
    }
    while (rc == SQLITE_OK && s != NULL &&
           (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        rc = SQLITE_OK;
        if (name == NULL || strlen(name) >= sizeof out->names[0] ||
            out->n == sizeof out->values / sizeof out->values[0]) {
            continue; /* no setting raftsql knows (pragma.c) */
        }
        snprintf(out->names[out->n], sizeof out->names[0], "%s", name);
        out->values[out->n++] = sqlite3_column_int64(s, 1);
    }
    if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "read the copy's raftsql_settings: %s",
                    sqlite3_errmsg(db));
        return code_of(rc);
    }
    return 0;
}

/* write_settings stores @in into the copy @db's fresh raftsql_settings. */
static int write_settings(sqlite3 *db, const struct settings *in, char *errmsg,
                          size_t errmsg_len)
{
    sqlite3_stmt *s = NULL;
    int rc = SQLITE_OK;

    if (in->n == 0) {
        return 0;
    }
    rc = sqlite3_prepare_v2(db,
                            "INSERT OR REPLACE INTO main.raftsql_settings("
                            "name, value) VALUES (?1, ?2)",
                            -1, &s, NULL);
    for (unsigned i = 0; rc == SQLITE_OK && i < in->n; i++) {
        sqlite3_bind_text(s, 1, in->names[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, in->values[i]);
        rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "write the settings: %s",
                    sqlite3_errmsg(db));
        return code_of(rc);
    }
    return 0;
}

/* exec_on runs @sql on @db, naming @what in @errmsg on failure. */
static int exec_on(sqlite3 *db, const char *sql, const char *what, char *errmsg,
                   size_t errmsg_len)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "%s: %s", what,
                    err != NULL ? err : sqlite3_errstr(rc));
        sqlite3_free(err);
        if (!sqlite3_get_autocommit(db)) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        }
        return code_of(rc);
    }
    return 0;
}

/* drop_internal drops the copy's raftsql_* tables (their indexes go with
 * them) and views and triggers of such names. */
static int drop_internal(sqlite3 *db, char *errmsg, size_t errmsg_len)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT type, name FROM main.sqlite_schema "
                                "WHERE type IN ('table', 'view', 'trigger') "
                                "AND " BOOT__INTERNAL,
                                -1, &s, NULL);
    char sql[300];
    /* Dropping while reading the schema is not allowed: one at a time. */
    while (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
        snprintf(sql, sizeof sql, "DROP %s main.\"%s\"",
                 (const char *)sqlite3_column_text(s, 0),
                 (const char *)sqlite3_column_text(s, 1));
        sqlite3_finalize(s);
        rc = exec_on(db, sql, "drop the copy's raftsql tables", errmsg,
                     errmsg_len);
        if (rc != 0) {
            return rc;
        }
        rc = sqlite3_prepare_v2(db,
                                "SELECT type, name FROM main.sqlite_schema "
                                "WHERE type IN ('table', 'view', 'trigger') "
                                "AND " BOOT__INTERNAL,
                                -1, &s, NULL);
    }
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "read the copy's schema: %s",
                    sqlite3_errmsg(db));
        return code_of(rc);
    }
    sqlite3_finalize(s);
    return 0;
}

/* reshape gives the copy @db fresh raftsql_* tables at @index, @term and
 * @config, the live page size @page_size and the rollback journal. */
static int reshape(sqlite3 *db, int64_t page_size, uint64_t index,
                   uint64_t term, const void *config, size_t config_len,
                   unsigned *out_tables, char *errmsg, size_t errmsg_len)
{
    sqlite3_stmt *s = NULL;
    struct settings settings;
    int64_t n = 0, page = 0;
    char sql[200];
    int rc;

    rc = exec_on(db, "PRAGMA main.journal_mode=DELETE", "journal mode", errmsg,
                 errmsg_len);
    if (rc == 0) {
        rc = read_settings(db, &settings, errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = drop_internal(db, errmsg, errmsg_len);
    }
    if (rc == 0 &&
        snapshot_query_int(db, "PRAGMA main.page_size", &page) == SQLITE_OK &&
        page != page_size) {
        snprintf(sql, sizeof sql, "PRAGMA main.page_size=%" PRId64 "; VACUUM",
                 page_size);
        rc = exec_on(db, sql, "set the page size", errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = exec_on(db, schema_tables_sql(), "create the raftsql tables",
                     errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = write_settings(db, &settings, errmsg, errmsg_len);
    }
    if (rc != 0) {
        return rc;
    }
    rc = sqlite3_prepare_v2(db,
                            "UPDATE main.raftsql_applied SET idx = ?1, "
                            "term = ?2, sums = NULL WHERE id = 0",
                            -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, (sqlite3_int64)index);
        sqlite3_bind_int64(s, 2, (sqlite3_int64)term);
        rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
    }
    sqlite3_finalize(s);
    s = NULL;
    if (rc == SQLITE_OK) {
        rc = sqlite3_prepare_v2(db,
                                "INSERT INTO main.raftsql_config(id, idx, "
                                "term, data) VALUES (0, 1, 1, ?1)",
                                -1, &s, NULL);
    }
    if (rc == SQLITE_OK) {
        sqlite3_bind_blob(s, 1, config, (int)config_len, SQLITE_STATIC);
        rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_OK) {
        rc = snapshot_query_int(db,
                                "SELECT count(*) FROM main.sqlite_schema WHERE "
                                "type = 'table' AND NOT " BOOT__INTERNAL
                                " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                                &n);
    }
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "write the raftsql tables: %s",
                    sqlite3_errmsg(db));
        return code_of(rc);
    }
    *out_tables = (unsigned)n;
    return 0;
}

int sql_fsm_bootstrap_from(struct sql_fsm *f, const char *src,
                           const char *tmp_path, uint64_t index, uint64_t term,
                           const void *config, size_t config_len,
                           unsigned *out_tables, char *errmsg,
                           size_t errmsg_len)
{
    char why[400];
    sqlite3 *copy = NULL;
    int64_t page_size = 0;
    uint64_t got_index = 0, got_term = 0;
    unsigned n_tables = 0;
    int rc, err;

    rc = check_live(f, errmsg, errmsg_len);
    if (rc == 0) {
        rc = check_source(src, f->path, errmsg, errmsg_len);
    }
    if (rc != 0) {
        return rc;
    }
    f->internal = 1;
    rc = snapshot_query_int(f->db, "PRAGMA main.page_size", &page_size);
    f->internal = 0;
    if (rc != SQLITE_OK) {
        sql_errmsgf(errmsg, errmsg_len, "page size of %s: %s", f->path,
                    sqlite3_errmsg(f->db));
        return code_of(rc);
    }
    unlink(tmp_path); /* a leftover of a start that failed */
    rc = copy_source(src, tmp_path, &copy, errmsg, errmsg_len);
    /* A read-only connection cannot read a WAL file without its -shm:
     * the copy leaves WAL mode before it is verified. */
    if (rc == 0) {
        rc = exec_on(copy, "PRAGMA main.journal_mode=DELETE", "journal mode",
                     why, sizeof why);
        if (rc != 0) {
            sql_errmsgf(errmsg, errmsg_len, "the copy of %s: %s", src, why);
        }
    }
    if (rc == 0) {
        rc = check_reserved(copy, src, errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = check_replica_copy(src, tmp_path, errmsg, errmsg_len);
    }
    if (rc == 0) {
        rc = reshape(copy, page_size, index, term, config, config_len,
                     &n_tables, why, sizeof why);
        if (rc != 0) {
            sql_errmsgf(errmsg, errmsg_len, "the copy of %s: %s", src, why);
        }
    }
    if (copy != NULL && sqlite3_close(copy) != SQLITE_OK && rc == 0) {
        sql_errmsgf(errmsg, errmsg_len, "close the copy of %s", src);
        rc = SQL_ERR_IOERR;
    }
    if (rc == 0 && (err = snapshot_sync_file(tmp_path)) != 0) {
        sql_errmsgf(errmsg, errmsg_len, "fsync %s: %s", tmp_path,
                    strerror(err));
        rc = err == ENOSPC ? SQL_ERR_NOSPACE : SQL_ERR_IOERR;
    }
    if (rc == 0) {
        rc = sql_fsm_snapshot_install(f, tmp_path, &got_index, &got_term);
        if (rc != 0) {
            sql_errmsgf(errmsg, errmsg_len, "%s: %s", src, sql_fsm_errmsg(f));
        }
    }
    unlink(tmp_path);
    if (rc == 0) {
        *out_tables = n_tables;
    }
    return rc;
}
